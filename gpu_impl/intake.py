"""What a search call is given, as the kernel takes it: proposals (three kinds) and start states.

Proposals may be a `Proposals` (validated on the host when it was built), a ``(tokens, logprobs)`` pair
of numpy arrays (validated here, through `Proposals`), or a pair of device arrays (CuPy, PyTorch,
anything with DLPack or ``__cuda_array_interface__``: C-contiguous ``[Q, T, K]`` int32/uint32 and
float32), read in place with no host copy and validated by the kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flashtrie.errors import InputError
from flashtrie.index import NarrowLoudsIndex
from flashtrie.proposals import Proposals
from flashtrie.search_core import StartStates

from .layout import CONSTANT

__all__ = ["Intake", "take_proposals", "pack_start_states", "is_device_array", "memory_view"]

_NO_NODE = CONSTANT["NO_NODE"]
_KIND_LINKED_OFF = CONSTANT["KIND_LINKED_OFF"]  # `flashtrie.gpu_impl.layout.CONSTANTS`


@dataclass
class Intake:
    """The proposals of one call: host arrays, or the addresses of device arrays (kept alive in ``keep``)."""

    shape: tuple[int, int, int]
    proposals: Proposals | None = None
    tokens_ptr: int = 0
    logprobs_ptr: int = 0
    signed_tokens: bool = False
    keep: list[Any] = field(default_factory=list)

    @property
    def on_device(self) -> bool:
        return self.proposals is None


def is_device_array(obj: Any) -> bool:
    """Whether ``obj`` is an array in device memory (CUDA Array Interface, or DLPack on a CUDA device)."""
    if isinstance(obj, np.ndarray):
        return False
    if hasattr(obj, "__cuda_array_interface__"):
        return True
    dl = getattr(obj, "__dlpack_device__", None)
    if dl is None:
        return False
    try:
        dev_type = int(dl()[0])
    except Exception:
        return False
    return dev_type in (2, 3, 13)  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged


def take_proposals(proposals: object, stream_handle: int, device_id: int) -> Intake:
    """The proposals argument as an `Intake` (`InputError` for anything else)."""
    if isinstance(proposals, Proposals):
        return Intake(proposals.shape, proposals)
    if not (isinstance(proposals, tuple) and len(proposals) == 2):
        raise InputError(f"proposals: expected a Proposals or a (tokens, logprobs) pair, got "
                         f"{type(proposals).__name__}")
    if is_device_array(proposals[0]):
        return _device_intake(proposals[0], proposals[1], stream_handle, device_id)
    p = Proposals(*proposals)
    return Intake(p.shape, p)


def memory_view(name: str, obj: Any, stream_ptr: int) -> Any:
    """A `StridedMemoryView` of the device array ``obj`` (DLPack or CUDA Array Interface), ordered after
    ``stream_ptr`` (-1: no ordering); `InputError` naming ``name`` for anything else."""
    from cuda.core.utils import StridedMemoryView

    make = getattr(StridedMemoryView, "from_any_interface", StridedMemoryView)
    try:
        v = make(obj, stream_ptr=int(stream_ptr))
    except Exception as e:
        raise InputError(f"{name}: not a device array readable through DLPack or CUDA Array Interface "
                         f"({type(obj).__name__}): {e}") from e
    if not v.is_device_accessible:
        raise InputError(f"{name}: expected a device array")
    return v


def _device_view(name: str, obj: Any, dtypes: tuple[Any, ...], stream_handle: int, device_id: int) -> Any:
    """A `StridedMemoryView` of a C-contiguous [Q, T, K] device array of one of ``dtypes``."""
    v = memory_view(name, obj, stream_handle)
    if len(v.shape) != 3:
        raise InputError(f"{name}: expected shape [Q, T, K], got {tuple(v.shape)}")
    if np.dtype(v.dtype) not in [np.dtype(d) for d in dtypes]:
        raise InputError(f"{name}: expected dtype {' or '.join(np.dtype(d).name for d in dtypes)}, "
                         f"got {np.dtype(v.dtype)}")
    if v.strides is not None:
        item = np.dtype(v.dtype).itemsize
        c = (v.shape[1] * v.shape[2] * item, v.shape[2] * item, item)
        st = tuple(int(s) * item for s in v.strides)  # StridedMemoryView counts strides in items
        if any(n > 1 and a != e for n, a, e in zip(v.shape, st, c, strict=True)):
            raise InputError(f"{name}: expected a C-contiguous array")
    if v.device_id != device_id:
        raise InputError(f"{name}: array is on device {v.device_id}, the searcher on {device_id}")
    return v


def _device_intake(tokens: Any, logprobs: Any, stream_handle: int, device_id: int) -> Intake:
    tv = _device_view("tokens", tokens, (np.int32, np.uint32), stream_handle, device_id)
    lv = _device_view("logprobs", logprobs, (np.float32,), stream_handle, device_id)
    if tuple(tv.shape) != tuple(lv.shape):
        raise InputError(f"logprobs: shape {tuple(lv.shape)} differs from tokens' shape {tuple(tv.shape)}")
    shape = tuple(int(s) for s in tv.shape)
    signed = np.dtype(tv.dtype) == np.dtype(np.int32)
    return Intake(shape, None, int(tv.ptr), int(lv.ptr), signed, [tv, lv])  # type: ignore[arg-type]


def pack_start_states(index: NarrowLoudsIndex, starts: StartStates, num_queries: int) -> np.ndarray:
    """The start states as the kernel's hypotheses (kernels/hypothesis.cuh), one per query, uint32 [Q, 4].

    A query with no start state gets node 2**32 - 1 (no results).  (node, off) becomes AT_NODE when off is
    the edge length (or the node is the root), else LINKED_OFF with aux = off.
    """
    st = np.zeros((num_queries, 4), dtype=np.uint32)
    st[:, 0] = _NO_NODE
    if starts.size == 0:
        return st
    q, node, off = starts.q, starts.node, starts.off
    st[q, 0] = node
    st[q, 2] = starts.length
    if bool(np.any(node != 0)):
        elen = np.asarray(index.edge_lengths(node), dtype=np.int64)
        mid = (node != 0) & (off < elen)
        st[q[mid], 3] = (_KIND_LINKED_OFF << 30) | off[mid].astype(np.uint32)
    return st
