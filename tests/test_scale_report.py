"""`harness/scale/report.py` on synthetic records: every section, the verdicts computed from the numbers."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from flashtrie.harness.records import Record, append_records, read_records
from flashtrie.harness.scale import plots as scale_plots
from flashtrie.harness.scale import report as scale_report
from flashtrie.harness.scale import stages as scale_stages
from flashtrie.harness.scale.targets import load_targets, target_rows

M = 800_000_000
#: the targets the 800M report judges, kept beside it
TARGETS_FILE = Path(__file__).resolve().parents[1] / "reports" / "h200-800m" / "targets.toml"
TARGETS = load_targets(TARGETS_FILE)
ENV = {"cpu": "Test CPU", "cpu_cores": 16, "ram_bytes": 128 * 2**30, "git": {"commit": "59cae3b", "dirty": False},
       "gpus": [{"name": "Test GPU", "driver_release": "580.1", "driver": "13.0", "memory_bytes": 2**37}],
       "packages": {"numpy": "2.5.2"}, "hostname": "vm", "scale_command": "N=800M SIZES='1M' bash device_scale.sh"}


def _stage(stage: str, n: int, seconds: float, *, rss: float = 1e9, status: str = "ok", message: str | None = None,
           backend: str = "host", process: str = "prepare", **metrics: object) -> Record:
    cmd = ["python", "-m", "flashtrie.harness.scale", process, "--n", str(n)]
    return Record(kind="build", backend=backend, status=status, message=message, sweep="scale", workload={"N": n},
                  config={"stage": stage}, metrics={"seconds": seconds, "peak_rss_bytes": int(rss),
                                                    "rss_scope": "stage", **metrics},
                  env=ENV, command=cmd, run_id="r1", timestamp="2026-12-01T13:00:00Z")


def _latency(n: int, beam: int, p99: float, *, backend: str = "gpu", batch: int = 1, status: str = "ok") -> Record:
    return Record(kind="latency", backend=backend, sweep="beam_width", workload={"num_keywords": n}, status=status,
                  message="no GPU" if status == "skipped" else None,
                  config={"beam_width": beam, "batch_size": batch, "K": beam},
                  command=["python", "-m", "flashtrie.harness.scale", "serve"],
                  metrics={"mean_ms": p99 / 2, "median_ms": p99 / 3, "per_query_ms": p99 / 2 / batch, "p99_ms": p99,
                           "device_mean_ms": 0.1, "device_median_ms": 0.09, "device_p99_ms": 0.2, "samples": 160}
                  if status == "ok" else {}, run_id="r2", timestamp="2026-12-01T13:01:00Z")


def _synthetic() -> list[Record]:
    return [
        _stage("generate keywords", M, 100.0, bytes=10**9, gb_per_s=0.01, backend="datasets"),
        _stage("build", M, 50.0, rss=70e9, stages=[["sort", 20.0], ["arrays", 30.0]], num_nodes=9,
               num_unique=4 * M // 5, backend="gpu"),
        _stage("save index", M, 5.0, bytes=3 * M, array_bytes={"keyword_ids.words": M, "labels_lo": 2 * M}),
        _stage("generate 16 queries", M, 20.0, K=1000, queries=16, backend="datasets",
               split={"library passes": 15.0, "queries": 5.0}),
        _stage("load index (verify)", 10**7, 0.1, bytes=3 * 10**8, gb_per_s=3.0, process="serve"),
        _stage("upload (GpuSearcher)", 10**7, 2.5, bytes=10**7, gb_per_s=0.004, process="serve", backend="gpu",
               upload_seconds=0.5, index_bytes=10**7, copy_bytes=10**7, copy_seconds=0.25, copy_gb_per_s=0.04,
               derive_flags_seconds=0.01),
        _stage("index size vs marisa-trie", 10**7, 9.0, backend="marisa-trie", unique_keywords=10**7,
               ours_bytes=7 * 10**7, ours_map_bytes=3 * 10**7, ours_no_map_bytes=4 * 10**7, marisa_bytes=5 * 10**7,
               marisa_map_bytes=3 * 10**7),
        _latency(M, 1000, 0.9), _latency(M, 10, 5.0), _latency(M, 1000, 1.2, batch=8),
        _latency(10**6, 1000, 0.3), _latency(10**6, 1000, 6.0, backend="numpy"),
        _latency(10**7, 1000, 0.4), _latency(10**7, 1000, 30.0, backend="marisa"),
    ]


def _render(tmp_path, recs: list[Record], *extra: str) -> str:
    path = tmp_path / "scale.jsonl"
    append_records(path, recs)
    out = tmp_path / "report"
    assert scale_stages.main(["render", str(path), "--out", str(out), *extra]) == 0
    return (out / "report.md").read_text()


def test_every_section_and_its_numbers(tmp_path) -> None:
    text = _render(tmp_path, _synthetic(), "--commit", "a11aecc")
    for head in ("## Provenance", "## Environment", "## Targets", "## Latency vs library size",
                 "## Search at 800M keywords: p50 / p99", "## Upload (GpuSearcher): host-to-device bandwidth",
                 "## Index size vs marisa-trie", "## Stages at 800M keywords (800,000,000)",
                 "## Stages at 10M keywords", "## Search latency at 1M keywords"):
        assert head in text, head
    assert "`a11aecc` (given by hand" in text and "`59cae3b`" in text and "N=800M SIZES='1M' bash" in text
    assert "| build | prepare | gpu | 50 | 70.0 |" in text
    assert "| sort | 20 | 40 % |" in text and "| arrays | 30 | 60 % |" in text
    assert "| keyword_ids.words | 800,000,000 | 1.000 |" in text
    assert "Query generation by step (generate 16 queries):" in text and "| library passes | 15 | 75 % |" in text
    assert "| Test GPU (128 GiB" in text and "580.1" in text and "16 cores" in text and "numpy 2.5.2" in text
    # p50 / p99 at the largest size, GPU first, by batch then beam
    assert "| gpu | 10 | 1 | 1.667 | 2.5 | 5 | 0.09 | 0.2 | 160 | ok |" in text
    assert text.index("| gpu | 1,000 | 1 | 0.3 |") < text.index("| gpu | 1,000 | 8 | 0.4 |")
    # the curve's numbers: mean / p99 per backend and beam at each size
    assert "| backend | beam | 1M: mean / p99 ms | 10M: mean / p99 ms | 800M: mean / p99 ms |" in text
    assert "| gpu | 1,000 | 0.15 / 0.3 | 0.2 / 0.4 | 0.45 / 0.9 |" in text
    assert "| numpy | 1,000 | 3 / 6 | – | – |" in text and "| marisa | 1,000 | – | 15 / 30 | – |" in text
    assert "| 10M | 10,000,000 | 10,000,000 | 0.25 | 0.04 | 0.01 | 0.5 | 2.5 | ok |" in text
    # marisa ratios: 4e7 / 5e7 without maps, 7e7 / 8e7 with them
    assert "| 10M | 10,000,000 | 40,000,000 (4.00 B) | 50,000,000 (5.00 B) | 0.800 | 70,000,000 (7.00 B) | " \
           "80,000,000 (8.00 B) | 0.875 | ok |" in text
    for fig in ("latency_vs_size.png", "latency_vs_size.svg", "stages_800M.png"):
        assert (tmp_path / "report" / fig).stat().st_size > 0
    assert "![latency vs library size](latency_vs_size.png)" in text


def test_verdicts_from_the_numbers(tmp_path) -> None:
    recs = _synthetic()
    rows = {r[0]: r for r in target_rows(recs, TARGETS)}
    verdicts = [row[2] for row in rows.values()]
    assert verdicts == ["missed", "met", "met", "not measured", "met", "met", "met"]
    assert "peak host RSS 70.0 GB" in rows[TARGETS[0].name][1]  # in time, not in memory: missed
    assert rows[TARGETS[1].name][1].startswith("2.00 B per input keyword")  # the map left out
    assert "2.50 per distinct keyword" in rows[TARGETS[1].name][1]
    assert rows[TARGETS[3].name][3] == "at 10M: 0.5 s"  # the upload's own seconds, not GpuSearcher()'s
    recs.append(_stage("upload (GpuSearcher)", M, 4.0, upload_seconds=2.9, copy_gb_per_s=1.5, backend="gpu"))
    assert target_rows(recs, TARGETS)[3][1:3] == ["2.9 s at 800M (the upload, 1.5 GB/s host to device)", "met"]
    recs.append(_stage("upload (GpuSearcher)", M, 4.0, upload_seconds=3.1, backend="gpu"))
    assert target_rows(recs, TARGETS)[3][2] == "missed"


def test_bars_missed_skipped_and_unmeasured() -> None:
    recs = [_stage("generate keywords", M, 130.0), _stage("build", M, 61.0, rss=10e9),
            _stage("generate 16 queries", M, 0.0, status="error", message="timed out: ran past its limit"),
            _stage("upload (GpuSearcher)", M, 0.0, status="skipped", message="no GPU (none visible)"),
            _latency(M, 1000, 1.5)]
    rows = target_rows(recs, TARGETS)
    assert [row[2] for row in rows] == ["missed", "not measured", "not measured", "not measured", "missed",
                                        "missed", "missed"]
    assert rows[3][3] == "skipped: no GPU (none visible)"
    assert rows[4][1] == "error: timed out: ran past its limit"
    assert target_rows([], TARGETS)[0][1:3] == ["not measured in this run", "not measured"]
    skipped = [_latency(M, 1000, 0.0, status="skipped")]
    assert target_rows(skipped, TARGETS)[6][1:4] == ["not measured in this run", "not measured", "skipped: no GPU"]


def test_renders_without_latency_or_gpu(tmp_path) -> None:
    text = _render(tmp_path, [_stage("generate keywords", 10**6, 1.0),
                              _stage("upload (GpuSearcher)", 10**6, 0.0, status="skipped", message="no GPU (x)")])
    assert "No latency record is ok in these records." in text and "| 1M | – |" in text
    assert "skipped: no GPU (x)" in text and not (tmp_path / "report" / "latency_vs_size.png").exists()


def test_curve_series_and_ticks() -> None:
    recs = _synthetic() + [_latency(M, 1000, 0.7)]  # a later record of a point replaces the earlier one
    series = scale_plots.curve_series(recs, "p99_ms")
    assert list(series) == [("gpu", 10), ("gpu", 1000), ("numpy", 1000), ("marisa", 1000)]
    assert series[("gpu", 1000)] == [(10**6, 0.3), (10**7, 0.4), (M, 0.7)]
    assert scale_plots.ticks_125(0.3, 40.0) == [0.5, 1.0, 2.0, 5.0, 10.0, 20.0]
    assert scale_plots.ticks_125(0.31, 0.35) == [0.2, 0.5]
    assert scale_report.size_of(read_records_roundtrip(recs)[0]) == M


def read_records_roundtrip(recs: list[Record]) -> list[Record]:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        append_records(f"{d}/r.jsonl", recs)
        return read_records(f"{d}/r.jsonl")


@pytest.mark.slow
def test_load_split_warmup_and_gpu_numpy_checks(tmp_path) -> None:
    """The verified load's seconds per check, the GPU builder's warm-up as its own stage beside the build, and
    GPU == numpy per size with the numpy reference's decode mode, set-up and each side's search seconds."""
    recs = _synthetic() + [
        _stage("GPU builder warm-up", 10**6, 21.5, backend="gpu", keywords=20_000),
        _stage("build", 10**6, 0.4, backend="gpu", stages=[["sort", 0.4]], num_nodes=9, num_unique=10**6),
        _stage("load index (verify)", M, 10.0, bytes=5 * 10**9, gb_per_s=0.5, process="serve",
               split={"header and table": 0.5, "cheap checks": 1.5, "checksums": 2.0, "louds pass": 6.0}),
        _stage("numpy searcher", 10**6, 0.3, rss=0.4e9, backend="numpy", process="serve", decode="eager", nodes=9),
        _stage("GPU == numpy", 10**6, 0.1, backend="gpu", process="serve", queries=4, beams=[10, 1000],
               numpy_decode="eager", gpu_search_seconds=0.01, numpy_search_seconds=0.08),
        _stage("numpy searcher", M, 0.001, rss=0.2e9, backend="numpy", process="serve", decode="lazy", nodes=9),
        _stage("GPU == numpy", M, 12.5, backend="gpu", process="serve", queries=4, beams=[10, 1000],
               numpy_decode="lazy", gpu_search_seconds=0.02, numpy_search_seconds=12.4, status="mismatch",
               message="beam 10: query 1"),
    ]
    text = _render(tmp_path, recs)
    assert "Verified load by check (load index (verify)):" in text
    assert "| check | seconds | of the stage |" in text and "| louds pass | 6 | 60 % |" in text
    assert "| GPU builder warm-up | prepare | gpu | 21.5 |" in text and "| build | prepare | gpu | 0.4 |" in text
    head = text.index("## GPU == numpy (bit for bit, the numpy reference)")
    section = text[head : text.index("\n## ", head + 1)]
    assert "| 1M | eager | 0.3 | 0.4 | 4 | 10, 1000 | 0.01 | 0.08 | 0.1 | ok |" in section
    assert "| 800M | lazy | 0.001 | 0.2 | 4 | 10, 1000 | 0.02 | 12.4 | 12.5 | mismatch: beam 10: query 1 |" in section
    assert section.index("| 1M |") < section.index("| 800M |")
    assert target_rows(recs, TARGETS)[0][1].startswith("50 s at 800M")  # the build bar: the build, not the warm-up
    assert "No check in these records." in _render(tmp_path / "none", _synthetic())


def test_targets_are_data_beside_the_report_or_its_records(tmp_path) -> None:
    assert [t.name for t in TARGETS][0] == "build ≤ 60 s at 800M within 64 GB of host memory"
    recs = _synthetic()
    bare = _render(tmp_path / "bare", recs)
    assert "No `targets.toml` beside this report or its records: no verdicts." in bare
    (tmp_path / "beside").mkdir()
    shutil.copy(TARGETS_FILE, tmp_path / "beside" / "targets.toml")
    text = _render(tmp_path / "beside", recs)
    assert "From the `targets.toml` beside the records." in text and f"| {TARGETS[1].name} | 2.00 B" in text
    (tmp_path / "beside" / "targets.toml").write_text("n = 800_000_000\n[[target]]\nmeasure = 'upload'\nlimit = 0.5\n")
    assert "| upload (GpuSearcher) ≤ 0.5 s at 800M |" in _render(tmp_path / "beside", recs)


@pytest.mark.parametrize(("text", "says"), [
    ("[[target]]\nmeasure = 'build'\nlimit = 1\n", "n = None"),
    ("n = 10\n[[target]]\nmeasure = 'speed'\nlimit = 1\n", "target 0: measure 'speed'"),
    ("n = [", "not a readable targets file"),
])
def test_a_malformed_targets_file_is_refused_naming_it(tmp_path, text: str, says: str) -> None:
    from flashtrie.errors import InputError

    (tmp_path / "targets.toml").write_text(text)
    with pytest.raises(InputError, match=says):
        load_targets(tmp_path / "targets.toml")
