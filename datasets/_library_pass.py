"""One pass over a keyword library for the version-2 query generator: lengths, keyword hashes, the
library fingerprint and the token counts per depth, all from one read of each token.

The library is cut into one block of keywords per thread; a thread walks its block in pieces of `PIECE`
keywords: small enough that a piece's arrays (scratch buffers of the block, reused) stay in the cache, large
enough that there are few numpy calls per keyword (each one takes the GIL: on 16 cores, pieces of 2^15
keywords took 4.7 times as long as pieces of 2^19).  Inside a piece the keywords
are put in order of length (a stable radix sort of bytes), so the keywords still going at depth d are a
contiguous tail and each depth is one gather of tokens, one hash step and, below ``num_steps``, a count.
Counts go to a per-thread table (`_DenseTally`: a cache-sized buffer of (depth, token) keys sorted, runs
counted), summed at the end over ranges of tokens on threads.  Every result is a pure function of the
keywords: the split never shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from flashtrie.cpus import in_parallel
from flashtrie.keywords import KeywordSet

from ._hashing import _M1, _M2, _S27, _S30, _S31, ROOT_HASH

__all__ = ["LibraryFacts", "library_pass", "length_dtype", "sum_sparse", "PIECE", "BINCOUNT_MAX", "BLOCK_PER_TOKEN"]

PIECE = 1 << 19  # keywords per piece (16 cores, 100M: 1.6 s at 2^19, 3.0 s at 2^17; each numpy call takes the GIL)
MANY_THREADS = 8  # below this many threads pieces and count buffers are at most a quarter of that (1 thread,
_FEW = 4  # 100M: 10.4 s with pieces of 2^17, 16.5 s with 2^19: one core gains from the smaller caches' speed)
_FLUSH = 1 << 22  # tokens buffered per depth and thread before they are counted, without dense tables
BLOCK_PER_TOKEN = 0.5  # with dense tables, keywords per block at least, per token of the vocabulary
_TALLY_KEYS = 1 << 20  # (depth, token) keys buffered per thread before they are counted, with dense tables
COUNTING = "sort"  # how dense tables are filled: "sort" (`_DenseTally`) or "bincount" (`_BincountTally`)
WIDE_COUNTS = 1 << 32  # libraries of this many keywords or more count in int64 tables (uint32 below)
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
    """Whether token counts go to dense tables (uint32, one row per depth, one table per thread)."""
    return top <= BINCOUNT_MAX and top * depths * threads * 4 <= _DENSE_BYTES


class _Table:
    """One thread's dense count table of every depth (row d: depth d)."""

    def __init__(self, top: int, depths: int, wide: bool) -> None:
        self.top = top
        self.table = np.zeros(depths * top, dtype=np.int64 if wide else np.uint32)

    def row(self, d: int) -> np.ndarray:
        return self.table[d * self.top : (d + 1) * self.top]


class _DenseTally(_Table):
    """Counts into the table, a buffer at a time (``COUNTING = "sort"``, the default).

    Tokens are buffered as keys ``d * top + token`` (a cache-sized buffer of `_TALLY_KEYS`); a full buffer
    is sorted in place, each run of equal keys counted and its count added at the key's slot.  No temporary
    is as large as the vocabulary (``bincount`` zero-fills one per call: page faults and cache misses that
    do not scale with threads), and there are few numpy calls per token (each one takes the GIL).
    """

    def __init__(self, top: int, depths: int, wide: bool, keys: int) -> None:
        super().__init__(top, depths, wide)
        self.buf = np.empty(keys, dtype=np.uint32 if depths * top <= 1 << 32 else np.uint64)
        self.fill = 0

    def add(self, d: int, tok: np.ndarray) -> None:
        """Count ``tok`` (tokens at depth d)."""
        m = tok.size
        if self.fill + m > self.buf.size:
            self.flush()
        if m > self.buf.size:
            self.buf = np.empty(m, dtype=self.buf.dtype)
        np.add(tok, d * self.top, out=self.buf[self.fill : self.fill + m], dtype=self.buf.dtype)
        self.fill += m

    def flush(self) -> None:
        keys = self.buf[: self.fill]
        self.fill = 0
        if keys.size == 0:
            return
        keys.sort()
        last = np.append(np.flatnonzero(keys[1:] != keys[:-1]), keys.size - 1)  # the last place of each run
        cnt = np.diff(last, prepend=-1).astype(self.table.dtype)
        self.table[keys[last]] += cnt  # distinct keys: no slot is added twice


class _Buffered:
    """Tokens buffered per depth, `_FLUSH` at a time, each full buffer handed to ``count``."""

    def __init__(self, depths: int) -> None:
        self.bufs: list[list[np.ndarray]] = [[] for _ in range(depths)]
        self.held = [0] * depths

    def count(self, d: int, col: np.ndarray) -> None:
        raise NotImplementedError

    def add(self, d: int, tok: np.ndarray) -> None:
        self.bufs[d].append(tok.copy())  # tok is the caller's scratch
        self.held[d] += tok.size
        if self.held[d] >= _FLUSH:
            self._flush(d)

    def _flush(self, d: int) -> None:
        if self.bufs[d]:
            col = np.concatenate(self.bufs[d]) if len(self.bufs[d]) > 1 else self.bufs[d][0]
            self.bufs[d], self.held[d] = [], 0
            self.count(d, col)

    def flush(self) -> None:
        for d in range(len(self.bufs)):
            self._flush(d)


class _BincountTally(_Buffered, _Table):
    """Counts into the table by one ``bincount`` per buffer of a depth (``COUNTING = "bincount"``: fewer numpy
    calls, but a vocabulary-sized temporary per call)."""

    def __init__(self, top: int, depths: int, wide: bool, keys: int) -> None:
        _Buffered.__init__(self, depths)
        _Table.__init__(self, top, depths, wide)

    def count(self, d: int, col: np.ndarray) -> None:
        c = np.bincount(col)
        self.row(d)[: c.size] += c.astype(self.table.dtype)


class _SparseTally(_Buffered):
    """Counts as sorted (token, count) pieces per depth (for vocabularies too large for dense tables)."""

    def __init__(self, depths: int) -> None:
        super().__init__(depths)
        self.pieces: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(depths)]

    def count(self, d: int, col: np.ndarray) -> None:
        self.pieces[d].append(np.unique(col, return_counts=True))


def _merge(tallies: list[Any], depths: int, top: int,
           threads: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every depth's counts of every thread summed: (distinct tokens ascending as uint32, counts as int64)."""
    if isinstance(tallies[0], _SparseTally):
        return [sum_sparse([p for t in tallies for p in t.pieces[d]]) for d in range(depths)]
    step = max(1 << 20, -(-top // threads))

    def part(d: int, a: int) -> tuple[np.ndarray, np.ndarray]:
        total = tallies[0].row(d)[a : a + step]  # summed in place: its dtype holds the library's size
        for t in tallies[1:]:
            total += t.row(d)[a : a + step]
        tok = np.flatnonzero(total)
        return tok + a, total[tok].astype(np.int64)

    parts = in_parallel([lambda d=d, a=a: part(d, a) for d in range(depths) for a in range(0, top, step)], threads)
    per = -(-top // step)
    return [(np.concatenate([t for t, _ in parts[d * per : (d + 1) * per]]).astype(np.uint32),
             np.concatenate([c for _, c in parts[d * per : (d + 1) * per]])) for d in range(depths)]


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


def _child_hash_into(h: Any, tokens: Any, tmp: Any, xp: Any = np) -> None:
    """``h = child_hash(h, tokens)`` in place (``tmp``: scratch of h's size): the same bits, no allocations;
    ``xp``: the array module of the arrays (numpy, or cupy for the GPU pass)."""
    h *= _GOLDEN
    h ^= tokens
    _mix_into(h, tmp, xp)


def _mix_into(h: Any, tmp: Any, xp: Any = np) -> None:
    """``mix64(h)`` in place, through ``tmp`` (arrays of the module ``xp``)."""
    for shift, mult in ((_S30, _M1), (_S27, _M2)):
        xp.right_shift(h, shift, out=tmp)
        h ^= tmp
        h *= mult
    xp.right_shift(h, _S31, out=tmp)
    h ^= tmp


class _Block:
    """One thread's block of keywords ``[s, e)``: writes lengths and hashes, counts tokens.

    A piece's arrays live in scratch buffers of the block (allocated once, reused: they stay in the cache,
    and no piece asks the allocator for memory but its one argsort).
    """

    def __init__(self, ks: KeywordSet, facts: LibraryFacts, depths: int, top: int, dense: bool, size: int,
                 threads: int = MANY_THREADS) -> None:
        self.ks, self.facts, self.depths = ks, facts, depths
        self.step, keys = sizes(threads)
        size = min(self.step, size)  # keywords per piece, at most
        dense_tally = _BincountTally if COUNTING == "bincount" else _DenseTally
        self.tally = dense_tally(top, depths, len(ks) >= WIDE_COUNTS, keys) if dense else _SparseTally(depths)
        self.fp = 0
        self.length_counts = np.zeros(1, dtype=np.int64)
        self.slen = np.empty(size, dtype=facts.lengths.dtype)
        self.spos = np.empty(size, dtype=np.int64)
        self.h = np.empty(size, dtype=np.uint64)
        self.tmp = np.empty(size, dtype=np.uint64)
        self.tok = np.empty(size, dtype=ks.tokens.dtype)

    def run(self, s: int, e: int) -> _Block:
        for a in range(s, e, self.step):
            self.piece(a, min(a + self.step, e))
        self.tally.flush()
        return self

    def piece(self, a: int, b: int) -> None:
        off, tokens, f, m = self.ks.offsets, self.ks.tokens, self.facts, b - a
        lens = f.lengths[a:b]
        np.subtract(off[a + 1 : b + 1], off[a:b], out=lens, casting="unsafe")  # every length fits its dtype
        order = np.argsort(lens, kind="stable")  # uint8 lengths sort by radix
        slen = np.take(lens, order, out=self.slen[:m], mode="clip")  # "clip": no buffer (every index is valid)
        spos = np.take(off[a:b], order, out=self.spos[:m], mode="clip")
        by_len = np.bincount(slen)
        if by_len.size > self.length_counts.size:
            self.length_counts = np.pad(self.length_counts, (0, by_len.size - self.length_counts.size))
        self.length_counts[: by_len.size] += by_len
        live = np.concatenate(([0], np.cumsum(by_len)))  # keywords [live[d + 1], m) are longer than d
        h, tmp = self.h[:m], self.tmp[:m]
        h.fill(ROOT_HASH)
        for d in range(by_len.size - 1):
            k = int(live[d + 1])
            tok = np.take(tokens[d:], spos[k:], out=self.tok[: m - k], mode="clip")  # tokens[spos + d]
            if d < self.depths:
                self.tally.add(d, tok)
            _child_hash_into(h[k:], tok, tmp[k:])
        tag = np.add(slen, _LENGTH_TAG, out=self.spos[:m].view(np.uint64), dtype=np.uint64,
                     casting="unsafe")  # spos is done; lengths are >= 0
        _child_hash_into(h, tag, tmp)
        order += a  # keyword ids
        f.full[order] = h
        ids = order.view(np.uint64)
        ids *= _GOLDEN
        ids ^= h
        _mix_into(ids, tmp)
        self.fp ^= int(np.bitwise_xor.reduce(ids)) if m else 0


def sizes(threads: int) -> tuple[int, int]:
    """Keywords per piece and keys per count buffer for a pass on ``threads`` threads."""
    if threads >= MANY_THREADS:
        return PIECE, _TALLY_KEYS
    return max(1, PIECE // _FEW), max(1, _TALLY_KEYS // _FEW)


def length_dtype(ks: KeywordSet, threads: int) -> type:
    """uint8 when every keyword is shorter than 256 tokens, else int64 (the longest found over ranges on threads:
    ``KeywordSet.max_length`` makes one int64 array of every length, on one thread)."""
    off, n = ks.offsets, len(ks)
    step = max(1 << 20, -(-n // (4 * threads)))
    longest = in_parallel([lambda s=s: int(np.diff(off[s : min(s + step, n) + 1]).max()) for s in range(0, n, step)],
                          threads)
    return np.uint8 if max(longest, default=0) < 256 else np.int64


def library_pass(ks: KeywordSet, num_steps: int, max_token: int, threads: int) -> LibraryFacts:
    """Lengths, full hashes, fingerprint, length counts and the token counts of depths ``< num_steps``."""
    n = len(ks)
    facts = LibraryFacts(np.empty(n, dtype=length_dtype(ks, threads)),
                         np.empty(n, dtype=np.uint64), "", np.zeros(0, dtype=np.int64), [])
    top = max_token + 1
    dense = _dense(top, num_steps, threads)
    step = max(sizes(threads)[0], -(-n // threads))
    if dense and num_steps:
        step = max(step, int(top * BLOCK_PER_TOKEN))  # a block's dense table must be worth its zeroing and sum
    starts = range(0, n, step)
    blocks = in_parallel([lambda s=s: _Block(ks, facts, num_steps, top, dense, step, threads).run(s, min(s + step, n))
                          for s in starts], threads)
    fp = 0
    width = max(b.length_counts.size for b in blocks)
    facts.length_counts = np.zeros(width, dtype=np.int64)
    for blk in blocks:
        fp ^= blk.fp
        facts.length_counts[: blk.length_counts.size] += blk.length_counts
    facts.fingerprint = f"{fp ^ n:016x}"
    facts.depth_counts = _merge([b.tally for b in blocks], num_steps, max_token + 1, threads) if num_steps else []
    return facts
