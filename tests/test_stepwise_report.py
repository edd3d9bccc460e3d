"""The stepwise suite's report: rendered from records only, each row naming the commit it was measured at."""

from __future__ import annotations

import pytest
from flashtrie.harness.records import Record, append_records
from flashtrie.harness.report import build_report
from flashtrie.harness.stepwise import report as stepwise_report
from flashtrie.harness.stepwise import run as stepwise_run


def _step(commit: str, fused: float, rows: tuple[int, int] = (2, 70)) -> Record:
    return Record("latency", "gpu-stepwise", sweep="stepwise",
                  workload={"case": "fixed:20M:32768", "name": "fixed-8", "num_keywords": 20_000_000,
                            "vocab_size": 32_768},
                  config={"batch": rows[0], "beams": rows[1], "rows": rows[0] * rows[1], "states": "root"},
                  metrics={"graph_fused_us": fused, "graph_step_us": fused + 1, "host_fused_us": 30.0,
                           "host_us": 40.0, "sync_fused_us": 60.0},
                  env={"git": {"commit": commit + "0" * 33}})


def test_rows_carry_their_commit_and_every_commit_gets_an_environment_line(tmp_path) -> None:
    recs = [_step("aaaaaaa", 20.9), _step("bbbbbbb", 14.8), _step("bbbbbbb", 50.0, (8, 64))]
    text = stepwise_report.table(recs)
    rows = [line for line in text.splitlines() if "fixed-8" in line]
    assert [r.split("|")[1].strip() for r in rows] == ["aaaaaaa", "bbbbbbb", "bbbbbbb"]
    assert "| 20.9 |" in rows[0] and "| 14.8 |" in rows[1]
    append_records(tmp_path / "r.jsonl", recs)
    md = build_report([tmp_path / "r.jsonl"], tmp_path / "report").read_text()
    assert md.startswith("# Autoregressive decoding: per-step constraint cost")
    assert md.count("Environment:") == 2
    assert (tmp_path / "report" / "stepwise_device_us.png").exists()


def test_a_failed_case_is_a_row_with_its_reason() -> None:
    bad = Record("latency", "gpu-stepwise", "error", "time budget spent", "stepwise", {"case": "var:100M"},
                 {"rows": 140}, env={"git": {"commit": "c" * 40}})
    line = [x for x in stepwise_report.table([bad]).splitlines() if "var:100M" in x][0]
    assert line.startswith("| ccccccc | var:100M |") and "error: time budget spent" in line


@pytest.mark.parametrize(("args", "says"), [
    (["--states", "both"], "--states 'both': expected root, mid or root,mid"),
    (["--cases", "var:10M,fixed:1M"], "--cases 'var:10M,fixed:1M': expected fixed:N:V or var:N"),
    (["--cases", "var:ten"], "expected a positive integer count"),
    (["--shapes", "2x70,8x"], "--shapes '2x70,8x': expected batch x beams"),
    (["--hf-shapes", "0x64"], "--hf-shapes '0x64'"),
    (["--repeats", "0"], "--repeats 0: expected at least 1"),
])
def test_a_bad_argument_is_refused_before_any_work(tmp_path, capsys, args: list[str], says: str) -> None:
    out = tmp_path / "r.jsonl"
    with pytest.raises(SystemExit) as e:
        stepwise_run.main(["--out", str(out), *args])
    assert e.value.code == 2 and says in capsys.readouterr().err
    assert not out.exists()
