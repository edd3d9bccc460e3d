// Host build of kernels/step.cu (and kernels/node_flags.cu, which fills the index's flag words) for
// tests/test_step_kernel_emulated.py: one std::thread per CUDA thread.
#include "emu.h"
#include "step.cu"
#include "node_flags.cu"
#define B 64
extern "C" {
void emu_node_flags(unsigned g, const IndexView* v, u32* out, u64 nwords) {
    emu_run(g, B, [&] { ft_node_flags(v, out, nwords); }); }
void emu_advance(unsigned g, const IndexView* v, const i64* a, const i64* o, const void* t, u32 is64, u64 st, u32 n, const i64* e, u32 ne, i64* no, i64* oo) {
    emu_run(g, B, [&] { ft_step_advance(v, a, o, t, is64, st, n, e, ne, no, oo); }); }
void emu_walk(unsigned g, const IndexView* v, const i64* ids, u64 rs, u32 n, const i64* b, i64 ba, const i64* en, i64 ea, const i64* e, u32 ne, i64* no, i64* oo) {
    emu_run(g, B, [&] { ft_step_walk(v, ids, rs, n, b, ba, en, ea, e, ne, no, oo); }); }
void emu_mask(unsigned g, const IndexView* v, const i64* a, const i64* o, u32 n, u64 V, u32 pb, u32 bpr, const i64* e, u32 ne, float* of, unsigned char* ob, u64 rs, unsigned long long* dc, u32 fl) {
    emu_run(g, B, [&] { ft_step_mask(v, a, o, n, V, pb, bpr, e, ne, of, ob, rs, dc, fl); }); }
void emu_advance_mask(unsigned g, const IndexView* v, const i64* a, const i64* o, const void* t, u32 is64, u64 st, u32 n, u64 V, u32 pb, u32 bpr, const i64* e, u32 ne, float* of, unsigned char* ob, u64 rs, unsigned long long* dc, u32 fl, i64* no, i64* oo) {
    emu_run(g, B, [&] { ft_step_advance_mask(v, a, o, t, is64, st, n, V, pb, bpr, e, ne, of, ob, rs, dc, fl, no, oo); }); }
void emu_walk_mask(unsigned g, const IndexView* v, const i64* ids, u64 is, u32 n, const i64* b, i64 ba, const i64* en, i64 ea, u64 V, u32 pb, u32 bpr, const i64* e, u32 ne, float* of, unsigned char* ob, u64 rs, unsigned long long* dc, u32 fl) {
    emu_run(g, B, [&] { ft_step_walk_mask(v, ids, is, n, b, ba, en, ea, V, pb, bpr, e, ne, of, ob, rs, dc, fl); }); }
void emu_count(unsigned g, const IndexView* v, const i64* a, const i64* o, u32 n, i64* c, unsigned char* en) {
    emu_run(g, B, [&] { ft_step_count(v, a, o, n, c, en); }); }
void emu_fill(unsigned g, const IndexView* v, const i64* a, const i64* o, u32 n, const i64* offs, u64 cap, i64* tok) {
    emu_run(g, B, [&] { ft_step_fill(v, a, o, n, offs, cap, tok); }); }
}
