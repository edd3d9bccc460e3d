"""CI (no GPU needed): every kernel compiles with NVRTC from the pip wheels, with no local-memory spills."""

from __future__ import annotations

import pytest

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
    """No fast-math / FTZ / FMA contraction reaches NVRTC, and the kernel adds and multiplies with _rn."""
    from flashtrie.gpu_impl import compile as c

    assert "fma=false" in c._FIXED_OPTIONS and "ftz=false" in c._FIXED_OPTIONS
    src = (c.KERNEL_DIR / "search.cu").read_text()
    assert "__fadd_rn(s_h, l)" in src and "__fmul_rn(s, " in src
    assert "use_fast_math" not in src
