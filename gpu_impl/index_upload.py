"""Copy a `NarrowLoudsIndex` to the device once: its arrays as they are, and the `IndexView` that points at them.

Nothing is derived here: the per-node flags and the degree maxima come from the index
(``index.node_flags``, ``index.max_degree``, ``index.max_degree_nonroot``).  An index that lacks them (a
version-1 file, or an index class before they were added) gets them from `_derive_node_facts`, a
private fallback that computes them the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from flashtrie.errors import IndexFormatError, InputError
from flashtrie.index import NarrowLoudsIndex

from .context import GpuContext
from .layout import INDEX_VIEW
from .workspace import Layout

__all__ = ["DeviceIndex", "upload_index", "GPU_MAX_KEYWORD_LENGTH", "GPU_MAX_SUFFIX"]

GPU_MAX_KEYWORD_LENGTH = 65535  # L is 16 bits of a hypothesis
GPU_MAX_SUFFIX = 1 << 30  # suffix indices are 30 bits of a hypothesis

#: IndexView pointer fields and the index arrays they point at (in INDEX_VIEW's order; nflags last)
_ARRAYS = (("louds_words", "louds.words"), ("louds_rank", "louds.rank"), ("louds_sel0", "louds.select0"),
           ("labels_lo", "labels_lo"), ("hi_words", "hi_flag.words"), ("hi_rank", "hi_flag.rank"),
           ("labels_hi", "labels_hi.words"), ("linked_words", "linked.words"), ("linked_rank", "linked.rank"),
           ("link_starts", "link_starts.words"), ("suffix", "suffix.words"), ("terminal_words", "terminal.words"),
           ("terminal_rank", "terminal.rank"), ("keyword_ids", "keyword_ids.words"))
_NODE_LINKED, _NODE_TERMINAL, _NODE_HAS_CHILD = 1, 2, 4  # kernels/index.cuh


@dataclass
class DeviceIndex:
    """The index on the device: one buffer of arrays, one `IndexView` buffer pointing into it."""

    arrays: Any  # device Buffer
    view: Any  # device Buffer holding the IndexView
    nbytes: int
    max_degree: int
    max_degree_nonroot: int


def _derive_node_facts(ix: NarrowLoudsIndex) -> tuple[np.ndarray, int, int]:
    """(per-node flags uint8, max degree, max degree below the root) from the LOUDS bits (fallback only)."""
    n = int(ix.num_nodes)
    zpos = np.flatnonzero(~ix.louds.to_bools())
    deg = np.diff(np.concatenate(([-1], zpos))) - 1
    linked = ix.linked.to_bools()[:n].astype(np.uint8)
    term = ix.terminal.to_bools()[:n].astype(np.uint8)
    flags = linked * _NODE_LINKED | term * _NODE_TERMINAL | (deg > 0).astype(np.uint8) * _NODE_HAS_CHILD
    return flags, int(deg.max()) if n else 0, int(deg[1:].max()) if n > 1 else 0


def _node_facts(ix: NarrowLoudsIndex) -> tuple[np.ndarray, int, int]:
    """(node flags packed 4 bits per node into uint32 words, max degree, max non-root degree)."""
    n = int(ix.num_nodes)
    if all(hasattr(ix, a) for a in ("node_flags", "max_degree", "max_degree_nonroot")):
        flags = ix.node_flags() if callable(ix.node_flags) else ix.node_flags
        flags = np.asarray(flags)
        deg_max, deg_nonroot = int(ix.max_degree), int(ix.max_degree_nonroot)
    else:
        flags, deg_max, deg_nonroot = _derive_node_facts(ix)
    if flags.dtype == np.uint32:  # already the kernel's packing: 8 nodes a word (index format 2)
        if flags.size < -(-n // 8):
            raise IndexFormatError(f"index: node_flags has {flags.size} words, expected at least {-(-n // 8)} "
                                   f"for {n} nodes")
        return np.ascontiguousarray(flags), deg_max, deg_nonroot
    if flags.size != n:
        raise IndexFormatError(f"index: node_flags has {flags.size} entries, expected one per node ({n})")
    vals = np.concatenate([flags.astype(np.uint32), np.zeros((-n) % 8, dtype=np.uint32)])
    packed = np.bitwise_or.reduce(vals.reshape(-1, 8) << (4 * np.arange(8, dtype=np.uint32)), axis=1)
    return packed.astype(np.uint32), deg_max, deg_nonroot


def check_index_for_gpu(ix: NarrowLoudsIndex) -> None:
    """Refuse an index the kernel cannot address (before any device work)."""
    if int(ix.max_keyword_length) > GPU_MAX_KEYWORD_LENGTH:
        raise InputError(f"index: max_keyword_length {ix.max_keyword_length} is over the GPU limit "
                         f"{GPU_MAX_KEYWORD_LENGTH}")
    if int(ix.suffix.size) >= GPU_MAX_SUFFIX:
        raise InputError(f"index: suffix store of {ix.suffix.size} tokens is over the GPU limit 2**30")
    if int(ix.louds.num_zeros) != int(ix.num_nodes):
        raise IndexFormatError(f"index: LOUDS has {ix.louds.num_zeros} zeros, expected one per node "
                               f"({ix.num_nodes}); the index is damaged: rebuild it with `flashtrie build`")


def upload_index(ctx: GpuContext, ix: NarrowLoudsIndex) -> DeviceIndex:
    """Copy the index arrays and its `IndexView` to the device; returns once the copies are done."""
    check_index_for_gpu(ix)
    nflags, deg_max, deg_nonroot = _node_facts(ix)
    arrays = ix.arrays
    host = {field: np.ascontiguousarray(arrays[key]) for field, key in _ARRAYS}
    host["nflags"] = nflags
    layout = Layout()
    for field, a in host.items():
        layout.add(field, a.nbytes + 8)  # + 8: packed_get reads one word past the end
    buf = ctx.allocate(layout.total, "index arrays")
    base = int(buf.handle)
    for field, a in host.items():
        ctx.upload(base + layout.offsets[field], a)
    view = {field: base + layout.offsets[field] for field in host}
    view.update(hi_width=int(ix.labels_hi.width), ls_width=int(ix.link_starts.width),
                suffix_width=int(ix.suffix.width),
                kwid_width=int(ix.keyword_ids.width) if ix.keyword_ids.size else 0,  # 0: no map, id = rank
                num_nodes=int(ix.num_nodes), pad0=0, pad1=0, pad2=0)
    vb = np.frombuffer(INDEX_VIEW.pack(view), dtype=np.uint8).copy()
    vbuf = ctx.allocate(vb.nbytes, "index view")
    ctx.upload(int(vbuf.handle), vb)
    ctx.stream.sync()  # the host arrays may go once this returns
    return DeviceIndex(buf, vbuf, layout.total, deg_max, deg_nonroot)
