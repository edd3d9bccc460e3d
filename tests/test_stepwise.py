"""The numpy stepwise API (`flashtrie.stepwise`) against a brute-force dict trie."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from stepwise_oracle import DEAD, FINISHED, DictTrie, pick_token
from strategies import keyword_lists

from flashtrie import InputError, KeywordSet, NarrowLoudsIndex
from flashtrie.stepwise import StepStates, TrieStepper

EOS_FAR = 4294967290  # not produced by keyword_lists' alphabet


def _check_states(s: TrieStepper, trie: DictTrie, states: StepStates, hist: list[object]) -> None:
    node = np.asarray(states.node)
    for i, h in enumerate(hist):
        assert (node[i] == -1) == (h == DEAD), (i, h, node[i])
        assert (node[i] == -2) == (h == FINISHED), (i, h, node[i])
    offsets, tokens = s.allowed(states)
    assert offsets.dtype == np.int64 and tokens.dtype == np.uint32
    got = [tokens[offsets[i]: offsets[i + 1]].tolist() for i in range(len(hist))]
    assert got == [trie.allowed(h) for h in hist]
    assert s.ends(states).tolist() == [trie.ends(h) for h in hist]
    counts, padded = s.allowed_padded(states, 2)
    assert counts.tolist() == [len(trie.allowed(h)) for h in hist]
    for i, h in enumerate(hist):
        want = trie.allowed(h)[:2]
        assert padded[i].tolist() == want + [-1] * (2 - len(want))


@given(keyword_lists(max_keywords=10, max_length=6), st.integers(0, 2**32 - 1), st.integers(1, 6))
def test_walks_match_dict_trie(kws, seed, n):
    """Random walks (valid children, EOS, wrong tokens, far tokens) agree with the dict trie at every step."""
    rnd = random.Random(seed)
    trie = DictTrie(kws)
    s = TrieStepper(NarrowLoudsIndex.build(KeywordSet.from_sequences(kws)))
    alphabet = sorted({x for kw in kws for x in kw})
    eos = (EOS_FAR,) if rnd.random() < 0.7 else (EOS_FAR, EOS_FAR + 2)
    states, hist = s.start(n), [() for _ in range(n)]
    for _ in range(max(len(k) for k in kws) + 2):
        _check_states(s, trie, states, hist)
        x = [pick_token(rnd, trie, h, alphabet, eos) for h in hist]
        states = s.advance(states, np.array(x, dtype=np.int64), eos)
        hist = [trie.advance(h, t, eos) for h, t in zip(hist, x, strict=True)]
    _check_states(s, trie, states, hist)


@given(keyword_lists(max_keywords=10, max_length=6), st.integers(0, 2**32 - 1))
def test_masks_match_dict_trie(kws, seed):
    """Boolean and additive masks: trie children, EOS where a keyword ends, only EOS when finished or dead."""
    rnd = random.Random(seed)
    small = [[x % 50 for x in kw] for kw in kws]
    trie = DictTrie(small)
    s = TrieStepper(NarrowLoudsIndex.build(KeywordSet.from_sequences(small)))
    vocab, eos = 60, (55,)
    alphabet = sorted({x for kw in small for x in kw})
    states, hist = s.start(5), [()] * 5
    for _ in range(max(len(k) for k in small) + 1):
        want = np.stack([trie.mask(h, vocab, eos) for h in hist])
        dead_before = s.dead_count
        assert np.array_equal(s.mask(states, vocab, eos, additive=False), want)
        assert s.dead_count - dead_before == sum(h == DEAD for h in hist)
        logits = np.asarray(np.random.default_rng(seed).normal(size=(5, vocab)), dtype=np.float32)
        logits[:, ::7], logits[:, 1::9], logits[:, 2::11] = -0.0, np.inf, np.nan
        out = logits.copy()
        assert s.mask(states, vocab, 55, out=out) is out  # in place: allowed keep their bits, the rest -inf
        assert np.array_equal(out.view(np.uint32), np.where(want, logits, np.float32(-np.inf)).view(np.uint32))
        out64 = logits.astype(np.float64)
        s.mask(states, vocab, 55, out=out64)
        assert np.array_equal(out64.view(np.uint64), np.where(want, logits.astype(np.float64), -np.inf).view(np.uint64))
        assert np.array_equal(s.mask(states, vocab, eos), np.where(want, 0.0, -np.inf).astype(np.float32))
        x = [pick_token(rnd, trie, h, alphabet, eos) % vocab for h in hist]
        states = s.advance(states, np.array(x), eos)
        hist = [trie.advance(h, t, eos) for h, t in zip(hist, x, strict=True)]


@given(keyword_lists(max_keywords=10, max_length=6), st.integers(0, 2**32 - 1))
def test_forced_prefixes(kws, seed):
    rnd = random.Random(seed)
    trie = DictTrie(kws)
    s = TrieStepper(NarrowLoudsIndex.build(KeywordSet.from_sequences(kws)))
    prefixes = []
    for _ in range(6):
        kw = rnd.choice(kws)
        p = list(kw[: rnd.randint(0, len(kw))])
        if rnd.random() < 0.3:
            p.append(rnd.choice([0, 7, 4294967294]))
        prefixes.append(p)
    hist: list[object] = [tuple(p) if tuple(p) in trie.children else DEAD for p in prefixes]
    _check_states(s, trie, s.start_from_prefixes(prefixes), hist)


@pytest.mark.slow
def test_huge_fanout_and_wide_labels():
    """Thousands of siblings across the 16-bit label boundary, at the root and under a compressed edge."""
    rng = np.random.default_rng(1)
    roots = np.unique(rng.integers(0, 2**32 - 2, size=3000)).tolist() + [65535, 65536, 0]
    under = np.unique(rng.integers(60000, 70000, size=2000)).tolist()
    kws = [[r] for r in roots] + [[5, 6, 7, u] for u in under] + [[5, 6, 7]]
    trie = DictTrie(kws)
    s = TrieStepper(NarrowLoudsIndex.build(KeywordSet.from_sequences(kws)))
    st0 = s.start(1)
    offsets, tokens = s.allowed(st0)
    assert tokens.tolist() == trie.allowed(())
    st1 = s.start_from_prefixes([[5, 6, 7]] * len(under))
    nxt = s.advance(st1, np.array(under))
    assert s.ends(nxt).all() and (s.allowed(nxt)[0] == 0).all()
    _check_states(s, trie, s.start_from_prefixes([[5], [5, 6], [5, 6, 7], [65536], [5, 7]]),
                  [(5,), (5, 6), (5, 6, 7), (65536,), DEAD])


def test_refusals():
    s = TrieStepper(NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2], [300]])))
    st0 = s.start(2)
    with pytest.raises(InputError, match="token 300, not below vocab_size 300"):
        s.mask(st0, 300, 0)
    with pytest.raises(InputError, match="occurs in the trie"):
        s.mask(st0, 400, 2)
    with pytest.raises(InputError, match="occurs in the trie"):
        s.advance(st0, np.array([1, 1]), [5, 1])
    with pytest.raises(InputError, match="not below vocab_size"):
        s.mask(st0, 301, 301)
    with pytest.raises(InputError, match="needs an EOS"):
        s.mask(st0, 400, None)
    with pytest.raises(InputError, match="out"):
        s.mask(st0, 400, 0, out=np.zeros((2, 399), dtype=np.float32))
    with pytest.raises(InputError, match="bool"):
        s.mask(st0, 400, 0, out=np.zeros((2, 400), dtype=np.float32), additive=False)
    with pytest.raises(InputError, match="node 99 is out of range"):
        s.allowed(StepStates(np.array([99]), np.array([0])))
    with pytest.raises(InputError, match="outside its edge"):
        s.allowed(StepStates(np.array([0]), np.array([1])))
    with pytest.raises(InputError, match="tokens"):
        s.advance(st0, np.array([1]))
    with pytest.raises(InputError, match="eos_token_id"):
        s.advance(st0, np.array([1, 1]), True)
    with pytest.raises(InputError, match=r"prefixes\[1\]"):
        s.start_from_prefixes([[1], [-3]])
    with pytest.raises(InputError, match="index"):
        TrieStepper([[1, 2]])


def test_more_refusals_before_any_work():
    s = TrieStepper(NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2], [300]])))
    st0, ids = s.start(2), np.array([[1, 2], [300, 0]])
    with pytest.raises(InputError, match="vocab_size: 4294967296 is more than the 4,294,967,295 token ids"):
        s.mask(st0, 2**32, 0)
    assert s.mask(s.start(1), 301, np.array(0), additive=False).sum() == 2  # a 0-d array is one id (1, 300)
    with pytest.raises(InputError, match="eos_token_id: expected an int or a sequence of ints, got 1.5"):
        s.advance(st0, np.array([1, 1]), 1.5)
    ro = np.zeros((2, 400), dtype=np.float32)
    ro.flags.writeable = False
    with pytest.raises(InputError, match="out: the array is read-only"):
        s.mask(StepStates(np.array([-1, -1]), np.array([0, 0])), 400, 0, out=ro)
    assert s.dead_count == 0  # refused before the dead rows were counted
    with pytest.raises(InputError, match="node 18446744073709551615 is out of range"):
        s.allowed(StepStates(np.array([2**64 - 1], dtype=np.uint64), np.array([0])))
    for begin, says in [(1.9, "begin: expected an int or 2 ints"), (True, "begin: expected an int or 2 ints"),
                        ("1", "begin: expected an int or 2 ints"), ([1], r"begin: expected an int or 2 ints"),
                        (np.zeros((2, 1), np.int64), "begin: expected an int or 2 ints"),
                        ([0, 3], r"begin: expected column bounds in \[0, 2\], got 0..3"),
                        (np.array([2**64 - 1, 0], np.uint64), "got 0..18446744073709551615")]:
        with pytest.raises(InputError, match=says):
            s.walk(ids, begin=begin)
    assert s.walk(ids, begin=np.int64(1)).node.tolist() == s.walk(ids, begin=[1, 1]).node.tolist()


def test_tokens_that_are_no_label_leave_the_trie():
    s = TrieStepper(NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2], [300]])))
    for x in (-1, 2**32 - 1, 2**32 + 1, 2**40 + 300):
        assert s.advance(s.start(1), np.array([x], dtype=np.int64)).node.tolist() == [-1], x


def test_finished_absorbs_padding_and_dead_stays_dead():
    s = TrieStepper(NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2]])))
    st0 = s.start_from_prefixes([[1, 2], [1], [1, 2]])
    st1 = s.advance(st0, np.array([9, 9, 3]), eos_token_id=9)  # finished, EOS too early -> dead, off-trie
    assert st1.node.tolist() == [-2, -1, -1]
    st2 = s.advance(st1, np.array([0, 1, 9]), eos_token_id=9)  # a pad token after EOS keeps FINISHED
    assert st2.node.tolist() == [-2, -1, -1]
    m = s.mask(st2, 10, 9, additive=False)
    assert m.sum(1).tolist() == [1, 1, 1] and m[:, 9].all()
    assert s.dead_count == 2
    s.reset_dead_count()
    assert s.dead_count == 0
    assert st2.take(np.array([2, 0])).node.tolist() == [-1, -2]
