// The step kernels' parameters: after the index view (a kernel parameter of its own, `const __restrict__`, so
// that its copy to shared memory goes through the read-only path), three structs passed by value, packed by
// gpu_impl/step_launch.py from the field tables in gpu_impl/layout.py (STEP_TABLES, STEP_ROWS, STEP_MASK);
// the tables' sizes and offsets are checked here at compile time.  A kernel reads only the fields of its own
// job; the host leaves the rest 0.
#pragma once
#define FT_STEP_PARAMS_CUH
#include "index.cuh"

// The root table: rt[x] for labels x < rt_n, 32 bytes (one sector): the root's child with label x (node 0:
// none) and that child's decoded state (decode(child, 1), its child range included), so that a row at the
// root finds its new state in one load (ft_step_root_table builds it).
struct __align__(32) RootKid {
    u32 node, kind, first, mid, end, r0, tok, term;
};

// The child and root tables of the index, the same for every launch of a stepper.  The child table:
// fc[v] = first child of node v | rank1(hi_flag, first child) << 32, for v in [0, fc_n] (fc[v + 1] gives v's
// end: children of consecutive nodes are consecutive).
struct Tab {
    const u64* fc;      // [fc_n + 1] the child table (fc_n 0: none)
    const RootKid* rt;  // [rt_n] the root table (rt_n 0: none)
    u32 fc_n, rt_n;
};

// The rows of one launch: one state (or one row of ids) per row.
struct StepRows {
    const i64* node_in;  // [n] states
    const i64* off_in;
    i64* node_out;       // [n] new states (must not alias node_in / off_in)
    i64* off_out;
    const void* tok;     // [n] tokens, int64 (tok_is64) or int32, tok_stride items apart
    const i64* ids;      // [n, width] rows of ids, ids_stride items apart (walk)
    const i64* begin;    // [n] first column of each row (null: begin_all for every row)
    const i64* end;      // [n] end column of each row (null: end_all for every row)
    const i64* eos;      // [n_eos <= 8] EOS ids
    i64* counts;         // [n] allowed trie tokens per state (null: not wanted)
    unsigned char* ends; // [n] whether a keyword ends at the state (null: not wanted)
    const i64* offsets;  // [n + 1] CSR offsets of the allowed tokens (null: rows of cap tokens)
    i64* tokens;         // the allowed tokens (CSR or padded rows)
    void* table;         // the child table (u64 [n + 1]) or the root table (RootKid [n]) being built
    u64 tok_stride, ids_stride, width, cap;
    i64 begin_all, end_all;
    u32 n;               // rows (the table kernels: nodes, or root labels, covered)
    u32 tok_is64, n_eos, pad0;
};

// A mask's output, grid and options.  The first `extra` rows have parts + 1 blocks each, the other rows
// `parts` (so that the grid can be a multiple of the SM count: every SM stores as much); block b of a row's k
// masks part b of k equal parts of the row (whole 16-entry vectors in aligned coordinates: mask_span).
struct StepMask {
    float* outf;              // [n, V] float32 logits, row_stride apart (additive: -inf over the disallowed)
    unsigned char* outb;      // [n, V] bool mask, row_stride apart (when outf is null)
    unsigned long long* dead_count;  // += the DEAD states masked
    u64 V, row_stride;
    u32 parts, extra;
    u32 flags;  // bit 0: child ranges of nodes past the child table by a block-wide search of their LOUDS zeros
    u32 pad0;
};
