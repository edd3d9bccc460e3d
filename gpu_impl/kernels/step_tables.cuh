// The child and root tables (built once per stepper: Tab.fc and .rt), and what a decoded state allows
// (TrieStepper._counts and _allowed).
#pragma once
#include "step_decode.cuh"

// Child table entry v (v <= num_nodes): first | rank1(hi_flag, first) << 32 with first the first child of v
// (1 for the root; for v = num_nodes: one past the last child).
__device__ __forceinline__ u64 child_table_entry(const IndexView& I, u64 v) {
    const u32 first = v == 0 ? 1u : (u32)(select0(I, v - 1) + 2 - v);
    return (u64)first | ((u64)rank1(I.hi_words, I.hi_rank, first) << 32);
}

// The root's child number k (k may be past its last child) into the root table of labels below lab_n (a
// table zeroed by the host: node 0 where the root has no such child); T has the child table only.
__device__ __forceinline__ void root_table_entry(const IndexView& I, const Tab& T, u64 k, u32 lab_n, RootKid* out) {
    const Pos root = decode(I, T, 0, 0, true);
    const u64 c = (u64)root.first + k;
    if (root.kind != K_AT || c >= root.end) return;
    const u32 x = child_label(I, (u32)c, root.mid, root.r0);
    if (x >= lab_n) return;
    const Pos p = decode(I, T, (i64)c, 1, true);
    out[x] = RootKid{(u32)c, (u32)p.kind, p.first, p.mid, p.end, p.r0, p.tok, p.term ? 1u : 0u};
}

// The number of allowed trie tokens of a decoded state (EOS aside).
__device__ __forceinline__ i64 allowed_count(const Pos& p) {
    return p.kind == K_AT ? (i64)(p.end - p.first) : (p.kind == K_MID ? 1 : 0);
}

// The first `lim` allowed tokens of a decoded state, ascending, to tokens[base ..] (block-wide).
__device__ __forceinline__ void store_allowed(const IndexView& I, const Pos& p, u64 base, u64 lim, i64* tokens) {
    if (p.kind == K_MID) {
        if (threadIdx.x == 0 && lim > 0) tokens[base] = (i64)p.tok;
    } else if (p.kind == K_AT) {
        for (u32 c = p.first + threadIdx.x; c < p.end && (u64)(c - p.first) < lim; c += blockDim.x)
            tokens[base + (c - p.first)] = (i64)child_label(I, c, p.mid, p.r0);
    }
}
