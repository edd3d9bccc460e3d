// Host build of kernels/score_mask.cu for tests/test_score_mask_emulated.py: one std::thread per CUDA thread.
// Each entry takes a launch as the driver does: the grid and the packed parameters (gpu_impl/layout.py
// KERNEL_PARAMS, one 8-byte slot each), so the test launches through `ScoreMasker` itself.
#include "emu.h"
#include "score_mask.cu"
#define B 64
template <class T> static T slot(const unsigned char* p, int i) { T v; std::memcpy(&v, p + 8 * i, sizeof(T)); return v; }
extern "C" {
void emu_score_mask(unsigned g, const unsigned char* p) {
    emu_run(g, B, [&] {
        ft_score_mask(slot<void*>(p, 0), slot<const unsigned char*>(p, 1), slot<unsigned char*>(p, 2), slot<u64>(p, 3),
                      slot<u64>(p, 4), slot<u64>(p, 5), slot<i64>(p, 6), slot<u32>(p, 7), slot<u32>(p, 8),
                      slot<u32>(p, 9));
    });
}
void emu_score_force(unsigned g, const unsigned char* p) {
    emu_run(g, B, [&] {
        ft_score_force(slot<void*>(p, 0), slot<const unsigned char*>(p, 1), slot<const unsigned char*>(p, 2),
                       slot<u64>(p, 3), slot<u64>(p, 4), slot<u64>(p, 5), slot<u32>(p, 6), slot<u32>(p, 7),
                       slot<u32>(p, 8));
    });
}
}
