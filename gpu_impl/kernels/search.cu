// flashtrie: exact trie-constrained beam search, one persistent cooperative kernel per batch.
//
// The contract is docs/semantics.md (bit-exact with the numpy reference); the index layout is
// docs/index-format.md.  Phases, separated by grid-wide barriers:
//   phase 0        sort every proposal row (q, t) by token in shared memory (xrank = sorted position),
//                  validate the rows, seed the frontiers from the start states, zero the counters;
//   per step t:
//   A1 (resolve)   one thread per live hypothesis: a mid-edge hypothesis looks its single next token
//                  up in the row and emits; a hypothesis at a node computes its child range (select0 on
//                  the LOUDS bits), the split between 16-bit and wide labels, and queues work chunks;
//   A2 (intersect) one warp per chunk of 32 items: either 32 children (label -> binary search in the
//                  sorted row) or 32 row entries (token -> binary search among the children);
//                  candidates go to per-query append buffers (warp-aggregated atomics);
//   B  (select)    one block per (query, frontier|pool): radix-select the B (R) smallest unique 64-bit
//                  keys, bitonic-sort them; the frontier becomes the sorted winners, the pool is merged.
// All float arithmetic that reaches the output is __fadd_rn / __fmul_rn (no contraction, no FTZ).

#include <cooperative_groups.h>

namespace cg = cooperative_groups;

typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned short u16;
typedef long long i64;

#ifndef FT_THREADS
#define FT_THREADS 512
#endif
#ifndef FT_MIN_BLOCKS
#define FT_MIN_BLOCKS 1
#endif

#define FT_WARPS (FT_THREADS / 32)
#define FULL_MASK 0xffffffffu
#define MASK40 0xFFFFFFFFFFull
#define PAD_TOKEN 0xFFFFFFFFu
#define NO_NODE 0xFFFFFFFFu
#define KEY_NONE 0xFFFFFFFFFFFFFFFFull

// hypothesis kinds (top 2 bits of payload word 3)
#define KIND_AT_NODE 0u
#define KIND_MID 1u        // aux = suffix index of the next token, rem (w2 >> 16) = tokens left on the edge
#define KIND_LINKED_OFF 2u // aux = off (tokens of the edge consumed); resolved through link_starts

// error bits
#define ERR_BAD_LOGPROB 1u
#define ERR_DUPLICATE 2u
#define ERR_OVERFLOW 4u
#define ERR_BAD_TOKEN 8u  // a negative int32 token other than -1

// select digit widths: 6 passes of 11 bits (last one 9)
#define RADIX_BITS 11
#define RADIX_BINS (1 << RADIX_BITS)
#ifndef SELECT_UNROLL
#define SELECT_UNROLL 8
#endif

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

struct Params {
    const u32* tok_in;     // [Q, T, K] proposals (uint32, padding 2^32-1)
    const float* lp_in;    // [Q, T, K]
    const uint4* starts;   // [Q] start hypotheses (w0 == NO_NODE: invalid prefix)
    const float* ln;       // [ln_len] length-norm table
    u32* row_tok;          // [Q*T, K] sorted tokens
    float* row_lp;         // [Q*T, K] logprobs in sorted order (NaN where <= tau)
    u32* row_nv;           // [Q*T] non-padding entries per row
    float* row_max;        // [Q*T] largest usable logprob of the row (-inf: none), for the early stop
    uint4* fr0;            // [Q, B] frontier, double-buffered
    uint4* fr1;
    u32* nf;               // [Q] frontier sizes
    uint4* tasks;          // [Q*B, 2] per-hypothesis expansion tasks
    uint2* chunks;         // [chunk_cap] (hypothesis, first item)
    u64* fkey;             // [Q, cand_cap] frontier candidate keys
    uint4* fpay;           // [Q, cand_cap]
    u64* pkey;             // [Q, cand_cap] pool candidate keys
    uint4* ppay;           // [Q, cand_cap] (node, s, n, len)
    u32* fcount;           // [Q]
    u32* pcount;           // [Q]
    uint4* pool0;          // [Q, R] (kwid, s, n, len), double-buffered
    uint4* pool1;
    u32* pool_n;           // [Q]
    u32* pool_sel;         // [Q] which pool buffer is current
    u32* pool_worst;       // [2, Q] desc key of the worst pool entry when full, else 0xFFFFFFFF; half t & 1 is
                           // read during step t, half (t + 1) & 1 written by its pool merge (deterministic)
    u32* step_chunks;      // [T]
    u32* step_alive;       // [T]
    u32* err;              // [1] zeroed by the host upload
    u32* out_err;          // [1] copy of *err for the host
    i64* out_ids;          // [Q, R]
    float* out_scores;     // [Q, R]
    float* out_norms;      // [Q, R]
    int* out_lens;         // [Q, R]
    int* out_nres;         // [Q]
    u32* out_stats;        // [T, 4] per step: frontier candidates, pool candidates, work chunks, live queries
    u64 cand_cap;
    u64 chunk_cap;
    u32 Q, T, K, B;
    u32 R, kpad, sort_cap, ln_len;
    float thr_tau, thr_sigma;
    float ln_min, ln_max;  // extremes of ln[1 ..] (the early-stop bound)
    u32 signed_tokens;     // 1: tok_in holds int32 (valid: 0 .. 2^31-1, and -1 for padding)
    u32 pad0;
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

__device__ __forceinline__ float from_desc_key32(u32 k) {
    const u32 asc = ~k;
    return __uint_as_float((asc & 0x80000000u) ? (asc & 0x7FFFFFFFu) : ~asc);
}

// Monotone key: ascending key = descending score; -0.0 and +0.0 share a key.
__device__ __forceinline__ u32 desc_key32(float v) {
    const u32 b = __float_as_uint(__fadd_rn(v, 0.0f));
    const u32 asc = (b >> 31) ? ~b : (b | 0x80000000u);
    return ~asc;
}

// First position p in sorted row[0, n) with row[p] >= x.
__device__ __forceinline__ u32 row_lower_bound(const u32* row, u32 n, u32 x) {
    u32 lo = 0, len = n;
    while (len > 0) {
        const u32 half = len >> 1;
        if (row[lo + half] < x) { lo += half + 1; len -= half + 1; } else { len = half; }
    }
    return lo;
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

// ---------------------------------------------------------------------------------- block helpers
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

// Sort sk[0, n) ascending with payload si; n a power of two.
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

// The `need` smallest of the unique keys[0, n), sorted into sk[0, need) with their indices in si.
// Returns need.  sk must hold sort_cap entries (a power of two >= need).
__device__ u32 block_select_sorted(const u64* keys, u32 n, u32 need, u64* sk, u32* si, u32 sort_cap,
                                   SelectShared& sh) {
    if (need > n) need = n;
    if (need == 0) return 0;
    if (n <= sort_cap) {
        const u32 p = pow2_at_least(n);
        for (u32 i = threadIdx.x; i < p; i += blockDim.x) {
            sk[i] = i < n ? __ldcg(&keys[i]) : KEY_NONE;
            si[i] = i;
        }
        __syncthreads();
        bitonic_sort(sk, si, p);
        return need;
    }
    u64 prefix = 0;
    int shift = 64;
    u32 kneed = need;
    while (true) {
        const int bits = shift >= RADIX_BITS ? RADIX_BITS : shift;
        shift -= bits;
        const u32 nbins = 1u << bits;
        for (u32 i = threadIdx.x; i < nbins; i += blockDim.x) sh.hist[i] = 0;
        __syncthreads();
        const int hs = shift + bits;  // bits above the current digit
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
        if (threadIdx.x < 32) {
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
        __syncthreads();
        prefix = sh.prefix;
        kneed = sh.kneed;
        const bool done = sh.done != 0;
        __syncthreads();
        if (done || shift == 0) break;
    }
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
    const u32 p = pow2_at_least(need);
    for (u32 i = need + threadIdx.x; i < p; i += blockDim.x) { sk[i] = KEY_NONE; si[i] = 0; }
    __syncthreads();
    bitonic_sort(sk, si, p);
    return need;
}

// ---------------------------------------------------------------------------------- emission
struct Cand {
    bool f;      // frontier candidate
    bool p;      // pool candidate
    u64 fk;
    uint4 fp;
    u64 pk;
    uint4 pp;
};

// Candidate c = h + [x]: node `node` reached with `rem` tokens of its edge left (kind MID when rem > 0,
// sufbase the suffix index of the next token), or entering `node` via its label (entered = true).
__device__ __forceinline__ void make_cand(const IndexView& I, const Params& P, const u32* worst, u32 q, u32 r,
                                          u32 xrank, float s_h, float l, u32 len_h, u32 node, bool entered,
                                          u32 rem, u32 sufbase, Cand& c) {
    c.f = false;
    c.p = false;
    const float s = __fadd_rn(s_h, l);
    if (!(s > P.thr_sigma)) return;  // also drops NaN (a proposal at or under the token threshold)
    const u32 len = len_h + 1;
    const u64 low = ((u64)r << 16) | xrank;
    const u64 fk = ((u64)desc_key32(s) << 32) | low;
    if (entered) {
        const u32 fl = node_flags(I, node);
        if (fl & 1u) {  // linked: now mid-edge at off 1
            c.f = true; c.fk = fk;
            c.fp = make_uint4(node, __float_as_uint(s), len, (KIND_LINKED_OFF << 30) | 1u);
            return;
        }
        rem = 0;
        if (fl & 4u) {
            c.f = true; c.fk = fk;
            c.fp = make_uint4(node, __float_as_uint(s), len, KIND_AT_NODE << 30);
        }
        if (fl & 2u) {
            const float n = __fmul_rn(s, __ldg(&P.ln[len < P.ln_len ? len : P.ln_len - 1]));
            const u32 dk = desc_key32(n);
            if (dk < __ldcg(&worst[q])) {
                c.p = true;
                c.pk = ((u64)dk << 32) | low;
                c.pp = make_uint4(node, __float_as_uint(s), __float_as_uint(n), len);
            }
        }
        return;
    }
    if (rem > 0) {
        c.f = true; c.fk = fk;
        c.fp = make_uint4(node, __float_as_uint(s), len | (rem << 16), (KIND_MID << 30) | sufbase);
        return;
    }
    const u32 fl = node_flags(I, node);
    if (fl & 4u) {
        c.f = true; c.fk = fk;
        c.fp = make_uint4(node, __float_as_uint(s), len, KIND_AT_NODE << 30);
    }
    if (fl & 2u) {
        const float n = __fmul_rn(s, __ldg(&P.ln[len < P.ln_len ? len : P.ln_len - 1]));
        const u32 dk = desc_key32(n);
        if (dk < __ldcg(&worst[q])) {
            c.p = true;
            c.pk = ((u64)dk << 32) | low;
            c.pp = make_uint4(node, __float_as_uint(s), __float_as_uint(n), len);
        }
    }
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

__device__ __forceinline__ void store_cand_thread(const Params& P, u32 q, const Cand& c) {
    if (c.f) put_cand(P, P.fkey, P.fpay, q, atomicAdd(&P.fcount[q], 1u), c.fk, c.fp);
    if (c.p) put_cand(P, P.pkey, P.ppay, q, atomicAdd(&P.pcount[q], 1u), c.pk, c.pp);
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

// Whole warp, same query q.
__device__ __forceinline__ void store_cand_warp(const Params& P, u32 q, const Cand& c) {
    const u32 fm = __ballot_sync(FULL_MASK, c.f);
    if (fm) {
        const u32 i = warp_slot(&P.fcount[q], fm);
        if (c.f) put_cand(P, P.fkey, P.fpay, q, i, c.fk, c.fp);
    }
    const u32 pm = __ballot_sync(FULL_MASK, c.p);
    if (pm) {
        const u32 i = warp_slot(&P.pcount[q], pm);
        if (c.p) put_cand(P, P.pkey, P.ppay, q, i, c.pk, c.pp);
    }
}

// ---------------------------------------------------------------------------------- the kernel
extern "C" __global__ void __launch_bounds__(FT_THREADS, FT_MIN_BLOCKS)
flashtrie_search(const IndexView* __restrict__ index_ptr, const Params* __restrict__ params_ptr) {
    cg::grid_group grid = cg::this_grid();
    __shared__ IndexView I;
    __shared__ Params P;
    __shared__ SelectShared sh;
    extern __shared__ __align__(16) unsigned char dyn_smem[];

    if (threadIdx.x == 0) { I = *index_ptr; P = *params_ptr; }
    __syncthreads();

    const u32 Q = P.Q, T = P.T, K = P.K, B = P.B, R = P.R;
    u64* sk = reinterpret_cast<u64*>(dyn_smem);
    // dynamic shared memory: sk (max(kpad, sort_cap) keys), si and sold (sort_cap each)
    u32* si = reinterpret_cast<u32*>(dyn_smem + sizeof(u64) * max(P.sort_cap, P.kpad));
    u32* sold = si + P.sort_cap;  // desc keys of the old pool during a merge
    const u64 gtid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 gthreads = (u64)gridDim.x * blockDim.x;
    const u32 lane = threadIdx.x & 31;
    const u64 gwarp = gtid >> 5;
    const u64 nwarps = gthreads >> 5;

    // ------------------------------------------------------------------ phase 0
    for (u64 i = gtid; i < Q; i += gthreads) {
        const uint4 st = P.starts[i];
        if (st.x != NO_NODE) { P.fr0[i * B] = st; P.nf[i] = 1; } else { P.nf[i] = 0; }
        P.fcount[i] = 0; P.pcount[i] = 0; P.pool_n[i] = 0; P.pool_sel[i] = 0;
    }
    for (u64 i = gtid; i < 2ull * Q; i += gthreads) P.pool_worst[i] = 0xFFFFFFFFu;
    for (u64 i = gtid; i < T; i += gthreads) { P.step_chunks[i] = 0; P.step_alive[i] = 0; }
    for (u64 i = gtid; i < 4ull * T; i += gthreads) P.out_stats[i] = 0;
    const u32 kpad = P.kpad;
    for (u32 row = blockIdx.x; row < Q * T; row += gridDim.x) {
        const u64 rb = (u64)row * K;
        u32 bad = 0;
        u32 best = 0xFFFFFFFFu;  // desc key of the largest usable logprob
        if (threadIdx.x == 0) sh.misc = 0xFFFFFFFFu;
        for (u32 k = threadIdx.x; k < kpad; k += blockDim.x) {
            u64 key = KEY_NONE;
            if (k < K) {
                const u32 tok = P.tok_in[rb + k];
                if (P.signed_tokens && tok >= 0x80000000u && tok != PAD_TOKEN) bad |= ERR_BAD_TOKEN;
                if (tok != PAD_TOKEN) {
                    const float l = P.lp_in[rb + k];
                    if (isnan(l) || (isinf(l) && l > 0.0f)) bad |= ERR_BAD_LOGPROB;
                    if (l > P.thr_tau) best = min(best, desc_key32(l));
                    key = ((u64)tok << 32) | k;
                }
            }
            sk[k] = key;
        }
        if (threadIdx.x == 0) sh.n = 0;
        __syncthreads();
        best = __reduce_min_sync(FULL_MASK, best);
        if ((threadIdx.x & 31) == 0) atomicMin(&sh.misc, best);
        bitonic_sort(sk, nullptr, kpad);
        for (u32 p = threadIdx.x; p < kpad; p += blockDim.x) {
            const u64 key = sk[p];
            if (key == KEY_NONE) continue;
            const u32 tok = (u32)(key >> 32);
            const float l = P.lp_in[rb + (u32)(key & 0xFFFFFFFFu)];
            P.row_tok[rb + p] = tok;
            P.row_lp[rb + p] = (l > P.thr_tau) ? l : __int_as_float(0x7fc00000);
            if (p > 0 && (u32)(sk[p - 1] >> 32) == tok) bad |= ERR_DUPLICATE;
            if (p + 1 == kpad || sk[p + 1] == KEY_NONE) sh.n = p + 1;
        }
        if (bad) atomicOr(P.err, bad);
        __syncthreads();
        if (threadIdx.x == 0) {
            P.row_nv[row] = sh.n;
            P.row_max[row] = sh.misc == 0xFFFFFFFFu ? __int_as_float(0xff800000) : from_desc_key32(sh.misc);
        }
        __syncthreads();
    }
    grid.sync();
    if (__ldcg(P.err) & (ERR_BAD_LOGPROB | ERR_DUPLICATE | ERR_BAD_TOKEN)) {  // uniform across the grid
        if (gtid == 0) *P.out_err = __ldcg(P.err);
        return;
    }

    // ------------------------------------------------------------------ steps
    u32 t = 0;
    for (; t < T; ++t) {
        const uint4* fr = (t & 1) ? P.fr1 : P.fr0;
        uint4* fr_next = (t & 1) ? P.fr0 : P.fr1;
        const u32* worst_cur = P.pool_worst + (u64)(t & 1) * Q;  // not written during this step
        u32* worst_next = P.pool_worst + (u64)((t + 1) & 1) * Q;

        // ---------------- A1: resolve hypotheses
        for (u64 h = gtid; h < (u64)Q * B; h += gthreads) {
            const u32 q = (u32)(h / B);
            const u32 r = (u32)(h % B);
            if (r >= __ldcg(&P.nf[q])) continue;
            const uint4 hy = __ldcg(&fr[h]);
            const u32 node = hy.x;
            const float s_h = __uint_as_float(hy.y);
            const u32 len_h = hy.z & 0xFFFFu;
            const u32 kind = hy.w >> 30;
            const u32 row = q * T + t;
            const u32 nv = __ldcg(&P.row_nv[row]);
            const u32* rt = P.row_tok + (u64)row * K;
            if (kind == KIND_AT_NODE) {
                const u64 ustart = node == 0 ? 0ull : select0(I, (u64)node - 1) + 1;
                u64 wi = ustart >> 6;
                u64 word = ~__ldg(&I.louds_words[wi]) & (~0ull << (ustart & 63));
                for (int tries = 0; word == 0 && tries < 3; ++tries) { ++wi; word = ~__ldg(&I.louds_words[wi]); }
                const u64 zpos = word ? wi * 64 + (u64)(__ffsll((long long)word) - 1) : select0(I, node);
                const u32 first = (u32)(ustart - node + 1);
                const u32 end = (u32)(zpos - node + 1);
                const u32 d = end - first;
                u32 w = 0, mode = 0;
                if (d > 0 && nv > 0) { if (d <= nv) { w = d; mode = 0; } else { w = nv; mode = 1; } }
                if (w == 0) continue;
                const u32 r0 = rank1(I.hi_words, I.hi_rank, first);
                const u32 rE = rank1(I.hi_words, I.hi_rank, end);
                const u32 mid = end - (rE - r0);
                P.tasks[2 * h] = make_uint4(first, mid, end, r0);
                P.tasks[2 * h + 1] = make_uint4(hy.y, len_h, w, mode);
                const u32 nch = (w + 31) / 32;
                const u32 base = atomicAdd(&P.step_chunks[t], nch);
                for (u32 c = 0; c < nch; ++c) {
                    if ((u64)base + c < P.chunk_cap) P.chunks[base + c] = make_uint2((u32)h, c * 32);
                    else atomicOr(P.err, ERR_OVERFLOW);
                }
            } else {
                u32 sufbase, rem;
                if (kind == KIND_MID) {
                    sufbase = hy.w & 0x3FFFFFFFu;
                    rem = hy.z >> 16;
                } else {
                    const u32 off = hy.w & 0x3FFFFFFFu;
                    const u32 lr = rank1(I.linked_words, I.linked_rank, node);
                    const u32 a = packed_get(I.link_starts, I.ls_width, lr);
                    const u32 b = packed_get(I.link_starts, I.ls_width, (u64)lr + 1);
                    sufbase = a + off - 1;
                    rem = (b - a) - (off - 1);
                }
                const u32 x = packed_get(I.suffix, I.suffix_width, sufbase);
                const u32 p = row_lower_bound(rt, nv, x);
                if (p < nv && rt[p] == x) {
                    Cand c;
                    const float l = P.row_lp[(u64)row * K + p];
                    make_cand(I, P, worst_cur, q, r, p, s_h, l, len_h, node, false, rem - 1, sufbase + 1, c);
                    store_cand_thread(P, q, c);
                }
            }
        }
        grid.sync();

        // ---------------- A2: intersect children with rows
        const u32 nch = min((u64)__ldcg(&P.step_chunks[t]), P.chunk_cap);
        for (u64 ci = gwarp; ci < nch; ci += nwarps) {
            const uint2 ch = __ldcg(&P.chunks[ci]);
            const u32 h = ch.x;
            const u32 q = h / B;
            const u32 r = h % B;
            const uint4 t0 = __ldcg(&P.tasks[2 * h]);
            const uint4 t1 = __ldcg(&P.tasks[2 * h + 1]);
            const u32 first = t0.x, mid = t0.y, end = t0.z, r0 = t0.w;
            const float s_h = __uint_as_float(t1.x);
            const u32 len_h = t1.y, w = t1.z, mode = t1.w;
            const u32 row = q * T + t;
            const u32 nv = __ldcg(&P.row_nv[row]);
            const u32* rt = P.row_tok + (u64)row * K;
            const u32 item = ch.y + lane;
            Cand c;
            c.f = false; c.p = false;
            if (item < w) {
                u32 child = NO_NODE, p = 0;
                if (mode == 0) {
                    const u32 cc = first + item;
                    const u32 x = child_label(I, cc, mid, r0);
                    p = row_lower_bound(rt, nv, x);
                    if (p < nv && rt[p] == x) child = cc;
                } else {
                    p = item;
                    child = find_child(I, first, mid, end, r0, rt[p]);
                }
                if (child != NO_NODE) {
                    const float l = P.row_lp[(u64)row * K + p];
                    make_cand(I, P, worst_cur, q, r, p, s_h, l, len_h, child, true, 0, 0, c);
                }
            }
            store_cand_warp(P, q, c);
        }
        grid.sync();

        // ---------------- B: select the next frontier and merge the pool
        for (u32 job = blockIdx.x; job < 2 * Q; job += gridDim.x) {
            if (job < Q) {
                if (t + 1 == T) continue;  // no step follows: the frontier is not needed
                const u32 q = job;
                const u32 n = min((u64)__ldcg(&P.fcount[q]), P.cand_cap);
                if (threadIdx.x == 0) atomicAdd(&P.out_stats[4 * t], n);
                const u32 got = block_select_sorted(P.fkey + (u64)q * P.cand_cap, n, B, sk, si, P.sort_cap, sh);
                for (u32 i = threadIdx.x; i < got; i += blockDim.x)
                    fr_next[(u64)q * B + i] = __ldcg(&P.fpay[(u64)q * P.cand_cap + si[i]]);
                if (threadIdx.x == 0) {
                    u32 live = got;
                    // Early stop (docs/semantics.md, allowed shortcut): once the pool is full, stop when no
                    // later candidate can beat its worst entry.  The best frontier score plus the largest
                    // usable logprob of each later row bounds every later score (float addition and
                    // multiplication are monotone); LN's extremes bound the length factor.  A later entry
                    // equal to the worst loses the tie (older first), and the worst only improves.
                    const u32 worst = __ldcg(&worst_cur[q]);  // the pool as of the last step: a valid bound
                    if (got && worst != 0xFFFFFFFFu) {
                        float S = __uint_as_float(__ldcg(&P.fpay[(u64)q * P.cand_cap + si[0]]).y);
                        bool finished = true;
                        for (u32 k = t + 1; k < T; ++k) {
                            const float M = P.row_max[q * T + k];
                            if (isinf(M) && M < 0.0f) break;  // no usable proposal: the search ends there
                            S = __fadd_rn(S, M);
                            if (isinf(S)) { finished = S < 0.0f; break; }
                            const float n1 = __fmul_rn(S, P.ln_min), n2 = __fmul_rn(S, P.ln_max);
                            if (min(desc_key32(n1), desc_key32(n2)) < worst) { finished = false; break; }
                        }
                        if (finished) live = 0;
                    }
                    P.nf[q] = live;
                    P.fcount[q] = 0;
                    if (live) atomicAdd(&P.step_alive[t], 1u);
                }
            } else {
                const u32 q = job - Q;
                if (threadIdx.x == 0) worst_next[q] = __ldcg(&worst_cur[q]);  // replaced below when it changes
                const u32 n = min((u64)__ldcg(&P.pcount[q]), P.cand_cap);
                if (threadIdx.x == 0) atomicAdd(&P.out_stats[4 * t + 1], n);
                const u32 got = block_select_sorted(P.pkey + (u64)q * P.cand_cap, n, R, sk, si, P.sort_cap, sh);
                if (got) {
                    const u32 sel = __ldcg(&P.pool_sel[q]);
                    const uint4* old = (sel ? P.pool1 : P.pool0) + (u64)q * R;
                    uint4* nw = (sel ? P.pool0 : P.pool1) + (u64)q * R;
                    const u32 nold = __ldcg(&P.pool_n[q]);
                    for (u32 i = threadIdx.x; i < nold; i += blockDim.x)
                        sold[i] = desc_key32(__uint_as_float(__ldcg(&old[i]).z));
                    __syncthreads();
                    // old entries: ties on n keep the older entry first
                    for (u32 i = threadIdx.x; i < nold; i += blockDim.x) {
                        const u64 k = (u64)sold[i] << 32;  // new keys < k: strictly better
                        u32 lo = 0, len = got;
                        while (len > 0) {
                            const u32 half = len >> 1;
                            if (sk[lo + half] < k) { lo += half + 1; len -= half + 1; } else { len = half; }
                        }
                        const u32 pos = i + lo;
                        if (pos < R) nw[pos] = __ldcg(&old[i]);
                    }
                    for (u32 j = threadIdx.x; j < got; j += blockDim.x) {
                        const u32 k32 = (u32)(sk[j] >> 32);
                        u32 lo = 0, len = nold;  // old entries with key <= k32 come first
                        while (len > 0) {
                            const u32 half = len >> 1;
                            if (sold[lo + half] <= k32) { lo += half + 1; len -= half + 1; } else { len = half; }
                        }
                        const u32 pos = j + lo;
                        if (pos < R) {
                            const uint4 pp = __ldcg(&P.ppay[(u64)q * P.cand_cap + si[j]]);
                            const u32 tr = rank1(I.terminal_words, I.terminal_rank, pp.x);
                            const u32 kw = packed_get(I.keyword_ids, I.kwid_width, tr);
                            nw[pos] = make_uint4(kw, pp.y, pp.z, pp.w);
                        }
                    }
                    __syncthreads();
                    if (threadIdx.x == 0) {
                        const u32 nn = min(R, nold + got);
                        P.pool_n[q] = nn;
                        P.pool_sel[q] = sel ^ 1u;
                        if (nn == R) {
                            __threadfence_block();
                            worst_next[q] = desc_key32(__uint_as_float(__ldcg(&nw[R - 1]).z));
                        }
                    }
                }
                if (threadIdx.x == 0) P.pcount[q] = 0;
            }
            __syncthreads();
        }
        grid.sync();
        if (gtid == 0) {
            P.out_stats[4 * t + 2] = __ldcg(&P.step_chunks[t]);
            P.out_stats[4 * t + 3] = __ldcg(&P.step_alive[t]);
        }
        if (__ldcg(&P.step_alive[t]) == 0) break;
    }

    // ------------------------------------------------------------------ results
    for (u32 q = blockIdx.x; q < Q; q += gridDim.x) {
        const u32 np = __ldcg(&P.pool_n[q]);
        const uint4* pool = (__ldcg(&P.pool_sel[q]) ? P.pool1 : P.pool0) + (u64)q * R;
        for (u32 i = threadIdx.x; i < R; i += blockDim.x) {
            const u64 o = (u64)q * R + i;
            if (i < np) {
                const uint4 e = __ldcg(&pool[i]);
                P.out_ids[o] = (i64)e.x;
                P.out_scores[o] = __uint_as_float(e.y);
                P.out_norms[o] = __uint_as_float(e.z);
                P.out_lens[o] = (int)e.w;
            } else {
                P.out_ids[o] = -1;
                P.out_scores[o] = __int_as_float(0xff800000);
                P.out_norms[o] = __int_as_float(0xff800000);
                P.out_lens[o] = 0;
            }
        }
        if (threadIdx.x == 0) P.out_nres[q] = (int)np;
    }
    if (gtid == 0) *P.out_err = __ldcg(P.err);
}
