"""`GpuContext`: one CUDA device as the GPU backend uses it (cuda.core objects throughout).

The device and its context, one stream every copy and launch is ordered on, a pair of timing events,
device and pinned allocations that name what they were for when they fail, and copies between device
memory and host arrays as `cuda.core.Buffer` copies.  Where cuda.core has no API (free memory, pool
trimming, the current context, the dynamic shared-memory attribute) it calls cuda.bindings once.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from flashtrie.errors import DeviceError

__all__ = ["GpuContext", "check", "as_int", "value"]


def as_int(handle: Any) -> int:
    """A cuda.bindings handle (CUcontext, ...) as the integer address it wraps."""
    try:
        return int(handle)
    except TypeError:
        return int(handle.getPtr())


def check(result: Any, what: str) -> Any:
    """Unpack a cuda.bindings ``(err, *values)`` tuple; raise `DeviceError` on failure."""
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != 0:
        raise DeviceError(f"{what} failed: {err}")
    if isinstance(result, tuple):
        return result[1] if len(result) == 2 else result[1:]
    return None


def value(x: Any) -> Any:
    """A cuda.core attribute that is a property in one version and a method in another."""
    return x() if callable(x) else x


class GpuContext:
    """Device ``device_id``, made current, with its own stream and two timing events."""

    def __init__(self, device_id: int = 0) -> None:
        try:
            from cuda.core import Device, EventOptions
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise DeviceError(f"the GPU backend needs cuda-core (pip install 'flashtrie[gpu]'): {e}") from e
        try:
            self.device = Device(device_id)
            self.device.set_current()
            self._context = self._current_context()
        except Exception as e:
            raise DeviceError(f"no usable CUDA device {device_id}: {e}") from e
        cc = value(self.device.compute_capability)
        self.arch = f"sm_{cc.major}{cc.minor}"
        self.num_sms = int(self.device.properties.multiprocessor_count)
        self.smem_optin = int(self.device.properties.max_shared_memory_per_block_optin)
        self.stream = self.device.create_stream()
        self.events = (self.device.create_event(EventOptions(timing_enabled=True)),
                       self.device.create_event(EventOptions(timing_enabled=True)))

    @staticmethod
    def _current_context() -> int:
        from cuda.bindings import driver

        return as_int(check(driver.cuCtxGetCurrent(), "cuCtxGetCurrent"))

    def make_current(self) -> None:
        """Make this device's context current on the calling thread (a no-op when it is)."""
        if self._current_context() != self._context:
            self.device.set_current()

    # ------------------------------------------------------------------------------------ memory
    def allocate(self, nbytes: int, what: str) -> Any:
        """A device `Buffer` of at least ``nbytes`` (8 at least), ordered on the stream."""
        try:
            return self.device.allocate(max(int(nbytes), 8), stream=self.stream)
        except Exception as e:
            free, total = self.memory_info()
            raise DeviceError(f"cannot allocate {nbytes:,} bytes of device memory for {what} "
                              f"(free {free:,} of {total:,} bytes): {e}") from e

    def allocate_pinned(self, nbytes: int, what: str) -> tuple[Any, np.ndarray]:
        """A pinned host `Buffer` and a uint8 numpy view of it."""
        from cuda.core import LegacyPinnedMemoryResource

        try:
            buf = LegacyPinnedMemoryResource().allocate(max(int(nbytes), 8))
        except Exception as e:
            raise DeviceError(f"cannot allocate {nbytes:,} bytes of pinned host memory for {what}: {e}") from e
        view = np.ctypeslib.as_array((ctypes.c_uint8 * int(nbytes)).from_address(int(buf.handle)))
        return buf, view

    def memory_info(self) -> tuple[int, int]:
        """(free, total) device memory in bytes."""
        from cuda.bindings import driver

        free, total = check(driver.cuMemGetInfo(), "cuMemGetInfo")
        return int(free), int(total)

    def trim_pool(self) -> bool:
        """Release the memory pool's unused reservations (freed buffers stay reserved in cuda.core's pool and
        would not count as free).  True when the pool was trimmed."""
        from cuda.bindings import driver

        try:
            pool = self.device.memory_resource.handle
            return int(driver.cuMemPoolTrimTo(pool, 0)[0]) == 0
        except Exception:  # noqa: BLE001 - no pool to trim (another resource, older cuda.core): nothing to give back
            return False

    # ------------------------------------------------------------------------------------ copies
    @staticmethod
    def span(ptr: int, nbytes: int, owner: Any = None) -> Any:
        """A non-owning `Buffer` over ``nbytes`` at ``ptr`` (device or host; ``owner`` kept alive)."""
        from cuda.core import Buffer

        return Buffer.from_handle(int(ptr), int(nbytes), owner=owner)

    def upload(self, dst_ptr: int, host: np.ndarray) -> None:
        """Copy a C-contiguous host array to device address ``dst_ptr`` (enqueued on the stream)."""
        if host.nbytes:
            self.span(dst_ptr, host.nbytes).copy_from(self.span(host.ctypes.data, host.nbytes, host),
                                                      stream=self.stream)

    def download(self, host: np.ndarray, src_ptr: int) -> None:
        """Copy ``host.nbytes`` from device address ``src_ptr`` into ``host`` (enqueued on the stream)."""
        if host.nbytes:
            self.span(src_ptr, host.nbytes).copy_to(self.span(host.ctypes.data, host.nbytes, host),
                                                    stream=self.stream)

    def copy(self, dst_ptr: int, src_ptr: int, nbytes: int) -> None:
        """Copy ``nbytes`` between two device (or pinned) addresses on the stream."""
        if nbytes:
            self.span(dst_ptr, nbytes).copy_from(self.span(src_ptr, nbytes), stream=self.stream)

    def set_max_dynamic_shared(self, kernel: Any, nbytes: int) -> None:
        """Allow ``kernel`` ``nbytes`` of dynamic shared memory (needed above 48 KB)."""
        from cuda.bindings import driver

        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        check(driver.cuKernelSetAttribute(attr, int(nbytes), kernel.handle, self.device.device_id),
              "cuKernelSetAttribute")
