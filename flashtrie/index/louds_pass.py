"""One level-by-level pass over the LOUDS for ``load(verify=True)``: degrees, leaves and the longest keyword.

The checks of a loaded index need, from the LOUDS bits: the largest degree (at the root and below it),
that every leaf ends a keyword, and the exact longest root-to-node path in tokens (the node's level plus
the tails of the linked edges above it).  All three come out of one pass over the levels, each level cut
into pieces of about `PIECE_BITS` LOUDS bits (whole codes, at most `CHUNK_NODES` parents) that run on
threads (numpy releases the GIL), small enough that a piece's temporaries stay in a core's cache; nothing
of size ``n`` is kept but the depths of two levels (one byte per node where the longest keyword allows it).
The code starts of the pieces come from vectorised ``select0`` calls and the rank of each piece's first
child in ``linked`` from one vectorised ``rank1``, before the pieces run.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from ..cpus import in_parallel
from .bits import BitVector
from .packed import PackedInts

__all__ = ["CHUNK_NODES", "PIECE_BITS", "SAMPLE_NODES", "LoudsFacts", "depth_dtype", "level_starts", "louds_facts",
           "tail_lengths"]

#: At most this many parent nodes per thread task.
CHUNK_NODES = 1 << 19
#: LOUDS bits per thread task aimed at (whole codes: a parent with more children makes a larger piece): a
#: piece's temporaries are about 12 bytes per bit; on the 16-core H200 host, tasks of a few milliseconds
#: (2^20 bits) were fastest: smaller ones lose to the GIL hand-offs between their numpy calls.
PIECE_BITS = 1 << 20
#: Fraction of a piece's parents whose children's depths are written one by one (those whose depth differs
#: from the piece's least); past it, every child's parent is looked up.
SPARSE_PARENTS = 1 / 16
#: Parents between the candidate cuts whose code starts are looked up (one vectorised select0 each).
SAMPLE_NODES = 1 << 12


@dataclass(frozen=True)
class LoudsFacts:
    """What `louds_facts` found (``longest`` is only a lower bound once it passed ``limit``)."""

    max_degree: int
    max_degree_nonroot: int
    longest: int
    leaf_not_end: int  # a leaf that ends no keyword, or -1
    has_children: np.ndarray | None  # bool per node, when asked for


def _code_starts(louds: BitVector, nodes: np.ndarray) -> np.ndarray:
    """First LOUDS bit of each node's unary code (0 for the root), in one vectorised select0."""
    out = np.zeros(nodes.size, dtype=np.int64)
    pos = nodes > 0
    out[pos] = louds.select0(nodes[pos] - 1) + 1
    return out


def level_starts(louds: BitVector, n: int, limit: int) -> list[int]:
    """First node of each level (the root's level is ``[0, 1)``), up to ``limit + 2`` levels, then where the
    walk stopped: ``n`` for a trie whose levels cover every node (one select0 per level)."""
    out, b = [0, 1], 1
    while len(out) <= limit + 2:
        c = int(_code_starts(louds, np.array([b]))[0]) - b + 1  # ones before node b's code, plus one
        if c <= b or c > n:
            break
        out.append(c)
        b = c
    return out


def _bits(bv: BitVector, start: int, stop: int) -> np.ndarray:
    """Bits ``[start, stop)`` as uint8 zeros and ones."""
    return _word_bits(bv.words, start, stop)


def _word_bits(words: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Bits ``[start, stop)`` of the uint64 ``words`` as uint8 zeros and ones (on plain arrays: a memmap's
    slices cost several microseconds of Python each)."""
    raw = words.view(np.uint8)[start >> 3 : (stop + 7) >> 3]
    off = start & 7
    return np.unpackbits(raw, bitorder="little")[off : off + stop - start]


def depth_dtype(limit: int) -> type:
    """The narrowest dtype for the depths of a pass with this ``limit`` (tails at most ``limit`` tokens): it
    stops once a depth passes ``limit``, so no depth exceeds ``2 limit + 1``."""
    top = 2 * limit + 1
    return np.uint8 if top < 1 << 8 else np.uint16 if top < 1 << 16 else np.int32 if top < 1 << 31 else np.int64


def tail_lengths(starts: PackedInts, limit: int, workers: int) -> tuple[np.ndarray, int, int, int, int]:
    """The differences of the packed ``starts`` (the tail length of each linked edge) as `depth_dtype`
    (limit), with their least and largest value (0, 0 when there are none) and the first and last start,
    decoded piece by piece on threads (no int64 copy of the starts); differences outside ``[0, limit]``
    are not stored."""
    m = max(starts.size - 1, 0)
    out: np.ndarray = np.zeros(m, dtype=depth_dtype(limit))
    parts = starts._parts()
    at = np.cumsum([0] + [p.size for p in parts])

    def piece(k: int) -> tuple[int, int, int, int]:
        v = np.zeros(parts[k].size, dtype=np.int64)  # (values of width 0 are not written)
        parts[k]._decode_into(v)
        d = np.subtract(v[1:], v[:-1])
        lo, hi = (int(d.min()), int(d.max())) if d.size else (0, 0)
        if 0 <= lo and hi <= limit:
            out[at[k] : at[k] + d.size] = d
        return lo, hi, int(v[0]) if v.size else 0, int(v[-1]) if v.size else 0

    found = in_parallel([partial(piece, k) for k in range(len(parts))], workers)
    lo, hi = _joined(found, at, out, limit)
    return out, lo, hi, found[0][2], found[-1][3]


def _joined(found: list[tuple[int, int, int, int]], at: np.ndarray, out: np.ndarray,
            limit: int) -> tuple[int, int]:
    """The least and largest difference of all the pieces of `tail_lengths`, the ones across their
    boundaries included (and stored when in ``[0, limit]``)."""
    lo: int | None = None
    hi = 0  # (set wherever lo is)
    for k, (plo, phi, _, last) in enumerate(found):
        if at[k + 1] - at[k] > 1:
            lo, hi = (plo, phi) if lo is None else (min(lo, plo), max(hi, phi))
        if k + 1 < len(found):
            d = found[k + 1][2] - last
            lo, hi = (d, d) if lo is None else (min(lo, d), max(hi, d))
            if 0 <= d <= limit:
                out[at[k + 1] - 1] = d
    return (0, 0) if lo is None else (lo, hi)


class _Pass:
    """The shared inputs of the pieces of one `louds_facts` call (the words as plain arrays)."""

    def __init__(self, louds: BitVector, linked: BitVector, terminal: BitVector, tails: np.ndarray,
                 has: np.ndarray | None) -> None:
        self.louds, self.linked, self.terminal = (np.asarray(v.words) for v in (louds, linked, terminal))
        self.tails, self.has = np.asarray(tails), has

    def piece(self, p: int, q: int, cs_p: int, cs_q: int, r0: int, pd: np.ndarray,
              out: np.ndarray | None) -> tuple[int, int, int]:
        """Parents ``[p, q)`` with depths ``pd`` and codes in bits ``[cs_p, cs_q)``: their children's depths
        go to ``out`` (None on the last level); returns (largest degree, largest child depth, a leaf that
        ends no keyword or -1)."""
        bits = _word_bits(self.louds, cs_p, cs_q)
        zeros = np.equal(bits, 0).nonzero()[0]
        if zeros.size != q - p:
            raise ValueError(f"LOUDS bits [{cs_p}, {cs_q}) hold {zeros.size} node ends, expected {q - p}")
        z0 = int(zeros[0])  # the first parent's degree; the others' are the gaps between zeros, less one
        gap = np.empty(zeros.size - 1, dtype=np.int32 if cs_q - cs_p < 1 << 31 else np.int64)
        np.subtract(zeros[1:], zeros[:-1], out=gap, casting="unsafe")
        deg = max(z0, int(_MAX(gap)) - 1 if gap.size else 0)
        leaf = np.empty(q - p, dtype=bool)  # no ones before its zero
        leaf[0] = z0 == 0
        np.equal(gap, 1, out=leaf[1:])
        if self.has is not None:
            np.logical_not(leaf, out=self.has[p:q])
        if out is not None and out.size:
            self._child_depths(bits, zeros, gap, leaf, pd, out)
        bad = np.greater(leaf, _word_bits(self.terminal, p, q).view(bool), out=leaf)  # leaves not terminal
        first_bad = int(bad.argmax())  # stops at the first True
        bad_leaf = first_bad + p if bad[first_bad] else -1
        if out is None or out.size == 0:
            return deg, 0, bad_leaf
        first = cs_p - p + 1
        lk = _word_bits(self.linked, first, first + out.size).view(bool).nonzero()[0]
        if lk.size:
            out[lk] += self.tails[r0 : r0 + lk.size]
        return deg, int(_MAX(out)), bad_leaf

    def _child_depths(self, bits: np.ndarray, zeros: np.ndarray, gap: np.ndarray, leaf: np.ndarray,
                      pd: np.ndarray, out: np.ndarray) -> None:
        """The children's depths before their tails: their parent's plus one.  Most parents of a piece share
        one depth (a depth grows past its level only below a linked edge), so those children are one fill
        and the few others come from their parents' code positions; where many differ, each child's parent
        comes from the zeros before its one."""
        base = int(_MIN(pd))
        other = np.not_equal(pd, base)
        np.greater(other, leaf, out=other)  # parents of another depth that have children
        odd = other.nonzero()[0]
        if odd.size <= SPARSE_PARENTS * pd.size:
            out.fill(base + 1)
            if odd.size:
                deg = np.where(odd == 0, zeros[0], gap[odd - 1] - 1)
                first = zeros[odd] - odd - deg  # ones before the parent's code: its first child
                ends = np.cumsum(deg)
                at = np.repeat(first - (ends - deg), deg) + np.arange(int(ends[-1]))
                out[at] = np.repeat(pd[odd] + 1, deg)
            return
        # child j's parent: the zeros before the j-th one (np.repeat(pd, deg) would hold the GIL)
        parent = bits.view(bool).nonzero()[0]  # nonzero of bools: several times faster than of bytes
        parent -= np.arange(parent.size)
        np.take(pd, parent, out=out)
        out += 1


_MAX, _MIN = np.maximum.reduce, np.minimum.reduce  # without the method wrappers' Python


def _piece_cuts(louds: BitVector, levels: list[int], workers: int) -> tuple[np.ndarray, np.ndarray]:
    """The parents where the pieces start (every level's first node and ``n`` among them) and their code
    starts: candidates every `SAMPLE_NODES` parents (at most `CHUNK_NODES` apart), kept where the bits
    since the level's start pass another multiple of `PIECE_BITS` or the parents another `CHUNK_NODES`."""
    step = max(1, min(SAMPLE_NODES, CHUNK_NODES))
    cand = np.unique(np.concatenate([np.arange(a, b, step, dtype=np.int64) for a, b in zip(levels[:-1], levels[1:],
                                                                                           strict=True)]
                                    + [np.array(levels, dtype=np.int64)]))
    part = 1 << 14
    cs = np.concatenate(in_parallel([partial(_code_starts, louds, cand[i : i + part])
                                     for i in range(0, cand.size, part)], workers))
    lv = np.searchsorted(np.array(levels, dtype=np.int64), cand, side="right") - 1
    level_first = np.array(levels, dtype=np.int64)[lv]
    bucket_bits = (cs - cs[np.searchsorted(cand, level_first)]) // PIECE_BITS
    bucket_nodes = (cand - level_first) // CHUNK_NODES
    keep = np.ones(cand.size, dtype=bool)
    keep[1:] = (lv[1:] != lv[:-1]) | (bucket_bits[1:] != bucket_bits[:-1]) | (bucket_nodes[1:] != bucket_nodes[:-1])
    return cand[keep], cs[keep]


def louds_facts(louds: BitVector, linked: BitVector, terminal: BitVector, tails: np.ndarray,
                levels: list[int], limit: int, workers: int, *, has_children: bool = False) -> LoudsFacts:
    """Degrees, leaves and depths of a trie whose `level_starts` are ``levels`` (ending at n), level by
    level, stopping once a depth passes ``limit``.  ``tails``: the `tail_lengths` (each at most ``limit``).

    Needs a LOUDS with a verified rank directory and select0 hints (the pieces' bounds come from them) and
    one tail per linked node.  ``has_children=True`` also returns a bool per node."""
    n = levels[-1]
    dt = depth_dtype(limit)
    tails = tails.astype(dt, copy=False)
    points, cs = _piece_cuts(louds, levels, workers)
    firsts = cs - points + 1
    ranks = linked.rank1(np.minimum(firsts, linked.nbits))
    bounds = np.searchsorted(points, np.array(levels, dtype=np.int64))  # each level's first cut
    has = np.zeros(n, dtype=bool) if has_children else None
    run = _Pass(louds, linked, terminal, tails, has)
    widths = np.diff(np.array(levels, dtype=np.int64))
    # two buffers of the widest level, in turn the parents' depths and the children's (each page is touched
    # once, not once per level)
    buffers: list[np.ndarray] = [np.zeros(int(widths.max()), dtype=dt),
                                 np.empty(int(widths[1:].max(initial=1)), dtype=dt)]
    pd = buffers[0][:1]
    md = mdn = longest = 0
    bad = -1
    for lv in range(len(levels) - 1):
        a, b = levels[lv], levels[lv + 1]
        nxt = None if lv == len(levels) - 2 else buffers[(lv + 1) % 2][: levels[lv + 2] - b]
        tasks = []
        for i in range(int(bounds[lv]), int(bounds[lv + 1])):
            p, q, f, g = int(points[i]), int(points[i + 1]), int(firsts[i]), int(firsts[i + 1])
            dest = None if nxt is None else nxt[f - b : g - b]
            tasks.append(partial(run.piece, p, q, int(cs[i]), int(cs[i + 1]), int(ranks[i]), pd[p - a : q - a], dest))
        for d, deepest, leaf in in_parallel(tasks, workers):
            md = max(md, d)
            mdn = max(mdn, d) if lv > 0 else 0  # level 0 is the root alone
            longest = max(longest, deepest)
            bad = leaf if bad < 0 else bad
        if nxt is not None:
            pd = nxt
        if longest > limit:
            break
    return LoudsFacts(md, mdn, longest, bad, has)
