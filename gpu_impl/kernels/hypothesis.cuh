// A hypothesis (q, node, off, s, L, r) of reference_cpu/numpy_search.py, packed in 16 bytes.
// q and r are where it is stored (frontier slot q * B + r); the other four are:
//   x  node
//   y  s, the float32 score (bits)
//   z  L (low 16 bits) | rem << 16 (MID: tokens of the edge still to read)
//   w  kind (top 2 bits) | aux (30 bits)
// off is encoded by the kind: AT_NODE (off = edge length), MID (aux = suffix index of the next token),
// LINKED_OFF (aux = off tokens consumed; the suffix index is found through link_starts).
#pragma once
#include "index.cuh"

// the kinds (KIND_AT_NODE, KIND_MID, KIND_LINKED_OFF): constants.cuh
#define AUX_MASK 0x3FFFFFFFu

struct Hyp {
    uint4 v;

    __device__ __forceinline__ u32 node() const { return v.x; }
    __device__ __forceinline__ float score() const { return __uint_as_float(v.y); }
    __device__ __forceinline__ u32 score_bits() const { return v.y; }
    __device__ __forceinline__ u32 length() const { return v.z & 0xFFFFu; }
    __device__ __forceinline__ u32 rem() const { return v.z >> 16; }
    __device__ __forceinline__ u32 kind() const { return v.w >> 30; }
    __device__ __forceinline__ u32 aux() const { return v.w & AUX_MASK; }

    __device__ static __forceinline__ Hyp load(const uint4* p) { return Hyp{__ldcg(p)}; }
    __device__ static __forceinline__ Hyp at_node(u32 node, float s, u32 len) {
        return Hyp{make_uint4(node, __float_as_uint(s), len, KIND_AT_NODE << 30)};
    }
    __device__ static __forceinline__ Hyp mid_edge(u32 node, float s, u32 len, u32 rem, u32 sufbase) {
        return Hyp{make_uint4(node, __float_as_uint(s), len | (rem << 16), (KIND_MID << 30) | sufbase)};
    }
    __device__ static __forceinline__ Hyp linked_off(u32 node, float s, u32 len, u32 off) {
        return Hyp{make_uint4(node, __float_as_uint(s), len, (KIND_LINKED_OFF << 30) | off)};
    }
};

// A whole keyword offered to the pool: (node, s, n, L); in the pool node becomes the keyword id.
struct PoolEntry {
    uint4 v;

    __device__ __forceinline__ u32 node_or_id() const { return v.x; }
    __device__ __forceinline__ float norm_score() const { return __uint_as_float(v.z); }
    __device__ static __forceinline__ PoolEntry load(const uint4* p) { return PoolEntry{__ldcg(p)}; }
    __device__ static __forceinline__ PoolEntry make(u32 node, float s, float n, u32 len) {
        return PoolEntry{make_uint4(node, __float_as_uint(s), __float_as_uint(n), len)};
    }
    __device__ __forceinline__ PoolEntry with_id(u32 id) const { return PoolEntry{make_uint4(id, v.y, v.z, v.w)}; }
};

// The expansion of a hypothesis at a node: its children [first, end) (labels of 17+ bits from mid on,
// r0 = wide labels before first) against its row; w items, by child (mode 0) or by row entry (mode 1).
struct ExpandTask {
    u32 first, mid, end, r0;
    u32 score_bits, len, w, mode;
};

// A candidate c = h + [x]: a frontier entry (key, hypothesis) and / or a pool entry (key, entry).
struct Cand {
    bool f;
    bool p;
    u64 fk;
    Hyp fh;
    u64 pk;
    PoolEntry pe;
};
