"""The brute-force oracle against small examples worked out by hand from docs/semantics.md."""

from __future__ import annotations

import math

import numpy as np
import pytest
from oracle import length_norm, oracle_search

from flashtrie import KeywordSet, Proposals, SearchConfig, SearchResult

PAD = 2**32 - 1


def props(*queries: list[list[tuple[int, float]]]) -> Proposals:
    """Proposals from per-query lists of rows of (token, logprob); short rows are padded."""
    steps = max(len(q) for q in queries)
    k = max((len(row) for q in queries for row in q), default=0)
    tokens = np.full((len(queries), steps, k), PAD, dtype=np.int64)
    logprobs = np.full((len(queries), steps, k), -np.inf, dtype=np.float32)
    for qi, q in enumerate(queries):
        for t, row in enumerate(q):
            for j, (x, lp) in enumerate(row):
                tokens[qi, t, j] = x
                logprobs[qi, t, j] = lp
    return Proposals(tokens, logprobs)


def ids(res: SearchResult, q: int = 0) -> list[int]:
    return [r[0] for r in res.query(q)]


def scores(res: SearchResult, q: int = 0) -> list[float]:
    return [r[1] for r in res.query(q)]


KW = KeywordSet.from_sequences([[1], [1, 2], [1, 3], [2], [2, 4]])
ROWS = [[(1, -1.0), (2, -1.0), (9, -0.5)], [(2, -0.5), (3, -0.5), (4, 0.0)]]


def test_ties_break_on_token_then_rank() -> None:
    # Step 0: [1] and [2] tie at -1; B = 1 keeps [1] (smaller token).  Step 1 from [1]: [1,2], [1,3] at -1.5.
    res = oracle_search(KW, props(ROWS), SearchConfig(beam_width=1, max_results=4))
    assert ids(res) == [0, 3, 1, 2]
    assert scores(res) == [-1.0, -1.0, -1.5, -1.5]
    assert [r[3] for r in res.query(0)] == [1, 1, 2, 2]
    # B = 2: [2] (rank 1) also grows, to [2,4] at -1.0, which beats the step-1 candidates of [1].
    res = oracle_search(KW, props(ROWS), SearchConfig(beam_width=2, max_results=5))
    assert ids(res) == [0, 3, 4, 1, 2]
    assert scores(res) == [-1.0, -1.0, -1.0, -1.5, -1.5]


def test_equal_scores_order_by_parent_rank() -> None:
    kw = KeywordSet.from_sequences([[2, 7], [1, 7]])
    res = oracle_search(kw, props([[(2, -1.0), (1, -1.0)], [(7, -1.0)]]), SearchConfig(beam_width=2))
    assert ids(res) == [1, 0]  # [1] has rank 0 (smaller token), so [1, 7] comes first
    assert scores(res) == [-2.0, -2.0]


def test_pool_ties_break_on_step() -> None:
    kw = KeywordSet.from_sequences([[3, 1], [5]])
    # [5] at step 0 scores -1 by itself; [3, 1] reaches -1 at step 1: the earlier step wins the tie.
    res = oracle_search(kw, props([[(3, -0.5), (5, -1.0)], [(1, -0.5)]]), SearchConfig(beam_width=2))
    assert ids(res) == [1, 0]


def test_default_results_is_beam_and_padding() -> None:
    res = oracle_search(KW, props(ROWS), SearchConfig(beam_width=3))
    assert res.shape == (1, 3)
    kw = KeywordSet.from_sequences([[8]])
    res = oracle_search(kw, props([[(8, -0.25)]]), SearchConfig(beam_width=1, max_results=3))
    assert res.keyword_ids.tolist() == [[0, -1, -1]]
    assert res.scores[0, 1:].tolist() == [-math.inf, -math.inf]
    assert res.norm_scores[0, 1:].tolist() == [-math.inf, -math.inf]
    assert res.lengths.tolist() == [[1, 0, 0]]
    assert res.num_results.tolist() == [1]


def test_leaves_leave_the_frontier() -> None:
    kw = KeywordSet.from_sequences([[1], [2, 3]])
    # [1] is better but a leaf: it goes to the pool only; B = 1 keeps the worse [2], which finds [2, 3].
    res = oracle_search(kw, props([[(1, 0.0), (2, -2.0)], [(3, -1.0)]]), SearchConfig(beam_width=1, max_results=2))
    assert ids(res) == [0, 1]
    assert scores(res) == [0.0, -3.0]


def test_keyword_that_is_a_prefix_is_pool_and_frontier() -> None:
    kw = KeywordSet.from_sequences([[5], [5, 6]])
    res = oracle_search(kw, props([[(5, -1.0)], [(6, -1.0)]]), SearchConfig(beam_width=1, max_results=2))
    assert ids(res) == [0, 1]
    assert scores(res) == [-1.0, -2.0]
    assert [r[3] for r in res.query(0)] == [1, 2]


def test_duplicates_keep_smallest_id() -> None:
    kw = KeywordSet.from_sequences([[4], [7], [4]])
    res = oracle_search(kw, props([[(4, -1.0)]]), SearchConfig(beam_width=2))
    assert ids(res) == [0]


def test_token_threshold_is_inclusive_and_float64() -> None:
    kw = KeywordSet.from_sequences([[1], [2]])
    p = props([[(1, -0.5), (2, -0.7)]])  # -0.7 is stored as fl32(-0.7) = -0.699999988...
    def run(tau: float) -> list[int]:
        return ids(oracle_search(kw, p, SearchConfig(beam_width=2, token_threshold=tau)))

    assert run(-0.75) == [0, 1]
    assert run(-0.7) == [0, 1]  # fl32(-0.7) > -0.7: kept
    assert run(-0.6999999) == [0]  # fl32(-0.7) ≤ -0.6999999: skipped
    assert run(-0.5000001) == [0]
    assert run(-0.5) == []  # ℓ ≤ τ is skipped
    assert run(0.0) == []


def test_score_threshold_is_inclusive_and_float64() -> None:
    kw = KeywordSet.from_sequences([[1, 1], [1, 2]])
    p = props([[(1, -0.7)], [(1, -0.7), (2, -0.5)]])
    s11 = float(np.float32(np.float32(-0.7) + np.float32(-0.7)))  # -1.3999999761...
    assert s11 > -1.4
    res = oracle_search(kw, p, SearchConfig(beam_width=1, max_results=2, score_threshold=-1.4))
    assert ids(res) == [1, 0] and scores(res)[1] == s11
    res = oracle_search(kw, p, SearchConfig(beam_width=1, max_results=2, score_threshold=s11))
    assert ids(res) == [1]  # s ≤ σ is dropped
    # A dropped candidate does not grow either: σ at the step-0 score empties the frontier.
    res = oracle_search(kw, p, SearchConfig(beam_width=1, score_threshold=float(np.float32(-0.7))))
    assert ids(res) == []


def test_overflow_to_minus_inf_is_dropped() -> None:
    kw = KeywordSet.from_sequences([[1, 2]])
    res = oracle_search(kw, props([[(1, -3e38)], [(2, -3e38)]]), SearchConfig(beam_width=1))
    assert ids(res) == []  # s = -inf ≤ σ = -inf


def test_minus_inf_logprob_is_skipped() -> None:
    kw = KeywordSet.from_sequences([[1]])
    assert ids(oracle_search(kw, props([[(1, -math.inf)]]), SearchConfig(beam_width=1))) == []


def test_length_norm_reorders() -> None:
    kw = KeywordSet.from_sequences([[1], [2, 3, 4]])
    p = props([[(1, -1.0), (2, -0.5)], [(3, -0.5)], [(4, -0.25)]])
    res = oracle_search(kw, p, SearchConfig(beam_width=2, length_norm=0.0))
    assert ids(res) == [0, 1]
    res = oracle_search(kw, p, SearchConfig(beam_width=2, length_norm=1.0))
    assert ids(res) == [1, 0]  # n = -1.25 * 6/8 = -0.9375 beats -1 * 6/6
    assert [r[2] for r in res.query(0)] == [-0.9375, -1.0]
    assert scores(res) == [-1.25, -1.0]
    res = oracle_search(kw, p, SearchConfig(beam_width=2, length_norm=2.0))
    assert [r[2] for r in res.query(0)] == [-0.703125, -1.0]


def test_length_norm_table_values() -> None:
    assert length_norm(0.0, 7) == np.float32(1.0)
    assert length_norm(1.0, 1) == np.float32(1.0)
    assert length_norm(0.5, 3) == np.float32(math.sqrt(0.75))
    assert length_norm(2.0, 4) == np.float32(36.0 / 81.0)


def test_negative_zero_equals_positive_zero() -> None:
    kw = KeywordSet.from_sequences([[1, 2, 3, 4], [1, 2, 3, 5]])
    # [1,2,3,4]: s = -1.4e-45 (smallest subnormal), n = s * (6/9)**2 rounds to -0.0.
    # [1,2,3,5]: s = n = +0.0.  -0.0 == +0.0, so the tie breaks on the token: 4 first.
    p = props([[(1, 0.0)], [(2, 0.0)], [(3, 0.0)], [(5, 0.0), (4, -1e-45)]])
    res = oracle_search(kw, p, SearchConfig(beam_width=1, max_results=2, length_norm=2.0))
    assert ids(res) == [0, 1]
    assert res.scores[0, 0] == np.float32(-1e-45) and res.scores[0, 0] < 0  # subnormal kept
    assert res.norm_scores[0, 0] == 0 and np.signbit(res.norm_scores[0, 0])
    assert res.norm_scores[0, 1] == 0 and not np.signbit(res.norm_scores[0, 1])


def test_forced_prefixes() -> None:
    kw = KeywordSet.from_sequences([[1, 2], [1, 2, 3], [4]])
    rows = [[(2, -1.0), (3, -0.5)], [(3, -1.0)]]
    p = props(rows, rows, rows, rows, rows, rows)
    res = oracle_search(kw, p, SearchConfig(beam_width=2), prefixes=[[1], [1, 2], [4], [9], [1, 2, 3], []])
    assert res.query(0) == [(0, -1.0, -1.0, 2), (1, -2.0, -2.0, 3)]  # |c| counts the prefix
    assert res.query(1) == [(1, -0.5, -0.5, 3)]  # the prefix [1, 2] itself is never a result
    assert res.query(2) == []  # a leaf prefix: nothing grows
    assert res.query(3) == []  # not in the trie
    assert res.query(4) == []
    assert res.query(5) == []  # from the root, step 0 proposes 2 and 3: no keyword starts with them


def test_single_step_and_beam_larger_than_keyword_set() -> None:
    kw = KeywordSet.from_sequences([[3], [1], [2, 2]])
    p = props([[(1, -0.25), (2, -0.5), (3, -0.25)]])
    res = oracle_search(kw, p, SearchConfig(beam_width=50))
    assert res.shape == (1, 50)
    assert ids(res) == [1, 0]  # tie on -0.25: token 1 before token 3; [2] is not a keyword


def test_batch_equals_per_query() -> None:
    rows2 = [[(2, -0.25)], [(4, -0.25)]]
    p = props(ROWS, rows2)
    cfg = SearchConfig(beam_width=2, max_results=3)
    res = oracle_search(KW, p, cfg)
    for q in range(2):
        single = oracle_search(KW, p[q], cfg)
        assert single.query(0) == res.query(q)


def test_zero_steps_or_proposals() -> None:
    kw = KeywordSet.from_sequences([[1]])
    cfg = SearchConfig(beam_width=1)
    assert oracle_search(kw, Proposals(np.zeros((2, 0, 3), np.int64), np.zeros((2, 0, 3), np.float32)),
                         cfg).num_results.tolist() == [0, 0]
    assert oracle_search(kw, Proposals(np.zeros((1, 2, 0), np.int64), np.zeros((1, 2, 0), np.float32)),
                         cfg).num_results.tolist() == [0]


@pytest.mark.parametrize("pad", [-1, PAD])
def test_padding_is_skipped(pad: int) -> None:
    kw = KeywordSet.from_sequences([[4294967294], [0]])
    p = Proposals(np.array([[[pad, 4294967294, 0]]], dtype=np.int64),
                  np.array([[[np.nan, -1.0, -2.0]]], dtype=np.float32))
    assert ids(oracle_search(kw, p, SearchConfig(beam_width=3))) == [0, 1]
