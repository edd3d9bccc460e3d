"""The array module of a pass that runs on the CPU (numpy) or on the GPU (cupy, optional: imported only when
asked for, with a clear error where it or a GPU is missing)."""

from __future__ import annotations

from types import ModuleType

from .errors import DeviceError

__all__ = ["cupy_module"]


def cupy_module() -> ModuleType:
    """cupy, with a clear error where it (or a GPU) is missing."""
    try:
        import cupy
    except ImportError as e:
        raise DeviceError(f"the GPU builder and passes need cupy ({e}); install it with pip install "
                          "'flashtrie[gpu-build]' (cupy-cuda13x), or build on the CPU with "
                          "NarrowLoudsIndex.build") from None
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # cupy's CUDARuntimeError: no driver or no device
        raise DeviceError(f"no usable CUDA device for the GPU builder and passes: {e}") from None
    return cupy
