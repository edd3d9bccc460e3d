"""`gpu_impl/scale_stages.py` (the stages of device_scale.sh) on a small library, on the CPU."""

from __future__ import annotations

import numpy as np
import pytest
from flashtrie.datasets import load_keywords, load_workload
from flashtrie.gpu_impl import scale_stages
from flashtrie.harness.records import read_records

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
