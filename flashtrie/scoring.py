"""Arithmetic shared bit-for-bit by every backend: thresholds, the length-norm table, sort keys."""

from __future__ import annotations

import math

import numpy as np

from .errors import InputError

__all__ = ["threshold32", "length_norm_table", "desc_key32", "SCORE_KEY_BITS"]

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
