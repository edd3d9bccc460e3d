"""Builder steps 1-2, written once over the array module ``xp`` (numpy on the CPU, cupy on a GPU).

1. `sort_keywords`: one least-significant-column-first pass per token column, each a sort of
   ``token << p | position`` packed into a uint64 (`packed_order`: numpy's vectorised sort or CUB's radix
   sort, far faster than an argsort).  A keyword joins the passes at its last column, ahead of the keywords
   already in them, so a keyword that ends sorts before its extensions, and the work is one sort slot per
   token.  Equal keywords keep ascending ids.
2. `neighbour_lcp`: the common prefix of each sorted keyword with its predecessor, a whole column at a time;
   `dedup` then drops the keywords equal to their predecessor, keeping the smallest id.

The functions never import cupy: the caller hands over the module its arrays belong to.  Counts that steer
Python loops (keywords per length) come back to the host with `to_host`.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

__all__ = ["FOLLOW_BELOW", "dedup", "neighbour_lcp", "packed_order", "sort_keywords", "sorted_unique",
           "stable_order", "to_host"]

Progress = Callable[[str], None]

#: `neighbour_lcp` follows only the pairs still equal once they are fewer than this fraction of all pairs
#: (the CPU's choice; on a GPU the gathers of all pairs cost less than compacting them: 0 there).
FOLLOW_BELOW = 0.25


def to_host(a: Any) -> np.ndarray:
    """``a`` as a numpy array (a copy from the device for cupy)."""
    return a.get() if hasattr(a, "get") else np.asarray(a)


def packed_order(xp: ModuleType, key: Any, key_bits: int, *, consume: bool = False) -> Any:
    """Stable argsort (int64) of non-negative ``key`` (< 2**key_bits): a sort of key and position in one uint64.

    Falls back to a stable argsort when both do not fit in 64 bits.  ``consume``: ``key`` is a uint64
    temporary that may be overwritten (saves a copy).
    """
    n = key.size
    pos_bits = max(1, (n - 1).bit_length())
    if key_bits + pos_bits > 64:
        return xp.argsort(key, kind="stable")
    packed = key if consume and key.dtype == xp.uint64 else key.astype(xp.uint64)
    packed <<= xp.uint64(pos_bits)
    packed |= xp.arange(n, dtype=xp.uint64)
    packed.sort()  # the keys are distinct: any sort is the stable one
    packed &= xp.uint64((1 << pos_bits) - 1)
    return packed.view(xp.int64)


def stable_order(xp: ModuleType, key: Any, limit: int) -> Any:
    """Stable argsort (int64) of ``key`` (values in ``[0, limit]``).

    numpy sorts uint8 / uint16 keys by radix in a stable argsort, so small keys are narrowed to those
    first; otherwise (larger keys, or cupy) the key and its position are sorted as one uint64.
    """
    if xp is np:
        for dt in (np.uint8, np.uint16):
            if limit <= np.iinfo(dt).max:
                return np.argsort(key.astype(dt), kind="stable")
    return packed_order(xp, key, max(1, int(limit).bit_length()))


def sort_keywords(xp: ModuleType, tokens: Any, starts: Any, lens: Any, max_len: int, ids: Any = None) -> Any:
    """Keyword ids (int64; ``ids``, ascending, or all keywords) in lexicographic order of their keywords
    (a keyword before its extensions), equal keywords by ascending id."""
    ln = lens if ids is None else lens[ids]
    by_len = stable_order(xp, ln, max_len)
    if ids is not None:
        by_len = ids[by_len]
    first = np.zeros(max_len + 2, dtype=np.int64)
    np.cumsum(to_host(xp.bincount(ln, minlength=max_len + 1)), out=first[1:])
    del ln
    # positions and ids travel with the order; 32-bit where they fit, as each pass gathers them at random
    idt = xp.int32 if max(tokens.size, lens.size) < 2**31 else xp.int64
    cur_pos = xp.zeros(0, dtype=idt)  # first-token positions of the keywords sorted so far
    cur_id = xp.zeros(0, dtype=idt)
    for j in range(max_len - 1, -1, -1):
        # keywords of length j + 1 have no column after j: they come first, in id order, then the
        # keywords sorted so far; a stable sort by column j keeps that order among equal tokens
        enter = by_len[first[j + 1] : first[j + 2]]
        pos = xp.concatenate((starts[enter].astype(idt), cur_pos))
        sid = xp.concatenate((enter.astype(idt), cur_id))
        # every keyword of this pass has a column j (its length is over j)
        o = packed_order(xp, tokens[pos + j].astype(xp.uint64), 32, consume=True)
        cur_pos, cur_id = pos[o], sid[o]
    return cur_id.astype(xp.int64)


def neighbour_lcp(xp: ModuleType, tokens: Any, s_start: Any, s_len: Any,
                  follow_below: float = FOLLOW_BELOW) -> Any:
    """Common prefix length (int32) of each sorted keyword with its predecessor (0 for the first).

    Column by column over all pairs while at least ``follow_below`` of them are still equal, then only
    those pairs (`_follow_pairs`).
    """
    n = s_len.size
    lcp = xp.zeros(n, dtype=xp.int32)  # at most the longest keyword
    if n < 2:
        return lcp
    still = xp.ones(n - 1, dtype=bool)  # pair (i - 1, i) equal on columns < j
    for j in range(int(s_len.max())):
        has = s_len > j
        # token + 1 at column j (fits: tokens are at most 2**32 - 2); 0 where the keyword has no column j
        col = xp.where(has, tokens[xp.where(has, s_start + j, 0)] + xp.uint32(1), xp.uint32(0))
        still &= col[1:] == col[:-1]
        still &= has[1:]
        del col, has
        live = int(xp.count_nonzero(still))
        if live == 0:
            break
        lcp[1:] += still
        if live < follow_below * n:
            _follow_pairs(xp, tokens, s_start, s_len, lcp, xp.flatnonzero(still) + 1, j + 1)
            break
    return lcp


def _follow_pairs(xp: ModuleType, tokens: Any, s_start: Any, s_len: Any, lcp: Any, act: Any, j: int) -> None:
    """`neighbour_lcp` of the pairs ``(act - 1, act)``, equal on columns ``< j``: one column at a time,
    dropping each pair as it ends (``lcp`` written in place)."""
    a, b = s_start[act], s_start[act - 1]
    la, lb = s_len[act], s_len[act - 1]
    while act.size:
        ok = (la > j) & (lb > j)
        ok[ok] = tokens[a[ok] + j] == tokens[b[ok] + j]
        act, a, b, la, lb = act[ok], a[ok], b[ok], la[ok], lb[ok]
        j += 1
        lcp[act] = j


def dedup(xp: ModuleType, order: Any, lcp: Any, s_len: Any) -> tuple[Any, Any, Any]:
    """``order``, ``lcp``, ``s_len`` less the sorted keywords equal to their predecessor (the smallest id
    sorts first and stays; the next keyword's lcp is unchanged, as a dropped keyword equals the kept one)."""
    dup = lcp == s_len
    dup[1:] &= s_len[:-1] == s_len[1:]
    dup[0] = False
    if not bool(dup.any()):
        return order, lcp, s_len
    keep = ~dup
    return order[keep], lcp[keep], s_len[keep]


def sorted_unique(xp: ModuleType, tokens: Any, starts: Any, lens: Any, max_len: int, *, ids: Any = None,
                  follow_below: float = FOLLOW_BELOW, say: Progress | None = None) -> tuple[Any, Any, Any]:
    """Steps 1-2: the sorted unique keyword ids (of ``ids``, or all), their lcp and their lengths.

    ``say(stage)`` is called as "sort" and "lcp" start."""
    if say is not None:
        say("sort")
    order = sort_keywords(xp, tokens, starts, lens, max_len, ids)
    if say is not None:
        say("lcp")
    s_len = lens[order]
    lcp = neighbour_lcp(xp, tokens, starts[order], s_len, follow_below)
    return dedup(xp, order, lcp, s_len)
