"""Exact agreement between backends: same ids, same order, same float32 bits, query by query."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flashtrie.proposals import Proposals
from flashtrie.search_types import ResultDifference, SearchConfig, Searcher, SearchResult, result_difference

__all__ = ["Mismatch", "BackendOutcome", "ParityReport", "check_parity", "compare_results"]


#: The first difference between two results (`flashtrie.search_types.ResultDifference`).
Mismatch = ResultDifference


def compare_results(left: SearchResult, right: SearchResult) -> Mismatch | None:
    """None when bit-identical, else the first difference (`flashtrie.search_types.result_difference`)."""
    return result_difference(left, right)


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
                if m.query is None or m.rank is None:
                    lines.append(f"  {o.name:<10} MISMATCH ({m.field}): {m}")
                else:
                    lines.append(f"  {o.name:<10} MISMATCH at query {m.query}, rank {m.rank} ({m.field}): "
                                 f"{self.reference} = {m.left}, {o.name} = {m.right}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "reference": self.reference, "num_queries": self.num_queries, "ok": self.ok,
            "backends": [{"name": o.name, "status": o.status, "error": o.error,
                          "mismatch": None if o.mismatch is None else {
                              "query": o.mismatch.query, "rank": o.mismatch.rank, "field": o.mismatch.field,
                              "left": o.mismatch.left, "right": o.mismatch.right, "detail": str(o.mismatch)}}
                         for o in self.outcomes],
        }


def check_parity(searchers: Mapping[str, Searcher], proposals: Proposals, config: SearchConfig,
                 prefixes: Sequence[Sequence[int]] | None = None, *,
                 results: Mapping[str, SearchResult] | None = None) -> ParityReport:
    """Run every searcher on the same input and compare each with the first, exactly.

    ``searchers`` maps names to searchers; the first is the reference.  Results already computed (e.g. by a
    timing loop) can be passed in ``results`` and are not recomputed.  A backend that raises is reported with
    status ``error``; the reference erroring makes every other one ``error``.
    """
    if not searchers:
        raise ValueError("check_parity: expected at least one searcher")
    report = ParityReport(reference=next(iter(searchers)), num_queries=proposals.num_queries)
    for name, s in searchers.items():
        out = BackendOutcome(name)
        if results is not None and name in results:
            out.result = results[name]
        else:
            try:
                out.result = s.search(proposals, config, prefixes)
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
