// The per-node flag nibbles the search and step kernels read (IndexView.nflags), derived on the device at
// upload from the LOUDS, linked and terminal bits already there (index format 3 does not store them).
// Same bits as flashtrie/index/derived.py node_flags: node j in bits 4 (j % 8) .. of word j / 8,
// bit 0 linked, bit 1 terminal, bit 2 has children; nodes at or past num_nodes are zero.
#include "index.cuh"

// Bits 4 k of the result hold bit k of byte b (eight nodes of one flag byte into one word's nibbles).
__device__ __forceinline__ u32 spread_byte(u32 b) {
    u32 x = b & 0xFFu;
    x = (x | (x << 12)) & 0x000F000Fu;
    x = (x | (x << 6)) & 0x03030303u;
    x = (x | (x << 3)) & 0x11111111u;
    return x;
}

// Position of the first zero of the LOUDS bits at or after `p` (the LOUDS ends with zeros: it exists).
__device__ __forceinline__ u64 next_zero(const u64* __restrict__ words, u64 p) {
    u64 wi = p >> 6;
    u64 w = ~__ldg(&words[wi]) & (~0ull << (p & 63));
    while (w == 0) w = ~__ldg(&words[++wi]);
    return wi * 64 + (u64)(__ffsll((long long)w) - 1);
}

// One thread per flag word (8 nodes): one select0 finds the first node's unary code, the next codes follow
// it; a node has children when its code starts with a one.
extern "C" __global__ void ft_node_flags(const IndexView* __restrict__ view, u32* __restrict__ out, u64 nwords) {
    const IndexView& I = *view;
    const u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= nwords) return;
    const u64 n = I.num_nodes;
    const u64 j0 = t * 8;
    u32 word = 0;
    if (j0 < n) {
        u64 p = j0 == 0 ? 0ull : select0(I, j0 - 1) + 1;  // the first bit of node j0's code
        u32 kids = 0;
        for (u32 k = 0; k < 8 && j0 + k < n; ++k) {
            const u64 z = next_zero(I.louds_words, p);
            if (z > p) kids |= 1u << k;
            p = z + 1;
        }
        // byte t of a node bit vector: its words have zero padding past the last node
        const u32 sh = (u32)((t & 7) * 8);
        const u32 lk = (u32)(__ldg(&I.linked_words[t >> 3]) >> sh) & 0xFFu;
        const u32 tm = (u32)(__ldg(&I.terminal_words[t >> 3]) >> sh) & 0xFFu;
        word = spread_byte(lk) * NODE_LINKED | spread_byte(tm) * NODE_TERMINAL | spread_byte(kids) * NODE_HAS_CHILD;
    }
    out[t] = word;
}
