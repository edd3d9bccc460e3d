"""Markdown tables of the real-library records (`flashtrie.harness.real_libraries`): the libraries,
index size against marisa-trie, reachability, beam-search latency and the stepwise step."""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flashtrie.io_util import atomic_write

from .env import summary_line
from .records import Record, read_records
from .runs import speedup_text

__all__ = ["render_markdown", "write_report"]

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
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_fmt(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return out + [""]


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


def render_markdown(records: Sequence[Record], title: str = "flashtrie on real libraries") -> str:
    """The report text (records of several runs: the newest of each case is shown)."""
    recs = _latest(records)
    names = list(dict.fromkeys(_lib(r) for r in sorted(recs, key=lambda r: r.timestamp)))
    envs = {summary_line(r.env) for r in recs}
    cmds = list(dict.fromkeys(shlex.join(["flashtrie", *r.command[1:]]) for r in recs if r.command))
    lines = [f"# {title}", "", "## Libraries", "", *_libraries(recs, names),
             "## Index size and build time", "", *_sizes(recs, names),
             "## Every identifier reachable", "", *_reach(recs, names),
             "## Beam search latency per query (ms)", "", *_latency(recs, names),
             "## Stepwise step (2 x 70 rows)", "", *_step(recs, names),
             "## Environment", "", *[f"- {e}" for e in sorted(envs)], "",
             "## Commands", "", *[f"    {c}" for c in cmds]]
    return "\n".join(lines) + "\n"


def write_report(sources: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], title: str | None = None
                 ) -> Path:
    """Render the records of ``sources`` to ``out`` (a Markdown file), written atomically."""
    text = render_markdown(read_records(*sources), title or "flashtrie on real libraries")
    atomic_write(out, text.encode())
    return Path(out)
