// Storing a mask (TrieStepper.mask's stores): -inf over the disallowed float32 logits in 16-byte stores, or
// a bool mask, for a span of a row; the labels and the kept logits of a node of at most SCAN_MAX children.
#pragma once
#include "step_decode.cuh"

__device__ __forceinline__ void set_bit(u32* bits, u32 k) { atomicOr(&bits[k >> 5], 1u << (k & 31)); }

#define NEG_INF __int_as_float(0xff800000)

// The 4 bits n as 4 bytes (0 / 1): the bool mask of 4 entries.
__device__ __forceinline__ u32 bytes4(u32 n) {
    return (n & 1u) | ((n & 2u) << 7) | ((n & 4u) << 14) | ((n & 8u) << 21);
}

// -inf over the entries of a 16-byte vector q whose bits in m are clear, entry by entry (a vector at a row's end:
// its entries outside the row are never written; or one that holds allowed entries that are not restored).
__device__ __forceinline__ void neg_mixed(float* q, u32 m) {
    if (!(m & 1u)) q[0] = NEG_INF;
    if (!(m & 2u)) q[1] = NEG_INF;
    if (!(m & 4u)) q[2] = NEG_INF;
    if (!(m & 8u)) q[3] = NEG_INF;
}

// Bit j set where entry e0 + j (e0 may be below 0) is in [lo, hi), for the `width` (<= 16) entries from e0.
__device__ __forceinline__ u32 span_bits(i64 e0, u32 width, u64 lo, u64 hi) {
    const i64 a = max((i64)lo - e0, 0ll), b = min((i64)hi - e0, (i64)width);
    return a >= b ? 0u : ((1u << (u32)b) - 1u) & ~((1u << (u32)a) - 1u);
}

#define NO_TOKEN (-(1ll << 62))  // sparse_bits: no edge token

// The allowed entries among the `width` entries from e0 of a state that allows at most its edge's next token
// `tok` and (eos_ok) the EOS ids: a state inside an edge, DEAD, FINISHED or a node without children.
__device__ __forceinline__ u32 sparse_bits(i64 e0, u32 width, i64 tok, bool eos_ok, u32 n_eos) {
    u32 m = (u64)(tok - e0) < width ? 1u << (u32)(tok - e0) : 0u;
    if (eos_ok)
        for (u32 k = 0; k < n_eos; ++k) {
            const i64 d = s_eos[k] - e0;
            if ((u64)d < width) m |= 1u << (u32)d;
        }
    return m;
}

// -inf over the entries of the block's span [e_begin, e_end) but `tok` and (eos_ok) the EOS ids: the span's
// 16-byte vectors (aligned coordinates from u_begin: entry e is at u = e + mis) in one store each, those at the
// row's ends and the few with an allowed entry entry by entry.  No barrier, nothing read.
__device__ __forceinline__ void neg_span(float* rowf, u64 u_begin, u64 e_begin, u64 e_end, u32 mis, i64 tok,
                                         bool eos_ok, u32 n_eos) {
    const float4 ni4 = make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
    const u64 g_end = (e_end + mis + 3) >> 2;
#pragma unroll 4
    for (u64 g = (u_begin >> 2) + threadIdx.x; g < g_end; g += blockDim.x) {
        const i64 e0 = (i64)(4 * g) - (i64)mis;
        const u32 wr = span_bits(e0, 4, e_begin, e_end) & ~sparse_bits(e0, 4, tok, eos_ok, n_eos);
        if (wr == 0xFu) *reinterpret_cast<float4*>(rowf + e0) = ni4;
        else if (wr) neg_mixed(rowf + e0, ~wr & 0xFu);
    }
}

// The bool mask of the block's span for a sparse state (sparse_bits): one 16-byte store of 16 entries, entry by
// entry at the row's ends.
__device__ __forceinline__ void bool_span(unsigned char* rowb, u64 u_begin, u64 e_begin, u64 e_end, u32 mis,
                                          i64 tok, bool eos_ok, u32 n_eos) {
    const u64 g_end = (e_end + mis + 15) >> 4;
    for (u64 g = (u_begin >> 4) + threadIdx.x; g < g_end; g += blockDim.x) {
        const i64 e0 = (i64)(16 * g) - (i64)mis;
        const u32 in = span_bits(e0, 16, e_begin, e_end), m = sparse_bits(e0, 16, tok, eos_ok, n_eos);
        unsigned char* q = rowb + e0;
        if (in == 0xFFFFu) {
            *reinterpret_cast<uint4*>(q) = make_uint4(bytes4(m & 0xFu), bytes4((m >> 4) & 0xFu),
                                                      bytes4((m >> 8) & 0xFu), bytes4(m >> 12));
        } else {
            for (u32 t = 0; t < 16; ++t)
                if ((in >> t) & 1u) q[t] = (unsigned char)((m >> t) & 1u);
        }
    }
}

#define SCAN_MAX 1024u  // a node with at most this many children: its labels go to shared memory once, and
                        // every chunk takes its own from there (no binary searches at the chunk bounds)
__shared__ u32 s_lab[SCAN_MAX];
__shared__ float s_keep[SCAN_MAX + 8];  // mask_restore: the logits of s_lab's labels in the span, then the EOS ids'

// *dst = *src for a float in shared memory from global memory, asynchronously (cp.async, sm_80+: no register
// waits for it); wait_copies() waits for the thread's copies.  (Before sm_80 and on the host: a plain copy.)
__device__ __forceinline__ void copy_async(float* dst, const float* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"((u32)__cvta_generic_to_shared(dst)), "l"(src)
                 : "memory");
#else
    *dst = *src;
#endif
}
__device__ __forceinline__ void wait_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

// The labels of the node's children into s_lab (thread t: children first + t + k T; up to 4 per thread loaded
// together, the copies after them), and with rowf the logits of those in [e_begin, e_end) into s_keep.
__device__ __forceinline__ void load_labels(const IndexView& I, const Pos& p, float* rowf, u64 e_begin, u64 e_end) {
    const u32 T = blockDim.x, nch = p.end - p.first;
    for (u32 c0 = threadIdx.x; c0 < nch; c0 += 4 * T) {
        u32 x[4];
#pragma unroll
        for (u32 j = 0; j < 4; ++j) x[j] = c0 + j * T < nch ? child_label(I, p.first + c0 + j * T, p.mid, p.r0) : 0u;
#pragma unroll
        for (u32 j = 0; j < 4; ++j) {
            const u32 c = c0 + j * T;
            if (c >= nch) break;
            s_lab[c] = x[j];
            if (rowf && x[j] >= e_begin && x[j] < e_end) copy_async(&s_keep[c], rowf + x[j]);
        }
    }
}

// The float32 mask of the block's span at a node of 1 .. SCAN_MAX children: the allowed logits (its children's
// labels, and the EOS ids where a keyword ends) are copied to shared memory as the labels arrive; after one
// barrier -inf goes over the whole span, 16 bytes a store; after another the kept logits are stored back.  So
// no 32-byte sector is written in part before it was written whole, and no bitmap is built.
__device__ void mask_restore(const IndexView& I, const Pos& p, u64 u_begin, u64 e_begin, u64 e_end, u32 mis,
                             bool eos_ok, u32 n_eos, float* rowf) {
    load_labels(I, p, rowf, e_begin, e_end);
    const bool eos_mine = eos_ok && threadIdx.x < n_eos;
    const i64 xe = eos_mine ? s_eos[threadIdx.x] : -1;
    const bool eos_here = eos_mine && xe >= (i64)e_begin && xe < (i64)e_end;
    if (eos_here) copy_async(&s_keep[SCAN_MAX + threadIdx.x], rowf + xe);
    wait_copies();
    __syncthreads();  // every kept logit of the span is in shared memory
    neg_span(rowf, u_begin, e_begin, e_end, mis, NO_TOKEN, false, 0);
    __syncthreads();  // every -inf of the span is stored
    for (u32 c = threadIdx.x; c < p.end - p.first; c += blockDim.x) {
        const u32 x = s_lab[c];
        if (x >= e_begin && x < e_end) rowf[x] = s_keep[c];
    }
    if (eos_here) rowf[xe] = s_keep[SCAN_MAX + threadIdx.x];
}

// A block's part of a row's mask, for the decoded state p (with its child range), in aligned coordinates
// u = entry + mis (mis: the row's misalignment in entries, so every vector of VEC entries starting at a multiple
// of VEC in u is one 16-byte store): the block has [u_begin, u_end) (multiples of 16; bitmap chunks of CHUNK
// entries from u_begin).
// Three ways, by what the state allows:
// * at most its edge's next token and the EOS ids (inside an edge, DEAD, FINISHED, a node without children):
//   each vector's allowed entries by comparison (neg_span, bool_span), no barrier;
// * float32 logits at a node of at most SCAN_MAX children: mask_restore;
// * else per chunk a bitmap of its allowed entries in shared memory (bits outside the row set: never written),
//   one barrier, the bits of the allowed tokens, one barrier, then per vector its bits (one shared load): -inf
//   over the disallowed float32 logits (an all-allowed vector is not written, a mixed one entry by entry), or
//   the bool mask (one 16-byte store of 16 entries).  Two bitmaps, alternating, so the next chunk's bitmap
//   needs no barrier after the stores.
