"""The keyword generator's model, shared by its versions: the parameters (`KeywordParams`), the child-slot law
(`pareto_slots`) and the sibling-token bijection (`sibling_tokens`); see `datasets.keywords` for the model."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from flashtrie.errors import InputError
from flashtrie.limits import MAX_TOKEN

from ._hashing import mix64

__all__ = ["VERSION_1", "VERSION_2", "GENERATORS", "KeywordParams", "pareto_slots", "sibling_tokens",
           "DEFAULT_WEIGHTS", "DEFAULT_EXPONENTS", "DEFAULT_OFFSETS"]

VERSION_1 = "flashtrie.datasets.keywords/1"
VERSION_2 = "flashtrie.datasets.keywords/2"
#: Generator versions: 1 (one random stream, one core; kept so old seeds reproduce) and 2 (the default:
#: fixed chunks with streams of their own, on threads; the same model, other numbers).
GENERATORS = (VERSION_1, VERSION_2)

_SLOT_SALT = np.uint64(0xD1B54A32D192ED03)

DEFAULT_WEIGHTS = (2.0, 10.0, 45.0, 25.0, 10.0, 5.0, 2.0, 1.0)
DEFAULT_EXPONENTS = (0.7, 0.7, 0.6, 0.6)
DEFAULT_OFFSETS = (8.0, 1.0, 1.0, 1.0)


@dataclass(frozen=True)
class KeywordParams:
    """Every parameter of a generated keyword library (saved with it).

    ``fanout_exponents[d]`` (alpha) and ``fanout_offsets[d]`` (q) shape the child-slot law of keywords
    passing depth d; the last entry applies to deeper levels too.  Smaller alpha or larger q: more
    distinct children per prefix (a bushier, less shared tree).
    """

    n: int
    vocab_size: int = 2_200_000
    seed: int = 0
    length_weights: tuple[float, ...] = DEFAULT_WEIGHTS
    fanout_exponents: tuple[float, ...] = DEFAULT_EXPONENTS
    fanout_offsets: tuple[float, ...] = DEFAULT_OFFSETS
    leaf_gap: float = 2.0
    sibling_windows_log2: tuple[int, int] = (8, 20)
    duplicate_fraction: float = 0.0
    generator: str = field(default=VERSION_2)

    def __post_init__(self) -> None:
        if self.generator not in GENERATORS:
            raise InputError(f"generator: expected one of {list(GENERATORS)}, got {self.generator!r}")
        for name in ("length_weights", "fanout_exponents", "fanout_offsets"):
            object.__setattr__(self, name, tuple(float(x) for x in getattr(self, name)))
        if int(self.n) != self.n or self.n < 0:
            raise InputError(f"n: expected a non-negative integer, got {self.n!r}")
        if not 1 <= self.vocab_size <= MAX_TOKEN + 1:
            raise InputError(f"vocab_size: {self.vocab_size} is out of range [1, {MAX_TOKEN + 1}]")
        w = self.length_weights
        if not w or len(w) > 255 or any(not math.isfinite(x) or x < 0 for x in w) or sum(w) <= 0:
            raise InputError("length_weights: expected 1..255 non-negative finite weights with a positive sum, "
                             f"got {w}")
        if not self.fanout_exponents or any(not 0.01 <= a <= 10 for a in self.fanout_exponents):
            raise InputError(f"fanout_exponents: expected values in [0.01, 10], got {self.fanout_exponents}")
        if not self.fanout_offsets or any(not 0 < q <= 1e9 for q in self.fanout_offsets):
            raise InputError(f"fanout_offsets: expected values in (0, 1e9], got {self.fanout_offsets}")
        if not 1 <= self.leaf_gap <= 1e6:
            raise InputError(f"leaf_gap: expected a value in [1, 1e6], got {self.leaf_gap}")
        sw = tuple(int(x) for x in self.sibling_windows_log2)
        object.__setattr__(self, "sibling_windows_log2", sw)
        if len(sw) != 2 or not 0 <= sw[0] <= sw[1] <= 32:
            raise InputError(f"sibling_windows_log2: expected (lo, hi) with 0 <= lo <= hi <= 32, got {sw}")
        if not 0 <= self.duplicate_fraction < 1:
            raise InputError(f"duplicate_fraction: expected a value in [0, 1), got {self.duplicate_fraction}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field."""
        d = asdict(self)
        for k in ("length_weights", "fanout_exponents", "fanout_offsets", "sibling_windows_log2"):
            d[k] = list(d[k])
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> KeywordParams:
        """Inverse of `to_dict` (unknown keys are an error)."""
        try:
            return cls(**d)
        except TypeError as e:
            raise InputError(f"keyword parameters: {e}") from None


def pareto_slots(v: np.ndarray, alpha: float, q: float) -> np.ndarray:
    """``floor(q * (v ** (-1 / alpha) - 1))`` for uniform v (overwritten): ``P(slot >= k) = (1 + k / q) ** -alpha``."""
    np.log(v, out=v)
    v *= -1.0 / alpha
    np.minimum(v, 40.0, out=v)  # keeps exp() finite
    np.exp(v, out=v)
    v -= 1.0
    v *= q
    np.minimum(v, 2.0**50, out=v)  # beyond any vocabulary; keeps slot + window exact in float64
    return v.astype(np.uint64)


def sibling_tokens(parent: np.ndarray, slot: np.ndarray, log2_windows: tuple[int, int]) -> np.ndarray:
    """Token of child slot ``slot`` of each parent: injective in the slot for a fixed parent.

    Each parent has a window ``W = 2**k``, k drawn (by hash) uniformly from ``log2_windows``.
    ``x = slot + W`` lies in an octave ``[2**j, 2**(j + 1))``; it is moved within its octave by an affine
    bijection ``x -> (x * odd + add) mod 2**j`` keyed on the parent's hash, then shifted back by ``W``.
    So siblings never share a token, a parent's favourite children are scattered over ``[0, W)`` and
    rarer ones lie further out; mixing windows over parents makes token frequency fall as ``1 / id``
    (Zipf), flat below the smallest window.
    """
    key = mix64(parent ^ _SLOT_SALT)
    lo, hi = log2_windows
    k = (key >> np.uint64(40)) % np.uint64(hi - lo + 1) + np.uint64(lo)
    window = np.left_shift(np.uint64(1), k)
    x = slot + window
    # 2**floor(log2(x)) from the float64 exponent field (exact: x < 2**53)
    octave = x.astype(np.float64).view(np.uint64)
    octave >>= np.uint64(52)
    octave -= np.uint64(1023)
    octave = np.left_shift(np.uint64(1), octave)
    mult = key | np.uint64(1)
    add = mix64(key + _SLOT_SALT)
    x -= octave
    x *= mult
    x += add
    x &= octave - np.uint64(1)
    x += octave
    x -= window
    return x
