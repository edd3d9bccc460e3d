"""Workspaces of the search kernel: their layouts, capacities and launch shape, sized from (Q, T, K, B, R).

A `Workspace` is three device buffers (the kernel's working arrays; the per-call upload of parameters,
start states, the length-norm table and host proposals; the results) with pinned host mirrors of the
upload and the results, and the grid the kernel runs with.  `GpuSearcher` keeps one and reuses it while
the shape stays the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from flashtrie.errors import DeviceError, InputError

from .context import GpuContext
from .layout import PARAMS

__all__ = ["Layout", "Shape", "Workspace", "THREADS", "caps", "layouts", "shared_bytes", "build_workspace",
           "pow2"]

THREADS = 512
_ALIGN = 256


def pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(int(n) - 1, 0).bit_length()


class Layout:
    """Byte offsets of named arrays inside one allocation (each aligned to 256 bytes)."""

    def __init__(self) -> None:
        self.offsets: dict[str, int] = {}
        self.sizes: dict[str, int] = {}
        self.total = 0

    def add(self, name: str, nbytes: int) -> None:
        self.total = -(-self.total // _ALIGN) * _ALIGN
        self.offsets[name] = self.total
        self.sizes[name] = int(nbytes)
        self.total += max(int(nbytes), 4)


@dataclass(frozen=True)
class Shape:
    """The sizes a workspace depends on; ``host_inputs``: proposals come from the host (uploaded)."""

    q: int
    t: int
    k: int
    b: int
    r: int
    host_inputs: bool = True

    def __str__(self) -> str:
        return f"Q={self.q}, T={self.t}, K={self.k}, B={self.b}, R={self.r}"


def caps(k: int, b: int, max_degree: int, max_degree_nonroot: int) -> tuple[int, int]:
    """(candidates per query, work chunks per query) a step can produce at most."""
    dmax = max(min(k, max_degree), 1)
    dnr = max(min(k, max_degree_nonroot), 1)
    return max(dmax, b * dnr), b * -(-dnr // 32) + -(-dmax // 32)


def layouts(s: Shape, cand_cap: int, chunk_cap: int, ln_len: int) -> tuple[Layout, Layout, Layout]:
    """(working arrays, upload, results) of a search of shape ``s``."""
    q, t, k, b, r = s.q, s.t, s.k, s.b, s.r
    rows = q * t
    lw = Layout()
    for name, nbytes in (
        ("row_tok", rows * k * 4), ("row_lp", rows * k * 4), ("row_nv", rows * 4), ("row_max", rows * 4),
        ("fr0", q * b * 16), ("fr1", q * b * 16), ("nf", q * 4), ("tasks", q * b * 32),
        ("chunks", q * chunk_cap * 8), ("fkey", q * cand_cap * 8), ("fpay", q * cand_cap * 16),
        ("pkey", q * cand_cap * 8), ("ppay", q * cand_cap * 16), ("fcount", q * 4), ("pcount", q * 4),
        ("pool0", q * r * 16), ("pool1", q * r * 16), ("pool_n", q * 4), ("pool_sel", q * 4),
        ("pool_worst", 2 * q * 4), ("step_chunks", t * 4), ("step_alive", t * 4),
    ):
        lw.add(name, nbytes)
    lu = Layout()
    lu.add("params", PARAMS.size)
    lu.add("err", 4)
    lu.add("starts", q * 16)
    lu.add("ln", 4 * ln_len)
    if s.host_inputs:  # device-array proposals are read where they are
        lu.add("tok_in", rows * k * 4)
        lu.add("lp_in", rows * k * 4)
    lo = Layout()
    for name, nbytes in (("out_ids", q * r * 8), ("out_scores", q * r * 4), ("out_norms", q * r * 4),
                         ("out_lens", q * r * 4), ("out_nres", q * 4), ("out_err", 4), ("out_stats", 16 * t)):
        lo.add(name, nbytes)
    return lw, lu, lo


def shared_bytes(k: int, b: int, r: int, static_smem: int, smem_optin: int) -> tuple[int, int]:
    """(sort_cap, dynamic shared bytes) of a search; `InputError` when over the device's limit."""
    sort_cap = pow2(max(b, r, 32))
    smem = 8 * max(sort_cap, pow2(k)) + 8 * sort_cap  # keys (8 B); indices and old pool keys (4 B each)
    if smem + static_smem > smem_optin:
        raise InputError(f"beam_width/max_results/K: shared sort buffer of {smem} bytes is over the device "
                         f"limit {smem_optin - static_smem}")
    return sort_cap, smem


@dataclass
class Workspace:
    """The buffers, layouts and launch shape of one search shape.

    Besides the buffers it holds what every call of this shape would otherwise build again: the device
    addresses, typed views of the pinned mirrors, and what the last call staged in the upload mirror
    (``staged``: the key of the parameters and LN table written there; ``root_starts``: the start states
    there are all-root), so a call with the same key writes only what changed.
    """

    shape: Shape
    work: Any  # device Buffer
    up: Any  # device Buffer (per-call upload)
    out: Any  # device Buffer (results)
    up_host: Any  # pinned Buffer
    out_host: Any  # pinned Buffer
    up_view: np.ndarray
    out_view: np.ndarray
    lw: Layout
    lu: Layout
    lo: Layout
    cand_cap: int
    chunk_cap: int
    sort_cap: int
    smem: int
    grid: int
    nbytes: int
    staged: tuple[Any, ...] | None = None
    root_starts: bool = False
    _pointers: dict[str, int] = field(default_factory=dict)

    @cached_property
    def key(self) -> tuple[int, int, int, int, int, bool]:
        """(Q, T, K, B, R, host inputs): the call shapes this workspace serves."""
        s = self.shape
        return s.q, s.t, s.k, s.b, s.r, s.host_inputs

    @cached_property
    def handles(self) -> tuple[int, int, int, int]:
        """Addresses of (up, up_host, out, out_host), for the per-call copies."""
        return int(self.up.handle), int(self.up_host.handle), int(self.out.handle), int(self.out_host.handle)

    def pointers(self) -> dict[str, int]:
        """Device address of every named array of the three buffers (a new dict; computed once)."""
        if not self._pointers:
            for buf, lay in ((self.work, self.lw), (self.up, self.lu), (self.out, self.lo)):
                base = int(buf.handle)
                self._pointers.update({name: base + off for name, off in lay.offsets.items()})
        return dict(self._pointers)

    def up_bytes(self, name: str) -> np.ndarray:
        """The uint8 view of array ``name`` in the pinned upload mirror."""
        off = self.lu.offsets[name]
        return self.up_view[off: off + self.lu.sizes[name]]

    @cached_property
    def out_arrays(self) -> dict[str, np.ndarray]:
        """Typed views of the pinned result mirror: out_ids / out_scores / out_norms / out_lens [Q, R],
        out_nres [Q], out_err [1], out_stats [T, 4] (valid after the call's copy back)."""
        q, t, r = self.shape.q, self.shape.t, self.shape.r
        spec = {"out_ids": (np.int64, (q, r)), "out_scores": (np.float32, (q, r)), "out_norms": (np.float32, (q, r)),
                "out_lens": (np.int32, (q, r)), "out_nres": (np.int32, (q,)), "out_err": (np.uint32, (1,)),
                "out_stats": (np.uint32, (t, 4))}
        out = {}
        for name, (dt, shape) in spec.items():
            off = self.lo.offsets[name]
            out[name] = self.out_view[off: off + int(np.prod(shape)) * np.dtype(dt).itemsize].view(dt).reshape(shape)
        return out


def grid_size(kernel: Any, smem: int, num_sms: int, blocks_per_sm: int | None) -> int:
    """Blocks of the cooperative launch: as many as fit on the device at once (capped per SM)."""
    occ = int(kernel.occupancy.max_active_blocks_per_multiprocessor(THREADS, smem))
    if occ < 1:
        raise DeviceError(f"the kernel cannot run with {THREADS} threads and {smem} bytes of shared memory")
    return num_sms * (min(occ, blocks_per_sm) if blocks_per_sm else occ)


def build_workspace(ctx: GpuContext, s: Shape, lw: Layout, lu: Layout, lo: Layout, cand_cap: int, chunk_cap: int,
                    sort_cap: int, smem: int, grid: int, memory: tuple[int, int]) -> Workspace:
    """Allocate a workspace; ``memory`` = (free, total) device bytes, checked first (`DeviceError` naming the
    shape)."""
    need = lw.total + lu.total + lo.total
    free, total = memory
    if need > free:
        raise DeviceError(f"a search of {s} needs {need:,} bytes of device memory; {free:,} of {total:,} bytes "
                          f"are free")
    work = ctx.allocate(lw.total, f"the workspace of {s}")
    up = ctx.allocate(lu.total, "the upload buffer")
    out = ctx.allocate(lo.total, "the result buffer")
    up_host, up_view = ctx.allocate_pinned(lu.total, f"the upload of a search of {s}")
    out_host, out_view = ctx.allocate_pinned(lo.total, f"the results of a search of {s}")
    return Workspace(s, work, up, out, up_host, out_host, up_view, out_view, lw, lu, lo, cand_cap, chunk_cap,
                     sort_cap, smem, grid, need)
