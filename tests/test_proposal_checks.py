"""`Proposals`' array checks: the fast paths refuse exactly what the entry-by-entry rules refuse, and values
that look like probabilities are refused as the TSV reader refuses them (``probabilities=True`` takes logs)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from flashtrie import InputError, Proposals
from flashtrie.proposal_checks import _PARALLEL_SORT_MIN

PAD = 2**32 - 1


def _rows(q: int, t: int, k: int, vocab: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([np.stack([rng.choice(vocab, k, replace=False) for _ in range(t)]) for _ in range(q)])


def _slow_duplicate(tok: np.ndarray) -> tuple[int, int, int] | None:
    """The first (q, t, token) with a real token twice in its row, entry by entry."""
    for q in range(tok.shape[0]):
        for t in range(tok.shape[1]):
            seen: set[int] = set()
            for x in sorted(int(v) for v in tok[q, t]):
                if x != PAD and x in seen:
                    return q, t, x
                seen.add(x)
    return None


@pytest.mark.parametrize("vocab", [300, 65_535, 65_536, 2**32 - 2])
@pytest.mark.parametrize("dtype", [np.int64, np.uint32, np.int32, np.uint64])
def test_duplicates_found_on_every_path(vocab: int, dtype: type) -> None:
    rng = np.random.default_rng(vocab)
    if dtype == np.int32 and vocab > 2**31:
        return
    for trial in range(30):
        tok = _rows(3, 2, 9, min(vocab, 2**31 - 1) if dtype == np.int32 else vocab, seed=trial).astype(np.int64)
        tok[rng.random(tok.shape) < 0.3] = -1 if np.dtype(dtype).kind == "i" else PAD
        if trial % 2:  # a duplicate of a real token (the largest the vocabulary has, sometimes)
            q, t = rng.integers(0, 3), rng.integers(0, 2)
            x = vocab - 1 if trial % 4 == 1 else int(rng.integers(0, min(vocab, 2**31 - 1)))
            tok[q, t, :2] = x
        arr = tok.astype(dtype)
        want = _slow_duplicate(arr.astype(np.int64) & 0xFFFF_FFFF)
        lp = np.full(arr.shape, -1.0, dtype=np.float32)
        if want is None:
            got = Proposals(arr, lp)
            assert np.array_equal(got.tokens, (arr.astype(np.int64) & 0xFFFF_FFFF).astype(np.uint32))
        else:
            q, t, x = want
            with pytest.raises(InputError, match=rf"tokens\[{q}, {t}, :\]: token {x} appears more than once"):
                Proposals(arr, lp)


def test_padding_and_the_largest_16_bit_token_are_told_apart() -> None:
    tok = np.array([[[65_534, PAD, PAD, 3]]], dtype=np.uint32)  # fits 16 bits: padding maps to 65535
    assert Proposals(tok, np.zeros(tok.shape, np.float32)).tokens.tolist() == tok.tolist()
    tok = np.array([[[65_535, PAD, 65_535]]], dtype=np.uint32)  # 65535 is a real token: no 16-bit path
    with pytest.raises(InputError, match="token 65535 appears more than once"):
        Proposals(tok, np.zeros(tok.shape, np.float32))


def test_a_large_batch_sorted_on_threads_finds_its_duplicate() -> None:
    q_n = 2 * _PARALLEL_SORT_MIN // (4 * 64) + 3
    tok = _rows(q_n, 4, 64, 1 << 20)
    lp = np.full(tok.shape, -2.0, dtype=np.float32)
    assert Proposals(tok, lp).shape == tok.shape
    tok[q_n - 1, 3, 7] = tok[q_n - 1, 3, 50]
    with pytest.raises(InputError, match=rf"tokens\[{q_n - 1}, 3, :\]: token {tok[q_n - 1, 3, 50]} appears"):
        Proposals(tok, lp)


def test_nan_and_inf_found_past_padding() -> None:
    tok = np.array([[[1, -1, 2], [3, 4, -1]]])
    lp = np.array([[[-1.0, np.nan, -2.0], [-1.0, np.inf, np.inf]]], dtype=np.float32)
    with pytest.raises(InputError, match=r"logprobs\[0, 1, 1\]: inf is not allowed"):
        Proposals(tok, lp)
    lp[0, 1, 1] = -np.inf
    assert Proposals(tok, lp).logprobs[0, 1, 1] == -np.inf


# ------------------------------------------------------------------------------------ probabilities
def test_probabilities_are_refused_as_the_tsv_reader_refuses_them(tmp_path: Path) -> None:
    tok = np.array([[[1, 2, 3], [2, 4, -1]]])
    probs = np.array([[[0.6, 0.3, 0.1], [0.5, 0.0, -7.0]]])  # -7.0: padding, not a value
    with pytest.raises(InputError, match=r"logprobs\[0, 0, 0\]: 0.6, and no value is below 0: these look like "
                                         r"probabilities; pass log-probabilities \(log p\), probabilities=True "
                                         r"to take their logs, or probabilities=False"):
        Proposals(tok, probs)
    tsv = tmp_path / "p.tsv"
    tsv.write_text("q\t" + json.dumps({"indices": [[1, 2, 3], [2, 4]],
                                         "probs": [[0.6, 0.3, 0.1], [0.5, 0.0]]}) + "\n")
    with pytest.raises(InputError, match="these look like probabilities"):
        Proposals.from_tsv(tsv)
    converted = Proposals(tok, probs, probabilities=True)
    from_file, _ = Proposals.from_tsv(tsv, probabilities=True)
    assert np.array_equal(converted.tokens, from_file.tokens)
    assert np.array_equal(converted.logprobs.view(np.uint32), from_file.logprobs.view(np.uint32))
    assert converted.logprobs[0, 1, 1] == -np.inf and converted.logprobs[0, 1, 2] == -np.inf
    # the same ranking as the logs a model would give
    assert converted.logprobs[0, 0].tolist() == np.log(np.array([0.6, 0.3, 0.1])).astype(np.float32).tolist()


def test_what_is_not_refused_as_probabilities() -> None:
    tok = np.array([[[1, 2], [3, -1]]])
    for lp in ([[[0.25, -1.5], [-0.5, 9.0]]],  # model scores: a positive value among negative ones
               [[[0.0, -0.0], [0.0, 0.5]]],    # all zero (probability one) except padding
               [[[-0.5, -1.0], [-2.0, 0.5]]]):
        arr = np.array(lp, dtype=np.float32)
        assert np.array_equal(Proposals(tok, arr).logprobs[:, :, 0], arr[:, :, 0])
    scores = np.array([[[0.25, 3.5], [1.0, -np.inf]]], dtype=np.float32)  # non-negative scores, said so
    with pytest.raises(InputError, match="look like probabilities"):
        Proposals(tok, scores)
    assert Proposals(tok, scores, probabilities=False).logprobs.tolist() == scores.tolist()
    assert Proposals(tok, scores, probabilities=False)[0].shape == (1, 2, 2)


def test_probabilities_true_refuses_what_is_not_a_probability() -> None:
    tok = np.array([[[1, 2, -1]]])
    with pytest.raises(InputError, match=r"logprobs\[0, 0, 1\]: 1.5 is not a probability in \[0, 1\] "
                                         r"\(probabilities=True\)"):
        Proposals(tok, np.array([[[0.5, 1.5, 7.0]]]), probabilities=True)
    with pytest.raises(InputError, match=r"logprobs\[0, 0, 0\]: -0.25 is not a probability"):
        Proposals(tok, np.array([[[-0.25, 0.5, 7.0]]]), probabilities=True)
    with pytest.raises(InputError, match="probabilities: expected True, False or None, got 'yes'"):
        Proposals(tok, np.array([[[0.5, 0.5, 0.0]]]), probabilities="yes")  # type: ignore[arg-type]
