"""CI (no GPU needed): every entry point of kernels/step.cu compiles without spills or a stack frame."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # kernels compiled or emulated: minutes on two cores

pytest.importorskip("cuda.core")
pytest.importorskip("cuda.bindings.nvrtc")

from flashtrie.gpu_impl.compile import compile_kernel, spill_report  # noqa: E402

ENTRIES = ["ft_step_advance", "ft_step_walk", "ft_step_mask", "ft_step_advance_mask", "ft_step_walk_mask",
           "ft_step_count", "ft_step_fill", "ft_step_root_table", "ft_step_child_table"]


@pytest.mark.parametrize(("arch", "extra"), [("sm_75", {}), ("sm_80", {}), ("sm_90", {})])
def test_every_step_kernel_compiles_without_spills(arch: str, extra: dict[str, str], tmp_path, monkeypatch) -> None:
    try:
        from cuda.bindings import nvrtc

        if int(nvrtc.nvrtcVersion()[0]) != 0:
            pytest.skip("NVRTC library not installed")
    except Exception:
        pytest.skip("NVRTC library not installed")
    monkeypatch.setenv("FLASHTRIE_CACHE", str(tmp_path))
    report = spill_report(compile_kernel("step.cu", arch, {"FT_STEP_THREADS": "256", **extra}, verbose=True).log)
    for entry in ENTRIES:
        r = report[entry]
        assert r.get("spill_stores", 0) == 0 and r.get("stack", 0) == 0, (entry, r)
        assert 0 < r["registers"] <= 64, (entry, r)


def test_stepper_refuses_defines_the_host_would_not_follow() -> None:
    """Checked before any device work: FT_STEP_CHUNK (the host cuts chunks by `chunk`), unknown macros, threads."""
    from flashtrie.gpu_impl.stepwise import GpuTrieStepper

    from flashtrie import InputError, KeywordSet, NarrowLoudsIndex

    index = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2], [3]]))
    for bad, match in (({"FT_STEP_CHUNK": "1024"}, "chunk="), ({"FT_STEP_CHUNKS": "1"}, "unknown macro"),
                       ({"FT_STEP_THREADS": "100"}, "multiple of 32"), ({"FT_STEP_THREADS": "1024"}, r"\[64, 512\]"),
                       ([("FT_STEP_TRACE", "1")], "dict")):
        with pytest.raises(InputError, match=match):
            GpuTrieStepper(index, defines=bad)
    for opt, bad in (("child_table", -1), ("root_table", -1), ("root_table", True), ("root_table", 2.0)):
        with pytest.raises(InputError, match=opt):
            GpuTrieStepper(index, **{opt: bad})
