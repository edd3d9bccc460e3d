"""The benchmark harness: records, timing statistics, parity, workload statistics, quality, report.

Behaviour only: no timed assertions.  Searchers here are stand-ins wrapping the numpy reference search
(`NumpySearcher`), which also provides the workload statistics.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flashtrie.harness import env as envmod
from flashtrie.harness.parity import check_parity, compare_results
from flashtrie.harness.records import SCHEMA, Record, append_record, append_records, read_records
from flashtrie.harness.report import build_report, command_text
from flashtrie.harness.sweep import stats_searcher, workload_statistics
from flashtrie.harness.timing import OverBudget, TimingPlan, summarize, time_searcher
from flashtrie.harness.unconstrained import KeywordTable, unconstrained_search
from flashtrie.harness.workloads import truncate_proposals
from flashtrie.reference_cpu.numpy_search import NumpySearcher

from flashtrie import KeywordSet, NarrowLoudsIndex, Proposals, SearchConfig, SearchResult
from flashtrie.errors import InputError

PAD = -1


class RefSearcher:
    """A stand-in backend: the numpy reference search, optionally tampering with its output."""

    def __init__(self, keywords: KeywordSet, name: str = "ref", tamper=None) -> None:
        self.inner = NumpySearcher(NarrowLoudsIndex.build(keywords))
        self.name = name
        self.tamper = tamper

    def search(self, proposals, config, prefixes=None):
        res = self.inner.search(proposals, config, prefixes)
        if self.tamper is not None:
            self.tamper(res)
        return res


class Broken:
    name = "broken"

    def search(self, proposals, config, prefixes=None):
        raise RuntimeError("kernel exploded")


def _random_case(seed: int, n: int = 60, vocab: int = 9, q: int = 4, t: int = 4, k: int = 6):
    rng = np.random.default_rng(seed)
    kws = KeywordSet.from_sequences([rng.integers(0, vocab, rng.integers(1, 5)) for _ in range(n)])
    tok = np.stack([[rng.permutation(vocab + 3)[:k] for _ in range(t)] for _ in range(q)]).astype(np.int64)
    tok[tok >= vocab] = PAD
    lp = rng.choice(np.array([-0.5, -1.0, -0.25, -2.0, 0.0, -np.inf], np.float32), size=tok.shape)
    return kws, Proposals(tok, lp)


# ------------------------------------------------------------------------------------------ records
def _record(**over) -> Record:
    base = dict(kind="latency", backend="numpy", sweep="beam_width",
                workload={"shape_QTK": [4, 8, 100], "num_keywords": 1000},
                config={"beam_width": 100, "batch_size": 1, "K": 100},
                metrics={"mean_ms": np.float64(1.5), "p99_ms": 2.0, "speedup_vs_marisa": 3.0, "bad": float("inf")},
                workload_stats={"valid_fraction": 0.25, "beam_fill_per_step": np.array([1.0, 0.5])},
                env={"cpu": "test cpu", "cpu_cores": 2}, command=["flashtrie", "bench", "beam"], run_id="r1",
                timestamp="2026-01-01T00:00:00+00:00")
    base.update(over)
    return Record(**base)


def test_records_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    append_record(path, _record())
    append_records(path, [_record(backend="marisa", status="mismatch", message="query 0 rank 1"),
                          _record(backend="gpu", status="error", message="no GPU")])
    recs = read_records(path)
    assert [r.backend for r in recs] == ["numpy", "marisa", "gpu"]
    assert recs[0].metrics["mean_ms"] == 1.5 and recs[0].metrics["bad"] == math.inf  # stored as "inf"
    assert recs[0].workload_stats["beam_fill_per_step"] == [1.0, 0.5]
    assert recs[1].status == "mismatch" and recs[1].message == "query 0 rank 1"
    assert all(r.schema == SCHEMA for r in recs)
    assert len(path.read_text().splitlines()) == 3  # one line per record


def test_records_reject_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="needs a message"):
        append_record(tmp_path / "x.jsonl", _record(status="error"))
    with pytest.raises(InputError, match="status"):
        append_record(tmp_path / "x.jsonl", _record(status="great"))
    path = tmp_path / "r.jsonl"
    append_record(path, _record())
    with path.open("a") as f:
        f.write(json.dumps({"schema": "something/else"}) + "\n")
    with pytest.raises(InputError, match=r"line 2: schema"):
        read_records(path)
    path.write_text("1 2 3\n4 5\n")
    with pytest.raises(InputError, match="line 1"):
        read_records(path)


# ------------------------------------------------------------------------------------------- timing
def test_summarize_known_sample() -> None:
    x = np.arange(1, 101, dtype=float)
    s = summarize(x)
    assert s.n == 100 and s.mean == 50.5 and s.median == 50.5 and s.min == 1 and s.max == 100
    assert s.p90 == pytest.approx(90.1) and s.p99 == pytest.approx(99.01)
    std = math.sqrt(sum((v - 50.5) ** 2 for v in x) / 99)
    assert s.std == pytest.approx(std)
    half = 1.9842169515086827 * std / 10.0  # t(0.975, 99)
    assert s.ci95_low == pytest.approx(50.5 - half) and s.ci95_high == pytest.approx(50.5 + half)
    one = summarize([3.0])
    assert one.std == 0 and one.ci95_low == one.ci95_high == 3.0
    with pytest.raises(ValueError):
        summarize([])


class _Counting:
    """A searcher that counts its calls and reports a device time and a host breakdown per call."""

    def __init__(self, sleep: float = 0.0) -> None:
        self.calls: list[int] = []
        self.sleep = sleep
        self.last_device_ms: float | None = None
        self.last_breakdown: dict[str, float] = {}

    def search(self, proposals, config, prefixes=None):
        self.calls.append(proposals.num_queries)
        time.sleep(self.sleep)
        self.last_device_ms = 0.25
        self.last_breakdown = {"prep_ms": 0.5, "wait_ms": float(len(self.calls)), "junk": "x"}
        return SearchResult.empty(proposals.num_queries, 2)


def test_time_searcher_counts_calls_passes_and_side_channels() -> None:
    props = Proposals(np.array([[[1, 2]], [[3, 4]], [[5, 6]]]), np.zeros((3, 1, 2), np.float32))
    batches = [props[0:1], props[1:3]]
    s = _Counting()
    t = time_searcher(s, batches, SearchConfig(2), TimingPlan(warmup=3, repeats=2))
    assert s.calls == [1, 2, 1] + [1, 2] * 2  # warmup cycles the batches, then two full passes
    assert len(t.wall_ms) == 4 and t.warmup == 3
    assert t.device is not None and t.device.mean == 0.25
    assert t.breakdown_ms["prep_ms"] == [0.5] * 4 and "junk" not in t.breakdown_ms
    assert t.breakdown_means()["wait_ms"] == pytest.approx((4 + 5 + 6 + 7) / 4)
    assert t.first_pass is not None and t.first_pass.shape == (3, 2)  # the first pass, stacked
    plain = time_searcher(RefSearcher(KeywordSet.from_sequences([[1]])), [props], SearchConfig(2),
                          TimingPlan(warmup=0, repeats=1))
    assert plain.device is None and plain.breakdown_ms == {}
    with pytest.raises(OverBudget, match="one pass over 2 calls"):
        time_searcher(_Counting(sleep=0.01), batches, SearchConfig(2), TimingPlan(warmup=1, budget_s=0.001))


# ------------------------------------------------------------------------------------------- parity
def _flip_score_bit(q: int, r: int):
    def tamper(res: SearchResult) -> None:
        bits = res.scores.view(np.uint32)
        bits[q, r] ^= np.uint32(1)

    return tamper


def test_parity_detects_planted_mismatch() -> None:
    kws, props = _random_case(3, n=200, vocab=6, q=3, t=4, k=6)
    cfg = SearchConfig(beam_width=4)
    ref = RefSearcher(kws, "ref")
    base = ref.search(props, cfg)
    q, r = 1, int(base.num_results[1]) - 1
    assert r >= 1, "the case needs a query with several results"
    bad = RefSearcher(kws, "tampered", tamper=_flip_score_bit(q, r))
    rep = check_parity({"ref": ref, "same": RefSearcher(kws, "same"), "tampered": bad, "broken": Broken()},
                       props, cfg)
    assert not rep.ok
    assert rep.outcome("same").status == "ok"
    assert rep.outcome("broken").status == "error" and "kernel exploded" in rep.outcome("broken").error
    m = rep.outcome("tampered").mismatch
    assert m is not None and (m.query, m.rank, m.field) == (q, r, "scores")
    assert m.left[0] == m.right[0] and m.left[1] != m.right[1]  # same id, one bit apart
    assert f"query {q}, rank {r}" in rep.summary()
    assert rep.first_mismatch[0] == "tampered"
    assert json.dumps(rep.to_dict())  # serialisable for records


def test_parity_ok_and_precomputed_results() -> None:
    kws, props = _random_case(5)
    cfg = SearchConfig(beam_width=3, max_results=5)
    a, b = RefSearcher(kws, "a"), RefSearcher(kws, "b")
    rep = check_parity({"a": a, "b": b}, props, cfg, results={"b": b.search(props, cfg)})
    assert rep.ok and rep.reference == "a"
    assert compare_results(rep.outcomes[0].result, rep.outcomes[1].result) is None


def test_parity_reports_count_difference() -> None:
    kws, props = _random_case(7)
    cfg = SearchConfig(beam_width=3)

    def drop_last(res: SearchResult) -> None:
        q = int(np.argmax(res.num_results))
        n = int(res.num_results[q])
        res.keyword_ids[q, n - 1] = -1
        res.num_results[q] = n - 1

    ref = RefSearcher(kws)
    n = ref.search(props, cfg).num_results
    rep = check_parity({"ref": ref, "short": RefSearcher(kws, "short", tamper=drop_last)}, props, cfg)
    m = rep.outcome("short").mismatch
    assert m is not None and m.query == int(np.argmax(n)) and m.rank == int(n.max()) - 1


# ------------------------------------------------------------------------------------ workload statistics
def _stats_case() -> tuple[KeywordSet, Proposals]:
    """Trie 1 → 2 → 5, 1 → 3, 4; two queries, three steps (hand-checked in `test_stats_hand_checked`)."""
    kws = KeywordSet.from_sequences([[1, 2], [1, 3], [4], [1, 2, 5]])
    tok = np.array([[[1, 4, 7], [2, 3, 9], [5, PAD, 6]],
                    [[4, 1, PAD], [2, 3, 9], [5, 6, PAD]]])
    lp = np.array([[[-1.0, -2.0, -0.5], [-0.5, -1.0, -0.1], [-1.0, 0.0, -1.0]],
                   [[-0.1, -3.0, 0.0], [-0.5, -1.0, -0.1], [-1.0, -1.0, 0.0]]], np.float32)
    return kws, Proposals(tok, lp)


def test_stats_hand_checked() -> None:
    kws, props = _stats_case()
    searcher = NumpySearcher(NarrowLoudsIndex.build(kws), early_stop=False, collect_stats=True)
    res = searcher.search(props, SearchConfig(2, score_threshold=-2.5))
    st = searcher.last_stats
    assert st is not None and (st.queries, st.steps, st.beam_width, st.steps_run) == (2, 3, 2, 3)
    # q0: t0 root x {1, 4, 7}: [1], [4] valid, kept; only [1] grows.  t1 [1] x {2, 3, 9}: [1,2], [1,3];
    #     only [1,2] grows.  t2 [1,2] x {5, 6} (padding skipped): [1,2,5] valid, but s = -2.5 <= σ.
    # q1: t0 root x {4, 1}: both valid, [1] (s = -3) fails σ, [4] is a leaf: the query stops.
    assert st.per_step.tolist() == [[5, 4, 3, 1], [3, 2, 2, 1], [2, 1, 0, 0]]
    assert st.column("valid").tolist() == [4, 2, 1]
    assert st.valid_fraction == pytest.approx(7 / 10)
    assert st.beam_fill.tolist() == [0.25, 0.25, 0.0]
    assert [e[0] for e in res.query(0)] == [0, 2] and [e[0] for e in res.query(1)] == [2]
    searcher.collect_stats = False
    searcher.search(props, SearchConfig(2))
    assert searcher.last_stats is None


def test_workload_statistics_from_numpy_run() -> None:
    kws, props = _stats_case()
    index = NarrowLoudsIndex.build(kws)
    timed = NumpySearcher(index)
    stats = stats_searcher(index)
    assert stats is not None and stats.index is index and stats is not timed
    assert (stats.early_stop, stats.collect_stats) == (False, True)
    assert (timed.early_stop, timed.collect_stats) == (True, False)  # the timed searcher is untouched
    cfg = SearchConfig(2, score_threshold=-2.5)
    ws = workload_statistics(stats, props, cfg, stats_queries=8)
    assert ws["stats_queries"] == 2 and (ws["considered"], ws["valid"]) == (10, 7)
    assert ws["valid_fraction"] == pytest.approx(0.7)
    assert ws["beam_fill_per_step"] == [0.25, 0.25, 0.0] and ws["mean_beam_fill"] == pytest.approx(1 / 6)
    assert ws["mean_results"] == 1.5 and "numpy" in ws["source"]
    one = workload_statistics(stats_searcher(index), props, cfg, stats_queries=1)  # query 0 only
    assert (one["considered"], one["valid"], one["beam_fill_per_step"]) == (8, 5, [0.5, 0.5, 0.0])
    assert workload_statistics(stats, props, cfg, stats_queries=0) == {}
    with pytest.raises(ValueError, match="early_stop=False"):
        workload_statistics(timed, props, cfg, stats_queries=1)


def _literal_counts(kws: KeywordSet, props: Proposals, cfg: SearchConfig) -> np.ndarray:
    """Per step (considered, valid, kept, frontier) by following docs/semantics.md literally."""
    trie = pytest.importorskip("oracle").OracleTrie(kws)
    out = np.zeros((props.shape[1], 4), dtype=np.int64)
    for q in range(props.num_queries):
        frontier = [((), np.float32(0.0))]
        for t in range(props.shape[1]):
            if not frontier:
                break
            row = [(int(x), lp) for x, lp in zip(props.tokens[q, t], props.logprobs[q, t], strict=True)
                   if x != 2**32 - 1 and float(lp) > cfg.token_threshold]
            grow = []
            for r, (h, s_h) in enumerate(frontier):
                for x, lp in row:
                    out[t, 0] += 1
                    c = h + (x,)
                    if c not in trie.prefixes:
                        continue
                    out[t, 1] += 1
                    s = np.float32(s_h + lp)
                    if float(s) > cfg.score_threshold:
                        out[t, 2] += 1
                        if trie.has_child(c):
                            grow.append(((-float(s), r, x), c, s))
            frontier = [(c, s) for _, c, s in sorted(grow)[:cfg.beam_width]]
            out[t, 3] += len(frontier)
    return out


def test_stats_match_a_literal_count() -> None:
    for seed in range(10):
        kws, props = _random_case(seed)
        searcher = NumpySearcher(NarrowLoudsIndex.build(kws), early_stop=False, collect_stats=True)
        for cfg in (SearchConfig(1), SearchConfig(3, max_results=7, length_norm=0.6),
                    SearchConfig(5, token_threshold=-1.5, score_threshold=-3.0)):
            searcher.search(props, cfg)
            assert searcher.last_stats is not None
            assert searcher.last_stats.per_step.tolist() == _literal_counts(kws, props, cfg).tolist(), (seed, cfg)


# ------------------------------------------------------------------------------ unconstrained baseline
def test_keyword_table() -> None:
    table = KeywordTable(KeywordSet.from_sequences([[1, 2], [7], [1, 2], [2**32 - 2, 0], [7]]))
    assert len(table) == 3
    assert table.canonical_ids(np.array([0, 1, 2, 3, 4])).tolist() == [0, 1, 0, 3, 1]
    seqs = np.array([[1, 2], [2, 1], [2**32 - 2, 0]], dtype=np.uint32)
    assert table.ids_of(seqs).tolist() == [0, -1, 3]
    assert table.ids_of(np.array([[7], [1]], dtype=np.uint32)).tolist() == [1, -1]


def test_unconstrained_decoding_loses_beam_slots() -> None:
    kws = KeywordSet.from_sequences([[1, 2], [5, 6]])
    tok = np.array([[[9, 1, 5], [8, 2, 6]]])
    lp = np.array([[[-0.1, -1.0, -2.0], [-0.1, -1.0, -1.0]]], np.float32)
    cfg = SearchConfig(1)
    unc = unconstrained_search(KeywordTable(kws), Proposals(tok, lp), cfg)
    con = RefSearcher(kws).search(Proposals(tok, lp), cfg)
    assert unc.num_results[0] == 0  # the beam followed 9, 8: not keywords
    assert con.query(0)[0][0] == 0
    wide = unconstrained_search(KeywordTable(kws), Proposals(tok, lp), SearchConfig(9))
    assert [e[0] for e in wide.query(0)] == [0, 1]  # [1,2] (-2) beats [5,6] (-3)


def test_unconstrained_equals_constrained_without_pruning() -> None:
    # every sequence over {0, 1, 2} of length 1..3 is a keyword (plus a duplicate): with T = 3 the trie
    # never prunes and every hypothesis before the last step grows, so both searches agree exactly.
    seqs = [list(s) for n in (1, 2, 3) for s in np.ndindex(*(3,) * n)] + [[2, 1]]
    kws = KeywordSet.from_sequences(seqs)
    rng = np.random.default_rng(1)
    tok = np.stack([[rng.permutation(5)[:4] for _ in range(3)] for _ in range(5)]).astype(np.int64)
    tok[tok >= 3] = PAD
    lp = rng.choice(np.array([-0.5, -1.0, -0.25, 0.0, -np.inf], np.float32), size=tok.shape)
    props = Proposals(tok, lp)
    for cfg in (SearchConfig(1), SearchConfig(4, max_results=6, length_norm=0.5),
                SearchConfig(3, token_threshold=-0.75, score_threshold=-1.25)):
        con = RefSearcher(kws).search(props, cfg)
        unc = unconstrained_search(KeywordTable(kws), props, cfg)
        assert con.first_difference(unc) is None, cfg
        one = unconstrained_search(KeywordTable(kws), props, cfg, queries=[3])
        assert one.query(0) == con.query(3)


def test_truncate_and_concat() -> None:
    tok = np.array([[[4, 7, PAD, 1]]])
    lp = np.array([[[-1.0, -0.5, 0.0, -1.0]]], np.float32)
    t = truncate_proposals(Proposals(tok, lp), 2)
    assert t.tokens.tolist() == [[[7, 1]]]  # highest logprob, then the smaller token on a tie; padding last
    a, b = SearchResult.empty(1, 3), SearchResult.empty(2, 3)
    assert SearchResult.concat([a, b]).shape == (3, 3)


# ------------------------------------------------------------------------------------------- report
def test_env_snapshot_is_json() -> None:
    snap = envmod.snapshot(["flashtrie", "demo"])
    json.dumps(snap)
    assert snap["cpu_cores"] and snap["python"] and snap["command"] == ["flashtrie", "demo"]
    assert "numpy" in snap["packages"]


def test_report_from_stored_records(tmp_path: Path) -> None:
    env = envmod.snapshot(["flashtrie", "bench", "beam"])
    recs = []
    for b, (m_ms, n_ms) in {1: (0.5, 0.4), 10: (2.0, 0.8), 100: (20.0, 3.0)}.items():
        for name, ms in (("marisa", m_ms), ("numpy", n_ms)):
            recs.append(_record(backend=name, env=env, config={"beam_width": b, "batch_size": 1, "K": b},
                                metrics={"mean_ms": ms, "median_ms": ms, "p99_ms": 1.5 * ms, "ci95_low_ms": ms * 0.9,
                                         "ci95_high_ms": ms * 1.1, "speedup_vs_marisa": m_ms / ms}))
    recs.append(_record(backend="gpu", status="error", message="no GPU here", env=env))
    for n in (1000, 10000):
        for name, s in (("narrow-louds", 0.01), ("marisa-trie", 0.02)):
            recs.append(_record(kind="build", backend=name, sweep="library_size", env=env,
                                config={"num_keywords": n}, metrics={"build_s": s * n / 1000, "bytes": 7 * n,
                                                                     "bytes_per_keyword": 7.0}))
    for b in (10, 100):
        for mode, p in (("constrained", 0.5), ("unconstrained+filter", 0.3)):
            recs.append(_record(kind="synthetic-quality", backend="numpy", env=env,
                                config={"beam_width": b, "mode": mode},
                                metrics={"precision@10": p, "recall@10": p / 2}))
    src = tmp_path / "results.jsonl"
    append_records(src, recs)
    out = tmp_path / "reports" / "small"
    md = build_report([src], out).read_text()
    for fig in ("latency_vs_beam", "speedup_vs_beam", "build_vs_marisa", "quality_vs_beam"):
        assert (out / f"{fig}.png").stat().st_size > 0 and (out / f"{fig}.svg").stat().st_size > 0
        assert f"{fig}.png" in md
    assert "## Environment" in md and env["cpu"] in md
    assert "no GPU here" in md and "**error**" in md
    assert "anchors" not in md and "outside this repository" not in md  # only what the records measured
    assert "arXiv:2607.10044" in md
    assert "flashtrie bench beam" in md and "## Reproduce" in md
    assert "precision@10" in md
    assert "Every measured case returned status `ok`" not in md


def test_synthetic_quality_sweep_writes_its_own_kind() -> None:
    from flashtrie.harness.quality import quality_sweep
    from flashtrie.harness.suites import SUITES, suite_of
    from flashtrie.harness.workloads import Loaded

    kws, props = _random_case(2)
    workload = Loaded(props, [np.array([0, 1, 2], np.int64)] * props.shape[0], {})
    recs = quality_sweep(kws, workload, RefSearcher(kws), [2, 4], [1, 2], make_record=Record, progress=False)
    assert [(r.kind, r.config["beam_width"], r.config["mode"]) for r in recs] == [
        ("synthetic-quality", b, m) for b in (2, 4) for m in ("constrained", "unconstrained+filter")]
    assert all(r.status == "ok" and "precision@2" in r.metrics and suite_of(r) is SUITES["search"] for r in recs)


def test_report_status_lists_a_mismatch(tmp_path: Path) -> None:
    env = envmod.snapshot(["flashtrie", "bench", "beam"])
    recs = [_record(backend="numpy", env=env, config={"beam_width": 4, "batch_size": 1, "K": 4},
                    metrics={"mean_ms": 1.0}),
            _record(backend="gpu", status="mismatch", message="differs from numpy at query 3", env=env,
                    config={"beam_width": 4, "batch_size": 1, "K": 4}, metrics={"mean_ms": 0.1})]
    src = tmp_path / "r.jsonl"
    append_records(src, recs)
    md = build_report([src], tmp_path / "rep").read_text()
    status = md.split("## Status")[1].split("## Environment")[0]
    assert "differs from numpy at query 3" in status and "mismatch" in status
    assert "all backends agreed exactly" not in status
    assert command_text(["/usr/bin/flashtrie", "demo", "--beam", "10"]) == "flashtrie demo --beam 10"


# ------------------------------------------------------------------------------- simplified helpers
def test_compare_results_locates_what_first_difference_reports() -> None:
    from flashtrie.harness.parity import BackendOutcome, ParityReport

    kws, props = _random_case(3, n=200, vocab=6, q=3, t=4, k=6)
    base = RefSearcher(kws).search(props, SearchConfig(beam_width=4, max_results=100))
    q = int(np.argmax(base.num_results))
    n = int(base.num_results[q])
    assert 0 < n < base.shape[1], "the case needs a query with results and padding"

    def changed(**arrays: np.ndarray) -> SearchResult:
        parts = {f: getattr(base, f).copy() for f in ("keyword_ids", "scores", "norm_scores", "lengths",
                                                      "num_results")}
        parts.update(arrays)
        return SearchResult(**parts)

    assert compare_results(base, changed()) is None
    ids = base.keyword_ids.copy()
    ids[q, 0] += 1000
    m = compare_results(base, changed(keyword_ids=ids))
    assert m is not None and (m.query, m.rank, m.field) == (q, 0, "keyword_ids")
    assert m.detail == base.first_difference(changed(keyword_ids=ids))
    assert m.left == base.query(q)[0] and m.right[0] == m.left[0] + 1000
    norm = base.norm_scores.copy()
    norm[q, n - 1] = np.float32(-0.0) if norm[q, n - 1] == 0 else -norm[q, n - 1]
    m = compare_results(base, changed(norm_scores=norm))
    assert m is not None and (m.query, m.rank, m.field) == (q, n - 1, "norm_scores")  # float32 bits, even ±0
    zero = base.scores.copy()
    zero[q, 0] = np.float32(0.0)
    plus = changed(scores=zero)
    zero = zero.copy()
    zero[q, 0] = np.float32(-0.0)
    m = compare_results(plus, changed(scores=zero))  # equal as floats, different as float32 bits
    assert m is not None and (m.query, m.rank, m.field) == (q, 0, "scores")
    m = compare_results(base, SearchResult.empty(base.shape[0], base.shape[1] + 1))
    assert m is not None and m.field == "shape" and m.query is None and "shapes differ" in m.detail
    lengths = base.lengths.copy()
    lengths[q, -1] = 7  # a padding column only: every entry agrees
    m = compare_results(base, changed(lengths=lengths))
    assert m is not None and (m.query, m.rank, m.field) == (q, base.shape[1] - 1, "padding")
    assert m.detail.startswith(f"query {q}, rank {base.shape[1] - 1}: padding")
    rep = ParityReport("a", [BackendOutcome("a", base), BackendOutcome("b", base, mismatch=m)], base.shape[0])
    assert f"b          MISMATCH at query {q}, rank {base.shape[1] - 1} (padding)" in rep.summary()


def test_find_class_and_relevant_sets() -> None:
    from flashtrie.harness.backends import find_class
    from flashtrie.harness.workloads import Loaded, relevant_sets

    assert find_class("flashtrie.reference_cpu", "NumpySearcher") is NumpySearcher
    with pytest.raises(ImportError, match="has no Nope"):
        find_class("flashtrie.reference_cpu", "Nope")
    _, props = _random_case(1)
    rel = relevant_sets(Loaded(props, [np.array([3, 1], np.int32), np.array([], np.int64)], {}))
    assert [r.tolist() for r in rel] == [[3, 1], []] and all(r.dtype == np.int64 for r in rel)
    assert relevant_sets(Loaded(props, None, {})) is None


def test_records_store_minus_inf_thresholds(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    append_record(path, _record(config={"beam_width": 4, "token_threshold": -math.inf,
                                        "score_threshold": np.float32(-np.inf)},
                                metrics={"mean_ms": 1.0, "nan": float("nan")}, message=None))
    line = path.read_text()
    json.loads(line, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert '"token_threshold":"-inf"' in line and '"score_threshold":"-inf"' in line
    (rec,) = read_records(path)
    assert rec.config["token_threshold"] == -math.inf and rec.config["score_threshold"] == -math.inf
    assert math.isnan(rec.metrics["nan"]) and rec.command == ["flashtrie", "bench", "beam"]


def test_figures_are_written_atomically(tmp_path: Path) -> None:
    from flashtrie.harness import plots
    from matplotlib.figure import Figure

    fig = Figure()
    fig.add_subplot(1, 1, 1).plot([1, 2], [3, 4])
    paths = plots.save_figure(fig, tmp_path, "ok")
    assert [p.name for p in paths] == ["ok.png", "ok.svg"] and all(p.stat().st_size > 0 for p in paths)
    assert paths[0].read_bytes().startswith(b"\x89PNG") and b"<svg" in paths[1].read_bytes()
    (tmp_path / "crash.png").write_bytes(b"old figure")

    def half_then_crash(f, **kw):
        f.write(b"half a figure")
        raise RuntimeError("disk full")

    fig.savefig = half_then_crash
    with pytest.raises(RuntimeError, match="disk full"):
        plots.save_figure(fig, tmp_path, "crash")
    assert (tmp_path / "crash.png").read_bytes() == b"old figure"  # untouched, never half written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crash.png", "ok.png", "ok.svg"]  # no temporaries


def test_build_records_carry_their_sweep_and_bytes_per_unique_keyword() -> None:
    pytest.importorskip("marisa_trie")
    from flashtrie.harness.sweep import SweepContext, sweep_build

    kws = KeywordSet.from_sequences([[1, 2], [1, 3], [4], [1, 2], [4], [5, 6, 7]])  # 6 keywords, 4 unique
    ctx = SweepContext(progress=False)
    recs = sweep_build(ctx, [(kws, {"source": "test"})])
    assert {r.sweep for r in recs} == {"build"} and {r.backend for r in recs} == {"narrow-louds", "marisa-trie"}
    for r in recs:
        assert r.status == "ok" and r.metrics["unique_keywords"] == 4 and r.config["num_keywords"] == 6
        assert r.metrics["bytes_per_keyword"] == r.metrics["bytes"] / 4
    ours = next(r for r in recs if r.backend == "narrow-louds")
    idx = NarrowLoudsIndex.build(kws)
    assert idx.stats()["unique_keywords"] == 4  # the count stats() divides by
    assert {r.sweep for r in sweep_build(ctx, [(kws, {})], sweep="library_size")} == {"library_size"}
    assert ours.metrics["nodes"] == idx.num_nodes


def test_report_lists_every_build_run(tmp_path: Path) -> None:
    def build(run: str, ts: str, sweep: str, cmd: str, name: str, s: float, size: int) -> Record:
        return _record(kind="build", backend=name, sweep=sweep, run_id=run, timestamp=ts,
                       command=["flashtrie", "bench", cmd], config={"num_keywords": 1000},
                       workload={"num_keywords": 1000},
                       metrics={"build_s": s, "bytes": size, "bytes_per_keyword": size / 1000,
                                "unique_keywords": 800})

    recs = [  # one size measured by two runs that disagree; the older records are labelled the old way
        build("oldbuildrun1", "2026-01-01T00:00:00+00:00", "library_size", "build", "narrow-louds", 1.0, 8000),
        build("oldbuildrun1", "2026-01-01T00:00:00+00:00", "library_size", "build", "marisa-trie", 2.0, 4000),
        build("sizerun00002", "2026-01-02T00:00:00+00:00", "library_size", "size", "narrow-louds", 5.0, 8000),
        build("sizerun00002", "2026-01-02T00:00:00+00:00", "library_size", "size", "marisa-trie", 2.5, 4000),
    ]
    src = tmp_path / "build.jsonl"
    append_records(src, recs)
    md = build_report([src, src], tmp_path / "rep").read_text()  # a file given twice is listed once
    table = md.split("## Build time and size vs marisa-trie")[1].split("\n\n")[2].splitlines()
    assert len(table) == 2 + 4, table
    assert sum("oldbuildrun1" in row and "| build |" in row for row in table) == 2
    assert sum("sizerun00002" in row and "| library_size |" in row for row in table) == 2
    assert [row.split(" | ")[5] for row in table[2:]] == ["2", "1", "2.5", "5"]  # both runs' build seconds
    assert {row.split(" | ")[8] for row in table[2:]} == {"10", "5"}  # bytes / 800 unique keywords
    assert "unique* keywords" in md and "1,000 keywords (2 runs)" in md


def test_git_state_prefers_the_named_commit(monkeypatch, tmp_path):
    from flashtrie.harness.env import git_state

    monkeypatch.setenv("FLASHTRIE_COMMIT", "abc1234")
    assert git_state() == {"commit": "abc1234", "dirty": None, "source": "FLASHTRIE_COMMIT"}
    monkeypatch.delenv("FLASHTRIE_COMMIT")
    assert git_state(tmp_path) == {"commit": None, "dirty": None}  # not a checkout


def test_git_state_dirty_ignores_generated_reports(monkeypatch, tmp_path):
    import shutil
    import subprocess

    from flashtrie.harness.env import git_state

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    monkeypatch.delenv("FLASHTRIE_COMMIT", raising=False)

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "r.jsonl").write_text("a\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    assert git_state(tmp_path)["dirty"] is False
    (tmp_path / "reports" / "r.jsonl").write_text("b\n")  # a report run rewrites its records
    assert git_state(tmp_path)["dirty"] is False
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_state(tmp_path)["dirty"] is True


class _Slow:
    """A searcher whose calls take at least ``seconds`` (sleeps), for the skip rule."""

    name = "numpy"

    def __init__(self, inner: Any, seconds: float) -> None:
        self.inner, self.seconds = inner, seconds

    def search(self, proposals: Any, config: Any, prefixes: Any = None) -> Any:
        time.sleep(self.seconds)
        return self.inner.search(proposals, config, prefixes)


@pytest.mark.parametrize("warmup", [0, 2])
def test_backend_over_budget_is_skipped_from_a_measured_call(warmup: int) -> None:
    from flashtrie.harness.sweep import SweepContext, measure_case
    from flashtrie.reference_cpu import NumpySearcher

    kws = KeywordSet.from_sequences([[1, 2], [1, 3], [4]])
    idx = NarrowLoudsIndex.build(kws)
    props = Proposals(np.array([[[1, 4], [2, 3]]]), np.log(np.array([[[0.6, 0.4], [0.5, 0.5]]], dtype=np.float32)))
    cfg = SearchConfig(beam_width=2)
    batches = [props] * 4
    # one call sleeps 20 ms: 4 calls need >= 80 ms, over skip_factor x max_seconds = 1 x 10 ms
    ctx = SweepContext(warmup=warmup, repeats=1, max_seconds=0.01, skip_factor=1.0, progress=False)
    slow = {"numpy": _Slow(NumpySearcher(idx), 0.02)}
    (rec,) = measure_case(ctx, slow, batches, cfg, sweep="beam_width", workload={}, extra_config={},
                          workload_stats={})
    assert rec.status == "skipped" and "one call took" in rec.message and "--max-seconds" in rec.message
    # a budget that fits is timed: over 1 x 60 s
    ctx = SweepContext(warmup=warmup, repeats=1, max_seconds=60.0, skip_factor=1.0, progress=False)
    (rec,) = measure_case(ctx, slow, batches, cfg, sweep="beam_width", workload={}, extra_config={},
                          workload_stats={})
    assert rec.status == "ok" and rec.metrics["samples"] == 4
    assert rec.metrics["timing"] == {"warmup": warmup, "repeats": 1, "max_seconds": 60.0}


def test_report_names_the_run_of_each_row_when_runs_mix(tmp_path: Path) -> None:
    from flashtrie.harness.report import render_markdown
    from flashtrie.harness.run_context import RunContext
    from flashtrie.harness.sweep import SweepContext, measure_case
    from flashtrie.reference_cpu import NumpySearcher

    kws = KeywordSet.from_sequences([[1, 2], [1, 3], [4]])
    idx = NarrowLoudsIndex.build(kws)
    props = Proposals(np.array([[[1, 4], [2, 3]]]), np.log(np.array([[[0.6, 0.4], [0.5, 0.5]]], dtype=np.float32)))
    recs = []
    for run, backends in (("run-a", ["numpy", "other"]), ("run-b", ["numpy"])):
        ctx = SweepContext(run=RunContext(run_id=run), warmup=0, repeats=1, progress=False)
        s = {b: NumpySearcher(idx) for b in backends}
        recs += measure_case(ctx, s, [props], SearchConfig(beam_width=2), sweep="beam_width",
                             workload={"preset": "x"}, extra_config={}, workload_stats={})
    md = render_markdown(recs, ["r.jsonl"], tmp_path, {}, "t")
    table = md.split("## Latency vs beam width")[1]
    assert "| run |" in table and "run-a" in table and "run-b" in table


def test_case_metrics_from_fixed_timings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Speed-ups, per-query time and throughput come from the timings as defined (no clock involved)."""
    from flashtrie.harness import sweep
    from flashtrie.harness.timing import Timing
    from flashtrie.reference_cpu import NumpySearcher

    kws = KeywordSet.from_sequences([[1, 2], [1, 3], [4]])
    idx = NarrowLoudsIndex.build(kws)
    props = Proposals(np.array([[[1, 4], [2, 3]]] * 4), np.zeros((4, 2, 2), np.float32))
    cfg = SearchConfig(beam_width=2)
    ms = {"marisa": 8.0, "numpy": 2.0}

    def fake(searcher, batches, config, ctx):  # noqa: ANN001, ANN202
        res = searcher.search(batches[0], config)
        return Timing(wall_ms=[ms[searcher.label]] * 3, device_ms=[], warmup=0), res

    monkeypatch.setattr(sweep, "_time_backend", fake)
    searchers = {}
    for name in ms:
        s = NumpySearcher(idx)
        s.label = name
        searchers[name] = s
    ctx = sweep.SweepContext(progress=False)
    recs = {r.backend: r for r in sweep.measure_case(ctx, searchers, [props], cfg, sweep="beam_width", workload={},
                                                     extra_config={}, workload_stats={})}
    m = recs["numpy"].metrics
    assert m["mean_ms"] == 2.0 and m["per_query_ms"] == 0.5 and m["throughput_qps"] == 2000.0
    assert m["speedup_vs_marisa"] == 4.0 and recs["marisa"].metrics["speedup_vs_marisa"] == 1.0


def test_skip_rule_counts_every_call_of_a_pass() -> None:
    """One call fits the budget, a whole pass does not: skipped (sleeps decide only which side of a 10x margin)."""
    from flashtrie.harness.sweep import SweepContext, measure_case
    from flashtrie.reference_cpu import NumpySearcher

    kws = KeywordSet.from_sequences([[1, 2], [1, 3], [4]])
    idx = NarrowLoudsIndex.build(kws)
    props = Proposals(np.array([[[1, 4], [2, 3]]]), np.log(np.array([[[0.6, 0.4], [0.5, 0.5]]], dtype=np.float32)))
    # a call sleeps 20 ms, under the 1 x 0.5 s budget; 100 calls need >= 2 s, four times over it
    ctx = SweepContext(warmup=1, repeats=1, max_seconds=0.5, skip_factor=1.0, progress=False)
    (rec,) = measure_case(ctx, {"numpy": _Slow(NumpySearcher(idx), 0.02)}, [props] * 100, SearchConfig(beam_width=2),
                          sweep="beam_width", workload={}, extra_config={}, workload_stats={})
    assert rec.status == "skipped" and "100 calls" in rec.message


# ------------------------------------------------------------------------------------- figures (#11)
def _captured_figures(monkeypatch: pytest.MonkeyPatch, records: list[Record], tmp_path: Path) -> dict[str, Any]:
    """Draw every figure of ``records``; {name: matplotlib Figure} as `save_figure` received them (ticks fixed)."""
    from flashtrie.harness import plots

    figs: dict[str, Any] = {}
    real = plots.save_figure

    def keep(fig: Any, out_dir: Path, name: str) -> list[Path]:
        paths = real(fig, out_dir, name)
        figs[name] = fig
        return paths

    monkeypatch.setattr(plots, "save_figure", keep)
    plots.plot_all(records, tmp_path)
    return figs


def _labels(axis: Any) -> list[str]:
    return [t.get_text() for t in axis.get_majorticklabels() if t.get_text()]


def test_figures_have_plain_ticks_at_the_measured_values(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    recs = []
    for b, ms in ((1, 0.6), (10, 0.7), (100, 0.8)):  # less than a decade on y: matplotlib writes 6×10⁻¹ there
        recs.append(_record(config={"beam_width": b, "batch_size": 1, "K": b},
                            metrics={"mean_ms": ms, "p99_ms": ms * 1.1}))
    for bs, qps in ((1, 900.0), (4, 2500.0), (16, 7000.0)):
        recs.append(_record(kind="throughput", sweep="batch_size", config={"beam_width": 100, "batch_size": bs},
                            workload={"preset": "dense", "num_keywords": 10_000_000, "shape_QTK": [16, 8, 100]},
                            metrics={"throughput_qps": qps, "mean_ms": 1.0}))
    recs += [_record(kind="build", backend=name, sweep="build", config={"num_keywords": 1_000_000},
                     metrics={"build_s": s, "bytes": 7_000_000, "unique_keywords": 1_000_000})
             for name, s in (("narrow-louds", 0.3), ("marisa-trie", 0.8))]
    figs = _captured_figures(monkeypatch, recs, tmp_path)
    ax = figs["latency_vs_beam"].axes[0]
    assert _labels(ax.xaxis) == ["1", "10", "100"]
    ys = _labels(ax.yaxis)
    assert len(ys) >= 2 and not any("10^" in y or "×" in y or "$" in y for y in ys), ys
    tax = figs["throughput_vs_batch"].axes[0]
    assert _labels(tax.xaxis) == ["1", "4", "16"]
    assert tax.get_title() == "dense, 10,000,000 keywords"  # the workload subtitle, as on the latency chart
    assert all("$" not in y for y in _labels(tax.yaxis))
    bax = figs["build_vs_marisa"].axes[0]
    assert bax.get_xscale() == "linear" and not bax.get_lines() and len(bax.patches) == 2  # bars, not lone points
    assert "1M keywords" in figs["build_vs_marisa"].get_suptitle()


def test_plain_number() -> None:
    from flashtrie.harness.plots import plain_number

    assert [plain_number(v) for v in (0.6, 0.05, 25, 1000, 1500, 10_000_000, 123456)] == \
        ["0.6", "0.05", "25", "1k", "1.5k", "10M", "123,456"]


def test_report_workloads_section_is_a_table(tmp_path: Path) -> None:
    from flashtrie.harness.report import render_markdown

    w = {"preset": "dense", "num_queries": 16, "num_steps": 8, "proposals_per_step": 1000, "seed": 3,
         "density": 0.95, "shape_QTK": [16, 8, 100], "num_keywords": 1000,
         "keywords": {"source": "kw.npz", "generator": {"n": 1000, "seed": 5}}}
    md = render_markdown([_record(workload=w)], ["r.jsonl"], tmp_path, {}, "t")
    section = md.split("## Workloads")[1].split("## Reproduce")[0]
    assert "```" not in section
    assert "| library | keywords | Q × T × K | preset | Q | T | K | seed | other parameters |" in section
    assert "| kw.npz, n 1000, seed 5 | 1,000 | 16 × 8 × 100 | dense | 16 | 8 | 1,000 | 3 | density = 0.95 |" in section


def test_case_records_carry_device_time_host_breakdown_and_backend_costs() -> None:
    """What gpu_impl/bench_gpu.py used to print lands in the records of `flashtrie bench` (a stand-in GPU)."""
    from flashtrie.harness.sweep import SweepContext, measure_case

    class FakeGpu(_Counting):
        arch, compile_seconds, upload_seconds = "sm_90", 1.5, 0.25

    props = Proposals(np.array([[[1, 2]], [[3, 4]]]), np.zeros((2, 1, 2), np.float32))
    ctx = SweepContext(warmup=0, repeats=2, progress=False)
    (rec,) = measure_case(ctx, {"gpu": FakeGpu()}, [props[0:1], props[1:2]], SearchConfig(2), sweep="beam_width",
                          workload={}, extra_config={}, workload_stats={})
    m = rec.metrics
    assert rec.status == "ok" and m["device_mean_ms"] == 0.25 and m["samples"] == 4
    assert m["host_prep_ms"] == 0.5 and m["host_wait_ms"] == pytest.approx(2.5)
    assert (m["backend_arch"], m["backend_compile_seconds"], m["backend_upload_seconds"]) == ("sm_90", 1.5, 0.25)
    assert rec.config["beam_width"] == 2 and rec.config["max_results"] == 2  # SearchConfig.to_dict


def test_setup_lines_name_the_marisa_trie_only_for_marisa() -> None:
    from flashtrie.harness.backends import setup_text

    assert setup_text("marisa") == "building the marisa trie for backend marisa"
    assert setup_text("marisa-lookup") == "building the marisa trie for backend marisa-lookup"
    assert setup_text("oracle") == "setting up backend oracle"  # built from the keywords, but no marisa trie
    assert setup_text("numpy") == "setting up backend numpy"
