"""Record selection: which stored records a table or a figure shows, and the (x, y) series drawn from them.

Plots and the report read records through these functions only, so both show the same cases.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from .records import Record

__all__ = ["latest", "latest_builds", "workload_group", "groups_of", "series", "num_keywords",
           "bytes_per_unique_keyword"]


def workload_group(r: Record) -> str:
    """What tells workloads of one sweep apart in tables and figures: the preset and the library size."""
    w = r.workload
    bits = [str(w["preset"])] if w.get("preset") else []
    if w.get("num_keywords"):
        bits.append(f"{w['num_keywords']:,} keywords")
    return ", ".join(bits)


def groups_of(records: Sequence[Record]) -> list[str]:
    """The distinct `workload_group` labels of ``records``, sorted."""
    return sorted({workload_group(r) for r in records})


def latest(records: Sequence[Record]) -> list[Record]:
    """Drop older records of the same (kind, backend, sweep, config, workload)."""
    keep: dict[tuple[Any, ...], Record] = {}
    for r in records:
        key = (r.kind, r.backend, r.sweep, repr(sorted(r.config.items())), repr(r.workload.get("shape_QTK")),
               r.workload.get("num_keywords"), workload_group(r))
        if key not in keep or r.timestamp >= keep[key].timestamp:
            keep[key] = r
    return list(keep.values())


def num_keywords(r: Record) -> Any:
    """The library size of a record: its config's ``num_keywords`` (size and build sweeps), else the workload's."""
    return r.config.get("num_keywords", r.workload.get("num_keywords"))


def latest_builds(records: Sequence[Record]) -> list[Record]:
    """One ok build record per (structure, library size): the latest run's."""
    keep: dict[tuple[str, Any], Record] = {}
    for r in records:
        if r.kind == "build" and r.status == "ok":
            key = (r.backend, num_keywords(r))
            if key not in keep or r.timestamp >= keep[key].timestamp:
                keep[key] = r
    return list(keep.values())


def series(records: Sequence[Record], kind: str, sweep: str | None, x: Callable[[Record], Any],
           y: Callable[[Record], Any], label: Callable[[Record], str] = lambda r: r.backend
           ) -> dict[str, list[tuple[float, float]]]:
    """{label: sorted [(x, y)]} over the latest ok records of ``kind`` (and ``sweep``) with finite numeric x, y."""
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in latest([r for r in records if r.kind == kind and (sweep is None or r.sweep == sweep)]):
        if r.status != "ok":
            continue
        try:
            xv, yv = x(r), y(r)
        except (KeyError, TypeError):
            continue
        if isinstance(xv, (int, float)) and isinstance(yv, (int, float)) and math.isfinite(xv) \
                and math.isfinite(yv):
            out[label(r)].append((float(xv), float(yv)))
    return {k: sorted(v) for k, v in sorted(out.items())}


def bytes_per_unique_keyword(r: Record) -> Any:
    """Serialized bytes per unique keyword of a build record (duplicates collapsed, as in
    `NarrowLoudsIndex.stats`); the stored ``bytes_per_keyword`` when the record lacks the counts."""
    m = r.metrics
    if isinstance(m.get("bytes"), (int, float)) and isinstance(m.get("unique_keywords"), (int, float)) \
            and m["unique_keywords"] > 0:
        return m["bytes"] / m["unique_keywords"]
    return m.get("bytes_per_keyword")
