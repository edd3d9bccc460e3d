"""The index's node flags (derived, since format 3 not stored) and stored degrees, and its keyword-id modes."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from flashtrie.reference_cpu.numpy_search import NumpySearcher
from hypothesis import given, settings
from hypothesis import strategies as st

from flashtrie import InputError, KeywordSet, NarrowLoudsIndex
from flashtrie.index import checks, derived, louds_pass
from flashtrie.limits import MAX_TOKEN
from flashtrie.proposals import Proposals
from flashtrie.search_types import SearchConfig

DATA = Path(__file__).resolve().parent / "data"
PREFIX = struct.Struct("<8sIIQ")


def upload_derivation(ix: NarrowLoudsIndex) -> tuple[np.ndarray, int, int]:
    """What gpu_impl/searcher.py `_upload_index` derived per GpuSearcher before format 2 (kept verbatim)."""
    n = int(ix.num_nodes)
    louds_bits = ix.louds.to_bools()
    zpos = np.flatnonzero(~louds_bits)
    deg = np.diff(np.concatenate(([-1], zpos))) - 1
    max_degree = int(deg.max()) if n else 0
    max_degree_nonroot = int(deg[1:].max()) if n > 1 else 0
    linked = ix.linked.to_bools()[:n].astype(np.uint32)
    term = ix.terminal.to_bools()[:n].astype(np.uint32)
    vals = linked | (term << 1) | ((deg > 0).astype(np.uint32) << 2)
    vals = np.concatenate([vals, np.zeros((-n) % 8 + 8, dtype=np.uint32)])
    nflags = np.bitwise_or.reduce(vals.reshape(-1, 8) << (4 * np.arange(8, dtype=np.uint32)), axis=1)
    return nflags.astype(np.uint32), max_degree, max_degree_nonroot


tokens = st.one_of(st.integers(0, 5), st.integers(65_530, 65_540), st.integers(MAX_TOKEN - 3, MAX_TOKEN))
keyword_lists = st.lists(st.lists(tokens, min_size=1, max_size=8), min_size=1, max_size=40)


@settings(max_examples=120, deadline=None)
@given(keyword_lists, st.sampled_from([8, 16, 1 << 22]))
def test_node_flags_and_degrees_match_the_upload_derivation(kws, chunk):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(derived, "CHUNK_NODES", chunk)  # several thread tasks even on small tries
        ix = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
        flags, md, mdn = upload_derivation(ix)
        assert ix.node_flags.dtype == np.uint32
        np.testing.assert_array_equal(ix.node_flags, flags)
        assert (ix.max_degree, ix.max_degree_nonroot) == (md, mdn)
        n = ix.num_nodes
        assert ix.node_flags.size == (n + (-n) % 8 + 8) // 8
        _, layout = checks.layout_problem(ix)
        facts = louds_pass.louds_facts(ix.louds, ix.linked, ix.terminal, layout.tails, layout.levels, 10**9, 2)
        assert facts.longest == max(map(len, kws))


def test_node_flags_derived_once_after_load(tmp_path, monkeypatch):
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2, 3], [1, 2], [4], [4, 5, 6, 7], [9] * 5]))
    ix.save(tmp_path / "a.ftrie")
    assert "node_flags" not in ix.arrays
    from flashtrie.index import narrow_louds

    calls = []
    real = narrow_louds.derive_node_flags
    monkeypatch.setattr(narrow_louds, "derive_node_flags", lambda *a: calls.append(1) or real(*a))
    for verify in (True, False):
        calls.clear()
        got = NarrowLoudsIndex.load(tmp_path / "a.ftrie", verify=verify)
        assert calls == []  # nothing derived until asked
        np.testing.assert_array_equal(got.node_flags, upload_derivation(ix)[0])
        assert got.node_flags is got.node_flags and calls == [1]  # once
        assert (got.max_degree, got.max_degree_nonroot) == (ix.max_degree, ix.max_degree_nonroot) == (3, 1)


# ---------------------------------------------------------------- keyword ids


def random_keywords(seed: int, n: int = 400, vocab: int = 30) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, size=int(rng.integers(1, 6))).tolist() for _ in range(n)]


@settings(max_examples=60, deadline=None)
@given(keyword_lists)
def test_index_order_ids_and_returned_order(kws):
    ks = KeywordSet.from_sequences(kws)
    by_input = NarrowLoudsIndex.build(ks)
    ix, order = NarrowLoudsIndex.build(ks, ids="index", return_order=True)
    assert ix.id_order == "index" and ix.keyword_ids.size == 0 and ix.keyword_ids.width == 0
    nodes = np.arange(ix.num_nodes)
    ids = ix.keyword_ids_of(nodes)
    term = ix.is_terminal(nodes)
    assert ids[term].tolist() == list(range(ix.num_unique))  # the r-th keyword end has id r
    np.testing.assert_array_equal(order[ids[term]], by_input.keyword_ids_of(nodes)[term])
    first = {}
    for i, k in enumerate(kws):
        first.setdefault(tuple(k), i)
    assert sorted(order.tolist()) == sorted(first.values())
    for r in range(ix.num_unique):
        assert ix.keyword(r).tolist() == kws[order[r]]
        assert ix.lookup(kws[order[r]]) == r
    for i, k in enumerate(kws):
        if first[tuple(k)] == i:
            assert by_input.keyword(i).tolist() == k
        else:
            with pytest.raises(InputError, match="duplicate"):
                by_input.keyword(i)


def test_identity_map_is_not_stored_and_compact_map_width():
    kws = random_keywords(1)
    ix, order = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws), ids="index", return_order=True)
    in_index_order = [kws[i] for i in order]
    same = NarrowLoudsIndex.build(KeywordSet.from_sequences(in_index_order))
    assert same.id_order == "input" and same.keyword_ids.size == 0 and not same.stats()["id_map"]
    shuffled = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    assert shuffled.keyword_ids.size == shuffled.num_unique
    assert shuffled.keyword_ids.width == (len(kws) - 1).bit_length()  # as few bits as the ids need
    s = shuffled.stats()
    assert s["bytes"] - s["bytes_without_id_map"] == s["id_map_bytes"] == shuffled.keyword_ids.nbytes
    assert "map of 9 bits" in shuffled.describe() and "no map" in same.describe()
    for i in (0, 5, len(in_index_order) - 1):
        assert same.keyword(i).tolist() == in_index_order[i]
    # duplicates at the end keep the identity
    dup = NarrowLoudsIndex.build(KeywordSet.from_sequences(in_index_order + in_index_order[:3]))
    assert dup.keyword_ids.size == 0 and dup.duplicates == 3


def test_keyword_refuses_bad_ids():
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1], [2]]), ids="index")
    for bad in (-1, 2, 1.0, True, "0"):
        with pytest.raises(InputError, match="i: keyword id"):
            ix.keyword(bad)
    with pytest.raises(InputError, match="ids"):
        NarrowLoudsIndex.build(KeywordSet.from_sequences([[1]]), ids="sorted")  # type: ignore[arg-type]


def test_searches_agree_across_id_modes_after_the_permutation(tmp_path):
    rng = np.random.default_rng(5)
    kws = random_keywords(2, n=600, vocab=12)
    ks = KeywordSet.from_sequences(kws)
    by_input = NarrowLoudsIndex.build(ks)
    by_index, order = NarrowLoudsIndex.build(ks, ids="index", return_order=True)
    identity = NarrowLoudsIndex.build(KeywordSet.from_sequences([kws[i] for i in order]))
    assert by_input.keyword_ids.size and not by_index.keyword_ids.size and not identity.keyword_ids.size
    by_index.save(tmp_path / "ix.ftrie")
    loaded = NarrowLoudsIndex.load(tmp_path / "ix.ftrie")
    q, t, k = 6, 5, 12
    toks = np.stack([np.stack([rng.permutation(14)[:k] for _ in range(t)]) for _ in range(q)]).astype(np.uint32)
    lps = (-rng.random((q, t, k)) * 4).astype(np.float32)
    props, cfg = Proposals(toks, lps), SearchConfig(beam_width=8)
    want = NumpySearcher(by_input).search(props, cfg)
    for ix in (by_index, identity, loaded):
        got = NumpySearcher(ix).search(props, cfg)
        mapped = np.where(got.keyword_ids >= 0, order[np.maximum(got.keyword_ids, 0)], -1)
        np.testing.assert_array_equal(mapped, want.keyword_ids)
        np.testing.assert_array_equal(got.scores.view(np.uint32), want.scores.view(np.uint32))
        np.testing.assert_array_equal(got.lengths, want.lengths)
    assert (want.keyword_ids >= 0).sum() > 20


# ---------------------------------------------------------------- files: crafting helpers
