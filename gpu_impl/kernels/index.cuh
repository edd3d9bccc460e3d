// flashtrie: index reads shared by the kernels (docs/index-format.md), copied verbatim from search.cu.
#pragma once

typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned short u16;
typedef long long i64;

#define MASK40 0xFFFFFFFFFFull
#define NO_NODE 0xFFFFFFFFu

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
    const u32* nflags;  // 4 bits per node: 1 linked, 2 terminal, 4 has a child
    u32 hi_width, ls_width, suffix_width, kwid_width;
    u32 num_nodes, pad0, pad1, pad2;
};

// ---------------------------------------------------------------------------------- bit helpers
__device__ __forceinline__ u32 rank1(const u64* __restrict__ words, const u64* __restrict__ rank, u64 i) {
    const u64 r = __ldg(&rank[i >> 8]);
    const u64 w = __ldg(&words[i >> 6]);
    const u32 sub = (u32)((i >> 6) & 3);
    const u32 rel = sub == 0 ? 0u : (u32)((r >> (32 + 8 * sub)) & 0xFF);
    const u32 b = (u32)(i & 63);
    const u64 m = b ? (w & ((1ull << b) - 1)) : 0ull;
    return (u32)(r & MASK40) + rel + (u32)__popcll(m);
}

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

// Position of zero number j (0-based) in the LOUDS bits.
__device__ u64 select0(const IndexView& I, u64 j) {
    u32 lo = __ldg(&I.louds_sel0[j >> 8]);
    u32 hi = __ldg(&I.louds_sel0[(j >> 8) + 1]);
    while (lo < hi) {
        const u32 mid = (lo + hi + 1) >> 1;
        const u64 zb = 256ull * mid - (__ldg(&I.louds_rank[mid]) & MASK40);
        if (zb <= j) lo = mid; else hi = mid - 1;
    }
    const u64 r = __ldg(&I.louds_rank[lo]);
    const u64 jj = j - (256ull * lo - (r & MASK40));
    u32 w = 0, relw = 0;
#pragma unroll
    for (u32 k = 1; k < 4; ++k) {
        const u32 rel = (u32)((r >> (32 + 8 * k)) & 0xFF);
        if ((u64)(64 * k - rel) <= jj) { w = k; relw = rel; }
    }
    const u32 rem = (u32)(jj - (64 * w - relw));
    const u64 word = ~__ldg(&I.louds_words[(u64)lo * 4 + w]);
    return (u64)lo * 256 + 64 * w + nth_set_bit64(word, rem);
}

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
