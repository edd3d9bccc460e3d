"""Arithmetic shared bit-for-bit by every backend: thresholds, the length-norm table, sort keys."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .errors import InputError
from .limits import PAD_TOKEN

__all__ = ["threshold32", "length_norm_table", "desc_key32", "SCORE_KEY_BITS", "SortedRows", "sort_rows",
           "pool_closed"]

SCORE_KEY_BITS = 32


def threshold32(x: float) -> np.float32:
    """The largest float32 ≤ ``x``.

    The contract compares a float32 value v with a threshold given as a Python float (float64):
    ``v ≤ x``.  For float32 v that is the same as ``v ≤ threshold32(x)``, so every backend compares in
    float32 against this value and agrees exactly with the float64 comparison.
    """
    x = float(x)
    big = float(np.finfo(np.float32).max)
    if x > big and x != np.inf:  # a finite float64 beyond float32's range
        return np.float32(big)
    if x < -big:
        return np.float32(-np.inf)
    f = np.float32(x)
    if float(f) > x:
        f = np.nextafter(f, np.float32(-np.inf), dtype=np.float32)
    return np.float32(f)


def length_norm_table(alpha: float, max_length: int) -> np.ndarray:
    """``LN[L] = fl32((6 / (5 + L)) ** alpha)`` for L in 0..max_length, computed in float64, rounded once.

    ``LN[0]`` is unused (keywords are non-empty) and set to 1.
    """
    # math.pow (the C library's pow) on scalars, not numpy's vectorised power, whose SIMD variants may
    # differ in the last bit between machines; the table is small and shared by every backend.
    a = float(alpha)
    table = [1.0] + [1.0 if a == 0.0 else math.pow(6.0 / (5.0 + length), a) for length in range(1, max_length + 1)]
    out = np.array(table, dtype=np.float64).astype(np.float32)
    zero = np.flatnonzero(out == 0)
    if zero.size:
        # n = s * 0 would be NaN for an overflowed s = +inf, and every score would tie at 0: refuse.
        raise InputError(f"length_norm: {alpha} makes LN[{int(zero[0])}] = (6 / {5 + int(zero[0])}) ** {alpha} "
                         f"underflow to 0 in float32; use a smaller length_norm")
    return out


def desc_key32(values: np.ndarray) -> np.ndarray:
    """Map float32 scores to uint32 keys whose ascending order is *descending* score order.

    -0.0 and +0.0 get the same key (IEEE equality).  NaN never reaches here (inputs are validated).
    """
    v = np.asarray(values, dtype=np.float32)
    bits = (v + np.float32(0.0)).view(np.uint32)  # -0.0 + 0.0 = +0.0 canonicalises the zero
    neg = (bits >> np.uint32(31)).astype(bool)
    asc = np.where(neg, ~bits, bits | np.uint32(0x8000_0000))
    return (~asc).astype(np.uint32)


@dataclass(frozen=True, eq=False)
class SortedRows:
    """Proposal rows sorted by token (padding last), as the CPU backends consume them.

    ``tokens`` / ``logprobs`` ``[Q, T, K]``; ``valid`` marks the proposals a step uses (not padding and
    ℓ > τ); ``later_max[q, t]`` (only when asked for) is the best valid logprob of rows ``t .. T-1`` of
    query q (-inf where there is none), ``[Q, T]``.
    """

    tokens: np.ndarray
    logprobs: np.ndarray
    valid: np.ndarray
    later_max: np.ndarray | None


def sort_rows(tokens: np.ndarray, logprobs: np.ndarray, tau: np.float32, with_later_max: bool) -> SortedRows:
    """Sort every row ``(q, t)`` by token and mark its valid proposals (``tau`` from `threshold32`).

    Tokens are unique in a row (padding aside) and padding (2**32 - 1) sorts last, so the position of a
    valid proposal in its sorted row orders like its token whatever the sort's tie order.
    """
    order = np.argsort(tokens, axis=2)  # ties are padding only: any order will do, and this is 5x faster
    tok = np.take_along_axis(tokens, order, axis=2)
    lp = np.take_along_axis(logprobs, order, axis=2)
    valid = (tok != np.uint32(PAD_TOKEN)) & (lp > tau)  # skip padding and ℓ ≤ τ
    later_max = None
    if with_later_max:
        row_max = np.where(valid, lp, np.float32(-np.inf)).max(axis=2, initial=np.float32(-np.inf))
        later_max = np.maximum.accumulate(row_max[:, ::-1], axis=1)[:, ::-1]
    return SortedRows(tok, lp, valid, later_max)


def pool_closed(later_max: np.ndarray | np.float32, best: np.ndarray | np.float32, worst_n: np.ndarray | np.float32,
                ln_min: np.float32) -> np.ndarray | np.bool_:
    """The allowed early stop for a **full** pool (vectorised over queries, or scalars).

    ``later_max``: best valid logprob of the steps still to run; ``best``: the best frontier score s0;
    ``worst_n``: the worst pool n; ``ln_min``: the smallest LN[L], L ≥ 1.  True when every later valid
    logprob is ≤ 0 and s0 ≤ 0: later scores are then ≤ s0 (adding a non-positive float32 never
    increases), so later n = fl32(s · LN) ≤ fl32(s0 · ln_min) (LN ≥ ln_min ≥ 0, s ≤ s0 ≤ 0, rounding is
    monotone); when that is ≤ the worst pool n, nothing can enter (an equal n loses on t).
    """
    return (later_max <= 0) & (best <= 0) & (best * ln_min <= worst_n)
