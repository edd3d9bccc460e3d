"""The real-library suite's report sections (records of `flashtrie.harness.real_libraries`): the libraries,
index size against marisa-trie, reachability, beam-search latency and the stepwise step; registered with the
report pipeline (`harness/report.py`)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from .env import summary_line
from .markdown import table
from .records import Record
from .runs import speedup_text
from .suites import Metric, Page, Suite, no_figures, register

__all__ = ["SUITE", "sections"]

_STRUCTURES = ("narrow-louds", "marisa-trie-tokens", "marisa-trie-strings")


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}" if abs(v) < 1 else f"{v:.1f}"
    return str(v)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """A Markdown table with this suite's number format, and a blank line."""
    return table(header, [[_fmt(c) for c in row] for row in rows]) + [""]


def _lib(r: Record) -> str:
    return str((r.workload.get("keywords") or {}).get("name", "?"))


def _latest(records: Sequence[Record]) -> list[Record]:
    """The newest record of each (library, kind, backend, sweep, config)."""
    keep: dict[tuple[Any, ...], Record] = {}
    for r in records:
        key = (_lib(r), r.kind, r.backend, r.sweep, repr(sorted(r.config.items())))
        if key not in keep or r.timestamp >= keep[key].timestamp:
            keep[key] = r
    return list(keep.values())


def _libraries(recs: list[Record], names: list[str]) -> list[str]:
    rows = []
    for name in names:
        w = next(r.workload["keywords"] for r in recs if _lib(r) == name)
        n, tokens = w.get("num_keywords", 0), w.get("tokens", 0)
        rows.append([name, n, tokens / max(n, 1), w.get("max_length"), w.get("num_queries"), w.get("identifier"),
                     w.get("queries"), w.get("version")])
    return _table(["library", "identifiers", "tokens / id", "max tokens", "queries", "identifier", "query",
                   "data + tokenizer"], rows)


def _sizes(recs: list[Record], names: list[str]) -> list[str]:
    rows = []
    for name in names:
        by = {r.backend: r for r in recs if _lib(r) == name and r.sweep == "real-size" and r.status == "ok"}
        for s in [s for s in _STRUCTURES if s in by]:
            m = by[s].metrics
            rows.append([name, s, m["bytes_per_keyword_without_id_map"], m["bytes_per_keyword"],
                         m["bytes"] / 2**20, m["size_ratio_vs_marisa_tokens"], m["build_s"]])
    return _table(["library", "structure", "B / id, no id map", "B / id, with id map", "MiB with map",
                   "x marisa tokens (with maps)", "build s"], rows)


def _reach(recs: list[Record], names: list[str]) -> list[str]:
    rows = [[_lib(r), r.metrics.get("identifiers"), r.metrics.get("reached"), r.metrics.get("walk_s"),
             r.status if r.status == "ok" else f"{r.status}: {r.message}"]
            for name in names for r in recs if _lib(r) == name and r.sweep == "real-reachability"]
    return _table(["library", "identifiers", "reached", "walk s", "status"], rows)


def _latency(recs: list[Record], names: list[str]) -> list[str]:
    out = []
    for name in names:
        lat = [r for r in recs if _lib(r) == name and r.sweep == "beam_width"]
        if not lat:
            continue
        backends = sorted({r.backend for r in lat}, key=lambda b: ("gpu", "numpy", "marisa").index(b)
                          if b in ("gpu", "numpy", "marisa") else 9)
        beams = sorted({int(r.config["beam_width"]) for r in lat})
        rows = []
        for b in beams:
            row: list[Any] = [b]
            for be in backends:
                r = next((x for x in lat if x.backend == be and int(x.config["beam_width"]) == b), None)
                if r is None or r.status != "ok":
                    row += [r.status if r else "–"] + ([] if be == "marisa" else ["–"])
                    continue
                row += [f"{_fmt(r.metrics['mean_ms'])} ({_fmt(r.metrics['p99_ms'])})"]
                row += [] if be == "marisa" else [speedup_text(r.metrics.get("speedup_vs_marisa"), "–")]
            first = next(x for x in lat if int(x.config["beam_width"]) == b)
            row += [first.workload.get("shape_QTK"), first.workload_stats.get("valid_fraction")]
            rows.append(row)
        head = ["beam"]
        for be in backends:
            head += [f"{be} ms mean (p99)"] + ([] if be == "marisa" else [f"{be} x marisa"])
        out += [f"**{name}**", "", *_table(head + ["Q, T, K", "valid fraction"], rows)]
    return out


def _step(recs: list[Record], names: list[str]) -> list[str]:
    rows = []
    for name in names:
        for r in (x for x in recs if _lib(x) == name and x.sweep == "real-stepwise"):
            m = r.metrics
            host = m.get("host_fused_us") or {}
            rows.append([name, r.backend, r.config.get("states"), r.config.get("vocab_size"), host.get("mean"),
                         host.get("p50"), host.get("p99"), m.get("graph_fused_us"),
                         r.status if r.status == "ok" else f"{r.status}: {r.message}"])
    return _table(["library", "backend", "states", "vocab", "host µs mean", "p50", "p99", "GPU graph µs",
                   "status"], rows)


def sections(records: list[Record], page: Page) -> list[str]:
    """The real-library part of a report (records of several runs: the newest of each case is shown)."""
    recs = _latest(records)
    names = list(dict.fromkeys(_lib(r) for r in sorted(recs, key=lambda r: r.timestamp)))
    envs = {summary_line(r.env) for r in recs}
    cmds = list(dict.fromkeys(shlex.join(["flashtrie", *r.command[1:]]) for r in recs if r.command))
    cmds.append(shlex.join(["flashtrie", "report", *page.sources, "-o", str(page.out_dir)]))
    return ["## Libraries", "", *_libraries(recs, names),
            "## Index size and build time", "", *_sizes(recs, names),
            "## Every identifier reachable", "", *_reach(recs, names),
            "## Beam search latency per query (ms)", "", *_latency(recs, names),
            "## Stepwise step (2 x 70 rows)", "", *_step(recs, names),
            "## Environment", "", *[f"- {e}" for e in sorted(envs)], "",
            "## Commands", "", *[f"    {c}" for c in cmds], ""]


def _owns(r: Record) -> bool:
    """The records of `flashtrie real bench`: sweeps ``real-*``, and its beam sweep (workload ``real:NAME``)."""
    return (r.sweep or "").startswith("real") or str(r.workload.get("name", "")).startswith("real:")


#: The real-library suite's metrics (size records, reachability, the beam sweep, the stepwise step).
METRICS = {
    "bytes": Metric("serialized bytes of the structure with its id map", "bytes"),
    "bytes_per_keyword": Metric("serialized bytes per identifier, with the id map", "B/id"),
    "bytes_per_keyword_without_id_map": Metric("serialized bytes per identifier, without an id map", "B/id"),
    "size_ratio_vs_marisa_tokens": Metric("bytes over marisa-trie's on the same token sequences (both with maps)",
                                          "x"),
    "build_s": Metric("build time of the structure", "s"),
    "reached": Metric("identifiers whose tokens, walked from the root, end at their own id", "identifiers"),
    "walk_s": Metric("time to walk every identifier", "s"),
    "mean_ms": Metric("search latency per query (batch 1), mean over the timed calls", "ms"),
    "p99_ms": Metric("search latency per query, 99th percentile", "ms"),
    "speedup_vs_marisa": Metric("marisa-trie's mean divided by this backend's, same case and run", "x"),
    "host_fused_us": Metric("host wall time of one stepwise step (advance + mask), mean / p50 / p99", "µs"),
    "graph_fused_us": Metric("device time of one fused GPU step, CUDA-graph replay", "µs"),
}

SUITE = register(Suite(name="real", title="flashtrie on real libraries", owns=_owns, sections=sections,
                       figures=no_figures, metrics=METRICS))
