// Candidate emission (steps 2-4 of docs/semantics.md for one pair (h, x)): score, threshold, the
// frontier entry when c has a child or is mid-edge, the pool entry when c is a whole keyword that beats
// the pool's worst; then the append to the per-query candidate buffers.
#pragma once
#include "hypothesis.cuh"
#include "params.cuh"
#include "select.cuh"

// c is exactly at `node` with score s and length len: offer it to the frontier (the node has a child)
// and to the pool (a keyword ends there and n beats the pool's worst entry).
__device__ __forceinline__ void emit_at_node(const Params& P, u32 fl, u32 worst, u32 node, float s, u32 len,
                                             u64 low, u64 fk, Cand& c) {
    if (fl & NODE_HAS_CHILD) {
        c.f = true; c.fk = fk;
        c.fh = Hyp::at_node(node, s, len);
    }
    if (fl & NODE_TERMINAL) {
        const float n = __fmul_rn(s, __ldg(&P.ln[len < P.ln_len ? len : P.ln_len - 1]));
        const u32 dk = desc_key32(n);
        if (dk < worst) {
            c.p = true;
            c.pk = ((u64)dk << 32) | low;
            c.pe = PoolEntry::make(node, s, n, len);
        }
    }
}

// Candidate c = h + [x] (x at sorted position xrank of its row, logprob l) of hypothesis r of query q:
// it enters `node` via its label (entered), or stays on node's edge with `rem` tokens left (MID when
// rem > 0, sufbase the suffix index of the next token).  Keys: frontier (desc_key32(s), r, xrank),
// pool (desc_key32(n), r, xrank); worst = the pool's worst desc key (DESC_KEY_NONE: not full).
__device__ __forceinline__ void make_cand(const IndexView& I, const Params& P, u32 worst, u32 r, u32 xrank,
                                          float s_h, float l, u32 len_h, u32 node, bool entered, u32 rem,
                                          u32 sufbase, Cand& c) {
    c.f = false;
    c.p = false;
    const float s = __fadd_rn(s_h, l);
    if (!(s > P.thr_sigma)) return;  // also drops NaN (a proposal at or under the token threshold)
    const u32 len = len_h + 1;
    const u64 low = ((u64)r << 16) | xrank;
    const u64 fk = ((u64)desc_key32(s) << 32) | low;
    if (!entered && rem > 0) {  // still inside the edge
        c.f = true; c.fk = fk;
        c.fh = Hyp::mid_edge(node, s, len, rem, sufbase);
        return;
    }
    const u32 fl = node_flags(I, node);
    if (entered && (fl & NODE_LINKED)) {  // entered a long edge: one token of it read
        c.f = true; c.fk = fk;
        c.fh = Hyp::linked_off(node, s, len, 1u);
        return;
    }
    emit_at_node(P, fl, worst, node, s, len, low, fk, c);
}

// Entry i of query q's candidate buffer (keys, pays), or the overflow flag when i is past the capacity.
__device__ __forceinline__ void put_cand(const Params& P, u64* keys, uint4* pays, u32 q, u32 i, u64 k, uint4 p) {
    if (i < P.cand_cap) {
        const u64 o = (u64)q * P.cand_cap + i;
        keys[o] = k; pays[o] = p;
    } else {
        atomicOr(P.err, ERR_OVERFLOW);
    }
}

// One thread's candidate, appended with one atomic per buffer.
__device__ __forceinline__ void store_cand_thread(const Params& P, u32 q, const Cand& c) {
    if (c.f) put_cand(P, P.fkey, P.fpay, q, atomicAdd(&P.fcount[q], 1u), c.fk, c.fh.v);
    if (c.p) put_cand(P, P.pkey, P.ppay, q, atomicAdd(&P.pcount[q], 1u), c.pk, c.pe.v);
}

// The slot of this lane among the lanes set in mask (a ballot): one atomicAdd on count per warp.
__device__ __forceinline__ u32 warp_slot(u32* count, u32 mask) {
    const u32 lane = threadIdx.x & 31;
    const u32 leader = __ffs(mask) - 1;
    u32 base = 0;
    if (lane == leader) base = atomicAdd(count, (u32)__popc(mask));
    base = __shfl_sync(FULL_MASK, base, leader);
    return base + __popc(mask & ((1u << lane) - 1));
}

// The candidates of a whole warp working on one query q, appended with one atomic per buffer.
__device__ __forceinline__ void store_cand_warp(const Params& P, u32 q, const Cand& c) {
    const u32 fm = __ballot_sync(FULL_MASK, c.f);
    if (fm) {
        const u32 i = warp_slot(&P.fcount[q], fm);
        if (c.f) put_cand(P, P.fkey, P.fpay, q, i, c.fk, c.fh.v);
    }
    const u32 pm = __ballot_sync(FULL_MASK, c.p);
    if (pm) {
        const u32 i = warp_slot(&P.pcount[q], pm);
        if (c.p) put_cand(P, P.pkey, P.ppay, q, i, c.pk, c.pe.v);
    }
}
