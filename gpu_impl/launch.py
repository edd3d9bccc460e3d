"""Loading and launching the kernels: one cached loader and one launch path for every kernel.

`load_kernels` compiles ``kernels/<file>`` (or reads its cubin from the disk cache: `compile_kernel`), loads
the cubin once per process, device, architecture and macros, and looks up each of the file's entry points
(`flashtrie.gpu_impl.layout.KERNEL_PARAMS`): a `LoadedKernels`.

`Launcher` launches them.  A launch's parameters, packed by name (`KernelParams.pack`, the struct packers of
`flashtrie.gpu_impl.layout`), are copied into one host buffer and handed to cuda-bindings' ``cuLaunchKernel``
(``cuLaunchCooperativeKernel`` for a cooperative grid) with one pointer per parameter, the context's function
handle of each kernel and the stream's handle object (made once per raw stream handle): of the ways measured
from Python (`flashtrie bench launch`: cuda.core's ``launch``, the C entry point through ctypes, cuda-bindings'
``cuLaunchKernel``) the one with the least host time.  The driver copies the parameters at the call, so a
launch under CUDA graph capture keeps them.
"""

from __future__ import annotations

import ctypes
import dataclasses
import threading
import time
from typing import Any

from flashtrie.errors import DeviceError

from .compile import CompiledKernel, compile_kernel
from .layout import KERNEL_PARAMS

__all__ = ["LoadedKernels", "Launcher", "load_kernels"]

_LOADED: dict[tuple[Any, ...], LoadedKernels] = {}
_LOAD_LOCK = threading.Lock()
#: raw stream handles whose handle objects a `Launcher` keeps
_STREAMS_KEPT = 64


@dataclasses.dataclass(frozen=True)
class LoadedKernels:
    """A loaded cubin: the cuda.core `Kernel` of each of its entry points, how it was compiled (``compiled``:
    ``seconds`` and ``from_cache`` are this load's), and the seconds this load took in all.

    Every load of the same cubin on a device shares the kernels, ``module`` (the loaded cubin, kept alive) and
    ``shared_allowed``: the dynamic shared memory each kernel was allowed so far (raised, never lowered, so
    one user's smaller workspace never takes back what another's launch needs)."""

    file: str
    compiled: CompiledKernel
    kernels: dict[str, Any]
    seconds: float
    module: Any = None
    shared_allowed: dict[str, int] = dataclasses.field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        return self.kernels[name]


def load_kernels(file: str, arch: str, defines: dict[str, str] | None = None, device_id: int = 0
                 ) -> LoadedKernels:
    """The kernels of ``kernels/<file>`` compiled for ``arch`` with ``defines``, loaded once per process for
    ``device_id``: a later call with the same arguments gets the same kernels (``compiled.from_cache`` True)."""
    defines = {k: str(v) for k, v in (defines or {}).items()}
    key = (file, arch, tuple(sorted(defines.items())), int(device_id))
    t0 = time.perf_counter()
    with _LOAD_LOCK:
        hit = _LOADED.get(key)
        if hit is None:
            try:
                from cuda.core import ObjectCode
            except ImportError as e:  # pragma: no cover - depends on the environment
                raise DeviceError(f"the GPU backend needs cuda-core (pip install 'flashtrie[gpu]'): {e}") from e
            compiled = compile_kernel(file, arch, defines)
            code = ObjectCode.from_cubin(compiled.cubin)
            names = [k.name for k in KERNEL_PARAMS.values() if k.file == file]
            try:
                kernels = {name: code.get_kernel(name) for name in names}
            except Exception as e:
                raise DeviceError(f"loading the kernels {names} of {file} for {arch} failed: {e}") from e
            hit = _LOADED[key] = LoadedKernels(file, compiled, kernels, time.perf_counter() - t0, code)
            return hit
    seconds = time.perf_counter() - t0
    return dataclasses.replace(hit, compiled=dataclasses.replace(hit.compiled, from_cache=True, seconds=seconds),
                               seconds=seconds)


def _driver() -> Any:
    """cuda-bindings' driver module (installed with cuda-core)."""
    try:
        from cuda.bindings import driver
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise DeviceError(f"the GPU backend needs cuda-bindings (pip install 'flashtrie[gpu]'): {e}") from e
    return driver


def _function_of(driver: Any, kernel: int) -> Any:
    """The current context's function handle of a library kernel handle (``cuKernelGetFunction``): a launch
    through it costs the driver less host time than one through the kernel handle; the kernel handle itself
    where the driver cannot say (it launches too)."""
    try:
        err, fn = driver.cuKernelGetFunction(driver.CUkernel(kernel))
        if err == driver.CUresult.CUDA_SUCCESS and int(fn):
            return fn
    except Exception:  # noqa: BLE001 - the kernel handle launches too
        pass
    return driver.CUfunction(kernel)


def _error_name(err: int) -> str:
    try:
        from cuda.bindings import driver

        return str(driver.CUresult(err))
    except Exception:  # noqa: BLE001 - the number is still the error
        return f"CUresult {err}"


class Launcher:
    """Launches the kernels of a `LoadedKernels` (``cooperative``: as cooperative grids).

    One host buffer holds the parameters of a launch: one launch at a time (a lock; the driver call releases
    the GIL)."""

    def __init__(self, loaded: LoadedKernels, *, cooperative: bool = False) -> None:
        driver = _driver()
        self._fn = driver.cuLaunchCooperativeKernel if cooperative else driver.cuLaunchKernel
        self._cooperative = cooperative
        self._stream_of = driver.CUstream
        #: the handle object of each raw stream handle launched on (few: a process's streams)
        self._streams: dict[int, Any] = {}
        params = {name: KERNEL_PARAMS[name] for name in loaded.kernels}
        self._buf = ctypes.create_string_buffer(max(p.size for p in params.values()))
        base = ctypes.addressof(self._buf)
        self._keep: list[Any] = []
        #: per entry point: the function handle, the address of its parameter pointers, its parameter bytes
        self._entries: dict[str, tuple[Any, int, int]] = {}
        for name, p in params.items():
            ptrs = (ctypes.c_void_p * len(p.offsets))(*[base + off for off in p.offsets])
            self._keep.append(ptrs)
            self._entries[name] = (_function_of(driver, int(loaded[name].handle)), ctypes.addressof(ptrs), p.size)
        self._lock = threading.Lock()

    def _stream(self, stream: int) -> Any:
        s = self._streams.get(stream)
        if s is None:
            if len(self._streams) >= _STREAMS_KEPT:
                self._streams.clear()
            s = self._streams[stream] = self._stream_of(stream)
        return s

    def launch(self, stream: int, name: str, grid: int, block: int, params: bytes, smem: int = 0) -> None:
        """Launch entry point ``name`` on the raw stream handle ``stream``: ``grid`` blocks of ``block``
        threads, ``smem`` bytes of dynamic shared memory, the parameters ``params`` (`KernelParams.pack`)."""
        handle, ptrs, size = self._entries[name]
        if len(params) != size:
            raise DeviceError(f"{name}: expected {size} bytes of parameters, got {len(params)}")
        s = self._stream(stream)
        with self._lock:
            ctypes.memmove(self._buf, params, size)
            if self._cooperative:
                r = self._fn(handle, grid, 1, 1, block, 1, 1, smem, s, ptrs)
            else:
                r = self._fn(handle, grid, 1, 1, block, 1, 1, smem, s, ptrs, 0)
        err = r[0] if r.__class__ is tuple else r
        if err:
            raise DeviceError(f"{name}: launch of {grid} blocks x {block} threads ({smem} bytes shared) failed: "
                              f"{_error_name(err)}")
