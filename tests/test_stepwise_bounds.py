"""The numpy stepper at the edges of its input checks and column bounds (each case kills a mutant that the
brute-force tests of tests/test_stepwise.py let through)."""

from __future__ import annotations

import numpy as np
import pytest

from flashtrie import InputError, KeywordSet, NarrowLoudsIndex
from flashtrie.stepwise import StepStates, TrieStepper, check_vocab, eos_ids


def _index(kws: list[list[int]]) -> NarrowLoudsIndex:
    return NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))


def test_eos_ids_at_their_limits() -> None:
    assert eos_ids(2**32 - 2) == (2**32 - 2,)
    with pytest.raises(InputError, match="eos_token_id: 4294967295 is not a token id"):
        eos_ids(2**32 - 1)  # the padding token
    assert eos_ids(list(range(100, 108))) == tuple(range(100, 108))
    with pytest.raises(InputError, match="eos_token_id: expected 1 to 8 ids, got 9"):
        eos_ids(list(range(100, 109)))


def test_an_eos_above_2_31_that_is_a_trie_token_is_refused() -> None:
    s = TrieStepper(_index([[2**31 + 5], [2**31 + 6]]))
    with pytest.raises(InputError, match="occurs in the trie"):
        s.advance(s.start(1), np.array([0]), 2**31 + 5)


def test_the_largest_vocabulary() -> None:
    check_vocab(_index([[1, 2]]), 2**32 - 1)
    with pytest.raises(InputError, match="vocab_size: 4294967296"):
        check_vocab(_index([[1, 2]]), 2**32)


def test_walk_per_row_end_and_bounds() -> None:
    s = TrieStepper(_index([[1, 2], [1, 2, 3]]))
    st = s.walk(np.array([[1, 2, 3], [1, 2, 3]]), end=[2, 3])
    assert s.ends(st).tolist() == [True, True]
    offsets, tokens = s.allowed(st)
    assert offsets.tolist() == [0, 1, 1] and tokens.tolist() == [3]
    with pytest.raises(InputError, match=r"begin: expected column bounds in \[0, 3\], got -1..-1"):
        s.walk(np.array([[1, 2, 3]]), begin=-1)
    with pytest.raises(InputError, match=r"end: expected column bounds in \[0, 3\], got 4..4"):
        s.walk(np.array([[1, 2, 3]]), end=4)


def test_states_at_their_limits() -> None:
    index = _index([[1, 2], [3]])
    s = TrieStepper(index)
    with pytest.raises(InputError, match=f"node {index.num_nodes} is out of range"):
        s.allowed(StepStates(np.array([index.num_nodes]), np.array([0])))
    one = s.start_from_prefixes([[1]])
    with pytest.raises(InputError, match="outside its edge"):
        s.allowed(StepStates(one.node, np.zeros(1, np.int64)))  # a node's state is past its first token
    with pytest.raises(InputError, match="off 18446744073709551615 is outside every edge"):
        s.allowed(StepStates(np.array([0]), np.array([2**64 - 1], np.uint64)))
