"""Copy a `NarrowLoudsIndex` to the device once: its arrays as they are, and the `IndexView` that points at them.

`host_index` is the one place that says what the kernels read (the search kernel's `upload_index` and the
GPU stepper both upload its `HostIndex` through `upload_host_index`).

Nothing is derived here: the per-node flags and the degree maxima come from the index
(``index.node_flags``, ``index.max_degree``, ``index.max_degree_nonroot``), which the builder computes and
index format 2 stores (version-1 files, which lack them, are refused on load).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from flashtrie.errors import IndexFormatError, InputError
from flashtrie.index import NarrowLoudsIndex

from .context import GpuContext
from .layout import INDEX_VIEW
from .workspace import Layout

__all__ = ["DeviceIndex", "HostIndex", "host_index", "upload_host_index", "upload_index", "check_index_for_gpu",
           "GPU_MAX_KEYWORD_LENGTH", "GPU_MAX_SUFFIX"]

GPU_MAX_KEYWORD_LENGTH = 65535  # L is 16 bits of a hypothesis
GPU_MAX_SUFFIX = 1 << 30  # suffix indices are 30 bits of a hypothesis

#: IndexView pointer fields and the index arrays they point at (in INDEX_VIEW's order; nflags last)
_ARRAYS = (("louds_words", "louds.words"), ("louds_rank", "louds.rank"), ("louds_sel0", "louds.select0"),
           ("labels_lo", "labels_lo"), ("hi_words", "hi_flag.words"), ("hi_rank", "hi_flag.rank"),
           ("labels_hi", "labels_hi.words"), ("linked_words", "linked.words"), ("linked_rank", "linked.rank"),
           ("link_starts", "link_starts.words"), ("suffix", "suffix.words"), ("terminal_words", "terminal.words"),
           ("terminal_rank", "terminal.rank"), ("keyword_ids", "keyword_ids.words"))


@dataclass
class DeviceIndex:
    """The index on the device: one buffer of arrays, one `IndexView` buffer pointing into it."""

    arrays: Any  # device Buffer
    view: Any  # device Buffer holding the IndexView
    nbytes: int
    max_degree: int
    max_degree_nonroot: int


def _node_facts(ix: NarrowLoudsIndex) -> tuple[np.ndarray, int, int]:
    """(node flags, 4 bits per node in uint32 words as index format 2 stores them, max degree, max non-root
    degree): what the kernel reads, taken from the index as it is, derived nothing."""
    n = int(ix.num_nodes)
    flags = np.ascontiguousarray(ix.node_flags)
    if flags.dtype != np.uint32 or flags.size < -(-n // 8):
        raise IndexFormatError(f"index: node_flags has {flags.size} {flags.dtype} words, expected at least "
                               f"{-(-n // 8)} uint32 words for {n} nodes")
    return flags, int(ix.max_degree), int(ix.max_degree_nonroot)


def check_index_for_gpu(ix: NarrowLoudsIndex) -> None:
    """Refuse an index the search kernel cannot address (before any device work)."""
    if int(ix.max_keyword_length) > GPU_MAX_KEYWORD_LENGTH:
        raise InputError(f"index: max_keyword_length {ix.max_keyword_length} is over the GPU limit "
                         f"{GPU_MAX_KEYWORD_LENGTH}")
    if int(ix.suffix.size) >= GPU_MAX_SUFFIX:
        raise InputError(f"index: suffix store of {ix.suffix.size} tokens is over the GPU limit 2**30")
    _check_louds(ix)


def _check_louds(ix: NarrowLoudsIndex) -> None:
    """`IndexFormatError` unless the LOUDS has one zero per node (the kernels' node numbering)."""
    if int(ix.louds.num_zeros) != int(ix.num_nodes):
        raise IndexFormatError(f"index: LOUDS has {ix.louds.num_zeros} zeros, expected one per node "
                               f"({ix.num_nodes}); the index is damaged: rebuild it with `flashtrie build`")


@dataclass(frozen=True)
class HostIndex:
    """The index as every kernel reads it, still on the host: the arrays `IndexView` points at (by field, in
    `INDEX_VIEW`'s order, the node flags last) and its other fields (widths, node count, padding)."""

    arrays: dict[str, np.ndarray]
    scalars: dict[str, int]
    max_degree: int
    max_degree_nonroot: int

    def layout(self) -> Layout:
        """Where each array goes in the one device allocation (8 bytes of slack each: packed_get reads one
        word past the end)."""
        layout = Layout()
        for field, a in self.arrays.items():
            layout.add(field, a.nbytes + 8)
        return layout

    def view_bytes(self, pointers: Mapping[str, int]) -> np.ndarray:
        """The `IndexView` (uint8) whose array fields hold ``pointers`` (one per field of ``arrays``)."""
        return np.frombuffer(INDEX_VIEW.pack({**pointers, **self.scalars}), dtype=np.uint8).copy()


def host_index(ix: NarrowLoudsIndex) -> HostIndex:
    """The index's arrays and `IndexView` fields as the search and step kernels read them."""
    _check_louds(ix)
    nflags, deg_max, deg_nonroot = _node_facts(ix)
    arrays = ix.arrays
    host = {field: np.ascontiguousarray(arrays[key]) for field, key in _ARRAYS}
    host["nflags"] = nflags
    scalars = dict(hi_width=int(ix.labels_hi.width), ls_width=int(ix.link_starts.width),
                   suffix_width=int(ix.suffix.width),
                   kwid_width=int(ix.keyword_ids.width) if ix.keyword_ids.size else 0,  # 0: no map, id = rank
                   num_nodes=int(ix.num_nodes), pad0=0, pad1=0, pad2=0)
    return HostIndex(host, scalars, deg_max, deg_nonroot)


def upload_host_index(ctx: GpuContext, host: HostIndex) -> DeviceIndex:
    """Copy ``host``'s arrays and its `IndexView` to the device on ``ctx.stream``; returns once they are done."""
    layout = host.layout()
    buf = ctx.allocate(layout.total, "index arrays")
    base = int(buf.handle)
    for field, a in host.arrays.items():
        ctx.upload(base + layout.offsets[field], a)
    vb = host.view_bytes({field: base + layout.offsets[field] for field in host.arrays})
    vbuf = ctx.allocate(vb.nbytes, "index view")
    ctx.upload(int(vbuf.handle), vb)
    ctx.stream.sync()  # the host arrays may go once this returns
    return DeviceIndex(buf, vbuf, layout.total, host.max_degree, host.max_degree_nonroot)


def upload_index(ctx: GpuContext, ix: NarrowLoudsIndex) -> DeviceIndex:
    """Check ``ix`` against the search kernel's limits, then copy its arrays and `IndexView` to the device."""
    check_index_for_gpu(ix)
    return upload_host_index(ctx, host_index(ix))
