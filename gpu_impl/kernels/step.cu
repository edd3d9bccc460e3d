// flashtrie: stepwise trie constraints for autoregressive decoders (gpu_impl/stepwise.py).
//
// A state is (node, off) as int64 (docs/index-format.md): off tokens into node's incoming edge, off equal to
// the edge length at the node, the root (0, 0); node -1 is DEAD and -2 FINISHED (flashtrie/stepwise.py).
// Every kernel gives exactly what the numpy backend gives (flashtrie.stepwise.TrieStepper); a state that is
// not valid for the index (node or off out of range) reads as DEAD here, where numpy refuses it.
//   ft_step_advance  one block per state: the state after one token (EOS handling included): thread 0 walks
//                    the chain of dependent loads alone (decode, then the child when its label window is small:
//                    its labels loaded together), the block searches a wide window (advance_one, block_advance)
//   ft_step_walk     one block per row: the state after a row's tokens ids[r, begin:end] from the root (DEAD
//                    where begin or end is outside [0, width])
//   ft_step_mask     `parts` blocks per state (parts + 1 for the first `extra` states), each over an equal part
//                    of the row (cut where its 16-byte vectors start): the state decoded by thread 0 (one barrier),
//                    then -inf stored over the disallowed float32 logits in 16-byte stores, or a bool mask
//                    (mask_span): by comparison where at most an edge token and EOS are allowed; at a node of at
//                    most SCAN_MAX children, over the whole span with the allowed logits read first and stored
//                    back (mask_restore); else through a bitmap of each chunk's allowed tokens in shared memory
//   ft_step_advance_mask  both in one launch: the new states and their mask (one launch per decode step);
//                    thread 0 advances and decodes the new state with no barrier between (inside an edge from
//                    the node the old state read: one load for the next token)
//   ft_step_walk_mask     walk (block-wide per row), then the mask of the walked states, in one launch
//   ft_step_count    one thread per state: number of allowed trie tokens, and whether a keyword ends
//   ft_step_fill     one block per state: the allowed tokens, ascending, into CSR or padded rows
//   ft_step_child_table  one thread per node v <= n: the child table (first child of v, rank1(hi_flag, it))
//   ft_step_root_table   one thread per child of the root: the root table (RootKid by label)
//
// Every kernel takes the index view, its child and root tables (Tab), the rows of the launch (StepRows) and a
// mask kernel the mask's output and grid (StepMask), the structs by value (step_params.cuh).  The child range of a node below
// fc_n is two adjacent child table entries (one load) instead of two select0 (a chain of dependent loads
// each), and a row at the root takes its child and that child's decoded state from one root table entry.
//   step_params.cuh  the parameter structs     step_decode.cuh  a state's decode, the view, the EOS ids
//   step_search.cuh  block-wide searches       step_advance.cuh advance and walk
//   step_mask_store.cuh  a span's stores       step_mask.cuh    a block's part of a row's mask, advance_mask
//   step_tables.cuh  table entries, the allowed tokens

#ifndef FT_STEP_THREADS
#define FT_STEP_THREADS 256
#endif
#ifndef FT_STEP_CHUNK
#define FT_STEP_CHUNK 4096  // vocabulary entries per mask chunk (a power of two; the bitmap is CHUNK / 8 bytes)
#endif
#define CHUNK ((u32)FT_STEP_CHUNK)

#include "step_params.cuh"
#include "step_decode.cuh"
#include "step_search.cuh"
#include "step_advance.cuh"
#include "step_mask_store.cuh"
#include "step_mask.cuh"
#include "step_tables.cuh"

// One block per state: the state after its token (block_advance).
extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS)
ft_step_advance(const IndexView* __restrict__ view, const Tab T, const StepRows r) {
    __shared__ IndexView I;
    __shared__ Adv s_adv[2];
    const u32 b = blockIdx.x;
    const i64 node = r.node_in[b], off = r.off_in[b], x = token_at(r.tok, r.tok_is64, (u64)b * r.tok_stride);
    load_view(view, I, r.eos, r.n_eos);
    i64 nn, no;
    block_advance(I, T, node, off, x, NO_VOCAB, r.n_eos, s_adv, 0, nn, no);
    if (threadIdx.x == 0) { r.node_out[b] = nn; r.off_out[b] = no; }
}

// One block per row: the state after the row's tokens ids[b, begin:end] from the root.
extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS, 4)
ft_step_walk(const IndexView* __restrict__ view, const Tab T, const StepRows r) {
    __shared__ IndexView I;
    __shared__ Adv s_adv[2];
    const u32 b = blockIdx.x;
    const i64 c0 = r.begin ? __ldg(&r.begin[b]) : r.begin_all;
    const i64 c1 = r.end ? __ldg(&r.end[b]) : r.end_all;
    load_view(view, I, r.eos, r.n_eos);
    i64 node, off;
    block_walk(I, T, r.ids + (u64)b * r.ids_stride, r.width, c0, c1, NO_VOCAB, r.n_eos, s_adv, node, off);
    if (threadIdx.x == 0) { r.node_out[b] = node; r.off_out[b] = off; }
}

extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS, 4)
ft_step_mask(const IndexView* __restrict__ view, const Tab T, const StepRows r, const StepMask m) {
    __shared__ IndexView I;
    __shared__ Pos P;
    const MaskRow w = mask_row(m);
    const i64 node = __ldg(&r.node_in[w.row]), off = __ldg(&r.off_in[w.row]);  // in flight with the view
    load_view(view, I, r.eos, r.n_eos);
    if (threadIdx.x == 0) P = decode_for_mask(I, T, node, off, w.wide);
    __syncthreads();
    mask_end(I, mask_pos(I, T, &P, w.wide), w, m, r.n_eos);
}

// advance, then the mask of the new states, in one launch: the root table's shortcut (advance_mask_root) or
// thread 0's advance and decode (advance_for_mask); then every block masks its part.
extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS, 4)
ft_step_advance_mask(const IndexView* __restrict__ view, const Tab T, const StepRows r, const StepMask m) {
    __shared__ IndexView I;
    __shared__ Pos P;
    __shared__ Adv A;
    const MaskRow w = mask_row(m);
    const i64 node = __ldg(&r.node_in[w.row]), off = __ldg(&r.off_in[w.row]);
    const i64 x = token_at(r.tok, r.tok_is64, (u64)w.row * r.tok_stride);
    load_view(view, I, r.eos, r.n_eos);  // (node, off and x in flight with the view)
    if (takes_root_table(T, r, node, off, x, m.V)) {  // uniform
        advance_mask_root(I, T, r, m, w, x);
        return;
    }
    mask_end(I, advance_for_mask(I, T, r, w, node, off, x, m.V, &A, &P), w, m, r.n_eos);
}

// walk, then the mask of the walked states, in one launch (the processor of flashtrie/hf.py): every block of
// a row walks ids[row, begin:end) from the root block-wide, then masks its part.
extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS, 4)
ft_step_walk_mask(const IndexView* __restrict__ view, const Tab T, const StepRows r, const StepMask m) {
    __shared__ IndexView I;
    __shared__ Pos P;
    __shared__ Adv s_adv[2];
    const MaskRow w = mask_row(m);
    const i64 c0 = r.begin ? __ldg(&r.begin[w.row]) : r.begin_all;
    const i64 c1 = r.end ? __ldg(&r.end[w.row]) : r.end_all;
    load_view(view, I, r.eos, r.n_eos);
    i64 node, off;
    block_walk(I, T, r.ids + (u64)w.row * r.ids_stride, r.width, c0, c1, m.V, r.n_eos, s_adv, node, off);
    if (threadIdx.x == 0) P = decode_for_mask(I, T, node, off, w.wide);
    __syncthreads();
    mask_end(I, mask_pos(I, T, &P, w.wide), w, m, r.n_eos);
}

// One thread per state: the allowed trie tokens (counts) and whether a keyword ends (ends), each if wanted.
extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS)
ft_step_count(const IndexView* __restrict__ view, const Tab T, const StepRows r) {
    __shared__ IndexView I;
    load_view(view, I);
    __syncthreads();
    const u32 b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= r.n) return;
    const Pos p = decode(I, T, __ldg(&r.node_in[b]), __ldg(&r.off_in[b]), true);
    if (r.counts) r.counts[b] = allowed_count(p);
    if (r.ends) r.ends[b] = (p.kind == K_AT && p.term) ? 1 : 0;
}

// One block per state: its allowed tokens into CSR (offsets != null: state b's tokens at offsets[b] ..) or
// padded rows of `cap` (the first cap tokens).
extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS)
ft_step_fill(const IndexView* __restrict__ view, const Tab T, const StepRows r) {
    __shared__ IndexView I;
    __shared__ Pos P;
    load_view(view, I);
    const u32 b = blockIdx.x;
    if (threadIdx.x == 0) P = decode(I, T, __ldg(&r.node_in[b]), __ldg(&r.off_in[b]), true);
    __syncthreads();
    const Pos p = P;
    const u64 base = r.offsets ? (u64)__ldg(&r.offsets[b]) : (u64)b * r.cap;
    store_allowed(I, p, base, r.offsets ? ~0ull : r.cap, r.tokens);
}

// The child table of nodes [0, r.n] (r.n <= num_nodes) into r.table: one thread per node.
extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS)
ft_step_child_table(const IndexView* __restrict__ view, const Tab T, const StepRows r) {
    __shared__ IndexView I;
    load_view(view, I);
    __syncthreads();
    const u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (v > r.n) return;
    static_cast<u64*>(r.table)[v] = child_table_entry(I, v);
}

// The root table of labels below r.n into r.table (zeroed), from the child table of ix (its root table
// unused): one thread per child of the root.
extern "C" __global__ void __launch_bounds__(FT_STEP_THREADS)
ft_step_root_table(const IndexView* __restrict__ view, const Tab T, const StepRows r) {
    __shared__ IndexView I;
    load_view(view, I);
    __syncthreads();
    const Tab F{T.fc, nullptr, T.fc_n, 0};  // the child table only
    root_table_entry(I, F, (u64)blockIdx.x * blockDim.x + threadIdx.x, r.n, static_cast<RootKid*>(r.table));
}
