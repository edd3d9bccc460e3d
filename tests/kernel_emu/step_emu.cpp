// Host build of kernels/step.cu (and kernels/node_flags.cu, which fills the index's flag words) for
// tests/test_step_kernel_emulated.py: one std::thread per CUDA thread.  Every step kernel takes what it takes
// on the device: the view, then the structs of kernels/step_params.cuh (packed by the test from
// gpu_impl/layout.py's tables; the test appends the tables' static_asserts to this source).
#include "emu.h"
#include "step.cu"
#include "node_flags.cu"
#define B 64
#define EMU_ROWS(k)                                                                                   \
    void emu_##k(unsigned g, const IndexView* v, const Tab* t, const StepRows* r) {                   \
        emu_run(g, B, [&] { ft_step_##k(v, *t, *r); });                                               \
    }
#define EMU_MASK(k)                                                                                   \
    void emu_##k(unsigned g, const IndexView* v, const Tab* t, const StepRows* r, const StepMask* m) { \
        emu_run(g, B, [&] { ft_step_##k(v, *t, *r, *m); });                                           \
    }
extern "C" {
void emu_node_flags(unsigned g, const IndexView* v, u32* out, u64 nwords) {
    emu_run(g, B, [&] { ft_node_flags(v, out, nwords); });
}
EMU_ROWS(child_table)
EMU_ROWS(root_table)
EMU_ROWS(advance)
EMU_ROWS(walk)
EMU_ROWS(count)
EMU_ROWS(fill)
EMU_MASK(mask)
EMU_MASK(advance_mask)
EMU_MASK(walk_mask)
}
