"""`flashtrie bench serve` on the CPU: the numpy backend with host proposals built per call, its records
(kind ``serve``), the suite's table and figure through `flashtrie report`; and the synthetic head's rows (the
device source's input), checked against the workload they hold."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from flashtrie.harness.records import read_records
from flashtrie.harness.report import by_suite
from flashtrie.harness.serve.run import CallTimes, DeviceClock, ServePlan, time_calls
from flashtrie.harness.serve.sources import head_rows, host_arrays
from test_cli_io import _files

from flashtrie import InputError, NarrowLoudsIndex, Proposals
from flashtrie.cli import main

PAD = 2**32 - 1


def test_bench_serve_records_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = _files(tmp_path)
    out = tmp_path / "serve.jsonl"
    assert main(["bench", "serve", "--index", str(f["idx"]), "--queries", str(f["q"]), "--backends", "numpy",
                 "--beams", "2,4", "--batch-sizes", "1,3", "--warmup", "1", "--repeats", "3", "-o", str(out),
                 "--quiet"]) == 0
    recs = read_records(out)
    n = NarrowLoudsIndex.load(f["idx"]).num_keywords
    assert [(r.kind, r.backend, r.workload["proposals"], r.config["beam_width"], r.config["batch_size"])
            for r in recs] == [("serve", "numpy", "host", b, q) for b in (2, 4) for q in (1, 3)]
    for r in recs:
        assert r.status == "ok" and r.workload["library_size"] == n
        m = r.metrics
        assert m["calls"] == 3 and m["p99_ms"] >= m["median_ms"] > 0
        assert m["queries_per_second"] == pytest.approx(r.config["batch_size"] / (m["mean_ms"] / 1e3), rel=1e-4)
        assert 0 < m["host_us_per_query"] <= m["mean_ms"] * 1e3 / r.config["batch_size"] * 1.0001
        assert "device_mean_ms" not in m
    assert [s.name for s in by_suite(recs)] == ["serve"]
    capsys.readouterr()
    rep = tmp_path / "rep"
    assert main(["report", str(out), "-o", str(rep)]) == 0
    text = (rep / "report.md").read_text()
    assert "## Serving benchmark" in text and "Measured with: `flashtrie bench serve" in text
    assert "serve_queries_per_second.png" in text
    assert (rep / "serve_queries_per_second.png").stat().st_size > 0
    rows = [line for line in text.splitlines() if line.startswith("| ") and " host | numpy |" in line]
    assert len(rows) == 4 and all(row.startswith(f"| {n:,} | host | numpy |") for row in rows)


def test_bench_serve_device_proposals_need_the_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = _files(tmp_path)
    out = tmp_path / "serve.jsonl"
    assert main(["bench", "serve", "--index", str(f["idx"]), "--queries", str(f["q"]), "--backends", "numpy",
                 "--proposals", "device", "-o", str(out), "--quiet", "--repeats", "1"]) == 2
    assert "--proposals: device proposals are made on the GPU" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["bench", "serve", "--index", str(f["idx"]), "--queries", str(f["q"]), "--proposals", "gpu",
              "-o", str(out)])
    assert e.value.code == 2 and "--proposals: expected device, host or device,host" in capsys.readouterr().err


def test_head_rows_hold_the_workload() -> None:
    rng = np.random.default_rng(3)
    tok = np.stack([[rng.permutation(40)[:6] for _ in range(3)] for _ in range(2)]).astype(np.int64) * 1000
    tok[0, 1, 2] = -1
    lp = np.log(rng.random(tok.shape)).astype(np.float32)
    p = Proposals(tok, lp)
    rows = head_rows(p, queries=5, vocab=16, seed=1)
    assert rows.logits.shape == rows.slot_token.shape == (5, 3, 16)
    for q in range(5):
        for t in range(3):
            want = {int(x): float(v) for x, v in zip(p.tokens[q % 2, t], p.logprobs[q % 2, t], strict=True)
                    if x != PAD}
            got = {int(x): float(v) for x, v in zip(rows.slot_token[q, t], rows.logits[q, t], strict=True) if x >= 0}
            assert got == want
            floor = rows.logits[q, t][rows.slot_token[q, t] < 0]
            assert floor.size == 16 - len(want) and (floor < min(want.values())).all()
    with pytest.raises(InputError, match="--vocab: 4 is below the workload's K = 6"):
        head_rows(p, queries=1, vocab=4)


def test_device_source_gives_each_row_its_top_k() -> None:
    """The head's per-call work (log_softmax, topk, slot -> token gather), run by torch on the CPU: each row
    gets the workload row's K best tokens (padding for slots that hold none), logprobs log-softmaxed."""
    torch = pytest.importorskip("torch")
    from flashtrie.harness.serve.sources import DeviceSource

    rng = np.random.default_rng(5)
    tok = np.stack([[rng.permutation(50)[:5] for _ in range(2)] for _ in range(3)]).astype(np.int64) + 100
    tok[1, 0, 3:] = -1
    lp = (np.round(np.log(rng.random(tok.shape)) * 64) / 64).astype(np.float32)  # no ties within a row
    p = Proposals(tok, lp)
    rows = head_rows(p, queries=6, vocab=40, seed=2)
    src = DeviceSource(rows, batch=3, k=4, stream=None, device="cpu")
    for call in range(4):  # the two batches of rows in turn
        tokens, vals = src()
        assert tokens.dtype == torch.int32 and vals.dtype == torch.float32 and tuple(tokens.shape) == (3, 2, 4)
        first = 3 * (call % 2)
        for b in range(3):
            q = (first + b) % 3
            for t in range(2):
                real = [(float(v), int(x)) for x, v in zip(p.tokens[q, t], p.logprobs[q, t], strict=True) if x != PAD]
                want = [x for _, x in sorted(real, reverse=True)[:4]]
                got = tokens[b, t].tolist()
                assert got[: len(want)] == want and all(x == -1 for x in got[len(want):])
                row = torch.from_numpy(rows.logits[first + b, t])
                assert torch.equal(vals[b, t], torch.log_softmax(row, -1).topk(4).values)
    t, v = src.host_copy()
    assert t.dtype == np.int64 and v.dtype == np.float32 and Proposals(t, v).shape == (3, 2, 4)


def test_host_arrays_are_the_top_k_as_a_head_gives_them() -> None:
    tok = np.array([[[5, 7, -1, 9], [1, 2, 3, 4]]])
    lp = np.array([[[-1.0, -0.5, -0.1, -3.0], [-2.0, -2.0, -0.25, -9.0]]], dtype=np.float32)
    t, v = host_arrays(Proposals(tok, lp), queries=2, k=2)
    assert t.dtype == np.int64 and v.dtype == np.float32 and t.shape == (2, 2, 2)
    assert t[1].tolist() == t[0].tolist() == [[7, 5], [3, 1]]
    assert v[0].tolist() == [[-0.5, -1.0], [-0.25, -2.0]]


def test_time_calls_subtracts_waits_and_reads_the_device_clock() -> None:
    class Event:
        def __init__(self) -> None:
            self.records = 0

        def record(self, stream: object) -> None:
            self.records += 1

        def synchronize(self) -> None:
            pass

        def elapsed_time(self, other: object) -> float:
            return 0.125

    stream = type("S", (), {"synchronize": lambda self: None})()
    searcher = type("G", (), {"last_breakdown": {"wait_ms": 0.5}})()
    calls: list[int] = []

    def call() -> None:
        calls.append(1)
        time.sleep(0.002)

    clock = DeviceClock(Event(), Event(), stream)
    got = time_calls(call, searcher, ServePlan(warmup=2, repeats=3, max_seconds=10.0), clock)
    assert len(calls) == 5 and clock.start.records == clock.end.records == 3
    assert got.device == [0.125] * 3 and all(w >= 2.0 for w in got.wall)
    assert all(1.5 <= h <= w - 0.5 + 1e-9 for h, w in zip(got.host, got.wall, strict=True))  # waits taken off


def test_call_times_metrics() -> None:
    m = CallTimes(wall=[1.0, 2.0, 3.0, 10.0], host=[0.5, 0.5, 0.5, 0.5], device=[0.25] * 4).metrics(batch=8)
    assert m["mean_ms"] == 4.0 and m["queries_per_second"] == 2000.0 and m["host_us_per_query"] == 62.5
    assert m["p99_ms"] == pytest.approx(9.79) and m["device_mean_ms"] == 0.25 and m["calls"] == 4
