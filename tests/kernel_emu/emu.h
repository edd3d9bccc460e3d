// A host shim for simple CUDA kernels (tests only): each block runs its threads as std::threads with a
// std::barrier for __syncthreads, blocks one after another; __shared__ becomes static (blocks never overlap).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>
#include <barrier>
#include <vector>
#include <algorithm>
#include <functional>
#include <atomic>
struct dim3 { unsigned x = 0, y = 0, z = 0; };
inline thread_local dim3 threadIdx;
inline dim3 blockIdx, blockDim;
inline std::barrier<>* g_bar = nullptr;
#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__
#define __shared__ static
inline void __syncthreads() { g_bar->arrive_and_wait(); }
template <class T> inline T __ldg(const T* p) { return *p; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned atomicOr(unsigned* p, unsigned v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
template <class A, class B> inline A min(A a, B b) { return a < (A)b ? a : (A)b; }
template <class A, class B> inline A max(A a, B b) { return a > (A)b ? a : (A)b; }
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
#define __align__(n) alignas(n)
#define FT_OFFSETOF(T, f) offsetof(T, f)  // the layout checks of gpu_impl/layout.py
inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }
// two counters used in turn: a counter is cleared (by thread 0, after everyone read it) before its next use
inline std::atomic<int> g_count[2];
inline thread_local int t_phase = 0;
inline int __syncthreads_count(int pred) {
    const int ph = t_phase;
    t_phase ^= 1;
    if (pred) g_count[ph].fetch_add(1);
    __syncthreads();
    const int r = g_count[ph].load();
    __syncthreads();
    if (threadIdx.x == 0) g_count[ph].store(0);
    return r;
}
inline int __syncthreads_or(int pred) { return __syncthreads_count(pred) > 0; }
inline void emu_run(unsigned grid, unsigned block, const std::function<void()>& f) {
    blockDim.x = block;
    for (unsigned b = 0; b < grid; ++b) {
        blockIdx.x = b;
        std::barrier<> bar(block);
        g_bar = &bar;
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < block; ++t)
            ts.emplace_back([&, t] { threadIdx.x = t; f(); bar.arrive_and_drop(); });
        for (auto& t : ts) t.join();
    }
}
