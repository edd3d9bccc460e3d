"""`harness/scale/stages.py` (the steps of `flashtrie bench scale`) on small libraries, on the CPU: the records they
write, the skipped GPU steps without a GPU, the time limits and the failure records."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from flashtrie.datasets import load_keywords, load_workload
from flashtrie.harness import timing
from flashtrie.harness.records import read_records
from flashtrie.harness.scale import serve as scale_serve
from flashtrie.harness.scale import stages as scale_stages
from flashtrie.harness.scale.recorder import OutOfTime, Recorder

from flashtrie import NarrowLoudsIndex

#: One timed pass per case; a --max-seconds no machine's load reaches, so no case is skipped as over its budget
#: (with one pass it only sets that budget: a pass is never longer for it).
FAST = ["--repeats", "1", "--max-seconds", "1e6", "--warmup", "1", "--stats-queries", "1"]
NO_GPU = scale_serve.gpu_missing()


def _stages(out: str) -> list[str]:
    return [r.config["stage"] for r in read_records(out) if r.kind == "build"]


class _LoadedClock:
    """The clock of `harness.timing` on a machine so loaded that every timed call takes a second."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 1.0
        return self.now

    def perf_counter_ns(self) -> int:
        return round(self.perf_counter() * 1e9)


def test_prepare_and_serve_in_two_processes(tmp_path, monkeypatch) -> None:
    out, d = str(tmp_path / "scale.jsonl"), str(tmp_path / "n20k")
    common = ["--n", "20k", "--dir", d, "--out", out]
    assert scale_stages.main(["prepare", *common, "--builder", "cpu", "--save-keywords", "--marisa-size"]) == 0
    assert _stages(out) == ["generate keywords", "save keywords", "generate 16 queries", "build", "save index",
                            "index size vs marisa-trie"]
    recs = read_records(out)
    assert all(r.kind == "build" and r.sweep == "scale" and r.workload["N"] == 20_000 for r in recs)
    assert all(r.metrics["peak_rss_bytes"] > 0 and r.env.get("python") and r.command[3] == "prepare" for r in recs)
    build = recs[3]
    assert build.backend == "cpu" and [s for s, _ in build.metrics["stages"]] == ["sort+trie", "order", "arrays"]
    assert build.metrics["rss_scope"] in ("stage", "process") and build.metrics["num_unique"] <= 20_000
    size = recs[5].metrics
    assert size["ours_bytes"] == Path(d, "kw.ftrie").stat().st_size and size["ours_map_bytes"] > 0
    assert 0 < size["ours_no_map_bytes"] < size["ours_bytes"] and size["marisa_bytes"] > 0
    assert size["marisa_map_bytes"] == -(-size["unique_keywords"] * 15 // 8)  # 20k ids: 15 bits each
    assert size["ratio_without_map"] == pytest.approx(size["ours_no_map_bytes"] / size["marisa_bytes"], abs=1e-4)
    assert not Path(d, "marisa.trie").exists() and not Path(d, "kw_index_ids.ftrie").exists()
    ks = load_keywords(f"{d}/kw.npz").keywords
    assert len(ks) == 20_000 and load_workload(f"{d}/q.npz").proposals.shape == (16, 8, 1000)
    built, ref = NarrowLoudsIndex.load(f"{d}/kw.ftrie"), NarrowLoudsIndex.build(ks)
    assert all(np.array_equal(built.arrays[k], ref.arrays[k]) for k in ref.arrays)

    first = len(recs)
    monkeypatch.setattr(timing, "time", _LoadedClock())  # what it checks holds however slow the machine is
    rc = scale_stages.main(["serve", *common, "--cpu", "numpy,marisa", "--batches", "1,8", *FAST])
    assert rc == 0
    served = read_records(out)[first:]
    stages = [r.config["stage"] for r in served if r.kind == "build"]
    assert stages[0] == "load index (verify)" and stages[-3:] == ["marisa searcher", "bench batch 1 (marisa)",
                                                                   "marisa == numpy"]
    lat = [r for r in served if r.kind == "latency"]
    beams = [1, 10, 100, 500, 1000]
    for backend in ("numpy", "marisa"):
        got = sorted(r.config["beam_width"] for r in lat if r.backend == backend)
        assert got == beams and all(r.status == "ok" for r in lat if r.backend == backend)
    assert all(r.workload["num_keywords"] == 20_000 and r.config["K"] <= r.config["beam_width"] for r in lat)
    if NO_GPU:  # the GPU steps say why they did not run, and nothing crashed
        skipped = {r.config["stage"]: r for r in served if r.status == "skipped"}
        assert set(skipped) == {"upload (GpuSearcher)", "GPU == numpy", "bench batch 1 (gpu)", "bench batch 8 (gpu)"}
        assert all(r.message.startswith("no GPU") for r in skipped.values())
    else:
        batch8 = [r for r in lat if r.backend == "gpu" and r.config["batch_size"] == 8]
        assert sorted(r.config["beam_width"] for r in batch8) == beams


def test_single_step_processes_read_the_files_of_earlier_ones(tmp_path) -> None:
    out, d = str(tmp_path / "scale.jsonl"), str(tmp_path / "data")
    common = ["--n", "5k", "--dir", d, "--out", out]
    for process in ("gen", "queries", "build"):
        assert scale_stages.main([process, *common, "--builder", "cpu"]) == 0
    assert _stages(out) == ["generate keywords", "save keywords", "load keywords", "generate 16 queries",
                            "load keywords", "build", "save index"]
    assert scale_stages.main(["check", *common, "--check-queries", "2"]) == 0
    assert _stages(out)[7] == "load index (verify)"


def test_a_failed_step_is_recorded_and_the_rest_skipped(tmp_path) -> None:
    out, d = str(tmp_path / "scale.jsonl"), str(tmp_path / "empty")
    assert scale_stages.main(["serve", "--n", "1k", "--dir", d, "--out", out, "--cpu", "numpy"]) == 4
    recs = read_records(out)
    assert [(r.config["stage"], r.status) for r in recs] == [
        ("load", "error"), ("upload", "skipped"), ("bench", "skipped"), ("check", "skipped")]
    assert "FileNotFoundError" in recs[0].message and recs[1].message == "step load failed"
    assert not Path(d, "stage.json").exists()


def test_no_time_left_skips_every_step(tmp_path) -> None:
    out = str(tmp_path / "scale.jsonl")
    args = ["prepare", "--n", "1k", "--dir", str(tmp_path / "d"), "--out", out, "--deadline", str(time.time() - 1)]
    assert scale_stages.main(args) == scale_stages.EXIT_NO_TIME
    recs = read_records(out)
    assert [r.config["stage"] for r in recs] == ["gen", "queries", "warmup", "build"]
    assert all(r.status == "skipped" and "no time left" in r.message for r in recs)


def test_budget_arguments() -> None:
    assert scale_stages._budgets(["gen=10,build=20.5", "load=3"]) == {"gen": 10.0, "build": 20.5, "load": 3.0}
    with pytest.raises(SystemExit, match="--budget"):
        scale_stages._budgets(["generate=10"])
    assert scale_stages._count("800M") == 800_000_000 and scale_stages._count("10k") == 10_000


def test_span_records_an_error_and_raises(tmp_path) -> None:
    out, marker = str(tmp_path / "r.jsonl"), tmp_path / "stage.json"
    rec = Recorder(out, 1000, ["x"], marker=marker)
    with pytest.raises(ValueError, match="boom"):
        with rec.span("build", backend="cpu"):
            raise ValueError("boom")
    (r,) = read_records(out)
    assert (r.config["stage"], r.status, r.message, r.backend) == ("build", "error", "ValueError: boom", "cpu")
    assert json.loads(marker.read_text()) == {"stage": "build", "recorded": True}
    # the shell's fail step then adds nothing: the stage recorded its own failure
    assert "recorded its own failure" in rec.record_failure("prepare", "exit status 4")
    assert len(read_records(out)) == 1 and not marker.exists()


def test_fail_names_the_stage_in_progress(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    out, d = str(tmp_path / "r.jsonl"), tmp_path / "d"
    d.mkdir()
    (d / "stage.json").write_text(json.dumps({"stage": "build", "started": time.time() - 7, "recorded": False}))
    common = ["--n", "800M", "--dir", str(d), "--out", out]
    assert scale_stages.main(["fail", *common, "--failed", "prepare", "--message", "killed (exit status 137)"]) == 0
    assert scale_stages.main(["fail", *common, "--failed", "serve", "--message", "exit status 1"]) == 0
    first, second = read_records(out)
    assert (first.config["stage"], first.status) == ("build", "error") and first.metrics["seconds"] >= 7
    assert first.message == "process prepare: killed (exit status 137) in this stage"
    assert (second.config["stage"], second.message) == ("serve", "process serve: exit status 1 (between stages)")
    assert "in stage 'build' after" in capsys.readouterr().out


def test_budget_watchdog_records_the_open_stage(tmp_path) -> None:
    out = str(tmp_path / "r.jsonl")
    fired = threading.Event()
    codes: list[int] = []
    rec = Recorder(out, 1000, ["x"], budgets={"build": 1.2}, exit=lambda c: (codes.append(c), fired.set()))
    with rec.budget("build") as limit:
        assert limit == pytest.approx(1.2)
        with rec.span("build"):
            assert fired.wait(10)
    (r, done) = read_records(out)
    assert (r.status, codes) == ("error", [124]) and r.message == "timed out: ran past its limit (build), 1 s"
    assert done.status == "ok"  # (a real exit would have ended the process here)
    with pytest.raises(OutOfTime):
        with Recorder(out, 1000, ["x"], deadline=time.time() + 0.5).budget("gen"):
            pass


@pytest.mark.slow
def test_watchdog_ends_the_process_with_124(tmp_path) -> None:
    out, marker = tmp_path / "r.jsonl", tmp_path / "stage.json"
    code = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from flashtrie.harness.scale.recorder import Recorder
        rec = Recorder({str(out)!r}, 1000, ["x"], marker=Path({str(marker)!r}), budgets={{"gen": 1.0}})
        with rec.budget("gen"):
            with rec.span("generate keywords", backend="datasets"):
                time.sleep(30)
        """)
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 124 and time.perf_counter() - t0 < 25, res.stderr
    (r,) = read_records(out)
    assert (r.config["stage"], r.backend, r.status) == ("generate keywords", "datasets", "error")
    assert "timed out" in r.message and json.loads(marker.read_text())["recorded"] is True


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None, reason="needs bash and timeout")
def test_the_pipeline_at_a_tiny_size(tmp_path) -> None:
    """``flashtrie bench scale`` at 3k, 4k then 6k keywords, the CPU builder, marisa at 4k after N; it records,
    tabulates, renders, bundles."""
    res = subprocess.run([sys.executable, "-m", "flashtrie", "bench", "scale", "--out", str(tmp_path / "out"),
                          "--dir", str(tmp_path / "d"), "--n", "6k", "--sizes", "3k,4k", "--marisa-sizes", "",
                          "--marisa-last", "4k", "--marisa-size-n", "3k", "--numpy-sizes", "3k", "--builder", "cpu",
                          "--total", "300", "--reserve", "150", "--batches", "1", "--targets",
                          str(Path(__file__).resolve().parents[1] / "reports" / "h200-800m" / "targets.toml")],
                         capture_output=True, text=True,
                         timeout=280)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    recs = read_records(tmp_path / "out" / "scale.jsonl")
    sizes = {r.workload.get("N", r.workload.get("num_keywords")) for r in recs}
    assert sizes == {3000, 4000, 6000} and not any(r.status in ("error", "mismatch") for r in recs)
    assert any(r.config.get("stage") == "index size vs marisa-trie" for r in recs)
    checks = [r.workload["N"] for r in recs if r.config.get("stage") == "GPU == numpy"]
    assert checks == [3000, 4000, 6000]  # CHECK_SIZES=all (the default): every size
    assert {r.env.get("scale_command", "")[:27] for r in recs if r.kind == "build"} == {"flashtrie bench scale --out"}
    lat = [r for r in recs if r.kind == "latency" and r.status == "ok"]
    assert sorted({r.workload["num_keywords"] for r in lat if r.backend == "numpy"}) == [3000]
    assert sorted({r.workload["num_keywords"] for r in lat if r.backend == "marisa"}) == [4000]
    stages = [(r.workload.get("N"), r.config.get("stage")) for r in recs if r.kind == "build"]
    last_n = max(i for i, (n, _) in enumerate(stages) if n == 6000)
    late = stages[last_n + 1 :]  # after N, in the time it left
    assert {n for n, _ in late} == {4000} and late[0][1] == "load keywords" and late[-1][1] == "marisa == numpy"
    assert {"load index (verify)", "marisa searcher", "bench batch 1 (marisa)"} <= {st for _, st in late}
    ref = [r for r in recs if r.config.get("stage") == "numpy searcher"]
    assert ref and all(r.metrics["decode"] == "eager" for r in ref)
    loads = [r for r in recs if r.config.get("stage") == "load index (verify)"]
    assert loads and all({"cheap checks", "checksums"} <= set(r.metrics["split"]) for r in loads)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["scale.jsonl", "scale.log", "scale.tgz",
                                                                    "targets.toml"]
    with tarfile.open(tmp_path / "out" / "scale.tgz") as tar:
        names = tar.getnames()
    assert {"./report/report.md", "./report/latency_vs_size.png", "./scale.jsonl", "./targets.toml"} <= set(names)
    with tarfile.open(tmp_path / "out" / "scale.tgz") as tar:
        report = tar.extractfile("./report/report.md").read().decode()  # type: ignore[union-attr]
    assert "From the `targets.toml` beside the records." in report
    assert not (tmp_path / "d" / "n6k").exists() and not (tmp_path / "d" / "n4k").exists()


def test_same_as_numpy_times_each_side_and_names_the_difference(tmp_path) -> None:
    from types import SimpleNamespace

    from flashtrie.reference_cpu import NumpySearcher

    from flashtrie import KeywordSet, Proposals

    idx = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2], [1, 3], [4]]))
    tok = np.array([[[1, 4, 9], [2, 3, 9]]] * 2, dtype=np.int64)
    wl = SimpleNamespace(proposals=Proposals(tok, np.full(tok.shape, -0.5, dtype=np.float32)))
    ref = NumpySearcher(idx, decode="lazy")
    seconds: dict[str, float] = {}
    assert scale_serve.same_as_numpy(NumpySearcher(idx), ref, wl, 2, (1, 3), seconds) == []
    assert set(seconds) == {"backend", "numpy"} and all(v >= 0 for v in seconds.values())

    class Off:  # a searcher one result short at every beam
        def search(self, p, cfg):
            r = ref.search(p, cfg)
            r.keyword_ids[0, 0] = -1
            return r

    bad = scale_serve.same_as_numpy(Off(), NumpySearcher(idx), wl, 2, (1, 3))
    assert len(bad) == 2 and bad[0].startswith("beam 1: ") and bad[1].startswith("beam 3: ")
