"""The search core: result assembly, the one comparison, stats, request / index checks, start states, limits."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashtrie import InputError, KeywordSet, NarrowLoudsIndex, Proposals, SearchConfig, SearchResult
from flashtrie.search_core import BackendLimits, StartStates, check_index, check_limits, check_request, start_states
from flashtrie.search_types import ResultDifference, SearchStats, result_difference


def _result(rows: list[list[tuple[int, float, float, int]]], r: int) -> SearchResult:
    q = [qi for qi, row in enumerate(rows) for _ in row]
    e = [x for row in rows for x in row]
    cols = list(zip(*e, strict=True)) if e else [[], [], [], []]
    return SearchResult.from_pool(len(rows), r, np.array(q, dtype=np.int64), np.array(cols[0], dtype=np.int64),
                                  np.array(cols[1], dtype=np.float32), np.array(cols[2], dtype=np.float32),
                                  np.array(cols[3], dtype=np.int32))


# ------------------------------------------------------------------------------------------ config
def test_config_to_dict_resolves_r_and_keeps_infinities() -> None:
    d = SearchConfig(beam_width=5).to_dict()
    assert d == {"beam_width": 5, "max_results": 5, "token_threshold": -math.inf, "score_threshold": -math.inf,
                 "length_norm": 0.0}
    d = SearchConfig(beam_width=5, max_results=2, token_threshold=-(10**400), score_threshold=-1,
                     length_norm=np.float32(0.5)).to_dict()
    assert d["max_results"] == 2 and d["token_threshold"] == -math.inf and d["score_threshold"] == -1.0
    assert all(type(d[k]) is float for k in ("token_threshold", "score_threshold", "length_norm"))


# ------------------------------------------------------------------------------------ from_pool, concat
def test_from_pool_places_entries_by_rank_and_pads() -> None:
    res = _result([[(4, -1.0, -0.5, 2), (1, -2.0, -1.0, 3)], [], [(0, -0.0, -0.0, 1)]], 3)
    assert res.shape == (3, 3)
    assert res.keyword_ids.tolist() == [[4, 1, -1], [-1, -1, -1], [0, -1, -1]]
    assert res.num_results.tolist() == [2, 0, 1]
    assert res.lengths.tolist() == [[2, 3, 0], [0, 0, 0], [1, 0, 0]]
    assert np.signbit(res.scores[2, 0]) and res.scores[0, 2] == -np.inf
    assert res.equals(_result([[(4, -1.0, -0.5, 2), (1, -2.0, -1.0, 3)], [], [(0, -0.0, -0.0, 1)]], 3))


def test_from_pool_refuses_overfull_or_unsorted_pools() -> None:
    with pytest.raises(InputError, match="query 0 has 3 entries, over R = 2"):
        _result([[(1, -1.0, -1.0, 1)] * 3], 2)
    one = np.ones(2)
    with pytest.raises(InputError, match="must be sorted"):
        SearchResult.from_pool(2, 2, np.array([1, 0]), one, one, one, one)
    with pytest.raises(InputError, match="must be sorted"):
        SearchResult.from_pool(3, 2, np.array([0, 2, 1, 2]), np.ones(4), np.ones(4), np.ones(4), np.ones(4))
    with pytest.raises(InputError, match=r"must be in \[0, 1\), got 0 .. 1"):
        SearchResult.from_pool(1, 2, np.array([0, 1]), one, one, one, one)


@given(st.lists(st.integers(0, 3), min_size=1, max_size=4), st.integers(1, 3))
def test_concat_stacks_queries_in_order(sizes: list[int], r: int) -> None:
    parts = [_result([[(10 * i + j, -float(j), -float(j), j + 1) for j in range(min(j_n, r))]
                      for j_n in range(n)], r) for i, n in enumerate(sizes)]
    whole = SearchResult.concat(parts)
    assert whole.shape == (sum(sizes), r)
    q = 0
    for p in parts:
        for pq in range(p.shape[0]):
            assert whole.query(q) == p.query(pq)
            q += 1


def test_concat_refuses_mixed_r_and_nothing() -> None:
    with pytest.raises(InputError, match="same number of columns R, got \\[2, 3\\]"):
        SearchResult.concat([SearchResult.empty(1, 2), SearchResult.empty(1, 3)])
    with pytest.raises(InputError, match="at least one"):
        SearchResult.concat([])


# ------------------------------------------------------------------------------------------ differences
def test_result_difference_fields_and_text() -> None:
    base = _result([[(4, -1.0, -0.5, 2), (1, -2.0, -1.0, 3)], [(0, 0.0, 0.0, 1)]], 3)
    assert result_difference(base, base) is None and base.first_difference(base) is None
    other = _result([[(4, -1.0, -0.5, 2), (2, -2.0, -1.0, 3)], [(0, 0.0, 0.0, 1)]], 3)
    d = result_difference(base, other)
    assert d == ResultDifference(0, 1, "keyword_ids", (1, -2.0, -1.0, 3), (2, -2.0, -1.0, 3))
    assert base.first_difference(other) == str(d) and str(d).startswith("query 0, rank 1: keyword_ids differ")
    minus = _result([[(4, -1.0, -0.5, 2), (1, -2.0, -1.0, 3)], [(0, -0.0, 0.0, 1)]], 3)
    d = result_difference(base, minus)  # -0.0 vs +0.0: the same float, different bits
    assert d is not None and (d.query, d.rank, d.field) == (1, 0, "scores")
    short = _result([[(4, -1.0, -0.5, 2)], [(0, 0.0, 0.0, 1)]], 3)
    d = result_difference(base, short)
    assert d is not None and (d.query, d.rank, d.field, d.right) == (0, 1, "num_results", "pad")
    assert d.left == (1, -2.0, -1.0, 3)
    pad = _result([[(4, -1.0, -0.5, 2), (1, -2.0, -1.0, 3)], [(0, 0.0, 0.0, 1)]], 3)
    pad.lengths[1, 2] = 7
    d = result_difference(base, pad)
    assert d is not None and (d.query, d.rank, d.field) == (1, 2, "padding") and d.detail == str(d)
    d = result_difference(base, SearchResult.empty(2, 4))
    assert d is not None and (d.query, d.field) == (None, "shape") and str(d) == "shapes differ: (2, 3) vs (2, 4)"


def test_parity_compare_results_is_result_difference() -> None:
    from flashtrie.harness.parity import Mismatch, compare_results

    a = _result([[(4, -1.0, -0.5, 2)]], 2)
    b = _result([[(5, -1.0, -0.5, 2)]], 2)
    assert Mismatch is ResultDifference and compare_results(a, b) == result_difference(a, b)


# ------------------------------------------------------------------------------------------------ stats
def test_search_stats_named_counters() -> None:
    st_ = SearchStats(backend="gpu", queries=2, beam_width=4, steps=2, steps_run=1,
                      counts={"frontier": np.array([4, 0]), "work_chunks": np.array([3, 0])})
    assert st_.has("frontier") and not st_.has("valid")
    assert st_.column("work_chunks").tolist() == [3, 0]
    with pytest.raises(InputError, match="the gpu backend does not count it; its counters: frontier, work_chunks"):
        st_.column("valid")
    assert st_.valid_fraction is None
    assert st_.beam_fill is not None and st_.beam_fill.tolist() == [0.5, 0.0]
    assert st_.to_dict()["counts"] == {"frontier": [4, 0], "work_chunks": [3, 0]}
    with pytest.raises(InputError, match="unknown counter 'bogus'"):
        SearchStats("numpy", 1, 1, 1, 1, {"bogus": np.zeros(1)})
    with pytest.raises(InputError, match=r"expected shape \(3,\)"):
        SearchStats("numpy", 1, 1, 3, 1, {"valid": np.zeros(2)})
    assert set(SearchStats.COLUMNS) <= set(SearchStats.FIELDS)


def test_numpy_stats_import_path_still_works() -> None:
    from flashtrie.reference_cpu.numpy_search import SearchStats as Old

    assert Old is SearchStats


# ------------------------------------------------------------------------------------------ request checks
def _props(q: int) -> Proposals:
    return Proposals(np.zeros((q, 1, 1), dtype=np.int64), np.zeros((q, 1, 1), dtype=np.float32))


@pytest.mark.parametrize("bad", [5, (p for p in [[1]]), iter([[1]]), {0: [1]}, "a", np.int64(3)])
def test_prefixes_that_are_not_a_sequence_are_refused_by_name(bad: object) -> None:
    with pytest.raises(InputError, match="^prefixes: expected None or a sequence"):
        check_request(_props(1), SearchConfig(beam_width=1), bad)


def test_check_request_arrays() -> None:
    got = check_request(_props(2), SearchConfig(beam_width=1), np.array([[1, 2], [3, 4]]))
    assert got is not None and [p.tolist() for p in got] == [[1, 2], [3, 4]]
    with pytest.raises(InputError, match="proposals: expected a flashtrie.Proposals, got tuple"):
        check_request((1, 2), SearchConfig(beam_width=1), None)
    with pytest.raises(InputError, match="config: expected a flashtrie.SearchConfig, got dict"):
        check_request(_props(1), {}, None)


def test_check_index() -> None:
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2]]))
    assert check_index(ix) is ix
    with pytest.raises(InputError, match="index: expected a flashtrie.NarrowLoudsIndex .*got KeywordSet"):
        check_index(KeywordSet.from_sequences([[1]]))


def test_start_states_walk_prefixes() -> None:
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2, 3, 4], [1, 5], [7]]))
    s = start_states(ix, None, 3)
    assert s.q.tolist() == [0, 1, 2] and s.node.tolist() == [0, 0, 0] and s.length.tolist() == [0, 0, 0]
    pref = check_request(_props(5), SearchConfig(beam_width=1), [[1, 2], [], [9], [7], [1, 2, 3, 4]])
    s = start_states(ix, pref, 5)
    assert isinstance(s, StartStates) and s.size == 4
    assert s.q.tolist() == [0, 1, 3, 4] and s.length.tolist() == [2, 0, 1, 4]  # [9] is absent: no entry
    for q, (node, off) in zip(s.q.tolist(), zip(s.node.tolist(), s.off.tolist(), strict=True), strict=True):
        want = ix.walk(pref[q]) if pref[q].size else (0, 0)
        assert (node, off) == want
    assert all(a.dtype == np.int64 for a in (s.q, s.node, s.off, s.length))
    assert start_states(ix, [np.array([9], dtype=np.uint32)], 1).size == 0


# ------------------------------------------------------------------------------------------------ limits
def test_check_limits_names_argument_value_and_limit() -> None:
    lim = BackendLimits(beam=8, results=8, proposals=16, steps=4, rows=100)
    check_limits("GPU", (10, 4, 16), SearchConfig(beam_width=8), lim)
    cases = [((1, 1, 1), SearchConfig(beam_width=9), "beam_width: 9 is over the GPU backend's limit 8"),
             ((1, 1, 1), SearchConfig(beam_width=2, max_results=9), "max_results: 9 is over"),
             ((1, 1, 17), SearchConfig(beam_width=2), r"K \(proposals per row\): 17 is over"),
             ((1, 5, 1), SearchConfig(beam_width=2), r"T \(steps\): 5 is over"),
             ((13, 4, 1), SearchConfig(beam_width=8), r"Q \(queries\): 13 queries with T=4, B=8, R=8 are over the "
                                                       r"GPU backend's limit of 12 per call")]
    for shape, cfg, msg in cases:
        with pytest.raises(InputError, match=msg):
            check_limits("GPU", shape, cfg, lim)
    check_limits("numpy", (10**6, 255, 65535), SearchConfig(beam_width=65535), BackendLimits())
