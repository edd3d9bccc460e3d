"""`gpu_impl/scale_stages.py` (the stages of device_scale.sh) on a small library, on the CPU."""

from __future__ import annotations

import numpy as np
import pytest
from flashtrie.datasets import load_keywords, load_workload
from flashtrie.gpu_impl import scale_report, scale_stages
from flashtrie.harness.records import Record, append_records, read_records

from flashtrie import NarrowLoudsIndex


def test_stages_write_records_and_files(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    out, d = str(tmp_path / "scale.jsonl"), str(tmp_path / "data")
    common = ["--n", "20k", "--dir", d, "--out", out]
    for stage in ("gen", "queries"):
        assert scale_stages.main([stage, *common]) == 0
    assert scale_stages.main(["build", *common, "--builder", "cpu"]) == 0
    assert scale_stages.main(["fail", *common, "--failed", "check", "--message", "timed out after 5 s"]) == 0
    recs = read_records(out)
    stages = [r.config["stage"] for r in recs]
    assert stages == ["generate keywords", "save keywords", "load keywords", "generate 16 queries",
                      "load keywords", "build", "save index", "check"]
    assert all(r.kind == "build" and r.sweep == "scale" and r.workload["N"] == 20_000 for r in recs)
    assert all(r.metrics["peak_rss_bytes"] > 0 and r.env.get("python") for r in recs)
    build = recs[stages.index("build")]
    assert build.backend == "cpu" and [s for s, _ in build.metrics["stages"]] == ["sort+trie", "order", "arrays"]
    assert recs[-1].status == "error" and recs[-1].message == "timed out after 5 s"
    ks = load_keywords(f"{d}/kw.npz").keywords
    assert len(ks) == 20_000 and load_workload(f"{d}/q.npz").proposals.shape == (16, 8, 1000)
    built = NarrowLoudsIndex.load(f"{d}/kw.ftrie")
    ref = NarrowLoudsIndex.build(ks)
    assert all(np.array_equal(built.arrays[k], ref.arrays[k]) for k in ref.arrays)
    capsys.readouterr()
    assert scale_stages.main(["table", "--out", out]) == 0
    table = capsys.readouterr().out
    assert "generate keywords" in table and "error" in table and "sort+trie " in table


def test_counts() -> None:
    assert scale_stages._count("800M") == 800_000_000 and scale_stages._count("10k") == 10_000
    assert scale_stages._count("1234") == 1234


def _stage(stage: str, n: int, seconds: float, *, rss: float = 1e9, status: str = "ok", message: str | None = None,
           **metrics: object) -> Record:
    env = {"cpu": "Test CPU", "cpu_cores": 16, "ram_bytes": 128 * 2**30, "git": {"commit": "59cae3b", "dirty": False},
           "gpus": [{"name": "Test GPU", "driver_release": "580.1", "driver": "13.0", "memory_bytes": 2**37}],
           "packages": {"numpy": "2.5.2"}, "hostname": "vm"}
    cmd = ["python", "-m", "flashtrie.gpu_impl.scale_stages", "build", "--n", str(n)]
    return Record(kind="build", backend="host", status=status, message=message, sweep="scale", workload={"N": n},
                  config={"stage": stage}, metrics={"seconds": seconds, "peak_rss_bytes": int(rss), **metrics},
                  env=env, command=cmd, run_id="r1", timestamp="2026-12-01T13:00:00Z")


def _latency(n: int, beam: int, p99: float) -> Record:
    return Record(kind="latency", backend="gpu", sweep="beam_width", workload={"library_size": n},
                  config={"beam_width": beam, "batch_size": 1}, command=["flashtrie", "bench", "beam"],
                  metrics={"mean_ms": p99 / 2, "per_query_ms": p99 / 2, "p99_ms": p99, "device_mean_ms": 0.1,
                           "device_p99_ms": 0.2, "samples": 160}, run_id="r2", timestamp="2026-12-01T13:01:00Z")


def _synthetic(tmp_path) -> str:
    m = 800_000_000
    recs = [
        _stage("generate keywords", m, 100.0, bytes=10**9, gb_per_s=0.01),
        _stage("build", m, 50.0, rss=70e9, stages=[["sort", 20.0], ["arrays", 30.0]],
               num_nodes=9, num_unique=4 * m // 5),
        _stage("save index", m, 5.0, bytes=3 * m, array_bytes={"keyword_ids.words": m, "labels_lo": 2 * m}),
        _stage("generate 16 queries", m, 20.0, K=1000, queries=16),
        _stage("load index (verify)", 10**7, 0.1, bytes=3 * 10**8, gb_per_s=3.0),
        _stage("upload (GpuSearcher)", 10**7, 2.5, bytes=10**7, gb_per_s=0.004),
        _latency(m, 1000, 0.9), _latency(m, 10, 5.0),
    ]
    path = tmp_path / "scale.jsonl"
    append_records(path, recs)
    return str(path)


def test_render_tables_and_bars(tmp_path) -> None:
    out = tmp_path / "report"
    assert scale_stages.main(["render", _synthetic(tmp_path), "--out", str(out), "--commit", "a11aecc"]) == 0
    text = (out / "report.md").read_text()
    rows = {r[0]: r for r in scale_report.bar_rows(read_records(tmp_path / "scale.jsonl"))}
    verdicts = {name: row[2] for name, row in rows.items()}
    assert list(verdicts.values()) == ["missed", "met", "met", "not measured", "met", "met", "met"]
    assert "peak host RSS 70.0 GB" in rows[scale_report.BARS[0].name][1]  # in time, not in memory: missed
    assert rows[scale_report.BARS[1].name][1].startswith("2.00 B per input keyword")  # the map left out
    assert "2.50 per distinct keyword" in rows[scale_report.BARS[1].name][1]
    assert rows[scale_report.BARS[3].name][3] == "at 10M: 2.5 s"
    assert "`a11aecc` (given by hand" in text and "`59cae3b`" in text
    assert "## Stages at 800M keywords (800,000,000)" in text and "## Stages at 10M keywords" in text
    assert "| build | build | host | 50 | 70.0 |" in text
    assert "| sort | 20 | 40 % |" in text and "| arrays | 30 | 60 % |" in text
    assert "| keyword_ids.words | 800,000,000 | 1.000 |" in text
    assert "| gpu | 1,000 | 1 | 0.45 | 0.45 | 0.9 | 0.1 | 0.2 | 160 | ok |" in text
    assert "| Test GPU (128 GiB" in text and "580.1" in text and "16 cores" in text and "numpy 2.5.2" in text
    assert (out / "stages_800M.png").stat().st_size > 0


def test_render_bars_missed_and_unmeasured(tmp_path) -> None:
    m = 800_000_000
    recs = [_stage("generate keywords", m, 130.0), _stage("build", m, 61.0, rss=10e9),
            _stage("generate 16 queries", m, 0.0, status="error", message="timed out after 100 s"),
            _latency(m, 1000, 1.5)]
    verdicts = [row[2] for row in scale_report.bar_rows(recs)]
    assert verdicts == ["missed", "not measured", "not measured", "not measured", "missed", "missed", "missed"]
    assert scale_report.bar_rows(recs)[4][1] == "error: timed out after 100 s"
    assert scale_report.bar_rows([])[0][1:3] == ["not measured in this run", "not measured"]
