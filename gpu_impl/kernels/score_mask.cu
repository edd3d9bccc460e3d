// flashtrie: the hook's mask written into a logits processor's scores (flashtrie/hf.py mask_and_force, the
// reference), launched by gpu_impl/score_mask.py after ft_step_walk_mask has written the bool mask.
//
// Every store is an integer store of a bit pattern of the float's width (`width`: 2, 4 or 8 bytes), so no
// entry is read as a float, converted or written as one: an allowed entry of a row that is not forced keeps
// its bits, NaN payloads included.  Patterns compare as signed integers of that width: -inf is `neg_inf` and
// the float's lowest finite value the pattern one below it.
//   ft_score_mask   `parts` blocks per row, block p over part p of `parts` equal parts of the row: -inf into
//                   every entry the mask leaves out, and live[row * parts + p] = 1 where an allowed entry of
//                   the part holds another pattern than -inf (`lowest`: than -inf or the lowest value), else
//                   0 (every slot written every launch: nothing to clear between calls)
//   ft_score_force  one block per batch item (`group` consecutive rows): where no part of its rows is live,
//                   0 into the allowed entries of its rows
// scores: [rows, V] entries, row_stride apart (columns contiguous); allow: [rows, V] bool, allow_stride apart.
#include "index.cuh"

template <typename T>
__device__ __forceinline__ void mask_part(T* __restrict__ row, const unsigned char* __restrict__ a, u64 lo, u64 hi,
                                          T ninf, bool lowest, unsigned char* __restrict__ slot) {
    const T low = (T)(ninf - 1);
    int live = 0;
    for (u64 j = lo + threadIdx.x; j < hi; j += blockDim.x) {
        if (a[j]) {
            const T b = row[j];
            live |= !(b == ninf || (lowest && b == low));
        } else {
            row[j] = ninf;
        }
    }
    live = __syncthreads_or(live);
    if (threadIdx.x == 0) *slot = live ? 1 : 0;
}

template <typename T>
__device__ __forceinline__ void force_rows(T* __restrict__ scores, const unsigned char* __restrict__ allow,
                                           u64 r0, u64 group, u64 V, u64 row_stride, u64 allow_stride) {
    for (u64 r = r0; r < r0 + group; ++r) {
        T* row = scores + r * row_stride;
        const unsigned char* a = allow + r * allow_stride;
        for (u64 j = threadIdx.x; j < V; j += blockDim.x)
            if (a[j]) row[j] = (T)0;
    }
}

extern "C" __global__ void ft_score_mask(void* scores, const unsigned char* allow, unsigned char* live, u64 V,
                                         u64 row_stride, u64 allow_stride, i64 neg_inf, u32 parts, u32 width,
                                         u32 lowest) {
    const u64 row = blockIdx.x / parts, p = blockIdx.x % parts;
    const u64 lo = V * p / parts, hi = V * (p + 1) / parts;
    const unsigned char* a = allow + row * allow_stride;
    unsigned char* slot = live + blockIdx.x;
    const bool low = lowest != 0;
    if (width == 2)
        mask_part<short>(static_cast<short*>(scores) + row * row_stride, a, lo, hi, (short)neg_inf, low, slot);
    else if (width == 4)
        mask_part<int>(static_cast<int*>(scores) + row * row_stride, a, lo, hi, (int)neg_inf, low, slot);
    else
        mask_part<i64>(static_cast<i64*>(scores) + row * row_stride, a, lo, hi, neg_inf, low, slot);
}

extern "C" __global__ void ft_score_force(void* scores, const unsigned char* allow, const unsigned char* live,
                                          u64 V, u64 row_stride, u64 allow_stride, u32 parts, u32 group, u32 width) {
    const u64 r0 = (u64)blockIdx.x * group;
    const u64 n = (u64)group * parts;
    int any = 0;
    for (u64 k = threadIdx.x; k < n; k += blockDim.x) any |= live[r0 * parts + k];
    if (__syncthreads_or(any)) return;  // uniform: a live entry in the batch item, nothing forced
    if (width == 2)
        force_rows<short>(static_cast<short*>(scores), allow, r0, group, V, row_stride, allow_stride);
    else if (width == 4)
        force_rows<int>(static_cast<int*>(scores), allow, r0, group, V, row_stride, allow_stride);
    else
        force_rows<i64>(static_cast<i64*>(scores), allow, r0, group, V, row_stride, allow_stride);
}
