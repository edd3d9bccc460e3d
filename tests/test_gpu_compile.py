"""CI (no GPU needed): every kernel compiles with NVRTC from the pip wheels, with no local-memory spills."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # kernels compiled or emulated: minutes on two cores

pytest.importorskip("cuda.core")
pytest.importorskip("cuda.bindings.nvrtc")
pytest.importorskip("cuda.pathfinder")

from flashtrie.gpu_impl.compile import KERNELS, compile_kernel, spill_report  # noqa: E402


def _nvrtc_available() -> bool:
    try:
        from cuda.bindings import nvrtc

        return int(nvrtc.nvrtcVersion()[0]) == 0
    except Exception:
        return False


if not _nvrtc_available():  # pragma: no cover - depends on the environment
    pytest.skip("NVRTC library not installed (nvidia-cuda-nvrtc)", allow_module_level=True)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("file", sorted(KERNELS))
def test_compiles_without_spills(file: str, arch: str, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FLASHTRIE_CACHE", str(tmp_path))
    k = compile_kernel(file, arch, {"FT_THREADS": "512"}, verbose=True)
    assert not k.from_cache
    assert k.cubin[:4] == b"\x7fELF"
    report = spill_report(k.log)
    entry = KERNELS[file]
    assert entry in report, k.log
    r = report[entry]
    assert r.get("spill_stores", 0) == 0 and r.get("spill_loads", 0) == 0, f"{entry} spills on {arch}: {r}"
    assert r.get("stack", 0) == 0, f"{entry} uses a stack frame on {arch}: {r}"
    assert 0 < r["registers"] <= 128, r
    # the second use loads the cache
    k2 = compile_kernel(file, arch, {"FT_THREADS": "512"}, verbose=True)
    assert k2.from_cache and k2.cubin == k.cubin


def test_options_keep_ieee_float32() -> None:
    """The options compile_kernel hands NVRTC keep IEEE float32: the PTX they give has no flush-to-zero, no
    contracted FMA and no approximate arithmetic, and the score arithmetic rounds to nearest."""
    from cuda.bindings import nvrtc
    from cuda.core import ProgramOptions
    from flashtrie.gpu_impl import compile as c

    opts = c._options("sm_90", {"FT_THREADS": "512"}, False)
    assert opts["ftz"] is False and opts["fma"] is False and opts["use_fast_math"] is False
    assert opts["prec_div"] is True and opts["prec_sqrt"] is True
    args = ProgramOptions(name="search", include_path=c._include_paths(), **opts).as_bytes("nvrtc")
    err, prog = nvrtc.nvrtcCreateProgram((c.KERNEL_DIR / "search.cu").read_bytes(), b"search.cu", 0, [], [])
    assert int(err) == 0
    assert int(nvrtc.nvrtcCompileProgram(prog, len(args), args)[0]) == 0
    err, size = nvrtc.nvrtcGetPTXSize(prog)
    buf = b" " * size
    assert int(nvrtc.nvrtcGetPTX(prog, buf)[0]) == 0
    nvrtc.nvrtcDestroyProgram(prog)
    ptx = buf.decode()
    assert ".ftz" not in ptx and "fma.rn.f32" not in ptx and "approx" not in ptx
    assert "add.rn.f32" in ptx and "mul.rn.f32" in ptx


def test_damaged_cache_entry_is_compiled_again(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FLASHTRIE_CACHE", str(tmp_path))
    k = compile_kernel("search.cu", "sm_90", {"FT_THREADS": "512"})
    assert k.cache_path is not None and not k.from_cache
    k.cache_path.write_bytes(b"not a cubin")
    k2 = compile_kernel("search.cu", "sm_90", {"FT_THREADS": "512"})
    assert not k2.from_cache and k2.cubin == k.cubin and k.cache_path.read_bytes() == k.cubin
