"""GPU builder: the steps of `flashtrie/index/builder.py` on the GPU, the array assembly included.

Each function below mirrors the CPU step of the same name (read them side by side); all of them take the
array module ``xp`` (cupy on the GPU; numpy runs the very same code on the CPU, which is how the tests
without a GPU check it):

1. `sort_keywords` (`_sort_keywords`): one least-significant-column-first pass per token column, each a
   sort of ``token << p | position`` packed in a uint64.  On the GPU ``cupy.sort`` is CUB's radix sort;
   the keys are unique, so any sort gives the order of the CPU's stable one;
2. `neighbour_lcp` (`_neighbour_lcp`) and `dedup` (`_dedup`): element-wise over all pairs, column by column;
3. `preorder` (`_preorder`): the compressed trie in preorder, level by level (searchsorted, scatters);
4. `level_order` (`_level_order`): a stable sort of preorder by compressed depth (packed radix sort) and
   the gathers into level order;
5. `build_assemble.assemble` (`build_arrays`' assembly): every array's finished words on the device.

The whole library is one part on the GPU (the CPU's split by first token gives the same arrays).  The
keyword arrays go up and the finished words come down through pinned staging buffers
(`host_transfer.Stager`); the host adds only the rank directories (`BitVector.from_words`), so the arrays
are identical to the CPU builder's (tested array for array).

cupy is an optional dependency (``pip install 'flashtrie[gpu-build]'``); it is imported when a build starts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from types import ModuleType
from typing import Any

import numpy as np

from flashtrie.cpus import in_parallel, usable_cpus
from flashtrie.errors import DeviceError
from flashtrie.index.bits import BitVector
from flashtrie.index.builder import BuiltArrays, _Preorder, check_build_request
from flashtrie.index.packed import PackedInts
from flashtrie.keywords import KeywordSet

from .build_assemble import DeviceArrays, assemble
from .host_transfer import Stager

__all__ = ["build_arrays_gpu", "build_index", "cupy_module"]

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
    lcp = xp.zeros(n, dtype=xp.int32)  # at most the longest keyword
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
    # working arrays in 32 bits where every node index fits (a compressed trie has at most 2u + 1 nodes)
    wt = xp.int32 if 2 * u + 2 < 2**31 - 1 else xp.int64
    by_lcp = packed_order(xp, lcp, max(1, max_lcp.bit_length())).astype(wt)
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
    inner = xp.zeros(u, dtype=wt)
    for d, _, _, node_c in levels:
        inner[node_c[lens[node_c] != d]] += 1  # unique within a level
    pos_t = xp.cumsum(inner + 1, dtype=wt)
    first = pos_t - inner
    n = 1 + u + int(inner.sum())

    idt = xp.int32 if n < 2**31 - 1 else xp.int64
    creator = xp.empty(n, dtype=idt)
    depth = xp.empty(n, dtype=idt)
    creator[0], depth[0] = -1, 0
    creator[pos_t] = xp.arange(u, dtype=idt)
    depth[pos_t] = lens.astype(idt)
    del pos_t
    seen = xp.zeros(u, dtype=wt)
    hang = xp.zeros(u, dtype=wt)
    cd_first = xp.ones(u, dtype=wt)
    for d, q, new, node_c in levels:
        inner_node = lens[node_c] != d
        rank = xp.where(inner_node, seen[node_c], inner[node_c])
        pos = first[node_c] + rank
        c_in = node_c[inner_node]
        creator[pos[inner_node]] = c_in.astype(idt)
        depth[pos[inner_node]] = d
        seen[c_in] += 1
        grp = xp.cumsum(new, dtype=wt) - 1
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
    cdepth[1:] = (cd_first[c] + xp.arange(1, n, dtype=wt) - first[c]).astype(idt)
    return _Preorder(creator, depth, parent, edge_start, cdepth)


def level_order(xp: ModuleType, pre: _Preorder, max_len: int) -> tuple[Any, Any, Any, Any]:
    """Level order (`builder._level_order`): nodes by (compressed depth, preorder); the node arrays gathered."""
    idt = pre.creator.dtype  # 32 bits where the nodes fit
    bfs = packed_order(xp, pre.cdepth, max(1, int(max_len).bit_length())).astype(idt)
    n = bfs.size
    inv = xp.empty(n, dtype=idt)
    inv[bfs] = xp.arange(n, dtype=idt)
    parent_bfs = inv[pre.parent[bfs][1:]]
    del inv
    creator, depth, start = pre.creator[bfs], pre.depth[bfs], pre.edge_start[bfs]
    if parent_bfs.size and (bool(xp.any(parent_bfs[1:] < parent_bfs[:-1])) or int(parent_bfs.min()) < 0):
        raise AssertionError("internal error: children are not contiguous in level order")
    return parent_bfs, creator, depth, start


def _sorted_unique(xp: ModuleType, tokens: Any, offsets: Any, say: Progress) -> tuple[Any, Any, Any, Any, int]:
    """Steps 1-2: sorted unique keyword ids, their lcp, flat starts and lengths, and the longest length."""
    starts = offsets[:-1]
    lens = (offsets[1:] - starts).astype(xp.int32)
    max_len = int(lens.max())
    say("sort")
    order = sort_keywords(xp, tokens, starts, lens, max_len)
    say("lcp")
    s_len = lens[order]
    del lens
    lcp = neighbour_lcp(xp, tokens, starts[order], s_len)
    order, lcp, s_len = dedup(xp, order, lcp, s_len)
    return order, lcp, starts[order], s_len, max_len


def _device_arrays(xp: ModuleType, ks: KeywordSet, ids: str, want_order: bool, say: Progress,
                   stager: Stager | None) -> tuple[DeviceArrays, int, int, int]:
    """Steps 1-5 on ``xp``: the finished arrays (on the device), the longest keyword, largest token, unique keywords."""
    say("upload")
    up = stager.upload if stager is not None else xp.asarray
    tokens, offsets = up(ks.tokens), up(ks.offsets)
    max_tok = int(tokens.max())
    order, lcp, s_start, s_len, max_len = _sorted_unique(xp, tokens, offsets, say)
    del offsets
    order = order.astype(xp.int32 if ks.offsets.size < 2**31 else xp.int64)  # input ids: for the id map only
    say("trie")
    pre = preorder(xp, lcp, s_len)
    del lcp
    say("order")
    parent, creator, depth, start = level_order(xp, pre, max_len)
    del pre
    say("assemble")
    dev = assemble(xp, tokens, s_start, s_len, order, parent, creator, depth, start, max_tok=max_tok, ids=ids,
                   want_order=want_order)
    return dev, max_len, max_tok, int(order.size)


def _to_host(dev: DeviceArrays, get: Callable[[Any], np.ndarray]) -> DeviceArrays:
    """The same arrays, copied to the host with ``get``."""
    return DeviceArrays(
        bits={k: (get(w), nb) for k, (w, nb) in dev.bits.items()},
        packed={k: (get(w), width, size) for k, (w, width, size) in dev.packed.items()},
        labels_lo=get(dev.labels_lo), node_flags=get(dev.node_flags), max_degree=dev.max_degree,
        max_degree_nonroot=dev.max_degree_nonroot, order=None if dev.order is None else get(dev.order))


def _bit_vectors(host: DeviceArrays) -> dict[str, BitVector]:
    """The bit vectors with their rank directories (and the LOUDS's select0 hints), built on threads."""
    names, cores = list(host.bits), usable_cpus()
    per = max(1, cores // len(names))  # the LOUDS is half the bits: its pieces on the threads of all four
    done = in_parallel([partial(BitVector.from_words, *host.bits[k], with_select0=k == "louds",
                                workers=cores if k == "louds" else per) for k in names], cores)
    return dict(zip(names, done, strict=True))


def build_arrays_gpu(keywords: KeywordSet, progress: Progress | None = None, *, ids: str = "input",
                     xp: ModuleType | None = None, return_order: bool = False) -> BuiltArrays:
    """The CPU builder's arrays (`builder.build_arrays`), steps 1-5 on the GPU, the rank directories on the host.

    ``progress(stage)`` is called as stages start: upload, sort, lcp, trie, order, assemble, download,
    directories.  ``ids`` as in `NarrowLoudsIndex.build`; ``xp=numpy`` runs the GPU code path on the CPU
    (for tests).  ``BuiltArrays.order`` is filled only with ``return_order`` (else it is empty: it costs
    a download of 4 or 8 bytes per keyword).
    """
    check_build_request(keywords, ids)
    mod = cupy_module() if xp is None else xp
    on_gpu = hasattr(mod, "cuda")
    say = progress or (lambda stage: None)

    def staged(stage: str) -> None:
        if on_gpu:  # stage times on the GPU: wait for the work queued so far
            mod.cuda.get_current_stream().synchronize()
        say(stage)

    stager = Stager(mod) if on_gpu else None
    try:
        dev, max_len, max_tok, u = _device_arrays(mod, keywords, ids, return_order, staged, stager)
        staged("download")
        host = _to_host(dev, stager.download if stager is not None else np.asarray)
    finally:
        if stager is not None:
            stager.close()
    del dev
    if on_gpu:
        mod.get_default_memory_pool().free_all_blocks()
    staged("directories")
    bv = _bit_vectors(host)
    p = {k: PackedInts(*v) for k, v in host.packed.items()}
    order = np.zeros(0, dtype=np.int64) if host.order is None else host.order.astype(np.int64)
    return BuiltArrays(
        louds=bv["louds"], labels_lo=host.labels_lo, hi_flag=bv["hi_flag"], labels_hi=p["labels_hi"],
        linked=bv["linked"], link_starts=p["link_starts"], suffix=p["suffix"], terminal=bv["terminal"],
        keyword_ids=p["keyword_ids"], node_flags=host.node_flags, max_degree=host.max_degree,
        max_degree_nonroot=host.max_degree_nonroot, order=order, id_order=ids, num_nodes=int(host.labels_lo.size),
        num_keywords=len(keywords), num_unique=u, max_keyword_length=max_len, max_token=max_tok)


def build_index(keywords: KeywordSet, progress: Progress | None = None, *, ids: str = "input",
                xp: ModuleType | None = None, return_order: bool = False) -> Any:
    """A `NarrowLoudsIndex` built with `build_arrays_gpu` (the same arrays as `NarrowLoudsIndex.build`, and the
    strings the keywords carry); with ``return_order``, also the order as `NarrowLoudsIndex.build` returns it."""
    from flashtrie.index.narrow_louds import NarrowLoudsIndex

    t0 = time.perf_counter()
    texts = keywords.texts if isinstance(keywords, KeywordSet) else None  # index-order ids reorder them
    built = build_arrays_gpu(keywords, progress, ids=ids, xp=xp,
                             return_order=return_order or (texts is not None and ids == "index"))
    idx = NarrowLoudsIndex._from_built(built, time.perf_counter() - t0, texts)
    return (idx, built.order) if return_order else idx
