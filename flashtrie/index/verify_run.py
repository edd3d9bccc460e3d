"""The full checks of ``load(verify=True)`` after the cheap ones, scheduled on one pool of threads.

The checksums, the rank directories, the select0 hints (read through the directories before their verdict:
their results count only once it is in), the token and id scans and the child checks only read the arrays (each
piece inside the arrays the cheap checks sized): they are all queued at once on one pool of `workers`
threads, so no core waits for the slowest piece of a stage before the next stage starts.  The id scan decodes
the id map once: each piece takes its largest id and marks its ids in a table of one byte per possible id
(where that table is within 8 bytes per stored id plus 1M, as in `structure.distinct_ids`), so the distinct-id
check reads no id again.  The LOUDS pass needs verified rank directories and select0 hints: it starts once
their verdicts are read, on its own threads (or on the GPU), while the pool works through the rest of its queue.

Verdicts are read in one fixed order (checksums and padding, rank directories, select0 hints, the LOUDS
pass, the largest token and the packed widths, the keyword ids, the children, distinct ids), so a file is
refused for the first problem in that order, whatever finished first; an exception that a piece raised on a
damaged file is raised when its group's verdict is read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from ..cpus import usable_cpus
from ..errors import DeviceError
from .checks import (
    BITVECTORS,
    Layout,
    _hint_results_match,
    _hint_tasks,
    _rank_results_match,
    _rank_tasks,
    field_problem,
)
from .louds_levels import louds_facts_levels
from .louds_pass import LoudsFacts, louds_facts
from .packed import PackedInts
from .structure import child_tasks, children_problem, distinct_ids, largest_label

if TYPE_CHECKING:
    from .narrow_louds import NarrowLoudsIndex

__all__ = ["Checksums", "content_problem"]

#: The checksum work of a file, run first on the pool: its tasks, and the verdict on their results (which
#: raises the file's own error).
Checksums = tuple[list[Callable[[], Any]], Callable[[list[Any]], None]]


def _id_tasks(ix: NarrowLoudsIndex) -> tuple[np.ndarray | None, list[Callable[[], int]]]:
    """The marks table (None where the ids' range is too sparse for one) and one task per piece of the id
    map: decode it once, mark its ids, return its largest."""
    kid = ix.keyword_ids
    if kid.size == 0:
        return None, []
    seen = np.zeros(1 << kid.width, dtype=bool) if (1 << kid.width) <= 8 * kid.size + (1 << 20) else None

    def piece(part: PackedInts) -> int:
        top = 0
        for _, vals in part._classes():  # (a strided class at a time: no decoded copy of the piece)
            v = vals.view(np.int64)
            if seen is not None:
                seen[v] = True  # ids are below 2**width: inside the table
            top = max(top, int(v.max()))
        return top

    return seen, [partial(piece, part) for part in kid._parts()]


def _louds_pass(ix: NarrowLoudsIndex, layout: Layout, workers: int, xp: ModuleType | None,
                required: bool) -> tuple[LoudsFacts, str]:
    """`louds_facts` on CPU threads, or level by level on ``xp`` (cupy) where given; where the GPU runs out of
    memory, falls back to the CPU unless the GPU was ``required`` (then a `DeviceError`).  Returns the facts
    and where they were found (for the timings)."""
    args = (ix.louds, ix.linked, ix.terminal, layout.tails, layout.levels, ix.max_keyword_length)
    if xp is not None:
        try:
            return louds_facts_levels(xp, *args), " on the GPU"
        except MemoryError as e:
            if required:
                raise DeviceError(f"verify_device 'gpu': the GPU ran out of memory for the LOUDS pass of "
                                  f"{ix.num_nodes:,} nodes ({str(e)[:80]}); verify_device='auto' or 'cpu' "
                                  f"verifies on the CPU") from e
        finally:
            if hasattr(xp, "get_default_memory_pool"):  # cupy keeps the freed blocks otherwise
                xp.get_default_memory_pool().free_all_blocks()
    return louds_facts(*args, workers), ""


class _Queue:
    """Groups of tasks on one pool; a group's results are read (waiting, and raising what a task raised) in
    the order the caller asks."""

    def __init__(self, pool: ThreadPoolExecutor, groups: dict[str, list[Callable[[], Any]]]) -> None:
        self.pending: dict[str, list[Future[Any]]] = {name: [pool.submit(t) for t in tasks]
                                                      for name, tasks in groups.items()}

    def results(self, name: str) -> list[Any]:
        return [f.result() for f in self.pending[name]]


def _facts_problem(ix: NarrowLoudsIndex, facts: LoudsFacts) -> str | None:
    L = ix.max_keyword_length
    if facts.longest > L:
        return field_problem("max_keyword_length", L, "a keyword has more tokens")
    if facts.max_degree != ix.max_degree:
        return field_problem("max_degree", ix.max_degree, f"the LOUDS gives {facts.max_degree}")
    if facts.max_degree_nonroot != ix.max_degree_nonroot:
        return field_problem("max_degree_nonroot", ix.max_degree_nonroot, f"the LOUDS gives "
                             f"{facts.max_degree_nonroot}")
    if facts.leaf_not_end >= 0:
        return f"node {facts.leaf_not_end} is a leaf that ends no keyword"
    if facts.longest != L:
        return field_problem("max_keyword_length", L, f"the longest keyword has {facts.longest} tokens")
    return None


def _token_problem(ix: NarrowLoudsIndex, q: _Queue) -> str | None:
    """The largest token against ``max_token``, and the labels_hi width against its largest value (the labels
    come from the child checks)."""
    label = largest_label(q.results("children"))
    top_hi = label >> 16
    tail = max(q.results("suffix"), default=0)
    if max(label, tail) != ix.max_token:
        return field_problem("max_token", ix.max_token, f"the largest token is {max(label, tail)}")
    if ix.labels_hi.width != top_hi.bit_length():
        return field_problem("labels_hi.width", ix.labels_hi.width, f"its largest value {top_hi} takes "
                             f"{top_hi.bit_length()} bits")
    return None


def _id_problem(ix: NarrowLoudsIndex, top_id: int) -> str | None:
    if ix.keyword_ids.size and top_id >= ix.num_keywords:
        return field_problem("num_keywords", ix.num_keywords, f"the id map holds the id {top_id}")
    if ix.keyword_ids.size and ix.keyword_ids.width != top_id.bit_length():
        return field_problem("keyword_ids.width", ix.keyword_ids.width, f"its largest id {top_id} takes "
                             f"{top_id.bit_length()} bits")
    return None


def content_problem(ix: NarrowLoudsIndex, layout: Layout, workers: int | None = None,
                    timings: dict[str, float] | None = None, xp: ModuleType | None = None,
                    xp_required: bool = False, checksums: Checksums | None = None) -> str | None:
    """Full checks against the bits (after `checks.layout_problem` passed), with the file's ``checksums``
    (optional) first in the queue and first in the verdicts.

    ``timings`` (optional) receives the seconds spent waiting for each verdict; ``xp`` (cupy, optional: see
    `checks.verify_module`) runs the LOUDS pass on the GPU, with the same answers (``xp_required``: no CPU
    fallback where the GPU runs out of memory)."""
    workers = workers or usable_cpus()
    clock = _Clock(timings)
    seen, id_tasks = _id_tasks(ix)
    groups: dict[str, list[Callable[[], Any]]] = {"checksums": checksums[0] if checksums else []}
    groups.update({b: _rank_tasks(getattr(ix, b)) for b in BITVECTORS})
    groups.update({f"{b} hints": _hint_tasks(getattr(ix, b)) for b in BITVECTORS
                   if getattr(ix, b).select0_hints is not None})
    groups.update(suffix=ix.suffix.max_tasks(), children=child_tasks(ix), ids=id_tasks)
    with ThreadPoolExecutor(max(1, workers)) as pool:
        q = _Queue(pool, groups)
        try:
            if checksums:
                checksums[1](q.results("checksums"))
                clock("checksums")
            for name in BITVECTORS:
                if not _rank_results_match(getattr(ix, name), q.results(name)):
                    return f"bit vector {name}: its rank directory does not match its bits"
            clock("rank directories")
            for name in BITVECTORS:
                bv = getattr(ix, name)
                if bv.select0_hints is not None and not _hint_results_match(bv, q.results(f"{name} hints")):
                    return f"bit vector {name}: its rank directory does not match its bits"
            clock("select0 hints")
            try:
                facts, on = _louds_pass(ix, layout, workers, xp, xp_required)
            except ValueError as e:
                return f"LOUDS: {e}"
            clock(f"LOUDS pass{on} (degrees, leaves, longest keyword)")
            problem = _facts_problem(ix, facts) or _token_problem(ix, q)
            clock("largest token and child scan (after the pass)")
            top_id = max(q.results("ids"), default=0)
            problem = problem or _id_problem(ix, top_id) or children_problem(ix, q.results("children"))
            clock("id scan (after the pass)")
            problem = problem or distinct_ids(ix, top_id, workers, seen)
            clock("distinct keyword ids")
            return problem
        finally:
            for fs in q.pending.values():  # a verdict came early: what is queued is not run
                for f in fs:
                    f.cancel()


class _Clock:
    """Adds the seconds since the last call under a name, when there is a dict to fill."""

    def __init__(self, timings: dict[str, float] | None) -> None:
        self.timings, self.t = timings, time.perf_counter()

    def __call__(self, name: str) -> None:
        if self.timings is not None:
            t = time.perf_counter()
            self.timings[name] = self.timings.get(name, 0.0) + t - self.t
            self.t = t

