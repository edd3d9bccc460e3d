"""The serving suite's part of a report: one table of every case (newest record of each) and a figure of
queries per second against batch size; registered with the report pipeline (`harness/report.py`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flashtrie.harness.env import summary_line
from flashtrie.harness.markdown import command_text, table
from flashtrie.harness.plots import new_figure, save_figure
from flashtrie.harness.records import Record
from flashtrie.harness.suites import Metric, Page, Suite, register

__all__ = ["SUITE", "sections", "figures", "newest"]

FIGURE = "serve_queries_per_second"

Key = tuple[int, str, str, int, int]


def _key(r: Record) -> Key:
    w, c = r.workload, r.config
    return (int(w.get("library_size") or 0), str(w.get("proposals")), r.backend, int(c.get("beam_width") or 0),
            int(c.get("batch_size") or 0))


def newest(records: list[Record]) -> dict[Key, Record]:
    """The last record of each (library, proposals, backend, beam, batch), in key order."""
    out: dict[Key, Record] = {}
    for r in records:  # records come in the order given: later runs win
        out[_key(r)] = r
    return dict(sorted(out.items()))


def _commit(r: Record) -> str:
    return str((r.env.get("git") or {}).get("commit") or "?")[:7]


def _num(m: dict[str, Any], name: str, fmt: str) -> str:
    v = m.get(name)
    return "-" if v is None else format(v, fmt)


def _rows(cases: dict[Key, Record]) -> list[list[str]]:
    rows = []
    for (n, kind, backend, beam, batch), r in cases.items():
        m = r.metrics
        head = [f"{n:,}", kind, backend, str(beam), str(batch)]
        if r.status not in ("ok", "mismatch"):
            rows.append(head + [f"{r.status}: {r.message}", "", "", "", "", _commit(r)])
            continue
        mark = "" if r.status == "ok" else f" ({r.status}: {r.message})"
        rows.append(head + [_num(m, "mean_ms", ".3f") + mark, _num(m, "p99_ms", ".3f"),
                            _num(m, "queries_per_second", ",.0f"), _num(m, "host_us_per_query", ".1f"),
                            _num(m, "device_mean_ms", ".3f"), _commit(r)])
    return rows


def sections(records: list[Record], page: Page) -> list[str]:
    """The environments, the figure and the table of cases."""
    cases = newest(records)
    envs = {_commit(r): r.env for r in cases.values()}
    text = ["## Serving benchmark", "",
            "Each call makes its proposals (device: a head's log_softmax, top-K and slot-to-token gather on the "
            "GPU, searched from the device arrays, results left on the device; host: a `Proposals` built from "
            "numpy arrays, its checks included) and searches them; mean and p99 are host wall time per call from "
            "the proposals to results ready, device time by CUDA events on the searcher's stream.", ""]
    text += [f"Environment ({c}): {summary_line(e)}." for c, e in envs.items()] + [""]
    if FIGURE in page.drawn:
        text += [f"![queries per second]({FIGURE}.png)", ""]
    head = ["library", "proposals", "backend", "beam", "batch", "mean ms", "p99 ms", "queries/s",
            "host µs / query", "device ms", "commit"]
    commands = list(dict.fromkeys(command_text(r.command) for r in cases.values() if r.command))
    return text + table(head, _rows(cases)) + [""] + [f"Measured with: `{c}`" for c in commands] + [""]


def figures(records: list[Record], out_dir: Path) -> dict[str, list[Path]]:
    """Queries per second against batch size, one line per (library, backend, proposals, beam)."""
    fig, (ax,) = new_figure("Serving throughput, fresh proposals per call (newest run of each point)",
                            "batch size (queries per call)", "queries per second")
    lines: dict[tuple[int, str, str, int], list[tuple[int, float]]] = {}
    for (n, kind, backend, beam, batch), r in newest(records).items():
        qps = r.metrics.get("queries_per_second")
        if r.status == "ok" and isinstance(qps, (int, float)):
            lines.setdefault((n, backend, kind, beam), []).append((batch, float(qps)))
    for i, ((n, backend, kind, beam), pts) in enumerate(sorted(lines.items())):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=f"C{i % 10}",
                linestyle="-" if kind == "device" else "--", label=f"{n:,} keywords, {backend}, {kind}, beam {beam}")
    if lines:
        ax.legend(fontsize=7)
    return {FIGURE: save_figure(fig, out_dir, FIGURE)}


def _owns(r: Record) -> bool:
    return r.kind == "serve"


#: The serving suite's metrics.
METRICS = {
    "mean_ms": Metric("host wall time per serving call, proposals made to results ready, mean", "ms"),
    "p99_ms": Metric("99th percentile of the per-call wall times", "ms"),
    "queries_per_second": Metric("batch size over the mean call time", "queries/s"),
    "host_us_per_query": Metric("host time of a call less its waits for the device, per query", "µs"),
    "device_mean_ms": Metric("device time per call (CUDA events on the searcher's stream), mean; GPU only", "ms"),
}

SUITE = register(Suite(name="serve", title="Serving: fresh proposals per call", owns=_owns, sections=sections,
                       figures=figures, metrics=METRICS))
