// Arithmetic shared bit for bit with flashtrie/scoring.py: sort keys and the early-stop rule.
// All float arithmetic that reaches the output is __fadd_rn / __fmul_rn (no contraction, no FTZ).
#pragma once
#include "index.cuh"

#define KEY_NONE 0xFFFFFFFFFFFFFFFFull
#define DESC_KEY_NONE 0xFFFFFFFFu  // pool_worst of a pool that is not full yet

// scoring.desc_key32: ascending key = descending score; -0.0 and +0.0 share a key.
__device__ __forceinline__ u32 desc_key32(float v) {
    const u32 b = __float_as_uint(__fadd_rn(v, 0.0f));
    const u32 asc = (b >> 31) ? ~b : (b | 0x80000000u);
    return ~asc;
}

// The float of a desc key (-0.0 comes back as +0.0, which compares equal).
__device__ __forceinline__ float from_desc_key32(u32 k) {
    const u32 asc = ~k;
    return __uint_as_float((asc & 0x80000000u) ? (asc & 0x7FFFFFFFu) : ~asc);
}

// scoring.pool_closed, for a full pool whose worst n is `worst_n`: S = best, then for each later row k
// S = fl32(S + M_k) (sequential, as numpy's np.add.accumulate); closed when every k has
// fl32(S * ln_min) <= worst_n and fl32(S * ln_max) <= worst_n.  NaN (+inf + -inf) compares false: open.
// The later rows' maxima are M_0 = m_first (by value, so a caller can load it early) and m_rest[0, n_rest).
__device__ __forceinline__ bool pool_bound_holds(float S, float worst_n, float ln_min, float ln_max) {
    return __fmul_rn(S, ln_min) <= worst_n && __fmul_rn(S, ln_max) <= worst_n;
}

__device__ __forceinline__ bool pool_closed(float best, float worst_n, float m_first, const float* m_rest,
                                            u32 n_rest, float ln_min, float ln_max) {
    float S = __fadd_rn(best, m_first);
    if (!pool_bound_holds(S, worst_n, ln_min, ln_max)) return false;
    for (u32 k = 0; k < n_rest; ++k) {
        S = __fadd_rn(S, __ldcg(&m_rest[k]));
        if (!pool_bound_holds(S, worst_n, ln_min, ln_max)) return false;
    }
    return true;
}
