"""Launching the step kernels (kernels/step.cu): their parameters, the mask grid, and the launch itself.

Every kernel takes the index view's device address, then the structs of kernels/step_params.cuh by value:
the tables (`STEP_TABLES`), the rows of the launch (`STEP_ROWS`) and a mask kernel the mask (`STEP_MASK`),
each packed from its field table in `flashtrie.gpu_impl.layout` with only the fields the kernel reads (the
packers below; the rest 0).  cuda.core's `launch` takes scalars only, so the launch is the driver's
``cuLaunchKernel`` with one pointer per parameter into a host buffer (the driver copies the parameters at the
call: a CUDA graph capture keeps them).
"""

from __future__ import annotations

import ctypes
import struct
import threading
from typing import Any

from flashtrie.errors import DeviceError

from .layout import STEP_MASK, STEP_ROWS, STEP_TABLES

__all__ = ["VIEW", "TABLES", "MASK", "ROWS", "StepLauncher", "mask_grid", "sm_count"]

#: the first parameter: the view's device address
VIEW = struct.Struct("<Q").pack
#: the child and root tables (pointers, then the nodes and labels they cover)
TABLES = STEP_TABLES.packer("fc rt fc_n rt_n")
#: a mask's output (float32 logits or a bool mask), its dead-row counter, its grid and options
MASK = STEP_MASK.packer("outf outb dead_count V row_stride parts extra flags")
#: the rows each kernel reads, by kernel (positional, in the table's order)
ROWS = {
    "advance": STEP_ROWS.packer("node_in off_in node_out off_out tok eos tok_stride n tok_is64 n_eos"),
    "walk": STEP_ROWS.packer("node_out off_out ids begin end eos ids_stride width begin_all end_all n n_eos"),
    "mask": STEP_ROWS.packer("node_in off_in eos n n_eos"),
    "walk_mask": STEP_ROWS.packer("ids begin end eos ids_stride width begin_all end_all n n_eos"),
    "count": STEP_ROWS.packer("node_in off_in counts ends n"),
    "fill": STEP_ROWS.packer("node_in off_in offsets tokens cap n"),
    "table": STEP_ROWS.packer("table n"),
}
ROWS["advance_mask"] = ROWS["advance"]
#: where each parameter starts in the packed parameters
_OFFSETS = (0, 8, 8 + STEP_TABLES.size, 8 + STEP_TABLES.size + STEP_ROWS.size)
_SIZE = _OFFSETS[-1] + STEP_MASK.size


class StepLauncher:
    """Launches the step kernels of one loaded cubin (``kernels``: name -> cuda.core `Kernel`)."""

    def __init__(self, kernels: dict[str, Any]) -> None:
        self._kernels = kernels
        self._handles: dict[str, Any] = {}
        self._buf = ctypes.create_string_buffer(_SIZE)
        base = ctypes.addressof(self._buf)
        self._ptrs = (ctypes.c_void_p * len(_OFFSETS))(*[base + off for off in _OFFSETS])
        self._params_at = ctypes.addressof(self._ptrs)
        #: the buffer is shared: one launch at a time (the driver call releases the GIL)
        self._lock = threading.Lock()

    def _handle(self, name: str) -> Any:
        from cuda.bindings import driver

        h = self._handles.get(name)
        if h is None:  # a CUkernel goes where cuLaunchKernel takes a CUfunction
            h = self._handles[name] = driver.CUfunction(int(self._kernels[name].handle))
        return h

    def launch(self, stream: int, name: str, blocks: int, threads: int, params: bytes) -> None:
        """Launch ``ft_step_<name>`` on the raw stream handle ``stream`` with the packed ``params``."""
        from cuda.bindings import driver

        f = self._handle(name)
        with self._lock:
            ctypes.memmove(self._buf, params, len(params))
            (err,) = driver.cuLaunchKernel(f, blocks, 1, 1, threads, 1, 1, 0, stream, self._params_at, 0)
        if int(err) != 0:
            raise DeviceError(f"ft_step_{name}: launch of {blocks} blocks x {threads} threads failed: {err}")


def mask_grid(n: int, v: int, additive: bool, chunk: int, blocks_per_row: int | None,
              target: int) -> tuple[int, int]:
    """Blocks per row of a mask launch: (parts, extra), the first ``extra`` rows in parts + 1 blocks and the
    others in ``parts`` (kernels/step_mask.cuh mask_row).  ``blocks_per_row`` None: the grid is a multiple of
    ``target`` (every SM gets as many bytes to store: a grid that is no multiple of the SM count stores
    slower) with at least one block a row; always at most one block per ``chunk`` entries of a row (a row
    starts up to 3 float32 or 15 bool entries into its first chunk)."""
    chunks = -(-(v + (3 if additive else 15)) // chunk)
    if blocks_per_row:
        return min(int(blocks_per_row), chunks), 0
    parts, extra = divmod(target * max(1, -(-n // target)), max(n, 1))
    if parts + (extra > 0) > chunks:
        return chunks, 0
    return parts, extra


def sm_count(device: Any) -> int:
    """The device's multiprocessor count."""
    try:
        return int(device.properties.multiprocessor_count)
    except Exception:  # noqa: BLE001 - an older cuda.core: the H200's count
        return 132
