// The index on the device: the bit vectors and packed integers of flashtrie/index/bits.py and
// flashtrie/index/packed.py, and the node queries of NarrowLoudsIndex (docs/index-format.md).
// The names and signatures here are shared by every kernel (search.cu and the stepwise kernels).
#pragma once
#define FT_INDEX_CUH
#include "constants.cuh"  // NO_NODE, the error bits, hypothesis kinds, step counters: gpu_impl/layout.py

typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned short u16;
typedef long long i64;

#define MASK34 0x3FFFFFFFFull  // the absolute count of a rank-directory entry (bits.py ABS_BITS)

// node_flags bits (4 per node, packed 8 nodes to a word)
#define NODE_LINKED 1u     // the node's edge is longer than one token (its tail is in the suffix store)
#define NODE_TERMINAL 2u   // a keyword ends at the node
#define NODE_HAS_CHILD 4u  // the node has at least one child

// Field order and types are checked against gpu_impl/layout.py (INDEX_VIEW) at compile time.
struct IndexView {
    const u64* louds_words;
    const u64* louds_rank;
    const u32* louds_sel0;
    const u16* labels_lo;
    const u64* hi_words;
    const u64* hi_rank;
    const u64* labels_hi;
    const u64* linked_words;
    const u64* linked_rank;
    const u64* link_starts;
    const u64* suffix;
    const u64* terminal_words;
    const u64* terminal_rank;
    const u64* keyword_ids;
    const u32* nflags;  // 4 bits per node: NODE_LINKED | NODE_TERMINAL | NODE_HAS_CHILD
    u32 hi_width, ls_width, suffix_width, kwid_width;  // kwid_width 0: no map, id = rank1(terminal, node)
    u32 num_nodes, pad0, pad1, pad2;
};

// ---------------------------------------------------------------------------------- BitVector (bits.py)
// The rank directory holds, per 1024-bit block (16 words), the absolute count of ones before it (low 34
// bits) and the ones in the block's words [0, 4), [0, 8), [0, 12) (10 bits each, from bit 34).
__device__ __forceinline__ u32 sub_rel(u64 r, u32 sub) {
    return sub == 0 ? 0u : (u32)((r >> (24 + 10 * sub)) & 0x3FFu);
}

// Ones before bit i: the directory entry and the 4-word sub-block (one 32-byte sector) that holds bit i,
// loaded independently: the whole words before bit i's word and the part of that word below bit i.
__device__ __forceinline__ u32 rank1(const u64* __restrict__ words, const u64* __restrict__ rank, u64 i) {
    const u64 r = __ldg(&rank[i >> 10]);
    const u64* sub = words + ((i >> 6) & ~3ull);
    const u64 w0 = __ldg(&sub[0]), w1 = __ldg(&sub[1]), w2 = __ldg(&sub[2]), w3 = __ldg(&sub[3]);
    const u32 k = (u32)((i >> 6) & 3);
    const u32 b = (u32)(i & 63);
    const u64 part = b ? ((1ull << b) - 1) : 0ull;
    const u64 m0 = k > 0 ? ~0ull : part, m1 = k > 1 ? ~0ull : (k == 1 ? part : 0ull);
    const u64 m2 = k > 2 ? ~0ull : (k == 2 ? part : 0ull), m3 = k == 3 ? part : 0ull;
    const u32 within = (u32)(__popcll(w0 & m0) + __popcll(w1 & m1) + __popcll(w2 & m2) + __popcll(w3 & m3));
    return (u32)(r & MASK34) + sub_rel(r, (u32)((i >> 8) & 3)) + within;
}

// Position of the n-th (0-based) set bit of x.
__device__ __forceinline__ u32 nth_set_bit64(u64 x, u32 n) {
    u32 pos = 0;
    u32 v = (u32)x;
    u32 c = __popc(v);
    if (n >= c) { n -= c; pos = 32; v = (u32)(x >> 32); }
    c = __popc(v & 0xFFFFu); if (n >= c) { n -= c; pos += 16; v >>= 16; }
    c = __popc(v & 0xFFu);   if (n >= c) { n -= c; pos += 8;  v >>= 8; }
    c = __popc(v & 0xFu);    if (n >= c) { n -= c; pos += 4;  v >>= 4; }
    c = __popc(v & 0x3u);    if (n >= c) { n -= c; pos += 2;  v >>= 2; }
    c = v & 1u;              if (n >= c) { pos += 1; }
    return pos;
}

// Position of zero number j (0-based) in the LOUDS bits: the select0 samples bound the block, a binary
// search over the rank directory finds it, its relative counts give the sub-block, the sub-block's four
// words (one sector, loaded together) the word, and nth_set_bit64 the bit.
__device__ u64 select0(const IndexView& I, u64 j) {
    u32 lo = __ldg(&I.louds_sel0[j >> 8]);
    u32 hi = __ldg(&I.louds_sel0[(j >> 8) + 1]);
    while (lo < hi) {
        const u32 mid = (lo + hi + 1) >> 1;
        const u64 zb = 1024ull * mid - (__ldg(&I.louds_rank[mid]) & MASK34);
        if (zb <= j) lo = mid; else hi = mid - 1;
    }
    const u64 r = __ldg(&I.louds_rank[lo]);
    u32 jj = (u32)(j - (1024ull * lo - (r & MASK34)));  // < 1024: zeros of block lo before zero j
    u32 s = 0, before = 0;
#pragma unroll
    for (u32 k = 1; k < 4; ++k) {
        const u32 z = 256 * k - sub_rel(r, k);
        if (z <= jj) { s = k; before = z; }
    }
    jj -= before;
    const u64* sub = I.louds_words + (u64)lo * 16 + 4 * s;
    const u64 w[4] = {~__ldg(&sub[0]), ~__ldg(&sub[1]), ~__ldg(&sub[2]), ~__ldg(&sub[3])};
    u32 q = 0;
#pragma unroll
    for (u32 k = 0; k < 3; ++k) {
        const u32 z = (u32)__popcll(w[k]);
        if (q == k && z <= jj) { jj -= z; q = k + 1; }
    }
    const u64 word = q == 0 ? w[0] : q == 1 ? w[1] : q == 2 ? w[2] : w[3];
    return (u64)lo * 1024 + 256 * s + 64 * q + nth_set_bit64(word, jj);
}

// ---------------------------------------------------------------------------------- PackedInts (packed.py)
// Value i of a packed array of `width` bits (width 0: every value is 0; the padding word makes the
// read of words[k + 1] safe).
__device__ __forceinline__ u32 packed_get(const u64* __restrict__ words, u32 width, u64 i) {
    if (width == 0) return 0;
    const u64 bit = i * width;
    const u64 k = bit >> 6;
    const u32 sh = (u32)(bit & 63);
    const u64 lo = __ldg(&words[k]);
    const u64 hi = __ldg(&words[k + 1]);
    const u64 v = sh ? ((lo >> sh) | (hi << (64 - sh))) : lo;
    return (u32)(v & (width >= 32 ? 0xFFFFFFFFull : ((1ull << width) - 1)));
}

// ---------------------------------------------------------------------------------- nodes (narrow_louds.py)
__device__ __forceinline__ u32 node_flags(const IndexView& I, u32 node) {
    return (__ldg(&I.nflags[node >> 3]) >> ((node & 7) * 4)) & 0xFu;
}

// Full label of child c of a node whose children [first, end) have wide labels from `mid` on.
__device__ __forceinline__ u32 child_label(const IndexView& I, u32 c, u32 mid, u32 r0) {
    const u32 lo = __ldg(&I.labels_lo[c]);
    if (c < mid) return lo;
    return lo | (packed_get(I.labels_hi, I.hi_width, (u64)r0 + (c - mid)) << 16);
}

// Child of the node with label x, or NO_NODE.
__device__ __forceinline__ u32 find_child(const IndexView& I, u32 first, u32 mid, u32 end, u32 r0, u32 x) {
    u32 lo, len;
    if (x < 65536u) { lo = first; len = mid - first; } else { lo = mid; len = end - mid; }
    while (len > 0) {
        const u32 half = len >> 1;
        if (child_label(I, lo + half, mid, r0) < x) { lo += half + 1; len -= half + 1; } else { len = half; }
    }
    const u32 lim = x < 65536u ? mid : end;
    if (lo < lim && child_label(I, lo, mid, r0) == x) return lo;
    return NO_NODE;
}

// Children [first, end) of a node (NarrowLoudsIndex.child_range): its ones run in the LOUDS bits starts
// after zero number node - 1; the next zero, usually within a few words, ends it.
__device__ __forceinline__ void child_range(const IndexView& I, u32 node, u32& first, u32& end) {
    const u64 ustart = node == 0 ? 0ull : select0(I, (u64)node - 1) + 1;
    u64 wi = ustart >> 6;
    u64 word = ~__ldg(&I.louds_words[wi]) & (~0ull << (ustart & 63));
    for (int tries = 0; word == 0 && tries < 3; ++tries) { ++wi; word = ~__ldg(&I.louds_words[wi]); }
    const u64 zpos = word ? wi * 64 + (u64)(__ffsll((long long)word) - 1) : select0(I, node);
    first = (u32)(ustart - node + 1);
    end = (u32)(zpos - node + 1);
}

// Keyword id of terminal `node` (NarrowLoudsIndex.keyword_ids_of): the map's entry at the node's terminal
// rank, or that rank itself when the index has no map (keyword_ids of width 0 and length 0).
__device__ __forceinline__ u32 keyword_id(const IndexView& I, u32 node) {
    const u32 tr = rank1(I.terminal_words, I.terminal_rank, node);
    return I.kwid_width == 0 ? tr : packed_get(I.keyword_ids, I.kwid_width, tr);
}
