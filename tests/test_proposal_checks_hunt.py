"""Counter-example hunt: `Proposals`' vectorised checks give the verdict and the message of an entry-by-entry
reading of the rules (docs/semantics.md), on every path of each fast test: signed input with and without
negative values, non-native byte order, strided input, 16- and 32-bit duplicate sorts, a sort buffer kept
per thread or made per call, rows sorted on threads, padding, NaN / +inf at real and padding entries, and
values that look like probabilities."""

from __future__ import annotations

import contextlib
import math
import threading
from unittest import mock

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashtrie import InputError, Proposals
from flashtrie import proposal_checks as checks

PAD = 2**32 - 1
#: Vocabularies around the 16-bit sort's edge and far above it.
VOCABS = [1, 3, 300, 65_534, 65_535, 65_536, 70_000, 2_200_000, 2**31 - 1, PAD]
DTYPES = ["int64", "int32", "uint32", "uint64", "int16", "uint16", ">i8", "<u4", ">u4"]
LOGPROBS = [-1.0, -0.25, -7.5, -math.inf, -0.0, 0.0, 0.5, 2.0, math.nan, math.inf, 1e39, -1e39]
#: How the duplicates sort runs: this thread's kept buffer, a new array per call, or rows sorted on threads.
SORT_PATHS = {"kept": {}, "fresh": {"_SCRATCH_BYTES": 0}, "threads": {"_PARALLEL_SORT_MIN": 4}}


def _brute(tok: np.ndarray, lp: np.ndarray, probabilities: bool | None) -> str | None:
    """The first refusal an entry-by-entry reading gives (its message), or None when the input is accepted."""
    vals = [[[int(x) for x in row] for row in step] for step in tok]
    with np.errstate(over="ignore"):
        lp32 = lp.astype(np.float32)
    cells = list(np.ndindex(tok.shape))
    for q, t, k in cells:
        x = vals[q][t][k]
        if not -1 <= x <= PAD:
            return (f"tokens[{q}, {t}, {k}]: token {x} is out of range; expected [0, {PAD - 1}] or padding "
                    f"(-1 / {PAD})")
    real = {c: vals[c[0]][c[1]][c[2]] not in (-1, PAD) for c in cells}
    for c in cells:
        v = float(lp32[c])
        if real[c] and (math.isnan(v) or v == math.inf):
            return f"logprobs[{c[0]}, {c[1]}, {c[2]}]: {lp32[c]} is not allowed"
    for q in range(tok.shape[0]):
        for t in range(tok.shape[1]):
            row = [x for x in vals[q][t] if x not in (-1, PAD)]
            twice = sorted({x for x in row if row.count(x) > 1})
            if twice:
                return f"tokens[{q}, {t}, :]: token {twice[0]} appears more than once in one row"
    if probabilities is None:
        reals = [float(lp32[c]) for c in cells if real[c]]
        if reals and min(reals) >= 0 and max(reals) > 0:
            q, t, k = next(c for c in cells if real[c] and float(lp32[c]) > 0)
            return f"logprobs[{q}, {t}, {k}]: {float(lp32[q, t, k]):.6g}, and no value is below 0"
    return None


@st.composite
def proposal_arrays(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    """Small ``(tokens, logprobs)``: distinct tokens of a vocabulary per row, then some entries made padding
    (either spelling), duplicates, out-of-range values, NaN / +inf logprobs or all-positive logprobs."""
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    q_n, t_n, k_n = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 7))
    vocab = draw(st.sampled_from(VOCABS))
    info = np.iinfo(dtype)
    vocab = min(vocab, int(info.max) + 1)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    tok = np.empty((q_n, t_n, k_n), dtype=object)
    for q, t in np.ndindex(q_n, t_n):
        lo = max(0, vocab - 4 * k_n) if draw(st.booleans()) else 0  # the vocabulary's top: edge tokens
        pool = np.arange(lo, vocab) if vocab - lo <= 4096 else None
        row = rng.choice(pool, min(k_n, pool.size), replace=False) if pool is not None else \
            np.unique(rng.integers(lo, vocab, size=2 * k_n))[:k_n]
        tok[q, t, :] = [int(x) for x in row] + [row[0]] * (k_n - len(row))  # a small vocabulary repeats
    pads = [p for p in (-1, PAD) if info.min <= p <= info.max]
    for _ in range(draw(st.integers(0, 4))):  # padding, duplicates, out-of-range tokens
        cell = tuple(int(rng.integers(0, n)) for n in tok.shape)
        kind = draw(st.sampled_from(["pad", "pad", "dup", "dup", "out"]))
        if kind == "pad" and pads:
            tok[cell] = draw(st.sampled_from(pads))
        elif kind == "dup" and k_n > 1:
            tok[cell] = tok[cell[0], cell[1], (cell[2] + 1) % k_n]
        elif kind == "out":
            wide = [v for v in (-2, -(2**31), PAD + 1, 2**63 - 1) if info.min <= v <= info.max]
            if wide:
                tok[cell] = draw(st.sampled_from(wide))
    lp_dtype = draw(st.sampled_from([np.float32, np.float64]))
    base = draw(st.sampled_from(["negative", "positive", "mixed"]))
    if base == "negative":
        lp = -np.sort(rng.exponential(2.0, size=tok.shape), axis=2)  # a model's top-K: descending
    elif base == "positive":
        lp = rng.random(tok.shape)
    else:
        lp = rng.normal(size=tok.shape)
    for _ in range(draw(st.integers(0, 3))):
        lp[tuple(int(rng.integers(0, n)) for n in tok.shape)] = draw(st.sampled_from(LOGPROBS))
    with np.errstate(over="ignore"):  # 1e39 as float32 is +inf: refused where the token is real
        return tok.astype(dtype), lp.astype(lp_dtype)


def _check(tok: np.ndarray, lp: np.ndarray, probabilities: bool | None, path: str) -> None:
    want = _brute(tok, lp, probabilities)
    patches = dict(SORT_PATHS[path])
    if path == "fresh":
        patches["_local"] = threading.local()  # no views kept from an earlier call
    with mock.patch.multiple(checks, **patches) if patches else contextlib.nullcontext():
        if want is not None:
            with pytest.raises(InputError) as err:
                Proposals(tok, lp, probabilities=probabilities)
            assert str(err.value).startswith(want), (str(err.value), want)
            return
        got = Proposals(tok, lp, probabilities=probabilities)
    assert got.tokens.dtype == np.uint32 and got.logprobs.dtype == np.float32
    assert np.array_equal(got.tokens, (tok.astype(np.int64) & PAD).astype(np.uint32))
    with np.errstate(over="ignore"):
        assert np.array_equal(got.logprobs.view(np.uint32), lp.astype(np.float32).view(np.uint32))


@given(proposal_arrays(), st.sampled_from([None, False]), st.sampled_from(sorted(SORT_PATHS)))
def test_the_checks_agree_with_an_entry_by_entry_reading(arrays: tuple[np.ndarray, np.ndarray],
                                                         probabilities: bool | None, path: str) -> None:
    _check(*arrays, probabilities, path)


@given(proposal_arrays(), st.sampled_from(sorted(SORT_PATHS)))
def test_strided_input_is_read_as_its_values(arrays: tuple[np.ndarray, np.ndarray], path: str) -> None:
    tok, lp = arrays
    wide_t = np.repeat(tok, 2, axis=2)[:, :, ::2]  # the same values, not contiguous
    wide_l = np.repeat(lp, 2, axis=2)[:, :, ::2]
    _check(wide_t, wide_l, None, path)


@pytest.mark.parametrize("path", sorted(SORT_PATHS))
@pytest.mark.parametrize("vocab", [32_768, 65_535, 2_200_000])
def test_top_k_rows_with_one_duplicate_or_none(vocab: int, path: str) -> None:
    """Rows as a model's top-K gives them (K 1,000): accepted; one repeated token anywhere: refused by row."""
    rng = np.random.default_rng(vocab)
    tok = np.stack([np.stack([rng.choice(vocab, 1000, replace=False) for _ in range(8)]) for _ in range(3)])
    lp = -np.sort(rng.exponential(3.0, size=tok.shape).astype(np.float32), axis=2)
    for dtype in (np.int32, np.int64):
        _check(tok.astype(dtype), lp, None, path)
        bad = tok.astype(dtype)
        bad[2, 5, 999] = bad[2, 5, 0]
        bad[2, 7, 10] = bad[2, 7, 11]  # a later row's duplicate is not the one named
        _check(bad, lp, None, path)


def test_threads_each_keep_their_own_sort_buffer() -> None:
    """Concurrent checks of different batches: each thread's verdicts are its own batch's."""
    rng = np.random.default_rng(1)
    good = np.stack([np.stack([rng.choice(30_000, 500, replace=False) for _ in range(4)]) for _ in range(4)])
    bad = good.copy()
    bad[3, 2, 7] = bad[3, 2, 400]
    lp = np.full(good.shape, -1.0, np.float32)
    errors: list[str] = []

    def work(tok: np.ndarray, fails: bool) -> None:
        for _ in range(200):
            try:
                Proposals(tok, lp)
                if fails:
                    errors.append("a duplicate was accepted")
            except InputError as e:
                if not fails or not str(e).startswith(f"tokens[3, 2, :]: token {bad[3, 2, 7]} appears"):
                    errors.append(str(e))

    threads = [threading.Thread(target=work, args=(a, a is bad)) for a in (good, bad, good, bad)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:3]
