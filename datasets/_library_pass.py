"""One pass over a keyword library for the version-2 query generator: lengths, keyword hashes, the
library fingerprint and the token counts per depth, all from one read of each token.

The library is cut into one block of keywords per thread; a thread walks its block in pieces of `PIECE`
keywords (small enough that a piece's hash arrays stay in the core's cache).  Inside a piece the keywords
are put in order of length (a stable radix sort of bytes), so the keywords still going at depth d are a
contiguous tail and each depth is one gather of tokens, one hash step and, below ``num_steps``, a count.
Counts go to a per-thread table (``bincount`` of a buffer of tokens at a time), summed at the end over
ranges of tokens on threads.  Every result is a pure function of the keywords: the split never shows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flashtrie.cpus import in_parallel
from flashtrie.keywords import KeywordSet

from ._hashing import _M1, _M2, _S27, _S30, _S31, ROOT_HASH, child_hash, mix64

__all__ = ["LibraryFacts", "library_pass", "sum_sparse", "PIECE", "BINCOUNT_MAX"]

PIECE = 1 << 17  # keywords per piece
_FLUSH = 1 << 22  # tokens buffered per depth and thread before they are counted (16 MiB)
BINCOUNT_MAX = 1 << 26  # counts in a dense table up to this token id; sorted unique counts above
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_LENGTH_TAG = np.uint64(1 << 40)


@dataclass
class LibraryFacts:
    """What `library_pass` computed."""

    lengths: np.ndarray  # tokens per keyword (uint8 when every length fits)
    full: np.ndarray  # `_hashing.full_keyword_hashes`
    fingerprint: str  # `queries.library_fingerprint`
    length_counts: np.ndarray  # keywords of each length
    depth_counts: list[tuple[np.ndarray, np.ndarray]]  # per depth: distinct tokens (ascending, uint32), counts


_DENSE_BYTES = 8 << 30  # the most that all threads' dense count tables may take together


def _dense(top: int, depths: int, threads: int) -> bool:
    """Whether token counts go to dense tables (int32, one per depth and thread)."""
    return top <= BINCOUNT_MAX and top * depths * threads * 4 <= _DENSE_BYTES


class _Counter:
    """Token counts of one depth in one thread: a dense table, or sorted (token, count) pieces."""

    def __init__(self, top: int, dense: bool) -> None:
        self.dense = np.zeros(top, dtype=np.int32) if dense else None
        self.pieces: list[tuple[np.ndarray, np.ndarray]] = []
        self.buf: list[np.ndarray] = []
        self.held = 0

    def add(self, tokens: np.ndarray) -> None:
        self.buf.append(tokens)
        self.held += tokens.size
        if self.held >= _FLUSH:
            self.flush()

    def flush(self) -> None:
        if not self.buf:
            return
        col = np.concatenate(self.buf) if len(self.buf) > 1 else self.buf[0]
        self.buf, self.held = [], 0
        if self.dense is not None:
            c = np.bincount(col)
            self.dense[: c.size] += c
        else:
            self.pieces.append(np.unique(col, return_counts=True))


def _merge(counters: list[_Counter], top: int, threads: int) -> tuple[np.ndarray, np.ndarray]:
    """One depth's counters of every thread summed: (distinct tokens ascending as uint32, counts as int64)."""
    if counters[0].dense is not None:
        step = max(1 << 20, -(-top // threads))

        def part(a: int) -> np.ndarray:
            total = counters[0].dense[a : a + step].copy()
            for c in counters[1:]:
                total += c.dense[a : a + step]
            return total

        cnt = np.concatenate(in_parallel([lambda a=a: part(a) for a in range(0, top, step)], threads))
        tok = np.flatnonzero(cnt)
        return tok.astype(np.uint32), cnt[tok].astype(np.int64)
    return sum_sparse([p for c in counters for p in c.pieces])


def sum_sparse(pieces: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Pieces of (distinct tokens, counts) summed: (distinct tokens ascending as uint32, counts as int64)."""
    if not pieces:
        return np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.int64)
    tok = np.concatenate([t for t, _ in pieces])
    cnt = np.concatenate([k for _, k in pieces])
    order = np.argsort(tok, kind="stable")
    tok, cnt = tok[order], cnt[order]
    first = np.flatnonzero(np.concatenate(([True], tok[1:] != tok[:-1])))
    return tok[first].astype(np.uint32), np.add.reduceat(cnt, first).astype(np.int64)


def _child_hash_into(h: np.ndarray, tokens: np.ndarray, tmp: np.ndarray) -> None:
    """``h = child_hash(h, tokens)`` in place (``tmp``: scratch of h's size): the same bits, no allocations."""
    h *= _GOLDEN
    h ^= tokens
    for shift, mult in ((_S30, _M1), (_S27, _M2)):
        np.right_shift(h, shift, out=tmp)
        h ^= tmp
        h *= mult
    np.right_shift(h, _S31, out=tmp)
    h ^= tmp


class _Block:
    """One thread's block of keywords ``[s, e)``: writes lengths and hashes, counts tokens."""

    def __init__(self, ks: KeywordSet, facts: LibraryFacts, depths: int, top: int, dense: bool) -> None:
        self.ks, self.facts, self.depths = ks, facts, depths
        self.counters = [_Counter(top, dense) for _ in range(depths)]
        self.fp = 0
        self.length_counts = np.zeros(1, dtype=np.int64)

    def run(self, s: int, e: int) -> _Block:
        for a in range(s, e, PIECE):
            self.piece(a, min(a + PIECE, e))
        for c in self.counters:
            c.flush()
        return self

    def piece(self, a: int, b: int) -> None:
        off, tokens, f = self.ks.offsets, self.ks.tokens, self.facts
        lens = np.diff(off[a : b + 1])
        f.lengths[a:b] = lens
        lens = f.lengths[a:b]  # in the stored dtype (uint8 sorts by radix)
        order = np.argsort(lens, kind="stable")
        slen = lens[order]
        spos = off[a:b][order]  # a copy: advanced one token per depth
        by_len = np.bincount(slen)
        if by_len.size > self.length_counts.size:
            self.length_counts = np.pad(self.length_counts, (0, by_len.size - self.length_counts.size))
        self.length_counts[: by_len.size] += by_len
        live = np.concatenate(([0], np.cumsum(by_len)))  # keywords [live[d + 1], b - a) are longer than d
        h = np.full(b - a, ROOT_HASH, dtype=np.uint64)
        tmp = np.empty_like(h)
        for d in range(by_len.size - 1):
            k = int(live[d + 1])
            tok = tokens[spos[k:]]
            spos[k:] += 1
            if d < self.depths:
                self.counters[d].add(tok)
            _child_hash_into(h[k:], tok, tmp[k:])
        h = child_hash(h, slen.astype(np.uint64) + _LENGTH_TAG)
        ids = order.astype(np.uint64)
        ids += np.uint64(a)
        f.full[ids] = h
        ids *= _GOLDEN
        ids ^= h
        self.fp ^= int(np.bitwise_xor.reduce(mix64(ids))) if ids.size else 0


def library_pass(ks: KeywordSet, num_steps: int, max_token: int, threads: int) -> LibraryFacts:
    """Lengths, full hashes, fingerprint, length counts and the token counts of depths ``< num_steps``."""
    n = len(ks)
    facts = LibraryFacts(np.empty(n, dtype=np.uint8 if ks.max_length < 256 else np.int64),
                         np.empty(n, dtype=np.uint64), "", np.zeros(0, dtype=np.int64), [])
    step = max(PIECE, -(-n // threads))
    starts = range(0, n, step)
    dense = _dense(max_token + 1, num_steps, len(starts))
    blocks = in_parallel([lambda s=s: _Block(ks, facts, num_steps, max_token + 1, dense).run(s, min(s + step, n))
                          for s in starts], threads)
    fp = 0
    width = max(b.length_counts.size for b in blocks)
    facts.length_counts = np.zeros(width, dtype=np.int64)
    for blk in blocks:
        fp ^= blk.fp
        facts.length_counts[: blk.length_counts.size] += blk.length_counts
    facts.fingerprint = f"{fp ^ n:016x}"
    facts.depth_counts = [_merge([b.counters[d] for b in blocks], max_token + 1, threads) for d in range(num_steps)]
    return facts
