"""The GPU machine's probes, suites of the lab (`flashtrie.harness.launch_probe`, `step_probe`), on the CPU: each
parses its options, and the parts that need no GPU (packing a launch's parameters as the stepper does, swapping a
kernel source) work."""

from __future__ import annotations

import ctypes

import pytest
from flashtrie.gpu_impl import launch
from flashtrie.gpu_impl.layout import KERNEL_PARAMS, STEP_ROWS
from flashtrie.gpu_impl.step_launch import MASK, TABLES, head
from flashtrie.harness import launch_probe, step_probe


def test_step_probe_options(capsys: pytest.CaptureFixture[str]) -> None:
    a = step_probe._parse(["--out", "r.jsonl", "--variants", "b=FT_STEP_CHUNK=1024"])
    assert (a.out, a.case, a.shape, a.variants, a.ncu) == ("r.jsonl", "fixed:20M:32768", "2x70",
                                                          "b=FT_STEP_CHUNK=1024", False)
    assert step_probe._parse(["--ncu", "--index", "x.fti"]).ncu  # ncu's launches need no records file
    with pytest.raises(SystemExit) as e:
        step_probe._parse(["--shape", "2x70"])
    assert e.value.code == 2 and "--out: a records file is needed (unless --ncu)" in capsys.readouterr().err


def test_launch_probe_options(capsys: pytest.CaptureFixture[str]) -> None:
    a = launch_probe.parse(["--out", "r.jsonl", "--rows", "16", "--calls", "7"])
    assert (a.out, a.rows, a.calls, a.vocab, a.keywords) == ("r.jsonl", 16, 7, 32_768, 200_000)
    with pytest.raises(SystemExit) as e:
        launch_probe.parse(["--out", "r.jsonl", "--rows", "0"])
    assert e.value.code == 2 and "--rows: expected a positive count, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        launch_probe.parse(["--rows", "16"])
    assert e.value.code == 2 and "--out" in capsys.readouterr().err


def test_launch_probe_packs_the_fused_launch_as_the_kernel_takes_it() -> None:
    probe = launch_probe
    fused = KERNEL_PARAMS[probe.FUSED]
    rows = probe.fused_rows(1, 2, 3, 4, 5, 6, n=140)
    assert len(rows) == STEP_ROWS.size
    tables = TABLES(fc=7, rt=8, fc_n=9, rt_n=10)
    mask = MASK(outf=11, outb=0, dead_count=12, V=32_768, row_stride=32_768, parts=2, extra=3, flags=0)
    params = head(99, tables) + rows + mask
    assert params == fused.pack(view=99, T=tables, r=rows, m=mask) and len(params) == fused.size
    field = {n: int.from_bytes(rows[off:off + 8], "little") for n, off in STEP_ROWS.offsets.items()}
    assert [field[n] for n in ("node_in", "off_in", "node_out", "off_out", "tok", "eos", "tok_stride")] \
        == [1, 2, 3, 4, 5, 6, 1]
    assert field["n"] & 0xFFFF_FFFF == 140 and field["ids"] == 0  # fields the fused kernel does not read: 0
    ptrs = probe.param_pointers(4096)
    assert [ptrs[i] for i in range(len(ptrs))] == [4096 + off for off in fused.offsets]
    assert ctypes.sizeof(ptrs) == 8 * len(fused.params)


def test_launch_probe_timing_counts_its_calls() -> None:
    probe = launch_probe
    calls, syncs = [], []
    med, p90 = probe.timed(lambda: calls.append(1), 450, lambda: syncs.append(1), every=200)
    assert len(calls) == 50 + 450 and len(syncs) == 1 + 2 + 1 and 0 <= med <= p90


def test_step_probe_swaps_the_kernel_source_only_within(monkeypatch: pytest.MonkeyPatch) -> None:
    probe = step_probe
    seen: list[tuple] = []
    monkeypatch.setattr(launch, "compile_kernel", lambda *a, **k: seen.append(a))
    real, loaded = launch.compile_kernel, launch._LOADED
    with probe.compiled_from("step_b.cu"):
        assert launch._LOADED == {} and launch._LOADED is not loaded
        launch.compile_kernel("step.cu", "sm_90", {"X": "1"})
    with probe.compiled_from(None):
        launch.compile_kernel("step.cu", "sm_90", {})
    assert seen == [("step_b.cu", "sm_90", {"X": "1"}), ("step.cu", "sm_90", {})]
    assert launch.compile_kernel is real and launch._LOADED is loaded
