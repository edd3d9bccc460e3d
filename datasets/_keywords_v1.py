"""Version 1 of the keyword generator: one random stream, depth by depth over the whole library, one core
(kept so that old seeds reproduce)."""

from __future__ import annotations

import numpy as np

from flashtrie.keywords import KeywordSet

from ._hashing import ROOT_HASH, child_hash
from ._keyword_model import KeywordParams, pareto_slots, sibling_tokens

__all__ = ["generate_v1"]

_CHUNK = 1 << 16  # elements per chunk of element-wise work: keeps temporaries in cache


def generate_v1(params: KeywordParams) -> KeywordSet:
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
                slot[inner[i : i + _CHUNK]] = pareto_slots(v[i : i + _CHUNK], alpha, q)
            del v
        if term.size:
            slot[term] = _distinct_slots(rng, h[term], params.leaf_gap)
        # element-wise work in cache-sized chunks (whole-array passes are memory-bound at 10M+)
        for i in range(0, ids.size, _CHUNK):
            j = min(i + _CHUNK, ids.size)
            hc = h[i:j]
            tok = slot[i:j] if d == 0 else sibling_tokens(hc, slot[i:j], log2_windows)
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
