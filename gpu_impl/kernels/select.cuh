// Block-wide selection: the `need` smallest of n unique 64-bit keys, sorted (the frontier's B best, the
// pool's R best).  Small inputs are bitonic-sorted whole; large ones are first cut by a radix select
// (11-bit digits from the top) to the keys at or below the need-th, then sorted.
#pragma once
#include "scoring.cuh"

#define FULL_MASK 0xffffffffu
#define RADIX_BITS 11
#define RADIX_BINS (1 << RADIX_BITS)
#ifndef SELECT_UNROLL
#define SELECT_UNROLL 8
#endif

struct SelectShared {
    u32 hist[RADIX_BINS];
    u64 prefix;
    u32 kneed;
    u32 done;
    u32 counter;
    u32 n;
    u32 misc;
};

__device__ __forceinline__ u32 pow2_at_least(u32 n) {
    u32 p = 1;
    while (p < n) p <<= 1;
    return p;
}

// Sort sk[0, n) ascending with payload si (may be null); n a power of two.
__device__ void bitonic_sort(u64* sk, u32* si, u32 n) {
    for (u32 k = 2; k <= n; k <<= 1) {
        for (u32 j = k >> 1; j > 0; j >>= 1) {
            for (u32 i = threadIdx.x; i < n; i += blockDim.x) {
                const u32 ixj = i ^ j;
                if (ixj > i) {
                    const u64 a = sk[i], b = sk[ixj];
                    const bool up = (i & k) == 0;
                    if ((a > b) == up) {
                        sk[i] = b; sk[ixj] = a;
                        if (si) { const u32 t = si[i]; si[i] = si[ixj]; si[ixj] = t; }
                    }
                }
            }
            __syncthreads();
        }
    }
}

// All n keys (n <= sort_cap) sorted into sk, their indices in si.
__device__ void sort_all(const u64* keys, u32 n, u64* sk, u32* si) {
    const u32 p = pow2_at_least(n);
    for (u32 i = threadIdx.x; i < p; i += blockDim.x) {
        sk[i] = i < n ? __ldcg(&keys[i]) : KEY_NONE;
        si[i] = i;
    }
    __syncthreads();
    bitonic_sort(sk, si, p);
}

// Histogram into sh.hist of digit (key >> shift) & (nbins - 1) over the keys whose bits above the digit
// (from bit hs) equal prefix.
__device__ void radix_histogram(const u64* keys, u32 n, u64 prefix, int shift, int hs, u32 nbins,
                                SelectShared& sh) {
    for (u32 i = threadIdx.x; i < nbins; i += blockDim.x) sh.hist[i] = 0;
    __syncthreads();
    for (u32 base = 0; base < n; base += blockDim.x * SELECT_UNROLL) {
        u64 kk[SELECT_UNROLL];
#pragma unroll
        for (int u = 0; u < SELECT_UNROLL; ++u) {  // independent loads in flight together
            const u32 i = base + u * blockDim.x + threadIdx.x;
            kk[u] = i < n ? __ldcg(&keys[i]) : 0ull;
        }
#pragma unroll
        for (int u = 0; u < SELECT_UNROLL; ++u) {
            const u32 i = base + u * blockDim.x + threadIdx.x;
            const bool act = i < n && (hs >= 64 || (kk[u] >> hs) == prefix);
            const u32 d = (u32)((kk[u] >> shift) & (nbins - 1));
            // aggregate equal digits within the warp (scores cluster: one bin is hot)
            const u32 am = __ballot_sync(FULL_MASK, act);
            if (act) {
                const u32 peers = __match_any_sync(am, d);
                if ((threadIdx.x & 31) == (u32)(__ffs(peers) - 1)) atomicAdd(&sh.hist[d], (u32)__popc(peers));
            }
        }
    }
    __syncthreads();
}

// Warp 0: the bin b holding the kneed-th key (1-based) of the histogram; sets sh.prefix = prefix . b,
// sh.kneed = its rank within the bin, sh.done = the bin holds exactly the keys still needed.
__device__ void radix_pick_bin(u64 prefix, int bits, u32 nbins, u32 kneed, SelectShared& sh) {
    if (threadIdx.x >= 32) return;
    const u32 lane = threadIdx.x;
    const u32 per = nbins / 32 > 0 ? nbins / 32 : 1;
    u32 local = 0;
    for (u32 b = lane * per; b < (lane + 1) * per && b < nbins; ++b) local += sh.hist[b];
    u32 incl = local;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const u32 v = __shfl_up_sync(FULL_MASK, incl, o);
        if (lane >= (u32)o) incl += v;
    }
    const u32 excl = incl - local;
    const u32 hit = __ballot_sync(FULL_MASK, excl < kneed && kneed <= incl);
    if (lane == (u32)(__ffs(hit) - 1)) {
        u32 cum = excl;
        u32 b = lane * per;
        for (;; ++b) {
            const u32 h = sh.hist[b];
            if (cum + h >= kneed) break;
            cum += h;
        }
        const u32 kn = kneed - cum;
        sh.prefix = (prefix << bits) | b;
        sh.kneed = kn;
        sh.done = (sh.hist[b] == kn) ? 1u : 0u;
    }
}

// Radix select: (prefix, shift) such that the keys with (key >> shift) <= prefix are the need smallest,
// plus possibly keys tying the need-th in every bit above shift (at most sort_cap in all).
__device__ int radix_threshold(const u64* keys, u32 n, u32 need, SelectShared& sh, u64& prefix_out) {
    u64 prefix = 0;
    int shift = 64;
    u32 kneed = need;
    while (true) {
        const int bits = shift >= RADIX_BITS ? RADIX_BITS : shift;
        shift -= bits;
        radix_histogram(keys, n, prefix, shift, shift + bits, 1u << bits, sh);
        radix_pick_bin(prefix, bits, 1u << bits, kneed, sh);
        __syncthreads();
        prefix = sh.prefix;
        kneed = sh.kneed;
        const bool done = sh.done != 0;
        __syncthreads();
        if (done || shift == 0) break;
    }
    prefix_out = prefix;
    return shift;
}

// The keys with (key >> shift) <= prefix, unordered, into sk / si (the first sort_cap of them).
__device__ void gather_selected(const u64* keys, u32 n, u64 prefix, int shift, u64* sk, u32* si, u32 sort_cap,
                                SelectShared& sh) {
    if (threadIdx.x == 0) sh.counter = 0;
    __syncthreads();
    for (u32 base = 0; base < n; base += blockDim.x * SELECT_UNROLL) {
        u64 kk[SELECT_UNROLL];
#pragma unroll
        for (int u = 0; u < SELECT_UNROLL; ++u) {
            const u32 i = base + u * blockDim.x + threadIdx.x;
            kk[u] = i < n ? __ldcg(&keys[i]) : KEY_NONE;
        }
#pragma unroll
        for (int u = 0; u < SELECT_UNROLL; ++u) {
            const u32 i = base + u * blockDim.x + threadIdx.x;
            if (i < n && (kk[u] >> shift) <= prefix) {
                const u32 pos = atomicAdd(&sh.counter, 1u);
                if (pos < sort_cap) { sk[pos] = kk[u]; si[pos] = i; }
            }
        }
    }
    __syncthreads();
}

// The `need` smallest of the unique keys[0, n), sorted into sk[0, need) with their indices in si.
// Returns min(need, n).  sk must hold sort_cap entries (a power of two >= need).
__device__ u32 block_select_sorted(const u64* keys, u32 n, u32 need, u64* sk, u32* si, u32 sort_cap,
                                   SelectShared& sh) {
    if (need > n) need = n;
    if (need == 0) return 0;
    if (n <= sort_cap) {
        sort_all(keys, n, sk, si);
        return need;
    }
    u64 prefix;
    const int shift = radix_threshold(keys, n, need, sh, prefix);
    gather_selected(keys, n, prefix, shift, sk, si, sort_cap, sh);
    const u32 p = pow2_at_least(need);
    for (u32 i = need + threadIdx.x; i < p; i += blockDim.x) { sk[i] = KEY_NONE; si[i] = 0; }
    __syncthreads();
    bitonic_sort(sk, si, p);
    return need;
}
