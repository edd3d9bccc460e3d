"""Exact agreement between backends: same ids, same order, same float32 bits, query by query."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flashtrie.proposals import Proposals
from flashtrie.search_types import SearchConfig, SearchResult

__all__ = ["Mismatch", "BackendOutcome", "ParityReport", "check_parity", "compare_results"]


@dataclass(frozen=True)
class Mismatch:
    """The first difference between two results: where, which field, and both sides' entries."""

    query: int | None  # None when the shapes differ
    rank: int | None  # None when only the result counts differ
    field: str
    left: Any
    right: Any
    detail: str

    def __str__(self) -> str:
        return self.detail


def _entry(res: SearchResult, q: int, r: int) -> tuple[int, float, float, int] | str:
    if r >= int(res.num_results[q]):
        return "pad"
    return (int(res.keyword_ids[q, r]), float(res.scores[q, r]), float(res.norm_scores[q, r]), int(res.lengths[q, r]))


def compare_results(left: SearchResult, right: SearchResult) -> Mismatch | None:
    """None when bit-identical (ids, order, float32 score bits, lengths), else the first difference.

    Agrees with `SearchResult.first_difference` (whose text is kept in ``detail``) and adds the structured
    query / rank / field of the difference.
    """
    text = left.first_difference(right)
    if text is None:
        return None
    if left.shape != right.shape:
        return Mismatch(None, None, "shape", left.shape, right.shape, text)
    fields = (("keyword_ids", None), ("scores", np.uint32), ("norm_scores", np.uint32), ("lengths", None))
    for q in range(left.shape[0]):
        if int(left.num_results[q]) != int(right.num_results[q]):
            # report the first rank where the entries differ, if any, else the count itself
            n = max(int(left.num_results[q]), int(right.num_results[q]))
            for r in range(n):
                if _entry(left, q, r) != _entry(right, q, r):
                    return Mismatch(q, r, "num_results", _entry(left, q, r), _entry(right, q, r), text)
            return Mismatch(q, None, "num_results", int(left.num_results[q]), int(right.num_results[q]), text)
        for name, view in fields:
            a = np.asarray(getattr(left, name)[q])
            b = np.asarray(getattr(right, name)[q])
            if view is not None:
                a, b = a.astype(np.float32).view(view), b.astype(np.float32).view(view)
            diff = np.flatnonzero(a != b)
            if diff.size:
                r = int(diff[0])
                return Mismatch(q, r, name, _entry(left, q, r), _entry(right, q, r), text)
    return Mismatch(None, None, "unknown", None, None, text)  # pragma: no cover - first_difference saw one


@dataclass
class BackendOutcome:
    """One backend's run: its result (None on error), and how it compares with the reference."""

    name: str
    result: SearchResult | None = None
    error: str | None = None
    mismatch: Mismatch | None = None

    @property
    def status(self) -> str:
        if self.error is not None:
            return "error"
        return "mismatch" if self.mismatch is not None else "ok"


@dataclass
class ParityReport:
    """Outcome of `check_parity`; the first backend is the reference the others are compared with."""

    reference: str
    outcomes: list[BackendOutcome] = field(default_factory=list)
    num_queries: int = 0

    @property
    def ok(self) -> bool:
        return all(o.status == "ok" for o in self.outcomes)

    def outcome(self, name: str) -> BackendOutcome:
        for o in self.outcomes:
            if o.name == name:
                return o
        raise KeyError(name)

    @property
    def first_mismatch(self) -> tuple[str, Mismatch] | None:
        for o in self.outcomes:
            if o.mismatch is not None:
                return o.name, o.mismatch
        return None

    def summary(self) -> str:
        """Human-readable lines: one per backend, with the first differing query and rank on a mismatch."""
        lines = [f"parity over {self.num_queries} queries, reference = {self.reference}"]
        for o in self.outcomes:
            if o.name == self.reference and o.status == "ok":
                lines.append(f"  {o.name:<10} reference")
            elif o.status == "ok":
                lines.append(f"  {o.name:<10} agrees exactly (ids, order, float32 bits)")
            elif o.status == "error":
                lines.append(f"  {o.name:<10} ERROR: {o.error}")
            else:
                m = o.mismatch
                assert m is not None
                lines.append(f"  {o.name:<10} MISMATCH at query {m.query}, rank {m.rank} ({m.field}): "
                             f"{self.reference} = {m.left}, {o.name} = {m.right}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "reference": self.reference, "num_queries": self.num_queries, "ok": self.ok,
            "backends": [{"name": o.name, "status": o.status, "error": o.error,
                          "mismatch": None if o.mismatch is None else {
                              "query": o.mismatch.query, "rank": o.mismatch.rank, "field": o.mismatch.field,
                              "left": o.mismatch.left, "right": o.mismatch.right, "detail": o.mismatch.detail}}
                         for o in self.outcomes],
        }


def _named(searchers: Mapping[str, Any] | Sequence[Any]) -> list[tuple[str, Any]]:
    if isinstance(searchers, Mapping):
        return list(searchers.items())
    out = []
    for i, s in enumerate(searchers):
        out.append((str(getattr(s, "name", f"backend{i}")), s))
    return out


def check_parity(searchers: Mapping[str, Any] | Sequence[Any], proposals: Proposals, config: SearchConfig,
                 prefixes: Sequence[Sequence[int]] | None = None, *,
                 results: Mapping[str, SearchResult] | None = None) -> ParityReport:
    """Run every searcher on the same input and compare each with the first, exactly.

    ``searchers`` is a name → searcher mapping or a sequence of searchers (named by ``.name``).  Results
    already computed (e.g. by a timing loop) can be passed in ``results`` and are not recomputed.  A backend
    that raises is reported with status ``error``; the reference erroring makes every other one ``error``.
    """
    named = _named(searchers)
    if not named:
        raise ValueError("check_parity: expected at least one searcher")
    report = ParityReport(reference=named[0][0], num_queries=proposals.num_queries)
    for name, s in named:
        out = BackendOutcome(name)
        if results is not None and name in results:
            out.result = results[name]
        else:
            try:
                if prefixes is not None:
                    out.result = s.search(proposals, config, prefixes)
                else:
                    out.result = s.search(proposals, config)
            except Exception as e:  # noqa: BLE001 - reported, not raised
                out.error = f"{type(e).__name__}: {e}"
        report.outcomes.append(out)
    ref = report.outcomes[0]
    for o in report.outcomes[1:]:
        if o.error is not None:
            continue
        if ref.result is None:
            o.error = f"reference {ref.name} failed; nothing to compare with"
            continue
        assert o.result is not None
        o.mismatch = compare_results(ref.result, o.result)
    return report
