"""`louds_facts` with whole levels as single array operations, on numpy or cupy (``xp``): the GPU path of the
verified load's LOUDS pass.

Same inputs, same answers and the same order of finding them as `louds_pass.louds_facts` (whose pieces
run on CPU threads): per level, the degrees of its parents from the zeros of their codes, its leaves that
end no keyword, and its children's depths (parent's depth plus one, plus the tail of a linked edge),
stopping after the level where a depth passes the limit.  The level boundaries and the rank of each
level's first child in ``linked`` come from the verified host directories; the bit vectors and the tails
are copied to the device once.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from .bits import BitVector
from .louds_pass import LoudsFacts, _code_starts, depth_dtype

__all__ = ["louds_facts_levels"]


def _bits(xp: ModuleType, raw: Any, start: int, stop: int) -> Any:
    """Bits ``[start, stop)`` of the little-endian bytes ``raw`` (an ``xp`` uint8 array) as uint8 0/1."""
    return xp.unpackbits(raw[start >> 3 : (stop + 7) >> 3], bitorder="little")[(start & 7) : (start & 7) + stop - start]


def _device_bytes(xp: ModuleType, bv: BitVector) -> Any:
    return xp.asarray(np.asarray(bv.words).view(np.uint8))


def louds_facts_levels(xp: ModuleType, louds: BitVector, linked: BitVector, terminal: BitVector,
                       tails: np.ndarray, levels: list[int], limit: int, *,
                       has_children: bool = False) -> LoudsFacts:
    """`louds_pass.louds_facts` (same arguments but the thread count, same result), one level at a time
    as whole-array ``xp`` operations.  ``has_children=True`` also returns a bool per node (on the host)."""
    n, dt = levels[-1], depth_dtype(limit)
    first = np.array(levels, dtype=np.int64)
    cs = _code_starts(louds, first)  # each level's first code bit (the last: past the last code)
    ranks = linked.rank1(np.minimum(cs - first + 1, linked.nbits))  # linked nodes before level lv's children
    lw, kw, tw = (_device_bytes(xp, bv) for bv in (louds, linked, terminal))
    tail = xp.asarray(np.asarray(tails).astype(dt, copy=False))
    has = xp.zeros(n, dtype=bool) if has_children else None
    pd = xp.zeros(1, dtype=dt)
    md = mdn = longest = 0
    bad = -1
    for lv in range(len(levels) - 1):
        a, b = levels[lv], levels[lv + 1]
        bits = _bits(xp, lw, int(cs[lv]), int(cs[lv + 1]))
        zeros = xp.flatnonzero(bits == 0)
        if int(zeros.size) != b - a:
            raise ValueError(f"LOUDS bits [{int(cs[lv])}, {int(cs[lv + 1])}) hold {int(zeros.size)} node ends, "
                             f"expected {b - a}")
        gap = xp.diff(zeros)
        z0 = int(zeros[0])
        d = max(z0, int(gap.max()) - 1 if gap.size else 0)
        md, mdn = max(md, d), (max(mdn, d) if lv > 0 else 0)
        leaf = xp.empty(b - a, dtype=bool)
        leaf[0] = z0 == 0
        leaf[1:] = gap == 1
        if has is not None:
            has[a:b] = ~leaf
        leaf &= _bits(xp, tw, a, b) == 0
        if bad < 0:
            found = xp.flatnonzero(leaf)
            bad = int(found[0]) + a if found.size else -1
        if lv == len(levels) - 2:
            break
        pd, deepest = _children(xp, bits, pd, _bits(xp, kw, b, levels[lv + 2]), tail, int(ranks[lv]))
        longest = max(longest, deepest)
        if longest > limit:
            break
    return LoudsFacts(md, mdn, longest, bad, None if has is None else _host(has))


def _children(xp: ModuleType, bits: Any, pd: Any, linked: Any, tails: Any, r0: int) -> tuple[Any, int]:
    """The depths of a level's children (its parents' depths ``pd``, its codes ``bits``, the children's
    ``linked`` bits, the first child's linked rank ``r0``) and the largest of them (0 when none)."""
    ones = xp.flatnonzero(bits)
    if ones.size == 0:
        return xp.zeros(0, dtype=pd.dtype), 0
    ones -= xp.arange(ones.size, dtype=ones.dtype)  # the zeros before child j's one: its parent
    child = pd[ones]
    child += 1
    lk = xp.flatnonzero(linked)
    if lk.size:
        child[lk] += tails[r0 : r0 + int(lk.size)]
    return child, int(child.max())


def _host(a: Any) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)
