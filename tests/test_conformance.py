"""Backend conformance: every registered backend that can run here, on the same adversarial cases.

The backends come from the registry (`flashtrie.harness.backends.BACKENDS`: oracle, marisa, marisa-lookup,
numpy, gpu); one that is not available is skipped with the reason (the GPU one is marked ``gpu``).  Each
case is compared bit for bit (ids, order, float32 bits, lengths, padding) with the brute-force oracle
(`flashtrie.reference_cpu.oracle.oracle_search`, which shares no search code with the optimised
backends), or with a result worked out by hand from docs/semantics.md.  Backend-specific paths (threads
and parts, intersection paths, worker processes, device arrays) stay in the per-backend files.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from flashtrie.harness.backends import BACKENDS, availability, find_class
from hypothesis import given, settings
from oracle import OracleTrie, oracle_search
from strategies import rows_from_keywords, search_cases

from flashtrie import InputError, KeywordSet, NarrowLoudsIndex, Proposals, SearchConfig, SearchResult

PAD = 2**32 - 1
Make = Callable[[KeywordSet], Any]


def _param(name: str) -> Any:
    return pytest.param(name, id=name, marks=[pytest.mark.gpu] if name == "gpu" else [])


@pytest.fixture(scope="module", params=[_param(n) for n in BACKENDS])
def backend(request: pytest.FixtureRequest) -> tuple[str, Make]:
    """(name, make): ``make(keywords)`` builds the backend's searcher (from the keywords or their index)."""
    name = request.param
    why = availability(name)
    if why is not None:
        pytest.skip(f"{name}: {why}")
    spec = BACKENDS[name]
    cls = find_class(spec.package, spec.cls)
    options = dict(spec.options)

    def make(keywords: KeywordSet) -> Any:
        source = keywords if spec.needs == "keywords" else NarrowLoudsIndex.build(keywords)
        return cls(source, **options)

    return name, make


@pytest.fixture(scope="module")
def make(backend: tuple[str, Make]) -> Make:
    return backend[1]


def _ks(keywords: KeywordSet | list[list[int]]) -> KeywordSet:
    return keywords if isinstance(keywords, KeywordSet) else KeywordSet.from_sequences(keywords)


def assert_same(got: SearchResult, want: SearchResult) -> None:
    diff = got.first_difference(want)
    assert diff is None, diff


def check(make: Make, keywords: KeywordSet | list[list[int]], proposals: Proposals, config: SearchConfig,
          prefixes: list[list[int]] | None = None, *, searcher: Any = None,
          trie: OracleTrie | None = None) -> SearchResult:
    """The backend's result, asserted bit-identical to the oracle's."""
    ks = _ks(keywords)
    got = (searcher if searcher is not None else make(ks)).search(proposals, config, prefixes)
    assert_same(got, oracle_search(trie if trie is not None else ks, proposals, config, prefixes))
    return got


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


# ------------------------------------------------------------------------------------ random cases
@settings(max_examples=40)
@given(case=search_cases())
def test_matches_oracle(make: Make, case) -> None:
    keywords, proposals, config, prefixes = case
    check(make, keywords, proposals, config, prefixes)


@settings(max_examples=15)
@given(case=search_cases(max_queries=4, max_steps=6, max_k=8, max_keywords=25, max_length=6, max_beam=5))
def test_matches_oracle_bigger(make: Make, case) -> None:
    keywords, proposals, config, prefixes = case
    check(make, keywords, proposals, config, prefixes)


@settings(max_examples=15)
@given(case=search_cases(max_queries=4))
def test_batch_equals_per_query(make: Make, case) -> None:
    keywords, proposals, config, prefixes = case
    searcher = make(keywords)
    batch = searcher.search(proposals, config, prefixes)
    for q in range(proposals.num_queries):
        one = searcher.search(proposals[q], config, None if prefixes is None else [prefixes[q]])
        assert_same(one, SearchResult.concat([SearchResult(*(getattr(batch, f)[q:q + 1] for f in (
            "keyword_ids", "scores", "norm_scores", "lengths", "num_results")))]))


# ------------------------------------------------------------------------- hand-worked from the contract
KW = KeywordSet.from_sequences([[1], [1, 2], [1, 3], [2], [2, 4]])
ROWS = [[(1, -1.0), (2, -1.0), (9, -0.5)], [(2, -0.5), (3, -0.5), (4, 0.0)]]


def test_ties_break_on_token_then_rank(make: Make) -> None:
    # Step 0: [1] and [2] tie at -1; B = 1 keeps [1] (smaller token).  Step 1 from [1]: [1,2], [1,3] at -1.5.
    s = make(KW)
    res = check(make, KW, props(ROWS), SearchConfig(beam_width=1, max_results=4), searcher=s)
    assert ids(res) == [0, 3, 1, 2] and scores(res) == [-1.0, -1.0, -1.5, -1.5]
    assert [r[3] for r in res.query(0)] == [1, 1, 2, 2]
    # B = 2: [2] (rank 1) also grows, to [2,4] at -1.0, which beats the step-1 candidates of [1].
    res = check(make, KW, props(ROWS), SearchConfig(beam_width=2, max_results=5), searcher=s)
    assert ids(res) == [0, 3, 4, 1, 2] and scores(res) == [-1.0, -1.0, -1.0, -1.5, -1.5]


def test_equal_scores_order_by_parent_rank_and_pool_ties_by_step(make: Make) -> None:
    kw = KeywordSet.from_sequences([[2, 7], [1, 7]])
    res = check(make, kw, props([[(2, -1.0), (1, -1.0)], [(7, -1.0)]]), SearchConfig(beam_width=2))
    assert ids(res) == [1, 0]  # [1] has rank 0 (smaller token), so [1, 7] comes first
    kw = KeywordSet.from_sequences([[3, 1], [5]])
    # [5] at step 0 scores -1 by itself; [3, 1] reaches -1 at step 1: the earlier step wins the tie.
    res = check(make, kw, props([[(3, -0.5), (5, -1.0)], [(1, -0.5)]]), SearchConfig(beam_width=2))
    assert ids(res) == [1, 0]


def test_default_results_is_beam_and_padding(make: Make) -> None:
    assert check(make, KW, props(ROWS), SearchConfig(beam_width=3)).shape == (1, 3)
    res = check(make, [[8]], props([[(8, -0.25)]]), SearchConfig(beam_width=1, max_results=3))
    assert res.keyword_ids.tolist() == [[0, -1, -1]] and res.lengths.tolist() == [[1, 0, 0]]
    assert res.scores[0, 1:].tolist() == [-math.inf] * 2 and res.norm_scores[0, 1:].tolist() == [-math.inf] * 2
    assert res.num_results.tolist() == [1]


def test_leaves_leave_the_frontier_and_prefix_keywords_stay(make: Make) -> None:
    # [1] is better but a leaf: it goes to the pool only; B = 1 keeps the worse [2], which finds [2, 3].
    res = check(make, [[1], [2, 3]], props([[(1, 0.0), (2, -2.0)], [(3, -1.0)]]),
                SearchConfig(beam_width=1, max_results=2))
    assert ids(res) == [0, 1] and scores(res) == [0.0, -3.0]
    # a whole keyword that is a prefix of another is offered to the pool and kept in the frontier
    res = check(make, [[5], [5, 6]], props([[(5, -1.0)], [(6, -1.0)]]), SearchConfig(beam_width=1, max_results=2))
    assert ids(res) == [0, 1] and [r[3] for r in res.query(0)] == [1, 2]


def test_duplicates_keep_the_smallest_id(make: Make) -> None:
    assert ids(check(make, [[4], [7], [4]], props([[(4, -1.0)]]), SearchConfig(beam_width=2))) == [0]


def test_thresholds_are_inclusive_and_float64(make: Make) -> None:
    kw = KeywordSet.from_sequences([[1], [2]])
    s = make(kw)
    p = props([[(1, -0.5), (2, -0.7)]])  # -0.7 is stored as fl32(-0.7) = -0.699999988...
    want = {-0.75: [0, 1], -0.7: [0, 1], -0.6999999: [0], -0.5000001: [0], -0.5: [], 0.0: []}
    for tau, expected in want.items():
        assert ids(check(make, kw, p, SearchConfig(beam_width=2, token_threshold=tau), searcher=s)) == expected
    kw = KeywordSet.from_sequences([[1, 1], [1, 2]])
    s = make(kw)
    p = props([[(1, -0.7)], [(1, -0.7), (2, -0.5)]])
    s11 = float(np.float32(np.float32(-0.7) + np.float32(-0.7)))  # -1.3999999761... > -1.4
    res = check(make, kw, p, SearchConfig(beam_width=1, max_results=2, score_threshold=-1.4), searcher=s)
    assert ids(res) == [1, 0] and scores(res)[1] == s11
    res = check(make, kw, p, SearchConfig(beam_width=1, max_results=2, score_threshold=s11), searcher=s)
    assert ids(res) == [1]  # s ≤ σ is dropped
    # a dropped candidate does not grow either: σ at the step-0 score empties the frontier
    assert ids(check(make, kw, p, SearchConfig(beam_width=1, score_threshold=float(np.float32(-0.7))),
                     searcher=s)) == []


@pytest.mark.parametrize("tau,sigma", [(-1.0, -math.inf), (-math.inf, -2.0), (-0.3, -1.1), (0.0, -math.inf),
                                       (-1e39, -1e39), (-5e-46, -math.inf)])
def test_thresholds_random(make: Make, tau: float, sigma: float) -> None:
    rng = np.random.default_rng(13)
    kws = [rng.integers(0, 6, size=int(rng.integers(1, 5))).tolist() for _ in range(60)]
    p = rows_from_keywords(rng, kws, q_n=3, steps=4, k=6, quantised=False)
    lp = p.logprobs.copy()
    lp[..., 0] = np.float32(-0.3)  # not representable: sits exactly at threshold32(-0.3)
    lp[..., 1] = np.float32(-1e-45)
    check(make, kws, Proposals(p.tokens, lp),
          SearchConfig(beam_width=4, max_results=9, token_threshold=tau, score_threshold=sigma))


def test_threshold_below_float32_range_keeps_the_lowest_float32(make: Make) -> None:
    lp = np.array([[[-np.finfo(np.float32).max, -1.0]]], dtype=np.float32)
    got = check(make, [[1], [2]], Proposals(np.array([[[1, 2]]]), lp), SearchConfig(beam_width=2,
                                                                                      token_threshold=-1e39))
    assert sorted(got.keyword_ids[0, :2].tolist()) == [0, 1]  # -FLT_MAX > -1e39: kept


def test_overflow_minus_inf_and_subnormals(make: Make) -> None:
    assert ids(check(make, [[1, 2]], props([[(1, -3e38)], [(2, -3e38)]]), SearchConfig(beam_width=1))) == []
    assert ids(check(make, [[1]], props([[(1, -math.inf)]]), SearchConfig(beam_width=1))) == []
    kws = [[1, 2], [1, 2, 3], [1], [2, 3]]
    s = make(_ks(kws))
    tok = np.array([[[1, 2], [2, 3], [3, PAD]]], dtype=np.int64)
    for lp0 in ([-3e38, -2.5e38], [-1e-45, -3e-45], [-1.1754944e-38, 1e-45]):
        lp = np.array([[lp0, lp0, [lp0[0], 0]]], dtype=np.float32)
        check(make, kws, Proposals(tok, lp), SearchConfig(beam_width=2, length_norm=1.0), searcher=s)


def test_signed_zeros_tie(make: Make) -> None:
    # [1,2,3,4]: s = -1.4e-45 (smallest subnormal), n = s * (6/9)**2 rounds to -0.0.
    # [1,2,3,5]: s = n = +0.0.  -0.0 == +0.0, so the tie breaks on the token: 4 first.
    p = props([[(1, 0.0)], [(2, 0.0)], [(3, 0.0)], [(5, 0.0), (4, -1e-45)]])
    res = check(make, [[1, 2, 3, 4], [1, 2, 3, 5]], p, SearchConfig(beam_width=1, max_results=2, length_norm=2.0))
    assert ids(res) == [0, 1]
    assert res.scores[0, 0] == np.float32(-1e-45) and res.scores[0, 0] < 0  # subnormal kept
    assert res.norm_scores[0, 0] == 0 and np.signbit(res.norm_scores[0, 0])
    assert res.norm_scores[0, 1] == 0 and not np.signbit(res.norm_scores[0, 1])


def test_ties_everywhere(make: Make) -> None:
    """All logprobs equal (0, -0, -1, or ±0 mixed): the order is decided by (rank, token) alone."""
    rng = np.random.default_rng(5)
    kws = [rng.integers(0, 5, size=int(rng.integers(1, 5))).tolist() for _ in range(80)]
    ks = _ks(kws)
    s, trie = make(ks), OracleTrie(ks)
    p = rows_from_keywords(rng, kws, q_n=3, steps=5, k=6, distractors=1)
    for value in (0.0, -0.0, -1.0):
        lp = np.full(p.shape, value, dtype=np.float32)
        check(make, ks, Proposals(p.tokens, lp), SearchConfig(beam_width=3, max_results=7), searcher=s, trie=trie)
    lp = np.where(rng.random(p.shape) < 0.5, np.float32(-0.0), np.float32(0.0)).astype(np.float32)
    check(make, ks, Proposals(p.tokens, lp), SearchConfig(beam_width=2, max_results=5), searcher=s, trie=trie)


def test_length_norm(make: Make) -> None:
    p = props([[(1, -1.0), (2, -0.5)], [(3, -0.5)], [(4, -0.25)]])
    kw = KeywordSet.from_sequences([[1], [2, 3, 4]])
    s = make(kw)
    assert ids(check(make, kw, p, SearchConfig(beam_width=2), searcher=s)) == [0, 1]
    res = check(make, kw, p, SearchConfig(beam_width=2, length_norm=1.0), searcher=s)
    assert ids(res) == [1, 0] and [r[2] for r in res.query(0)] == [-0.9375, -1.0]  # -1.25 * 6/8 beats -1
    res = check(make, kw, p, SearchConfig(beam_width=2, length_norm=2.0), searcher=s)
    assert [r[2] for r in res.query(0)] == [-0.703125, -1.0]
    rng = np.random.default_rng(17)
    kws = [rng.integers(0, 4, size=int(rng.integers(1, 9))).tolist() for _ in range(120)]
    ks = _ks(kws)
    s, trie = make(ks), OracleTrie(ks)
    p = rows_from_keywords(rng, kws, q_n=3, steps=8, k=5, quantised=False)
    for alpha in (0.5, 0.7, 10.0):
        check(make, ks, p, SearchConfig(beam_width=6, max_results=20, length_norm=alpha), searcher=s, trie=trie)


def test_early_stop_keeps_a_keyword_that_wins_through_the_length_norm(make: Make) -> None:
    """A full pool, then a longer keyword that wins only through the length norm: no early stop may drop it."""
    tok = np.array([[[1], [2], [3], [4], [5], [6], [7], [8]]], dtype=np.int64)
    lp = np.array([[[-1.0]] + [[-0.1]] * 7], dtype=np.float32)
    got = check(make, [[1], [1, 2, 3, 4, 5, 6, 7, 8]], Proposals(tok, lp),
                SearchConfig(beam_width=1, max_results=1, length_norm=2.0))
    assert got.keyword_ids[0, 0] == 1  # n = -1.7 * (6/13)**2 beats [1]'s n = -1


def test_forced_prefixes_including_absent_ones(make: Make) -> None:
    kw = KeywordSet.from_sequences([[1, 2], [1, 2, 3], [4]])
    rows = [[(2, -1.0), (3, -0.5)], [(3, -1.0)]]
    res = check(make, kw, props(*[rows] * 6), SearchConfig(beam_width=2),
                prefixes=[[1], [1, 2], [4], [9], [1, 2, 3], []])
    assert res.query(0) == [(0, -1.0, -1.0, 2), (1, -2.0, -2.0, 3)]  # |c| counts the prefix
    assert res.query(1) == [(1, -0.5, -0.5, 3)]  # the prefix [1, 2] itself is never a result
    assert [res.query(q) for q in (2, 3, 4, 5)] == [[], [], [], []]  # leaf, absent, leaf, nothing from root
    # root, inside an edge, at an inner node, a whole keyword with children, a leaf, absent, absent
    # mid-edge, mid-edge (valid)
    rng = np.random.default_rng(19)
    kws = [[1, 2, 3, 4, 5], [1, 2, 3], [1, 2, 9, 9], [1, 7], [4], [4, 4, 4, 4, 4, 4], [8, 8]]
    prefixes = [[], [1, 2], [1], [1, 2, 3], [8, 8], [3], [4, 4, 5], [1, 2, 3, 4], [4, 4, 4]]
    tok = np.full((len(prefixes), 4, 5), PAD, dtype=np.int64)
    tok[:, :, :4] = np.array([1, 2, 3, 4])
    tok[:, :, 4] = [9, 5, 7, 8]
    tok[7, 0, 4] = 5
    lp = (rng.integers(-4, 1, size=tok.shape) * 0.5).astype(np.float32)
    got = check(make, kws, Proposals(tok, lp), SearchConfig(beam_width=3, max_results=6), prefixes)
    assert got.num_results[[4, 5, 6]].tolist() == [0, 0, 0] and 1 not in got.keyword_ids[3]
    assert got.num_results[3] > 0 and got.num_results[7] > 0


@pytest.mark.parametrize("pad", [-1, PAD])
def test_padding_rows_and_empty_shapes(make: Make, pad: int) -> None:
    p = Proposals(np.array([[[pad, 4294967294, 0]]], dtype=np.int64),
                  np.array([[[np.nan, -1.0, -2.0]]], dtype=np.float32))  # padding may carry any logprob
    assert ids(check(make, [[4294967294], [0]], p, SearchConfig(beam_width=3))) == [0, 1]
    kws = [[1], [1, 2], [3]]
    s = make(_ks(kws))
    tok = np.full((2, 3, 4), pad, dtype=np.int64)
    tok[0, 0, 2] = 1
    tok[0, 2, 0] = 2  # step 1 is all padding: the search stops there
    lp = np.full(tok.shape, np.nan, dtype=np.float32)
    lp[tok != pad] = -1.0
    assert check(make, kws, Proposals(tok, lp), SearchConfig(beam_width=2), searcher=s).num_results.tolist() == [1, 0]
    for shape in ((0, 3, 4), (2, 0, 4), (2, 3, 0), (0, 0, 0)):  # Q = 0, T = 0, K = 0
        e = Proposals(np.zeros(shape, np.int64), np.zeros(shape, np.float32))
        assert_same(s.search(e, SearchConfig(beam_width=2)), SearchResult.empty(shape[0], 2))


def test_single_step_beam_larger_than_library_and_more_results_than_beam(make: Make) -> None:
    rng = np.random.default_rng(23)
    kws = [rng.integers(0, 5, size=int(rng.integers(1, 4))).tolist() for _ in range(12)]
    s = make(_ks(kws))
    check(make, kws, rows_from_keywords(rng, kws, q_n=2, steps=1, k=5), SearchConfig(beam_width=1, max_results=3),
          searcher=s)
    got = check(make, kws, rows_from_keywords(rng, kws, q_n=2, steps=4, k=5),
                SearchConfig(beam_width=1000, max_results=200), searcher=s)
    assert got.shape == (2, 200)
    kws = [rng.integers(0, 4, size=int(rng.integers(1, 6))).tolist() for _ in range(100)]
    check(make, kws, rows_from_keywords(rng, kws, q_n=3, steps=6, k=4), SearchConfig(beam_width=2, max_results=40))


def test_tokens_near_uint32_max(make: Make) -> None:
    top = PAD - 1
    kws = [[top], [top, top - 1], [top - 1, top, top], [2**31, top], [65535, 65536, top], [0, top - 2]]
    tok = np.array([[[top, top - 1, 2**31, 65535, 0, PAD],
                     [top - 1, top, 65536, top - 2, PAD, 5],
                     [top, top - 1, PAD, PAD, PAD, PAD]]], dtype=np.int64)
    lp = np.array([[[-1, -0.5, -0.25, -2, -3, 0], [-1, -1, -0.5, -0.25, 0, -1], [-0.5, -0.5, 0, 0, 0, 0]]],
                  dtype=np.float32)
    assert check(make, kws, Proposals(tok, lp), SearchConfig(beam_width=6)).num_results[0] == 6


def test_long_keywords_and_keywords_that_are_prefixes_of_others(make: Make) -> None:
    rng = np.random.default_rng(11)
    base = rng.integers(0, 3, size=64).tolist()
    kws = [base[:n] for n in (1, 2, 5, 17, 32, 63, 64)]  # each a prefix of the next
    kws += [(base[:n] + rng.integers(0, 3, size=int(rng.integers(1, 64 - n + 1))).tolist())[:64]
            for n in rng.integers(0, 60, size=40)]
    ks = _ks(kws)
    s, trie = make(ks), OracleTrie(ks)
    for alpha in (0.0, 1.0):
        p = rows_from_keywords(rng, kws, q_n=2, steps=66, k=4, distractors=1)
        got = check(make, ks, p, SearchConfig(beam_width=3, max_results=12, length_norm=alpha), searcher=s,
                    trie=trie)
        assert got.lengths.max() > 30


@pytest.fixture(scope="module")
def fan_out() -> tuple[KeywordSet, OracleTrie, list[Proposals]]:
    """A root with 100k children (tokens spread over the uint32 range), an inner node with 3,000, and rows
    of 60 and of 4,200 proposals (the same matches plus thousands of valid tokens that match nothing)."""
    rng = np.random.default_rng(7)
    roots = np.arange(100_000, dtype=np.int64) * 42_949 + 3
    hub, small = int(roots[12_345]), [int(roots[i]) for i in (5, 77, 99_999)]
    kws = [[int(x)] for x in roots]
    hub_kids = rng.choice(2**31, size=3000, replace=False).astype(np.int64) * 2  # even tokens
    kws += [[hub, int(c)] for c in hub_kids] + [[hub, int(hub_kids[0]), 9, 9], [hub, int(hub_kids[1]), 4]]
    for j, s in enumerate(small):
        kws += [[s, 2 * j + 2], [s, 2 * j + 2, 5], [s, 1000 + 2 * j]]
    step0 = [hub, *small] + [int(x) for x in rng.choice(roots, size=40, replace=False)]
    step1 = [int(x) for x in hub_kids[:40]] + [2, 4, 6, 1000, 1002]
    step2 = [9, 4, 5, 7]
    odd = (rng.choice(2**31 - 1, size=4200, replace=False) * 2 + 1).tolist()  # never a label at depth 2
    lp_of = {x: np.float32(np.round(np.log(rng.random()) * 4) / 4) for x in step0 + step1 + step2}
    out = []
    for k in (60, 4200):
        tok = np.full((1, 3, k), PAD, dtype=np.int64)
        lp = np.zeros((1, 3, k), dtype=np.float32)
        for t, row in enumerate((step0, step1 + odd[: k - len(step1)], step2)):
            tok[0, t, : len(row)] = row
            lp[0, t, : len(row)] = [lp_of.get(x, 0.0) for x in row]
        out.append(Proposals(tok, lp))
    ks = KeywordSet.from_sequences(kws)
    return ks, OracleTrie(ks), out


def test_huge_fan_out(backend: tuple[str, Make], fan_out) -> None:
    name, make = backend
    if name == "oracle":
        pytest.skip("over the oracle backend's keyword limit; the expected result is oracle_search's")
    ks, trie, (p_small, p_big) = fan_out
    s = make(ks)
    config = SearchConfig(beam_width=8, max_results=30)
    got = check(make, ks, p_small, config, searcher=s, trie=trie)
    assert got.num_results[0] > 5
    assert_same(check(make, ks, p_big, config, searcher=s, trie=trie), got)


# ---------------------------------------------------------------------------------------- refusals
def test_refusals_name_the_argument(make: Make) -> None:
    with pytest.raises(InputError, match="^keywords: the keyword set is empty"):
        make(KeywordSet.from_sequences([]))
    s = make(KeywordSet.from_sequences([[1, 2], [1, 3], [2]]))
    p = Proposals(np.array([[[1, 2], [2, 3]]]), np.array([[[-1, -2], [-0.5, -0.25]]], dtype=np.float32))
    config = SearchConfig(beam_width=2)
    for bad, match in ((5, "^prefixes: expected None or a sequence"), ((q for q in [[1]]), "^prefixes: expected"),
                       ([[], []], "^prefixes: expected one prefix per query"), ([[-3]], r"^prefixes\[0\]")):
        with pytest.raises(InputError, match=match):
            s.search(p, config, bad)
    with pytest.raises(InputError, match="^proposals"):
        s.search(np.zeros((1, 1, 1)), config)
    with pytest.raises(InputError, match="^config"):
        s.search(p, {"beam_width": 2})
