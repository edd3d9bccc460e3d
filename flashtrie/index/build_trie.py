"""Builder steps 3-4, written once over the array module ``xp`` (numpy on the CPU, cupy on a GPU).

3. `preorder`: the compressed trie straight from the sorted keywords' ``lcp``.  Its nodes are the root,
   the keyword ends and the branch points; keyword ``i`` with ``lcp_i = d >= 1`` hangs off the depth-d
   node created by the last earlier keyword whose ``lcp`` is below d.  In preorder each keyword's run holds
   the branch points it creates, by depth, then its end; two passes over the levels place every node and
   give each keyword's parent and compressed depth.
4. `level_order`: a stable sort of preorder by compressed depth, and the node arrays gathered into it
   (on ``workers`` threads: numpy releases the GIL in its gathers).

`join_parts` puts subtries built apart (keywords with different first tokens share only the root) under
one root, as if they had been built together.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from types import ModuleType
from typing import Any

import numpy as np

from ..cpus import in_parallel
from .build_sort import stable_order, to_host

__all__ = ["LevelOrder", "Preorder", "join_parts", "level_order", "preorder"]


@dataclass
class Preorder:
    """The compressed trie in preorder; position 0 is the root (creator -1, depth 0)."""

    creator: Any  # sorted-keyword index whose path the node lies on (the first such keyword)
    depth: Any  # depth of the node in the plain trie (tokens from the root)
    parent: Any  # preorder position of the parent (-1 for the root)
    edge_start: Any  # plain depth of the edge's first token (parent depth + 1)
    cdepth: Any  # depth in the compressed trie


@dataclass
class LevelOrder:
    """Step 4's output, in level order: what the array assembly reads (node 0 is the root)."""

    parent: Any  # level-order parent of nodes 1..n-1 (non-decreasing)
    creator: Any  # sorted-keyword index of each node's creator (-1 for the root)
    depth: Any  # plain-trie depth of each node
    start: Any  # plain depth of each node's first edge token


def _levels(xp: ModuleType, lcp: Any, lens: Any, wt: type) -> list[tuple[int, Any, Any, Any]]:
    """Pass 1 of `preorder`: per level d, the keywords q with lcp = d, whether each starts a new creator, and
    the distinct creators p(q) of the depth-d branch points (``node_c``)."""
    u = lcp.size
    max_lcp = int(lcp.max()) if u else 0
    by_lcp = stable_order(xp, lcp, max_lcp).astype(wt, copy=False)  # keywords grouped by lcp, ids ascending
    bounds = np.zeros(max_lcp + 2, dtype=np.int64)
    np.cumsum(to_host(xp.bincount(lcp, minlength=max_lcp + 1)), out=bounds[1:])
    levels = []
    creators = by_lcp[: bounds[1]]  # the keywords creating a depth-d node: lcp < d <= length (d = 1 here)
    for d in range(1, max_lcp + 1):
        if d > 1:  # drop the keywords shorter than d, add those with lcp = d - 1 (all longer: lcp < length)
            creators = _merge(xp, creators[lens[creators] >= d], by_lcp[bounds[d - 1] : bounds[d]])
        q = by_lcp[bounds[d] : bounds[d + 1]]
        if q.size == 0:
            continue
        pc = creators[xp.searchsorted(creators, q, side="right") - 1]
        new = xp.ones(pc.size, dtype=bool)
        new[1:] = pc[1:] != pc[:-1]
        levels.append((d, q, new, pc[new]))
    return levels


def _merge(xp: ModuleType, a: Any, b: Any) -> Any:
    """The distinct sorted ids of ``a`` and ``b`` (each sorted) in one sorted array: numpy's stable sort
    merges the two runs; cupy's sort is a radix sort."""
    both = xp.concatenate((a, b))
    return np.sort(both, kind="stable") if xp is np else xp.sort(both)


def preorder(xp: ModuleType, lcp: Any, lens: Any) -> Preorder:
    """The compressed trie of sorted unique keywords (``lcp``, ``lens`` in sorted order), in preorder.

    Keyword i with ``lcp_i = d >= 1`` hangs off the depth-d node on its path, created by ``p(i)``, the last
    k < i with ``lcp_k < d`` (the keywords at least d long with ``lcp < d`` create the depth-d nodes).  Its
    own nodes follow in preorder: the branch points it creates, by depth, then its end.  Level by level
    (d ascending, over the depth-d nodes), this gives each branch point's creator, its place in its
    creator's run, every keyword's parent node and compressed depth.  The only sorting: grouping the
    keywords by lcp, and merging each level's creators (two sorted runs).
    """
    u = lcp.size
    # working arrays in 32 bits where every node index fits (a compressed trie has at most 2u + 1 nodes)
    wt = xp.int32 if 2 * u + 2 < 2**31 - 1 else xp.int64
    levels = _levels(xp, lcp, lens, wt)
    inner = xp.zeros(u, dtype=wt)  # branch points of each creator that are not keyword ends
    for d, _, _, node_c in levels:
        inner[node_c[lens[node_c] != d]] += 1  # node_c is unique within a level
    # creator c's run: its inner branch points by depth, then its end; the root is position 0
    pos_t = xp.cumsum(inner + 1, dtype=wt)
    first = pos_t - inner
    n = 1 + u + int(inner.sum())

    idt = xp.int32 if n < 2**31 - 1 else xp.int64  # the node arrays: 32-bit where they fit (half the memory)
    creator = xp.empty(n, dtype=idt)
    depth = xp.empty(n, dtype=idt)
    creator[0], depth[0] = -1, 0
    creator[pos_t] = xp.arange(u, dtype=idt)
    depth[pos_t] = lens
    del pos_t
    # pass 2: place the inner branch points; each keyword's parent (hang) and compressed depth (cd_first)
    seen = xp.zeros(u, dtype=wt)
    hang = xp.zeros(u, dtype=wt)  # the root for lcp = 0
    cd_first = xp.ones(u, dtype=wt)
    for d, q, new, node_c in levels:
        inner_node = lens[node_c] != d
        rank = xp.where(inner_node, seen[node_c], inner[node_c])  # place in the creator's run
        pos = first[node_c] + rank
        c_in = node_c[inner_node]
        creator[pos[inner_node]] = c_in
        depth[pos[inner_node]] = d
        seen[c_in] += 1
        grp = xp.cumsum(new, dtype=wt) - 1
        hang[q] = pos[grp]
        # the creator's compressed depth is final: its lcp is below d
        cd_first[q] = (cd_first[node_c] + rank + 1)[grp]
    del levels, seen, inner
    parent = xp.arange(-1, n - 1, dtype=idt)
    parent[first] = hang
    edge_start = xp.empty(n, dtype=idt)
    edge_start[0] = 0
    edge_start[1:] = depth[:-1] + 1
    edge_start[first] = lcp + 1
    cdepth = xp.zeros(n, dtype=idt)
    c = creator[1:]
    cdepth[1:] = cd_first[c] + xp.arange(1, n, dtype=wt) - first[c]
    return Preorder(creator, depth, parent, edge_start, cdepth)


def join_parts(xp: ModuleType, parts: list[Preorder], keywords: list[int]) -> Preorder:
    """Subtries of consecutive ranges of sorted keywords (``keywords[k]`` of them in part k) under one
    root: part k's node x > 0 moves past the nodes of the parts before it, its creators past their keywords."""
    sizes = [int(p.creator.size) - 1 for p in parts]
    node_off = np.concatenate(([0], np.cumsum(sizes)[:-1])).tolist()
    kw_off = np.concatenate(([0], np.cumsum(keywords)[:-1])).tolist()
    idt = xp.int32 if sum(sizes) + 1 < 2**31 - 1 else xp.int64

    def cat(f: Callable[[int, Preorder], Any], root: int) -> Any:
        return xp.concatenate([xp.array([root], dtype=idt)] + [f(k, p).astype(idt, copy=False)
                                                               for k, p in enumerate(parts)])

    return Preorder(
        creator=cat(lambda k, p: p.creator[1:] + kw_off[k], -1),
        depth=cat(lambda k, p: p.depth[1:], 0),
        parent=cat(lambda k, p: xp.where(p.parent[1:] == 0, 0, p.parent[1:] + node_off[k]), -1),
        edge_start=cat(lambda k, p: p.edge_start[1:], 0),
        cdepth=cat(lambda k, p: p.cdepth[1:], 0),
    )


def level_order(xp: ModuleType, pre: Preorder, max_len: int, workers: int = 1) -> LevelOrder:
    """Step 4: level order = a stable sort of preorder by compressed depth; the node arrays in that order
    (their gathers on up to ``workers`` threads)."""
    idt = pre.creator.dtype  # 32 bits where the nodes fit
    bfs = stable_order(xp, pre.cdepth, max_len).astype(idt, copy=False)  # level order: (cdepth, preorder)
    n = bfs.size
    inv = xp.empty(n, dtype=idt)
    inv[bfs] = xp.arange(n, dtype=idt)
    par, creator, depth, start = in_parallel(
        [partial(xp.take, a, bfs) for a in (pre.parent, pre.creator, pre.depth, pre.edge_start)], workers)
    del bfs
    parent_bfs = inv[par[1:]]
    del inv, par
    if parent_bfs.size and (bool(xp.any(parent_bfs[1:] < parent_bfs[:-1])) or int(parent_bfs.min()) < 0):
        raise AssertionError("internal error: children are not contiguous in level order")
    return LevelOrder(parent_bfs, creator, depth, start)
