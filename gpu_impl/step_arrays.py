"""The device arrays of `GpuTrieStepper`: the array module it allocates with (PyTorch or CuPy), and the
pointer, shape, strides and dtype of any device array it is given (checked, with errors naming the argument)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from flashtrie.errors import DeviceError, InputError
from flashtrie.stepwise import StepStates

from .intake import memory_view

__all__ = ["ArrayModule", "DeviceView", "array_module", "stream_handle", "device_view", "state_views", "ptr", "I64",
           "I64_I32", "F32", "BOOL"]

I64, I64_I32 = (np.dtype(np.int64),), (np.dtype(np.int64), np.dtype(np.int32))
F32, BOOL = (np.dtype(np.float32),), (np.dtype(np.bool_), np.dtype(np.uint8))


class _Torch:
    name = "torch"

    def __init__(self, device: int) -> None:
        import torch

        self.t = torch
        self.device = torch.device("cuda", device)
        self.index = device
        self.int64, self.int32, self.float32, self.bool = torch.int64, torch.int32, torch.float32, torch.bool

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        return self.t.empty(shape, dtype=dtype, device=self.device)

    def full(self, shape: tuple[int, ...], value: Any, dtype: Any) -> Any:
        return self.t.full(shape, value, dtype=dtype, device=self.device)

    def asarray(self, a: np.ndarray) -> Any:
        return self.t.as_tensor(a, device=self.device)

    def sync(self) -> None:
        self.t.cuda.current_stream(self.device).synchronize()

    def stream(self) -> int:
        return stream_handle(self.t.cuda.current_stream(self.device))

    def states(self, n: int) -> tuple[Any, Any]:
        """Two int64 device arrays of n (one allocation)."""
        return self.t.empty((2, n), dtype=self.int64, device=self.device).unbind(0)

    def cumsum(self, a: Any) -> Any:
        return self.t.cumsum(a, 0)


class _Cupy:
    name = "cupy"

    def __init__(self, device: int) -> None:
        import cupy

        self.cp = cupy
        self.dev = cupy.cuda.Device(device)
        self.int64, self.int32, self.float32, self.bool = cupy.int64, cupy.int32, cupy.float32, cupy.bool_

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        with self.dev:
            return self.cp.empty(shape, dtype=dtype)

    def full(self, shape: tuple[int, ...], value: Any, dtype: Any) -> Any:
        with self.dev:
            return self.cp.full(shape, value, dtype=dtype)

    def asarray(self, a: np.ndarray) -> Any:
        with self.dev:
            return self.cp.asarray(a)

    def stream(self) -> int:
        return stream_handle(self.cp.cuda.get_current_stream())

    def sync(self) -> None:
        self.cp.cuda.get_current_stream().synchronize()

    def states(self, n: int) -> tuple[Any, Any]:
        with self.dev:
            return self.cp.empty((n,), dtype=self.int64), self.cp.empty((n,), dtype=self.int64)

    def cumsum(self, a: Any) -> Any:
        return self.cp.cumsum(a)


ArrayModule = _Torch | _Cupy


def stream_handle(stream: Any) -> int:
    """The CUDA stream handle of ``stream``, an object of the CUDA stream protocol (``__cuda_stream__``: PyTorch,
    CuPy and cuda.core streams), or of the older spellings (``cuda_stream``: PyTorch; ``ptr``: CuPy)."""
    proto = getattr(stream, "__cuda_stream__", None)
    if callable(proto):
        version, handle = proto()
        if version != 0:
            raise InputError(f"stream: __cuda_stream__ protocol version {version} is not supported (0 is)")
        return int(handle)
    for name in ("cuda_stream", "ptr"):
        handle = getattr(stream, name, None)
        if isinstance(handle, int):
            return handle
    raise InputError(f"stream: expected a CUDA stream (an object with __cuda_stream__), got {type(stream).__name__}")


def array_module(name: str | None, device: int) -> ArrayModule:
    """The array module ``name`` ("torch" or "cupy"; None: torch when it is installed, else CuPy) on ``device``."""
    if name not in (None, "torch", "cupy"):
        raise InputError(f"array_module: expected 'torch' or 'cupy', got {name!r}")
    if name in (None, "torch"):
        try:
            return _Torch(device)
        except ImportError:
            if name == "torch":
                raise DeviceError("array_module 'torch' needs PyTorch (pip install 'flashtrie[hf]')") from None
    try:
        return _Cupy(device)
    except ImportError:
        raise DeviceError("the GPU stepper needs PyTorch or CuPy for its arrays") from None


class DeviceView:
    """Pointer, shape, strides (in items) and dtype of a device array."""

    __slots__ = ("ptr", "shape", "strides", "dtype", "obj")

    def __init__(self, ptr: int, shape: tuple[int, ...], strides: tuple[int, ...], dtype: np.dtype | None,
                 obj: Any):
        self.ptr, self.shape, self.strides, self.dtype, self.obj = ptr, shape, strides, dtype, obj


_TORCH_DTYPE_CACHE: dict[Any, np.dtype | None] = {}
_TORCH_DTYPES: dict[str, np.dtype] = {"torch.int64": np.dtype(np.int64), "torch.int32": np.dtype(np.int32),
                                      "torch.float32": np.dtype(np.float32), "torch.bool": np.dtype(np.bool_),
                                      "torch.uint8": np.dtype(np.uint8)}


def _torch_dtype(dtype: Any) -> np.dtype | None:
    """The numpy dtype of a torch dtype (kept by dtype object: a decode loop asks every call)."""
    if dtype not in _TORCH_DTYPE_CACHE:
        _TORCH_DTYPE_CACHE[dtype] = _TORCH_DTYPES.get(str(dtype))
    return _TORCH_DTYPE_CACHE[dtype]


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


def device_view(obj: Any, name: str, ndim: int, dtypes: Sequence[Any]) -> DeviceView:
    """A device array's pointer and layout (torch fast path; else DLPack / CUDA Array Interface)."""
    if type(obj).__module__.startswith("torch"):
        dt = _torch_dtype(obj.dtype)
        if not obj.is_cuda:
            raise InputError(f"{name}: expected a CUDA tensor, got one on {obj.device}")
        v = DeviceView(obj.data_ptr(), tuple(obj.shape), obj.stride(), dt, obj)
    else:  # -1: no stream ordering to set up, the kernels run on the array library's current stream
        m = memory_view(name, obj, -1)
        shape = tuple(int(s) for s in m.shape)
        strides = tuple(int(s) for s in m.strides) if m.strides is not None else _c_strides(shape)
        v = DeviceView(int(m.ptr), shape, strides, np.dtype(m.dtype), (obj, m))
    if len(v.shape) != ndim:
        raise InputError(f"{name}: expected {ndim} dimension(s), got shape {list(v.shape)}")
    if v.dtype not in dtypes:
        want = [np.dtype(d) for d in dtypes]
        raise InputError(f"{name}: expected dtype {' or '.join(d.name for d in want)}, got {v.dtype}")
    return v


def state_views(states: StepStates) -> tuple[DeviceView, DeviceView, int]:
    """The node and off arrays of ``states`` (contiguous int64 of one length, below the launch limit) and n."""
    if not isinstance(states, StepStates):
        raise InputError(f"states: expected StepStates, got {type(states).__name__}")
    a = device_view(states.node, "states.node", 1, I64)
    b = device_view(states.off, "states.off", 1, I64)
    if a.shape != b.shape:
        raise InputError(f"states: node and off differ in length ({a.shape[0]}, {b.shape[0]})")
    for v, nm in ((a, "node"), (b, "off")):
        if v.shape[0] > 1 and v.strides[0] != 1:
            raise InputError(f"states.{nm}: expected a contiguous array")
    if a.shape[0] >= 2**31:
        raise InputError(f"states: {a.shape[0]} states is over the launch limit 2**31 - 1 (one block each)")
    return a, b, int(a.shape[0])


def ptr(a: Any) -> int:
    """The device address of a torch tensor or CuPy array."""
    if hasattr(a, "data_ptr"):
        return int(a.data_ptr())
    return int(a.data.ptr)
