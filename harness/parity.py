"""Exact agreement between backends: same ids, same order, same float32 bits, query by query."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flashtrie.proposals import Proposals
from flashtrie.search_types import ResultDifference, SearchConfig, Searcher, SearchResult, result_difference

__all__ = ["Mismatch", "BackendOutcome", "ParityReport", "check_parity", "compare_backends", "compare_results"]


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


def compare_backends(results: Mapping[str, SearchResult], reference: str | None = None, *,
                     errors: Mapping[str, str] | None = None, order: Sequence[str] | None = None,
                     num_queries: int | None = None) -> ParityReport:
    """Compare every backend's result with the reference's, exactly: the lab's one parity comparison.

    ``results`` maps backend names to their results; ``errors`` names the backends that failed, with their
    messages.  ``reference`` (default: the first name) is the one the others are compared with; when it has
    no result, every other backend is an error.  ``order`` (default: results, then errors) is the order of
    the report's outcomes, the reference first.  ``num_queries`` defaults to the reference's rows.
    """
    errors = dict(errors or {})
    names = list(dict.fromkeys([*(order or ()), *results, *errors]))
    if reference is None:
        if not names:
            raise ValueError("compare_backends: expected at least one backend")
        reference = names[0]
    names = [reference, *(n for n in names if n != reference)]
    ref = results.get(reference)
    if num_queries is None:
        num_queries = int(ref.shape[0]) if ref is not None else 0
    report = ParityReport(reference=reference, num_queries=num_queries)
    for name in names:
        out = BackendOutcome(name, result=results.get(name), error=errors.get(name))
        if out.result is None and out.error is None:
            out.error = "no result"
        elif out.error is None and name != reference:
            if ref is None:
                out.error = f"reference {reference} failed; nothing to compare with"
            else:
                assert out.result is not None
                out.mismatch = compare_results(ref, out.result)
        report.outcomes.append(out)
    return report


def check_parity(searchers: Mapping[str, Searcher], proposals: Proposals, config: SearchConfig,
                 prefixes: Sequence[Sequence[int]] | None = None, *,
                 results: Mapping[str, SearchResult] | None = None) -> ParityReport:
    """Run every searcher on the same input and compare each with the first (`compare_backends`).

    ``searchers`` maps names to searchers; the first is the reference.  Results already computed (e.g. by a
    timing loop) can be passed in ``results`` and are not recomputed.  A backend that raises is reported with
    status ``error``; the reference erroring makes every other one ``error``.
    """
    if not searchers:
        raise ValueError("check_parity: expected at least one searcher")
    got: dict[str, SearchResult] = {}
    errors: dict[str, str] = {}
    for name, s in searchers.items():
        if results is not None and name in results:
            got[name] = results[name]
            continue
        try:
            got[name] = s.search(proposals, config, prefixes)
        except Exception as e:  # noqa: BLE001 - reported, not raised
            errors[name] = f"{type(e).__name__}: {e}"
    return compare_backends(got, next(iter(searchers)), errors=errors, order=list(searchers),
                            num_queries=proposals.num_queries)
