"""`TrieStepper.allowed_padded`, `mask` and `start_from_prefixes` against the plain constructions they
replace (the full CSR; one boolean mask of every row; `start_states`): the same results, with memory in
proportion to the output."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import keyword_lists

import flashtrie.stepwise as stepwise
from flashtrie import KeywordSet, NarrowLoudsIndex
from flashtrie.search_core import normalize_prefixes, start_states
from flashtrie.stepwise import DEAD, StepStates, TrieStepper

EOS = 4294967290  # not produced by keyword_lists' alphabet


def _random_states(s: TrieStepper, kws: list[list[int]], rng: np.random.Generator, n: int) -> StepStates:
    """Roots, states inside edges and at nodes (walked keyword prefixes), FINISHED and DEAD."""
    ids = np.zeros((n, 8), dtype=np.int64)
    used = {t for kw in kws for t in kw}
    eos = min(t for t in range(len(used) + 1) if t not in used)
    ends = np.zeros(n, dtype=np.int64)
    for r in range(n):
        kw = kws[int(rng.integers(len(kws)))]
        cut = int(rng.integers(0, len(kw) + 1))
        row = kw[:cut] + ([eos] if cut == len(kw) and rng.random() < 0.3 else [])
        if rng.random() < 0.15:
            row = row + [int(rng.integers(0, 2**20))]  # most likely off the trie
        ids[r, : len(row)], ends[r] = row[:8], min(len(row), 8)
    return s.walk(ids, end=ends, eos_token_id=eos)


def _old_allowed_padded(s: TrieStepper, states: StepStates, k: int) -> tuple[np.ndarray, np.ndarray]:
    offsets, tokens = s.allowed(states)
    counts = np.diff(offsets)
    out = np.full((counts.size, k), -1, dtype=np.int64)
    for r in range(counts.size):
        row = tokens[offsets[r]: offsets[r + 1]][:k]
        out[r, : row.size] = row
    return counts, out


@settings(max_examples=60, deadline=None)
@given(keyword_lists(max_keywords=12, max_length=6), st.integers(0, 2**32 - 1), st.integers(0, 5),
       st.integers(1, 40), st.sampled_from([1, 3, 64]))
def test_allowed_padded_and_mask_equal_the_full_constructions(kws, seed, k, n, chunk):
    rng = np.random.default_rng(seed)
    s = TrieStepper(NarrowLoudsIndex.build(KeywordSet.from_sequences(kws)))
    states = _random_states(s, kws, rng, n)
    counts, padded = s.allowed_padded(states, k)
    want_counts, want = _old_allowed_padded(s, states, k)
    assert np.array_equal(counts, want_counts) and np.array_equal(padded, want)
    rank = {t: i for i, t in enumerate(sorted({t for kw in kws for t in kw}))}  # the same trie, small ids
    small = [[rank[t] for t in kw] for kw in kws]
    s = TrieStepper(NarrowLoudsIndex.build(KeywordSet.from_sequences(small)))
    states = _random_states(s, small, rng, n)
    eos = len(rank)
    v = eos + 1 + int(rng.integers(0, 3))
    old = stepwise._MASK_CHUNK
    stepwise._MASK_CHUNK = chunk * v  # several chunks of rows
    try:
        offsets, tokens = s.allowed(states)
        want_allow = np.zeros((n, v), dtype=bool)
        want_allow[np.repeat(np.arange(n), np.diff(offsets)), tokens] = True
        want_allow[s.ends(states) | (np.asarray(states.node) < 0), eos] = True
        assert np.array_equal(s.mask(states, v, eos, additive=False), want_allow)
        for dt, bits in ((np.float16, np.uint16), (np.float32, np.uint32), (np.float64, np.uint64)):
            raw = rng.integers(0, np.iinfo(bits).max, size=(n, v), dtype=bits, endpoint=True)
            raw[:, ::3] = np.asarray(np.nan, dtype=dt).view(bits) + 1  # NaN payloads
            logits = raw.view(dt).copy()
            s.mask(states, v, eos, out=logits)
            got = logits.view(bits)
            assert np.array_equal(got[want_allow], raw[want_allow])
            assert np.all(logits[~want_allow] == -np.inf)
    finally:
        stepwise._MASK_CHUNK = old


@settings(max_examples=60, deadline=None)
@given(keyword_lists(max_keywords=12, max_length=6), st.integers(0, 2**32 - 1), st.integers(0, 30))
def test_start_from_prefixes_equals_start_states(kws, seed, n):
    rng = np.random.default_rng(seed)
    index = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    pre = []
    for _ in range(n):
        kw = kws[int(rng.integers(len(kws)))]
        p = kw[: int(rng.integers(0, len(kw) + 1))]
        if rng.random() < 0.2:
            p = p + [int(rng.integers(0, 2**32 - 1))]
        pre.append(np.asarray(p, dtype=np.uint32) if rng.random() < 0.3 else p)
    got = TrieStepper(index).start_from_prefixes(pre)
    ss = start_states(index, normalize_prefixes(pre, n), n)  # the construction it replaced
    node, off = np.full(n, DEAD, dtype=np.int64), np.zeros(n, dtype=np.int64)
    node[ss.q], off[ss.q] = ss.node, ss.off
    assert np.array_equal(got.node, node) and np.array_equal(got.off, off)


@pytest.fixture(scope="module")
def wide() -> TrieStepper:
    """A root of 200,000 children."""
    return TrieStepper(NarrowLoudsIndex.build(KeywordSet.from_sequences([[t] for t in range(2, 200_002)])))


def _peak(fn) -> tuple[object, int]:
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_allowed_padded_memory_follows_its_output(wide: TrieStepper) -> None:
    states = wide.start(64)
    (counts, tokens), peak = _peak(lambda: wide.allowed_padded(states, 4))
    assert counts.tolist() == [200_000] * 64 and tokens[0].tolist() == [2, 3, 4, 5]
    assert peak < 1 << 20, peak  # the full CSR would take 64 x 200,000 x 12 bytes


def test_mask_memory_follows_its_output(wide: TrieStepper) -> None:
    wide.mask(wide.start(1), 200_003, 1)  # decodes (and keeps) the root's labels once
    states = wide.start(64)
    logits = np.zeros((64, 200_003), dtype=np.float32)
    _, peak = _peak(lambda: wide.mask(states, 200_003, 1, out=logits))
    assert peak < logits.nbytes // 8, (peak, logits.nbytes)  # temporaries: a chunk of rows at a time
    assert np.isneginf(logits[:, 200_002]).all() and not np.isinf(logits[:, 2:200_002]).any()
    _, peak = _peak(lambda: wide.mask(states, 200_003, 1, additive=False))
    assert peak < logits.nbytes // 4 + 64 * 200_003 + (1 << 20)  # the bool output itself, plus a chunk
