"""What the benchmarks print says what they ran: the K used, repeated warm timings with their spread,
speed-ups as ``1.00x``, a labelled 1x line, and no figure left over from an earlier report."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flashtrie.harness.records import append_records
from flashtrie.harness.report import MANIFEST, build_report
from flashtrie.harness.runs import bench_table, demo_rows, pass_means, run_backends, speedup_text
from test_cli_io import _files
from test_harness import _record

from flashtrie import Proposals, SearchConfig, SearchResult
from flashtrie.cli import main


class _Counting:
    """A searcher that counts its calls and returns empty results."""

    def __init__(self) -> None:
        self.calls = 0

    def search(self, proposals: Proposals, config: SearchConfig) -> SearchResult:
        self.calls += 1
        return SearchResult.empty(proposals.num_queries, config.beam_width)


def test_timed_runs_warm_up_then_repeat_passes() -> None:
    props = Proposals(np.tile(np.arange(3), (4, 2, 1)), np.zeros((4, 2, 3), np.float32))
    s = _Counting()
    _, times = run_backends({"x": s}, props, SearchConfig(beam_width=2), timed=True, progress=False, warn=print,
                            stage=None, passes=3)  # type: ignore[arg-type]
    assert s.calls == 4 + 3 * 4 and len(times["x"]) == 12  # one untimed pass, then three timed ones
    assert pass_means([1, 3, 2, 2, 5, 7, 9], 2) == [2.0, 2.0, 6.0]  # whole passes only


def test_demo_rows_show_the_median_the_spread_and_the_ratio_of_medians() -> None:
    class Outcome:
        def __init__(self, name: str) -> None:
            self.name, self.status = name, "ok"

    report: Any = type("R", (), {"outcomes": [Outcome("numpy"), Outcome("marisa")], "reference": "numpy"})()
    times = {"marisa": [4.0, 4.0, 8.0, 8.0, 6.0, 6.0], "numpy": [1.0, 1.0, 3.0, 3.0, 2.0, 2.0]}
    rows = demo_rows(report, times, ["marisa", "numpy"], per_pass=2)
    assert rows[0][:5] == ("marisa", "6.000", "4.000-8.000", rows[0][3], "1.00x")
    assert rows[1][:3] == ("numpy", "2.000", "1.000-3.000") and rows[1][4] == "3.00x"


def test_demo_prints_its_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--keywords", "2000", "--queries", "2", "--beam", "4", "--repeats", "2", "--backends",
                 "numpy", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "1 warm-up pass, then 2 passes timed" in out and "min-max of 2 passes" in out and "K = 4" in out


def test_speedups_are_printed_as_two_decimals() -> None:
    assert [speedup_text(v) for v in (1, 0.5, 12.345, None, float("nan"))] == ["1.00x", "0.50x", "12.35x", "-", "-"]
    lines = bench_table([_record(config={"beam_width": 16, "batch_size": 1, "K": 8}),
                         _record(kind="build", backend="narrow-louds", config={"num_keywords": 10},
                                 metrics={"build_s": 0.5, "build_speedup_vs_marisa": 2.0})])
    head = lines[0].split()
    assert head[:6] == ["kind", "backend", "keywords", "beam", "K", "batch"]
    assert lines[2].split()[3:6] == ["16", "8", "1"] and "3.00x" in lines[2] and "2.00x" in lines[3]


def test_bench_and_parity_print_the_k_they_used(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = _files(tmp_path)  # K = 8 proposals per step
    assert main(["bench", "beam", "--index", str(f["idx"]), "--queries", str(f["q"]), "--beams", "2,16",
                 "--backends", "numpy", "--repeats", "1", "--warmup", "0", "-o", str(tmp_path / "b.jsonl"),
                 "--quiet"]) == 0
    rows = [ln.split() for ln in capsys.readouterr().out.splitlines()[2:]]
    assert [(r[3], r[4]) for r in rows] == [("2", "2"), ("16", "8")]
    assert main(["parity", "--keywords", str(f["kw"]), "--index", str(f["idx"]), "--queries", str(f["q"]), "--beam",
                 "4", "--backends", "numpy,marisa", "--quiet"]) == 0
    assert "K = 4 proposals per step" in capsys.readouterr().out


def _beam_records() -> list[Any]:
    recs = []
    for b in (1, 10):
        for name, ms in (("marisa", 2.0), ("numpy", 1.0)):
            recs.append(_record(backend=name, config={"beam_width": b, "batch_size": 1, "K": b},
                                metrics={"mean_ms": ms, "median_ms": ms, "p99_ms": ms, "speedup_vs_marisa": 2.0 / ms}))
    return recs


def test_report_speedups_and_the_labelled_baseline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flashtrie.harness import plots

    drawn: dict[str, Any] = {}
    save = plots.save_figure

    def keep(fig: Any, out_dir: Path, name: str, **kw: Any) -> list[Path]:
        drawn[name] = fig
        return save(fig, out_dir, name, **kw)

    monkeypatch.setattr(plots, "save_figure", keep)
    src = tmp_path / "r.jsonl"
    append_records(src, _beam_records())
    md = build_report([src], tmp_path / "rep").read_text()
    assert re.search(r"\| 2\.00x \|", md) and re.search(r"\| 1\.00x \|", md)
    texts = [t.get_text() for ax in drawn["speedup_vs_beam"].axes for t in ax.texts]
    assert "1x = baseline (marisa)" in texts


def test_a_rewritten_report_leaves_no_stale_figure(tmp_path: Path) -> None:
    beam, build = tmp_path / "beam.jsonl", tmp_path / "build.jsonl"
    append_records(beam, _beam_records())
    append_records(build, [_record(kind="build", backend=n, sweep="build", config={"num_keywords": 100},
                                   metrics={"build_s": s, "bytes": 700}) for n, s in (("narrow-louds", 1.0),
                                                                                      ("marisa-trie", 2.0))])
    out = tmp_path / "rep"
    build_report([beam], out)
    assert (out / "speedup_vs_beam.png").exists() and (out / MANIFEST).exists()
    (out / "mine.png").write_bytes(b"a file the report did not write")
    build_report([build], out)
    assert sorted(p.name for p in out.glob("*.png")) == ["build_vs_marisa.png", "mine.png"]
    assert not (out / "latency_vs_beam.svg").exists()


def test_a_report_folder_from_before_manifests_loses_only_its_figures(tmp_path: Path) -> None:
    src = tmp_path / "build.jsonl"
    append_records(src, [_record(kind="build", backend="narrow-louds", sweep="build", config={"num_keywords": 100},
                                 metrics={"build_s": 1.0, "bytes": 700})])
    out = tmp_path / "rep"
    out.mkdir()
    for name in ("report.md", "latency_vs_beam.png", "latency_vs_beam.svg", "mine.svg"):
        (out / name).write_text("old")
    build_report([src], out)
    assert not (out / "latency_vs_beam.png").exists() and not (out / "latency_vs_beam.svg").exists()
    assert (out / "mine.svg").read_text() == "old" and (out / "build_vs_marisa.png").exists()
