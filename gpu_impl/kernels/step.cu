// flashtrie: stepwise trie constraints for autoregressive decoders (gpu_impl/stepwise.py).
//
// A state is (node, off) as int64 (docs/index-format.md): off tokens into node's incoming edge, off equal to
// the edge length at the node, the root (0, 0); node -1 is DEAD and -2 FINISHED (flashtrie/stepwise.py).
// Every kernel gives exactly what the numpy backend gives (flashtrie.stepwise.TrieStepper); a state that is
// not valid for the index (node or off out of range) reads as DEAD here, where numpy refuses it.
//   ft_step_advance  one block per state: the state after one token (EOS handling included; the child
//                    found block-wide)
//   ft_step_walk     one block per row: the state after a row's tokens ids[r, begin:end] from the root
//   ft_step_mask     blocks_per_row blocks per state, each over per_block chunks of CHUNK vocabulary entries:
//                    the state decoded block-wide, a bitmap of the chunk's allowed tokens in shared memory,
//                    then -inf stored over the disallowed float32 logits (write-only: allowed entries are
//                    never read or written; 16-byte stores where 4 in a row are disallowed), or a bool mask
//   ft_step_advance_mask  both in one launch: the new states and their mask (one launch per decode step)
//   ft_step_walk_mask     walk (block-wide per row), then the mask of the walked states, in one launch
//   ft_step_count    one thread per state: number of allowed trie tokens, and whether a keyword ends
//   ft_step_fill     one block per state: the allowed tokens, ascending, into CSR or padded rows
//   ft_step_child_table  one thread per node v <= n: the child table (first child of v, rank1(hi_flag, it))
//
// Every kernel but the last takes the child table (fc, fc_n) after the view: the child range of a node below
// fc_n is two adjacent table entries (one load) instead of two select0 (a chain of dependent loads each).

#include "index.cuh"

#ifndef FT_STEP_THREADS
#define FT_STEP_THREADS 256
#endif
#ifndef FT_STEP_CHUNK
#define FT_STEP_CHUNK 4096  // vocabulary entries per mask chunk (a power of two; the bitmap is CHUNK / 8 bytes)
#endif
#define CHUNK ((u32)FT_STEP_CHUNK)
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
};

// The child table: fc[v] = first child of node v | rank1(hi_flag, first child) << 32, for v in [0, n]
// (fc[v + 1] gives v's end: children of consecutive nodes are consecutive).
struct Tab {
    const u64* fc;
    u32 n;  // nodes covered (fc has n + 1 entries)
};

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

// Decode a state; `children` also computes the child range of a state at a node.
__device__ __forceinline__ Pos decode(const IndexView& I, const Tab& T, i64 node, i64 off, bool children) {
    Pos p;
    p.kind = K_DEAD; p.node = 0; p.off = 0; p.first = p.mid = p.end = p.r0 = 0; p.tok = 0; p.term = false;
    if (node == ST_FINISHED && off == 0) { p.kind = K_FIN; return p; }
    if (node < 0 || node >= (i64)I.num_nodes) return p;
    const u32 v = (u32)node;
    const u32 fl = node_flags(I, v);
    // rank1 of the linked bits is loaded with the flags, not after them (used only if the node is linked);
    // the empty asm keeps the compiler from sinking it into the branch
    const u32 lr = rank1(I.linked_words, I.linked_rank, v);
    asm volatile("" ::"r"(lr));
    u32 m = v == 0 ? 0u : 1u;
    u32 a = 0;
    if (fl & 1u) {
        a = packed_get(I.link_starts, I.ls_width, lr);
        m = 1u + packed_get(I.link_starts, I.ls_width, (u64)lr + 1) - a;
    }
    if (off < (v == 0 ? 0 : 1) || off > (i64)m) return p;
    p.node = v;
    p.off = (u32)off;
    if (p.off == m) {
        p.kind = K_AT;
        p.term = (fl & 2u) != 0;
        if (children) child_range(I, T, v, p);
    } else {
        p.kind = K_MID;
        p.tok = packed_get(I.suffix, I.suffix_width, (u64)a + p.off - 1);
    }
    return p;
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

// Children [first, end) of `node`, block-wide.  The LOUDS zeros number node - 1 and node bound them; `wide`:
// each is the first q with q - rank1(q) = zeros before q > j, found by block_search2 over [j + 1, j + num_nodes]
// (a node's zero has at most num_nodes - 1 ones before it); else select0 of both, side by side (threads 0, 32).
__device__ void block_child_range(const IndexView& I, u32 node, Pos& p, bool wide) {
    __shared__ u64 s_zero[2];
    const u64 n = I.num_nodes;
    u64 ustart, zend;  // ustart: one past zero node - 1 (0 for the root); zend: one past zero node
    if (wide) {
        auto zeros_le = [&](u64 j) {
            return [&I, j](u64 q) { return q - rank1(I.louds_words, I.louds_rank, q) <= j; };
        };
        block_search2(min(ZERO_PROBES, blockDim.x), node ? (u64)node : 0ull, node ? (u64)node - 1 + n : 0ull,
                      zeros_le((u64)node - 1), (u64)node + 1, (u64)node + n, zeros_le((u64)node), ustart, zend);
    } else {  // s_zero is written again only after the syncs of the next block_decode
        if (threadIdx.x == 0) s_zero[0] = node ? select0(I, (u64)node - 1) + 1 : 0ull;
        if (threadIdx.x == 32 % blockDim.x) s_zero[1] = select0(I, node) + 1;
        __syncthreads();
        ustart = s_zero[0];
        zend = s_zero[1];
    }
    p.first = (u32)(ustart - node + 1);
    p.end = (u32)(zend - 1 - node + 1);
    p.r0 = rank1(I.hi_words, I.hi_rank, p.first);
    p.mid = p.end - (rank1(I.hi_words, I.hi_rank, p.end) - p.r0);
}

// Decode (node, off) with its child range, the same Pos in every thread (thread 0 decodes into *P; a state at
// a node then finds its children block-wide).  The child table's entries are loaded by every thread while
// thread 0 decodes (they depend on the node only).  The caller syncs before P is written again.
__device__ __forceinline__ Pos block_decode(const IndexView& I, const Tab& T, i64 node, i64 off, Pos* P, bool wide) {
    const bool tab = node >= 0 && node < (i64)T.n;
    u64 ta = 0, tb = 0;
    if (tab) { ta = __ldg(&T.fc[node]); tb = __ldg(&T.fc[node + 1]); }
    if (threadIdx.x == 0) *P = decode(I, T, node, off, false);
    __syncthreads();
    Pos p = *P;
    if (p.kind == K_AT) {  // uniform
        if (tab) table_range(ta, tb, p); else block_child_range(I, p.node, p, wide);
    }
    return p;
}

// The state after token x, block-wide (as flashtrie.stepwise.TrieStepper.advance; labels are below V):
// the child search is a block_lower_bound over label_window.  The result is in s_state[0..1] for every thread.
__device__ __forceinline__ void block_advance(const IndexView& I, const Tab& T, i64 node, i64 off, i64 x, u64 V,
                                              u32 n_eos, Pos* P, i64* s_state, bool wide) {
    const Pos p = block_decode(I, T, node, off, P, wide);
    bool search = false;
    if (threadIdx.x == 0) {
        i64 nn = ST_DEAD, no = 0;
        if (node == ST_FINISHED && off == 0) {
            nn = ST_FINISHED;
        } else if (p.kind == K_FIN) {
            nn = ST_FINISHED;
        } else if (p.kind != K_DEAD) {
            if (is_eos(n_eos, x)) {
                if (p.kind == K_AT && p.term) nn = ST_FINISHED;
            } else if (x >= 0 && (u64)x < V && x <= 0xFFFFFFFEll) {
                if (p.kind == K_MID) {
                    if ((i64)p.tok == x) { nn = p.node; no = (i64)p.off + 1; }
                } else {
                    search = true;
                }
            }
        }
        s_state[0] = nn; s_state[1] = no; s_state[2] = search ? 1 : 0;
    }
    __syncthreads();
    if (s_state[2]) {  // uniform
        u32 lo, hi;
        label_window(p.first, p.end, V, (u64)x, lo, hi);
        const u32 c = block_lower_bound(I, lo, hi, p.mid, p.r0, (u64)x);
        if (threadIdx.x == 0 && c < p.end && (i64)child_label(I, c, p.mid, p.r0) == x) {
            s_state[0] = c; s_state[1] = 1;
        }
    }
    __syncthreads();
}

#define NO_VOCAB (1ull << 32)  // advance and walk know no vocabulary: every label is below 2**32

// The view (and the EOS ids: s_eos) into shared memory, then a sync.
__device__ __forceinline__ void load_view(const IndexView* view, IndexView& I, const i64* eos = nullptr,
                                          u32 n_eos = 0) {
    if (threadIdx.x == 0) I = *view;
    if (threadIdx.x < n_eos) s_eos[threadIdx.x] = __ldg(&eos[threadIdx.x]);
    __syncthreads();
}

__device__ __forceinline__ i64 token_at(const void* tok, u32 tok_is64, u64 i) {
    return tok_is64 ? ((const i64*)tok)[i] : (i64)((const int*)tok)[i];
}

// One block per state: the state after its token (block_advance).
extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS)
ft_step_advance(const IndexView* __restrict__ view, const u64* __restrict__ fc, u32 fc_n, const i64* node_in,
                const i64* off_in, const void* tok, u32 tok_is64, u64 tok_stride, u32 n, const i64* __restrict__ eos,
                u32 n_eos, i64* node_out, i64* off_out) {
    __shared__ IndexView I;
    __shared__ Pos P;
    __shared__ i64 s_state[3];
    const u32 r = blockIdx.x;
    const i64 node = node_in[r], off = off_in[r], x = token_at(tok, tok_is64, (u64)r * tok_stride);
    load_view(view, I, eos, n_eos);
    block_advance(I, Tab{fc, fc_n}, node, off, x, NO_VOCAB, n_eos, &P, s_state, false);
    if (threadIdx.x == 0) { node_out[r] = s_state[0]; off_out[r] = s_state[1]; }
}

// The state after ids[r, c0:c1) from the root, block-wide (one block_advance per token; the result in every
// thread).  s_state is read before block_advance writes it again (after a sync).
__device__ __forceinline__ void block_walk(const IndexView& I, const Tab& T, const i64* ids, i64 c0, i64 c1, u64 V,
                                           u32 n_eos, Pos* P, i64* s_state, bool wide, i64& node, i64& off) {
    node = 0;
    off = 0;
    for (i64 c = c0; c < c1; ++c) {
        block_advance(I, T, node, off, __ldg(&ids[c]), V, n_eos, P, s_state, wide);
        node = s_state[0];
        off = s_state[1];
    }
}

// One block per row: the state after the row's tokens ids[r, begin:end] from the root.
extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS, 4)
ft_step_walk(const IndexView* __restrict__ view, const u64* __restrict__ fc, u32 fc_n, const i64* __restrict__ ids,
             u64 row_stride, u32 n, const i64* __restrict__ begin, i64 begin_all, const i64* __restrict__ end,
             i64 end_all, const i64* __restrict__ eos, u32 n_eos, i64* node_out, i64* off_out) {
    __shared__ IndexView I;
    __shared__ Pos P;
    __shared__ i64 s_state[3];
    const u32 r = blockIdx.x;
    const i64 c0 = begin ? begin[r] : begin_all;
    const i64 c1 = end ? end[r] : end_all;
    load_view(view, I, eos, n_eos);
    i64 node, off;
    block_walk(I, Tab{fc, fc_n}, ids + (u64)r * row_stride, c0, c1, NO_VOCAB, n_eos, &P, s_state, false, node, off);
    if (threadIdx.x == 0) { node_out[r] = node; off_out[r] = off; }
}

__device__ __forceinline__ void set_bit(u32* bits, u32 k) { atomicOr(&bits[k >> 5], 1u << (k & 31)); }
__device__ __forceinline__ bool get_bit(const u32* bits, u64 k) { return (bits[k >> 5] >> (k & 31)) & 1u; }

// Bits k .. k + 3 of the bitmap (k + 3 inside it).
__device__ __forceinline__ u32 get_bits4(const u32* bits, u64 k) {
    const u32 w = (u32)(k >> 5), s = (u32)(k & 31);
    u32 x = bits[w] >> s;
    if (s > 28) x |= bits[w + 1] << (32 - s);
    return x & 0xFu;
}

#define NEG_INF __int_as_float(0xff800000)

// -inf stored over the logits of [ca, cb) whose bit is clear (the chunk's bitmap); allowed entries are not
// touched.  16-byte stores where a whole aligned vector is disallowed, 4-byte stores where it is mixed.
// NONE: the chunk allows nothing (the bitmap is not read: a plain loop of 16-byte stores).
template <bool NONE>
__device__ void neg_chunk(const u32* bits, float* rowp, u64 ca, u64 cb) {
    const u32 T = blockDim.x;
    const u32 mis = (u32)(((unsigned long long)(rowp + ca) >> 2) & 3u);
    u64 a = ca + ((4u - mis) & 3u);
    if (a > cb) a = cb;
    const u64 nvec = (cb - a) >> 2;
    float* base = rowp + a;
    float4* vp = reinterpret_cast<float4*>(base);
    const float ni = NEG_INF;
#pragma unroll 4
    for (u64 i = threadIdx.x; i < nvec; i += T) {
        const u32 m = NONE ? 0u : get_bits4(bits, a - ca + 4 * i);
        if (m == 0) {
            vp[i] = make_float4(ni, ni, ni, ni);
        } else if (m != 0xFu) {
            float* q = base + 4 * i;
            if (!(m & 1u)) q[0] = ni;
            if (!(m & 2u)) q[1] = ni;
            if (!(m & 4u)) q[2] = ni;
            if (!(m & 8u)) q[3] = ni;
        }
    }
    for (u64 v = ca + threadIdx.x; v < a; v += T)
        if (NONE || !get_bit(bits, v - ca)) rowp[v] = ni;
    for (u64 v = a + 4 * nvec + threadIdx.x; v < cb; v += T)
        if (NONE || !get_bit(bits, v - ca)) rowp[v] = ni;
}

// The bool mask of [ca, cb): 16-byte stores of 16 entries where aligned.
__device__ void bool_chunk(const u32* bits, unsigned char* rowb, u64 ca, u64 cb) {
    const u32 T = blockDim.x;
    const u32 mis = (u32)((unsigned long long)(rowb + ca) & 15u);
    u64 a = ca + ((16u - mis) & 15u);
    if (a > cb) a = cb;
    const u64 nvec = (cb - a) >> 4;
    uint4* vp = reinterpret_cast<uint4*>(rowb + a);
    for (u64 i = threadIdx.x; i < nvec; i += T) {
        const u64 k = a - ca + 16 * i;
        u32 w[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            w[j] = 0;
#pragma unroll
            for (int t = 0; t < 4; ++t) w[j] |= (u32)get_bit(bits, k + 4 * j + t) << (8 * t);
        }
        vp[i] = make_uint4(w[0], w[1], w[2], w[3]);
    }
    for (u64 v = ca + threadIdx.x; v < a; v += T) rowb[v] = get_bit(bits, v - ca) ? 1 : 0;
    for (u64 v = a + 16 * nvec + threadIdx.x; v < cb; v += T) rowb[v] = get_bit(bits, v - ca) ? 1 : 0;
}

#define SCAN_MAX 1024u  // a node with at most this many children: its labels go to shared memory once, and
                        // every chunk takes its own from there (no binary searches at the chunk bounds)

// A block's part of a row's mask: vocabulary entries [v_begin, v_end), CHUNK at a time, for the decoded
// state p (with its child range).  Bitmap of the chunk's allowed tokens in shared memory, then -inf over the
// disallowed float32 logits (write-only), or a bool mask (16-byte stores).
__device__ void mask_span(const IndexView& I, const Pos& p, u64 v_begin, u64 v_end, u64 V, u32 n_eos, float* rowf,
                          unsigned char* rowb) {
    __shared__ u32 bits[CHUNK / 32];
    __shared__ u32 s_lab[SCAN_MAX];
    const u32 T = blockDim.x;
    const bool eos_ok = p.kind != K_MID && (p.kind != K_AT || p.term);
    const bool scan = p.kind == K_AT && p.end - p.first <= SCAN_MAX;
    const bool search = p.kind == K_AT && !scan;
    u32 lo_c = 0, hi_c = 0;
    if (scan) {
        for (u32 c = p.first + threadIdx.x; c < p.end; c += T) s_lab[c - p.first] = child_label(I, c, p.mid, p.r0);
    } else if (search) {  // the first chunk's bounds, searched together
        const u64 cb = min(v_end, v_begin + CHUNK);
        u32 la, ha, lb, hb;
        label_window(p.first, p.end, V, v_begin, la, ha);
        label_window(p.first, p.end, V, cb, lb, hb);
        if (v_begin == 0) la = ha = p.first;
        if (cb >= V) lb = hb = p.end;
        block_lower_bound2(I, p.mid, p.r0, la, ha, v_begin, lb, hb, cb, lo_c, hi_c);
    }
    for (u64 ca = v_begin; ca < v_end; ca += CHUNK) {
        const u64 cb = min(v_end, ca + CHUNK);
        const u32 width = (u32)(cb - ca);
        if (search && ca != v_begin) {
            u32 lo, hi;
            label_window(p.first, p.end, V, cb, lo, hi);
            hi_c = cb >= V ? p.end : block_lower_bound(I, max(lo, lo_c), hi, p.mid, p.r0, cb);
        }
        const bool full = search && hi_c - lo_c == width;  // every entry of the chunk is a child label
        for (u32 i = threadIdx.x; i < CHUNK / 32; i += T) {
            const u32 k = 32 * i;
            bits[i] = !full || k >= width ? 0u : (width - k >= 32 ? ~0u : ((1u << (width - k)) - 1u));
        }
        __syncthreads();  // (also: s_lab is written)
        bool hit = full;  // this thread set a bit (or the chunk is full)
        if (scan) {
            for (u32 c = threadIdx.x; c < p.end - p.first; c += T) {
                const u32 x = s_lab[c];
                if (x >= ca && x < cb) { set_bit(bits, (u32)(x - ca)); hit = true; }
            }
        } else if (search && !full) {
            for (u32 c = lo_c + threadIdx.x; c < hi_c; c += T) {
                set_bit(bits, (u32)(child_label(I, c, p.mid, p.r0) - ca));
                hit = true;
            }
        }
        if (threadIdx.x == 0) {
            if (p.kind == K_MID && p.tok >= ca && p.tok < cb) { set_bit(bits, (u32)(p.tok - ca)); hit = true; }
            if (eos_ok)
                for (u32 e = 0; e < n_eos; ++e) {
                    const i64 x = s_eos[e];
                    if (x >= (i64)ca && x < (i64)cb) { set_bit(bits, (u32)(x - (i64)ca)); hit = true; }
                }
        }
        const bool any = __syncthreads_or(hit);  // uniform: the chunk allows some token
        if (!rowf) bool_chunk(bits, rowb, ca, cb);
        else if (!any) neg_chunk<true>(bits, rowf, ca, cb);
        else if (!full) neg_chunk<false>(bits, rowf, ca, cb);  // a full chunk: nothing to store
        __syncthreads();  // before the next chunk's bitmap
        lo_c = hi_c;
    }
}

// The mask arguments every mask kernel takes after its own (kernel parameter lists, gpu_impl/stepwise.py
// `_mask_args`): block b of a row masks chunks [b * per_block, (b + 1) * per_block) of the row; flags bit 0:
// the child ranges of nodes past the child table by a block-wide search of their LOUDS zeros, else two select0
// side by side.
#define MASK_PARAMS                                                                                            \
    u64 V, u32 per_block, u32 blocks_per_row, const i64 *__restrict__ eos, u32 n_eos, float *outf,            \
        unsigned char *outb, u64 row_stride, unsigned long long *dead_count, u32 flags
#define MASK_ARGS V, per_block, blocks_per_row, eos, n_eos, outf, outb, row_stride, dead_count, flags

// A mask block's row, its vocabulary span and the row's output.
struct MaskRow {
    u32 row, b;
    u64 v0, v1;
    float* f;
    unsigned char* c;
    bool wide;
};

__device__ __forceinline__ MaskRow mask_row(MASK_PARAMS) {
    MaskRow w;
    w.row = blockIdx.x / blocks_per_row;
    w.b = blockIdx.x % blocks_per_row;
    w.v0 = min(V, (u64)w.b * per_block * CHUNK);
    w.v1 = min(V, w.v0 + (u64)per_block * CHUNK);
    w.f = outf ? outf + (u64)w.row * row_stride : nullptr;
    w.c = outb ? outb + (u64)w.row * row_stride : nullptr;
    w.wide = (flags & 1u) != 0;
    return w;
}

// The shared end of every mask kernel: decode (node, off) block-wide, count it if dead, mask the block's span.
__device__ __forceinline__ void mask_state(const IndexView& I, const Tab& T, i64 node, i64 off, const MaskRow& w,
                                           Pos* P, MASK_PARAMS) {
    const Pos p = block_decode(I, T, node, off, P, w.wide);
    if (threadIdx.x == 0 && w.b == 0 && p.kind == K_DEAD) atomicAdd(dead_count, 1ull);
    mask_span(I, p, w.v0, w.v1, V, n_eos, w.f, w.c);
}

extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS, 4)
ft_step_mask(const IndexView* __restrict__ view, const u64* __restrict__ fc, u32 fc_n,
             const i64* __restrict__ node_in, const i64* __restrict__ off_in, u32 n, MASK_PARAMS) {
    __shared__ IndexView I;
    __shared__ Pos P;
    const MaskRow w = mask_row(MASK_ARGS);
    const i64 node = node_in[w.row], off = off_in[w.row];
    load_view(view, I, eos, n_eos);
    mask_state(I, Tab{fc, fc_n}, node, off, w, &P, MASK_ARGS);
}

// advance, then the mask of the new states, in one launch: every block of a row advances the row's state
// (block 0 of the row stores it), then masks its part.  `node_out` must not alias `node_in`.
extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS)
ft_step_advance_mask(const IndexView* __restrict__ view, const u64* __restrict__ fc, u32 fc_n,
                     const i64* __restrict__ node_in, const i64* __restrict__ off_in, const void* tok, u32 tok_is64,
                     u64 tok_stride, u32 n, MASK_PARAMS, i64* node_out, i64* off_out) {
    __shared__ IndexView I;
    __shared__ Pos P;
    __shared__ i64 s_state[3];
    const MaskRow w = mask_row(MASK_ARGS);
    const i64 node = node_in[w.row], off = off_in[w.row], x = token_at(tok, tok_is64, (u64)w.row * tok_stride);
    load_view(view, I, eos, n_eos);
    const Tab T{fc, fc_n};
    block_advance(I, T, node, off, x, V, n_eos, &P, s_state, w.wide);
    const i64 nn = s_state[0], no = s_state[1];
    if (threadIdx.x == 0 && w.b == 0) { node_out[w.row] = nn; off_out[w.row] = no; }
    __syncthreads();  // every thread has read s_state and P before P is decoded again
    mask_state(I, T, nn, no, w, &P, MASK_ARGS);
}

// walk, then the mask of the walked states, in one launch (the processor of flashtrie/hf.py): every block of
// a row walks ids[row, begin:end) from the root block-wide, then masks its part.
extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS, 4)
ft_step_walk_mask(const IndexView* __restrict__ view, const u64* __restrict__ fc, u32 fc_n,
                  const i64* __restrict__ ids, u64 ids_stride, u32 n, const i64* __restrict__ begin, i64 begin_all,
                  const i64* __restrict__ end, i64 end_all, MASK_PARAMS) {
    __shared__ IndexView I;
    __shared__ Pos P;
    __shared__ i64 s_state[3];
    const MaskRow w = mask_row(MASK_ARGS);
    const i64 c0 = begin ? begin[w.row] : begin_all;
    const i64 c1 = end ? end[w.row] : end_all;
    load_view(view, I, eos, n_eos);
    const Tab T{fc, fc_n};
    i64 node, off;
    block_walk(I, T, ids + (u64)w.row * ids_stride, c0, c1, V, n_eos, &P, s_state, w.wide, node, off);
    mask_state(I, T, node, off, w, &P, MASK_ARGS);
}

extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS)
ft_step_count(const IndexView* __restrict__ view, const u64* __restrict__ fc, u32 fc_n,
              const i64* __restrict__ node_in, const i64* __restrict__ off_in, u32 n, i64* counts,
              unsigned char* ends) {
    __shared__ IndexView I;
    load_view(view, I);
    const u32 r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    const Pos p = decode(I, Tab{fc, fc_n}, node_in[r], off_in[r], true);
    if (counts) counts[r] = p.kind == K_AT ? (i64)(p.end - p.first) : (p.kind == K_MID ? 1 : 0);
    if (ends) ends[r] = (p.kind == K_AT && p.term) ? 1 : 0;
}

// CSR (offsets != null: row r's tokens at offsets[r] ..) or padded rows of `cap` (the first cap tokens).
extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS)
ft_step_fill(const IndexView* __restrict__ view, const u64* __restrict__ fc, u32 fc_n,
             const i64* __restrict__ node_in, const i64* __restrict__ off_in, u32 n, const i64* __restrict__ offsets,
             u64 cap, i64* tokens) {
    __shared__ IndexView I;
    __shared__ Pos P;
    load_view(view, I);
    const u32 r = blockIdx.x;
    if (threadIdx.x == 0) P = decode(I, Tab{fc, fc_n}, node_in[r], off_in[r], true);
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
    const u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (v > n) return;
    const u32 first = v == 0 ? 1u : (u32)(select0(I, v - 1) + 2 - v);
    out[v] = (u64)first | ((u64)rank1(I.hi_words, I.hi_rank, first) << 32);
}
