// Decoding a state (flashtrie.stepwise.TrieStepper._decode): where (node, off) is in the trie, the node's
// child range, and the next edge token; the child and root tables that shortcut it; the view and the EOS ids
// in shared memory.
#pragma once
#include "step_params.cuh"

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

__device__ __forceinline__ void table_range(u64 a, u64 b, Pos& p) {
    p.first = (u32)a;
    p.r0 = (u32)(a >> 32);
    p.end = (u32)b;
    p.mid = p.end - ((u32)(b >> 32) - p.r0);
}

// Children [first, end) of `node` and the first child with a wide label (mid), r0 = rank1(hi_flag, first).
__device__ __forceinline__ void child_range(const IndexView& I, const Tab& T, u32 node, Pos& p) {
    if (node < T.fc_n) {
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
    n.tab = children && v < T.fc_n;
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
