// flashtrie: exact trie-constrained beam search, one persistent cooperative kernel per batch.
//
// The contract is docs/semantics.md (bit-exact with reference_cpu/numpy_search.py, whose step loop the
// kernel body below follows); the index layout is docs/index-format.md.  Phases, separated by grid-wide
// barriers:
//   sort_rows          sort every proposal row (q, t) by token (xrank = sorted position), validate it;
//                      seed the frontiers from the start states
//   per step t:
//   expand: resolve    one thread per hypothesis: stop the query early (early_stop), else a mid-edge
//                      hypothesis looks its one next token up in the row and emits; a hypothesis at a node
//                      computes its child range and queues work chunks
//   expand: intersect  one warp per chunk of 32 items: 32 children (label -> binary search in the sorted
//                      row) or 32 row entries (token -> binary search among the children); emits
//   select / offer     one block per (query, frontier | pool): the B best candidates become the next
//                      frontier (or none, early_stop); the R best pool candidates are merged into the pool
//   write_results      the pools, as the output arrays
#include <cooperative_groups.h>

#include "index.cuh"
#include "scoring.cuh"
#include "hypothesis.cuh"
#include "params.cuh"
#include "select.cuh"
#include "emit.cuh"

namespace cg = cooperative_groups;

#ifndef FT_THREADS
#define FT_THREADS 512
#endif
#ifndef FT_MIN_BLOCKS
#define FT_MIN_BLOCKS 1
#endif

// Where this thread is in the grid, and the block's shared scratch.
struct Ctx {
    u64 gtid, gthreads, gwarp, nwarps;
    u64* sk;    // sort keys: max(kpad, sort_cap)
    u32* si;    // their indices: sort_cap
    u32* sold;  // desc keys of the old pool during a merge: sort_cap
};

// First position p in sorted row[0, n) with row[p] >= x.
__device__ __forceinline__ u32 row_lower_bound(const u32* row, u32 n, u32 x) {
    u32 lo = 0, len = n;
    while (len > 0) {
        const u32 half = len >> 1;
        if (row[lo + half] < x) { lo += half + 1; len -= half + 1; } else { len = half; }
    }
    return lo;
}

// ---------------------------------------------------------------------------------- start
// Frontiers from the start states; every counter zeroed.
__device__ void seed_frontiers(const Params& P, const Ctx& c) {
    for (u64 i = c.gtid; i < P.Q; i += c.gthreads) {
        const uint4 st = P.starts[i];
        if (st.x != NO_NODE) { P.fr0[i * P.B] = st; P.nf[i] = 1; } else { P.nf[i] = 0; }
        P.fcount[i] = 0; P.pcount[i] = 0; P.pool_n[i] = 0; P.pool_sel[i] = 0;
    }
    for (u64 i = c.gtid; i < 2ull * P.Q; i += c.gthreads) P.pool_worst[i] = DESC_KEY_NONE;
    for (u64 i = c.gtid; i < P.T; i += c.gthreads) { P.step_chunks[i] = 0; P.step_alive[i] = 0; }
    for (u64 i = c.gtid; i < (u64)NUM_STATS * P.T; i += c.gthreads) P.out_stats[i] = 0;
}

// scoring.sort_rows for one row, by the whole block: tokens sorted (padding last), logprobs <= tau
// replaced by NaN, the row's valid count and best valid logprob; bad input raises bits of *err.
__device__ void sort_row(const Params& P, u32 row, u64* sk, SelectShared& sh) {
    const u64 rb = (u64)row * P.K;
    u32 bad = 0;
    u32 best = DESC_KEY_NONE;  // desc key of the best valid logprob
    if (threadIdx.x == 0) sh.misc = DESC_KEY_NONE;
    for (u32 k = threadIdx.x; k < P.kpad; k += blockDim.x) {
        u64 key = KEY_NONE;
        if (k < P.K) {
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
    bitonic_sort(sk, nullptr, P.kpad);
    for (u32 p = threadIdx.x; p < P.kpad; p += blockDim.x) {
        const u64 key = sk[p];
        if (key == KEY_NONE) continue;
        const u32 tok = (u32)(key >> 32);
        const float l = P.lp_in[rb + (u32)(key & 0xFFFFFFFFu)];
        P.row_tok[rb + p] = tok;
        P.row_lp[rb + p] = (l > P.thr_tau) ? l : __int_as_float(0x7fc00000);
        if (p > 0 && (u32)(sk[p - 1] >> 32) == tok) bad |= ERR_DUPLICATE;
        if (p + 1 == P.kpad || sk[p + 1] == KEY_NONE) sh.n = p + 1;
    }
    if (bad) atomicOr(P.err, bad);
    __syncthreads();
    if (threadIdx.x == 0) {
        P.row_nv[row] = sh.n;
        P.row_max[row] = sh.misc == DESC_KEY_NONE ? __int_as_float(0xff800000) : from_desc_key32(sh.misc);
    }
    __syncthreads();
}

// ---------------------------------------------------------------------------------- early stop
// numpy_search._early_stop: query q's pool (worst entry `worst`) is full and scoring.pool_closed holds for
// its best frontier score and worst pool n, over the rows t .. T-1 still to run (t < T; m_t: the max of
// row t, loaded by the caller).  Checked where step t
// starts, against the pool numpy decides on (the merge of step t - 1), and already at the end of step
// t - 1 against the pool before that merge: the worst only improves, so a query that stops there stops
// in numpy too, and the search can end without another pass.
__device__ __forceinline__ bool early_stop(const Params& P, float best, u32 worst, float m_t, u32 q, u32 t) {
    if (worst == DESC_KEY_NONE) return false;
    return pool_closed(best, from_desc_key32(worst), m_t, P.row_max + (u64)q * P.T + t + 1, P.T - t - 1, P.ln_min,
                       P.ln_max);
}

// ---------------------------------------------------------------------------------- expand: resolve
// A mid-edge hypothesis: its one next token is in the suffix store; look it up in the row and emit.
__device__ void expand_mid_edge(const IndexView& I, const Params& P, const Hyp& hy, u32 q, u32 r, u32 row,
                                u32 nv, u32 worst) {
    u32 sufbase, rem;
    if (hy.kind() == KIND_MID) {
        sufbase = hy.aux();
        rem = hy.rem();
    } else {  // LINKED_OFF: find the edge's tail through link_starts
        const u32 off = hy.aux();
        const u32 lr = rank1(I.linked_words, I.linked_rank, hy.node());
        const u32 a = packed_get(I.link_starts, I.ls_width, lr);
        const u32 b = packed_get(I.link_starts, I.ls_width, (u64)lr + 1);
        sufbase = a + off - 1;
        rem = (b - a) - (off - 1);
    }
    const u32 x = packed_get(I.suffix, I.suffix_width, sufbase);
    const u32 p = row_lower_bound(P.row_tok + (u64)row * P.K, nv, x);
    if (p < nv && P.row_tok[(u64)row * P.K + p] == x) {
        Cand c;
        const float l = P.row_lp[(u64)row * P.K + p];
        make_cand(I, P, worst, r, p, hy.score(), l, hy.length(), hy.node(), false, rem - 1, sufbase + 1, c);
        store_cand_thread(P, q, c);
    }
}

// A hypothesis at a node: its children against the row, as an ExpandTask split into 32-item chunks
// (enumerate the children when there are at most as many as valid proposals, else the proposals).
__device__ void queue_children(const IndexView& I, const Params& P, const Hyp& hy, u64 h, u32 nv, u32 t) {
    u32 first, end;
    child_range(I, hy.node(), first, end);
    const u32 d = end - first;
    if (d == 0 || nv == 0) return;
    const u32 w = d <= nv ? d : nv;
    const u32 mode = d <= nv ? 0u : 1u;
    const u32 r0 = rank1(I.hi_words, I.hi_rank, first);
    const u32 rE = rank1(I.hi_words, I.hi_rank, end);
    const u32 mid = end - (rE - r0);
    P.tasks[2 * h] = make_uint4(first, mid, end, r0);
    P.tasks[2 * h + 1] = make_uint4(hy.score_bits(), hy.length(), w, mode);
    const u32 nch = (w + 31) / 32;
    const u32 base = atomicAdd(&P.step_chunks[t], nch);
    for (u32 c = 0; c < nch; ++c) {
        if ((u64)base + c < P.chunk_cap) P.chunks[base + c] = make_uint2((u32)h, c * 32);
        else atomicOr(P.err, ERR_OVERFLOW);
    }
}

// Every hypothesis of step t: the early stop per query, then mid-edge lookups and child tasks.
__device__ void expand_resolve(const IndexView& I, const Params& P, const Ctx& c, u32 t, const uint4* fr,
                               const u32* worst_cur) {
    for (u64 h = c.gtid; h < (u64)P.Q * P.B; h += c.gthreads) {
        const u32 q = (u32)(h / P.B);
        const u32 r = (u32)(h % P.B);
        // Independent loads, all in bounds, issued before any branch on them: one round trip, not a chain
        // (fr[h] past nf is stale and unused).
        const u32 nf = __ldcg(&P.nf[q]);
        const u32 worst = __ldcg(&worst_cur[q]);
        const Hyp hy = Hyp::load(&fr[h]);
        const Hyp top = Hyp::load(&fr[(u64)q * P.B]);
        const u32 row = q * P.T + t;
        const u32 nv = __ldcg(&P.row_nv[row]);  // valid entries of row (q, t)
        const float m_t = __ldcg(&P.row_max[row]);
        if (r >= nf) continue;
        if (early_stop(P, top.score(), worst, m_t, q, t)) continue;  // all threads of q agree
        if (r == 0) atomicAdd(&P.out_stats[NUM_STATS * t + STAT_LIVE], 1u);
        if (hy.kind() == KIND_AT_NODE) queue_children(I, P, hy, h, nv, t);
        else expand_mid_edge(I, P, hy, q, r, row, nv, worst);
    }
}

// ---------------------------------------------------------------------------------- expand: intersect
// One warp per chunk: 32 children looked up in the row (mode 0) or 32 row entries among the children.
__device__ void expand_intersect(const IndexView& I, const Params& P, const Ctx& c, u32 t, const u32* worst_cur) {
    const u32 lane = threadIdx.x & 31;
    const u32 nch = min((u64)__ldcg(&P.step_chunks[t]), P.chunk_cap);
    for (u64 ci = c.gwarp; ci < nch; ci += c.nwarps) {
        const uint2 ch = __ldcg(&P.chunks[ci]);
        const u32 h = ch.x;
        const u32 q = h / P.B;
        const u32 r = h % P.B;
        const uint4 t0 = __ldcg(&P.tasks[2 * h]);
        const uint4 t1 = __ldcg(&P.tasks[2 * h + 1]);
        const ExpandTask task{t0.x, t0.y, t0.z, t0.w, t1.x, t1.y, t1.z, t1.w};
        const u32 row = q * P.T + t;
        const u32 nv = __ldcg(&P.row_nv[row]);
        const u32* rt = P.row_tok + (u64)row * P.K;
        const u32 item = ch.y + lane;
        Cand cand;
        cand.f = false; cand.p = false;
        if (item < task.w) {
            u32 child = NO_NODE, p = 0;
            if (task.mode == 0) {
                const u32 cc = task.first + item;
                const u32 x = child_label(I, cc, task.mid, task.r0);
                p = row_lower_bound(rt, nv, x);
                if (p < nv && rt[p] == x) child = cc;
            } else {
                p = item;
                child = find_child(I, task.first, task.mid, task.end, task.r0, rt[p]);
            }
            if (child != NO_NODE) {
                const float l = P.row_lp[(u64)row * P.K + p];
                make_cand(I, P, __ldcg(&worst_cur[q]), r, p, __uint_as_float(task.score_bits), l, task.len, child,
                          true, 0, 0, cand);
            }
        }
        store_cand_warp(P, q, cand);
    }
}

// ---------------------------------------------------------------------------------- select / offer
// The B best frontier candidates of query q, sorted, become its next frontier.
__device__ void select_next_frontier(const Params& P, const Ctx& c, SelectShared& sh, u32 q, u32 t,
                                     uint4* fr_next, const u32* worst_cur) {
    const u32 n = min((u64)__ldcg(&P.fcount[q]), P.cand_cap);
    if (threadIdx.x == 0) atomicAdd(&P.out_stats[NUM_STATS * t + STAT_FRONTIER_CANDS], n);
    const u32 got = block_select_sorted(P.fkey + (u64)q * P.cand_cap, n, P.B, c.sk, c.si, P.sort_cap, sh);
    for (u32 i = threadIdx.x; i < got; i += blockDim.x)
        fr_next[(u64)q * P.B + i] = __ldcg(&P.fpay[(u64)q * P.cand_cap + c.si[i]]);
    if (threadIdx.x == 0) {
        u32 live = got;
        if (got && early_stop(P, Hyp::load(&P.fpay[(u64)q * P.cand_cap + c.si[0]]).score(), __ldcg(&worst_cur[q]),
                              __ldcg(&P.row_max[(u64)q * P.T + t + 1]), q, t + 1))
            live = 0;
        P.nf[q] = live;
        P.fcount[q] = 0;
        if (live) atomicAdd(&P.step_alive[t], 1u);
    }
}

// Merge the `got` sorted new entries (sk / si) into query q's pool of nold entries, keeping the R best;
// on equal n the older entry comes first.  Returns the new pool size.
__device__ u32 merge_pool(const IndexView& I, const Params& P, const Ctx& c, u32 q, u32 got, const uint4* old,
                          u32 nold, uint4* nw) {
    for (u32 i = threadIdx.x; i < nold; i += blockDim.x) c.sold[i] = desc_key32(PoolEntry::load(&old[i]).norm_score());
    __syncthreads();
    for (u32 i = threadIdx.x; i < nold; i += blockDim.x) {  // old entry i: after the strictly better new ones
        const u64 k = (u64)c.sold[i] << 32;
        u32 lo = 0, len = got;
        while (len > 0) {
            const u32 half = len >> 1;
            if (c.sk[lo + half] < k) { lo += half + 1; len -= half + 1; } else { len = half; }
        }
        if (i + lo < P.R) nw[i + lo] = __ldcg(&old[i]);
    }
    for (u32 j = threadIdx.x; j < got; j += blockDim.x) {  // new entry j: after the old ones with key <= its own
        const u32 k32 = (u32)(c.sk[j] >> 32);
        u32 lo = 0, len = nold;
        while (len > 0) {
            const u32 half = len >> 1;
            if (c.sold[lo + half] <= k32) { lo += half + 1; len -= half + 1; } else { len = half; }
        }
        if (j + lo < P.R) {
            const PoolEntry e = PoolEntry::load(&P.ppay[(u64)q * P.cand_cap + c.si[j]]);
            nw[j + lo] = e.with_id(keyword_id(I, e.node_or_id())).v;
        }
    }
    __syncthreads();
    return min(P.R, nold + got);
}

// The R best pool candidates of query q merged into its pool; its worst entry recorded once it is full.
__device__ void offer_to_pool(const IndexView& I, const Params& P, const Ctx& c, SelectShared& sh, u32 q, u32 t,
                              const u32* worst_cur, u32* worst_next) {
    if (threadIdx.x == 0) worst_next[q] = __ldcg(&worst_cur[q]);  // replaced below when it changes
    const u32 n = min((u64)__ldcg(&P.pcount[q]), P.cand_cap);
    if (threadIdx.x == 0) atomicAdd(&P.out_stats[NUM_STATS * t + STAT_POOL_CANDS], n);
    const u32 got = block_select_sorted(P.pkey + (u64)q * P.cand_cap, n, P.R, c.sk, c.si, P.sort_cap, sh);
    if (got) {
        const u32 sel = __ldcg(&P.pool_sel[q]);
        const uint4* old = (sel ? P.pool1 : P.pool0) + (u64)q * P.R;
        uint4* nw = (sel ? P.pool0 : P.pool1) + (u64)q * P.R;
        const u32 nn = merge_pool(I, P, c, q, got, old, __ldcg(&P.pool_n[q]), nw);
        if (threadIdx.x == 0) {
            P.pool_n[q] = nn;
            P.pool_sel[q] = sel ^ 1u;
            if (nn == P.R) {
                __threadfence_block();
                worst_next[q] = desc_key32(PoolEntry::load(&nw[P.R - 1]).norm_score());
            }
        }
    }
    if (threadIdx.x == 0) P.pcount[q] = 0;
}

// ---------------------------------------------------------------------------------- results
__device__ void write_results(const Params& P) {
    for (u32 q = blockIdx.x; q < P.Q; q += gridDim.x) {
        const u32 np = __ldcg(&P.pool_n[q]);
        const uint4* pool = (__ldcg(&P.pool_sel[q]) ? P.pool1 : P.pool0) + (u64)q * P.R;
        for (u32 i = threadIdx.x; i < P.R; i += blockDim.x) {
            const u64 o = (u64)q * P.R + i;
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
    Ctx c;
    c.gtid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    c.gthreads = (u64)gridDim.x * blockDim.x;
    c.gwarp = c.gtid >> 5;
    c.nwarps = c.gthreads >> 5;
    c.sk = reinterpret_cast<u64*>(dyn_smem);
    c.si = reinterpret_cast<u32*>(dyn_smem + sizeof(u64) * max(P.sort_cap, P.kpad));
    c.sold = c.si + P.sort_cap;

    seed_frontiers(P, c);
    for (u32 row = blockIdx.x; row < P.Q * P.T; row += gridDim.x) sort_row(P, row, c.sk, sh);
    grid.sync();
    if (__ldcg(P.err) & (ERR_BAD_LOGPROB | ERR_DUPLICATE | ERR_BAD_TOKEN)) {  // uniform across the grid
        if (c.gtid == 0) *P.out_err = __ldcg(P.err);
        return;
    }

    for (u32 t = 0; t < P.T; ++t) {
        const uint4* fr = (t & 1) ? P.fr1 : P.fr0;
        uint4* fr_next = (t & 1) ? P.fr0 : P.fr1;
        const u32* worst_cur = P.pool_worst + (u64)(t & 1) * P.Q;  // not written during this step
        u32* worst_next = P.pool_worst + (u64)((t + 1) & 1) * P.Q;

        expand_resolve(I, P, c, t, fr, worst_cur);
        grid.sync();
        if (__ldcg(&P.out_stats[NUM_STATS * t + STAT_LIVE]) == 0) break;  // every query stopped
        expand_intersect(I, P, c, t, worst_cur);
        grid.sync();
        for (u32 job = blockIdx.x; job < 2 * P.Q; job += gridDim.x) {
            if (job >= P.Q) offer_to_pool(I, P, c, sh, job - P.Q, t, worst_cur, worst_next);
            else if (t + 1 < P.T) select_next_frontier(P, c, sh, job, t, fr_next, worst_cur);  // none after the last
            __syncthreads();
        }
        grid.sync();
        if (c.gtid == 0) P.out_stats[NUM_STATS * t + STAT_CHUNKS] = __ldcg(&P.step_chunks[t]);
        if (__ldcg(&P.step_alive[t]) == 0) break;  // every next frontier is empty or stopped
    }
    write_results(P);
    if (c.gtid == 0) *P.out_err = __ldcg(P.err);
}
