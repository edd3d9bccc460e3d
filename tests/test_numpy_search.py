"""`NumpySearcher`'s own paths: parts and threads, the three intersection paths, packed sort keys, early stop
and stats.  The shared adversarial cases are in test_conformance.py."""

from __future__ import annotations

import numpy as np
import pytest
from flashtrie.reference_cpu import numpy_search
from flashtrie.reference_cpu.numpy_search import NumpySearcher
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import OracleTrie, oracle_search
from strategies import keyword_sets, rows_from_keywords, search_cases

from flashtrie import InputError, KeywordSet, NarrowLoudsIndex, Proposals, SearchConfig, SearchResult

PAD = 2**32 - 1


def make(keywords: KeywordSet | list[list[int]]) -> tuple[KeywordSet, NumpySearcher]:
    ks = keywords if isinstance(keywords, KeywordSet) else KeywordSet.from_sequences(keywords)
    return ks, NumpySearcher(NarrowLoudsIndex.build(ks))


def assert_same(a: SearchResult, b: SearchResult) -> None:
    diff = a.first_difference(b)
    assert diff is None, diff


def check(keywords: KeywordSet | list[list[int]] | OracleTrie, searcher: NumpySearcher, proposals: Proposals,
          config: SearchConfig, prefixes: list[list[int]] | None = None) -> SearchResult:
    """numpy == oracle, and returns the result."""
    got = searcher.search(proposals, config, prefixes)
    if isinstance(keywords, list):
        keywords = KeywordSet.from_sequences(keywords)
    assert_same(got, oracle_search(keywords, proposals, config, prefixes))
    return got




# ------------------------------------------------------------------------------------------ early stop
@given(search_cases())
def test_without_early_stop_matches_oracle(case) -> None:
    """The conformance suite runs the default (early stop on); the full-length search agrees too."""
    keywords, proposals, config, prefixes = case
    _, searcher = make(keywords)
    searcher.early_stop = False
    check(keywords, searcher, proposals, config, prefixes)


@given(search_cases(max_queries=6), st.integers(1, 4), st.integers(1, 3))
def test_parts_and_threads_equal_one_batch(case, threads, part) -> None:
    keywords, proposals, config, prefixes = case
    ks = KeywordSet.from_sequences(keywords) if isinstance(keywords, list) else keywords
    index = NarrowLoudsIndex.build(ks)
    one = NumpySearcher(index, collect_stats=True)
    want = one.search(proposals, config, prefixes)
    many = NumpySearcher(index, collect_stats=True, threads=threads)
    with pytest.MonkeyPatch.context() as mp:  # parts of `part` queries, a thread for any part
        mp.setattr(numpy_search, "MAX_PART_QUERIES", part)
        mp.setattr(numpy_search, "MIN_THREAD_QUERIES", 1)
        assert_same(many.search(proposals, config, prefixes), want)
    assert many.path_counts == one.path_counts
    np.testing.assert_array_equal(many.last_stats.per_step, one.last_stats.per_step)
    assert many.last_stats.steps_run == one.last_stats.steps_run


def test_threads_argument() -> None:
    index = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2]]))
    assert NumpySearcher(index, threads=None).threads >= 1
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(InputError, match="threads"):
            NumpySearcher(index, threads=bad)


def test_index_argument() -> None:
    with pytest.raises(InputError, match="index: expected a flashtrie.NarrowLoudsIndex.*got KeywordSet"):
        NumpySearcher(KeywordSet.from_sequences([[1]]))  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ fan-out
def test_huge_fanout_both_intersection_paths() -> None:
    """A root with 100k children and an inner node with 3000: pair path for K small, enum path for K large."""
    rng = np.random.default_rng(7)
    roots = (np.arange(100_000, dtype=np.int64) * 42_949 + 3)  # spread over the uint32 range
    hub, small = int(roots[12_345]), [int(roots[i]) for i in (5, 77, 99_999)]
    kws = [[int(x)] for x in roots]
    hub_kids = rng.choice(2**31, size=3000, replace=False).astype(np.int64) * 2  # even tokens
    kws += [[hub, int(c)] for c in hub_kids]
    kws += [[hub, int(hub_kids[0]), 9, 9], [hub, int(hub_kids[1]), 4]]
    for j, s in enumerate(small):
        kws += [[s, 2 * j + 2], [s, 2 * j + 2, 5], [s, 1000 + 2 * j]]
    ks, searcher = make(kws)
    trie = OracleTrie(ks)

    t_n, k_small, k_large = 3, 60, 4200
    step0 = [hub, *small] + [int(x) for x in rng.choice(roots, size=40, replace=False)]
    step1 = [int(x) for x in hub_kids[:40]] + [2, 4, 6, 1000, 1002]
    step2 = [9, 4, 5, 7]
    odd = (rng.choice(2**31 - 1, size=k_large, replace=False) * 2 + 1).tolist()  # never a label at depth 2

    lp_of = {x: np.float32(np.round(np.log(rng.random()) * 4) / 4) for x in step0 + step1 + step2}

    def proposals(k: int) -> Proposals:
        tok = np.full((1, t_n, k), PAD, dtype=np.int64)
        lp = np.zeros((1, t_n, k), dtype=np.float32)
        for t, row in enumerate((step0, step1 + odd[: k - len(step1)], step2)):
            tok[0, t, : len(row)] = row
            lp[0, t, : len(row)] = [lp_of.get(x, 0.0) for x in row]
        return Proposals(tok, lp)

    config = SearchConfig(beam_width=8, max_results=30)
    got_small = check(trie, searcher, proposals(k_small), config)
    counts_small = dict(searcher.path_counts)
    # the same rows plus thousands of non-matching valid tokens: same result, the hub is enumerated instead
    got_big = check(trie, searcher, proposals(k_large), config)
    counts_big = dict(searcher.path_counts)
    assert_same(got_small, got_big)
    assert got_small.num_results[0] > 5
    assert counts_small["pair"] > 0 and counts_small["enum"] > 0
    hub_hits = counts_small["pair"] - counts_big["pair"]
    assert hub_hits > 0 and counts_big["enum"] - counts_small["enum"] == hub_hits


@pytest.mark.slow
def test_fanout_of_one_million() -> None:
    """A root with 1M children (tokens spread up to 2**32 - 2) and a few deeper keywords: equals the oracle."""
    rng = np.random.default_rng(11)
    roots = np.unique(rng.integers(0, 2**32 - 1, size=1_050_000, dtype=np.int64))[:1_000_000]
    assert roots.size == 1_000_000
    deep = [[int(roots[i]), int(roots[j])] for i, j in rng.integers(0, roots.size, size=(200, 2))]
    ks = KeywordSet.from_arrays(np.concatenate([roots, np.array(deep).ravel()]).astype(np.uint32),
                                np.concatenate([np.arange(roots.size + 1), roots.size + 2 * np.arange(1, 201)]))
    searcher = NumpySearcher(NarrowLoudsIndex.build(ks))
    trie = OracleTrie(ks)
    k = 1000
    tok = np.full((2, 2, k), PAD, dtype=np.int64)
    tok[:, 0, :] = np.stack([rng.choice(roots, size=k, replace=False) for _ in range(2)])
    tok[:, 0, :10] = [d[0] for d in deep[:10]]  # roots that continue
    tok[:, 1, :10] = [d[1] for d in deep[:10]]
    tok[:, 1, 10:] = rng.choice(roots, size=(2, k - 10))
    for q in range(2):  # rows must not repeat a token
        for t in range(2):
            _, first = np.unique(tok[q, t], return_index=True)
            dup = np.setdiff1d(np.arange(k), first)
            tok[q, t, dup] = PAD
    lp = (np.round(np.log(rng.random((2, 2, k))) * 8) / 8).astype(np.float32)
    got = check(trie, searcher, Proposals(tok, lp), SearchConfig(beam_width=50, max_results=2000, length_norm=0.3))
    assert got.num_results.min() >= k and (got.lengths == 2).any()  # a whole row of roots, and deeper keywords


def test_every_path_agrees_on_small_tries() -> None:
    """Rows of every width over one trie: enum, pair and mid-edge paths all run and match the oracle."""
    rng = np.random.default_rng(3)
    kws = [rng.integers(0, 6, size=int(rng.integers(1, 7))).tolist() for _ in range(60)]
    kws += [[7, 7, 7, 7, 7, 1], [7, 7, 7, 7, 7, 2]]
    ks, searcher = make(kws)
    trie = OracleTrie(ks)
    seen = {"mid": 0, "enum": 0, "pair": 0}
    for k in (1, 2, 3, 5, 8):
        p = rows_from_keywords(rng, kws, q_n=3, steps=6, k=k, distractors=1)
        check(trie, searcher, p, SearchConfig(beam_width=4, max_results=9))
        for name in seen:
            seen[name] += searcher.path_counts[name]
    assert all(v > 0 for v in seen.values()), seen


# ------------------------------------------------------------------------------------ shapes of input
# ------------------------------------------------------------------------------------------ vs marisa
# ------------------------------------------------------------------------------------ sort-key layouts
def test_group_order_packed_equals_lexsort() -> None:
    rng = np.random.default_rng(37)
    n = 5000
    q = rng.integers(0, 3, n)
    dk = rng.integers(0, 4, n).astype(np.uint32) * np.uint32(0x4000_0001)
    r = rng.integers(0, 40, n)
    x = rng.permutation(n)  # (q, r, x) unique, like candidates
    from flashtrie.reference_cpu.numpy_state import SortKeys

    packed = SortKeys(q_bits=2, r_bits=6, x_bits=13).order(q, dk, r, x)
    wide = SortKeys(q_bits=40, r_bits=16, x_bits=16).order(q, dk, r, x)
    np.testing.assert_array_equal(packed, wide)
    np.testing.assert_array_equal(packed, np.lexsort((x, r, dk, q)))


def test_beam_and_k_beyond_packed_keys() -> None:
    """B and K near the 16-bit limits: per-query keys no longer fit one uint64 with q (lexsort fallback)."""
    rng = np.random.default_rng(41)
    kws = [rng.integers(0, 6, size=int(rng.integers(1, 4))).tolist() for _ in range(40)]
    ks, searcher = make(kws)
    k = 33_000
    tok = np.full((2, 2, k), PAD, dtype=np.int64)
    tok[:, :, :k - 6] = np.arange(100, 100 + k - 6)
    tok[:, :, k - 6:] = np.arange(6)
    lp = rng.integers(-3, 1, size=tok.shape).astype(np.float32)
    check(ks, searcher, Proposals(tok, lp), SearchConfig(beam_width=40_000, max_results=50))


# ------------------------------------------------------------------------------------------ plumbing
def test_protocol_errors_and_loaded_index(tmp_path) -> None:
    from flashtrie import InputError, Searcher

    kws = [[1, 2], [1, 3], [2]]
    ks, searcher = make(kws)
    assert isinstance(searcher, Searcher) and searcher.name == "numpy"
    tok = np.array([[[1, 2], [2, 3]]], dtype=np.int64)
    p = Proposals(tok, np.array([[[-1, -2], [-0.5, -0.25]]], dtype=np.float32))
    config = SearchConfig(beam_width=2)
    with pytest.raises(InputError, match="prefixes"):
        searcher.search(p, config, [[], []])
    with pytest.raises(InputError, match="proposals"):
        searcher.search((tok, tok), config)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="config"):
        searcher.search(p, {"beam_width": 2})  # type: ignore[arg-type]
    searcher.index.save(tmp_path / "lib.idx")
    loaded = NumpySearcher(NarrowLoudsIndex.load(tmp_path / "lib.idx"))
    assert_same(loaded.search(p, config), check(ks, searcher, p, config))


def test_early_stop_skips_steps_without_changing_results() -> None:
    ks, searcher = make([[1], [1, 2], [1, 2, 3], [1, 2, 4]])
    tok = np.tile(np.array([1, 2, 3, 4], dtype=np.int64), (2, 4, 1))
    lp = np.full(tok.shape, -1.0, dtype=np.float32)
    lp[1, 2, :] = 0.5  # query 1: a positive logprob later on, so it may not stop
    config = SearchConfig(beam_width=2, max_results=1)
    early = check(ks, searcher, Proposals(tok, lp), config)
    n_early = sum(searcher.path_counts.values())
    searcher.early_stop = False
    assert_same(early, check(ks, searcher, Proposals(tok, lp), config))
    assert n_early < sum(searcher.path_counts.values())


@given(search_cases(max_queries=4))
def test_stats_do_not_change_results_and_add_up_over_queries(case) -> None:
    keywords, proposals, config, prefixes = case
    _, searcher = make(keywords)
    assert searcher.last_stats is None
    early = check(keywords, searcher, proposals, config, prefixes)
    assert searcher.last_stats is None  # off by default
    searcher.collect_stats = True
    assert_same(early, check(keywords, searcher, proposals, config, prefixes))
    st_early = searcher.last_stats
    searcher.early_stop = False
    assert_same(early, check(keywords, searcher, proposals, config, prefixes))
    st = searcher.last_stats
    assert st is not None and st_early is not None and st_early.early_stop and not st.early_stop
    q_n, t_n, _ = proposals.shape
    assert st.per_step.shape == (t_n, 4) and (st.queries, st.beam_width) == (q_n, config.beam_width)
    c, v, k, f = st.per_step.T
    assert (v <= c).all() and (k <= v).all() and (f <= k).all() and (f <= q_n * config.beam_width).all()
    assert (st_early.per_step <= st.per_step).all()  # the early stop only skips work
    assert (np.flatnonzero(c)[-1] + 1 if c.any() else 0) <= st.steps_run <= t_n
    offers, live = st.column("pool_offers"), st.column("live_queries")
    assert st.backend == "numpy" and int(offers.sum()) >= int(early.num_results.sum()) and (offers <= k).all()
    assert (live <= q_n).all() and not ((c > 0) & (live == 0)).any()  # work only where a frontier lives
    assert st.to_dict()["counts"]["live_queries"] == live.tolist()
    total = np.zeros_like(st.per_step)
    for q in range(q_n):
        searcher.search(proposals[q], config, None if prefixes is None else [prefixes[q]])
        assert searcher.last_stats is not None
        total += searcher.last_stats.per_step
    np.testing.assert_array_equal(st.per_step, total)


def test_shared_row_preparation_and_early_stop_bound() -> None:
    """Both CPU backends prepare rows and test the early stop through flashtrie.scoring."""
    import flashtrie.reference_cpu.marisa as marisa_mod
    import flashtrie.reference_cpu.numpy_search as numpy_mod

    from flashtrie import scoring

    for mod in (marisa_mod, numpy_mod):
        assert mod.sort_rows is scoring.sort_rows and mod.pool_closed is scoring.pool_closed
    tok = np.array([[[7, PAD, 3, 5], [PAD, PAD, PAD, PAD], [9, 2, PAD, 1]]], dtype=np.uint32)
    lp = np.array([[[-1.0, 5.0, -0.5, -3.0], [0.0, 0.0, 0.0, 0.0], [0.25, -2.0, 9.0, -9.0]]], dtype=np.float32)
    rows = scoring.sort_rows(tok, lp, np.float32(-2.5), with_row_max=True)
    assert rows.tokens.tolist() == [[[3, 5, 7, PAD], [PAD] * 4, [1, 2, 9, PAD]]]
    assert rows.logprobs[0, 0, :3].tolist() == [-0.5, -3.0, -1.0]
    assert rows.valid.tolist() == [[[True, False, True, False], [False] * 4, [False, True, True, False]]]
    assert rows.row_max.tolist() == [[-0.5, -np.inf, 0.25]]
    assert scoring.sort_rows(tok, lp, np.float32(-2.5), with_row_max=False).row_max is None


def test_pool_closed_hand_cases() -> None:
    """S_k = fl32(S_{k-1} + M_k) from s0; closed when max(fl32(S_k ln_min), fl32(S_k ln_max)) ≤ worst n."""
    from flashtrie.scoring import pool_closed

    f, inf = np.float32, np.inf

    def closed(best: float, worst: float, rows: list[float], lo: float = 1.0, hi: float = 1.0) -> bool:
        return bool(pool_closed(f(best), f(worst), np.array(rows, f), f(lo), f(hi)))

    assert closed(-1, -1, [-1], 0.5, 1.0)  # S = -2: n ≤ max(-1, -2) = -1, an equal n loses the tie
    assert not closed(-1, float(np.nextafter(f(-1), f(-2))), [-1], 0.5, 1.0)  # just below: -1 could enter
    assert closed(-1, -2, [-3])  # tighter than s0 · ln_min ≤ worst (-1 > -2): the later logprobs count
    assert not closed(-1, -2, [-3, 2.5])  # ... all of them: S_2 = -1.5 could still enter
    assert closed(-3, -1.5, [0.5, 0.5])  # positive logprobs: S = -2.5, -2 stay under the worst
    assert not closed(-1, -0.9, [0.5, 0.5])
    assert not closed(0.5, 0.6, [0.0], 0.5, 1.5)  # S > 0: ln_max gives the larger n (0.75)
    assert closed(0.5, 0.75, [0.0], 0.5, 1.5)
    assert not closed(3e38, float(np.finfo(f).max), [3e38])  # S overflows to +inf: open
    assert closed(3e38, inf, [3e38])  # ... unless the worst is +inf (an equal n loses)
    assert not closed(3e38, inf, [3e38, -inf])  # +inf + -inf = NaN never closes
    assert closed(-1, -5, [-inf, 0.5, 3.0])  # a row with no valid proposal: S = -inf from there on
    assert not closed(-1, -5, [1.0, -inf])  # ... but the rows before it still count
    assert closed(0.0, -0.0, [-0.0])  # -0.0 and +0.0 are equal n
    assert closed(-1, -9, [])  # no later step
    got = pool_closed(np.array([-1, -1, -3], f), np.array([-1.0, -0.5, -inf], f),
                      np.array([[-1, -1], [0.25, 0.25], [-inf, -inf]], f), f(0.5), f(1.0))
    assert got.tolist() == [True, False, True]


@settings(max_examples=300)
@given(st.lists(st.sampled_from([0.0, -0.0, 0.5, -1.0, -1e-45, 3e38, -3e38, -np.inf, -0.3, 1.7]), max_size=6),
       st.sampled_from([0.0, -1.0, 2.0, 3e38, -3e38, -0.3]), st.sampled_from([-np.inf, -2.0, -0.5, 0.0, 3e38, np.inf]),
       st.sampled_from([(1.0, 1.0), (0.5, 1.0), (0.3, 2.5), (1e-30, 1e30)]))
def test_pool_closed_is_the_sequential_float32_rule(rows, best, worst, ln) -> None:
    """The vectorised rule equals the kernel's loop: float32 sums one at a time, both LN extremes."""
    from flashtrie.scoring import pool_closed

    f = np.float32
    want, s = True, f(best)
    with np.errstate(over="ignore", invalid="ignore"):
        for m in rows:
            s = f(s + f(m))
            want &= bool(f(s * f(ln[0])) <= f(worst) and f(s * f(ln[1])) <= f(worst))
    got = pool_closed(np.array([best, best], f), np.array([worst, worst], f), np.array([rows, rows], f).reshape(2, -1),
                      f(ln[0]), f(ln[1]))
    assert got.tolist() == [want, want]
    assert bool(pool_closed(f(best), f(worst), np.array(rows, f), f(ln[0]), f(ln[1]))) == want


@pytest.mark.slow
@settings(max_examples=200)
@given(search_cases(max_queries=4, max_steps=7, max_beam=4))
def test_early_stop_on_and_off_agree(case) -> None:
    """The early stop (pool_closed) never changes a result, bit for bit."""
    keywords, proposals, config, prefixes = case
    ks = KeywordSet.from_sequences(keywords) if isinstance(keywords, list) else keywords
    index = NarrowLoudsIndex.build(ks)
    on = NumpySearcher(index, early_stop=True).search(proposals, config, prefixes)
    assert_same(on, NumpySearcher(index, early_stop=False).search(proposals, config, prefixes))




@settings(max_examples=40)
@given(keywords=keyword_sets(max_keywords=30, max_length=6))
def test_all_child_ranges_equal_the_per_node_select0(keywords: KeywordSet) -> None:
    """The searcher's one-pass decodes of every node: `child_range`, `is_terminal`, `keyword_ids_of`."""
    ix = NarrowLoudsIndex.build(keywords)
    nodes = np.arange(ix.num_nodes, dtype=np.int64)
    got, want = numpy_search._all_child_ranges(ix, nodes), ix.child_range(nodes)
    assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
    for order in ("input", "index"):  # with the keyword-id map and without it
        ix = NarrowLoudsIndex.build(keywords, ids=order)
        term, kwid = numpy_search._all_keyword_ids(ix, nodes)
        assert term.dtype == bool and np.array_equal(term, ix.is_terminal(nodes))
        assert kwid.dtype == np.int64 and np.array_equal(kwid, ix.keyword_ids_of(nodes))
