"""What the search commands of the CLI do, apart from parsing: run backends on one workload, time them with
the harness's one timing loop, build their records and the tables they print.

``flashtrie search``, ``parity`` and ``demo`` call these; ``flashtrie bench`` goes through
`flashtrie.harness.sweep`, whose records `bench_table` summarises.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from flashtrie.errors import FlashTrieError, InputError
from flashtrie.proposals import Proposals
from flashtrie.search_types import SearchConfig, SearchResult

from .records import Record
from .timing import TimingPlan, summarize, time_searcher
from .workloads import workload_params

__all__ = ["time_per_query", "run_backends", "parity_records", "pass_means", "speedup_text", "demo_rows",
           "text_table", "bench_table", "keyword_tokens"]


def time_per_query(searcher: Any, proposals: Proposals, config: SearchConfig, desc: str | None, warmup: int = 1,
                   passes: int = 1) -> tuple[list[float], SearchResult]:
    """``passes`` passes of one query per call (batch 1) through `time_searcher`, after ``warmup`` untimed
    calls: per-call ms (pass after pass) and the stacked result of the first pass."""
    batches = [proposals[i] for i in range(proposals.num_queries)]
    plan = TimingPlan(warmup=min(warmup, len(batches)), repeats=passes)
    t = time_searcher(searcher, batches, config, plan, desc=desc)
    assert t.first_pass is not None
    return t.wall_ms, t.first_pass


def run_backends(searchers: dict[str, Any], proposals: Proposals, config: SearchConfig, *, timed: bool,
                 progress: bool, warn: Callable[[str], None], stage: Callable[[str], Any], passes: int = 1
                 ) -> tuple[dict[str, SearchResult], dict[str, list[float]]]:
    """Search with every searcher: ({name: result}, {name: per-query ms} when ``timed``).

    Untimed, each backend searches the whole batch in one call (inside ``stage(what)``, a context
    manager); timed, one query per call: with ``passes`` > 1, one untimed warm-up pass, then ``passes``
    timed passes (`pass_means` splits them).  A backend that fails with anything but a `FlashTrieError` (bad
    input, raised) is reported through ``warn`` and left out of the results, for the parity check to
    report as an error.
    """
    results: dict[str, SearchResult] = {}
    times: dict[str, list[float]] = {}
    for name, s in searchers.items():
        try:
            if timed:
                times[name], results[name] = time_per_query(
                    s, proposals, config, f"searching with {name}" if progress else None,
                    warmup=proposals.num_queries if passes > 1 else 1, passes=passes)
            else:
                with stage(f"searching with {name}"):
                    results[name] = s.search(proposals, config)
        except FlashTrieError:
            raise
        except Exception as e:  # noqa: BLE001 - left for check_parity to report as an error
            warn(f"warning: backend {name} failed: {type(e).__name__}: {e}")
    return results, times


def _timing_metrics(ms: list[float], base: list[float] | None) -> dict[str, Any]:
    st = summarize(ms)
    out: dict[str, Any] = {f"{k}_ms": v for k, v in st.to_dict().items() if k != "n"}
    if base:
        out["speedup_vs_marisa"] = summarize(base).mean / st.mean if st.mean > 0 else None
    return out


def parity_records(report: Any, workload: Any, config: SearchConfig, times: dict[str, list[float]],
                   make_record: Callable[..., Record], kind: str = "parity") -> list[Record]:
    """One record per backend of a parity report: its status, the first difference, and (timed) latency."""
    cfg = {**config.to_dict(), "batch_size": 1, "K": workload.proposals.shape[2]}
    base = times.get("marisa")
    recs = []
    for o in report.outcomes:
        metrics: dict[str, Any] = {"num_queries": report.num_queries, "reference": report.reference}
        if o.name in times:
            metrics.update(_timing_metrics(times[o.name], base))
        msg = o.error if o.error else (str(o.mismatch) if o.mismatch else None)
        recs.append(make_record(kind=kind, backend=o.name, status=o.status, message=msg, sweep=None,
                                workload=workload_params(workload), config=cfg, metrics=metrics))
    return recs


def pass_means(ms: Sequence[float], per_pass: int) -> list[float]:
    """The mean ms per call of each whole pass of ``per_pass`` calls in ``ms``."""
    n = len(ms) // max(per_pass, 1)
    return [float(np.mean(ms[i * per_pass:(i + 1) * per_pass])) for i in range(n)]


def speedup_text(v: Any, missing: str = "-") -> str:
    """A speed-up as printed everywhere: ``1.00x`` (``missing`` when there is none)."""
    return f"{v:.2f}x" if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else missing


def demo_rows(report: Any, times: dict[str, list[float]], order: Sequence[str], per_pass: int
              ) -> list[tuple[str, ...]]:
    """The demo's table rows: backend, the median over passes of the mean ms per query and its spread
    (min-max), p99 ms over every call, the speed-up over marisa (the ratio of medians), agreement."""
    median = {n: float(np.median(pass_means(ms, per_pass))) for n, ms in times.items()}
    base = median.get("marisa")
    rows: list[tuple[str, ...]] = []
    for o in sorted(report.outcomes, key=lambda o: order.index(o.name) if o.name in order else 99):
        if o.name in times:
            means = pass_means(times[o.name], per_pass)
            speed = speedup_text(base / median[o.name]) if base and median[o.name] > 0 else "-"
            cells = (f"{median[o.name]:.3f}", f"{min(means):.3f}-{max(means):.3f}",
                     f"{summarize(times[o.name]).p99:.3f}")
        else:
            cells, speed = ("-", "-", "-"), "-"
        agree = {"ok": "reference" if o.name == report.reference else "yes", "mismatch": "NO",
                 "error": "error"}[o.status]
        rows.append((o.name, *cells, speed, agree))
    return rows


def text_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A plain-text table: a header, a rule, and left-aligned columns."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip(),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return out


def _num(v: Any, fmt: str) -> str:
    return format(v, fmt) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else "-"


def bench_table(records: Sequence[Record]) -> list[str]:
    """The short table ``flashtrie bench`` prints of what it measured (one row per record)."""
    rows = []
    for r in records:
        m, c = r.metrics, r.config
        if r.kind == "build":
            rows.append((r.kind, r.backend, _num(c.get("num_keywords"), ","), "-", "-", "-",
                         _num(m.get("build_s"), ".3f") + " s", "-", speedup_text(m.get("build_speedup_vs_marisa")),
                         r.status))
        elif r.kind == "synthetic-quality":
            pk = next((k for k in sorted(m) if k.startswith("precision@")), None)
            rows.append((r.kind, f"{r.backend} ({c.get('mode', '')})", "-", _num(c.get("beam_width"), "d"),
                         _num(c.get("K"), "d"), "-", f"{pk} {_num(m.get(pk), '.3f')}" if pk else "-", "-", "-",
                         r.status))
        else:
            rows.append((r.kind, r.backend, _num(r.workload.get("num_keywords"), ","),
                         _num(c.get("beam_width"), "d"), _num(c.get("K"), "d"), _num(c.get("batch_size"), "d"),
                         _num(m.get("mean_ms"), ".3f") + " ms" if "mean_ms" in m else "-",
                         _num(m.get("p99_ms"), ".3f") + " ms" if "p99_ms" in m else "-",
                         speedup_text(m.get("speedup_vs_marisa")), r.status))
    head = ("kind", "backend", "keywords", "beam", "K", "batch", "mean", "p99", "vs marisa", "status")
    return text_table(head, rows)


def keyword_tokens(ids: Sequence[int], keywords: Any = None, index: Any = None) -> dict[int, list[int]]:
    """The tokens of each keyword id: from the `KeywordSet` when one is given, else from the index
    (`NarrowLoudsIndex.keyword`).  An id the index does not store (a duplicate collapsed at build time) is
    left out."""
    want = sorted({int(i) for i in ids if int(i) >= 0})
    if keywords is not None:
        return {i: [int(t) for t in keywords[i]] for i in want}
    out: dict[int, list[int]] = {}
    for i in want:
        try:
            out[i] = [int(t) for t in index.keyword(i)]
        except InputError:
            continue
    return out
