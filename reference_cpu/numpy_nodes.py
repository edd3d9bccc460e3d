"""The per-node facts `NumpySearcher` reads, from one of two sources that give identical values.

* `EagerNodes`: every node decoded once at construction into flat int64 arrays (child range, label, edge
  length, terminal flag, keyword id, edge tails, the sorted child keys ``parent << 32 | label`` and a Bloom
  filter over them).  Each fact is then one gather; set-up time and memory grow with the index (about
  60 bytes per node).
* `LazyNodes`: nothing decoded up front; each fact is computed for the nodes asked, through the index's own
  vectorised decoders (`NarrowLoudsIndex.child_range`, ``labels``, ``edge_lengths``, ...).  The one cache
  holds the sorted child keys of the wide nodes the pair path has met (those with more children than valid
  proposals, up to `WIDE_DECODE_MAX`; wider ones are binary-searched), filled as searches reach them and
  emptied past `WIDE_CACHE_KEYS` keys, so memory grows with what searches touch, never with the index.

Both answer the same calls (``edge_len``, ``children``, ``has_children``, ``terminal``, ``keyword_id``,
``label``, ``tail_token``, ``maybe_children``, ``find_children``); tests compare them node for node.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from flashtrie.index import NarrowLoudsIndex

from .numpy_state import LO32, SH32, U64, excl_cumsum, lookup, segment_iota

__all__ = ["EagerNodes", "LazyNodes", "WIDE_CACHE_KEYS", "WIDE_DECODE_MAX"]

_BLOOM_MUL = np.uint64(0x9E37_79B9_7F4A_7C15)
#: `LazyNodes` empties its wide-node cache before it would pass this many child keys (8 bytes each, in an
#: array of up to twice the keys).
WIDE_CACHE_KEYS = 1 << 25
#: `LazyNodes` caches the child keys of pair-path nodes of up to this many children; at wider nodes (the
#: root, the most popular first tokens) each probe binary-searches the children's labels instead.  (At 100M,
#: 16 dense queries at beam 1000: 2^12 / 2^14 / 2^16 took 3.2 / 2.2 / 2.3 s and cached 1.9M / 5.5M / 11.9M keys.)
WIDE_DECODE_MAX = 1 << 14


def _all_child_ranges(index: NarrowLoudsIndex, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``index.child_range(nodes)`` for ``nodes`` = every node, in one pass over the LOUDS bits: select0(i) of
    every i < n is the position of the i-th zero (a per-node select0 costs about a microsecond a node)."""
    n = nodes.size
    zeros = np.flatnonzero(~index.louds.to_bools())[:n]
    if zeros.size != n:
        raise ValueError(f"index: the LOUDS has {zeros.size} zeros for {n} nodes")
    end = zeros - nodes + 1
    first = np.empty(n, dtype=np.int64)
    first[:1] = 1
    first[1:] = zeros[:-1] + 2 - nodes[1:]
    return first, end


def _all_keyword_ids(index: NarrowLoudsIndex, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``index.is_terminal(nodes)`` and ``index.keyword_ids_of(nodes)`` for ``nodes`` = every node, in one pass:
    the r-th terminal node in node order has terminal rank r."""
    term = index.terminal.to_bools()[: nodes.size]
    ends = np.flatnonzero(term)
    ranks = np.arange(ends.size, dtype=np.int64)
    kwid = np.full(nodes.size, -1, dtype=np.int64)
    kwid[ends] = index.keyword_ids.get(ranks) if index.keyword_ids.size else ranks
    return term, kwid


def _members(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Which of ``values`` are in ``sorted_set`` (sorted, unique): one binary search each."""
    if sorted_set.size == 0:
        return np.zeros(values.size, dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_set, values), sorted_set.size - 1)
    return sorted_set[pos] == values


class EagerNodes:
    """Every node's facts decoded at construction (flat arrays, one gather per fact)."""

    def __init__(self, index: NarrowLoudsIndex) -> None:
        n = int(index.num_nodes)
        nodes = np.arange(n, dtype=np.int64)
        first, end = _all_child_ranges(index, nodes)
        self._first = np.asarray(first, dtype=np.int64)
        self._deg = np.asarray(end, dtype=np.int64) - self._first
        self._label = np.asarray(index.labels(nodes), dtype=np.uint32)
        elen = np.array(index.edge_lengths(nodes), dtype=np.int64)
        if n:
            elen[0] = 0  # the root has no incoming edge; (0, 0) is "at the node"
        self._elen = elen
        self._term, self._kwid = _all_keyword_ids(index, nodes)
        # Edge tails e_1 .. e_{m-1} of every node, concatenated: e_o of node j is tail[tail_start[j] + o - 1].
        tail_len = np.maximum(elen - 1, 0)
        self._tail_start = excl_cumsum(tail_len)
        tnode, toff = segment_iota(np.ones(n, dtype=np.int64), tail_len)
        self._tail = (np.asarray(index.edge_tokens(tnode, toff), dtype=np.uint32) if tnode.size
                      else np.zeros(0, dtype=np.uint32))
        # parent << 32 | label over nodes 1..n-1: globally sorted (level order, sorted children).
        parent = np.repeat(nodes, self._deg)
        if parent.size != max(n - 1, 0):
            raise ValueError(f"index: child ranges cover {parent.size} nodes, expected {max(n - 1, 0)}")
        self._ckeys = (parent.astype(U64) << SH32) | self._label[1:].astype(U64)
        if self._ckeys.size > 1 and not bool(np.all(self._ckeys[1:] > self._ckeys[:-1])):
            raise ValueError("index: child keys (parent, label) are not strictly increasing in node order")
        self._build_bloom()

    def _build_bloom(self) -> None:
        """One-hash Bloom filter over the child keys (16 bits per key, ~6 % false positives): the pair path
        drops most absent (node, token) probes with one gather from a cache-sized bit array."""
        bloom_bits = max(10, (16 * max(self._ckeys.size, 1) - 1).bit_length())
        self._bloom_shift = np.uint64(64 - bloom_bits)
        self._bloom = np.zeros(1 << (bloom_bits - 6), dtype=np.uint64)
        h = (self._ckeys * _BLOOM_MUL) >> self._bloom_shift
        np.bitwise_or.at(self._bloom, h >> np.uint64(6), np.uint64(1) << (h & np.uint64(63)))

    def edge_len(self, nodes: np.ndarray) -> np.ndarray:
        """Tokens on each node's incoming edge (int64; 0 for the root)."""
        return self._elen[nodes]

    def children(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(first child, number of children) of each node (int64)."""
        return self._first[nodes], self._deg[nodes]

    def has_children(self, nodes: np.ndarray) -> np.ndarray:
        return self._deg[nodes] > 0

    def terminal(self, nodes: np.ndarray) -> np.ndarray:
        return self._term[nodes]

    def keyword_id(self, nodes: np.ndarray) -> np.ndarray:
        """Keyword id of each node (int64; -1 where no keyword ends)."""
        return self._kwid[nodes]

    def label(self, nodes: np.ndarray) -> np.ndarray:
        """First token of each node's edge (uint32)."""
        return self._label[nodes]

    def tail_token(self, nodes: np.ndarray, off: np.ndarray) -> np.ndarray:
        """Token e_off (``1 <= off < edge length``) of each node's edge (uint32)."""
        return self._tail[self._tail_start[nodes] + off - 1]

    def maybe_children(self, nodes: np.ndarray, counts: np.ndarray, row_keys: np.ndarray,
                       rpos: np.ndarray) -> np.ndarray | None:
        """Positions among the probes (``nodes[i]`` repeated ``counts[i]`` times, with the tokens of
        ``row_keys[rpos]``) that may be child keys: the Bloom filter's survivors (None: keep all)."""
        # Bloom hash of node << 32 | token, as (node << 32) * M + token * M (mod 2^64): the sum needs no
        # key array; keys are formed only for the probes that pass the filter.
        tok_hash = (row_keys & LO32) * _BLOOM_MUL
        h = np.repeat((nodes.astype(U64) << SH32) * _BLOOM_MUL, counts)
        h += tok_hash[rpos]
        h >>= self._bloom_shift
        bit = self._bloom[h >> np.uint64(6)]
        bit >>= h & np.uint64(63)
        return np.flatnonzero(bit & np.uint64(1))

    def find_children(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Of sorted probe keys ``node << 32 | token``: (mask of those that are child keys, their child ids)."""
        hit, cidx = lookup(self._ckeys, keys)
        return hit, cidx + 1


@dataclass(frozen=True)
class _WideCache:
    """The cached wide nodes' child labels, append-only: the nodes cached get slots 0, 1, 2, ... in the order
    they came, and ``keys[:size]`` holds ``slot << 32 | label`` of their children, slot after slot, so it is
    sorted.  ``nodes`` (sorted) and ``slots`` map a node to its slot; per slot, ``start`` (its first key) and
    ``first`` (its first child's id).  A new node appends to ``keys`` past ``size`` (a new array when it is
    full): a reader's snapshot never changes."""

    nodes: np.ndarray
    slots: np.ndarray
    start: np.ndarray
    first: np.ndarray
    keys: np.ndarray
    size: int

    @classmethod
    def empty(cls) -> _WideCache:
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z, z, z, np.zeros(0, dtype=U64), 0)

    def lookup(self, nodes: np.ndarray, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Probes (cached ``nodes``, ``tokens``): (mask of those that are children, their child ids)."""
        slot = self.slots[np.searchsorted(self.nodes, nodes)]
        hit, pos = lookup(self.keys[: self.size], (slot.astype(U64) << SH32) | tokens.astype(U64))
        s = slot[hit]
        return hit, self.first[s] + pos - self.start[s]

    def add(self, new: np.ndarray, first: np.ndarray, deg: np.ndarray, labels: np.ndarray) -> _WideCache:
        """This cache and the nodes ``new`` (distinct, sorted, none cached) with their ``first`` child, degree
        and their children's ``labels`` (concatenated)."""
        slots = np.arange(self.start.size, self.start.size + new.size, dtype=np.int64)
        keys = (np.repeat(slots, deg).astype(U64) << SH32) | labels.astype(U64)
        size = self.size + keys.size
        buf = self.keys
        if size > buf.size:  # a new array, twice the keys: appends cost O(1) a key on average
            buf = np.empty(max(2 * size, 1 << 16), dtype=U64)
            buf[: self.size] = self.keys[: self.size]
        buf[self.size : size] = keys
        at = np.searchsorted(self.nodes, new)
        return _WideCache(np.insert(self.nodes, at, new), np.insert(self.slots, at, slots),
                          np.append(self.start, self.size + excl_cumsum(deg)), np.append(self.first, first), buf,
                          size)


class LazyNodes:
    """Every fact computed on demand by the index's decoders; only the wide nodes' child keys are cached."""

    def __init__(self, index: NarrowLoudsIndex) -> None:
        self.index = index
        self._lock = threading.Lock()
        self._wide = _WideCache.empty()  # replaced by each addition, never changed under a reader
        #: label decodes spent so far binary-searching each node wider than `WIDE_DECODE_MAX` (not cached)
        self._spent: dict[int, int] = {}

    @property
    def cached_keys(self) -> int:
        """Child keys held by the wide-node cache now."""
        return self._wide.size

    def edge_len(self, nodes: np.ndarray) -> np.ndarray:
        return self.index.edge_lengths(nodes)  # 0 for the root

    def children(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """As `NarrowLoudsIndex.child_range`, with the select0 of j - 1 and of j in one call: j's children
        are the ones between the zeros that close j - 1 and j."""
        j = np.asarray(nodes, dtype=np.int64)
        z = self.index.louds.select0(np.concatenate([np.maximum(j - 1, 0), j]))
        prev, last = np.where(j > 0, z[: j.size] + 1, 0), z[j.size :]
        return prev - j + 1, last - prev

    def has_children(self, nodes: np.ndarray) -> np.ndarray:
        """Node j has children iff the LOUDS bit before its closing zero (select0(j)) is a one: that bit is
        either j's last child or the zero that closes j - 1."""
        louds = self.index.louds
        z = louds.select0(np.asarray(nodes, dtype=np.int64))
        return (z > 0) & louds.get(np.maximum(z - 1, 0))

    def terminal(self, nodes: np.ndarray) -> np.ndarray:
        return self.index.is_terminal(nodes)

    def keyword_id(self, nodes: np.ndarray) -> np.ndarray:
        return self.index.keyword_ids_of(nodes)

    def label(self, nodes: np.ndarray) -> np.ndarray:
        return self.index.labels(nodes)

    def tail_token(self, nodes: np.ndarray, off: np.ndarray) -> np.ndarray:
        return self.index.edge_tokens(nodes, off)

    def maybe_children(self, nodes: np.ndarray, counts: np.ndarray, row_keys: np.ndarray,
                       rpos: np.ndarray) -> np.ndarray | None:
        return None  # no filter: every probe is looked up in the (small) wide-node cache

    def find_children(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """As `EagerNodes.find_children`.  Probes at a node of at most `WIDE_DECODE_MAX` children are looked up
        in the cache (the node's child keys decoded into it first); probes at a wider node binary-search its
        children's labels (``log2(degree)`` label decodes a probe, nothing kept) until those searches have cost
        as many decodes as the node has children: then it is cached too (`_binary_searched`)."""
        pnode = (keys >> SH32).astype(np.int64)
        starts = np.flatnonzero(np.diff(pnode, prepend=-1))  # keys are sorted: each distinct node's first probe
        nodes = pnode[starts]
        first, deg = self.children(nodes)
        counts = np.diff(np.append(starts, keys.size))  # probes per distinct node
        huge = self._binary_searched(nodes, deg, counts)
        if not huge.any():
            return self._cached_children(nodes, keys)
        per_probe = np.repeat(huge, counts)
        child = np.zeros(keys.size, dtype=np.int64)
        hit = np.zeros(keys.size, dtype=bool)
        at = np.flatnonzero(~per_probe)
        if at.size:
            h, c = self._cached_children(nodes[~huge], keys[at])
            hit[at[h]], child[at[h]] = True, c
        at = np.flatnonzero(per_probe)
        h, c = self._search_children(np.repeat(first[huge], counts[huge]), np.repeat(deg[huge], counts[huge]),
                                     (keys[at] & LO32).astype(np.uint32))
        hit[at[h]], child[at[h]] = True, c
        return hit, child[hit]

    def _binary_searched(self, nodes: np.ndarray, deg: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Which of ``nodes`` (probed ``counts`` times) to binary-search this time: those of more than
        `WIDE_DECODE_MAX` children, not cached, whose searches so far (``counts x log2(degree)`` decodes a
        call, summed in ``_spent``) stay under their degree.  The rest go to the cache: a node is decoded
        only once searching it has cost as much, so the work is at most twice the better of the two."""
        huge = deg > WIDE_DECODE_MAX
        if not huge.any():
            return huge
        huge &= ~_members(nodes, self._wide.nodes)
        with self._lock:
            for k in np.flatnonzero(huge).tolist():
                node, d = int(nodes[k]), int(deg[k])
                spent = self._spent.get(node, 0) + int(counts[k]) * d.bit_length()
                if spent >= d:
                    huge[k] = False
                    self._spent.pop(node, None)
                else:
                    self._spent[node] = spent
        return huge

    def _cached_children(self, nodes: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`find_children` through the cache for probe ``keys`` at ``nodes`` (their distinct nodes, sorted)."""
        cache = self._wide
        if not bool(_members(nodes, cache.nodes).all()):
            cache = self._add_wide(nodes)
        return cache.lookup((keys >> SH32).astype(np.int64), (keys & LO32).astype(np.uint32))

    def _search_children(self, first: np.ndarray, deg: np.ndarray, tokens: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray]:
        """Per probe, the child of label ``tokens[i]`` among nodes ``[first[i], first[i] + deg[i])`` (sorted
        labels): (mask of found, their child ids), by a binary search vectorised over the probes."""
        lo, hi = first.copy(), first + deg
        live = np.arange(lo.size, dtype=np.int64)
        for _ in range(int(deg.max(initial=0)).bit_length()):
            live = live[lo[live] < hi[live]]
            if live.size == 0:
                break
            mid = (lo[live] + hi[live]) >> 1
            less = self.index.labels(mid) < tokens[live]
            lo[live] = np.where(less, mid + 1, lo[live])
            hi[live] = np.where(less, hi[live], mid)
        inside = np.flatnonzero(lo < first + deg)
        found = np.zeros(lo.size, dtype=bool)
        found[inside] = self.index.labels(lo[inside]) == tokens[inside]
        return found, lo[found]

    def _add_wide(self, nodes: np.ndarray) -> _WideCache:
        """The cache with the child keys of those of ``nodes`` (distinct, sorted) not in it yet."""
        with self._lock:
            cache = self._wide
            new = nodes[~_members(nodes, cache.nodes)]
            first, deg = self.children(new)
            if cache.size + int(deg.sum()) > WIDE_CACHE_KEYS:  # start over: memory stays bounded
                cache, new = _WideCache.empty(), nodes
                first, deg = self.children(new)
            _, child = segment_iota(first, deg)
            self._wide = cache.add(new, first, deg, self.index.labels(child))
            return self._wide
