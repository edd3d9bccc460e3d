"""Copy a `NarrowLoudsIndex` to the device once: its arrays as they are, and the `IndexView` that points at them.

`host_index` is the one place that says what the kernels read (the search kernel's `upload_index` and the
GPU stepper both upload its `HostIndex` through `upload_host_index`).

Nothing is derived on the host: the arrays (memory-mapped from the file, or the builder's) are copied
straight to the device, one copy each; the per-node flag words, which index format 3 does not store, are
then derived on the device from the LOUDS, linked and terminal bits (`node_flags.derive_node_flags`); the
degree maxima come from the index's metadata.  `UploadStats` records the bytes, the time and the
host-to-device bandwidth.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from flashtrie.errors import IndexFormatError, InputError
from flashtrie.index import NarrowLoudsIndex

from . import node_flags as _flags
from .context import GpuContext
from .layout import INDEX_VIEW
from .workspace import Layout

__all__ = ["DeviceIndex", "HostIndex", "UploadStats", "host_index", "upload_host_index", "upload_index",
           "check_index_for_gpu", "GPU_MAX_KEYWORD_LENGTH", "GPU_MAX_SUFFIX", "GPU_MAX_NODES"]

GPU_MAX_KEYWORD_LENGTH = 65535  # L is 16 bits of a hypothesis
GPU_MAX_SUFFIX = 1 << 30  # suffix indices are 30 bits of a hypothesis
GPU_MAX_NODES = (1 << 32) - 1  # node ids are u32 (0xFFFFFFFF is NO_NODE), rank1 returns u32

#: IndexView pointer fields and the index arrays they point at (in INDEX_VIEW's order; nflags, derived, last)
_ARRAYS = (("louds_words", "louds.words"), ("louds_rank", "louds.rank"), ("louds_sel0", "louds.select0"),
           ("labels_lo", "labels_lo"), ("hi_words", "hi_flag.words"), ("hi_rank", "hi_flag.rank"),
           ("labels_hi", "labels_hi.words"), ("linked_words", "linked.words"), ("linked_rank", "linked.rank"),
           ("link_starts", "link_starts.words"), ("suffix", "suffix.words"), ("terminal_words", "terminal.words"),
           ("terminal_rank", "terminal.rank"), ("keyword_ids", "keyword_ids.words"))


@dataclass(frozen=True)
class UploadStats:
    """One index upload: ``bytes`` copied from the host (the arrays and the view) in ``copy_seconds`` (host
    wall time, enqueue to stream sync), the flag kernel's device time, and the whole upload's seconds."""

    bytes: int
    copy_seconds: float
    derive_seconds: float
    seconds: float

    @property
    def gb_per_s(self) -> float:
        """Host-to-device bandwidth of the copies (GB/s, 1e9 bytes)."""
        return self.bytes / self.copy_seconds / 1e9 if self.copy_seconds > 0 else float("nan")

    def as_dict(self) -> dict[str, float]:
        return {**asdict(self), "gb_per_s": round(self.gb_per_s, 3)}


@dataclass
class DeviceIndex:
    """The index on the device: one buffer of arrays, one `IndexView` buffer pointing into it."""

    arrays: Any  # device Buffer
    view: Any  # device Buffer holding the IndexView
    nbytes: int
    max_degree: int
    max_degree_nonroot: int
    stats: UploadStats | None = None


def check_index_for_gpu(ix: NarrowLoudsIndex) -> None:
    """Refuse an index the search kernel cannot address (before any device work)."""
    if int(ix.max_keyword_length) > GPU_MAX_KEYWORD_LENGTH:
        raise InputError(f"index: max_keyword_length {ix.max_keyword_length} is over the GPU limit "
                         f"{GPU_MAX_KEYWORD_LENGTH}")
    if int(ix.suffix.size) >= GPU_MAX_SUFFIX:
        raise InputError(f"index: suffix store of {ix.suffix.size} tokens is over the GPU limit 2**30")
    _check_louds(ix)


def _check_louds(ix: NarrowLoudsIndex) -> None:
    """`InputError` for more nodes than the kernels' 32-bit node ids and ranks address; `IndexFormatError`
    unless the LOUDS has one zero per node (the kernels' node numbering)."""
    if int(ix.num_nodes) >= GPU_MAX_NODES:
        raise InputError(f"index: {ix.num_nodes:,} nodes is over the GPU limit of 2**32 - 2 nodes (32-bit node "
                         "ids and ranks)")
    if int(ix.louds.num_zeros) != int(ix.num_nodes):
        raise IndexFormatError(f"index: LOUDS has {ix.louds.num_zeros} zeros, expected one per node "
                               f"({ix.num_nodes}); the index is damaged: rebuild it with `flashtrie build`")


@dataclass(frozen=True)
class HostIndex:
    """The index as every kernel reads it, still on the host: the arrays `IndexView` points at (by field, in
    `INDEX_VIEW`'s order, all but the node flags, which the device derives) and its other fields (widths,
    node count, padding)."""

    arrays: dict[str, np.ndarray]
    scalars: dict[str, int]
    max_degree: int
    max_degree_nonroot: int

    def layout(self) -> Layout:
        """Where each array goes in the one device allocation (8 bytes of slack each: packed_get reads one
        word past the end), the derived flag words last."""
        layout = Layout()
        for field, a in self.arrays.items():
            layout.add(field, a.nbytes + 8)
        layout.add("nflags", _flags.flag_bytes(self.scalars["num_nodes"]) + 8)
        return layout

    def view_bytes(self, pointers: Mapping[str, int]) -> np.ndarray:
        """The `IndexView` (uint8) whose array fields hold ``pointers`` (one per field of ``arrays``, and nflags)."""
        return np.frombuffer(INDEX_VIEW.pack({**pointers, **self.scalars}), dtype=np.uint8).copy()


def host_index(ix: NarrowLoudsIndex) -> HostIndex:
    """The index's arrays (the index's own, not copied) and `IndexView` fields as the kernels read them."""
    _check_louds(ix)
    arrays = ix.arrays
    host = {field: np.ascontiguousarray(arrays[key]) for field, key in _ARRAYS}
    scalars = dict(hi_width=int(ix.labels_hi.width), ls_width=int(ix.link_starts.width),
                   suffix_width=int(ix.suffix.width),
                   kwid_width=int(ix.keyword_ids.width) if ix.keyword_ids.size else 0,  # 0: no map, id = rank
                   num_nodes=int(ix.num_nodes), pad0=0, pad1=0, pad2=0)
    return HostIndex(host, scalars, int(ix.max_degree), int(ix.max_degree_nonroot))


def upload_host_index(ctx: GpuContext, host: HostIndex) -> DeviceIndex:
    """Copy ``host``'s arrays and its `IndexView` to the device on ``ctx.stream``, then derive the node flags
    there; returns once both are done (with the `UploadStats`)."""
    t0 = time.perf_counter()
    layout = host.layout()
    buf = ctx.allocate(layout.total, "index arrays")
    base = int(buf.handle)
    pointers = {field: base + layout.offsets[field] for field in layout.offsets}
    vb = host.view_bytes(pointers)
    vbuf = ctx.allocate(vb.nbytes, "index view")
    ctx.stream.sync()  # the allocations are ordered on the stream: the copies' clock starts after them
    t1 = time.perf_counter()
    for field, a in host.arrays.items():
        ctx.upload(pointers[field], a)
    ctx.upload(int(vbuf.handle), vb)
    ctx.stream.sync()  # the host arrays may go once this returns
    t2 = time.perf_counter()
    derive = _flags.derive_node_flags(ctx, int(vbuf.handle), pointers["nflags"], host.scalars["num_nodes"])
    copied = sum(int(a.nbytes) for a in host.arrays.values()) + int(vb.nbytes)
    stats = UploadStats(copied, t2 - t1, derive, time.perf_counter() - t0)
    return DeviceIndex(buf, vbuf, layout.total, host.max_degree, host.max_degree_nonroot, stats)


def upload_index(ctx: GpuContext, ix: NarrowLoudsIndex) -> DeviceIndex:
    """Check ``ix`` against the search kernel's limits, then copy its arrays and `IndexView` to the device."""
    check_index_for_gpu(ix)
    return upload_host_index(ctx, host_index(ix))
