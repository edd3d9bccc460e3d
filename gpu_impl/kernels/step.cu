// flashtrie: stepwise trie constraints for autoregressive decoders (gpu_impl/stepwise.py).
//
// A state is (node, off) as int64 (docs/index-format.md): off tokens into node's incoming edge, off equal to
// the edge length at the node, the root (0, 0); node -1 is DEAD and -2 FINISHED (flashtrie/stepwise.py).
// Every kernel gives exactly what the numpy backend gives (flashtrie.stepwise.TrieStepper); a state that is
// not valid for the index (node or off out of range) reads as DEAD here, where numpy refuses it.
//   ft_step_advance  one block per state: the state after one token (EOS handling included): thread 0 walks
//                    the chain of dependent loads alone (decode, then the child when its label window is small:
//                    its labels loaded together), the block searches a wide window (advance_one, block_advance)
//   ft_step_walk     one block per row: the state after a row's tokens ids[r, begin:end] from the root (DEAD
//                    where begin or end is outside [0, width])
//   ft_step_mask     `parts` blocks per state (parts + 1 for the first `extra` states), each over an equal part
//                    of the row (cut where its 16-byte vectors start): the state decoded by thread 0 (one barrier),
//                    then -inf stored over the disallowed float32 logits in 16-byte stores, or a bool mask
//                    (mask_span): by comparison where at most an edge token and EOS are allowed; at a node of at
//                    most SCAN_MAX children, over the whole span with the allowed logits read first and stored
//                    back (mask_restore); else through a bitmap of each chunk's allowed tokens in shared memory
//   ft_step_advance_mask  both in one launch: the new states and their mask (one launch per decode step);
//                    thread 0 advances and decodes the new state with no barrier between (inside an edge from
//                    the node the old state read: one load for the next token)
//   ft_step_walk_mask     walk (block-wide per row), then the mask of the walked states, in one launch
//   ft_step_count    one thread per state: number of allowed trie tokens, and whether a keyword ends
//   ft_step_fill     one block per state: the allowed tokens, ascending, into CSR or padded rows
//   ft_step_child_table  one thread per node v <= n: the child table (first child of v, rank1(hi_flag, it))
//
//   ft_step_root_table  one thread per child of the root: the root table (RootKid by label)
//
// Every kernel but the last two takes the child table (fc, fc_n) and the root table (rt, rt_n) after the view:
// the child range of a node below fc_n is two adjacent table entries (one load) instead of two select0 (a chain
// of dependent loads each), and a row at the root takes its child and that child's decoded state from one
// entry of the root table.

#include "index.cuh"

#ifndef FT_STEP_THREADS
#define FT_STEP_THREADS 256
#endif
#ifndef FT_STEP_CHUNK
#define FT_STEP_CHUNK 4096  // vocabulary entries per mask chunk (a power of two; the bitmap is CHUNK / 8 bytes)
#endif
#define CHUNK ((u32)FT_STEP_CHUNK)
// FT_STEP_TRACE (gpu_impl/scripts/step_probe.py only): ft_step_advance_mask takes one more argument, a u64
// array of 16 per block: thread 0's clock64 at the phase marks TRACE(k), %globaltimer at entry and exit.
#ifdef FT_STEP_TRACE
__shared__ long long s_trace[16];
#define TRACE(k) do { if (threadIdx.x == 0) s_trace[k] = clock64(); } while (0)
#define TRACE_PARAM , unsigned long long* trace
__device__ __forceinline__ unsigned long long globaltimer() {
    unsigned long long g;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
    return g;
}
// entry: %globaltimer in slot 15, the marks cleared, mark 0; exit: marks 0-9 and %globaltimer in slot 14
#define TRACE_BEGIN()                                                     \
    do {                                                                  \
        if (threadIdx.x == 0) {                                           \
            trace[16ull * blockIdx.x + 15] = globaltimer();               \
            for (int k = 0; k < 16; ++k) s_trace[k] = 0;                  \
            s_trace[0] = clock64();                                       \
        }                                                                 \
    } while (0)
#define TRACE_END()                                                       \
    do {                                                                  \
        if (threadIdx.x == 0) {                                           \
            const unsigned long long g = globaltimer();                   \
            unsigned long long* t = trace + 16ull * blockIdx.x;           \
            for (int k = 0; k < 10; ++k) t[k] = (unsigned long long)s_trace[k]; \
            t[14] = g;                                                    \
        }                                                                 \
    } while (0)
#else
#define TRACE(k) do { } while (0)
#define TRACE_PARAM
#define TRACE_BEGIN() do { } while (0)
#define TRACE_END() do { } while (0)
#endif
#define ST_DEAD (-1ll)
#define ST_FINISHED (-2ll)
#define K_AT 0
#define K_MID 1
#define K_DEAD 2
#define K_FIN 3

struct Pos {
    int kind;
    u32 node, off;
    u32 first, mid, end, r0;  // children (K_AT)
    u32 tok;                  // the next edge token (K_MID)
    bool term;                // a keyword ends here (K_AT)
    bool ranged;              // [first, end) is known (K_AT; decode without `children` leaves it to the caller)
};

// The child table: fc[v] = first child of node v | rank1(hi_flag, first child) << 32, for v in [0, n]
// (fc[v + 1] gives v's end: children of consecutive nodes are consecutive).
// The root table: rt[x] for labels x < rt_n, 32 bytes (one sector): the root's child with label x (node 0:
// none) and that child's decoded state (decode(child, 1), its child range included), so that a row at the
// root finds its new state in one load (ft_step_root_table builds it).
struct __align__(32) RootKid {
    u32 node, kind, first, mid, end, r0, tok, term;
};

struct Tab {
    const u64* fc;
    u32 n;  // nodes covered (fc has n + 1 entries)
    const RootKid* rt;
    u32 rt_n;  // labels covered (0: no root table)
};

// What every kernel but the table builders takes after the view: the child table, then the root table.
#define TAB_PARAMS const u64 *__restrict__ fc, u32 fc_n, const RootKid *__restrict__ rt, u32 rt_n
#define TAB_INIT Tab{fc, fc_n, rt, rt_n}

__device__ __forceinline__ void table_range(u64 a, u64 b, Pos& p) {
    p.first = (u32)a;
    p.r0 = (u32)(a >> 32);
    p.end = (u32)b;
    p.mid = p.end - ((u32)(b >> 32) - p.r0);
}

// Children [first, end) of `node` and the first child with a wide label (mid), r0 = rank1(hi_flag, first).
__device__ __forceinline__ void child_range(const IndexView& I, const Tab& T, u32 node, Pos& p) {
    if (node < T.n) {
        table_range(__ldg(&T.fc[node]), __ldg(&T.fc[node + 1]), p);
        return;
    }
    const u64 ustart = node == 0 ? 0ull : select0(I, (u64)node - 1) + 1;
    u64 wi = ustart >> 6;
    u64 word = ~__ldg(&I.louds_words[wi]) & (~0ull << (ustart & 63));
    for (int tries = 0; word == 0 && tries < 3; ++tries) { ++wi; word = ~__ldg(&I.louds_words[wi]); }
    const u64 zpos = word ? wi * 64 + (u64)(__ffsll((long long)word) - 1) : select0(I, node);
    p.first = (u32)(ustart - node + 1);
    p.end = (u32)(zpos - node + 1);
    p.r0 = rank1(I.hi_words, I.hi_rank, p.first);
    const u32 rE = rank1(I.hi_words, I.hi_rank, p.end);
    p.mid = p.end - (rE - p.r0);
}

// The DEAD state, decoded.
__device__ __forceinline__ Pos dead_pos() {
    Pos p;
    p.kind = K_DEAD; p.node = 0; p.off = 0; p.first = p.mid = p.end = p.r0 = 0; p.tok = 0; p.term = false;
    p.ranged = false;
    return p;
}

// What a state's decode reads of its node: the flags, the edge (link start a, length m) and, with `children`,
// the child table's entries.
struct Node {
    u32 v, fl, a, m;
    u64 ta, tb;
    bool tab;
};

// The node's reads, loaded together: the child table's entries (used only at the node), the flags and rank1 of
// the linked bits (used only if the node is linked); the empty asm keeps the compiler from sinking loads into
// branches.  Then the edge's link start and length (a linked node).
__device__ __forceinline__ Node load_node(const IndexView& I, const Tab& T, u32 v, bool children) {
    Node n;
    n.v = v;
    n.tab = children && v < T.n;
    n.ta = n.tb = 0;
    if (n.tab) { n.ta = __ldg(&T.fc[v]); n.tb = __ldg(&T.fc[v + 1]); }
    n.fl = node_flags(I, v);
    const u32 lr = rank1(I.linked_words, I.linked_rank, v);
    asm volatile("" ::"r"(lr), "l"(n.ta), "l"(n.tb));
    n.m = v == 0 ? 0u : 1u;
    n.a = 0;
    if (n.fl & NODE_LINKED) {
        n.a = packed_get(I.link_starts, I.ls_width, lr);
        n.m = 1u + packed_get(I.link_starts, I.ls_width, (u64)lr + 1) - n.a;
    }
    return n;
}

// The state `off` tokens into node n's edge (valid: 1 <= off <= n.m, or 0 at the root); `children`: with the
// child range of a state at the node (a node without children has the empty range, known from its flags).
__device__ __forceinline__ Pos node_pos(const IndexView& I, const Tab& T, const Node& n, u32 off, bool children) {
    Pos p = dead_pos();
    p.node = n.v;
    p.off = off;
    if (off == n.m) {
        p.kind = K_AT;
        p.term = (n.fl & NODE_TERMINAL) != 0;
        p.ranged = true;
        if (!(n.fl & NODE_HAS_CHILD)) {}  // no children: [0, 0)
        else if (n.tab) table_range(n.ta, n.tb, p);
        else if (children) child_range(I, T, n.v, p);
        else p.ranged = false;
    } else {
        p.kind = K_MID;
        p.tok = packed_get(I.suffix, I.suffix_width, (u64)n.a + off - 1);
    }
    return p;
}

// Whether `node` is a node of the index and `off` a valid offset into its edge (n loaded).
__device__ __forceinline__ bool valid_off(const Node& n, i64 off) {
    return off >= (n.v == 0 ? 0 : 1) && off <= (i64)n.m;
}

// Decode a state; `children` also computes the child range of a state at a node.
__device__ __forceinline__ Pos decode(const IndexView& I, const Tab& T, i64 node, i64 off, bool children) {
    Pos p = dead_pos();
    if (node == ST_FINISHED && off == 0) { p.kind = K_FIN; return p; }
    if (node < 0 || node >= (i64)I.num_nodes) return p;
    const Node n = load_node(I, T, (u32)node, children);
    if (!valid_off(n, off)) return p;
    return node_pos(I, T, n, (u32)off, children);
}

// The EOS ids of the launch (at most 8, flashtrie.stepwise._MAX_EOS), copied to shared memory with the view
// (load_view), so that no EOS test waits for a global load after the decode.
__shared__ i64 s_eos[8];

__device__ __forceinline__ bool is_eos(u32 n_eos, i64 x) {
    for (u32 k = 0; k < n_eos; ++k)
        if (s_eos[k] == x) return true;
    return false;
}

// ---------------------------------------------------------------------------------- block-wide pieces
// Every thread of the block calls these with the same arguments (they hold __syncthreads).

// Where the first child of [first, end) with label >= x can be, for distinct ascending labels below V:
// child first + k has a label >= k, and only the last V - x children can have labels >= x.
__device__ __forceinline__ void label_window(u32 first, u32 end, u64 V, u64 x, u32& lo, u32& hi) {
    lo = first;
    hi = end;
    if (x < (u64)(end - first)) hi = first + (u32)x;
    const u64 above = V > x ? V - x : 0ull;
    if (above < (u64)(end - first)) lo = max(lo, end - (u32)above);
}

// First index in [lo, hi) whose child label is >= x (hi if none): a blockDim-ary search, one
// __syncthreads_count per round (2 rounds for 65,536 children at 256 threads); once at most 4 x blockDim
// candidates are left, their labels are loaded together and counted (one round of loads).
__device__ u32 block_lower_bound(const IndexView& I, u32 lo, u32 hi, u32 mid, u32 r0, u64 x) {
    const u32 T = blockDim.x;
    while (lo < hi) {
        if (hi - lo <= 4 * T) {
            bool lt[4];
#pragma unroll
            for (u32 j = 0; j < 4; ++j) {
                const u32 c = lo + threadIdx.x + j * T;
                lt[j] = c < hi && (u64)child_label(I, c, mid, r0) < x;
            }
            u32 below = 0;
#pragma unroll
            for (u32 j = 0; j < 4; ++j)
                if (lo + j * T < hi) below += (u32)__syncthreads_count(lt[j]);  // uniform condition
            return lo + below;
        }
        const u32 step = (hi - lo + T - 1) / T;
        const u64 q = (u64)lo + (u64)(threadIdx.x + 1) * step - 1;
        const bool lt = q < hi && (u64)child_label(I, (u32)q, mid, r0) < x;
        lo += (u32)__syncthreads_count(lt) * step;
        hi = (u32)min((u64)hi, (u64)lo + step - 1);
    }
    return lo;
}

// Both bounds of a chunk at once (the probes of a round are loaded together): a = lower bound of xa in
// [la, ha), b = lower bound of xb in [lb, hb).
__device__ void block_lower_bound2(const IndexView& I, u32 mid, u32 r0, u32 la, u32 ha, u64 xa, u32 lb, u32 hb,
                                   u64 xb, u32& a, u32& b) {
    const u32 T = blockDim.x;
    while (la < ha || lb < hb) {
        const u32 sa = (ha - la + T - 1) / T, sb = (hb - lb + T - 1) / T;
        const u64 qa = (u64)la + (u64)(threadIdx.x + 1) * sa - 1, qb = (u64)lb + (u64)(threadIdx.x + 1) * sb - 1;
        const bool lta = la < ha && qa < ha && (u64)child_label(I, (u32)qa, mid, r0) < xa;
        const bool ltb = lb < hb && qb < hb && (u64)child_label(I, (u32)qb, mid, r0) < xb;
        la += (u32)__syncthreads_count(lta) * sa;
        lb += (u32)__syncthreads_count(ltb) * sb;
        if (sa) ha = (u32)min((u64)ha, (u64)la + sa - 1);
        if (sb) hb = (u32)min((u64)hb, (u64)lb + sb - 1);
    }
    a = la;
    b = lb;
}

// Lower bounds of two monotone predicates at once, block-wide: a = first q in [la, ha) with !lt_a(q) (ha if
// none), b likewise; a `probes`-ary search (threads 0 .. probes - 1 probe), the probes of a round loaded
// together.
template <class PA, class PB>
__device__ void block_search2(u32 probes, u64 la, u64 ha, PA lt_a, u64 lb, u64 hb, PB lt_b, u64& a, u64& b) {
    const bool me = threadIdx.x < probes;
    while (la < ha || lb < hb) {
        const u64 sa = (ha - la + probes - 1) / probes, sb = (hb - lb + probes - 1) / probes;
        const u64 qa = la + (threadIdx.x + 1) * sa - 1, qb = lb + (threadIdx.x + 1) * sb - 1;
        const bool ya = me && la < ha && qa < ha && lt_a(qa);
        const bool yb = me && lb < hb && qb < hb && lt_b(qb);
        la += (u64)__syncthreads_count(ya) * sa;
        lb += (u64)__syncthreads_count(yb) * sb;
        if (sa) ha = min(ha, la + sa - 1);
        if (sb) hb = min(hb, lb + sb - 1);
    }
    a = la;
    b = lb;
}

#define ZERO_PROBES 32u  // probes per round of the LOUDS zero search (each a rank1: scattered loads)

// Children [first, end) of `node`, block-wide (child_search "block"): the LOUDS zeros number node - 1 and node
// bound them; each is the first q with q - rank1(q) = zeros before q > j, found by block_search2 over
// [j + 1, j + num_nodes] (a node's zero has at most num_nodes - 1 ones before it).
__device__ void block_child_range(const IndexView& I, u32 node, Pos& p) {
    const u64 n = I.num_nodes;
    u64 ustart, zend;  // ustart: one past zero node - 1 (0 for the root); zend: one past zero node
    auto zeros_le = [&](u64 j) {
        return [&I, j](u64 q) { return q - rank1(I.louds_words, I.louds_rank, q) <= j; };
    };
    block_search2(min(ZERO_PROBES, blockDim.x), node ? (u64)node : 0ull, node ? (u64)node - 1 + n : 0ull,
                  zeros_le((u64)node - 1), (u64)node + 1, (u64)node + n, zeros_le((u64)node), ustart, zend);
    p.first = (u32)(ustart - node + 1);
    p.end = (u32)(zend - 1 - node + 1);
    p.r0 = rank1(I.hi_words, I.hi_rank, p.first);
    p.mid = p.end - (rank1(I.hi_words, I.hi_rank, p.end) - p.r0);
    p.ranged = true;
}

// The view and the EOS ids (s_eos) into shared memory by thread 0, which uses them at once; the other threads
// may read them after the caller's next __syncthreads.
__device__ __forceinline__ void load_view(const IndexView* view, IndexView& I, const i64* eos = nullptr,
                                          u32 n_eos = 0) {
    if (threadIdx.x == 0) {
        I = *view;
        for (u32 k = 0; k < n_eos; ++k) s_eos[k] = __ldg(&eos[k]);
    }
}

__device__ __forceinline__ i64 token_at(const void* tok, u32 tok_is64, u64 i) {
    return tok_is64 ? ((const i64*)tok)[i] : (i64)((const int*)tok)[i];
}

#define NO_VOCAB (1ull << 32)  // advance and walk know no vocabulary: every label is below 2**32
#define SMALL_WINDOW 8u        // a child search over at most this many labels: one thread, its loads together

// One advance, by one thread (as flashtrie.stepwise.TrieStepper.advance; labels are below V): the new state,
// or (search) a label window [lo, hi) over more than SMALL_WINDOW children for block_lower_bound to finish;
// `next` (K_MID: the token is the edge's next one) the new state decoded from the node already loaded.
struct Adv {
    i64 nn, no;
    u32 search, lo, hi, mid, r0, end;
    u32 next;  // the new state's decode is in *next (advance_one's argument)
};

// The decoded state of the root's child entry k (decode(k.node, 1, true)).
__device__ __forceinline__ Pos root_kid_pos(const RootKid& k) {
    Pos p;
    p.kind = (int)k.kind; p.node = k.node; p.off = 1;
    p.first = k.first; p.mid = k.mid; p.end = k.end; p.r0 = k.r0; p.tok = k.tok; p.term = k.term != 0;
    p.ranged = true;
    return p;
}

__device__ __forceinline__ RootKid load_root_kid(const RootKid* rt, u64 x) {
    const uint4* q = reinterpret_cast<const uint4*>(rt + x);
    const uint4 a = __ldg(q), b = __ldg(q + 1);
    return RootKid{a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
}

// Whether the state (node, off) is the root and token x is a label the root table covers (x may still be EOS).
__device__ __forceinline__ bool in_root_table(const Tab& T, i64 node, i64 off, i64 x, u64 V) {
    return node == 0 && off == 0 && x >= 0 && (u64)x < min((u64)T.rt_n, V);
}

// `next` (may be null): where the new state goes, decoded (its child range if `next_children`), when it is the
// next offset into the old state's edge: the node's reads are the old state's.
__device__ __forceinline__ Adv advance_one(const IndexView& I, const Tab& T, i64 node, i64 off, i64 x, u64 V,
                                           u32 n_eos, Pos* next = nullptr, bool next_children = true) {
    Adv a;
    a.nn = ST_DEAD; a.no = 0; a.search = 0; a.lo = a.hi = a.mid = a.r0 = a.end = 0; a.next = 0;
    if (node == ST_FINISHED && off == 0) { a.nn = ST_FINISHED; return a; }
    if (in_root_table(T, node, off, x, V) && !is_eos(n_eos, x)) {
        const RootKid k = load_root_kid(T.rt, (u64)x);  // one load: the child (and its decoded state)
        if (k.node) { a.nn = k.node; a.no = 1; }
        return a;
    }
    if (node < 0 || node >= (i64)I.num_nodes) return a;
    const Node nd = load_node(I, T, (u32)node, true);
    if (!valid_off(nd, off)) return a;
    const Pos p = node_pos(I, T, nd, (u32)off, true);
    if (is_eos(n_eos, x)) {
        if (p.kind == K_AT && p.term) a.nn = ST_FINISHED;
        return a;
    }
    if (x < 0 || (u64)x >= V || x > 0xFFFFFFFEll) return a;
    if (p.kind == K_MID) {
        if ((i64)p.tok == x) {
            a.nn = p.node;
            a.no = (i64)p.off + 1;
            if (next) { *next = node_pos(I, T, nd, p.off + 1, next_children); a.next = 1; }
        }
        return a;
    }
    u32 lo, hi;
    label_window(p.first, p.end, V, (u64)x, lo, hi);
    if (hi - lo > SMALL_WINDOW) {
        a.search = 1; a.lo = lo; a.hi = hi; a.mid = p.mid; a.r0 = p.r0; a.end = p.end;
        return a;
    }
    u32 lab[SMALL_WINDOW + 1];  // children lo .. hi (hi: the lower bound when every label is below x)
#pragma unroll
    for (u32 j = 0; j <= SMALL_WINDOW; ++j)
        lab[j] = j <= hi - lo && lo + j < p.end ? child_label(I, lo + j, p.mid, p.r0) : 0u;
    u32 k = hi - lo;
#pragma unroll
    for (int j = (int)SMALL_WINDOW - 1; j >= 0; --j)
        if ((u32)j < hi - lo && (u64)lab[j] >= (u64)x) k = (u32)j;
    u32 labk = 0;
#pragma unroll
    for (u32 j = 0; j <= SMALL_WINDOW; ++j)
        if (j == k) labk = lab[j];
    if (lo + k < p.end && (i64)labk == x) { a.nn = lo + k; a.no = 1; }
    return a;
}

// The state after token x in every thread: thread 0's advance_one, then (uniform) a block-wide child search
// when its window is wide.  s_adv: two Adv in shared memory, used in turn (`turn`), so that consecutive calls
// need one barrier each.
__device__ __forceinline__ void block_advance(const IndexView& I, const Tab& T, i64 node, i64 off, i64 x, u64 V,
                                              u32 n_eos, Adv* s_adv, u32 turn, i64& nn, i64& no) {
    Adv* A = &s_adv[turn & 1u];
    if (threadIdx.x == 0) *A = advance_one(I, T, node, off, x, V, n_eos);
    __syncthreads();
    if (A->search) {  // uniform
        const u32 c = block_lower_bound(I, A->lo, A->hi, A->mid, A->r0, (u64)x);
        if (threadIdx.x == 0 && c < A->end && (i64)child_label(I, c, A->mid, A->r0) == x) { A->nn = c; A->no = 1; }
        __syncthreads();
    }
    nn = A->nn;
    no = A->no;
}

// One block per state: the state after its token (block_advance).
extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS)
ft_step_advance(const IndexView* __restrict__ view, TAB_PARAMS, const i64* node_in,
                const i64* off_in, const void* tok, u32 tok_is64, u64 tok_stride, u32 n, const i64* __restrict__ eos,
                u32 n_eos, i64* node_out, i64* off_out) {
    __shared__ IndexView I;
    __shared__ Adv s_adv[2];
    const u32 r = blockIdx.x;
    const i64 node = node_in[r], off = off_in[r], x = token_at(tok, tok_is64, (u64)r * tok_stride);
    load_view(view, I, eos, n_eos);
    i64 nn, no;
    block_advance(I, TAB_INIT, node, off, x, NO_VOCAB, n_eos, s_adv, 0, nn, no);
    if (threadIdx.x == 0) { node_out[r] = nn; off_out[r] = no; }
}

// The state after ids[r, c0:c1) from the root, block-wide (one block_advance per token; in every thread).  Bounds
// outside [0, width] (device values: the host cannot check them without a synchronisation; numpy refuses them)
// give DEAD, as a state that is not valid for the index does, and read nothing.
__device__ __forceinline__ void block_walk(const IndexView& I, const Tab& T, const i64* ids, u64 width, i64 c0,
                                           i64 c1, u64 V, u32 n_eos, Adv* s_adv, i64& node, i64& off) {
    node = 0;
    off = 0;
    if (c0 < 0 || c1 < 0 || (u64)c0 > width || (u64)c1 > width) {  // uniform
        node = ST_DEAD;
        return;
    }
    u32 turn = 0;
    for (i64 c = c0; c < c1; ++c) {
        i64 nn, no;
        block_advance(I, T, node, off, __ldg(&ids[c]), V, n_eos, s_adv, turn++, nn, no);
        node = nn;
        off = no;
    }
}

// One block per row: the state after the row's tokens ids[r, begin:end] from the root.
extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS, 4)
ft_step_walk(const IndexView* __restrict__ view, TAB_PARAMS, const i64* __restrict__ ids,
             u64 row_stride, u64 width, u32 n, const i64* __restrict__ begin, i64 begin_all, const i64* __restrict__ end,
             i64 end_all, const i64* __restrict__ eos, u32 n_eos, i64* node_out, i64* off_out) {
    __shared__ IndexView I;
    __shared__ Adv s_adv[2];
    const u32 r = blockIdx.x;
    const i64 c0 = begin ? begin[r] : begin_all;
    const i64 c1 = end ? end[r] : end_all;
    load_view(view, I, eos, n_eos);
    i64 node, off;
    block_walk(I, TAB_INIT, ids + (u64)r * row_stride, width, c0, c1, NO_VOCAB, n_eos, s_adv, node, off);
    if (threadIdx.x == 0) { node_out[r] = node; off_out[r] = off; }
}

__device__ __forceinline__ void set_bit(u32* bits, u32 k) { atomicOr(&bits[k >> 5], 1u << (k & 31)); }

#define NEG_INF __int_as_float(0xff800000)

// The 4 bits n as 4 bytes (0 / 1): the bool mask of 4 entries.
__device__ __forceinline__ u32 bytes4(u32 n) {
    return (n & 1u) | ((n & 2u) << 7) | ((n & 4u) << 14) | ((n & 8u) << 21);
}

// -inf over the entries of a 16-byte vector q whose bits in m are clear, entry by entry (a vector at a row's end:
// its entries outside the row are never written; or one that holds allowed entries that are not restored).
__device__ __forceinline__ void neg_mixed(float* q, u32 m) {
    if (!(m & 1u)) q[0] = NEG_INF;
    if (!(m & 2u)) q[1] = NEG_INF;
    if (!(m & 4u)) q[2] = NEG_INF;
    if (!(m & 8u)) q[3] = NEG_INF;
}

// Bit j set where entry e0 + j (e0 may be below 0) is in [lo, hi), for the `width` (<= 16) entries from e0.
__device__ __forceinline__ u32 span_bits(i64 e0, u32 width, u64 lo, u64 hi) {
    const i64 a = max((i64)lo - e0, 0ll), b = min((i64)hi - e0, (i64)width);
    return a >= b ? 0u : ((1u << (u32)b) - 1u) & ~((1u << (u32)a) - 1u);
}

#define NO_TOKEN (-(1ll << 62))  // sparse_bits: no edge token

// The allowed entries among the `width` entries from e0 of a state that allows at most its edge's next token
// `tok` and (eos_ok) the EOS ids: a state inside an edge, DEAD, FINISHED or a node without children.
__device__ __forceinline__ u32 sparse_bits(i64 e0, u32 width, i64 tok, bool eos_ok, u32 n_eos) {
    u32 m = (u64)(tok - e0) < width ? 1u << (u32)(tok - e0) : 0u;
    if (eos_ok)
        for (u32 k = 0; k < n_eos; ++k) {
            const i64 d = s_eos[k] - e0;
            if ((u64)d < width) m |= 1u << (u32)d;
        }
    return m;
}

// -inf over the entries of the block's span [e_begin, e_end) but `tok` and (eos_ok) the EOS ids: the span's
// 16-byte vectors (aligned coordinates from u_begin: entry e is at u = e + mis) in one store each, those at the
// row's ends and the few with an allowed entry entry by entry.  No barrier, nothing read.
__device__ __forceinline__ void neg_span(float* rowf, u64 u_begin, u64 e_begin, u64 e_end, u32 mis, i64 tok,
                                         bool eos_ok, u32 n_eos) {
    const float4 ni4 = make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
    const u64 g_end = (e_end + mis + 3) >> 2;
#pragma unroll 4
    for (u64 g = (u_begin >> 2) + threadIdx.x; g < g_end; g += blockDim.x) {
        const i64 e0 = (i64)(4 * g) - (i64)mis;
        const u32 wr = span_bits(e0, 4, e_begin, e_end) & ~sparse_bits(e0, 4, tok, eos_ok, n_eos);
        if (wr == 0xFu) *reinterpret_cast<float4*>(rowf + e0) = ni4;
        else if (wr) neg_mixed(rowf + e0, ~wr & 0xFu);
    }
}

// The bool mask of the block's span for a sparse state (sparse_bits): one 16-byte store of 16 entries, entry by
// entry at the row's ends.
__device__ __forceinline__ void bool_span(unsigned char* rowb, u64 u_begin, u64 e_begin, u64 e_end, u32 mis,
                                          i64 tok, bool eos_ok, u32 n_eos) {
    const u64 g_end = (e_end + mis + 15) >> 4;
    for (u64 g = (u_begin >> 4) + threadIdx.x; g < g_end; g += blockDim.x) {
        const i64 e0 = (i64)(16 * g) - (i64)mis;
        const u32 in = span_bits(e0, 16, e_begin, e_end), m = sparse_bits(e0, 16, tok, eos_ok, n_eos);
        unsigned char* q = rowb + e0;
        if (in == 0xFFFFu) {
            *reinterpret_cast<uint4*>(q) = make_uint4(bytes4(m & 0xFu), bytes4((m >> 4) & 0xFu),
                                                      bytes4((m >> 8) & 0xFu), bytes4(m >> 12));
        } else {
            for (u32 t = 0; t < 16; ++t)
                if ((in >> t) & 1u) q[t] = (unsigned char)((m >> t) & 1u);
        }
    }
}

#define SCAN_MAX 1024u  // a node with at most this many children: its labels go to shared memory once, and
                        // every chunk takes its own from there (no binary searches at the chunk bounds)
__shared__ u32 s_lab[SCAN_MAX];
__shared__ float s_keep[SCAN_MAX + 8];  // mask_restore: the logits of s_lab's labels in the span, then the EOS ids'

// *dst = *src for a float in shared memory from global memory, asynchronously (cp.async, sm_80+: no register
// waits for it); wait_copies() waits for the thread's copies.  (Before sm_80 and on the host: a plain copy.)
__device__ __forceinline__ void copy_async(float* dst, const float* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"((u32)__cvta_generic_to_shared(dst)), "l"(src)
                 : "memory");
#else
    *dst = *src;
#endif
}
__device__ __forceinline__ void wait_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

// The labels of the node's children into s_lab (thread t: children first + t + k T; up to 4 per thread loaded
// together, the copies after them), and with rowf the logits of those in [e_begin, e_end) into s_keep.
__device__ __forceinline__ void load_labels(const IndexView& I, const Pos& p, float* rowf, u64 e_begin, u64 e_end) {
    const u32 T = blockDim.x, nch = p.end - p.first;
    for (u32 c0 = threadIdx.x; c0 < nch; c0 += 4 * T) {
        u32 x[4];
#pragma unroll
        for (u32 j = 0; j < 4; ++j) x[j] = c0 + j * T < nch ? child_label(I, p.first + c0 + j * T, p.mid, p.r0) : 0u;
#pragma unroll
        for (u32 j = 0; j < 4; ++j) {
            const u32 c = c0 + j * T;
            if (c >= nch) break;
            s_lab[c] = x[j];
            if (rowf && x[j] >= e_begin && x[j] < e_end) copy_async(&s_keep[c], rowf + x[j]);
        }
    }
}

// The float32 mask of the block's span at a node of 1 .. SCAN_MAX children: the allowed logits (its children's
// labels, and the EOS ids where a keyword ends) are copied to shared memory as the labels arrive; after one
// barrier -inf goes over the whole span, 16 bytes a store; after another the kept logits are stored back.  So
// no 32-byte sector is written in part before it was written whole, and no bitmap is built.
__device__ void mask_restore(const IndexView& I, const Pos& p, u64 u_begin, u64 e_begin, u64 e_end, u32 mis,
                             bool eos_ok, u32 n_eos, float* rowf) {
    load_labels(I, p, rowf, e_begin, e_end);
    const bool eos_mine = eos_ok && threadIdx.x < n_eos;
    const i64 xe = eos_mine ? s_eos[threadIdx.x] : -1;
    const bool eos_here = eos_mine && xe >= (i64)e_begin && xe < (i64)e_end;
    if (eos_here) copy_async(&s_keep[SCAN_MAX + threadIdx.x], rowf + xe);
    TRACE(5);
    wait_copies();
    __syncthreads();  // every kept logit of the span is in shared memory
    TRACE(6);
    neg_span(rowf, u_begin, e_begin, e_end, mis, NO_TOKEN, false, 0);
    TRACE(7);
    __syncthreads();  // every -inf of the span is stored
    for (u32 c = threadIdx.x; c < p.end - p.first; c += blockDim.x) {
        const u32 x = s_lab[c];
        if (x >= e_begin && x < e_end) rowf[x] = s_keep[c];
    }
    if (eos_here) rowf[xe] = s_keep[SCAN_MAX + threadIdx.x];
}

// A block's part of a row's mask, for the decoded state p (with its child range), in aligned coordinates
// u = entry + mis (mis: the row's misalignment in entries, so every vector of VEC entries starting at a multiple
// of VEC in u is one 16-byte store): the block has [u_begin, u_end) (multiples of 16; bitmap chunks of CHUNK
// entries from u_begin).
// Three ways, by what the state allows:
// * at most its edge's next token and the EOS ids (inside an edge, DEAD, FINISHED, a node without children):
//   each vector's allowed entries by comparison (neg_span, bool_span), no barrier;
// * float32 logits at a node of at most SCAN_MAX children: mask_restore;
// * else per chunk a bitmap of its allowed entries in shared memory (bits outside the row set: never written),
//   one barrier, the bits of the allowed tokens, one barrier, then per vector its bits (one shared load): -inf
//   over the disallowed float32 logits (an all-allowed vector is not written, a mixed one entry by entry), or
//   the bool mask (one 16-byte store of 16 entries).  Two bitmaps, alternating, so the next chunk's bitmap
//   needs no barrier after the stores.
// Only mask_restore reads the float32 logits (the allowed ones, stored back unchanged).
__device__ void mask_span(const IndexView& I, const Pos& p, u64 u_begin, u64 u_end, u64 V, u32 n_eos, float* rowf,
                          unsigned char* rowb) {
    __shared__ u32 bits2[2][CHUNK / 32];
    const u32 T = blockDim.x;
    const u32 mis = rowf ? (u32)(((unsigned long long)rowf >> 2) & 3u) : (u32)((unsigned long long)rowb & 15u);
    const u64 e_begin = u_begin > mis ? min(V, u_begin - mis) : 0ull;
    const u64 e_end = u_end > mis ? min(V, u_end - mis) : 0ull;
    if (e_begin >= e_end) return;  // uniform
    const bool eos_ok = p.kind != K_MID && (p.kind != K_AT || p.term);
    if (p.kind != K_AT || p.end == p.first) {  // uniform: sparse
        const i64 tok = p.kind == K_MID ? (i64)p.tok : NO_TOKEN;
        TRACE(5);
        TRACE(6);
        if (rowf) neg_span(rowf, u_begin, e_begin, e_end, mis, tok, eos_ok, n_eos);
        else bool_span(rowb, u_begin, e_begin, e_end, mis, tok, eos_ok, n_eos);
        TRACE(7);
        return;
    }
    const bool scan = p.end - p.first <= SCAN_MAX;
    if (scan && rowf) {  // uniform
        mask_restore(I, p, u_begin, e_begin, e_end, mis, eos_ok, n_eos, rowf);
        return;
    }
    u32 lo_c = 0, hi_c = 0;  // search: children [lo_c, hi_c) have labels in the chunk's entries
    if (scan) {
        load_labels(I, p, nullptr, 0, 0);
    } else {  // the first chunk's bounds, searched together
        const u64 eb = min(e_end, u_begin + CHUNK - mis);
        u32 la, ha, lb, hb;
        label_window(p.first, p.end, V, e_begin, la, ha);
        label_window(p.first, p.end, V, eb, lb, hb);
        if (e_begin == 0) la = ha = p.first;
        if (eb >= V) lb = hb = p.end;
        block_lower_bound2(I, p.mid, p.r0, la, ha, e_begin, lb, hb, eb, lo_c, hi_c);
    }
    u32 buf = 0;
    for (u64 cu = u_begin; cu < u_end; cu += CHUNK) {
        const u64 elo = max(e_begin, cu > mis ? cu - mis : 0ull), ehi = min(e_end, cu + CHUNK - mis);
        if (elo >= ehi) break;  // uniform: past the row's end
        if (!scan && cu != u_begin) {
            u32 lo, hi;
            label_window(p.first, p.end, V, ehi, lo, hi);
            hi_c = ehi >= V ? p.end : block_lower_bound(I, max(lo, lo_c), hi, p.mid, p.r0, ehi);
        }
        const bool full = !scan && (u64)(hi_c - lo_c) == ehi - elo;  // every entry is a child label
        if (full && rowf) { lo_c = hi_c; continue; }  // nothing to store
        u32* bits = bits2[buf];
        buf ^= 1u;
        const u32 jlo = (u32)(elo + mis - cu), jhi = (u32)(ehi + mis - cu);  // the chunk's bits of the row
        for (u32 k = (jlo >> 5) + threadIdx.x; k < (jhi + 31) >> 5; k += T) {
            const u32 a = max(jlo, 32 * k) - 32 * k, b = min(jhi, 32 * k + 32) - 32 * k;  // row bits [a, b)
            const u32 in_row = (b >= 32 ? ~0u : (1u << b) - 1u) & ~((1u << a) - 1u);
            bits[k] = full ? ~0u : (rowf ? ~in_row : 0u);
        }
        __syncthreads();  // (also: s_lab is written)
        if (cu == u_begin) TRACE(5);
        if (scan) {
            for (u32 c = threadIdx.x; c < p.end - p.first; c += T) {
                const u32 x = s_lab[c];
                if (x >= elo && x < ehi) set_bit(bits, (u32)(x + mis - cu));
            }
        } else if (!full) {
            for (u32 c = lo_c + threadIdx.x; c < hi_c; c += T)
                set_bit(bits, (u32)(child_label(I, c, p.mid, p.r0) + mis - cu));
        }
        if (threadIdx.x == 0 && eos_ok)
            for (u32 e = 0; e < n_eos; ++e) {
                const i64 x = s_eos[e];
                if (x >= (i64)elo && x < (i64)ehi) set_bit(bits, (u32)((u64)x + mis - cu));
            }
        __syncthreads();
        if (cu == u_begin) TRACE(6);
        if (rowf) {
            float* base = rowf + ((i64)cu - (i64)mis);  // entry of bit 0 (before the row only where bits are set)
            const float4 ni4 = make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
#pragma unroll 4
            for (u32 i = (jlo >> 2) + threadIdx.x; i < (jhi + 3) >> 2; i += T) {
                const u32 m = (bits[i >> 3] >> ((i & 7u) << 2)) & 0xFu;
                if (m == 0) *reinterpret_cast<float4*>(base + 4 * i) = ni4;
                else if (m != 0xFu) neg_mixed(base + 4 * i, m);
            }
        } else {
            unsigned char* base = rowb + ((i64)cu - (i64)mis);
            for (u32 i = (jlo >> 4) + threadIdx.x; i < (jhi + 15) >> 4; i += T) {
                const u32 m = (bits[i >> 1] >> ((i & 1u) << 4)) & 0xFFFFu, j = 16 * i;
                unsigned char* q = base + j;
                if (j >= jlo && j + 16 <= jhi) {
                    *reinterpret_cast<uint4*>(q) = make_uint4(bytes4(m & 0xFu), bytes4((m >> 4) & 0xFu),
                                                              bytes4((m >> 8) & 0xFu), bytes4(m >> 12));
                } else {
                    for (u32 t = 0; t < 16; ++t)
                        if (j + t >= jlo && j + t < jhi) q[t] = (unsigned char)((m >> t) & 1u);
                }
            }
        }
        if (cu == u_begin) TRACE(7);
        lo_c = hi_c;
    }
}

// The mask arguments every mask kernel takes after its own (kernel parameter lists, gpu_impl/stepwise.py
// `_mask_args`): the first `extra` rows have parts + 1 blocks each, the other rows `parts` (so that the grid
// can be a multiple of the SM count: every SM stores as much); block b of a row's k masks part b of k equal parts
// of the row (whole 16-entry vectors in aligned coordinates: mask_span); flags bit 0: the child ranges of nodes
// past the child table by a block-wide search of their LOUDS zeros, else select0 and the next zero.
#define MASK_PARAMS                                                                                            \
    u64 V, u32 parts, u32 extra, const i64 *__restrict__ eos, u32 n_eos, float *outf,                         \
        unsigned char *outb, u64 row_stride, unsigned long long *dead_count, u32 flags
#define MASK_ARGS V, parts, extra, eos, n_eos, outf, outb, row_stride, dead_count, flags

// A mask block's row, its span [u0, u1) (aligned coordinates: mask_span) and the row's output.
struct MaskRow {
    u32 row, b;
    u64 u0, u1;
    float* f;
    unsigned char* c;
    bool wide;
};

__device__ __forceinline__ MaskRow mask_row(MASK_PARAMS) {
    MaskRow w;
    const u32 big = extra * (parts + 1);  // the blocks of the rows with parts + 1
    const u32 k = blockIdx.x < big ? parts + 1 : parts, i = blockIdx.x < big ? blockIdx.x : blockIdx.x - big;
    w.row = (blockIdx.x < big ? 0u : extra) + i / k;
    w.b = i % k;
    w.f = outf ? outf + (u64)w.row * row_stride : nullptr;
    w.c = outb ? outb + (u64)w.row * row_stride : nullptr;
    // the row's aligned extent [0, V + mis) in k equal parts of whole 16-entry vectors
    const u32 mis = outf ? (u32)(((unsigned long long)w.f >> 2) & 3u) : (u32)((unsigned long long)w.c & 15u);
    const u64 n16 = (V + mis + 15) >> 4;
    w.u0 = 16 * (n16 * w.b / k);
    w.u1 = 16 * (n16 * (w.b + 1) / k);
    w.wide = (flags & 1u) != 0;
    return w;
}

// Thread 0's decode of a state for the mask: its child range too (the table or select0), except past the
// table with `wide`, where every thread finishes it block-wide (mask_pos).
__device__ __forceinline__ Pos decode_for_mask(const IndexView& I, const Tab& T, i64 node, i64 off, bool wide) {
    return decode(I, T, node, off, !wide || (node >= 0 && node < (i64)T.n));
}

// After the barrier that follows thread 0's decode into *P: the Pos in every thread.
__device__ __forceinline__ Pos mask_pos(const IndexView& I, const Tab& T, const Pos* P, bool wide) {
    Pos p = *P;
    if (wide && p.kind == K_AT && !p.ranged) block_child_range(I, p.node, p);  // uniform
    return p;
}

// The shared end of every mask kernel: count the state if dead, mask the block's span.
__device__ __forceinline__ void mask_end(const IndexView& I, const Pos& p, const MaskRow& w, MASK_PARAMS) {
    if (threadIdx.x == 0 && w.b == 0 && p.kind == K_DEAD) atomicAdd(dead_count, 1ull);
    TRACE(4);
    mask_span(I, p, w.u0, w.u1, V, n_eos, w.f, w.c);
}

extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS, 4)
ft_step_mask(const IndexView* __restrict__ view, TAB_PARAMS,
             const i64* __restrict__ node_in, const i64* __restrict__ off_in, u32 n, MASK_PARAMS) {
    __shared__ IndexView I;
    __shared__ Pos P;
    const MaskRow w = mask_row(MASK_ARGS);
    const Tab T = TAB_INIT;
    const i64 node = node_in[w.row], off = off_in[w.row];  // in flight with the view
    load_view(view, I, eos, n_eos);
    if (threadIdx.x == 0) P = decode_for_mask(I, T, node, off, w.wide);
    __syncthreads();
    mask_end(I, mask_pos(I, T, &P, w.wide), w, MASK_ARGS);
}

// advance, then the mask of the new states, in one launch: in every block of a row, thread 0 advances the
// row's state and decodes the new one with no barrier between (a wide child search is finished block-wide);
// block 0 of the row stores the state; then every block masks its part.  `node_out` must not alias `node_in`.
extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS, 4)
ft_step_advance_mask(const IndexView* __restrict__ view, TAB_PARAMS,
                     const i64* __restrict__ node_in, const i64* __restrict__ off_in, const void* tok, u32 tok_is64,
                     u64 tok_stride, u32 n, MASK_PARAMS, i64* node_out, i64* off_out TRACE_PARAM) {
    __shared__ IndexView I;
    __shared__ Pos P;
    __shared__ Adv A;
    TRACE_BEGIN();
    const MaskRow w = mask_row(MASK_ARGS);
    const Tab T = TAB_INIT;
    const i64 node = node_in[w.row], off = off_in[w.row], x = token_at(tok, tok_is64, (u64)w.row * tok_stride);
    load_view(view, I, eos, n_eos);  // (node, off and x in flight with the view)
    // A row at the root with a token in the root table (uniform: every thread has node, off and x): every thread
    // loads its new state from the table while thread 0 loads the view, so the view's barrier is the only one
    // before the mask and no decoded state goes through shared memory (advance_one's shortcut, block-wide).
    bool root = in_root_table(T, node, off, x, V);
    for (u32 k = 0; root && k < n_eos; ++k) root = __ldg(&eos[k]) != x;
    if (root) {  // uniform
        const RootKid k = load_root_kid(T.rt, (u64)x);
        const Pos p = k.node ? root_kid_pos(k) : dead_pos();
        TRACE(1);
        TRACE(2);
        __syncthreads();  // the view
        TRACE(3);
        if (threadIdx.x == 0 && w.b == 0) {
            node_out[w.row] = k.node ? (i64)k.node : ST_DEAD;
            off_out[w.row] = k.node ? 1 : 0;
        }
        mask_end(I, p, w, MASK_ARGS);
        TRACE(9);
        TRACE_END();
        return;
    }
    if (threadIdx.x == 0) {  // (a new state inside the old one's edge comes decoded: one load for its token)
        A = advance_one(I, T, node, off, x, V, n_eos, &P, !w.wide || (node >= 0 && node < (i64)T.n));
        if (A.nn >= 0) TRACE(1);
        if (!A.search) {
            if (!A.next) P = decode_for_mask(I, T, A.nn, A.no, w.wide);
            if (P.kind != K_DEAD) TRACE(2);
        }
    }
    __syncthreads();
    TRACE(3);
    if (A.search) {  // uniform
        const u32 c = block_lower_bound(I, A.lo, A.hi, A.mid, A.r0, (u64)x);
        if (threadIdx.x == 0) {
            if (c < A.end && (i64)child_label(I, c, A.mid, A.r0) == x) { A.nn = c; A.no = 1; }
            P = decode_for_mask(I, T, A.nn, A.no, w.wide);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0 && w.b == 0) { node_out[w.row] = A.nn; off_out[w.row] = A.no; }
    mask_end(I, mask_pos(I, T, &P, w.wide), w, MASK_ARGS);
    TRACE(9);
    TRACE_END();
}

// walk, then the mask of the walked states, in one launch (the processor of flashtrie/hf.py): every block of
// a row walks ids[row, begin:end) from the root block-wide, then masks its part.
extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS, 4)
ft_step_walk_mask(const IndexView* __restrict__ view, TAB_PARAMS,
                  const i64* __restrict__ ids, u64 ids_stride, u64 width, u32 n, const i64* __restrict__ begin,
                  i64 begin_all,
                  const i64* __restrict__ end, i64 end_all, MASK_PARAMS) {
    __shared__ IndexView I;
    __shared__ Pos P;
    __shared__ Adv s_adv[2];
    const MaskRow w = mask_row(MASK_ARGS);
    const i64 c0 = begin ? begin[w.row] : begin_all;
    const i64 c1 = end ? end[w.row] : end_all;
    const Tab T = TAB_INIT;
    load_view(view, I, eos, n_eos);
    i64 node, off;
    block_walk(I, T, ids + (u64)w.row * ids_stride, width, c0, c1, V, n_eos, s_adv, node, off);
    if (threadIdx.x == 0) P = decode_for_mask(I, T, node, off, w.wide);
    __syncthreads();
    mask_end(I, mask_pos(I, T, &P, w.wide), w, MASK_ARGS);
}

extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS)
ft_step_count(const IndexView* __restrict__ view, TAB_PARAMS,
              const i64* __restrict__ node_in, const i64* __restrict__ off_in, u32 n, i64* counts,
              unsigned char* ends) {
    __shared__ IndexView I;
    load_view(view, I);
    __syncthreads();
    const u32 r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    const Pos p = decode(I, TAB_INIT, node_in[r], off_in[r], true);
    if (counts) counts[r] = p.kind == K_AT ? (i64)(p.end - p.first) : (p.kind == K_MID ? 1 : 0);
    if (ends) ends[r] = (p.kind == K_AT && p.term) ? 1 : 0;
}

// CSR (offsets != null: row r's tokens at offsets[r] ..) or padded rows of `cap` (the first cap tokens).
extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS)
ft_step_fill(const IndexView* __restrict__ view, TAB_PARAMS,
             const i64* __restrict__ node_in, const i64* __restrict__ off_in, u32 n, const i64* __restrict__ offsets,
             u64 cap, i64* tokens) {
    __shared__ IndexView I;
    __shared__ Pos P;
    load_view(view, I);
    const u32 r = blockIdx.x;
    if (threadIdx.x == 0) P = decode(I, TAB_INIT, node_in[r], off_in[r], true);
    __syncthreads();
    const Pos p = P;
    const u64 base = offsets ? (u64)offsets[r] : (u64)r * cap;
    const u64 lim = offsets ? ~0ull : cap;
    if (p.kind == K_MID) {
        if (threadIdx.x == 0 && lim > 0) tokens[base] = (i64)p.tok;
    } else if (p.kind == K_AT) {
        for (u32 c = p.first + threadIdx.x; c < p.end && (u64)(c - p.first) < lim; c += blockDim.x)
            tokens[base + (c - p.first)] = (i64)child_label(I, c, p.mid, p.r0);
    }
}

// The child table of nodes [0, n] (n <= num_nodes): out[v] = first | rank1(hi_flag, first) << 32 with first
// the first child of v (1 for the root; for v = num_nodes: one past the last child).
extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS)
ft_step_child_table(const IndexView* __restrict__ view, u32 n, u64* out) {
    __shared__ IndexView I;
    load_view(view, I);
    __syncthreads();
    const u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (v > n) return;
    const u32 first = v == 0 ? 1u : (u32)(select0(I, v - 1) + 2 - v);
    out[v] = (u64)first | ((u64)rank1(I.hi_words, I.hi_rank, first) << 32);
}

// The root table (Tab.rt) of labels below lab_n, into out (zeroed: node 0 where the root has no such child):
// one thread per child of the root (child first + the thread's index in the grid).
extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS)
ft_step_root_table(const IndexView* __restrict__ view, const u64* __restrict__ fc, u32 fc_n, u32 lab_n,
                   RootKid* out) {
    __shared__ IndexView I;
    load_view(view, I);
    __syncthreads();
    const Tab T{fc, fc_n, nullptr, 0};
    const Pos root = decode(I, T, 0, 0, true);
    const u64 c = (u64)root.first + (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (root.kind != K_AT || c >= root.end) return;
    const u32 x = child_label(I, (u32)c, root.mid, root.r0);
    if (x >= lab_n) return;
    const Pos p = decode(I, T, (i64)c, 1, true);
    out[x] = RootKid{(u32)c, (u32)p.kind, p.first, p.mid, p.end, p.r0, p.tok, p.term ? 1u : 0u};
}
