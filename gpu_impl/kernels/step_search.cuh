// Block-wide searches over a node's children and the LOUDS bits (TrieStepper._find_child's binary search,
// shared by a block).  Every thread of the block calls these with the same arguments (they hold
// __syncthreads).
#pragma once
#include "step_decode.cuh"

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
