// The kernel's parameters: one struct in device memory, packed by gpu_impl/workspace.py from the field
// table in gpu_impl/layout.py (PARAMS); the table's sizes and offsets are checked here at compile time.
#pragma once
#define FT_PARAMS_CUH
#include "index.cuh"

// the error bits of *err (ERR_*) and the columns of out_stats (STAT_*, NUM_STATS): constants.cuh
#define PAD_TOKEN 0xFFFFFFFFu

struct Params {
    const u32* tok_in;     // [Q, T, K] proposals (uint32, padding 2^32-1)
    const float* lp_in;    // [Q, T, K]
    const uint4* starts;   // [Q] start hypotheses (node NO_NODE: the prefix is not in the trie)
    const float* ln;       // [ln_len] length-norm table
    u32* row_tok;          // [Q*T, K] sorted tokens
    float* row_lp;         // [Q*T, K] logprobs in sorted order (NaN where <= tau)
    u32* row_nv;           // [Q*T] non-padding entries per row
    float* row_max;        // [Q*T] best usable logprob of row (q, t) (-inf: none), for the early stop
    uint4* fr0;            // [Q, B] frontier (Hyp), double-buffered
    uint4* fr1;
    u32* nf;               // [Q] frontier sizes
    uint4* tasks;          // [Q*B, 2] per-hypothesis ExpandTask
    uint2* chunks;         // [chunk_cap] (hypothesis, first item)
    u64* fkey;             // [Q, cand_cap] frontier candidate keys
    uint4* fpay;           // [Q, cand_cap] frontier candidates (Hyp)
    u64* pkey;             // [Q, cand_cap] pool candidate keys
    uint4* ppay;           // [Q, cand_cap] pool candidates (PoolEntry with the node)
    u32* fcount;           // [Q]
    u32* pcount;           // [Q]
    uint4* pool0;          // [Q, R] pool (PoolEntry with the keyword id), double-buffered
    uint4* pool1;
    u32* pool_n;           // [Q]
    u32* pool_sel;         // [Q] which pool buffer is current
    u32* pool_worst;       // [2, Q] desc key of the worst pool entry when full, else DESC_KEY_NONE; half t & 1
                           // is read during step t, half (t + 1) & 1 written by its pool merge
    u32* step_chunks;      // [T]
    u32* step_alive;       // [T] queries whose next frontier is not empty
    u32* err;              // [1] zeroed by the host upload
    u32* out_err;          // [1] copy of *err for the host
    i64* out_ids;          // [Q, R]
    float* out_scores;     // [Q, R]
    float* out_norms;      // [Q, R]
    int* out_lens;         // [Q, R]
    int* out_nres;         // [Q]
    u32* out_stats;        // [T, NUM_STATS] per step counters (STAT_*)
    u64 cand_cap;
    u64 chunk_cap;
    u32 Q, T, K, B;
    u32 R, kpad, sort_cap, ln_len;
    float thr_tau, thr_sigma;
    float ln_min, ln_max;  // extremes of ln[1 ..]
    u32 signed_tokens;     // 1: tok_in holds int32 (valid: 0 .. 2^31-1, and -1 for padding)
    u32 pad0;
};
