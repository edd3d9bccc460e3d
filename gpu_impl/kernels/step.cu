// flashtrie: stepwise trie constraints for autoregressive decoders (gpu_impl/stepwise.py).
//
// A state is (node, off) as int64 (docs/index-format.md): off tokens into node's incoming edge, off equal to
// the edge length at the node, the root (0, 0); node -1 is DEAD and -2 FINISHED (flashtrie/stepwise.py).
// Every kernel gives exactly what the numpy backend gives (flashtrie.stepwise.TrieStepper); a state that is
// not valid for the index (node or off out of range) reads as DEAD here, where numpy refuses it.
//   ft_step_advance  one thread per state: the state after one token (EOS handling included)
//   ft_step_walk     one thread per row: the state after a row's tokens ids[r, begin:end] from the root
//   ft_step_mask     one block per (state, chunk of CHUNK vocabulary entries): a bitmap of the allowed
//                    tokens in shared memory, then 0 / -inf added to float32 logits, or a bool mask
//   ft_step_advance_mask  both in one launch: the new states and their mask (one decode chain, one launch)
//   ft_step_count    one thread per state: number of allowed trie tokens, and whether a keyword ends
//   ft_step_fill     one block per state: the allowed tokens, ascending, into CSR or padded rows

#include "index.cuh"

#ifndef FT_STEP_THREADS
#define FT_STEP_THREADS 256
#endif
#ifndef FT_STEP_CHUNK
#define FT_STEP_CHUNK 32768  // vocabulary entries per mask block (a power of two; the bitmap is CHUNK / 8 bytes)
#endif
#define CHUNK ((u32)FT_STEP_CHUNK)
#define ST_DEAD (-1ll)
#define ST_FINISHED (-2ll)
#define K_AT 0
#define K_MID 1
#define K_DEAD 2
#define K_FIN 3

struct Pos {
    int kind;
    u32 node, off;
    u32 first, mid, end, r0;  // children (K_AT)
    u32 tok;                  // the next edge token (K_MID)
    bool term;                // a keyword ends here (K_AT)
};

// Children [first, end) of `node` and the first child with a wide label (mid), r0 = rank1(hi_flag, first).
__device__ __forceinline__ void child_range(const IndexView& I, u32 node, Pos& p) {
    const u64 ustart = node == 0 ? 0ull : select0(I, (u64)node - 1) + 1;
    u64 wi = ustart >> 6;
    u64 word = ~__ldg(&I.louds_words[wi]) & (~0ull << (ustart & 63));
    for (int tries = 0; word == 0 && tries < 3; ++tries) { ++wi; word = ~__ldg(&I.louds_words[wi]); }
    const u64 zpos = word ? wi * 64 + (u64)(__ffsll((long long)word) - 1) : select0(I, node);
    p.first = (u32)(ustart - node + 1);
    p.end = (u32)(zpos - node + 1);
    p.r0 = rank1(I.hi_words, I.hi_rank, p.first);
    const u32 rE = rank1(I.hi_words, I.hi_rank, p.end);
    p.mid = p.end - (rE - p.r0);
}

// Decode a state; `children` also computes the child range of a state at a node.
__device__ Pos decode(const IndexView& I, i64 node, i64 off, bool children) {
    Pos p;
    p.kind = K_DEAD; p.node = 0; p.off = 0; p.first = p.mid = p.end = p.r0 = 0; p.tok = 0; p.term = false;
    if (node == ST_FINISHED && off == 0) { p.kind = K_FIN; return p; }
    if (node < 0 || node >= (i64)I.num_nodes) return p;
    const u32 v = (u32)node;
    const u32 fl = node_flags(I, v);
    u32 m = v == 0 ? 0u : 1u;
    u32 a = 0;
    if (fl & 1u) {
        const u32 lr = rank1(I.linked_words, I.linked_rank, v);
        a = packed_get(I.link_starts, I.ls_width, lr);
        m = 1u + packed_get(I.link_starts, I.ls_width, (u64)lr + 1) - a;
    }
    if (off < (v == 0 ? 0 : 1) || off > (i64)m) return p;
    p.node = v;
    p.off = (u32)off;
    if (p.off == m) {
        p.kind = K_AT;
        p.term = (fl & 2u) != 0;
        if (children) child_range(I, v, p);
    } else {
        p.kind = K_MID;
        p.tok = packed_get(I.suffix, I.suffix_width, (u64)a + p.off - 1);
    }
    return p;
}

__device__ __forceinline__ bool is_eos(const i64* eos, u32 n_eos, i64 x) {
    for (u32 k = 0; k < n_eos; ++k)
        if (__ldg(&eos[k]) == x) return true;
    return false;
}

// The state after token x (as flashtrie.stepwise.TrieStepper.advance).
__device__ void advance_one(const IndexView& I, i64& node, i64& off, i64 x, const i64* eos, u32 n_eos) {
    if (node == ST_FINISHED && off == 0) return;
    const Pos p = decode(I, node, off, false);
    node = ST_DEAD; off = 0;
    if (p.kind == K_FIN) { node = ST_FINISHED; return; }
    if (p.kind == K_DEAD) return;
    if (is_eos(eos, n_eos, x)) {
        if (p.kind == K_AT && p.term) node = ST_FINISHED;
        return;
    }
    if (x < 0 || x > 0xFFFFFFFEll) return;
    if (p.kind == K_MID) {
        if ((i64)p.tok == x) { node = p.node; off = (i64)p.off + 1; }
        return;
    }
    Pos q = p;
    child_range(I, p.node, q);
    const u32 c = find_child(I, q.first, q.mid, q.end, q.r0, (u32)x);
    if (c != NO_NODE) { node = c; off = 1; }
}

extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS)
ft_step_advance(const IndexView* __restrict__ view, const i64* node_in, const i64* off_in, const void* tok,
                u32 tok_is64, u64 tok_stride, u32 n, const i64* __restrict__ eos, u32 n_eos, i64* node_out,
                i64* off_out) {
    __shared__ IndexView I;
    if (threadIdx.x == 0) I = *view;
    __syncthreads();
    const u32 r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    i64 node = node_in[r], off = off_in[r];
    const i64 x = tok_is64 ? ((const i64*)tok)[(u64)r * tok_stride] : (i64)((const int*)tok)[(u64)r * tok_stride];
    advance_one(I, node, off, x, eos, n_eos);
    node_out[r] = node;
    off_out[r] = off;
}

extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS)
ft_step_walk(const IndexView* __restrict__ view, const i64* __restrict__ ids, u64 row_stride, u32 n,
             const i64* __restrict__ begin, i64 begin_all, const i64* __restrict__ end, i64 end_all,
             const i64* __restrict__ eos, u32 n_eos, i64* node_out, i64* off_out) {
    __shared__ IndexView I;
    if (threadIdx.x == 0) I = *view;
    __syncthreads();
    const u32 r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    const i64 b = begin ? begin[r] : begin_all;
    const i64 e = end ? end[r] : end_all;
    i64 node = 0, off = 0;
    for (i64 c = b; c < e; ++c) advance_one(I, node, off, __ldg(&ids[(u64)r * row_stride + c]), eos, n_eos);
    node_out[r] = node;
    off_out[r] = off;
}

// First child in [first, end) whose label is >= x (labels ascending).
__device__ __forceinline__ u32 child_lower_bound(const IndexView& I, u32 first, u32 mid, u32 end, u32 r0, u64 x) {
    u32 lo = first, len = end - first;
    while (len > 0) {
        const u32 half = len >> 1;
        if ((u64)child_label(I, lo + half, mid, r0) < x) { lo += half + 1; len -= half + 1; } else { len = half; }
    }
    return lo;
}

__device__ __forceinline__ void prefetch_l2(const void* p) {
#ifdef __CUDA_ARCH__
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#endif
}

// One block's part of a mask: state (node, off) of `row`, vocabulary entries [v0, v1).  The block's threads
// first ask L2 for their logits (FT_PREFETCH) so the loads overlap the thread-0 decode.
__device__ void mask_block(const IndexView& I, i64 node, i64 off, u32 row, u64 v0, u64 V, const i64* eos,
                           u32 n_eos, float* outf, unsigned char* outb, u64 row_stride,
                           unsigned long long* dead_count, u32 flags) {
    __shared__ u32 bits[CHUNK / 32];
    __shared__ Pos P;
    __shared__ u32 lo_c, hi_c;
    const u64 v1 = min(V, v0 + CHUNK);
    const u64 base = (u64)row * row_stride;
    if (outf && (flags & 1u))
        for (u64 v = v0 + 32ull * threadIdx.x; v < v1; v += 32ull * blockDim.x)
            prefetch_l2(outf + base + v);
    for (u32 i = threadIdx.x; i < CHUNK / 32; i += blockDim.x) bits[i] = 0u;
    if (threadIdx.x == 0) {
        P = decode(I, node, off, true);
        if (v0 == 0 && P.kind == K_DEAD) atomicAdd(dead_count, 1ull);
    }
    __syncthreads();
    const Pos p = P;
    if (p.kind == K_AT) {
        // every label is below V (checked on the host): the first and last chunks need no search
        if (threadIdx.x == 0) lo_c = v0 == 0 ? p.first : child_lower_bound(I, p.first, p.mid, p.end, p.r0, v0);
        if (threadIdx.x == 32) hi_c = v1 >= V ? p.end : child_lower_bound(I, p.first, p.mid, p.end, p.r0, v1);
        __syncthreads();
        for (u32 c = lo_c + threadIdx.x; c < hi_c; c += blockDim.x) {
            const u32 k = (u32)(child_label(I, c, p.mid, p.r0) - v0);
            atomicOr(&bits[k >> 5], 1u << (k & 31));
        }
    }
    if (threadIdx.x == 0) {
        if (p.kind == K_MID && p.tok >= v0 && p.tok < v1) {
            const u32 k = (u32)(p.tok - v0);
            atomicOr(&bits[k >> 5], 1u << (k & 31));
        }
        if (p.kind != K_MID && (p.kind != K_AT || p.term)) {
            for (u32 e = 0; e < n_eos; ++e) {
                const i64 x = __ldg(&eos[e]);
                if (x >= (i64)v0 && x < (i64)v1) {
                    const u32 k = (u32)(x - (i64)v0);
                    atomicOr(&bits[k >> 5], 1u << (k & 31));
                }
            }
        }
    }
    __syncthreads();
    for (u64 v = v0 + threadIdx.x; v < v1; v += blockDim.x) {
        const u32 k = (u32)(v - v0);
        const bool ok = (bits[k >> 5] >> (k & 31)) & 1u;
        if (outf) {
            const float x = outf[base + v];
            outf[base + v] = __fadd_rn(x, ok ? 0.0f : __int_as_float(0xff800000));
        } else {
            outb[base + v] = ok ? 1 : 0;
        }
    }
}

extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS)
ft_step_mask(const IndexView* __restrict__ view, const i64* __restrict__ node_in, const i64* __restrict__ off_in,
             u32 n, u64 V, u32 chunks_per_row, const i64* __restrict__ eos, u32 n_eos, float* outf,
             unsigned char* outb, u64 row_stride, unsigned long long* dead_count, u32 flags) {
    __shared__ IndexView I;
    if (threadIdx.x == 0) I = *view;
    __syncthreads();
    const u32 row = blockIdx.x / chunks_per_row;
    mask_block(I, node_in[row], off_in[row], row, (u64)(blockIdx.x % chunks_per_row) * CHUNK, V, eos, n_eos, outf,
               outb, row_stride, dead_count, flags);
}

// advance, then the mask of the new states, in one launch: every block of a row advances the row's state
// (the first block of the row stores it), then masks its chunk.  `node_out` must not alias `node_in`.
extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS)
ft_step_advance_mask(const IndexView* __restrict__ view, const i64* __restrict__ node_in,
                     const i64* __restrict__ off_in, const void* tok, u32 tok_is64, u64 tok_stride, u32 n, u64 V,
                     u32 chunks_per_row, const i64* __restrict__ eos, u32 n_eos, float* outf, unsigned char* outb,
                     u64 row_stride, unsigned long long* dead_count, u32 flags, i64* node_out, i64* off_out) {
    __shared__ IndexView I;
    __shared__ i64 s_node, s_off;
    const u32 row = blockIdx.x / chunks_per_row;
    const u32 chunk = blockIdx.x % chunks_per_row;
    if (threadIdx.x == 0) {
        I = *view;
        i64 node = node_in[row], off = off_in[row];
        const i64 x = tok_is64 ? ((const i64*)tok)[(u64)row * tok_stride]
                               : (i64)((const int*)tok)[(u64)row * tok_stride];
        advance_one(I, node, off, x, eos, n_eos);
        if (chunk == 0) { node_out[row] = node; off_out[row] = off; }
        s_node = node; s_off = off;
    }
    __syncthreads();
    mask_block(I, s_node, s_off, row, (u64)chunk * CHUNK, V, eos, n_eos, outf, outb, row_stride, dead_count, flags);
}

extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS)
ft_step_count(const IndexView* __restrict__ view, const i64* __restrict__ node_in, const i64* __restrict__ off_in,
              u32 n, i64* counts, unsigned char* ends) {
    __shared__ IndexView I;
    if (threadIdx.x == 0) I = *view;
    __syncthreads();
    const u32 r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    const Pos p = decode(I, node_in[r], off_in[r], true);
    if (counts) counts[r] = p.kind == K_AT ? (i64)(p.end - p.first) : (p.kind == K_MID ? 1 : 0);
    if (ends) ends[r] = (p.kind == K_AT && p.term) ? 1 : 0;
}

// CSR (offsets != null: row r's tokens at offsets[r] ..) or padded rows of `cap` (the first cap tokens).
extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS)
ft_step_fill(const IndexView* __restrict__ view, const i64* __restrict__ node_in, const i64* __restrict__ off_in,
             u32 n, const i64* __restrict__ offsets, u64 cap, i64* tokens) {
    __shared__ IndexView I;
    __shared__ Pos P;
    if (threadIdx.x == 0) I = *view;
    __syncthreads();
    const u32 r = blockIdx.x;
    if (threadIdx.x == 0) P = decode(I, node_in[r], off_in[r], true);
    __syncthreads();
    const Pos p = P;
    const u64 base = offsets ? (u64)offsets[r] : (u64)r * cap;
    const u64 lim = offsets ? ~0ull : cap;
    if (p.kind == K_MID) {
        if (threadIdx.x == 0 && lim > 0) tokens[base] = (i64)p.tok;
    } else if (p.kind == K_AT) {
        for (u32 c = p.first + threadIdx.x; c < p.end && (u64)(c - p.first) < lim; c += blockDim.x)
            tokens[base + (c - p.first)] = (i64)child_label(I, c, p.mid, p.r0);
    }
}
