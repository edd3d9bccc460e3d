"""The lab's one run context (`harness/run_context.py`) and one parity comparison (`compare_backends`)."""

from __future__ import annotations

import numpy as np
import pytest
from flashtrie.harness.parity import compare_backends
from flashtrie.harness.records import Record, append_record, read_records
from flashtrie.harness.run_context import RunContext
from flashtrie.reference_cpu.numpy_search import NumpySearcher

from flashtrie import KeywordSet, NarrowLoudsIndex, Proposals, SearchConfig, SearchResult


def _result(seed: int = 0) -> SearchResult:
    kws = KeywordSet.from_sequences([[1, 2], [1, 3], [4], [2, 2, 1]])
    rng = np.random.default_rng(seed)
    lp = np.log(rng.uniform(0.1, 1.0, (3, 3, 4))).astype(np.float32)
    props = Proposals(np.argsort(rng.random((3, 3, 4)), axis=2), lp)
    return NumpySearcher(NarrowLoudsIndex.build(kws)).search(props, SearchConfig(beam_width=3))


def test_run_context_stamps_every_record_with_one_run(tmp_path) -> None:
    run = RunContext.start(["flashtrie", "bench", "beam"], extra_env={"scale_command": "sh x"})
    a = run.record(kind="latency", backend="numpy", metrics={"mean_ms": 1.0})
    b = run.stamp(Record(kind="build", backend="gpu"))
    for r in (a, b):
        assert r.run_id == run.run_id and r.command == ["flashtrie", "bench", "beam"]
        assert r.env["command"] == r.command and r.env["scale_command"] == "sh x" and r.timestamp
    assert run.commit == (run.env.get("git") or {}).get("commit")
    append_record(tmp_path / "r.jsonl", a)  # the record fields the report pipeline reads are unchanged
    (back,) = read_records(tmp_path / "r.jsonl")
    assert (back.run_id, back.command, back.env["cpu"]) == (a.run_id, a.command, a.env["cpu"])
    assert RunContext.start(run_id="given").run_id == "given"
    assert RunContext().run_id != RunContext().run_id  # a bare context is its own run


def test_compare_backends_reports_each_backend_against_the_reference() -> None:
    ref = _result()
    changed = _result()
    changed.scores.view(np.uint32)[0, 0] ^= np.uint32(1)
    rep = compare_backends({"numpy": ref, "gpu": _result(), "marisa": changed}, "numpy", errors={"x": "boom"})
    assert [o.name for o in rep.outcomes] == ["numpy", "gpu", "marisa", "x"]
    assert [o.status for o in rep.outcomes] == ["ok", "ok", "mismatch", "error"]
    m = rep.outcome("marisa").mismatch
    assert m is not None and (m.query, m.rank, m.field) == (0, 0, "scores")
    assert rep.num_queries == 3 and not rep.ok


def test_compare_backends_reference_order_and_failed_reference() -> None:
    rep = compare_backends({"gpu": _result(), "numpy": _result()}, "numpy")
    assert rep.reference == "numpy" and rep.outcomes[0].name == "numpy" and rep.ok
    assert compare_backends({"a": _result(), "b": _result(1)}).reference == "a"  # default: the first
    failed = compare_backends({"gpu": _result()}, "numpy", errors={"numpy": "ValueError: no"})
    assert failed.outcome("numpy").status == "error"
    assert "reference numpy failed" in (failed.outcome("gpu").error or "")
    with pytest.raises(ValueError, match="at least one backend"):
        compare_backends({})
