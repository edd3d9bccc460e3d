"""The per-node flag words (`IndexView.nflags`) derived on the device at upload (``kernels/node_flags.cu``).

Index format 3 does not store them: the kernel reads the LOUDS, linked and terminal bits already uploaded
and writes the same words as `flashtrie.index.derived.node_flags` (tests/test_gpu_node_flags.py checks it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flashtrie.errors import DeviceError
from flashtrie.index.derived import flag_word_count

from .compile import compile_kernel

__all__ = ["FLAG_THREADS", "derive_node_flags", "flag_bytes"]

FLAG_THREADS = 256
_KERNELS: dict[tuple[int, str], Any] = {}  # (device, arch) -> the loaded kernel (one load per device)


def flag_bytes(num_nodes: int) -> int:
    """Bytes of the flag words of ``num_nodes`` nodes (8 nodes a uint32, at least 8 zero nodes of padding)."""
    return 4 * flag_word_count(int(num_nodes))


def _kernel(device: int, arch: str) -> Any:
    k = _KERNELS.get((device, arch))
    if k is None:
        from cuda.core import ObjectCode

        cubin = compile_kernel("node_flags.cu", arch).cubin
        k = _KERNELS[(device, arch)] = ObjectCode.from_cubin(cubin).get_kernel("ft_node_flags")
    return k


def derive_node_flags(ctx: Any, view_ptr: int, out_ptr: int, num_nodes: int) -> float:
    """Enqueue the flag kernel on ``ctx.stream``: the IndexView at ``view_ptr`` (its arrays uploaded) in,
    `flag_bytes` words at ``out_ptr`` out.  Returns after the kernel is done: its device time in seconds."""
    from cuda.core import LaunchConfig, launch

    nwords = flag_word_count(int(num_nodes))
    kernel = _kernel(int(ctx.device.device_id), ctx.arch)
    e0, e1 = ctx.events
    try:
        ctx.stream.record(e0)
        launch(ctx.stream, LaunchConfig(grid=-(-nwords // FLAG_THREADS), block=FLAG_THREADS), kernel,
               np.uint64(view_ptr), np.uint64(out_ptr), np.uint64(nwords))
        ctx.stream.record(e1)
        ctx.stream.sync()
    except Exception as e:
        raise DeviceError(f"deriving the node flags of {num_nodes:,} nodes on the device failed: {e}") from e
    return float(e1 - e0) / 1e3
