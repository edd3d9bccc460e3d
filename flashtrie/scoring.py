"""Arithmetic shared bit-for-bit by every backend: thresholds, the length-norm table, sort keys."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .errors import InputError
from .limits import PAD_TOKEN

if TYPE_CHECKING:
    from .search_types import SearchConfig

__all__ = ["SearchPlan", "threshold32", "length_norm_table", "desc_key32", "SCORE_KEY_BITS", "SortedRows", "sort_rows",
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


@dataclass(frozen=True, eq=False)
class SearchPlan:
    """What a search derives from its `SearchConfig`, the one derivation every backend uses: B and R, τ and σ
    as float32 (`threshold32`), the length-norm table ``ln_table`` (`length_norm_table`) and its extremes over
    L ≥ 1 (the early-stop bound's `pool_closed`)."""

    beam: int
    results: int
    tau: np.float32
    sigma: np.float32
    ln_table: np.ndarray
    ln_min: np.float32
    ln_max: np.float32

    @classmethod
    def from_config(cls, config: SearchConfig, max_length: int) -> SearchPlan:
        """The plan of ``config`` for keywords of at most ``max_length`` tokens (the table covers at least
        L = 1); refuses a ``length_norm`` whose table underflows."""
        ln = length_norm_table(config.length_norm, max(int(max_length), 1))
        ln.flags.writeable = False
        return cls(int(config.beam_width), int(config.results), threshold32(config.token_threshold),
                   threshold32(config.score_threshold), ln, np.float32(ln[1:].min()), np.float32(ln[1:].max()))


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
    ℓ > τ); ``row_max[q, t]`` (only when asked for) is the best valid logprob of row (q, t) (-inf where
    there is none), ``[Q, T]``: the terms of the early-stop bound (`pool_closed`).
    """

    tokens: np.ndarray
    logprobs: np.ndarray
    valid: np.ndarray
    row_max: np.ndarray | None


def sort_rows(tokens: np.ndarray, logprobs: np.ndarray, tau: np.float32, with_row_max: bool) -> SortedRows:
    """Sort every row ``(q, t)`` by token and mark its valid proposals (``tau`` from `threshold32`).

    Tokens are unique in a row (padding aside) and padding (2**32 - 1) sorts last, so the position of a
    valid proposal in its sorted row orders like its token whatever the sort's tie order.
    """
    order = np.argsort(tokens, axis=2)  # ties are padding only: any order will do, and this is 5x faster
    tok = np.take_along_axis(tokens, order, axis=2)
    lp = np.take_along_axis(logprobs, order, axis=2)
    valid = (tok != np.uint32(PAD_TOKEN)) & (lp > tau)  # skip padding and ℓ ≤ τ
    row_max = None
    if with_row_max:
        row_max = np.where(valid, lp, np.float32(-np.inf)).max(axis=2, initial=np.float32(-np.inf))
    return SortedRows(tok, lp, valid, row_max)


def pool_closed(best: np.ndarray | np.float32, worst_n: np.ndarray | np.float32, later_rows_max: np.ndarray,
                ln_min: np.float32, ln_max: np.float32) -> np.ndarray | np.bool_:
    """The allowed early stop for a **full** pool (vectorised over queries ``[Q]``, or scalars).

    ``best``: the best frontier score s0; ``worst_n``: the worst pool n; ``later_rows_max`` ``[Q, T']``
    (``[T']`` for scalars): the best valid logprob M_k of each step still to run (-inf for none);
    ``ln_min`` / ``ln_max``: the extremes of LN[L], L ≥ 1 (both > 0).  With S_0 = s0 and
    S_k = fl32(S_{k-1} + M_k) (sequential float32 sums: the kernel's loop, bit for bit), the pool is
    closed when every k has fl32(S_k · ln_min) ≤ worst_n and fl32(S_k · ln_max) ≤ worst_n.

    Why nothing can enter then: a candidate of the k-th later step extends a frontier hypothesis
    (s ≤ s0) by one valid proposal per step (ℓ_j ≤ M_j), so its score is fl32(…fl32(s + ℓ_1)… + ℓ_k)
    ≤ S_k, as rounded addition is monotone in each argument.  Its n = fl32(s_k · LN[L]) with LN[L] in
    [ln_min, ln_max] and LN > 0: rounded multiplication by a positive factor is monotone, so
    n ≤ fl32(S_k · LN[L]), and x ↦ fl32(S_k · x) is monotone (up or down by the sign of S_k), so that
    is ≤ the larger of fl32(S_k · ln_min) and fl32(S_k · ln_max).  An n equal to the worst loses the tie
    (the older entry stays first), so "≤" closes; the worst only improves afterwards.  A row with no valid
    proposal (M_k = -inf) ends every hypothesis there, and S_k = -inf passes every later test (or
    turns NaN); S_k overflowing to +inf fails; NaN (+inf + -inf) fails every comparison, so it can only
    keep a query open.
    """
    best = np.asarray(best, dtype=np.float32)
    worst = np.asarray(worst_n, dtype=np.float32)[..., None]
    terms = np.concatenate([best[..., None], np.asarray(later_rows_max, dtype=np.float32)], axis=-1)
    with np.errstate(over="ignore", invalid="ignore"):
        s = np.add.accumulate(terms, axis=-1, dtype=np.float32)[..., 1:]  # strictly sequential: fl32 each
        ok = (s * ln_min <= worst) & (s * ln_max <= worst)
    return ok.all(axis=-1)
