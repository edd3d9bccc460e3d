"""One pass over a keyword library for the version-2 query generator: lengths, keyword hashes, the
library fingerprint and the token counts per depth, all from one read of each token.

The work on a piece of keywords is written once over the array module ``xp`` (`_Walk`: numpy here, cupy in
`_library_pass_gpu`, which uploads the library in chunks and walks each as one piece).  Inside a piece the
keywords are put in order of length (a stable radix sort of bytes), so the keywords still going at depth d
are a contiguous tail and each depth is one gather of tokens, one hash step and, below ``num_steps``, a
count.  The arrays of a piece live in scratch buffers of its walk (allocated once, reused), so on the CPU
they stay in the cache.

On the CPU the library is cut into one block of keywords per thread; a thread walks its block in pieces
of `PIECE` keywords: small enough that a piece's arrays stay in the cache, large enough that there are few
numpy calls per keyword (each one takes the GIL: on 16 cores, pieces of 2^15 keywords took 4.7 times as long
as pieces of 2^19).  Counts go to a per-thread table (`_DenseTally`: a cache-sized buffer of (depth, token)
keys sorted, runs counted; a GPU adds ``bincount``s to one table), summed at the end over ranges of tokens
on threads.  Every result is a pure function of the keywords: the split never shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from types import ModuleType
from typing import Any

import numpy as np

from flashtrie.cpus import in_parallel
from flashtrie.index.build_sort import to_host
from flashtrie.keywords import KeywordSet

from ._hashing import _M1, _M2, _S27, _S30, _S31, ROOT_HASH

__all__ = ["LibraryFacts", "library_pass", "length_dtype", "sum_sparse", "xor_all", "PIECE", "BINCOUNT_MAX",
           "BLOCK_PER_TOKEN"]

PIECE = 1 << 19  # keywords per piece (16 cores, 100M: 1.6 s at 2^19, 3.0 s at 2^17; each numpy call takes the GIL)
MANY_THREADS = 8  # below this many threads pieces and count buffers are at most a quarter of that (1 thread,
_FEW = 4  # 100M: 10.4 s with pieces of 2^17, 16.5 s with 2^19: one core gains from the smaller caches' speed)
_FLUSH = 1 << 22  # tokens buffered per depth and thread before they are counted, without dense tables
BLOCK_PER_TOKEN = 0.5  # with dense tables, keywords per block at least, per token of the vocabulary
_TALLY_KEYS = 1 << 20  # (depth, token) keys buffered per thread before they are counted, with dense tables
COUNTING = "sort"  # how dense tables are filled on the CPU: "sort" (`_DenseTally`) or "bincount" (`_BincountTally`)
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


def dense_tables(top: int, depths: int, tables: int, budget: int = _DENSE_BYTES) -> bool:
    """Whether token counts go to dense tables (uint32, one row per depth; ``tables`` of them in ``budget``
    bytes)."""
    return top <= BINCOUNT_MAX and top * depths * tables * 4 <= budget


class _Table:
    """One dense count table of every depth (row d: depth d), on ``xp``."""

    def __init__(self, xp: ModuleType, top: int, depths: int, wide: bool) -> None:
        self.xp, self.top = xp, top
        self.table = xp.zeros(depths * top, dtype=np.int64 if wide else np.uint32)

    def row(self, d: int) -> Any:
        return self.table[d * self.top : (d + 1) * self.top]


class _DenseTally(_Table):
    """Counts into the table, a buffer at a time (the CPU's way with ``COUNTING = "sort"``, the default).

    Tokens are buffered as keys ``d * top + token`` (a cache-sized buffer of `_TALLY_KEYS`); a full buffer
    is sorted in place, each run of equal keys counted and its count added at the key's slot.  No temporary
    is as large as the vocabulary (``bincount`` zero-fills one per call: page faults and cache misses that
    do not scale with threads), and there are few numpy calls per token (each one takes the GIL).
    """

    def __init__(self, top: int, depths: int, wide: bool, keys: int) -> None:
        super().__init__(np, top, depths, wide)
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
    """Tokens buffered per depth, `_FLUSH` at a time, each full buffer handed to ``count`` (a part as large as
    a buffer is counted at once, without a copy)."""

    def __init__(self, xp: ModuleType, depths: int) -> None:
        self.xp = xp
        self.bufs: list[list[Any]] = [[] for _ in range(depths)]
        self.held = [0] * depths

    def count(self, d: int, col: Any) -> None:
        raise NotImplementedError

    def add(self, d: int, tok: Any) -> None:
        if not self.bufs[d] and tok.size >= _FLUSH:
            self.count(d, tok)
            return
        self.bufs[d].append(tok.copy())  # tok is the caller's scratch
        self.held[d] += tok.size
        if self.held[d] >= _FLUSH:
            self._flush(d)

    def _flush(self, d: int) -> None:
        if self.bufs[d]:
            col = self.xp.concatenate(self.bufs[d]) if len(self.bufs[d]) > 1 else self.bufs[d][0]
            self.bufs[d], self.held[d] = [], 0
            self.count(d, col)

    def flush(self) -> None:
        for d in range(len(self.bufs)):
            self._flush(d)


class _BincountTally(_Buffered, _Table):
    """Counts into the table by one ``bincount`` per buffer of a depth (a GPU's way, and the CPU's with
    ``COUNTING = "bincount"``: fewer calls, but a vocabulary-sized temporary per call)."""

    def __init__(self, xp: ModuleType, top: int, depths: int, wide: bool) -> None:
        _Buffered.__init__(self, xp, depths)
        _Table.__init__(self, xp, top, depths, wide)

    def count(self, d: int, col: Any) -> None:
        c = self.xp.bincount(col)
        self.row(d)[: c.size] += c.astype(self.table.dtype)


class _SparseTally(_Buffered):
    """Counts as sorted (token, count) pieces per depth, on the host (for vocabularies too large for dense
    tables)."""

    def __init__(self, xp: ModuleType, depths: int) -> None:
        super().__init__(xp, depths)
        self.pieces: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(depths)]

    def count(self, d: int, col: Any) -> None:
        t, c = self.xp.unique(col, return_counts=True)
        self.pieces[d].append((to_host(t), to_host(c)))


Tally = _DenseTally | _BincountTally | _SparseTally


def make_tally(xp: ModuleType, top: int, depths: int, *, dense: bool, wide: bool, keys: int) -> Tally:
    """The count table of one thread (or of a device): dense on the CPU by `COUNTING`, on a GPU by ``bincount``;
    sparse where the vocabulary is too large for dense tables."""
    if not dense:
        return _SparseTally(xp, depths)
    if xp is np and COUNTING == "sort":
        return _DenseTally(top, depths, wide, keys)
    return _BincountTally(xp, top, depths, wide)


def _merge(tallies: Sequence[Tally], depths: int, top: int, threads: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every depth's counts of every tally summed: (distinct tokens ascending as uint32, counts as int64)."""
    sparse = [t.pieces for t in tallies if isinstance(t, _SparseTally)]
    if sparse:
        return [sum_sparse([p for pieces in sparse for p in pieces[d]]) for d in range(depths)]
    tables = [t for t in tallies if isinstance(t, _Table)]
    step = max(1 << 20, -(-top // threads))
    xp = tables[0].xp

    def part(d: int, a: int) -> tuple[np.ndarray, np.ndarray]:
        total = tables[0].row(d)[a : a + step]  # summed in place: its dtype holds the library's size
        for t in tables[1:]:
            total += t.row(d)[a : a + step]
        tok = xp.flatnonzero(total)
        return to_host(tok + a), to_host(total[tok].astype(np.int64))

    parts = in_parallel([partial(part, d, a) for d in range(depths) for a in range(0, top, step)], threads)
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


def _child_hash_into(h: Any, tokens: Any, tmp: Any, xp: ModuleType) -> None:
    """``h = child_hash(h, tokens)`` in place (``tmp``: scratch of h's size): the same bits, no allocations."""
    h *= _GOLDEN
    h ^= tokens
    _mix_into(h, tmp, xp)


def _mix_into(h: Any, tmp: Any, xp: ModuleType) -> None:
    """``mix64(h)`` in place, through ``tmp``."""
    for shift, mult in ((_S30, _M1), (_S27, _M2)):
        xp.right_shift(h, shift, out=tmp)
        h ^= tmp
        h *= mult
    xp.right_shift(h, _S31, out=tmp)
    h ^= tmp


def xor_all(xp: ModuleType, x: Any) -> int:
    """The xor of every element of a uint64 array (halves folded onto each other: any array module)."""
    x = x.copy()
    while x.size > 1:
        half = x.size // 2
        x[:half] ^= x[x.size - half :]
        x = x[: x.size - half]
    return int(x[0]) if x.size else 0


def _take(xp: ModuleType, a: Any, idx: Any, out: Any) -> Any:
    """``a[idx]`` written to ``out`` (numpy: with no buffer, "clip" as every index is valid)."""
    if xp is np:
        return np.take(a, idx, out=out, mode="clip")
    return xp.take(a, idx, out=out)


def _by_length(xp: ModuleType, lens: Any) -> Any:
    """Keywords in order of length: numpy's stable argsort sorts bytes by radix; cupy's argsort is stable."""
    return np.argsort(lens, kind="stable") if xp is np else xp.argsort(lens)


class _Walk:
    """Pieces of keywords on ``xp``: writes their lengths and hashes into ``lengths`` and ``full``, adds their
    length counts and fingerprint, counts their tokens of depths below the tally's.

    A piece's arrays live in scratch buffers for ``size`` keywords (allocated once, reused: on the CPU they stay
    in the cache, and no piece asks the allocator for memory but its one argsort).
    """

    def __init__(self, xp: ModuleType, lengths: Any, full: Any, tally: Tally, depths: int, size: int,
                 token_dtype: np.dtype) -> None:
        self.xp, self.lengths, self.full, self.tally, self.depths = xp, lengths, full, tally, depths
        self.fp = 0
        self.length_counts = np.zeros(1, dtype=np.int64)
        self.slen = xp.empty(size, dtype=lengths.dtype)
        self.spos = xp.empty(size, dtype=np.int64)
        self.h = xp.empty(size, dtype=np.uint64)
        self.tmp = xp.empty(size, dtype=np.uint64)
        self.tok = xp.empty(size, dtype=token_dtype)

    def piece(self, a: int, offs: Any, toks: Any) -> None:
        """Keywords ``[a, a + offs.size - 1)``: ``offs`` their offsets (int64) into their tokens ``toks``."""
        xp, m = self.xp, offs.size - 1
        lens = self.lengths[a : a + m]
        xp.subtract(offs[1:], offs[:-1], out=lens, casting="unsafe")  # every length fits its dtype
        order = _by_length(xp, lens)
        slen = _take(xp, lens, order, self.slen[:m])
        spos = _take(xp, offs[:-1], order, self.spos[:m])
        by_len = to_host(xp.bincount(slen))
        if by_len.size > self.length_counts.size:
            self.length_counts = np.pad(self.length_counts, (0, by_len.size - self.length_counts.size))
        self.length_counts[: by_len.size] += by_len
        live = np.concatenate(([0], np.cumsum(by_len)))  # keywords [live[d + 1], m) are longer than d
        h, tmp = self.h[:m], self.tmp[:m]
        h.fill(ROOT_HASH)
        for d in range(by_len.size - 1):
            k = int(live[d + 1])
            tok = _take(xp, toks[d:], spos[k:], self.tok[: m - k])  # toks[spos + d]
            if d < self.depths:
                self.tally.add(d, tok)
            _child_hash_into(h[k:], tok, tmp[k:], xp)
        tag = xp.add(slen, _LENGTH_TAG, out=self.spos[:m].view(np.uint64), dtype=np.uint64,
                     casting="unsafe")  # spos is done; lengths are >= 0
        _child_hash_into(h, tag, tmp, xp)
        order += a  # keyword ids
        self.full[order] = h
        ids = order.view(np.uint64)
        ids *= _GOLDEN
        ids ^= h
        _mix_into(ids, tmp, xp)
        self.fp ^= xor_all(xp, ids)


class _Block(_Walk):
    """One thread's block of keywords of ``ks``, walked `PIECE` keywords at a time on the CPU."""

    def __init__(self, ks: KeywordSet, facts: LibraryFacts, depths: int, top: int, dense: bool, size: int,
                 threads: int = MANY_THREADS) -> None:
        self.ks = ks
        self.step, keys = sizes(threads)
        tally = make_tally(np, top, depths, dense=dense, wide=len(ks) >= WIDE_COUNTS, keys=keys)
        super().__init__(np, facts.lengths, facts.full, tally, depths, min(self.step, size), ks.tokens.dtype)

    def run(self, s: int, e: int) -> _Block:
        off, tokens = self.ks.offsets, self.ks.tokens
        for a in range(s, e, self.step):
            self.piece(a, off[a : min(a + self.step, e) + 1], tokens)
        self.tally.flush()
        return self


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
    def longest_in(s: int) -> int:
        return int(np.diff(off[s : min(s + step, n) + 1]).max())

    longest = in_parallel([partial(longest_in, s) for s in range(0, n, step)], threads)
    return np.uint8 if max(longest, default=0) < 256 else np.int64


def combine(walks: Sequence[_Walk], n: int, lengths: np.ndarray, full: np.ndarray, depths: int, top: int,
            threads: int) -> LibraryFacts:
    """The facts of the walks that covered the library's ``n`` keywords (``lengths`` and ``full`` on the host)."""
    fp = 0
    length_counts = np.zeros(max(w.length_counts.size for w in walks), dtype=np.int64)
    for w in walks:
        fp ^= w.fp
        length_counts[: w.length_counts.size] += w.length_counts
    depth_counts = _merge([w.tally for w in walks], depths, top, threads) if depths else []
    return LibraryFacts(lengths, full, f"{fp ^ n:016x}", length_counts, depth_counts)


def library_pass(ks: KeywordSet, num_steps: int, max_token: int, threads: int) -> LibraryFacts:
    """Lengths, full hashes, fingerprint, length counts and the token counts of depths ``< num_steps``."""
    n = len(ks)
    facts = LibraryFacts(np.empty(n, dtype=length_dtype(ks, threads)),
                         np.empty(n, dtype=np.uint64), "", np.zeros(0, dtype=np.int64), [])
    top = max_token + 1
    dense = dense_tables(top, num_steps, threads)
    step = max(sizes(threads)[0], -(-n // threads))
    if dense and num_steps:
        step = max(step, int(top * BLOCK_PER_TOKEN))  # a block's dense table must be worth its zeroing and sum
    starts = range(0, max(n, 1), step)
    def block(s: int) -> _Block:
        return _Block(ks, facts, num_steps, top, dense, step, threads).run(s, min(s + step, n))

    blocks = in_parallel([partial(block, s) for s in starts], threads)
    return combine(blocks, n, facts.lengths, facts.full, num_steps, top, threads)
