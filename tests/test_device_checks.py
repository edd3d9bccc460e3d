"""The GPU machine's runner (tools/device/check.sh) and its table (tools/device/checks.toml): the table parses,
every check of the GPU runs is there by name, every measurement it names is a command of `flashtrie bench`,
and the runner stays thin; the suites it names are reached, and render, through the command line."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from flashtrie.harness.records import Record, append_records, read_records
from flashtrie.harness.suites import COMMANDS

from flashtrie.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
DEVICE = ROOT / "tools" / "device"
_spec = importlib.util.spec_from_file_location("device_checks", DEVICE / "checks.py")
assert _spec is not None and _spec.loader is not None
checks = importlib.util.module_from_spec(_spec)
sys.modules["device_checks"] = checks
_spec.loader.exec_module(checks)

#: every check the GPU runs have used, by name
NAMES = {"install", "compile", "smoke", "gpu-tests", "sanitizer", "parity", "beam", "batch", "size", "upload",
         "stepwise", "grid", "probe", "scale", "scale-quick", "gpubuild", "loadq", "verify", "numpylazy", "queries",
         "launch", "real", "quality", "compare"}


def _bench_sweeps() -> set[str]:
    subs = next(a for a in build_parser()._actions if a.dest == "command")
    bench = subs.choices["bench"]  # type: ignore[index]
    return set(next(a for a in bench._actions if a.dest == "sweep").choices)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_runner_lists_every_check_and_refuses_an_unknown_name() -> None:
    listed = subprocess.run(["bash", str(DEVICE / "check.sh"), "list"], capture_output=True, text=True, check=True)
    names = {line.split()[0] for line in listed.stdout.splitlines() if line.strip()}
    assert names == set(checks.load()) == NAMES
    bad = subprocess.run(["bash", str(DEVICE / "check.sh"), "parity", "no-such-check"], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "unknown check 'no-such-check'" in bad.stderr


def test_every_step_has_a_command_and_a_limit() -> None:
    for c in checks.load().values():
        assert c.help and c.steps
        for s in c.steps:
            assert s.run and "\n" not in s.run and "\t" not in s.run and 0 < s.timeout <= 600


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_every_step_and_summary_is_a_command_line_bash_parses() -> None:
    for c in checks.load().values():
        for cmd in [s.run for s in c.steps] + ([c.summary] if c.summary else []):
            res = subprocess.run(["bash", "-n", "-c", cmd], capture_output=True, text=True)
            assert res.returncode == 0, f"{c.name}: {res.stderr}"


def test_a_malformed_table_is_refused_naming_the_check(tmp_path: Path) -> None:
    bad = tmp_path / "checks.toml"
    bad.write_text('[parity]\nhelp = "x"\nsteps = [{ name = "a", timeout = 9000, run = "true" }]\n')
    with pytest.raises(ValueError, match="check 'parity', step 'a': timeout 9000"):
        checks.load(bad)


def test_every_suite_the_runner_names_is_a_command_of_flashtrie_bench(capsys: pytest.CaptureFixture[str]) -> None:
    named = {m for c in checks.load().values() for s in c.steps for m in re.findall(r"flashtrie bench ([\w-]+)", s.run)}
    assert {"stepwise", "scale", "scale-step", "beam", "batch", "size", "compile", "launch", "query-passes",
            "numpylazy", "gpubuild", "step-probe"} <= named
    known = _bench_sweeps() | set(COMMANDS)
    assert named <= known, named - known
    for name in sorted(named & set(COMMANDS)):
        with pytest.raises(SystemExit) as e:
            main(["bench", name, "--help"])
        assert e.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: flashtrie bench {name}")


def test_every_measurement_is_a_suite_not_a_script() -> None:
    runs = [s.run for c in checks.load().values() for s in c.steps]
    assert not [r for r in runs if re.search(r"\$PROBES|tools/probes|benchmarks/|summarize\.py\W+(gpubuild|json)", r)]
    assert not list((ROOT / "tools").glob("probes/*.py"))


def test_the_runner_is_thin() -> None:
    shell = sum(len(p.read_text().splitlines()) for p in DEVICE.glob("*.sh"))
    assert shell <= 150, f"tools/device holds {shell} lines of shell"


def test_a_suite_renders_from_records_through_flashtrie_bench(tmp_path: Path) -> None:
    rec = Record("latency", "gpu-stepwise", sweep="stepwise",
                 workload={"case": "fixed:1M:2048", "name": "fixed-8", "num_keywords": 1_000_000, "vocab_size": 2048},
                 config={"batch": 2, "beams": 70, "rows": 140, "states": "root"},
                 metrics={"graph_fused_us": 12.5, "graph_step_us": 13.5, "host_fused_us": 30.0, "host_us": 40.0,
                          "sync_fused_us": 60.0},
                 env={"git": {"commit": "d" * 40}})
    append_records(tmp_path / "r.jsonl", [rec])
    assert main(["bench", "stepwise", "render", str(tmp_path / "r.jsonl"), "--out-dir", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "| ddddddd | fixed-8 | 1,000,000 | 2,048 | 2x70 | root | 12.5 |" in md


def test_a_probe_without_a_gpu_records_why_and_renders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flashtrie.harness import device_probes

    monkeypatch.setattr(device_probes, "availability", lambda name: "no NVIDIA GPU visible (test)")
    out = tmp_path / "smoke.jsonl"
    assert main(["bench", "smoke", "--out", str(out), "--keywords", "500"]) == 1
    assert main(["bench", "upload", "missing.ftrie", "--out", str(out)]) == 1
    assert main(["report", str(out), "-o", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert md.startswith("# GPU machine checks")
    assert md.count("| gpu | – |") == 2 and md.count("skipped: no NVIDIA GPU visible (test) |") == 2


def test_probe_records_render_as_tables(tmp_path: Path) -> None:
    recs = [Record("parity", "gpu", sweep="smoke", config={"beam_width": 4, "length_norm": 0.5},
                   metrics={"results": 12, "device_ms": 0.25}),
            Record("parity", "gpu", "mismatch", "query 1: ids differ at rank 3", sweep="smoke",
                   config={"beam_width": 600}, metrics={"results": 40, "device_ms": 1.5}),
            Record("build", "gpu", sweep="upload", config={"verify": True},
                   metrics={"load_s": 1.25, "searcher_s": 0.5, "gb_per_s": 20.0, "bytes_per_keyword": 2.5})]
    append_records(tmp_path / "r.jsonl", recs)
    assert main(["report", str(tmp_path / "r.jsonl"), "-o", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "| gpu | beam_width=4, length_norm=0.5 | 12 | 0.25 | ok |" in md
    assert "| gpu | beam_width=600 | 40 | 1.5 | mismatch: query 1: ids differ at rank 3 |" in md
    assert "## Index load and upload" in md and "| gpu | verify=True | 1.25 | 0.5 |" in md


def test_the_load_suite_records_each_cpu_count_and_renders(tmp_path: Path) -> None:
    from flashtrie import KeywordSet, NarrowLoudsIndex

    idx = tmp_path / "kw.ftrie"
    NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2], [1, 3], [4]])).save(idx)
    out = tmp_path / "load.jsonl"
    assert main(["bench", "load", str(idx), "--out", str(out), "--workers", "1", "--repeats", "2", "--device", "cpu",
                 "--set", "louds_pass.PIECE_BITS=4096"]) == 0
    (r,) = read_records(out)
    assert (r.sweep, r.status, r.config) == ("load", "ok", {"workers": 1, "repeats": 2, "device": "cpu",
                                                             "louds_pass.PIECE_BITS": 4096})
    assert r.metrics["seconds"] > 0 and r.metrics["bytes"] == idx.stat().st_size and r.metrics["split"]
    assert main(["report", str(out), "-o", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Verified loads (best of the repeats)" in md
    assert f"| host | bytes={idx.stat().st_size}, index=kw.ftrie, device=cpu, louds_pass.PIECE_BITS=4096, repeats=2, " \
           "workers=1 |" in md


def test_the_load_suite_refuses_a_bad_setting_before_any_record(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "load.jsonl"
    with pytest.raises(SystemExit) as e:
        main(["bench", "load", "missing.ftrie", "--out", str(out), "--set", "louds_pass.NO_SUCH=1"])
    assert e.value.code == 2 and "--set: expected MODULE.CONSTANT=INT" in capsys.readouterr().err
    assert not out.exists()


def test_the_compile_suite_records_both_loads_and_renders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flashtrie.harness import device_probes

    seen: list[tuple[str, bool]] = []

    def compiled(arch: str, use_cache: bool) -> tuple[float, bool, dict[str, dict[str, int]]]:
        seen.append((arch, use_cache))
        return (0.005, True, {}) if use_cache else (2.5, False, {"ft_search": {"registers": 64, "spill_stores": 0}})

    monkeypatch.setattr(device_probes, "availability", lambda name: None)
    monkeypatch.setattr(device_probes, "_compile_once", compiled)
    out = tmp_path / "compile.jsonl"
    assert main(["bench", "compile", "--out", str(out), "--arch", "sm_90"]) == 0
    assert seen == [("sm_90", False), ("sm_90", True)]
    recs = read_records(out)
    assert [(r.kind, r.sweep, r.status, r.config) for r in recs] == [
        ("compile", "compile", "ok", {"arch": "sm_90", "use_cache": False}),
        ("compile", "compile", "ok", {"arch": "sm_90", "use_cache": True})]
    assert recs[0].metrics == {"seconds": 2.5, "from_cache": False,
                               "resources": {"ft_search": {"registers": 64, "spill_stores": 0}}}
    assert recs[0].command == ["flashtrie", "bench", "compile", "--out", str(out), "--arch", "sm_90"]
    assert main(["report", str(out), "-o", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Kernel compile and cached load" in md
    assert "| gpu | arch=sm_90 | 2.5 | no | {'ft_search': {'registers': 64, 'spill_stores': 0}} | ok |" in md
    assert "| gpu | arch=sm_90, use_cache=True | 0.005 | yes | {} | ok |" in md


def test_the_launch_suite_records_each_part_and_renders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flashtrie.harness import launch_probe

    monkeypatch.setattr(launch_probe, "availability", lambda name: None)
    monkeypatch.setattr(launch_probe, "measure", lambda a: [("advance_mask (whole call)", (12.5, 14.0)),
                                                            ("eos", (0.25, 0.5))])
    out = tmp_path / "launch.jsonl"
    assert main(["bench", "launch", "--out", str(out), "--rows", "16", "--calls", "7"]) == 0
    recs = read_records(out)
    assert {r.run_id for r in recs} == {recs[0].run_id} and len(recs) == 2
    assert [(r.kind, r.sweep, r.config["part"], r.metrics) for r in recs] == [
        ("launch", "launch", "advance_mask (whole call)", {"median_us": 12.5, "p90_us": 14.0}),
        ("launch", "launch", "eos", {"median_us": 0.25, "p90_us": 0.5})]
    assert recs[0].workload == {"num_keywords": 200_000, "rows": 16, "vocab_size": 32_768}
    assert main(["report", str(out), "-o", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Host microseconds of a fused step, by part" in md
    assert "| gpu | num_keywords=200000, rows=16, vocab_size=32768, calls=7, part=eos | 0.25 | 0.5 | ok |" in md


@pytest.mark.parametrize("suite, argv", [("compile", []), ("launch", [])])
def test_a_gpu_probe_without_a_gpu_records_why(suite: str, argv: list[str], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from flashtrie.harness import device_probes, launch_probe

    for module in (device_probes, launch_probe):
        monkeypatch.setattr(module, "availability", lambda name: "no NVIDIA GPU visible (test)")
    out = tmp_path / f"{suite}.jsonl"
    assert main(["bench", suite, "--out", str(out), *argv]) == 1
    (r,) = read_records(out)
    assert (r.kind, r.sweep, r.status, r.message) == (suite, suite, "skipped", "no NVIDIA GPU visible (test)")


def test_the_query_pass_suite_records_a_cpu_run_and_renders(tmp_path: Path) -> None:
    out = tmp_path / "queries.jsonl"
    argv = ["bench", "query-passes", "--out", str(out), "--n", "3000", "--threads", "1,2", "--pieces", "10",
            "--tally-keys", "", "--no-gpu"]
    assert main(argv) == 1  # nothing compared: no pass
    recs = read_records(out)
    assert {(r.kind, r.sweep) for r in recs} == {("query-pass", "query-passes")}
    assert {r.run_id for r in recs} == {recs[0].run_id}
    whats = [r.config["what"] for r in recs]
    assert whats[:3] == ["generate 3,000 keywords", "CPU pass, 1 threads", "CPU pass, 2 threads"]
    assert "CPU pass, 2 threads, pieces of 2^10" in whats and "16 dense queries, device=cpu" in whats
    assert all(r.metrics["seconds"] >= 0 for r in recs[:-1]) and all(r.workload == {"num_keywords": 3000} for r in recs)
    last = recs[-1]
    assert (last.config, last.status, last.metrics) == ({"what": "GPU == CPU (facts and workload digests)"},
                                                        "skipped", {"same": False})
    assert main(["report", str(out), "-o", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## The query generator's library pass, CPU and GPU" in md
    assert "| cpu | threads=2, what=CPU pass, 2 threads |" in md
    assert "skipped: --no-gpu: the GPU pass was not run, nothing compared |" in md


def _library_pass_as_gpu(differ: bool):
    from flashtrie.datasets._library_pass import library_pass

    def gpu_pass(ks, num_steps, top, timings=None):  # the CPU's pass standing in for the GPU's
        facts = library_pass(ks, num_steps, top, 1)
        if differ:
            facts.lengths[0] += 1
        if timings is not None:
            timings.update({"upload": 0.5, "walk": 0.25})
        return facts
    return gpu_pass


@pytest.mark.parametrize("differ", [False, True])
def test_the_query_pass_suite_compares_the_gpu_pass(differ: bool, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from flashtrie.datasets import _library_pass_gpu
    from flashtrie.harness import query_passes

    real = query_passes.generate_queries  # the queries on the CPU for device=gpu (the GPU's pass needs cupy)
    monkeypatch.setattr(query_passes, "generate_queries", lambda *a, device, **k: real(*a, **k))
    monkeypatch.setattr(_library_pass_gpu, "library_pass_gpu", _library_pass_as_gpu(differ))
    out = tmp_path / "queries.jsonl"
    assert main(["bench", "query-passes", "--out", str(out), "--n", "2000", "--threads", "1", "--pieces", "",
                 "--tally-keys", ""]) == int(differ)
    recs = {r.config["what"]: r for r in read_records(out)}
    gpu = recs["GPU pass (run 1)"]
    assert gpu.backend == "gpu" and gpu.metrics["split"] == {"upload": 0.5, "walk": 0.25}
    assert (gpu.status, gpu.message) == (("mismatch", "facts differ: lengths") if differ else ("ok", None))
    assert recs["16 dense queries, device=gpu"].metrics["digest"] == recs["16 dense queries, device=cpu"].metrics[
        "digest"]
    verdict = recs["GPU == CPU (facts and workload digests)"]
    assert (verdict.status, verdict.metrics) == (("mismatch", {"same": False}) if differ else ("ok", {"same": True}))


def test_the_numpylazy_suite_records_a_cpu_run_and_renders(tmp_path: Path) -> None:
    out = tmp_path / "numpylazy.jsonl"
    assert main(["bench", "numpylazy", "--out", str(out), "--n", "2000", "--eager-below", "600"]) == 0
    recs = read_records(out)
    assert {(r.kind, r.sweep, r.workload["num_keywords"]) for r in recs} == {("numpy-lazy", "numpylazy", 2000)}
    by = {r.config["what"]: r for r in recs}
    assert by["builder"].metrics["value"].startswith("cpu") and by["nodes"].metrics["value"] > 2000
    assert by["numpy lazy set-up"].metrics["value"] >= 0 and by["numpy eager set-up"].backend == "numpy"
    assert (by["numpy eager == lazy (beam 1000)"].status, by["numpy eager == lazy (beam 1000)"].metrics) == (
        "ok", {"value": "equal"})
    gpu = by["gpu == numpy"]  # no GPU here: skipped, with the reason
    assert gpu.status == "skipped" and gpu.message.startswith("not run: ") and gpu.backend == "gpu"
    assert list(by)[-1] == "total s"
    assert main(["report", str(out), "-o", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## The lazy numpy reference at scale" in md
    assert "| numpy | what=numpy eager == lazy (beam 1000) | equal | ok |" in md


def test_the_numpylazy_suite_marks_a_difference(tmp_path: Path) -> None:
    from flashtrie.harness import numpy_lazy
    from flashtrie.harness.run_context import RunContext

    log = numpy_lazy.Log(RunContext(), str(tmp_path / "r.jsonl"), 10)
    log["gpu == numpy"] = "query 0: ids differ at rank 2"
    (r,) = read_records(tmp_path / "r.jsonl")
    assert (r.status, r.message, r.backend) == ("mismatch", "query 0: ids differ at rank 2", "gpu")


def test_the_gpubuild_suite_records_its_measurements_on_the_cpu_and_renders(tmp_path: Path) -> None:
    out = tmp_path / "gpubuild.jsonl"
    assert main(["bench", "gpubuild", "build", "--numpy", "--n", "3000", "--out", str(out)]) == 0
    assert main(["bench", "gpubuild", "compare", "--numpy", "--n", "2000", "--out", str(out)]) == 0
    assert main(["bench", "gpubuild", "directories", "--nodes", "5000", "--out", str(out)]) == 0
    build, compare, dirs = read_records(out)
    assert {(r.kind, r.sweep, r.status) for r in (build, compare, dirs)} == {("gpu-build", "gpubuild", "ok")}
    assert (build.backend, build.config) == ("numpy", {"what": "build", "n": 3000, "seed": 0, "ids": "input",
                                                       "numpy": True, "pool_peaks": False})
    assert build.metrics["num_nodes"] > 3000 and [s for s, _ in build.metrics["stages"]]
    assert compare.metrics["equal"] is True and set(compare.metrics["modes"]) == {"input", "index"}
    assert (dirs.backend, dirs.config) == ("host", {"what": "directories", "nodes": 5000})
    assert {"louds_s", "all_four_on_threads_s"} <= set(dirs.metrics)
    assert main(["report", str(out), "-o", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## The GPU builder" in md
    assert f"| numpy | ids=input, n=3000, numpy=True, seed=0, what=build | {build.metrics['build_s']:g} |" in md
    assert "| host | nodes=5000, what=directories |" in md


def test_the_gpubuild_suite_marks_differences_and_a_missing_gpu(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from flashtrie.harness import gpu_build_probe

    from flashtrie.errors import DeviceError

    def no_cupy() -> None:
        raise DeviceError("the GPU builder and passes need cupy (test)")

    monkeypatch.setattr(gpu_build_probe, "_cupy", no_cupy)
    out = tmp_path / "gpubuild.jsonl"
    assert main(["bench", "gpubuild", "transfer", "--gb", "0.01", "--out", str(out)]) == 1
    (r,) = read_records(out)
    assert (r.backend, r.status, r.message) == ("gpu", "skipped", "the GPU builder and passes need cupy (test)")
    res = {"equal": False, "modes": {"input": {"equal": True, "different_arrays": [], "different_meta": []},
                                     "index": {"equal": False, "different_arrays": ["labels"], "different_meta": []}}}
    assert gpu_build_probe._verdict(res) == ("mismatch", "CPU and GPU builds differ: {'index': ['labels']}")
    assert gpu_build_probe._verdict({"round_trip_equal_0": True, "round_trip_equal_1": False}) == (
        "mismatch", "a copy's round trip changed the data: round_trip_equal_1")


def test_the_step_probe_records_timings_and_comparisons_and_renders(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from flashtrie.harness import step_probe

    shape = {"case": "fixed:1M:2048", "shape": "2x70", "rows": 140, "vocab": 2049, "gpu": "test GPU",
             "blocks_per_row": [2, 0], "blocks": 280}
    monkeypatch.setattr(step_probe, "availability", lambda name: None)
    monkeypatch.setattr(step_probe, "measure", lambda a: (shape, {"empty": 2.5, "root: fused [default]": 7.25},
                                                          {"root: GPU == numpy": True, "root: same [b]": False}))
    out = tmp_path / "probe.jsonl"
    assert main(["bench", "step-probe", "--out", str(out), "--case", "fixed:1M:2048"]) == 1  # a variant differs
    recs = read_records(out)
    assert {(r.kind, r.sweep, r.backend) for r in recs} == {("step-probe", "step-probe", "gpu")}
    assert [(r.config["what"], r.metrics, r.status) for r in recs] == [
        ("empty", {"device_us": 2.5}, "ok"), ("root: fused [default]", {"device_us": 7.25}, "ok"),
        ("root: GPU == numpy", {"equal": True}, "ok"), ("root: same [b]", {"equal": False}, "mismatch")]
    assert recs[-1].message == "root: same [b]: the results differ" and recs[0].workload == shape
    assert main(["report", str(out), "-o", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Where a fused step's device time goes" in md
    assert "| gpu | what=root: fused [default] | 7.25 | – | ok |" in md
    assert "| gpu | what=root: same [b] | – | no | mismatch: root: same [b]: the results differ |" in md


def test_the_step_probe_without_a_gpu_records_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flashtrie.harness import step_probe

    monkeypatch.setattr(step_probe, "availability", lambda name: "no NVIDIA GPU visible (test)")
    out = tmp_path / "probe.jsonl"
    assert main(["bench", "step-probe", "--out", str(out)]) == 1
    (r,) = read_records(out)
    assert (r.status, r.message, r.workload) == ("skipped", "no NVIDIA GPU visible (test)",
                                                 {"case": "fixed:20M:32768", "shape": "2x70"})
