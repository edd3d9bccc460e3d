"""Keyword generator version 2: the model of `datasets.keywords`, drawn over fixed chunks on threads.

Version 1 draws every random number from one stream, depth by depth over the whole library, so it runs on
one core.  Version 2 cuts the library into fixed chunks of `CHUNK` keywords (independent of the thread
count) with three streams each (lengths, inner path tokens, end tokens), spawned from
``SeedSequence(seed)``.  The output depends only on the parameters: any number of threads gives the same
library.  The stages:

1. lengths, per chunk; exact copies (``duplicate_fraction``) picked from a stream of their own;
2. offsets, per chunk (a cumulative sum, then each chunk's base added);
3. the inner tokens (every token but the last) of each chunk's keywords, depth by depth, with the hash of
   each keyword's parent prefix at its last depth;
4. the rank of each keyword among the earlier keywords ending under the same parent (as in version 1:
   grouped by the parent hash's top bits, in keyword order): a counting sort of ``parent | id`` keys into
   256 fixed buckets by their top byte, each bucket sorted on its own;
5. the last tokens: the r-th keyword ending under a parent gets a slot in ``[r * gap, (r + 1) * gap)``;
6. copies overwrite their keywords (which were drawn as originals, so lengths agree).

Only the end ranks need the whole library; every other stage is chunk-local.  Memory: the output
(tokens, offsets) plus one uint64 parent hash, one uint64 sort key and one uint32 rank per keyword.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from flashtrie.cpus import in_parallel, usable_cpus
from flashtrie.keywords import KeywordSet

from ._hashing import ROOT_HASH, child_hash
from ._keyword_model import VERSION_2, KeywordParams, pareto_slots, sibling_tokens

__all__ = ["CHUNK", "VERSION", "generate_v2"]

VERSION = VERSION_2
#: Keywords per chunk: part of the version (changing it changes the output).
CHUNK = 1 << 18
_BUCKET_SHIFT = np.uint64(56)  # 256 buckets by the top byte of the end keys
_NUM_BUCKETS = 256


class _Plan:
    """The fixed chunking of ``n`` keywords and each chunk's three random streams."""

    def __init__(self, n: int, seed: int) -> None:
        self.n = n
        self.bounds = [(s, min(s + CHUNK, n)) for s in range(0, n, CHUNK)]
        root = np.random.SeedSequence(seed)
        dup_seed, chunk_root = root.spawn(2)
        self.dup_seed = dup_seed
        self.streams = [c.spawn(3) for c in chunk_root.spawn(len(self.bounds))]

    def rng(self, c: int, stream: int) -> np.random.Generator:
        return np.random.default_rng(self.streams[c][stream])


def _run(fns: list[Callable[[], object]], threads: int) -> list[object]:
    return in_parallel(fns, threads)


def generate_v2(params: KeywordParams, threads: int | None = None) -> KeywordSet:
    """The library of ``params`` (version 2), on ``threads`` threads (default: every usable core)."""
    n = int(params.n)
    if n == 0:
        return KeywordSet(np.zeros(0, dtype=np.uint32), np.zeros(1, dtype=np.int64))
    threads = usable_cpus() if threads is None else max(1, int(threads))
    plan = _Plan(n, int(params.seed))
    w = np.asarray(params.length_weights, dtype=np.float64)
    cdf = np.cumsum(w / w.sum())
    cdf[-1] = 1.0
    vocab = np.uint64(params.vocab_size)
    top = max(0, int(params.vocab_size).bit_length() - 1)
    windows = (min(params.sibling_windows_log2[0], top), min(params.sibling_windows_log2[1], top))
    exps, qs = params.fanout_exponents, params.fanout_offsets

    lengths = np.empty(n, dtype=np.uint8)

    def draw_lengths(c: int) -> None:
        s, e = plan.bounds[c]
        lengths[s:e] = np.searchsorted(cdf, plan.rng(c, 0).random(e - s), side="right") + 1

    _run([partial(draw_lengths, c) for c in range(len(plan.bounds))], threads)
    src = _duplicate_sources(plan, params.duplicate_fraction, n)
    if src is not None:
        lengths = lengths[src]
    offsets = _offsets(lengths, plan, threads)
    tokens = np.empty(int(offsets[-1]), dtype=np.uint32)
    parent = np.empty(n, dtype=np.uint64)  # hash of each keyword's prefix without its last token

    def inner_tokens(c: int) -> np.ndarray:
        s, e = plan.bounds[c]
        rng = plan.rng(c, 1)
        ids = np.arange(s, e, dtype=np.int64)
        lens = lengths[s:e]
        pos = offsets[s:e].copy()
        h = np.full(e - s, ROOT_HASH, dtype=np.uint64)
        for d in range(w.size):
            ends = lens == d + 1
            parent[ids[ends]] = h[ends]
            go = ~ends
            if not go.any():
                break
            ids, lens, pos, h = ids[go], lens[go], pos[go], h[go]
            slot = pareto_slots(rng.random(ids.size), exps[min(d, len(exps) - 1)], qs[min(d, len(qs) - 1)])
            tok = slot if d == 0 else sibling_tokens(h, slot, windows)
            tok %= vocab
            tok = tok.astype(np.uint32)
            tokens[pos + d] = tok
            h = child_hash(h, tok)
        return np.bincount((parent[s:e] >> _BUCKET_SHIFT).astype(np.int64), minlength=_NUM_BUCKETS)

    counts = np.array(_run([partial(inner_tokens, c) for c in range(len(plan.bounds))], threads),
                      dtype=np.int64).reshape(len(plan.bounds), _NUM_BUCKETS)
    rank = _end_ranks(parent, counts, plan, threads)
    gap = float(params.leaf_gap)

    def last_tokens(c: int) -> None:
        s, e = plan.bounds[c]
        r = rank[s:e].astype(np.float64)
        r += plan.rng(c, 2).random(e - s)
        r *= gap
        slot = r.astype(np.uint64)
        lens = lengths[s:e]
        tok = np.where(lens == 1, slot, sibling_tokens(parent[s:e], slot, windows))
        tok %= vocab
        tokens[offsets[s:e] + lens - 1] = tok.astype(np.uint32)

    _run([partial(last_tokens, c) for c in range(len(plan.bounds))], threads)
    rank = parent = np.empty(0, dtype=np.uint64)  # free them before the copies
    if src is not None:
        copies = np.flatnonzero(src != np.arange(n))
        for d in range(w.size):
            cp = copies[lengths[copies] > d]
            tokens[offsets[cp] + d] = tokens[offsets[src[cp]] + d]
    return KeywordSet(tokens, offsets)


def _duplicate_sources(plan: _Plan, fraction: float, n: int) -> np.ndarray | None:
    """``src[i]``: the keyword that keyword i copies (itself for an original); None without copies."""
    if fraction <= 0 or n <= 1:
        return None
    rng = np.random.default_rng(plan.dup_seed)
    n_dup = int(round(fraction * n))
    dst = rng.choice(n, size=n_dup, replace=False)
    src = np.arange(n, dtype=np.int64)
    src[dst] = rng.integers(0, n, size=n_dup)
    src[dst] = src[src[dst]]  # a copy of a copy: point at an original
    return src


def _offsets(lengths: np.ndarray, plan: _Plan, threads: int) -> np.ndarray:
    """Keyword start offsets (int64, n + 1) from the lengths, one chunk per task."""
    offsets = np.empty(lengths.size + 1, dtype=np.int64)
    offsets[0] = 0

    def local(c: int) -> int:
        s, e = plan.bounds[c]
        np.cumsum(lengths[s:e], out=offsets[s + 1 : e + 1])
        return int(offsets[e]) if e > s else 0

    totals = np.array(_run([partial(local, c) for c in range(len(plan.bounds))], threads), dtype=np.int64)
    base = np.concatenate(([0], np.cumsum(totals)[:-1]))

    def shift(c: int) -> None:
        s, e = plan.bounds[c]
        offsets[s + 1 : e + 1] += base[c]

    _run([partial(shift, c) for c in range(1, len(plan.bounds))], threads)
    return offsets


def _end_ranks(parent: np.ndarray, counts: np.ndarray, plan: _Plan, threads: int) -> np.ndarray:
    """For each keyword, how many earlier keywords end under a parent with the same top hash bits.

    The key ``parent & ~low | id`` (``low``: the id bits) is unique, so sorting it gives each parent group in
    id order whatever the sort; keys go to 256 buckets by their top byte (a counting sort over the fixed
    chunks) and each bucket is sorted alone.
    """
    n = parent.size
    bits = max(1, int(n - 1).bit_length())
    low = np.uint64((1 << bits) - 1)
    keys = np.empty(n, dtype=np.uint64)
    # dest[c, b]: where chunk c's keys of bucket b start (buckets in order, chunks in order within one)
    flat = counts.T.reshape(-1)
    starts = np.concatenate(([0], np.cumsum(flat)[:-1])).reshape(_NUM_BUCKETS, -1).T

    def scatter(c: int) -> None:
        s, e = plan.bounds[c]
        key = parent[s:e] & ~low
        key |= np.arange(s, e, dtype=np.uint64)
        o = np.argsort((key >> _BUCKET_SHIFT).astype(np.uint8), kind="stable")
        within = np.arange(e - s, dtype=np.int64) - np.repeat(np.cumsum(counts[c]) - counts[c], counts[c])
        keys[np.repeat(starts[c], counts[c]) + within] = key[o]

    _run([partial(scatter, c) for c in range(len(plan.bounds))], threads)
    rank = np.empty(n, dtype=np.uint32 if n < 2**32 else np.int64)
    edges = np.concatenate(([0], np.cumsum(counts.sum(axis=0))))

    def rank_bucket(b: int) -> None:
        seg = keys[edges[b] : edges[b + 1]]
        if seg.size == 0:
            return
        seg.sort()
        grp = seg >> np.uint64(bits)
        new = np.ones(seg.size, dtype=bool)
        np.not_equal(grp[1:], grp[:-1], out=new[1:])
        del grp
        at = np.arange(seg.size, dtype=np.int64)
        first = np.maximum.accumulate(np.where(new, at, 0))
        rank[(seg & low).astype(np.int64)] = at - first

    _run([partial(rank_bucket, b) for b in range(_NUM_BUCKETS)], threads)
    return rank
