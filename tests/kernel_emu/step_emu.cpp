// Host build of kernels/step.cu (and kernels/node_flags.cu, which fills the index's flag words) for
// tests/test_step_kernel_emulated.py: one std::thread per CUDA thread.  Every step kernel takes the child
// table (fc, fc_n) and the root table (rt, rt_n) after the view, as on the device.
#include "emu.h"
#include "step.cu"
#include "node_flags.cu"
#define B 64
#define TAB const IndexView* v, const u64* fc, u32 fn, const RootKid* rt, u32 rn
#define MASKP u64 V, u32 pb, u32 bpr, const i64* e, u32 ne, float* of, unsigned char* ob, u64 rs, unsigned long long* dc, u32 fl
#define MASKA V, pb, bpr, e, ne, of, ob, rs, dc, fl
extern "C" {
void emu_node_flags(unsigned g, const IndexView* v, u32* out, u64 nwords) {
    emu_run(g, B, [&] { ft_node_flags(v, out, nwords); }); }
void emu_child_table(unsigned g, const IndexView* v, u32 n, u64* out) {
    emu_run(g, B, [&] { ft_step_child_table(v, n, out); }); }
void emu_root_table(unsigned g, const IndexView* v, const u64* fc, u32 fn, u32 lab_n, RootKid* out) {
    emu_run(g, B, [&] { ft_step_root_table(v, fc, fn, lab_n, out); }); }
void emu_advance(unsigned g, TAB, const i64* a, const i64* o, const void* t, u32 is64, u64 st, u32 n, const i64* e, u32 ne, i64* no, i64* oo) {
    emu_run(g, B, [&] { ft_step_advance(v, fc, fn, rt, rn, a, o, t, is64, st, n, e, ne, no, oo); }); }
void emu_walk(unsigned g, TAB, const i64* ids, u64 rs, u64 w, u32 n, const i64* b, i64 ba, const i64* en, i64 ea, const i64* e, u32 ne, i64* no, i64* oo) {
    emu_run(g, B, [&] { ft_step_walk(v, fc, fn, rt, rn, ids, rs, w, n, b, ba, en, ea, e, ne, no, oo); }); }
void emu_mask(unsigned g, TAB, const i64* a, const i64* o, u32 n, MASKP) {
    emu_run(g, B, [&] { ft_step_mask(v, fc, fn, rt, rn, a, o, n, MASKA); }); }
void emu_advance_mask(unsigned g, TAB, const i64* a, const i64* o, const void* t, u32 is64, u64 st, u32 n, MASKP, i64* no, i64* oo) {
    emu_run(g, B, [&] { ft_step_advance_mask(v, fc, fn, rt, rn, a, o, t, is64, st, n, MASKA, no, oo); }); }
void emu_walk_mask(unsigned g, TAB, const i64* ids, u64 is, u64 w, u32 n, const i64* b, i64 ba, const i64* en, i64 ea, MASKP) {
    emu_run(g, B, [&] { ft_step_walk_mask(v, fc, fn, rt, rn, ids, is, w, n, b, ba, en, ea, MASKA); }); }
void emu_count(unsigned g, TAB, const i64* a, const i64* o, u32 n, i64* c, unsigned char* en) {
    emu_run(g, B, [&] { ft_step_count(v, fc, fn, rt, rn, a, o, n, c, en); }); }
void emu_fill(unsigned g, TAB, const i64* a, const i64* o, u32 n, const i64* offs, u64 cap, i64* tok) {
    emu_run(g, B, [&] { ft_step_fill(v, fc, fn, rt, rn, a, o, n, offs, cap, tok); }); }
}
