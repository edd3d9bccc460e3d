"""CI (no GPU needed): the one loader and launch path of the kernels (gpu_impl/launch.py), with the driver's
entry point and cuda.core's module loading replaced by recorders.  The real launches are covered by the GPU
tests of the searcher, the stepper and the node flags."""

from __future__ import annotations

import ctypes
import struct
import types

import pytest
from flashtrie.gpu_impl import launch as L
from flashtrie.gpu_impl.layout import KERNEL_PARAMS
from flashtrie.gpu_impl.step_launch import MASK, ROWS, TABLES, head

from flashtrie.errors import DeviceError


class _Entry:
    """Stands for cuda-bindings' cuLaunchKernel: reads every parameter the way the driver does (through the
    array of pointers, each parameter's size from the kernel's table) and keeps what it read."""

    def __init__(self, sizes: dict[int, list[int]], err: int = 0) -> None:
        self.sizes, self.err, self.calls = sizes, err, []

    def __call__(self, handle, gx, gy, gz, bx, by, bz, smem, stream, params, *extra):
        ptrs = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        got = [ctypes.string_at(ptrs[i], n) for i, n in enumerate(self.sizes[handle])]
        self.calls.append((handle, gx, bx, smem, stream, got, extra))
        return (self.err,)


def _fake_driver(monkeypatch, entry: _Entry) -> None:
    """cuda-bindings' driver module replaced by ``entry`` (stream handle objects: the raw handles)."""
    drv = types.SimpleNamespace(cuLaunchKernel=entry, cuLaunchCooperativeKernel=entry, CUstream=lambda h: ("s", h))
    monkeypatch.setattr(L, "_driver", lambda: drv)
    monkeypatch.setattr(L, "_function_of", lambda driver, kernel: kernel)


def _sizes(p) -> list[int]:
    return [b - a for a, b in zip(p.offsets, [*p.offsets[1:], p.size], strict=True)]


def _loaded(file: str) -> L.LoadedKernels:
    names = [k.name for k in KERNEL_PARAMS.values() if k.file == file]
    kernels = {n: types.SimpleNamespace(handle=1000 + i) for i, n in enumerate(names)}
    return L.LoadedKernels(file, None, kernels, 0.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("cooperative", [False, True])
def test_launcher_hands_the_driver_each_parameter_by_name(monkeypatch, cooperative: bool) -> None:
    loaded = _loaded("step.cu")
    entry = _Entry({int(loaded[n].handle): _sizes(KERNEL_PARAMS[n]) for n in loaded.kernels})
    _fake_driver(monkeypatch, entry)
    launcher = L.Launcher(loaded, cooperative=cooperative)
    tab = TABLES(fc=11, rt=12, fc_n=13, rt_n=14)
    rows = ROWS["advance"](node_in=1, off_in=2, node_out=3, off_out=4, tok=5, eos=6, tok_stride=1, n=7,
                           tok_is64=1, n_eos=1)
    mask = MASK(outf=21, outb=0, dead_count=22, V=100, row_stride=100, parts=2, extra=0, flags=0)
    launcher.launch(77, "ft_step_advance_mask", 9, 256, head(0xFEED, tab) + rows + mask)
    launcher.launch(78, "ft_step_advance", 3, 256, head(0xFEED, tab) + rows, smem=64)
    (h1, g1, b1, s1, st1, got1, x1), (h2, g2, b2, s2, st2, got2, x2) = entry.calls
    assert (h1, g1, b1, s1, st1) == (int(loaded["ft_step_advance_mask"].handle), 9, 256, 0, ("s", 77))
    assert got1 == [struct.pack("<Q", 0xFEED), tab, rows, mask]
    assert (h2, g2, s2, st2) == (int(loaded["ft_step_advance"].handle), 3, 64, ("s", 78)) and got2 == got1[:3]
    assert x1 == (() if cooperative else (0,))  # cuLaunchCooperativeKernel takes no "extra"


def test_launcher_refuses_parameters_of_the_wrong_size_and_names_driver_errors(monkeypatch) -> None:
    loaded = _loaded("node_flags.cu")
    p = KERNEL_PARAMS["ft_node_flags"]
    entry = _Entry({int(loaded["ft_node_flags"].handle): _sizes(p)}, err=1)
    _fake_driver(monkeypatch, entry)
    launcher = L.Launcher(loaded)
    with pytest.raises(DeviceError, match="ft_node_flags: expected 24 bytes of parameters, got 16"):
        launcher.launch(1, "ft_node_flags", 1, 256, struct.pack("<QQ", 1, 2))
    assert not entry.calls
    with pytest.raises(DeviceError, match="ft_node_flags: launch of 4 blocks x 256 threads .* failed"):
        launcher.launch(1, "ft_node_flags", 4, 256, p.pack(view=1, out=2, nwords=3))
    assert entry.calls[0][5] == [struct.pack("<Q", v) for v in (1, 2, 3)]


def test_load_kernels_compiles_and_loads_once_per_device_and_macros(monkeypatch) -> None:
    """One load per (file, arch, macros, device); a later load is the same kernels, from the cache."""
    import cuda.core

    compiled: list[tuple] = []
    loads: list[bytes] = []

    def compile_kernel(file, arch, defines):
        compiled.append((file, arch, dict(defines)))
        return L.CompiledKernel(file, arch, b"\x7fELF" + file.encode(), "", None, False, 1.5, dict(defines))

    class ObjectCode:
        @staticmethod
        def from_cubin(cubin):
            loads.append(cubin)
            return types.SimpleNamespace(get_kernel=lambda name: ("kernel", name, cubin))

    monkeypatch.setattr(L, "_LOADED", {})
    monkeypatch.setattr(L, "compile_kernel", compile_kernel)
    monkeypatch.setattr(cuda.core, "ObjectCode", ObjectCode)
    a = L.load_kernels("step.cu", "sm_90", {"FT_STEP_THREADS": 256})
    assert set(a.kernels) == {k.name for k in KERNEL_PARAMS.values() if k.file == "step.cu"}
    assert a["ft_step_mask"] == ("kernel", "ft_step_mask", b"\x7fELFstep.cu")
    assert not a.compiled.from_cache and a.compiled.seconds == 1.5
    b = L.load_kernels("step.cu", "sm_90", {"FT_STEP_THREADS": "256"})
    assert b.kernels is a.kernels and b.compiled.from_cache and b.compiled.seconds < 1.5
    L.load_kernels("step.cu", "sm_90", {"FT_STEP_THREADS": "128"})
    L.load_kernels("step.cu", "sm_90", {"FT_STEP_THREADS": "256"}, device_id=1)
    assert len(compiled) == len(loads) == 3


def test_launcher_makes_each_stream_handle_object_once(monkeypatch) -> None:
    loaded = _loaded("node_flags.cu")
    p = KERNEL_PARAMS["ft_node_flags"]
    entry = _Entry({int(loaded["ft_node_flags"].handle): _sizes(p)})
    made: list[int] = []
    drv = types.SimpleNamespace(cuLaunchKernel=entry, CUstream=lambda h: made.append(h) or ("s", h))
    monkeypatch.setattr(L, "_driver", lambda: drv)
    monkeypatch.setattr(L, "_function_of", lambda driver, kernel: kernel)
    launcher = L.Launcher(loaded)
    for stream in (5, 6, 5, 5, 6):
        launcher.launch(stream, "ft_node_flags", 1, 256, p.pack(view=1, out=2, nwords=3))
    assert made == [5, 6] and [c[4] for c in entry.calls] == [("s", s) for s in (5, 6, 5, 5, 6)]
