"""Vectorised construction of the narrow-LOUDS arrays from a `KeywordSet`.

Steps (all numpy, no per-keyword Python work):
1. sort the keywords lexicographically (tokens packed several to a uint64, `np.lexsort`) and drop
   duplicates, keeping the smallest id;
2. longest common prefix of neighbours -> the nodes of the plain trie, level by level: keyword i creates
   the nodes at depths lcp_i + 1 .. len_i, and within a level, creation order is level order;
3. path compression: a node with one child that is not the end of a keyword joins its child's edge;
4. level order of the compressed trie = sort by (compressed depth, creator keyword, depth);
5. the arrays of `docs/index-format.md`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..keywords import KeywordSet
from .bits import BitVector
from .packed import PackedInts

Progress = Callable[[str], None]


@dataclass
class BuiltArrays:
    """What the builder hands to `NarrowLoudsIndex`."""

    louds: BitVector
    labels_lo: np.ndarray
    hi_flag: BitVector
    labels_hi: PackedInts
    linked: BitVector
    link_starts: PackedInts
    suffix: PackedInts
    terminal: BitVector
    keyword_ids: PackedInts
    num_nodes: int
    num_keywords: int
    num_unique: int
    max_keyword_length: int
    max_token: int


def _pack_keys(ks: KeywordSet, lengths: np.ndarray) -> tuple[np.ndarray, int]:
    """Every keyword as one big-endian bit string of (token + 1) fields, ``width`` bits each, zero-filled.

    Row g of the result holds bits [64 g, 64 g + 64) of every keyword's string, so comparing the rows in
    order compares keywords lexicographically, a keyword before its extensions.
    """
    n = len(ks)
    max_len = int(lengths.max())
    width = max(1, (int(ks.tokens.max()) + 1).bit_length())
    groups = (max_len * width + 63) // 64
    rows = np.zeros((groups, n), dtype=np.uint64)
    starts = ks.offsets[:-1]
    for j in range(max_len):
        has = np.flatnonzero(lengths > j)
        v = ks.tokens[starts[has] + j].astype(np.uint64) + np.uint64(1)
        g, s = divmod(j * width, 64)
        if s + width <= 64:
            rows[g, has] |= v << np.uint64(64 - s - width)
        else:
            rows[g, has] |= v >> np.uint64(s + width - 64)
            rows[g + 1, has] |= v << np.uint64(128 - s - width)
    return rows, width


def _clz64(x: np.ndarray) -> np.ndarray:
    """Leading zero bits of each nonzero uint64 (exact: halves of 32 bits convert to float64 exactly)."""
    hi = (x >> np.uint64(32)).astype(np.float64)
    lo = (x & np.uint64(0xFFFF_FFFF)).astype(np.float64)
    bl_hi = np.frexp(hi)[1]
    bl_lo = np.frexp(lo)[1]
    return np.where(hi > 0, 32 - bl_hi, 64 - bl_lo).astype(np.int64)


def _lexsort(rows: np.ndarray, ix: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Stable lexicographic order of the columns of ``rows`` (row 0 most significant), and the sorted rows."""
    sub = rows if ix is None else rows[:, ix]
    o = np.lexsort(sub[::-1]) if sub.shape[0] > 1 else np.argsort(sub[0], kind="stable")
    return (o if ix is None else ix[o]), sub[:, o]


def _parallel_lexsort(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`_lexsort` split by quantiles of row 0 across threads (numpy sorts release the GIL)."""
    n = rows.shape[1]
    parts = min(os.cpu_count() or 1, 8, max(1, n // 1_000_000))
    if parts == 1:
        return _lexsort(rows)
    cuts = np.unique(np.partition(rows[0], [n * i // parts for i in range(1, parts)])[
        [n * i // parts for i in range(1, parts)]])
    bucket = np.searchsorted(cuts, rows[0], side="right")  # equal row-0 values share a bucket
    groups = [np.flatnonzero(bucket == b) for b in range(cuts.size + 1)]
    with ThreadPoolExecutor(parts) as ex:
        done = list(ex.map(lambda ix: _lexsort(rows, ix), groups))
    return np.concatenate([o for o, _ in done]), np.concatenate([r for _, r in done], axis=1)


def _sorted_unique(ks: KeywordSet, lengths: np.ndarray, progress: Progress) -> tuple[np.ndarray, np.ndarray]:
    """Keywords sorted lexicographically with duplicates removed (the smallest id kept), and the common
    prefix length of each with its predecessor."""
    rows, width = _pack_keys(ks, lengths)
    progress("sort")
    order, sr = _parallel_lexsort(rows)
    del rows
    progress("prefixes")
    n = order.size
    first_diff = np.full(max(n - 1, 0), -1, dtype=np.int64)  # first differing bit, from the top
    for g in range(sr.shape[0] - 1, -1, -1):
        x = sr[g, 1:] ^ sr[g, :-1]
        nz = x != 0
        first_diff[nz] = 64 * g + _clz64(x[nz])
    keep = np.concatenate(([True], first_diff >= 0))
    lcp_pairs = np.where(first_diff >= 0, first_diff // width, 0)
    # lcp with the previous *kept* keyword: a dropped duplicate equals its kept predecessor
    lcp = np.concatenate(([0], lcp_pairs))[keep]
    return order[keep], lcp


def build_arrays(ks: KeywordSet, progress: Progress | None = None) -> BuiltArrays:
    """Build every index array from ``ks``; ``progress(stage)`` is called as stages start."""
    say = progress or (lambda stage: None)
    n_in = len(ks)
    if n_in == 0:
        raise ValueError("cannot build an index of an empty keyword set")
    lengths_all = ks.lengths
    say("pack")
    uniq, lcp = _sorted_unique(ks, lengths_all, say)
    u = uniq.size
    lens = lengths_all[uniq]
    starts = ks.offsets[:-1][uniq]
    max_len = int(lens.max())

    say("levels")
    # Plain trie, level by level.  Per level d (depth d >= 1): creator keyword (sorted index), token,
    # terminal flag, parent index within level d - 1.  Level 0 is the root.
    creators: list[np.ndarray] = [np.zeros(1, dtype=np.int64)]
    parents: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
    for d in range(1, max_len + 1):
        cr = np.flatnonzero((lcp < d) & (lens >= d))
        if d == 1:
            par = np.zeros(cr.size, dtype=np.int64)
        else:
            par = np.searchsorted(creators[d - 1], cr, side="right") - 1
        creators.append(cr)
        parents.append(par)
    degrees = [np.bincount(parents[d + 1], minlength=creators[d].size) if d < max_len
               else np.zeros(creators[d].size, dtype=np.int64) for d in range(max_len + 1)]
    terminals = [np.zeros(1, dtype=bool)] + [lens[creators[d]] == d for d in range(1, max_len + 1)]

    say("compress")
    # kept: root, ends of keywords, nodes whose degree is not 1.  For every plain node: the depth where
    # its edge starts, the nearest kept proper ancestor (level, index) and its compressed depth.
    kept = [np.ones(1, dtype=bool)] + [terminals[d] | (degrees[d] != 1) for d in range(1, max_len + 1)]
    edge_start = [np.zeros(1, dtype=np.int64)]
    anc_level = [np.zeros(1, dtype=np.int64)]
    anc_index = [np.zeros(1, dtype=np.int64)]
    cdepth = [np.zeros(1, dtype=np.int64)]
    for d in range(1, max_len + 1):
        p = parents[d]
        pk = kept[d - 1][p]
        edge_start.append(np.where(pk, d, edge_start[d - 1][p]))
        anc_level.append(np.where(pk, d - 1, anc_level[d - 1][p]))
        anc_index.append(np.where(pk, p, anc_index[d - 1][p]))
        cdepth.append(np.where(pk, cdepth[d - 1][p] + 1, cdepth[d - 1][p]))

    # gather kept nodes; global plain id = level offset + index
    level_off = np.zeros(max_len + 2, dtype=np.int64)
    np.cumsum([c.size for c in creators], out=level_off[1:])
    sel = [np.flatnonzero(k) for k in kept]
    k_depth = np.concatenate([np.full(s.size, d, dtype=np.int64) for d, s in enumerate(sel)])
    k_creator = np.concatenate([creators[d][s] for d, s in enumerate(sel)])
    k_cdepth = np.concatenate([cdepth[d][s] for d, s in enumerate(sel)])
    k_start = np.concatenate([edge_start[d][s] for d, s in enumerate(sel)])
    k_anc = np.concatenate([level_off[anc_level[d][s]] + anc_index[d][s] for d, s in enumerate(sel)])
    k_plain = np.concatenate([level_off[d] + s for d, s in enumerate(sel)])
    k_term = np.concatenate([terminals[d][s] for d, s in enumerate(sel)])
    del creators, parents, degrees, terminals, kept, edge_start, anc_level, anc_index, cdepth

    say("order")
    # (compressed depth, creator) is unique per kept node: the kept nodes a keyword creates lie on one
    # path, at increasing compressed depths.  Within a compressed depth, creator order is level order.
    bfs = np.argsort(k_cdepth * np.int64(u) + k_creator)  # root first: cdepth 0
    n = bfs.size
    plain_to_bfs = np.full(int(level_off[-1]), -1, dtype=np.int64)
    plain_to_bfs[k_plain[bfs]] = np.arange(n, dtype=np.int64)
    depth = k_depth[bfs]
    creator = k_creator[bfs]
    start = k_start[bfs]
    term = k_term[bfs]
    parent_bfs = plain_to_bfs[k_anc[bfs][1:]]
    if parent_bfs.size and (np.any(np.diff(parent_bfs) < 0) or parent_bfs.min() < 0):
        raise AssertionError("internal error: children are not contiguous in level order")
    deg = np.bincount(parent_bfs, minlength=n)

    say("arrays")
    louds_bits = np.ones(int(deg.sum()) + n, dtype=bool)
    louds_bits[np.cumsum(deg + 1) - 1] = False
    louds = BitVector.from_bools(louds_bits, with_select0=True)

    kw_start = starts[creator]  # flat position of the creator's first token
    labels = np.zeros(n, dtype=np.int64)
    labels[1:] = ks.tokens[kw_start[1:] + start[1:] - 1]
    labels_lo = (labels & 0xFFFF).astype(np.uint16)
    hi = labels >> 16
    hi_mask = hi > 0
    hi_flag = BitVector.from_bools(hi_mask)
    labels_hi = PackedInts.from_values(hi[hi_mask])

    edge_len = np.zeros(n, dtype=np.int64)
    edge_len[1:] = depth[1:] - start[1:] + 1
    link_mask = edge_len >= 2
    linked = BitVector.from_bools(link_mask)
    tail_len = edge_len[link_mask] - 1
    link_off = np.zeros(tail_len.size + 1, dtype=np.int64)
    np.cumsum(tail_len, out=link_off[1:])
    link_starts = PackedInts.from_values(link_off)
    # flat token positions of every tail token: creator start + edge start depth + 0..m-2
    first_tail = (kw_start + start)[link_mask]  # position of e_1 = start index (depth start) in 0-based
    pos = np.repeat(first_tail - link_off[:-1], tail_len) + np.arange(int(link_off[-1]), dtype=np.int64)
    max_tok = int(ks.tokens.max())
    suffix = PackedInts.from_values(ks.tokens[pos], width=max(1, max_tok.bit_length()))

    terminal = BitVector.from_bools(term)
    keyword_ids = PackedInts.from_values(uniq[creator[term]])
    return BuiltArrays(
        louds=louds, labels_lo=labels_lo, hi_flag=hi_flag, labels_hi=labels_hi, linked=linked,
        link_starts=link_starts, suffix=suffix, terminal=terminal, keyword_ids=keyword_ids,
        num_nodes=n, num_keywords=n_in, num_unique=u, max_keyword_length=max_len, max_token=max_tok,
    )
