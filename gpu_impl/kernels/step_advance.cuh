// Advancing states (TrieStepper.advance and walk): one thread decodes and searches a small label window,
// the block finishes a wide one.
#pragma once
#include "step_search.cuh"

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

