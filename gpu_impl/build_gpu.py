"""The GPU index builder: the builder's steps (`flashtrie.index.build_sort`, `build_trie`,
`build_assemble`) over cupy, the array assembly included.

The step functions are the CPU builder's own, called with ``xp=cupy``: on the GPU the packed sorts are CUB's
radix sorts, the whole library is one part (the CPU's split by first token gives the same arrays), the
common prefixes take every pair a whole column at a time, and the work stays in order on one stream.  What
is the GPU's alone is here and in `host_transfer`: the keyword arrays go up and the finished words come down
through pinned staging buffers (`host_transfer.Stager`), the stages wait for the device when timed, and the
memory pool is emptied before the host adds the rank directories (`build_assemble.finish`).  The arrays are
identical to the CPU builder's (tested array for array); ``xp=numpy`` runs this path on the CPU.

cupy is an optional dependency (``pip install 'flashtrie[gpu-build]'``); it is imported when a build starts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from flashtrie.arrays import cupy_module
from flashtrie.cpus import usable_cpus
from flashtrie.index.build_assemble import Assembled, BuiltArrays, assemble, finish
from flashtrie.index.build_sort import sorted_unique
from flashtrie.index.build_trie import level_order, preorder
from flashtrie.index.builder import check_build_request
from flashtrie.keywords import KeywordSet

from .host_transfer import Stager

__all__ = ["build_arrays_gpu", "build_index", "cupy_module"]

Progress = Callable[[str], None]



def _device_arrays(xp: ModuleType, ks: KeywordSet, ids: str, want_order: bool, say: Progress,
                   stager: Stager | None) -> tuple[Assembled, int, int, int]:
    """Steps 1-5 on ``xp``: the finished arrays (on the device), the longest keyword, largest token, unique keywords."""
    say("upload")
    up = stager.upload if stager is not None else xp.asarray
    tokens, offsets = up(ks.tokens), up(ks.offsets)
    max_tok = int(tokens.max())
    starts = offsets[:-1]
    lens = (offsets[1:] - starts).astype(xp.int32)
    max_len = int(lens.max())
    # every pair a whole column at a time: on a GPU the gathers cost less than compacting the pairs
    order, lcp, s_len = sorted_unique(xp, tokens, starts, lens, max_len, follow_below=0.0, say=say)
    del lens
    s_start = starts[order]
    del starts, offsets
    order = order.astype(xp.int32 if ks.offsets.size < 2**31 else xp.int64)  # input ids: for the id map only
    say("trie")
    pre = preorder(xp, lcp, s_len)
    del lcp
    say("order")
    lv = level_order(xp, pre, max_len)
    del pre
    say("assemble")
    dev = assemble(xp, tokens, s_start, s_len, order, lv.parent, lv.creator, lv.depth, lv.start, max_tok=max_tok,
                   ids=ids, want_order=want_order)
    return dev, max_len, max_tok, int(order.size)


def _to_host(dev: Assembled, get: Callable[[Any], np.ndarray]) -> Assembled:
    """The same arrays, copied to the host with ``get``."""
    return Assembled(
        bits={k: (get(w), nb) for k, (w, nb) in dev.bits.items()},
        packed={k: (get(w), width, size) for k, (w, width, size) in dev.packed.items()},
        labels_lo=get(dev.labels_lo), node_flags=get(dev.node_flags), max_degree=dev.max_degree,
        max_degree_nonroot=dev.max_degree_nonroot, order=None if dev.order is None else get(dev.order))


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
    return finish(host, usable_cpus(), ids=ids, num_keywords=len(keywords), num_unique=u, max_len=max_len,
                  max_tok=max_tok)


def build_index(keywords: KeywordSet, progress: Progress | None = None, *, ids: str = "input",
                xp: ModuleType | None = None, return_order: bool = False) -> Any:
    """A `NarrowLoudsIndex` built with `build_arrays_gpu` (the same arrays as `NarrowLoudsIndex.build`, and the
    strings the keywords carry); with ``return_order``, also the order as `NarrowLoudsIndex.build` returns it."""
    from flashtrie.index.narrow_louds import NarrowLoudsIndex

    t0 = time.perf_counter()
    with_texts = isinstance(keywords, KeywordSet) and keywords.texts is not None  # index-order ids reorder them
    built = build_arrays_gpu(keywords, progress, ids=ids, xp=xp,
                             return_order=return_order or (with_texts and ids == "index"))
    idx = NarrowLoudsIndex._from_built(built, time.perf_counter() - t0, keywords)
    return (idx, built.order) if return_order else idx
