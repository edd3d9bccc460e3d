"""GPU builder: steps 1-4 of `flashtrie/index/builder.py` on the GPU, then the CPU builder's array assembly.

Each function below mirrors the CPU step of the same name (read them side by side); all of them take the
array module ``xp`` (cupy on the GPU; numpy runs the very same code on the CPU, which is how the tests
without a GPU check it):

1. `sort_keywords` (`_sort_keywords`): one least-significant-column-first pass per token column, each a
   sort of ``token << p | position`` packed in a uint64.  On the GPU ``cupy.sort`` is CUB's radix sort;
   the keys are unique, so any sort gives the order of the CPU's stable one;
2. `neighbour_lcp` (`_neighbour_lcp`) and `dedup` (`_dedup`): element-wise over all pairs, column by column;
3. `preorder` (`_preorder`): the compressed trie in preorder, level by level (searchsorted, scatters);
4. `level_order` (`_level_order`): a stable sort of preorder by compressed depth (packed radix sort) and
   the gathers into level order.

The whole library is one part on the GPU (the CPU's split by first token gives the same arrays).  The
results go back to the host as `builder.LevelOrder`, and `builder.build_arrays` assembles the index
arrays on all cores, exactly as it does for the CPU's own steps, so the arrays are identical.

cupy is an optional dependency (``pip install 'flashtrie[gpu-build]'``); it is imported when a build starts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from flashtrie.errors import DeviceError, InputError
from flashtrie.index.builder import BuiltArrays, LevelOrder, _Preorder, build_arrays
from flashtrie.keywords import KeywordSet

__all__ = ["build_arrays_gpu", "build_index", "gpu_sort_and_order", "cupy_module"]

Progress = Callable[[str], None]


def cupy_module() -> ModuleType:
    """cupy, with a clear error where it (or a GPU) is missing."""
    try:
        import cupy
    except ImportError as e:
        raise DeviceError(f"the GPU builder needs cupy ({e}); install it with pip install 'flashtrie[gpu-build]' "
                          "(cupy-cuda13x), or build on the CPU with NarrowLoudsIndex.build") from None
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # cupy's CUDARuntimeError: no driver or no device
        raise DeviceError(f"the GPU builder found no usable CUDA device: {e}") from None
    return cupy


def _host(a: Any) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)


def packed_order(xp: ModuleType, key: Any, key_bits: int) -> Any:
    """Stable argsort of non-negative ``key`` (< 2**key_bits): a sort of key and position in one uint64
    (`builder._packed_order`); a stable argsort where both do not fit in 64 bits."""
    n = key.size
    pos_bits = max(1, (n - 1).bit_length())
    if key_bits + pos_bits > 64:
        return xp.argsort(key, kind="stable")  # cupy: a stable radix sort of (key, index)
    packed = key.astype(xp.uint64)
    packed <<= xp.uint64(pos_bits)
    packed |= xp.arange(n, dtype=xp.uint64)
    packed.sort()  # CUB radix sort on the GPU
    packed &= xp.uint64((1 << pos_bits) - 1)
    return packed.view(xp.int64)


def sort_keywords(xp: ModuleType, tokens: Any, starts: Any, lens: Any, max_len: int) -> Any:
    """Keyword ids in lexicographic order (a keyword before its extensions; equal keywords by ascending id)."""
    n = lens.size
    by_len = packed_order(xp, lens, max(1, int(max_len).bit_length()))
    first = np.zeros(max_len + 2, dtype=np.int64)
    np.cumsum(_host(xp.bincount(lens, minlength=max_len + 1)), out=first[1:])
    idt = xp.int32 if max(tokens.size, n) < 2**31 else xp.int64
    cur_pos = xp.zeros(0, dtype=idt)
    cur_id = xp.zeros(0, dtype=idt)
    for j in range(max_len - 1, -1, -1):
        enter = by_len[first[j + 1] : first[j + 2]]
        pos = xp.concatenate((starts[enter].astype(idt), cur_pos))
        sid = xp.concatenate((enter.astype(idt), cur_id))
        o = packed_order(xp, tokens[pos + j], 32)
        cur_pos, cur_id = pos[o], sid[o]
    return cur_id.astype(xp.int64)


def neighbour_lcp(xp: ModuleType, tokens: Any, s_start: Any, s_len: Any) -> Any:
    """Common prefix length of each sorted keyword with its predecessor (0 for the first).

    The CPU's first phase (a whole column at a time) on every column: on a GPU the gathers of all pairs
    cost less than compacting the pairs still equal, and hold one flag per pair instead of four arrays.
    """
    n = s_len.size
    lcp = xp.zeros(n, dtype=xp.int64)
    if n < 2:
        return lcp
    still = xp.ones(n - 1, dtype=bool)  # pair (i - 1, i) equal on columns < j
    for j in range(int(s_len.max())):
        has = s_len > j
        # token + 1 at column j (fits: tokens are at most 2**32 - 2); 0 where the keyword has no column j
        col = xp.where(has, tokens[xp.where(has, s_start + j, 0)] + xp.uint32(1), xp.uint32(0))
        still &= col[1:] == col[:-1]
        still &= has[1:]
        del col, has
        if not bool(still.any()):
            break
        lcp[1:] += still
    return lcp


def dedup(xp: ModuleType, order: Any, lcp: Any, s_len: Any) -> tuple[Any, Any, Any]:
    """Drop sorted keywords equal to their predecessor (the smallest id sorts first and stays)."""
    dup = lcp == s_len
    dup[1:] &= s_len[:-1] == s_len[1:]
    dup[0] = False
    if not bool(dup.any()):
        return order, lcp, s_len
    keep = ~dup
    return order[keep], lcp[keep], s_len[keep]


def preorder(xp: ModuleType, lcp: Any, lens: Any) -> _Preorder:
    """The compressed trie of sorted unique keywords in preorder (`builder._preorder`, step for step)."""
    u = lcp.size
    max_lcp = int(lcp.max()) if u else 0
    by_lcp = packed_order(xp, lcp, max(1, max_lcp.bit_length()))
    bounds = np.zeros(max_lcp + 2, dtype=np.int64)
    np.cumsum(_host(xp.bincount(lcp, minlength=max_lcp + 1)), out=bounds[1:])

    levels = []
    creators = by_lcp[: bounds[1]]
    for d in range(1, max_lcp + 1):
        if d > 1:  # the creators stay distinct ids: any sort of them is the CPU's merge
            creators = xp.sort(xp.concatenate((creators[lens[creators] >= d], by_lcp[bounds[d - 1] : bounds[d]])))
        q = by_lcp[bounds[d] : bounds[d + 1]]
        if q.size == 0:
            continue
        pc = creators[xp.searchsorted(creators, q, side="right") - 1]
        new = xp.ones(pc.size, dtype=bool)
        new[1:] = pc[1:] != pc[:-1]
        levels.append((d, q, new, pc[new]))
    del by_lcp, creators
    inner = xp.zeros(u, dtype=xp.int64)
    for d, _, _, node_c in levels:
        inner[node_c[lens[node_c] != d]] += 1  # unique within a level
    pos_t = xp.cumsum(inner + 1)
    first = pos_t - inner
    n = 1 + u + int(inner.sum())

    idt = xp.int32 if n < 2**31 - 1 else xp.int64
    creator = xp.empty(n, dtype=idt)
    depth = xp.empty(n, dtype=idt)
    creator[0], depth[0] = -1, 0
    creator[pos_t] = xp.arange(u, dtype=idt)
    depth[pos_t] = lens.astype(idt)
    del pos_t
    seen = xp.zeros(u, dtype=xp.int64)
    hang = xp.zeros(u, dtype=xp.int64)
    cd_first = xp.ones(u, dtype=xp.int64)
    for d, q, new, node_c in levels:
        inner_node = lens[node_c] != d
        rank = xp.where(inner_node, seen[node_c], inner[node_c])
        pos = first[node_c] + rank
        c_in = node_c[inner_node]
        creator[pos[inner_node]] = c_in.astype(idt)
        depth[pos[inner_node]] = d
        seen[c_in] += 1
        grp = xp.cumsum(new, dtype=xp.int64) - 1
        hang[q] = pos[grp]
        cd_first[q] = (cd_first[node_c] + rank + 1)[grp]
    del levels, seen, inner
    parent = xp.arange(-1, n - 1, dtype=idt)
    parent[first] = hang.astype(idt)
    edge_start = xp.empty(n, dtype=idt)
    edge_start[0] = 0
    edge_start[1:] = depth[:-1] + 1
    edge_start[first] = (lcp + 1).astype(idt)
    cdepth = xp.zeros(n, dtype=idt)
    c = creator[1:]
    cdepth[1:] = (cd_first[c] + xp.arange(1, n, dtype=xp.int64) - first[c]).astype(idt)
    return _Preorder(creator, depth, parent, edge_start, cdepth)


def level_order(xp: ModuleType, pre: _Preorder, max_len: int) -> tuple[Any, Any, Any, Any]:
    """Level order (`builder._level_order`): nodes by (compressed depth, preorder); the node arrays gathered."""
    bfs = packed_order(xp, pre.cdepth, max(1, int(max_len).bit_length()))
    n = bfs.size
    inv = xp.empty(n, dtype=xp.int64)
    inv[bfs] = xp.arange(n, dtype=xp.int64)
    parent_bfs = inv[pre.parent[bfs][1:]]
    del inv
    creator, depth, start = pre.creator[bfs], pre.depth[bfs], pre.edge_start[bfs]
    if parent_bfs.size and (bool(xp.any(parent_bfs[1:] < parent_bfs[:-1])) or int(parent_bfs.min()) < 0):
        raise AssertionError("internal error: children are not contiguous in level order")
    return parent_bfs, creator, depth, start


def gpu_sort_and_order(xp: ModuleType | None = None) -> Callable[[KeywordSet, int, Progress], tuple[np.ndarray,
                                                                                                      LevelOrder]]:
    """Steps 1-4 on ``xp`` (default cupy), as the ``sort_and_order`` hook of `builder.build_arrays`."""
    xp = cupy_module() if xp is None else xp

    def run(ks: KeywordSet, max_len: int, say: Progress) -> tuple[np.ndarray, LevelOrder]:
        say("upload")
        tokens = xp.asarray(ks.tokens)
        offsets = xp.asarray(ks.offsets)
        starts = offsets[:-1]
        lens = (offsets[1:] - starts).astype(xp.int32)
        del offsets
        say("sort")
        order = sort_keywords(xp, tokens, starts, lens, max_len)
        say("lcp")
        s_len = lens[order]
        lcp = neighbour_lcp(xp, tokens, starts[order], s_len)
        del tokens, starts, lens
        order, lcp, s_len = dedup(xp, order, lcp, s_len)
        # 32-bit over PCIe where they fit (the assembly reads values, not dtypes): half the download
        narrow = xp.int32 if ks.offsets.size < 2**31 else xp.int64
        order_host = _host(order.astype(narrow))
        del order
        say("trie")
        pre = preorder(xp, lcp, s_len)
        del lcp, s_len
        say("order")
        parent, creator, depth, start = level_order(xp, pre, max_len)
        del pre
        say("download")
        lv = LevelOrder(_host(parent.astype(creator.dtype)), _host(creator), _host(depth), _host(start),
                        int(creator.size))
        return order_host, lv

    return run


def build_arrays_gpu(keywords: KeywordSet, progress: Progress | None = None, *, ids: str = "input",
                     xp: ModuleType | None = None) -> BuiltArrays:
    """The CPU builder's arrays (`builder.build_arrays`), with steps 1-4 on the GPU.

    ``progress(stage)`` is called as stages start (upload, sort, lcp, trie, order, download, arrays).
    ``ids`` as in `NarrowLoudsIndex.build`; ``xp=numpy`` runs the GPU code path on the CPU (for tests).
    """
    if not isinstance(keywords, KeywordSet):
        raise InputError(f"keywords: expected a flashtrie.KeywordSet, got {type(keywords).__name__}")
    if len(keywords) == 0:
        raise InputError("keywords: the keyword set is empty; an index needs at least one keyword")
    hook = gpu_sort_and_order(xp)
    mod = cupy_module() if xp is None else xp
    say = progress or (lambda stage: None)

    def staged(stage: str) -> None:
        if hasattr(mod, "cuda"):  # stage times on the GPU: wait for the work queued so far
            mod.cuda.get_current_stream().synchronize()
        say(stage)

    return build_arrays(keywords, staged, ids, sort_and_order=hook)


def build_index(keywords: KeywordSet, progress: Progress | None = None, *, ids: str = "input",
                xp: ModuleType | None = None) -> Any:
    """A `NarrowLoudsIndex` built with `build_arrays_gpu` (the same arrays as `NarrowLoudsIndex.build`)."""
    from flashtrie.index.narrow_louds import NarrowLoudsIndex

    t0 = time.perf_counter()
    built = build_arrays_gpu(keywords, progress, ids=ids, xp=xp)
    idx = NarrowLoudsIndex._from_built(built, time.perf_counter() - t0)
    if xp is None:
        cupy_module().get_default_memory_pool().free_all_blocks()
    return idx
