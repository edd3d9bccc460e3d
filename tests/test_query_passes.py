"""The query generator's one-off library passes: the same workloads as before they were fused and threaded."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from flashtrie.datasets import _library_pass as lp
from flashtrie.datasets import generate_keywords, generate_queries, library_fingerprint
from flashtrie.datasets._hashing import full_keyword_hashes
from flashtrie.datasets._queries_v2 import pass_key
from hypothesis import given, settings
from hypothesis import strategies as st

from flashtrie import KeywordSet
from flashtrie.limits import MAX_TOKEN


def digest(wl) -> str:
    h = hashlib.sha256()
    for a in (wl.proposals.tokens, wl.proposals.logprobs, wl.topics, *wl.relevant):
        h.update(np.ascontiguousarray(a).tobytes())
    h.update(wl.params.library_fingerprint.encode())
    return h.hexdigest()[:16]


# digests of the workloads (and library fingerprints) made by main at 6f9f5bf, before the passes were fused
CASES = {
    "small-dense": ({"n": 20_000, "vocab_size": 50_000, "seed": 3},
                    {"num_queries": 3, "proposals_per_step": 300, "preset": "dense", "seed": 5, "min_topic_size": 64},
                    "03d46b60dc8b0364"),
    "small-sparse": ({"n": 20_000, "vocab_size": 50_000, "seed": 3},
                     {"num_queries": 3, "proposals_per_step": 300, "preset": "sparse", "seed": 5,
                      "min_topic_size": 64}, "1675501718604568"),
    "topic depth 2": ({"n": 200_000, "seed": 1},
                      {"num_queries": 4, "proposals_per_step": 500, "preset": "dense", "seed": 2, "topic_depth": 2,
                       "min_topic_size": 128}, "e0b9171e98170824"),
    "duplicates": ({"n": 300_000, "seed": 4, "duplicate_fraction": 0.05},
                   {"num_queries": 3, "proposals_per_step": 200, "preset": "dense", "seed": 7, "min_topic_size": 256},
                   "578c4e353017dd70"),
    "tokens up to 2**32 - 1": ({"n": 60_000, "seed": 6, "vocab_size": MAX_TOKEN + 1},
                               {"num_queries": 2, "proposals_per_step": 100, "preset": "dense", "seed": 1,
                                "min_topic_size": 16}, "794c89d6b78766bd"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_workloads_are_the_same_as_before_the_fused_passes(name, monkeypatch):
    lib_args, query_args, want = CASES[name]
    lib_args = dict(lib_args)
    kw = generate_keywords(lib_args.pop("n"), **lib_args)
    monkeypatch.setattr(lp, "PIECE", 5_000)  # several pieces and blocks on small libraries
    monkeypatch.setattr(lp, "_FLUSH", 7_000)
    monkeypatch.setattr(lp, "_TALLY_KEYS", 3_000)
    monkeypatch.setattr(lp, "BLOCK_PER_TOKEN", 0.0)
    for threads, counting in ((1, "sort"), (3, "sort"), (3, "bincount")):
        monkeypatch.setattr(lp, "COUNTING", counting)
        t: dict[str, float] = {}
        wl = generate_queries(kw, **query_args, threads=threads, timings=t, device="cpu")
        assert digest(wl) == want
        assert {pass_key("cpu"), "per-query draws"} <= set(t)


libraries = st.lists(st.lists(st.one_of(st.integers(0, 40), st.integers(MAX_TOKEN - 2, MAX_TOKEN)),
                              min_size=1, max_size=9), min_size=1, max_size=200)


@settings(max_examples=60, deadline=None)
@given(libraries, st.integers(1, 4), st.sampled_from([1, 3, 64]), st.sampled_from([1, 5, 1 << 23]),
       st.sampled_from(["sort", "bincount", "sparse"]))
def test_library_pass_matches_the_plain_definitions(seqs, steps, piece, flush, mode):
    ks = KeywordSet.from_sequences(seqs)
    top = int(ks.tokens.max())
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lp, "PIECE", piece)
        mp.setattr(lp, "_FLUSH", flush)
        mp.setattr(lp, "_TALLY_KEYS", flush)
        mp.setattr(lp, "BLOCK_PER_TOKEN", 0.0)
        if mode == "sparse":
            mp.setattr(lp, "BINCOUNT_MAX", 0)
        else:
            mp.setattr(lp, "COUNTING", mode)
        facts = lp.library_pass(ks, steps, top, 3)
    np.testing.assert_array_equal(facts.lengths, ks.lengths)
    np.testing.assert_array_equal(facts.full, full_keyword_hashes(ks, 1))
    assert facts.fingerprint == library_fingerprint(ks)
    np.testing.assert_array_equal(facts.length_counts, np.bincount(ks.lengths))
    for d, (tok, cnt) in enumerate(facts.depth_counts):
        col = np.array([s[d] for s in seqs if len(s) > d], dtype=np.uint32)
        want_tok, want_cnt = np.unique(col, return_counts=True)
        np.testing.assert_array_equal(tok, want_tok)
        np.testing.assert_array_equal(cnt, want_cnt)
        assert tok.dtype == np.uint32 and cnt.dtype == np.int64


@pytest.mark.parametrize("long", [255, 256, 300])
def test_lengths_of_256_tokens_or_more_are_int64(long):
    ks = KeywordSet.from_sequences([[1, 2], list(range(long)), [7]] * 3)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lp, "PIECE", 2)
        facts = lp.library_pass(ks, 3, long, 2)
    assert facts.lengths.dtype == (np.uint8 if long < 256 else np.int64)
    np.testing.assert_array_equal(facts.lengths, ks.lengths)
    np.testing.assert_array_equal(facts.full, full_keyword_hashes(ks, 1))
    assert lp.length_dtype(ks, 3) == facts.lengths.dtype


def test_dense_blocks_of_small_libraries_are_few_and_large(monkeypatch):
    """With the default BLOCK_PER_TOKEN a small library over a large vocabulary is one block (one table)."""
    made = []
    real = lp._DenseTally.__init__

    def spy(self, *a, **k):
        made.append(1)
        real(self, *a, **k)

    monkeypatch.setattr(lp._DenseTally, "__init__", spy)
    ks = KeywordSet.from_sequences([[i % 97, 5] for i in range(300)] + [[1 << 20]])
    monkeypatch.setattr(lp, "PIECE", 16)
    lp.library_pass(ks, 2, 1 << 20, 8)
    assert len(made) == 1
    made.clear()
    monkeypatch.setattr(lp, "BLOCK_PER_TOKEN", 0.0)
    facts = lp.library_pass(ks, 2, 1 << 20, 8)
    assert len(made) == 8
    np.testing.assert_array_equal(facts.depth_counts[1][1], [300])


@pytest.mark.parametrize("counting", ["sort", "bincount"])
def test_wide_count_tables_give_the_same_counts(counting, monkeypatch):
    ks = generate_keywords(30_000, seed=8)
    top = int(ks.tokens.max())
    want = lp.library_pass(ks, 4, top, 2)
    monkeypatch.setattr(lp, "WIDE_COUNTS", 1)  # int64 tables
    monkeypatch.setattr(lp, "COUNTING", counting)
    monkeypatch.setattr(lp, "BLOCK_PER_TOKEN", 0.0)
    monkeypatch.setattr(lp, "PIECE", 4_000)
    got = lp.library_pass(ks, 4, top, 3)
    for (t1, c1), (t2, c2) in zip(want.depth_counts, got.depth_counts, strict=True):
        np.testing.assert_array_equal(t1, t2)
        np.testing.assert_array_equal(c1, c2)
        assert c2.dtype == np.int64


def test_piece_and_buffer_sizes_follow_the_thread_count():
    assert lp.sizes(lp.MANY_THREADS) == (lp.PIECE, lp._TALLY_KEYS)
    assert lp.sizes(16) == (1 << 19, 1 << 20)
    assert lp.sizes(1) == lp.sizes(lp.MANY_THREADS - 1) == (1 << 17, 1 << 18)


def test_device_gpu_is_refused_for_the_version_1_generator():
    """Version 1 has no GPU pass: device='gpu' is an InputError naming it, not a silent CPU run."""
    from flashtrie.datasets import queries

    from flashtrie import InputError

    ks = KeywordSet.from_sequences([[1, 2], [3, 4, 5], [6]])
    with pytest.raises(InputError, match="device: 'gpu' runs version"):
        queries.generate_queries(ks, num_queries=1, proposals_per_step=4, generator=queries.GENERATORS[0],
                                 device="gpu")
    queries.generate_queries(ks, num_queries=1, proposals_per_step=4, generator=queries.GENERATORS[0], device="cpu")
