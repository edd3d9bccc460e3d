"""The state of `NumpySearcher`'s step loop as small named types, each a dataclass of parallel arrays.

* `Row`: the valid proposals of row t of every query, as sorted keys ``q << 32 | token``;
* `Frontier`: the hypotheses F_t, ``(q, node, off, s, length, rank)``, grouped by q, best first;
* `Candidates`: the c = h + [x] of one step that survived so far, with their parent's rank and xrank;
* `Pool`: the results pool, ``(q, dk, keyword_id, s, n, length)`` sorted by (q, pool key);
* `SortKeys`: the bit widths that pack (q, desc_key32, r, xrank) into one 64-bit sort key.

``off`` tokens of the node's incoming edge are consumed (``off == edge length``: at the node; the root
is ``(0, 0)``); ``xrank`` is a proposal's position in its token-sorted row, which orders like its token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flashtrie.scoring import SortedRows
from flashtrie.search_core import StartStates
from flashtrie.search_types import SearchResult

__all__ = ["Row", "Frontier", "Candidates", "Pool", "SortKeys", "excl_cumsum", "segment_iota", "lookup",
           "group_ranks", "U64", "SH32", "LO32"]

U64 = np.uint64
SH32 = np.uint64(32)
LO32 = np.uint64(0xFFFF_FFFF)


def excl_cumsum(counts: np.ndarray) -> np.ndarray:
    """Exclusive prefix sum (int64)."""
    out = np.zeros(counts.size, dtype=np.int64)
    if counts.size > 1:
        np.cumsum(counts[:-1], out=out[1:])
    return out


def segment_iota(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For segments ``[starts[i], starts[i] + counts[i])``: (segment index of each item, item value)."""
    counts = counts.astype(np.int64, copy=False)
    total = int(counts.sum())
    seg = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
    val = np.arange(total, dtype=np.int64) + np.repeat(starts.astype(np.int64) - excl_cumsum(counts), counts)
    return seg, val


def lookup(sorted_keys: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of ``keys`` in ``sorted_keys`` (unique, uint64): (mask of found, their positions)."""
    if sorted_keys.size == 0 or keys.size == 0:
        return np.zeros(keys.size, dtype=bool), np.zeros(0, dtype=np.int64)
    pos = np.searchsorted(sorted_keys, keys)
    np.minimum(pos, sorted_keys.size - 1, out=pos)
    found = sorted_keys[pos] == keys
    return found, pos[found]


def group_ranks(groups_sorted: np.ndarray) -> np.ndarray:
    """Rank of each item within its run of equal values in a sorted array."""
    n = groups_sorted.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    idx = np.arange(n, dtype=np.int64)
    start = np.zeros(n, dtype=np.int64)
    brk = np.flatnonzero(groups_sorted[1:] != groups_sorted[:-1]) + 1
    start[brk] = brk
    np.maximum.accumulate(start, out=start)
    return idx - start


@dataclass(slots=True)
class SortKeys:
    """Bit widths of q, the parent rank r (< B) and xrank (< K) in a packed sort key."""

    q_bits: int
    r_bits: int
    x_bits: int

    @classmethod
    def of(cls, num_queries: int, beam_width: int, proposals: int) -> SortKeys:
        return cls(max(int(num_queries - 1).bit_length(), 1), max(int(beam_width - 1).bit_length(), 1),
                   max(int(proposals - 1).bit_length(), 1))

    def order(self, q: np.ndarray, dk: np.ndarray, r: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Permutation sorting items by (q, dk, r, x); (q, r, x) is unique per item."""
        low = (r.astype(U64) << np.uint64(self.x_bits)) | x.astype(U64)
        if self.q_bits + 32 + self.r_bits + self.x_bits <= 64:
            key = ((q.astype(U64) << np.uint64(32 + self.r_bits + self.x_bits))
                   | (dk.astype(U64) << np.uint64(self.r_bits + self.x_bits)) | low)
            return np.argsort(key)
        key = (dk.astype(U64) << np.uint64(self.r_bits + self.x_bits)) | low
        return np.lexsort((key, q))


@dataclass(slots=True)
class Row:
    """The valid proposals of row t of every query: ``keys = q << 32 | token`` sorted, their logprobs and
    xranks; per query, how many (``nvalid``) and where they start in ``keys`` (``start``)."""

    keys: np.ndarray
    logprobs: np.ndarray
    xrank: np.ndarray
    nvalid: np.ndarray
    start: np.ndarray

    @classmethod
    def of(cls, rows: SortedRows, t: int, num_queries: int) -> Row:
        vq, vx = np.nonzero(rows.valid[:, t, :])
        keys = (vq.astype(U64) << SH32) | rows.tokens[vq, t, vx].astype(U64)
        nvalid = np.bincount(vq, minlength=num_queries).astype(np.int64)
        return cls(keys, rows.logprobs[vq, t, vx], vx, nvalid, excl_cumsum(nvalid))


@dataclass(slots=True)
class Frontier:
    """F_t: per hypothesis its query, trie state ``(node, off)``, score s, length and rank in F_t."""

    q: np.ndarray
    node: np.ndarray
    off: np.ndarray
    s: np.ndarray
    length: np.ndarray
    rank: np.ndarray

    @classmethod
    def start(cls, states: StartStates) -> Frontier:
        """F₀ = [p] at score 0 for every query whose forced prefix is in the trie."""
        n = states.size
        return cls(states.q, states.node, states.off, np.zeros(n, dtype=np.float32), states.length,
                   np.zeros(n, dtype=np.int64))

    @property
    def size(self) -> int:
        return int(self.q.size)

    def take(self, idx: np.ndarray) -> Frontier:
        return Frontier(self.q[idx], self.node[idx], self.off[idx], self.s[idx], self.length[idx], self.rank[idx])


@dataclass(slots=True)
class Candidates:
    """The c = h + [x] of one step: query, trie state, score, length, the parent's rank r and x's xrank."""

    q: np.ndarray
    node: np.ndarray
    off: np.ndarray
    s: np.ndarray
    length: np.ndarray
    rank: np.ndarray
    xrank: np.ndarray

    @property
    def size(self) -> int:
        return int(self.q.size)


@dataclass(slots=True)
class Pool:
    """The results pool, sorted by (q, pool key); ``dk = desc_key32(n)``."""

    q: np.ndarray
    dk: np.ndarray
    keyword_id: np.ndarray
    s: np.ndarray
    n: np.ndarray
    length: np.ndarray

    @classmethod
    def empty(cls) -> Pool:
        i64 = np.zeros(0, dtype=np.int64)
        f32 = np.zeros(0, dtype=np.float32)
        return cls(i64, np.zeros(0, dtype=np.uint32), i64.copy(), f32, f32.copy(), i64.copy())

    @property
    def size(self) -> int:
        return int(self.q.size)

    def merge(self, offered: Pool, results: int) -> Pool:
        """Keep the ``results`` best per query of this pool and ``offered`` (sorted by (q, pool key) of one
        step, whose (t, r, x) come after every older entry's: old entries first on equal n)."""
        nq = np.concatenate([self.q, offered.q])
        ndk = np.concatenate([self.dk, offered.dk])
        m = np.argsort((nq.astype(U64) << SH32) | ndk.astype(U64), kind="stable")
        nq, ndk = nq[m], ndk[m]
        sel = np.flatnonzero(group_ranks(nq) < results)
        m = m[sel]
        return Pool(nq[sel], ndk[sel], np.concatenate([self.keyword_id, offered.keyword_id])[m],
                    np.concatenate([self.s, offered.s])[m], np.concatenate([self.n, offered.n])[m],
                    np.concatenate([self.length, offered.length])[m])

    def worst_n(self, num_queries: int) -> tuple[np.ndarray, np.ndarray]:
        """Per query: (entries in the pool, the worst n; -inf when empty)."""
        count = np.bincount(self.q, minlength=num_queries)
        worst = np.full(num_queries, np.float32(-np.inf), dtype=np.float32)
        has = count > 0
        worst[has] = self.n[np.cumsum(count)[has] - 1]
        return count, worst

    def to_result(self, num_queries: int, results: int) -> SearchResult:
        return SearchResult.from_pool(num_queries, results, self.q, self.keyword_id, self.s, self.n, self.length)
