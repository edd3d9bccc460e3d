// A block's part of a row's mask (TrieStepper.mask): the row and span of a mask block, the decoded state in
// every thread, and the three ways to mask a span.
#pragma once
#include "step_mask_store.cuh"
#include "step_advance.cuh"

// The first chunk's bounds at a node past SCAN_MAX children, searched together: children [lo_c, hi_c) have
// labels in [e_begin, the first chunk's end).
__device__ __forceinline__ void first_chunk_children(const IndexView& I, const Pos& p, u64 u_begin, u64 e_begin,
                                                     u64 e_end, u32 mis, u64 V, u32& lo_c, u32& hi_c) {
    const u64 eb = min(e_end, u_begin + CHUNK - mis);
    u32 la, ha, lb, hb;
    label_window(p.first, p.end, V, e_begin, la, ha);
    label_window(p.first, p.end, V, eb, lb, hb);
    if (e_begin == 0) la = ha = p.first;
    if (eb >= V) lb = hb = p.end;
    block_lower_bound2(I, p.mid, p.r0, la, ha, e_begin, lb, hb, eb, lo_c, hi_c);
}

// A chunk's bitmap before its allowed tokens: bits [jlo, jhi) are the row's entries (clear, or set where the
// chunk is `full`); bits outside the row are set for float32 logits (never written), clear for a bool mask.
__device__ __forceinline__ void chunk_bits_clear(u32* bits, u32 jlo, u32 jhi, bool full, bool additive) {
    for (u32 k = (jlo >> 5) + threadIdx.x; k < (jhi + 31) >> 5; k += blockDim.x) {
        const u32 a = max(jlo, 32 * k) - 32 * k, b = min(jhi, 32 * k + 32) - 32 * k;  // row bits [a, b)
        const u32 in_row = (b >= 32 ? ~0u : (1u << b) - 1u) & ~((1u << a) - 1u);
        bits[k] = full ? ~0u : (additive ? ~in_row : 0u);
    }
}

// The bits of the chunk's allowed tokens in [elo, ehi): the children's labels (from s_lab with `scan`, else
// children [lo_c, hi_c) unless `full`) and (eos_ok) the EOS ids; bit j is entry cu - mis + j.
__device__ __forceinline__ void chunk_bits_set(const IndexView& I, const Pos& p, u32* bits, bool scan, bool full,
                                               u32 lo_c, u32 hi_c, u64 elo, u64 ehi, u64 cu, u32 mis, bool eos_ok,
                                               u32 n_eos) {
    const u32 T = blockDim.x;
    if (scan) {
        for (u32 c = threadIdx.x; c < p.end - p.first; c += T) {
            const u32 x = s_lab[c];
            if (x >= elo && x < ehi) set_bit(bits, (u32)(x + mis - cu));
        }
    } else if (!full) {
        for (u32 c = lo_c + threadIdx.x; c < hi_c; c += T)
            set_bit(bits, (u32)(child_label(I, c, p.mid, p.r0) + mis - cu));
    }
    if (threadIdx.x == 0 && eos_ok)
        for (u32 e = 0; e < n_eos; ++e) {
            const i64 x = s_eos[e];
            if (x >= (i64)elo && x < (i64)ehi) set_bit(bits, (u32)((u64)x + mis - cu));
        }
}

// -inf over the disallowed float32 logits of the chunk's bits [jlo, jhi) (bit j: entry base + j): a vector of
// 4 entries with no bit set in one 16-byte store, an all-allowed one not written, a mixed one entry by entry.
__device__ __forceinline__ void chunk_store_f32(const u32* bits, float* base, u32 jlo, u32 jhi) {
    const float4 ni4 = make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
#pragma unroll 4
    for (u32 i = (jlo >> 2) + threadIdx.x; i < (jhi + 3) >> 2; i += blockDim.x) {
        const u32 m = (bits[i >> 3] >> ((i & 7u) << 2)) & 0xFu;
        if (m == 0) *reinterpret_cast<float4*>(base + 4 * i) = ni4;
        else if (m != 0xFu) neg_mixed(base + 4 * i, m);
    }
}

// The bool mask of the chunk's bits [jlo, jhi) (bit j: entry base + j): one 16-byte store of 16 entries,
// entry by entry at the row's ends.
__device__ __forceinline__ void chunk_store_bool(const u32* bits, unsigned char* base, u32 jlo, u32 jhi) {
    for (u32 i = (jlo >> 4) + threadIdx.x; i < (jhi + 15) >> 4; i += blockDim.x) {
        const u32 m = (bits[i >> 1] >> ((i & 1u) << 4)) & 0xFFFFu, j = 16 * i;
        unsigned char* q = base + j;
        if (j >= jlo && j + 16 <= jhi) {
            *reinterpret_cast<uint4*>(q) = make_uint4(bytes4(m & 0xFu), bytes4((m >> 4) & 0xFu),
                                                      bytes4((m >> 8) & 0xFu), bytes4(m >> 12));
        } else {
            for (u32 t = 0; t < 16; ++t)
                if (j + t >= jlo && j + t < jhi) q[t] = (unsigned char)((m >> t) & 1u);
        }
    }
}

// The span through a bitmap per chunk of CHUNK entries from u_begin, in shared memory: one barrier, the bits
// of the allowed tokens, one barrier, then per vector its bits (one shared load).  Two bitmaps, alternating,
// so the next chunk's bitmap needs no barrier after the stores.  A node of at most SCAN_MAX children takes its
// labels from s_lab; a wider one searches each chunk's children (block_lower_bound at the chunk bounds).
__device__ __forceinline__ void mask_bitmap(const IndexView& I, const Pos& p, u64 u_begin, u64 u_end, u64 e_begin,
                                            u64 e_end, u32 mis, u64 V, bool eos_ok, u32 n_eos, float* rowf,
                                            unsigned char* rowb) {
    __shared__ u32 bits2[2][CHUNK / 32];
    const bool scan = p.end - p.first <= SCAN_MAX;
    u32 lo_c = 0, hi_c = 0;  // search: children [lo_c, hi_c) have labels in the chunk's entries
    if (scan) load_labels(I, p, nullptr, 0, 0);
    else first_chunk_children(I, p, u_begin, e_begin, e_end, mis, V, lo_c, hi_c);
    u32 buf = 0;
    for (u64 cu = u_begin; cu < u_end; cu += CHUNK) {
        const u64 elo = max(e_begin, cu > mis ? cu - mis : 0ull), ehi = min(e_end, cu + CHUNK - mis);
        if (elo >= ehi) break;  // uniform: past the row's end
        if (!scan && cu != u_begin) {
            u32 lo, hi;
            label_window(p.first, p.end, V, ehi, lo, hi);
            hi_c = ehi >= V ? p.end : block_lower_bound(I, max(lo, lo_c), hi, p.mid, p.r0, ehi);
        }
        const bool full = !scan && (u64)(hi_c - lo_c) == ehi - elo;  // every entry is a child label
        if (full && rowf) { lo_c = hi_c; continue; }  // nothing to store
        u32* bits = bits2[buf];
        buf ^= 1u;
        const u32 jlo = (u32)(elo + mis - cu), jhi = (u32)(ehi + mis - cu);  // the chunk's bits of the row
        chunk_bits_clear(bits, jlo, jhi, full, rowf != nullptr);
        __syncthreads();  // (also: s_lab is written)
        chunk_bits_set(I, p, bits, scan, full, lo_c, hi_c, elo, ehi, cu, mis, eos_ok, n_eos);
        __syncthreads();
        if (rowf) chunk_store_f32(bits, rowf + ((i64)cu - (i64)mis), jlo, jhi);  // (entry of bit 0: before the
        else chunk_store_bool(bits, rowb + ((i64)cu - (i64)mis), jlo, jhi);      // row only where bits are set)
        lo_c = hi_c;
    }
}

// A block's part of a row's mask, for the decoded state p (with its child range), in aligned coordinates
// u = entry + mis (mis: the row's misalignment in entries, so every vector of VEC entries starting at a multiple
// of VEC in u is one 16-byte store): the block has [u_begin, u_end) (multiples of 16; bitmap chunks of CHUNK
// entries from u_begin).  Three ways, by what the state allows:
// * at most its edge's next token and the EOS ids (inside an edge, DEAD, FINISHED, a node without children):
//   each vector's allowed entries by comparison (neg_span, bool_span), no barrier;
// * float32 logits at a node of at most SCAN_MAX children: mask_restore;
// * else mask_bitmap.
// Only mask_restore reads the float32 logits (the allowed ones, stored back unchanged).
__device__ void mask_span(const IndexView& I, const Pos& p, u64 u_begin, u64 u_end, u64 V, u32 n_eos, float* rowf,
                          unsigned char* rowb) {
    const u32 mis = rowf ? (u32)(((unsigned long long)rowf >> 2) & 3u) : (u32)((unsigned long long)rowb & 15u);
    const u64 e_begin = u_begin > mis ? min(V, u_begin - mis) : 0ull;
    const u64 e_end = u_end > mis ? min(V, u_end - mis) : 0ull;
    if (e_begin >= e_end) return;  // uniform
    const bool eos_ok = p.kind != K_MID && (p.kind != K_AT || p.term);
    if (p.kind != K_AT || p.end == p.first) {  // uniform: sparse
        const i64 tok = p.kind == K_MID ? (i64)p.tok : NO_TOKEN;
        if (rowf) neg_span(rowf, u_begin, e_begin, e_end, mis, tok, eos_ok, n_eos);
        else bool_span(rowb, u_begin, e_begin, e_end, mis, tok, eos_ok, n_eos);
    } else if (p.end - p.first <= SCAN_MAX && rowf) {  // uniform
        mask_restore(I, p, u_begin, e_begin, e_end, mis, eos_ok, n_eos, rowf);
    } else {
        mask_bitmap(I, p, u_begin, u_end, e_begin, e_end, mis, V, eos_ok, n_eos, rowf, rowb);
    }
}

// A mask block's row, its span [u0, u1) (aligned coordinates: mask_span) and the row's output.
struct MaskRow {
    u32 row, b;
    u64 u0, u1;
    float* f;
    unsigned char* c;
    bool wide;
};

// The row and part of this block: the first m.extra rows in parts + 1 blocks, the others in m.parts.
__device__ __forceinline__ MaskRow mask_row(const StepMask& m) {
    MaskRow w;
    const u32 parts = m.parts, extra = m.extra;
    const u32 big = extra * (parts + 1);  // the blocks of the rows with parts + 1
    const u32 k = blockIdx.x < big ? parts + 1 : parts, i = blockIdx.x < big ? blockIdx.x : blockIdx.x - big;
    w.row = (blockIdx.x < big ? 0u : extra) + i / k;
    w.b = i % k;
    w.f = m.outf ? m.outf + (u64)w.row * m.row_stride : nullptr;
    w.c = m.outb ? m.outb + (u64)w.row * m.row_stride : nullptr;
    // the row's aligned extent [0, V + mis) in k equal parts of whole 16-entry vectors
    const u32 mis = m.outf ? (u32)(((unsigned long long)w.f >> 2) & 3u) : (u32)((unsigned long long)w.c & 15u);
    const u64 n16 = (m.V + mis + 15) >> 4;
    w.u0 = 16 * (n16 * w.b / k);
    w.u1 = 16 * (n16 * (w.b + 1) / k);
    w.wide = (m.flags & 1u) != 0;
    return w;
}

// Thread 0's decode of a state for the mask: its child range too (the table or select0), except past the
// table with `wide`, where every thread finishes it block-wide (mask_pos).
__device__ __forceinline__ Pos decode_for_mask(const IndexView& I, const Tab& T, i64 node, i64 off, bool wide) {
    return decode(I, T, node, off, !wide || (node >= 0 && node < (i64)T.fc_n));
}

// After the barrier that follows thread 0's decode into *P: the Pos in every thread.
__device__ __forceinline__ Pos mask_pos(const IndexView& I, const Tab& T, const Pos* P, bool wide) {
    Pos p = *P;
    if (wide && p.kind == K_AT && !p.ranged) block_child_range(I, p.node, p);  // uniform
    return p;
}

// The shared end of every mask kernel: count the state if dead, mask the block's span.
__device__ __forceinline__ void mask_end(const IndexView& I, const Pos& p, const MaskRow& w, const StepMask& m,
                                         u32 n_eos) {
    if (threadIdx.x == 0 && w.b == 0 && p.kind == K_DEAD) atomicAdd(m.dead_count, 1ull);
    mask_span(I, p, w.u0, w.u1, m.V, n_eos, w.f, w.c);
}

// ---------------------------------------------------------------------------------- advance, then mask
// A row at the root with a token in the root table that is no EOS id (uniform: every thread has node, off and
// x): every thread loads its new state from the table while thread 0 loads the view, so the view's barrier is
// the only one before the mask and no decoded state goes through shared memory (advance_one's shortcut,
// block-wide).
__device__ __forceinline__ bool takes_root_table(const Tab& T, const StepRows& r, i64 node, i64 off, i64 x, u64 V) {
    bool root = in_root_table(T, node, off, x, V);
    for (u32 k = 0; root && k < r.n_eos; ++k) root = __ldg(&r.eos[k]) != x;
    return root;
}

// The new state by the root table, its mask (after the view's barrier), and block 0 of the row stores it.
__device__ __forceinline__ void advance_mask_root(const IndexView& I, const Tab& T, const StepRows& r,
                                                  const StepMask& m, const MaskRow& w, i64 x) {
    const RootKid k = load_root_kid(T.rt, (u64)x);
    const Pos p = k.node ? root_kid_pos(k) : dead_pos();
    __syncthreads();  // the view
    if (threadIdx.x == 0 && w.b == 0) {
        r.node_out[w.row] = k.node ? (i64)k.node : ST_DEAD;
        r.off_out[w.row] = k.node ? 1 : 0;
    }
    mask_end(I, p, w, m, r.n_eos);
}

// The new state, decoded for the mask into *P, in every thread: thread 0 advances the row's state and decodes
// the new one with no barrier between (a new state inside the old one's edge comes decoded: one load for its
// token); a wide child search is finished block-wide.  Block 0 of the row stores the state.
__device__ __forceinline__ Pos advance_for_mask(const IndexView& I, const Tab& T, const StepRows& r,
                                                const MaskRow& w, i64 node, i64 off, i64 x, u64 V, Adv* A, Pos* P) {
    if (threadIdx.x == 0) {
        *A = advance_one(I, T, node, off, x, V, r.n_eos, P, !w.wide || (node >= 0 && node < (i64)T.fc_n));
        if (!A->search && !A->next) *P = decode_for_mask(I, T, A->nn, A->no, w.wide);
    }
    __syncthreads();
    if (A->search) {  // uniform
        const u32 c = block_lower_bound(I, A->lo, A->hi, A->mid, A->r0, (u64)x);
        if (threadIdx.x == 0) {
            if (c < A->end && (i64)child_label(I, c, A->mid, A->r0) == x) { A->nn = c; A->no = 1; }
            *P = decode_for_mask(I, T, A->nn, A->no, w.wide);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0 && w.b == 0) { r.node_out[w.row] = A->nn; r.off_out[w.row] = A->no; }
    return mask_pos(I, T, P, w.wide);
}
