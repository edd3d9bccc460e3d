"""Synthetic keyword libraries with the shape of real ad-keyword libraries.

The library is grown top-down as a prefix tree, one depth at a time, for all keywords at once:

* every keyword draws its length from ``length_weights`` (lengths 1, 2, ...);
* at each depth a keyword that goes on past it picks a *child slot* of its current prefix from a
  Zipf-Mandelbrot law, ``P(slot >= k) = (1 + k / q_d) ** -alpha_d``: the more keywords pass through a
  prefix, the more distinct children it gets (roughly ``m ** (1 / (1 + alpha_d))`` for m keywords), so
  fan-out is heavy-tailed (a few huge nodes, most nodes small) and prefixes are shared;
* a keyword that ends at this depth takes a slot no other keyword ending under the same prefix takes:
  the r-th of them gets a slot in ``[r * leaf_gap, (r + 1) * leaf_gap)``, so the keywords under a prefix
  are its most popular continuations, and the library has no accidental duplicates (real libraries are
  sets) while slots stay below ``vocab_size`` (a vocabulary much smaller than the default 2.2M wraps
  slots around it, and then duplicates do occur; `flashtrie.NarrowLoudsIndex.build` collapses them and
  ``flashtrie gen-keywords`` reports how many); ``duplicate_fraction`` adds exact copies on purpose;
* at the root, slot k is token k (token id = popularity rank of first tokens); below, slot k of prefix h
  is mapped to a token by a bijection keyed on h (`_sibling_tokens`), so siblings always differ, equal
  prefixes always get the same children, and over the library token frequency falls as ``1 / id``.

Everything is vectorised numpy (a few passes and one sort per depth); nothing loops per keyword.
Version 2 (the default, `datasets._keywords_v2`) draws the same model over fixed chunks on threads;
version 1 (``generator="flashtrie.datasets.keywords/1"``) is kept so that old seeds reproduce.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from flashtrie.errors import InputError
from flashtrie.keywords import KeywordSet
from flashtrie.limits import MAX_TOKEN

from ._hashing import ROOT_HASH, child_hash, depth_prefix_hashes, full_keyword_hashes, mix64
from ._keywords_v2 import VERSION, generate_v2

__all__ = ["GENERATORS", "KeywordParams", "generate_keywords", "generate_keywords_from", "keyword_stats"]

#: Generator versions: 1 (one random stream, one core; kept so old seeds reproduce) and 2 (the default:
#: fixed chunks with streams of their own, on threads; the same model, other numbers).
GENERATORS = ("flashtrie.datasets.keywords/1", VERSION)

_SLOT_SALT = np.uint64(0xD1B54A32D192ED03)
_CHUNK = 1 << 16  # elements per chunk of element-wise work: keeps temporaries in cache

_DEFAULT_WEIGHTS = (2.0, 10.0, 45.0, 25.0, 10.0, 5.0, 2.0, 1.0)
_DEFAULT_EXPONENTS = (0.7, 0.7, 0.6, 0.6)
_DEFAULT_OFFSETS = (8.0, 1.0, 1.0, 1.0)


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
    length_weights: tuple[float, ...] = _DEFAULT_WEIGHTS
    fanout_exponents: tuple[float, ...] = _DEFAULT_EXPONENTS
    fanout_offsets: tuple[float, ...] = _DEFAULT_OFFSETS
    leaf_gap: float = 2.0
    sibling_windows_log2: tuple[int, int] = (8, 20)
    duplicate_fraction: float = 0.0
    generator: str = field(default=VERSION)

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


def generate_keywords(
    n: int,
    *,
    vocab_size: int = 2_200_000,
    seed: int = 0,
    length_weights: tuple[float, ...] = _DEFAULT_WEIGHTS,
    fanout_exponents: tuple[float, ...] = _DEFAULT_EXPONENTS,
    fanout_offsets: tuple[float, ...] = _DEFAULT_OFFSETS,
    leaf_gap: float = 2.0,
    sibling_windows_log2: tuple[int, int] = (8, 20),
    duplicate_fraction: float = 0.0,
    generator: str = VERSION,
    threads: int | None = None,
) -> KeywordSet:
    """Generate ``n`` keywords (lengths 1..len(length_weights), weighted), deterministic in ``seed``.

    See the module docstring for the model and `KeywordParams` for the parameters.  ``threads`` (version 2;
    default: every usable core) changes the speed, never the output.
    """
    return generate_keywords_from(KeywordParams(
        n=n, vocab_size=vocab_size, seed=seed, length_weights=length_weights, fanout_exponents=fanout_exponents,
        fanout_offsets=fanout_offsets, leaf_gap=leaf_gap, sibling_windows_log2=sibling_windows_log2,
        duplicate_fraction=duplicate_fraction, generator=generator), threads=threads)


def generate_keywords_from(params: KeywordParams, *, threads: int | None = None) -> KeywordSet:
    """Generate the keyword library described by ``params`` (its ``generator`` version picks the code)."""
    if params.generator == VERSION:
        return generate_v2(params, threads)
    return _generate_v1(params)


def _generate_v1(params: KeywordParams) -> KeywordSet:
    """Version 1: one random stream, depth by depth over the whole library (one core)."""
    n = int(params.n)
    rng = np.random.default_rng(params.seed)
    w = np.asarray(params.length_weights, dtype=np.float64)
    cdf = np.cumsum(w / w.sum())
    cdf[-1] = 1.0
    # side="right" never lands on a zero-weight length
    lengths = (np.searchsorted(cdf, rng.random(n), side="right") + 1).astype(np.uint8)
    src = None
    if params.duplicate_fraction > 0 and n > 1:
        # keywords `dst` become copies of keywords `src[dst]` (drawn before generation, so lengths agree)
        n_dup = int(round(params.duplicate_fraction * n))
        dst = rng.choice(n, size=n_dup, replace=False)
        src = np.arange(n, dtype=np.int64)
        src[dst] = rng.integers(0, n, size=n_dup)
        src[dst] = src[src[dst]]  # a copy of a copy: point at an original
        lengths = lengths[src]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.empty(int(offsets[-1]), dtype=np.uint32)
    vocab = np.uint64(params.vocab_size)
    top = max(0, int(params.vocab_size).bit_length() - 1)  # windows beyond the vocabulary would wrap
    log2_windows = (min(params.sibling_windows_log2[0], top), min(params.sibling_windows_log2[1], top))

    ids = np.arange(n, dtype=np.int64) if src is None else np.unique(src)
    lens = lengths[ids]
    h = np.full(ids.size, ROOT_HASH, dtype=np.uint64)
    for d in range(w.size):
        if ids.size == 0:
            break
        slot = np.empty(ids.size, dtype=np.uint64)
        ends = lens == d + 1
        term = np.flatnonzero(ends)
        inner = np.flatnonzero(~ends)
        if inner.size:
            alpha = params.fanout_exponents[min(d, len(params.fanout_exponents) - 1)]
            q = params.fanout_offsets[min(d, len(params.fanout_offsets) - 1)]
            v = rng.random(inner.size)
            for i in range(0, inner.size, _CHUNK):
                slot[inner[i : i + _CHUNK]] = _pareto_slots(v[i : i + _CHUNK], alpha, q)
            del v
        if term.size:
            slot[term] = _distinct_slots(rng, h[term], params.leaf_gap)
        # element-wise work in cache-sized chunks (whole-array passes are memory-bound at 10M+)
        for i in range(0, ids.size, _CHUNK):
            j = min(i + _CHUNK, ids.size)
            hc = h[i:j]
            tok = slot[i:j] if d == 0 else _sibling_tokens(hc, slot[i:j], log2_windows)
            tok %= vocab
            tok = tok.astype(np.uint32)
            tokens[offsets[ids[i:j]] + d] = tok
            h[i:j] = child_hash(hc, tok)
        del slot
        ids, lens, h = ids[inner], lens[inner], h[inner]
    if src is not None:
        copies = np.flatnonzero(src != np.arange(n))
        for d in range(w.size):  # per depth, not per keyword
            c = copies[lengths[copies] > d]
            tokens[offsets[c] + d] = tokens[offsets[src[c]] + d]
    return KeywordSet(tokens, offsets)


def _pareto_slots(v: np.ndarray, alpha: float, q: float) -> np.ndarray:
    """``floor(q * (v ** (-1 / alpha) - 1))`` for uniform v (overwritten): ``P(slot >= k) = (1 + k / q) ** -alpha``."""
    np.log(v, out=v)
    v *= -1.0 / alpha
    np.minimum(v, 40.0, out=v)  # keeps exp() finite
    np.exp(v, out=v)
    v -= 1.0
    v *= q
    np.minimum(v, 2.0**50, out=v)  # beyond any vocabulary; keeps slot + window exact in float64
    return v.astype(np.uint64)


def _distinct_slots(rng: np.random.Generator, parents: np.ndarray, gap: float) -> np.ndarray:
    """Slots for keywords ending under ``parents``: the r-th keyword of a parent gets one in ``[r*gap, (r+1)*gap)``.

    Ranks follow keyword order within a parent.  The sort key is the parent hash's top bits with the
    keyword's position below them: keys are unique, so any sort algorithm gives the same order (the
    output does not depend on the machine), and it is a plain ``np.sort``.  Parents whose top bits
    collide merely share one rank sequence, which still keeps each parent's slots distinct.
    """
    size = parents.size
    bits = max(1, int(size - 1).bit_length())
    low = np.uint64((1 << bits) - 1)
    key = parents & ~low
    key |= np.arange(size, dtype=np.uint64)
    key.sort()
    order = (key & low).astype(np.int64)
    key >>= np.uint64(bits)
    new = np.ones(size, dtype=bool)
    np.not_equal(key[1:], key[:-1], out=new[1:])
    del key
    first = np.maximum.accumulate(np.where(new, np.arange(size), 0))
    del new
    rank = np.arange(size, dtype=np.float64)
    rank -= first
    rank += rng.random(size)
    rank *= gap
    out = np.empty(size, dtype=np.uint64)
    out[order] = rank.astype(np.uint64)
    return out


def _sibling_tokens(parent: np.ndarray, slot: np.ndarray, log2_windows: tuple[int, int]) -> np.ndarray:
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


def keyword_stats(keywords: KeywordSet, *, max_depth: int | None = None) -> dict[str, Any]:
    """Structure statistics of a library: lengths, duplicates, distinct prefixes and fan-out per depth.

    ``fanout[d]`` describes the number of distinct children of the distinct prefixes of length d
    (d = 0 is the root), over prefixes that have at least one child.
    """
    n = len(keywords)
    lengths = keywords.lengths
    full = full_keyword_hashes(keywords)
    distinct = int(np.unique(full).size) if n else 0
    per_depth = depth_prefix_hashes(keywords, max_depth)
    prefixes: list[int] = []
    fanout: list[dict[str, float]] = []
    prev_unique: np.ndarray | None = None
    parent_of: np.ndarray | None = None
    for d, (ids, h) in enumerate(per_depth):
        uniq, first = np.unique(h, return_index=True)
        prefixes.append(int(uniq.size))
        if d == 0:
            counts = np.array([uniq.size])
        else:
            assert prev_unique is not None and parent_of is not None
            # parent hash of each distinct child: the depth-(d-1) hash of any keyword through it
            parents = parent_of[first]
            counts = np.unique(parents, return_counts=True)[1]
        fanout.append(_describe(counts))
        # for the next depth: map each keyword of depth d + 1 to its depth-d prefix hash
        if d + 1 < len(per_depth):
            nxt_ids = per_depth[d + 1][0]
            parent_of = h[np.searchsorted(ids, nxt_ids)]
        prev_unique = uniq
    return {
        "keywords": n,
        "tokens": int(keywords.tokens.size),
        "distinct_keywords": distinct,
        "duplicates": n - distinct,
        "length_histogram": np.bincount(lengths)[1:].tolist() if n else [],
        "distinct_tokens": int(np.unique(keywords.tokens).size),
        "distinct_prefixes_per_depth": prefixes,
        "root_fanout": prefixes[0] if prefixes else 0,
        "fanout_per_depth": fanout,
    }


def _describe(counts: np.ndarray) -> dict[str, float]:
    c = np.sort(counts)
    return {
        "nodes": int(c.size),
        "mean": float(c.mean()),
        "p50": float(c[c.size // 2]),
        "p90": float(c[min(c.size - 1, int(c.size * 0.9))]),
        "p99": float(c[min(c.size - 1, int(c.size * 0.99))]),
        "max": int(c[-1]),
        "frac_1": float(np.mean(c == 1)),
    }
