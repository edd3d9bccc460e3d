"""Structure checks of ``load(verify=True)`` that the searches rely on beyond the LOUDS pass's degrees and depths.

Per child, in pieces of the LOUDS bits on threads (after the rank directories are verified):
* siblings in strictly increasing label order (every decoder binary-searches a node's children by label;
  the GPU's split of a node's children at the first wide label needs it too);
* a flagged (wide) label whose high part is not zero (else it would sort among the narrow labels);
* every inner node but the root either ends a keyword or has two children or more (path compression:
  what the builder writes);
and the largest label, for the ``max_token`` check.  And, where there is an id map, every keyword id distinct
(one result, one keyword).  The root's own flags are cheap checks (`root_problem`).  Each returns what is
wrong, or None.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from ..cpus import in_parallel
from .louds_pass import _word_bits
from .packed import PackedInts

if TYPE_CHECKING:
    from .narrow_louds import NarrowLoudsIndex

__all__ = ["CHILD_CHUNK_WORDS", "ID_CHUNK", "child_tasks", "children_problem", "distinct_ids", "largest_label",
           "root_problem"]

#: LOUDS words per thread task of the child checks.
CHILD_CHUNK_WORDS = 1 << 14
#: Ids per thread task of the distinct-id count.
ID_CHUNK = 1 << 22

#: (first child out of label order, first wide label with a zero high part, first non-branching inner node,
#: largest label of the piece's children)
ChildFound = tuple[int, int, int, int]


def root_problem(ix: NarrowLoudsIndex) -> str | None:
    """The root has no edge: label 0, not wide, not linked, and it ends no keyword (there is no empty one)."""
    root = np.zeros(1, dtype=np.int64)
    if bool(ix.terminal.get(root)[0]):
        return "the root is marked as a keyword end (an empty keyword)"
    if bool(ix.linked.get(root)[0]) or bool(ix.hi_flag.get(root)[0]) or int(ix.labels_lo[0]) != 0:
        return "the root is marked as having an edge (linked, a label or a wide label)"
    return None


def _child_piece(ix: NarrowLoudsIndex, s: int, e: int) -> ChildFound:
    """The child checks for the children whose ones are in LOUDS bits ``[s, e)``."""
    louds, nbits, n = ix.louds, ix.louds.nbits, ix.num_nodes
    size = e - s
    buf = np.zeros(size + 2, dtype=np.uint8)  # the bit before s (0 at the start), [s, e), the bit after (0 at the end)
    lo_bit = max(s - 1, 0)
    got = _word_bits(np.asarray(louds.words), lo_bit, min(e + 1, nbits))
    buf[1 - (s - lo_bit) : 1 - (s - lo_bit) + got.size] = got
    bits = buf.view(bool)
    core = bits[1 : size + 1]
    ones = core.nonzero()[0]
    if ones.size == 0:
        return -1, -1, -1, 0
    adjacent = np.equal(np.diff(ones), 1)
    follows = np.append(adjacent, bits[int(ones[-1]) + 2])  # per child: the next child has the same parent
    starts = np.concatenate(([not bits[int(ones[0])]], ~adjacent))  # per child: the first of its parent's code
    c0 = int(louds.rank1(np.array([s]))[0]) + 1  # node of the first one
    cnt = min(ones.size + 1, n - c0)  # children c0 .. c0 + m (the next one too, for the last pair)
    lab = np.asarray(ix.labels_lo[c0 : c0 + cnt]).astype(np.uint32)
    zero_hi = _wide_labels(ix, c0, lab)
    bad = follows[: cnt - 1] & np.less_equal(lab[1:cnt], lab[: cnt - 1])
    unsorted = c0 + 1 + int(bad.argmax()) if bad.any() else -1
    single = (starts & ~follows).nonzero()[0]  # a code of one one: a parent with one child
    lone = -1
    if single.size:
        parents = (s + ones[single]) - (c0 - 1 + single)  # zeros before the child's one
        p = parents[parents > 0]
        not_end = ~ix.terminal.get(p)
        lone = int(p[int(not_end.argmax())]) if not_end.any() else -1
    return unsorted, zero_hi, lone, int(_MAX(lab[: ones.size], initial=0))


_MAX = np.maximum.reduce


def _wide_labels(ix: NarrowLoudsIndex, c0: int, lab: np.ndarray) -> int:
    """Adds the high parts of the flagged (wide) labels among nodes ``c0 ..`` to their low parts ``lab``
    (uint32, in place); returns the first of those nodes whose high part is zero, or -1."""
    wide = _word_bits(np.asarray(ix.hi_flag.words), c0, c0 + lab.size).view(bool)
    count = int(np.count_nonzero(wide))
    if count == 0:
        return -1
    r0 = int(ix.hi_flag.rank1(np.array([c0]))[0])
    hi = ix.labels_hi.values(r0, count, np.uint32)
    zero_hi = -1
    if not hi.all():
        zero_hi = c0 + int(wide.nonzero()[0][int(np.argmin(hi != 0))])
    hi <<= np.uint32(16)
    full = np.zeros(lab.size, dtype=np.uint32)
    full[wide] = hi
    lab |= full
    return zero_hi


def child_tasks(ix: NarrowLoudsIndex) -> list[Callable[[], ChildFound]]:
    """`_child_piece` over the LOUDS in pieces of `CHILD_CHUNK_WORDS` words (needs verified rank directories
    of the LOUDS and ``hi_flag``).  Every node but the root is the child of one piece, so the pieces' labels
    also give `largest_label`."""
    nbits, step = ix.louds.nbits, 64 * max(1, CHILD_CHUNK_WORDS)
    return [partial(_child_piece, ix, s, min(s + step, nbits)) for s in range(0, nbits, step)]


def largest_label(found: list[ChildFound]) -> int:
    """The largest edge label (high part and low part; the root's entry excluded) from the results of
    `child_tasks`; its high part (``>> 16``) is the largest value of ``labels_hi``, since every wide label is a
    child's and a narrow one has no high part."""
    return max((f[3] for f in found), default=0)


def children_problem(ix: NarrowLoudsIndex, found: list[ChildFound]) -> str | None:
    """What the results of `child_tasks` say is wrong (the first node of each kind, in a fixed order)."""
    def first(k: int) -> int:
        hits = [f[k] for f in found if f[k] >= 0]
        return min(hits) if hits else -1

    c = first(0)
    if c >= 0:
        parent = int(ix.louds.select1(np.array([c - 1]))[0]) - (c - 1)
        labels = ix.labels(np.array([c - 1, c]))
        return (f"children of node {parent} are not in increasing label order (node {c - 1} label "
                f"{int(labels[0])}, node {c} label {int(labels[1])})")
    z = first(1)
    if z >= 0:
        return f"node {z} is flagged as a wide label, yet its high part is 0"
    p = first(2)
    if p >= 0:
        return f"node {p} has one child and ends no keyword (its edge and its child's are one edge)"
    return None


def distinct_ids(ix: NarrowLoudsIndex, top: int, workers: int, seen: np.ndarray | None = None) -> str | None:
    """With an id map: every id is distinct.  ``top``: the largest id (already bounded).  A bool per id up to
    ``top`` set on threads where that is at most 8 per stored id (plus 1M), else the sorted ids: memory in
    proportion to the map, never to the header's keyword count.  ``seen``: that table with every id of the map
    already marked (by the scan that found ``top``), counted here."""
    kid = ix.keyword_ids
    if kid.size == 0:
        return None
    if seen is None and top + 1 > 8 * kid.size + (1 << 20):
        ids = np.sort(kid.to_array(workers))
        return _duplicates_message(int(np.count_nonzero(ids[1:] == ids[:-1])))
    if seen is None:
        table = np.zeros(top + 1, dtype=bool)

        def mark(part: PackedInts) -> None:
            v = np.zeros(part.size, dtype=np.int64)
            part._decode_into(v)
            table[v] = True

        in_parallel([partial(mark, part) for part in kid._parts()], workers)
        seen = table
    marks = seen
    step = max(1, ID_CHUNK)
    dup = kid.size - sum(in_parallel([partial(lambda a: int(np.count_nonzero(marks[a : a + step])), a)
                                      for a in range(0, marks.size, step)], workers))
    return _duplicates_message(dup)


def _duplicates_message(dup: int) -> str | None:
    return f"{dup} keyword ids appear more than once in the id map" if dup else None
