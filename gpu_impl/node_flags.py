"""The per-node flag words (`IndexView.nflags`) derived on the device at upload (``kernels/node_flags.cu``).

Index format 3 does not store them: the kernel reads the LOUDS, linked and terminal bits already uploaded
and writes the same words as `flashtrie.index.derived.node_flags` (tests/test_gpu_node_flags.py checks it).
"""

from __future__ import annotations

from typing import Any

from flashtrie.errors import DeviceError
from flashtrie.index.derived import flag_word_count

from .launch import Launcher, load_kernels
from .layout import KERNEL_PARAMS

__all__ = ["FLAG_THREADS", "derive_node_flags", "flag_bytes"]

FLAG_THREADS = 256
_PARAMS = KERNEL_PARAMS["ft_node_flags"].packer()
_LAUNCHERS: dict[tuple[int, str], Launcher] = {}  # (device, arch) -> its launcher (one load per device)


def flag_bytes(num_nodes: int) -> int:
    """Bytes of the flag words of ``num_nodes`` nodes (8 nodes a uint32, at least 8 zero nodes of padding)."""
    return 4 * flag_word_count(int(num_nodes))


def _launcher(device: int, arch: str) -> Launcher:
    launcher = _LAUNCHERS.get((device, arch))
    if launcher is None:
        launcher = _LAUNCHERS[(device, arch)] = Launcher(load_kernels("node_flags.cu", arch, device_id=device))
    return launcher


def derive_node_flags(ctx: Any, view_ptr: int, out_ptr: int, num_nodes: int) -> float:
    """Enqueue the flag kernel on ``ctx.stream``: the IndexView at ``view_ptr`` (its arrays uploaded) in,
    `flag_bytes` words at ``out_ptr`` out.  Returns after the kernel is done: its device time in seconds."""
    nwords = flag_word_count(int(num_nodes))
    launcher = _launcher(int(ctx.device.device_id), ctx.arch)
    e0, e1 = ctx.events
    try:
        ctx.stream.record(e0)
        launcher.launch(int(ctx.stream.handle), "ft_node_flags", -(-nwords // FLAG_THREADS), FLAG_THREADS,
                        _PARAMS(view=int(view_ptr), out=int(out_ptr), nwords=nwords))
        ctx.stream.record(e1)
        ctx.stream.sync()
    except Exception as e:
        raise DeviceError(f"deriving the node flags of {num_nodes:,} nodes on the device failed: {e}") from e
    return float(e1 - e0) / 1e3
