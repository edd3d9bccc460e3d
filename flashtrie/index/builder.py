"""Vectorised construction of the narrow-LOUDS arrays from a `KeywordSet`.

Steps (all numpy, no per-keyword Python work; ``u`` unique keywords, ``L`` the longest):
1. sort: one least-significant-column-first pass per token column, each a single ``np.sort`` of
   (token, position) packed into uint64 (numpy's vectorised sort, far faster than an argsort).
   A keyword joins the passes at its last column, ahead of the keywords already in them (so a keyword
   that ends sorts before its extensions), and the work is one sort slot per token.  Equal
   keywords keep ascending ids; duplicates are dropped, keeping the smallest id.
2. common prefix of each keyword with its predecessor (``lcp``), comparing one column at a time and
   only the pairs still equal.
3. the compressed trie straight from ``lcp``: its nodes are the root, the keyword ends, and the branch
   points; keyword ``i`` with ``lcp_i = d >= 1`` hangs off the depth-d node created by the last earlier
   keyword whose ``lcp`` is below d.  In preorder each keyword's run holds the branch points it creates,
   by depth, then its end; two passes over the levels place every node and give each keyword's parent
   and compressed depth (`_preorder`).
4. level order = a stable sort of preorder by compressed depth; then the arrays of
   `docs/index-format.md`, the keyword ids (a map only when they need one), and the node flags and
   largest degrees from the finished bit vectors (`derived.node_flags`).

Steps 1-3 run per part on threads: keywords with different first tokens share only the root, so
ranges of first token are independent subtries, joined under one root afterwards.  The arrays of step 4
are built on threads too.  numpy releases the GIL in sorts, gathers and arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from ..cpus import in_parallel, usable_cpus
from ..errors import InputError
from ..keywords import KeywordSet
from .bits import BitVector
from .derived import node_flags
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
    keyword_ids: PackedInts  # empty (width 0) when the ids are the terminals' ranks
    node_flags: np.ndarray
    max_degree: int
    max_degree_nonroot: int
    order: np.ndarray  # input id (the smallest of its duplicates) of the r-th terminal node in level order
    id_order: str  # "input" or "index"
    num_nodes: int
    num_keywords: int
    num_unique: int
    max_keyword_length: int
    max_token: int


def _small_uint(values: np.ndarray, limit: int) -> np.ndarray:
    """``values`` (all in [0, limit]) as uint8 / uint16 where they fit, so numpy's stable sort is a radix sort."""
    for dt in (np.uint8, np.uint16):
        if limit <= np.iinfo(dt).max:
            return values.astype(dt)
    return values


def _packed_order(key: np.ndarray, key_bits: int, *, consume: bool = False) -> np.ndarray:
    """Stable argsort of non-negative ``key`` (< 2**key_bits): ``np.sort`` of key and position in one uint64.

    Falls back to a stable argsort when both do not fit in 64 bits.  ``consume``: ``key`` is a uint64
    temporary that may be overwritten (saves a copy).
    """
    n = key.size
    pos_bits = max(1, (n - 1).bit_length())
    if key_bits + pos_bits > 64:
        return np.argsort(key, kind="stable")
    packed = key if consume and key.dtype == np.uint64 else key.astype(np.uint64)
    packed <<= np.uint64(pos_bits)
    packed |= np.arange(n, dtype=np.uint64)
    packed.sort()
    packed &= np.uint64((1 << pos_bits) - 1)
    return packed.view(np.int64)


def _sort_keywords(tokens: np.ndarray, starts: np.ndarray, lens: np.ndarray, ids: np.ndarray,
                   max_len: int) -> np.ndarray:
    """``ids`` (ascending) in lexicographic order of their keywords (a keyword before its extensions),
    equal keywords by ascending id."""
    by_len = ids[np.argsort(_small_uint(lens[ids], max_len), kind="stable")]
    first = np.zeros(max_len + 2, dtype=np.int64)
    np.cumsum(np.bincount(lens[ids], minlength=max_len + 1), out=first[1:])
    # positions and ids travel with the order; 32-bit where they fit, as each pass gathers them at random
    idt = np.int32 if max(tokens.size, lens.size) < 2**31 else np.int64
    cur_pos = np.zeros(0, dtype=idt)  # first-token positions of the keywords sorted so far
    cur_id = np.zeros(0, dtype=idt)
    for j in range(max_len - 1, -1, -1):
        # keywords of length j + 1 have no column after j: they come first, in id order, then the
        # keywords sorted so far; a stable sort by column j keeps that order among equal tokens
        enter = by_len[first[j + 1]:first[j + 2]]
        pos = np.concatenate((starts[enter].astype(idt), cur_pos))
        sid = np.concatenate((enter.astype(idt), cur_id))
        # every keyword of this pass has a column j (its length is over j)
        o = _packed_order(tokens[pos + j].astype(np.uint64), 32, consume=True)
        cur_pos, cur_id = pos[o], sid[o]
    return cur_id.astype(np.int64)


def _neighbour_lcp(tokens: np.ndarray, s_start: np.ndarray, s_len: np.ndarray) -> np.ndarray:
    """Common prefix length of each sorted keyword with its predecessor (0 for the first).

    Column by column over the pairs still equal: a whole column at once while many pairs are, then
    only those pairs.
    """
    n = s_len.size
    lcp = np.zeros(n, dtype=np.int64)
    still = np.ones(max(n - 1, 0), dtype=bool)  # pair (i - 1, i) equal on columns < j
    j = 0
    col = np.zeros(n, dtype=np.uint32)  # token + 1 at column j (fits: tokens are at most 2**32 - 2); 0 if none
    while n > 1 and j < int(s_len.max()):
        has = s_len > j
        col.fill(0)
        col[has] = tokens[s_start[has] + j] + np.uint32(1)
        still &= col[1:] == col[:-1]
        still &= has[1:]
        j += 1
        act = np.flatnonzero(still) + 1
        lcp[act] = j
        if act.size * 4 < n:
            break
    else:
        return lcp
    a, b = s_start[act], s_start[act - 1]
    la, lb = s_len[act], s_len[act - 1]
    while act.size:
        ok = (la > j) & (lb > j)
        ok[ok] = tokens[a[ok] + j] == tokens[b[ok] + j]
        act, a, b, la, lb = act[ok], a[ok], b[ok], la[ok], lb[ok]
        j += 1
        lcp[act] = j
    return lcp


@dataclass
class _Preorder:
    """The compressed trie in preorder; position 0 is the root (creator -1, depth 0)."""

    creator: np.ndarray  # sorted-keyword index whose path the node lies on (the first such keyword)
    depth: np.ndarray  # depth of the node in the plain trie (tokens from the root)
    parent: np.ndarray  # preorder position of the parent (-1 for the root)
    edge_start: np.ndarray  # plain depth of the edge's first token (parent depth + 1)
    cdepth: np.ndarray  # depth in the compressed trie


def _preorder(lcp: np.ndarray, lens: np.ndarray) -> _Preorder:
    """The compressed trie of sorted unique keywords (``lcp``, ``lens`` in sorted order), in preorder.

    Keyword i with ``lcp_i = d >= 1`` hangs off the depth-d node on its path, created by ``p(i)``, the last
    k < i with ``lcp_k < d`` (the keywords at least d long with ``lcp < d`` create the depth-d nodes).  Its
    own nodes follow in preorder: the branch points it creates, by depth, then its end.  Level by level
    (d ascending, over the depth-d nodes), this gives each branch point's creator, its place in
    its creator's run, every keyword's parent node and compressed depth.  The only sorting: grouping the
    keywords by lcp, and merging each level's creators (two sorted runs).
    """
    u = lcp.size
    max_lcp = int(lcp.max()) if u else 0
    by_lcp = np.argsort(_small_uint(lcp, max_lcp), kind="stable")  # keywords grouped by lcp, ids ascending
    bounds = np.zeros(max_lcp + 2, dtype=np.int64)
    np.cumsum(np.bincount(lcp, minlength=max_lcp + 1), out=bounds[1:])

    # pass 1: per level d, the keywords q with lcp = d, their creators p(q) (non-decreasing in q), and the
    # distinct depth-d branch points (their creators, node_c)
    levels = []
    creators = by_lcp[: bounds[1]]  # the keywords creating a depth-d node: lcp < d <= length (d = 1 here)
    for d in range(1, max_lcp + 1):
        if d > 1:  # drop the keywords shorter than d, add those with lcp = d - 1 (all longer: lcp < length)
            creators = np.sort(np.concatenate((creators[lens[creators] >= d], by_lcp[bounds[d - 1]:bounds[d]])),
                               kind="stable")  # a merge of two sorted runs
        q = by_lcp[bounds[d]:bounds[d + 1]]
        if q.size == 0:
            continue
        pc = creators[np.searchsorted(creators, q, side="right") - 1]
        new = np.ones(pc.size, dtype=bool)
        new[1:] = pc[1:] != pc[:-1]
        levels.append((d, q, new, pc[new]))
    del by_lcp, creators
    inner = np.zeros(u, dtype=np.int64)  # branch points of each creator that are not keyword ends
    for d, _, _, node_c in levels:
        inner[node_c[lens[node_c] != d]] += 1  # node_c is unique within a level
    # creator c's run: its inner branch points by depth, then its end; the root is position 0
    pos_t = np.cumsum(inner + 1)
    first = pos_t - inner
    n = 1 + u + int(inner.sum())

    idt = np.int32 if n < 2**31 - 1 else np.int64  # the node arrays: 32-bit where they fit (half the memory)
    creator = np.empty(n, dtype=idt)
    depth = np.empty(n, dtype=idt)
    creator[0], depth[0] = -1, 0
    creator[pos_t] = np.arange(u, dtype=np.int64)
    depth[pos_t] = lens
    # pass 2: place the inner branch points; each keyword's parent (hang) and compressed depth (cd_first)
    seen = np.zeros(u, dtype=np.int64)
    hang = np.zeros(u, dtype=np.int64)  # the root for lcp = 0
    cd_first = np.ones(u, dtype=np.int64)
    for d, q, new, node_c in levels:
        inner_node = lens[node_c] != d
        rank = np.where(inner_node, seen[node_c], inner[node_c])  # place in the creator's run
        pos = first[node_c] + rank
        c_in = node_c[inner_node]
        creator[pos[inner_node]] = c_in
        depth[pos[inner_node]] = d
        seen[c_in] += 1
        grp = np.cumsum(new) - 1
        hang[q] = pos[grp]
        # the creator's compressed depth is final: its lcp is below d
        cd_first[q] = (cd_first[node_c] + rank + 1)[grp]
    del levels, seen, inner
    parent = np.arange(-1, n - 1, dtype=idt)
    parent[first] = hang
    edge_start = np.empty(n, dtype=idt)
    edge_start[0] = 0
    edge_start[1:] = depth[:-1] + 1
    edge_start[first] = lcp + 1
    cdepth = np.zeros(n, dtype=idt)
    c = creator[1:]
    cdepth[1:] = cd_first[c] + np.arange(1, n, dtype=np.int64) - first[c]
    return _Preorder(creator, depth, parent, edge_start, cdepth)


def _cores() -> int:
    return usable_cpus()


def _in_parallel(*fns: Callable[[], Any]) -> list[Any]:
    """Results of independent numpy-heavy calls, run on up to one thread per core."""
    return in_parallel(list(fns), _cores())


def _dedup(order: np.ndarray, lcp: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop sorted keywords equal to their predecessor (keeping the smallest id, which sorts first)."""
    s_len = lens[order]
    dup = lcp == s_len
    dup[1:] &= s_len[:-1] == s_len[1:]
    dup[0] = False
    if not dup.any():
        return order, lcp
    keep = ~dup  # a dropped keyword equals its kept predecessor, so the next lcp is unchanged
    return order[keep], lcp[keep]


#: Keywords per part at least, when the build is split across threads.
MIN_PART = 500_000


def _split_by_first_token(tokens: np.ndarray, starts: np.ndarray, parts: int) -> list[np.ndarray]:
    """Keyword ids split into up to ``parts`` parts by ranges of first token (ascending ids in each).

    Keywords with different first tokens share no trie node but the root, so the parts are sorted and
    turned into subtries independently, on threads (numpy's sorts and gathers release the GIL).
    """
    n = starts.size
    if parts <= 1:
        return [np.arange(n, dtype=np.int64)]
    first_tok = tokens[starts]
    q = [n * i // parts for i in range(1, parts)]
    cuts = np.unique(np.partition(first_tok, q)[q])
    part_of = np.searchsorted(cuts, first_tok, side="right")  # equal first tokens share a part
    return [g for g in (np.flatnonzero(part_of == b) for b in range(cuts.size + 1)) if g.size]


def _sorted_preorder(ks: KeywordSet, max_len: int) -> tuple[np.ndarray, _Preorder]:
    """Sorted unique keyword ids and the compressed trie in preorder (creators index the sorted ids)."""
    tokens, lens, starts = ks.tokens, ks.lengths, ks.offsets[:-1]

    def one(ids: np.ndarray) -> tuple[np.ndarray, _Preorder]:
        order = _sort_keywords(tokens, starts, lens, ids, max_len)
        order, lcp = _dedup(order, _neighbour_lcp(tokens, starts[order], lens[order]), lens)
        return order, _preorder(lcp, lens[order])

    parts = min(_cores(), 8, max(1, lens.size // MIN_PART))
    groups = _split_by_first_token(tokens, starts, parts)
    if len(groups) == 1:
        return one(groups[0])
    done = _in_parallel(*[partial(one, g) for g in groups])
    # concatenate the subtries under one root: part k's node x > 0 moves to x + node_off[k]
    orders = [o for o, _ in done]
    sizes = np.array([p.creator.size - 1 for _, p in done], dtype=np.int64)
    node_off = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    kw_off = np.concatenate(([0], np.cumsum([o.size for o in orders])[:-1]))

    idt = np.int32 if int(sizes.sum()) + 1 < 2**31 - 1 else np.int64

    def cat(f: Callable[[int, _Preorder], np.ndarray], root: int) -> np.ndarray:
        return np.concatenate([np.array([root], dtype=idt)] + [f(k, p) for k, (_, p) in enumerate(done)], dtype=idt)

    pre = _Preorder(
        creator=cat(lambda k, p: p.creator[1:] + kw_off[k], -1),
        depth=cat(lambda k, p: p.depth[1:], 0),
        parent=cat(lambda k, p: np.where(p.parent[1:] == 0, 0, p.parent[1:] + node_off[k]), -1),
        edge_start=cat(lambda k, p: p.edge_start[1:], 0),
        cdepth=cat(lambda k, p: p.cdepth[1:], 0),
    )
    return np.concatenate(orders), pre


@dataclass
class LevelOrder:
    """Steps 1-4's output, in level order: what the array assembly reads (node 0 is the root)."""

    parent: np.ndarray  # level-order parent of nodes 1..n-1 (non-decreasing)
    creator: np.ndarray  # sorted-keyword index of each node's creator (-1 for the root)
    depth: np.ndarray  # plain-trie depth of each node
    start: np.ndarray  # plain depth of each node's first edge token
    num_nodes: int


def _level_order(pre: _Preorder, max_len: int) -> LevelOrder:
    """Step 4: level order = a stable sort of preorder by compressed depth; the node arrays in that order."""
    bfs = np.argsort(_small_uint(pre.cdepth, max_len), kind="stable")  # level order: (cdepth, preorder)
    n = bfs.size
    inv = np.empty(n, dtype=np.int64)
    inv[bfs] = np.arange(n, dtype=np.int64)
    par, creator, depth, start = _in_parallel(
        *[partial(np.take, a, bfs) for a in (pre.parent, pre.creator, pre.depth, pre.edge_start)])
    parent_bfs = inv[par[1:]]
    del inv, bfs, par
    if parent_bfs.size and (np.any(np.diff(parent_bfs) < 0) or parent_bfs.min() < 0):
        raise AssertionError("internal error: children are not contiguous in level order")
    return LevelOrder(parent_bfs, creator, depth, start, n)


def _sort_and_order(ks: KeywordSet, max_len: int, say: Progress) -> tuple[np.ndarray, LevelOrder]:
    """Steps 1-4 on the CPU (the reference; `flashtrie.gpu_impl.build_gpu` mirrors it on a GPU)."""
    say("sort+trie")
    order, pre = _sorted_preorder(ks, max_len)
    say("order")
    return order, _level_order(pre, max_len)


def check_build_request(keywords: object, ids: str) -> None:
    """`InputError` unless ``keywords`` is a non-empty `KeywordSet` and ``ids`` is "input" or "index" (every
    builder checks this before any work)."""
    if not isinstance(keywords, KeywordSet):
        raise InputError(f"keywords: expected a flashtrie.KeywordSet, got {type(keywords).__name__}")
    if ids not in ("input", "index"):
        raise InputError(f"ids: expected 'input' or 'index', got {ids!r}")
    if len(keywords) == 0:
        raise InputError("keywords: the keyword set is empty; an index needs at least one keyword")


def build_arrays(ks: KeywordSet, progress: Progress | None = None, ids: str = "input") -> BuiltArrays:
    """Build every index array from ``ks``; ``progress(stage)`` is called as stages start.

    ``ids="input"``: results carry input ids, through the map ``keyword_ids`` unless the input order already
    is the index order (then no map is stored).  ``ids="index"``: the r-th terminal node has id r, no map.
    """
    if ids not in ("input", "index"):
        raise ValueError(f"ids must be 'input' or 'index', got {ids!r}")
    say = progress or (lambda stage: None)
    n_in = len(ks)
    if n_in == 0:
        raise ValueError("cannot build an index of an empty keyword set")
    tokens = ks.tokens
    lengths_all = ks.lengths
    starts_all = ks.offsets[:-1]
    max_len = int(lengths_all.max())

    order, lv = _sort_and_order(ks, max_len, say)
    starts = starts_all[order]
    lens = lengths_all[order]
    u = order.size
    parent_bfs, creator, depth, start = lv.parent, lv.creator, lv.depth, lv.start
    n = lv.num_nodes
    del lv

    say("arrays")
    creator[0] = 0  # the root reads nothing below; any valid index keeps the gathers in range
    kw_start = starts[creator]  # flat position of the creator's first token
    max_tok = int(tokens.max())

    def louds() -> BitVector:
        deg = np.bincount(parent_bfs, minlength=n)
        bits = np.ones(int(deg.sum()) + n, dtype=bool)
        bits[np.cumsum(deg + 1) - 1] = False
        return BitVector.from_bools(bits, with_select0=True)

    def labels() -> tuple[np.ndarray, BitVector, PackedInts]:
        lab = np.zeros(n, dtype=np.int64)
        lab[1:] = tokens[kw_start[1:] + start[1:] - 1]
        hi = lab >> 16
        hi_mask = hi > 0
        return (lab & 0xFFFF).astype(np.uint16), BitVector.from_bools(hi_mask), PackedInts.from_values(hi[hi_mask])

    def links() -> tuple[BitVector, PackedInts, PackedInts]:
        edge_len = depth - start + 1
        edge_len[0] = 0
        link_mask = edge_len >= 2
        tail_len = edge_len[link_mask] - 1
        link_off = np.zeros(tail_len.size + 1, dtype=np.int64)
        np.cumsum(tail_len, out=link_off[1:])
        # flat positions of every tail token: the token after the edge's first, then on along the creator
        first_tail = (kw_start + start)[link_mask]
        pos = np.repeat(first_tail - link_off[:-1], tail_len) + np.arange(int(link_off[-1]), dtype=np.int64)
        return (BitVector.from_bools(link_mask), PackedInts.from_values(link_off),
                PackedInts.from_values(tokens[pos], width=max(1, max_tok.bit_length())))

    def terminals() -> tuple[BitVector, PackedInts]:
        term = depth == lens[creator]
        term[0] = False
        kid = order[creator[term]]
        identity = ids == "index" or bool(np.array_equal(kid, np.arange(kid.size)))
        return BitVector.from_bools(term), kid, PackedInts.from_values(kid[:0] if identity else kid)

    (louds_bv, (labels_lo, hi_flag, labels_hi), (linked, link_starts, suffix),
     (terminal, kid, keyword_ids)) = _in_parallel(louds, labels, links, terminals)
    flags, max_deg, max_deg_nonroot = node_flags(louds_bv, linked, terminal, n, _cores())
    return BuiltArrays(
        louds=louds_bv, labels_lo=labels_lo, hi_flag=hi_flag, labels_hi=labels_hi, linked=linked,
        link_starts=link_starts, suffix=suffix, terminal=terminal, keyword_ids=keyword_ids,
        node_flags=flags, max_degree=max_deg, max_degree_nonroot=max_deg_nonroot, order=kid, id_order=ids,
        num_nodes=n, num_keywords=n_in, num_unique=u, max_keyword_length=max_len, max_token=max_tok,
    )
