"""The stepwise suite's report: the per-step table (device and host µs), the chunk / blocks-per-row sweep, the
transformers comparisons, a figure of device µs per step, and a terminal brief; registered with the report
pipeline (`harness/report.py`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flashtrie.harness.env import summary_line
from flashtrie.harness.plots import new_figure, save_figure
from flashtrie.harness.records import Record
from flashtrie.harness.suites import Metric, Page, Suite, register

from .measure import INNER

__all__ = ["SUITE", "table", "brief", "sections", "figures", "commit_of"]

FIGURE = "stepwise_device_us"

_PARTS = ("graph_mask_us", "graph_advance_us", "graph_bool_fused_us", "graph_bool_step_us", "graph_fused_notable_us")
#: what the fifth part was before the write-only mask (records of commits before it)
_OLD_PART = "graph_mask_noprefetch_us"


def _f(m: dict[str, Any], key: str, stat: str = "mean") -> str:
    """A metric for a table: a number, or one statistic of a distribution (``stat``: mean or p50)."""
    v = m.get(key)
    return "-" if v is None else f"{v[stat] if isinstance(v, dict) else v:.1f}"


def commit_of(r: Record) -> str:
    """The commit a record was measured at (short), from its environment snapshot."""
    return str((r.env.get("git") or {}).get("commit") or "?")[:7]


def table(records: list[Record]) -> str:
    """Markdown tables of the step records, the chunk sweep, then the HF comparisons (each row with its commit)."""
    lines = ["| commit | library | N | V | rows | states | device µs: fused step (1 launch) | fused, 10 steps per "
             "graph | mask + advance (2) | "
             "mask / advance / bool fused / bool 2 launches / fused without child table (older records: mask without "
             "preload) µs | host µs fused (median) | "
             "host µs 2 launches (median) | host+sync µs fused (median) |",
             "| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
    for r in records:
        if r.sweep != "stepwise":
            continue
        w, c, m = r.workload, r.config, r.metrics
        if r.status != "ok":
            lines.append(f"| {commit_of(r)} | {w.get('case', '?')} | | | {c.get('rows', '')} | | {r.status}: "
                         f"{r.message} | | | | | | |")
            continue
        parts = " / ".join(f"{m[k]:.1f}" for k in (*_PARTS[:4], _PARTS[4] if _PARTS[4] in m else _OLD_PART)
                           if k in m) or m.get("graph_error", "-")
        lines.append(f"| {commit_of(r)} | {w['name']} | {w['num_keywords']:,} | {w['vocab_size']:,} | "
                     f"{c['batch']}x{c['beams']} | {c['states']} | {_f(m, 'graph_fused_us')} | "
                     f"{_f(m, f'graph{INNER}_fused_us')} | {_f(m, 'graph_step_us')} | {parts} | "
                     f"{_f(m, 'host_fused_us', 'p50')} | {_f(m, 'host_us', 'p50')} | "
                     f"{_f(m, 'sync_fused_us', 'p50')} |")
    sw = [r for r in records if r.sweep == "stepwise-chunk" and r.status == "ok"]
    if sw:
        lines += ["", "| commit | library | rows | states | chunk | blocks per row | child search | device µs fused | "
                  "mask + advance | host µs fused (median) |",
                  "| --- | --- | ---: | --- | ---: | ---: | --- | ---: | ---: | ---: |"]
        for r in sw:
            c, m = r.config, r.metrics
            lines.append(f"| {commit_of(r)} | {r.workload['case']} | {c['batch']}x{c['beams']} | {c['states']} | "
                         f"{c['chunk']} | "
                         f"{c['bpr']} | {c.get('child_search', '')} | {_f(m, 'graph_fused_us')} | "
                         f"{_f(m, 'graph_step_us')} | "
                         f"{_f(m, 'host_fused_us', 'p50')} |")
    hf = [r for r in records if r.sweep == "stepwise-hf" and r.status == "ok"]
    if hf:
        lines += ["", "| library | rows | depth | transformers dict-trie processor ms | ours ms | speed-up | same |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
        for r in hf:
            m = r.metrics
            lines.append(f"| {r.workload['case']} | {r.config['batch']}x{r.config['beams']} | {m['depth']} | "
                         f"{m['hf_ms']:.2f} | {m['ours_ms']:.3f} | {m['speedup']:.2f}x | {m['same_scores']} |")
    gen = [r for r in records if r.sweep == "stepwise-generate" and r.status == "ok"]
    if gen:
        lines += ["", "| commit | library | batch x beams | unconstrained ms | ours ms (x) | ours / unconstrained per "
                  "round: median [min, max] (rounds) | dict-trie callback ms (x) |",
                  "| --- | --- | ---: | ---: | ---: | --- | ---: |"]
        for r in gen:
            m = r.metrics
            rr = m.get("ours_over_unconstrained_rounds")  # (records before 2026-12-02: medians of 2 calls)
            per_round = (f"{rr['median']:.3f} [{rr['min']:.3f}, {rr['max']:.3f}] ({m['rounds']})" if rr
                         else "n/a (2 calls each)")
            lines.append(f"| {commit_of(r)} | {r.workload['case']} | {r.config['batch']}x{r.config['beams']} | "
                         f"{m['unconstrained_ms']:.1f} | {m['ours_ms']:.1f} ({m['ours_over_unconstrained']:.2f}x) | "
                         f"{per_round} | {m['hf_prefix_fn_ms']:.1f} ({m['hf_over_unconstrained']:.2f}x) |")
    bad = [r for r in records if r.status == "error" and r.sweep != "stepwise"]
    lines += [f"- {r.backend} {r.config}: {r.message}" for r in bad]
    return "\n".join(lines)


def brief(records: list[Record]) -> str:
    """One short line per measurement (device and host µs), for a terminal."""
    out = ["case rows states: device us fused / fused 10 per graph / 2 launches | host us (median) fused / "
           "2 launches | host+sync fused | host us fused = our Python + the launch"]
    for r in records:
        c, m = r.config, r.metrics
        head = f"{r.workload.get('case', '?')} {c.get('batch', '')}x{c.get('beams', '')}"
        if r.status != "ok":
            out.append(f"{head} {r.sweep} {r.status}: {(r.message or '')[:80]}")
        elif r.sweep in ("stepwise", "stepwise-chunk"):
            knobs = "" if r.sweep == "stepwise" else f" chunk={c['chunk']} bpr={c['bpr']} {c.get('child_search', '')}"
            out.append(f"{head} {c['states']}{knobs}: {_f(m, 'graph_fused_us')} / {_f(m, f'graph{INNER}_fused_us')}"
                       f" / {_f(m, 'graph_step_us')} | {_f(m, 'host_fused_us', 'p50')} / {_f(m, 'host_us', 'p50')} | "
                       f"{_f(m, 'sync_fused_us', 'p50')} | py {_f(m, 'host_py_fused_us', 'p50')} + launch "
                       f"{_f(m, 'host_launch_us', 'p50')}")
        elif r.sweep == "stepwise-hf":
            out.append(f"{head} hf depth {m['depth']}: {m['hf_ms']:.2f} ms vs {m['ours_ms'] * 1e3:.0f} us = "
                       f"{m['speedup']:.2f}x same={m['same_scores']}")
        elif r.sweep == "stepwise-generate":
            rr = m.get("ours_over_unconstrained_rounds")
            out.append(f"{head} generate: ours {m['ours_over_unconstrained']:.2f}x"
                       + (f" (per round {rr['median']:.3f}, {m['rounds']} rounds)" if rr else "") + ", dict "
                       f"{m['hf_over_unconstrained']:.2f}x of unconstrained {m['unconstrained_ms']:.1f} ms")
    return "\n".join(out)


def figures(records: list[Record], out_dir: Path) -> dict[str, list[Path]]:
    """Device µs per step by case and rows (the newest run of each point)."""
    ok = [r for r in records if r.sweep == "stepwise" and r.status == "ok" and "graph_fused_us" in r.metrics]
    fig, (ax,) = new_figure("Per-step constraint cost (advance + mask, one launch), device time; newest run of each "
                            "point", "rows (batch x beams)", "µs per step", logx=True, logy=True)
    newest: dict[tuple[str, str, int], Record] = {}  # records come in the order given: later runs win
    for r in ok:
        newest[(r.workload["case"], r.config["states"], r.config["rows"])] = r
    cases = sorted({k[0] for k in newest})
    colours = {c: f"C{i % 10}" for i, c in enumerate(cases)}
    for case, states in sorted({k[:2] for k in newest}):
        pts = sorted((k[2], r.metrics["graph_fused_us"], commit_of(r)) for k, r in newest.items()
                     if k[:2] == (case, states))
        commits = ", ".join(sorted({c for _, _, c in pts}))
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=colours[case],
                linestyle="-" if states == "root" else "--", label=f"{case} ({states}; {commits})")
    if ok:
        ax.legend(fontsize=7)
    return {FIGURE: save_figure(fig, out_dir, FIGURE)}


def sections(records: list[Record], page: Page) -> list[str]:
    """One environment line per commit measured, the figure, the tables."""
    envs = {commit_of(r): r.env for r in records}
    text = [f"Environment: {summary_line(e)}." for e in envs.values()] + [""]
    if FIGURE in page.drawn:
        text += [f"![device µs per step]({FIGURE}.png)", ""]
    return text + [table(records), ""]


def _owns(r: Record) -> bool:
    return (r.sweep or "").startswith("stepwise")


#: The stepwise suite's metrics (per step; distributions hold mean, p50 and p99).
METRICS = {
    "graph_fused_us": Metric("device time of one fused step (advance + mask, one launch), CUDA-graph replay", "µs"),
    f"graph{INNER}_fused_us": Metric(f"the fused step {INNER} times in one CUDA graph, per step", "µs"),
    "graph_step_us": Metric("mask, then advance (two launches), CUDA-graph replay", "µs"),
    "host_fused_us": Metric("host wall time of an eager fused call, no synchronisation", "µs"),
    "sync_fused_us": Metric("host wall time of an eager fused call and a synchronisation", "µs"),
    "speedup": Metric("transformers' dict-trie processor time over ours, same input", "x"),
    "ours_over_unconstrained": Metric("generate() with our processor over unconstrained generate()", "x"),
}

SUITE = register(Suite(name="stepwise", title="Autoregressive decoding: per-step constraint cost", owns=_owns,
                       sections=sections, figures=figures, metrics=METRICS))
