"""`NumpySearcher`'s two decode modes: `EagerNodes` and `LazyNodes` give the same facts node for node, the
lazy searcher the same results bit for bit (against the eager one and the oracle), its wide-node cache stays
bounded, and its set-up allocates nothing in proportion to the index."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from flashtrie.reference_cpu import numpy_nodes, numpy_search
from flashtrie.reference_cpu.numpy_nodes import EagerNodes, LazyNodes
from flashtrie.reference_cpu.numpy_search import NumpySearcher
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import oracle_search
from strategies import keyword_sets, rows_from_keywords, search_cases

from flashtrie import InputError, KeywordSet, NarrowLoudsIndex, Proposals, SearchConfig


def assert_same(a, b) -> None:
    diff = a.first_difference(b)
    assert diff is None, diff


def _index(keywords) -> tuple[KeywordSet, NarrowLoudsIndex]:
    ks = KeywordSet.from_sequences(keywords) if isinstance(keywords, list) else keywords
    return ks, NarrowLoudsIndex.build(ks)


@settings(max_examples=60)
@given(keywords=keyword_sets(max_keywords=30, max_length=6), ids=st.sampled_from(["input", "index"]),
       seed=st.integers(0, 2**32 - 1))
def test_lazy_facts_equal_eager_facts(keywords: KeywordSet, ids: str, seed: int) -> None:
    """Every fact of every node, and child lookups of present and absent (node, token) probes."""
    ix = NarrowLoudsIndex.build(keywords, ids=ids)
    eager, lazy = EagerNodes(ix), LazyNodes(ix)
    nodes = np.arange(ix.num_nodes, dtype=np.int64)
    for fact in ("edge_len", "has_children", "terminal", "keyword_id"):
        e, z = getattr(eager, fact)(nodes), getattr(lazy, fact)(nodes)
        assert e.dtype == z.dtype and np.array_equal(e, z), fact
    for e, z in zip(eager.children(nodes), lazy.children(nodes), strict=True):
        assert np.array_equal(e, z)
    kids = nodes[1:]
    assert np.array_equal(eager.label(kids), lazy.label(kids))
    elen = eager.edge_len(nodes)
    tn = np.repeat(nodes, np.maximum(elen - 1, 0))
    to = np.concatenate([np.arange(1, m, dtype=np.int64) for m in elen if m > 1] or [np.zeros(0, np.int64)])
    assert np.array_equal(eager.tail_token(tn, to), lazy.tail_token(tn, to))
    # probes: every child key, plus random tokens at random nodes (mostly absent)
    rng = np.random.default_rng(seed)
    first, deg = eager.children(nodes)
    parent = np.repeat(nodes, deg)
    rand_nodes = rng.integers(0, ix.num_nodes, size=50)
    labels = np.concatenate([eager.label(kids), rng.integers(0, 2**32 - 1, size=50).astype(np.uint32)])
    pnodes = np.concatenate([parent, rand_nodes])
    keys = np.unique((pnodes.astype(np.uint64) << np.uint64(32)) | labels.astype(np.uint64))
    want = eager.find_children(keys)
    assert want[0].sum() == ix.num_nodes - 1
    for decode_max in (1 << 16, 1, 0):  # cached, cached or binary-searched by degree, all binary-searched
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(numpy_nodes, "WIDE_DECODE_MAX", decode_max)
            got = LazyNodes(ix).find_children(keys)
        assert all(np.array_equal(a, b) for a, b in zip(want, got, strict=True)), decode_max


@pytest.mark.slow
@settings(max_examples=150)
@given(search_cases(max_queries=4, max_steps=6, max_beam=6))
def test_lazy_searcher_equals_eager_and_oracle(case) -> None:
    keywords, proposals, config, prefixes = case
    ks, ix = _index(keywords)
    lazy = NumpySearcher(ix, decode="lazy", collect_stats=True)
    eager = NumpySearcher(ix, decode="eager", collect_stats=True)
    got = lazy.search(proposals, config, prefixes)
    assert_same(got, eager.search(proposals, config, prefixes))
    assert_same(got, oracle_search(ks, proposals, config, prefixes))
    np.testing.assert_array_equal(lazy.last_stats.per_step, eager.last_stats.per_step)
    assert lazy.path_counts == eager.path_counts


@pytest.mark.parametrize(("cap", "decode_max"), [(1, 1 << 16), (40, 1 << 16), (1 << 30, 1 << 16), (40, 20), (40, 0)])
def test_wide_cache_bounded_and_results_unchanged(cap: int, decode_max: int) -> None:
    """Wide nodes (more children than valid proposals) at several depths; the cache emptied when it would
    pass ``cap`` keys (1: at every new node), nodes of more than ``decode_max`` children binary-searched
    instead, on threads over parts of a batch."""
    rng = np.random.default_rng(3)
    kws = [[a, b, c] for a in range(1, 9) for b in range(10, 10 + 6 * a) for c in (1, 2 + a)]
    kws += [[int(x)] for x in rng.choice(2**31, size=300, replace=False) + 100]
    ks, ix = _index(kws)
    proposals = rows_from_keywords(rng, [list(map(int, k)) for k in ks], 12, 3, 5)
    config = SearchConfig(beam_width=4, max_results=6)
    want = NumpySearcher(ix, decode="eager").search(proposals, config)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(numpy_nodes, "WIDE_CACHE_KEYS", cap)
        mp.setattr(numpy_nodes, "WIDE_DECODE_MAX", decode_max)
        mp.setattr(numpy_search, "MAX_PART_QUERIES", 3)
        mp.setattr(numpy_search, "MIN_THREAD_QUERIES", 1)
        lazy = NumpySearcher(ix, decode="lazy", threads=3)
        assert_same(lazy.search(proposals, config), want)
        assert_same(lazy.search(proposals, config), want)  # again, with the cache filled
        assert lazy.path_counts["pair"] > 0
        assert 0 < lazy._nodes.cached_keys <= max(cap, int(ix.max_degree) + 6 * 8)


def test_a_wide_node_is_binary_searched_until_that_costs_its_degree() -> None:
    """Ski rental: probes at a node of more than WIDE_DECODE_MAX children binary-search it (7 label decodes a
    probe at 64 children) until the decodes spent reach its degree; then its child keys are cached."""
    ks, ix = _index([[t] for t in range(10, 138, 2)] + [[10, 5]])  # the root: 64 children
    eager = EagerNodes(ix)
    keys = np.array([11, 12, 40, 137, 138], dtype=np.uint64)  # at the root: present 12, 40, 138
    want = eager.find_children(keys)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(numpy_nodes, "WIDE_DECODE_MAX", 4)
        lazy = LazyNodes(ix)
        for call in range(1, 5):  # 5 probes x 7 decodes a call: 35, 70 >= 64 at the second call
            got = lazy.find_children(keys)
            assert all(np.array_equal(a, b) for a, b in zip(want, got, strict=True))
            assert lazy.cached_keys == (0 if call < 2 else 64), call
        assert lazy._spent == {}


def test_decode_argument_and_auto() -> None:
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2], [1, 3], [4]]))
    assert NumpySearcher(ix).decode == "eager"  # small: decoded up front
    assert isinstance(NumpySearcher(ix, decode="lazy")._nodes, LazyNodes)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(numpy_search, "EAGER_MAX_NODES", ix.num_nodes - 1)
        assert NumpySearcher(ix).decode == "lazy"
        mp.setattr(numpy_search, "EAGER_MAX_NODES", ix.num_nodes)
        assert NumpySearcher(ix, decode="auto").decode == "eager"
    for bad in ("Lazy", "", None, 1):
        with pytest.raises(InputError, match=r"decode: expected one of 'auto', 'eager', 'lazy', got"):
            NumpySearcher(ix, decode=bad)  # type: ignore[arg-type]


def test_lazy_setup_allocates_nothing_per_node() -> None:
    """Set-up of 200k nodes: the eager arrays are tens of bytes a node, the lazy searcher's a few kB."""
    rng = np.random.default_rng(5)
    ks = KeywordSet.from_sequences([[int(a), int(b)] for a, b in rng.integers(1, 2**20, size=(100_000, 2))])
    ix = NarrowLoudsIndex.build(ks)
    _ = ix.node_flags  # what the index derives anyway is not the searcher's
    peaks = {}
    for mode in ("eager", "lazy"):
        tracemalloc.start()
        NumpySearcher(ix, decode=mode)
        peaks[mode] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peaks["eager"] > 20 * ix.num_nodes
    assert peaks["lazy"] < 64 * 1024


def test_lazy_on_a_loaded_index_and_forced_prefixes(tmp_path) -> None:
    kws = [[5, 6, 7, 8], [5, 6, 9], [5, 10], [11], [11, 12, 13]]
    ks, ix = _index(kws)
    ix.save(tmp_path / "i.ftrie")
    loaded = NarrowLoudsIndex.load(tmp_path / "i.ftrie")
    tok = np.array([[[6, 8, 12], [7, 9, 13], [8, 1, 2]]] * 3, dtype=np.int64)
    proposals = Proposals(tok, np.full(tok.shape, -0.5, dtype=np.float32))
    prefixes = [[5], [5, 6, 7], [11]]
    config = SearchConfig(beam_width=3)
    got = NumpySearcher(loaded, decode="lazy").search(proposals, config, prefixes)
    assert_same(got, oracle_search(ks, proposals, config, prefixes))
    assert (got.keyword_ids[:, 0] >= 0).all()
