"""The quality suite's report sections, rendered from the ``kind == "quality"`` records written by
`flashtrie.harness.quality_run`; registered with the report pipeline (`harness/report.py`).

Its sections: tasks, data and model sizes, training time, a table per task and model, and the measured change
of Precision@100 from beam 100 to the widest beam measured; its figures: Precision@100 against beam width and
against latency (one panel per task and model; a line per backend and mode).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .env import summary_line
from .plots import new_figure, save_figure
from .records import Record
from .suites import Metric, Page, Suite, register

__all__ = ["SUITE", "sections", "figures", "quality_records", "summary_table"]

_METRICS = ("precision@10", "recall@10", "precision@100", "recall@100", "exact_match")


def _owns(r: Record) -> bool:
    """A record of a quality run: kind quality with a task and a model (``flashtrie bench quality``'s have none)."""
    return r.kind == "quality" and "model" in r.config and "task" in r.config


def quality_records(records: Sequence[Record]) -> list[Record]:
    """The records of the quality runs (written by `flashtrie.harness.quality_run`)."""
    return [r for r in records if _owns(r)]


def _curves(recs: Sequence[Record]) -> dict[tuple[str, str], dict[str, list[Record]]]:
    """(task, model) -> backend label -> records sorted by beam (status ok)."""
    out: dict[tuple[str, str], dict[str, list[Record]]] = {}
    for r in recs:
        if r.status != "ok":
            continue
        key = (r.config["task"], r.config["model"])
        label = f"{r.backend} ({r.config['mode']})"
        out.setdefault(key, {}).setdefault(label, []).append(r)
    for panel in out.values():
        for rs in panel.values():
            rs.sort(key=lambda r: r.config["beam_width"])
    return out


def summary_table(records: Sequence[Record], beams: Sequence[int] = (1, 10, 100, 1000)) -> list[str]:
    """A plain-text table of the quality records at ``beams`` (and each curve's widest beam): P@10,
    P@100, R@100, hit@1 and ms per query; skipped measurements say so."""
    recs = quality_records(records)
    widest: dict[tuple[str, str, str, str], int] = {}
    for r in recs:
        key = (r.config["task"], r.config["model"], r.backend, r.config["mode"])
        if r.status == "ok":
            widest[key] = max(widest.get(key, 0), r.config["beam_width"])
    head = f"{'task':<9}{'model':<6}{'backend':<14}{'mode':<22}{'beam':>5}{'P@10':>7}{'P@100':>7}{'R@100':>7}" \
           f"{'hit@1':>7}{'ms/query':>10}"
    lines = [head, "-" * len(head)]
    for r in sorted(recs, key=lambda r: (r.config["task"], r.config["model"], r.backend, r.config["beam_width"])):
        key = (r.config["task"], r.config["model"], r.backend, r.config["mode"])
        beam = r.config["beam_width"]
        if beam not in beams and beam != widest.get(key):
            continue
        row = f"{key[0]:<9}{key[1]:<6}{key[2]:<14}{key[3]:<22}{beam:>5}"
        if r.status != "ok":
            lines.append(f"{row}  {r.status}: {r.message}")
            continue
        m = r.metrics
        lines.append(row + "".join(f"{m[k]:>7.3f}" for k in ("precision@10", "precision@100", "recall@100",
                                                            "exact_match")) + f"{m['latency_ms_per_query']:>10.3f}")
    return lines


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3f}" if v == v else "n/a"
    return str(v)


def _task_section(task: str, recs: Sequence[Record]) -> list[str]:
    w = recs[0].workload
    sizes = ", ".join(f"{k} {w[k]:,}" if isinstance(w[k], int) else f"{k} {w[k]:.2f}" for k in
                      ("identifiers", "vocab", "train_queries", "test_queries", "train_pairs", "eval_queries",
                       "test_mean_relevant", "test_max_relevant") if k in w)
    info = w.get("task_info", {})
    lib = info.get("library_params", {})
    lines = [f"### Task `{task}`", "",
             f"- source: {info.get('library', '?')} ({lib.get('source', '?')}); {info.get('subset', '')}",
             f"- identifier: {lib.get('identifier', '?')}", f"- relations: {lib.get('queries', '?')}",
             f"- sizes: {sizes}", ""]
    models: dict[str, dict[str, Any]] = {}
    for r in recs:
        models.setdefault(r.config["model"], r.config["model_info"])
    for m, mi in sorted(models.items()):
        lines.append(f"- model {m.upper()}: {mi['parameters']:,} parameters (d {mi['d_model']}, "
                     f"{mi['layers']} layers), {mi.get('steps_run', mi['steps'])} of {mi['steps']} steps of "
                     f"{mi['batch_size']}, "
                     f"trained in {mi['train_seconds']:.1f} s, final loss "
                     f"{_fmt(mi['final_loss'])}, checkpoint sha256 `{mi['checkpoint_sha256'][:16]}`")
    lines.append("")
    head = ["model", "backend", "mode", "beam", *_METRICS, "ms/query", "same as other backend"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(recs, key=lambda r: (r.config["model"], r.backend, r.config["beam_width"])):
        if r.status != "ok":
            lines.append(f"| {r.config['model']} | {r.backend} | {r.config['mode']} | {r.config['beam_width']} | "
                         + " | ".join(["-"] * len(_METRICS)) + f" | {r.status}: {r.message} | |")
            continue
        met = r.metrics
        same = met.get("identical_to_numpy", met.get("identical_to_gpu", ""))
        lines.append(f"| {r.config['model']} | {r.backend} | {r.config['mode']} | {r.config['beam_width']} | "
                     + " | ".join(_fmt(met[k]) for k in _METRICS) + f" | {met['latency_ms_per_query']:.3f} | {same} |")
    return lines + [""]


def _reading(curves: dict[tuple[str, str], dict[str, list[Record]]]) -> list[str]:
    """P@100 at beam 100 and at the widest beam measured, per task, model and backend (as measured)."""
    lines = ["### Reading", ""]
    for (task, model), panel in sorted(curves.items()):
        for label, rs in sorted(panel.items()):
            at = {r.config["beam_width"]: r.metrics["precision@100"] for r in rs}
            wide = max(at)
            ceiling = rs[0].metrics.get("precision@100_ceiling")
            bound = f" (ceiling {ceiling:.3f})" if isinstance(ceiling, float) else ""
            if 100 in at and wide > 100:
                lines.append(f"- {task}, {model.upper()}, {label}: P@100 {at[100]:.3f} at beam 100, {at[wide]:.3f} at "
                             f"beam {wide} ({at[wide] - at[100]:+.3f}){bound}")
            else:
                lines.append(f"- {task}, {model.upper()}, {label}: P@100 {at[wide]:.3f} at beam {wide}, the widest "
                             f"measured{bound}")
    return lines + [""]


#: The figures (name -> x axis): Precision@100 against beam width, and against latency per query.
FIGURES = {"precision_vs_beam": "beam", "precision_vs_latency": "latency"}


def _figure(curves: dict[tuple[str, str], dict[str, list[Record]]], x: str, out_dir: Path, name: str
            ) -> list[Path]:
    keys = sorted(curves)
    fig, axes = new_figure(f"Precision@100 against {'beam width' if x == 'beam' else 'latency'}",
                           "beam width" if x == "beam" else "ms per query", "Precision@100", logy=False,
                           ncols=len(keys))
    for ax, key in zip(axes, keys, strict=True):
        for label, rs in sorted(curves[key].items()):
            xs = [r.config["beam_width"] if x == "beam" else r.metrics["latency_ms_per_query"] for r in rs]
            ax.plot(xs, [r.metrics["precision@100"] for r in rs], marker="o", label=label)
        ax.set_title(f"{key[0]}: {key[1].upper()}")
        ax.legend(fontsize=7)
    return save_figure(fig, out_dir, name)


def figures(records: list[Record], out_dir: Path) -> dict[str, list[Path]]:
    """Precision@100 against beam width and against latency, drawn into ``out_dir`` (where a curve is ok)."""
    curves = _curves(quality_records(records))
    return {name: _figure(curves, x, out_dir, name) for name, x in FIGURES.items()} if curves else {}


def sections(records: list[Record], page: Page) -> list[str]:
    """The quality part of a report: how it was measured, the figures, a section per task, the reading."""
    recs = quality_records(records)
    curves = _curves(recs)
    lines = ["## Does a wider beam buy quality?", "",
             "Two small models trained from scratch on real data, the generative-retrieval way: every identifier's "
             "own text -> itself (indexing) and the train queries are the training data; the measured queries are "
             "held-out strings never seen in training, whose answers are in the library.  Each is decoded at every "
             "beam width: the NAR head's per-step top-K (K = B) searched by the numpy and GPU searchers, and the "
             "AR model's `generate()` with `TrieLogitsProcessor`; each next to the same decoding without the trie, "
             "then keeping whole identifiers.  P@k divides by k, so it is bounded by the relevant identifiers per "
             "query (the ceiling below: every relevant id ranked first); recall leaves out queries without "
             "relevant identifiers; hit@1 is exact match.  Latency: the search per query (NAR), the whole "
             "`generate()` per query (AR).", "", f"Environment: {summary_line(recs[0].env)}", ""]
    for name in FIGURES:
        if name in page.drawn:
            png, svg = page.drawn[name]
            lines += [f"![{name.replace('_', ' ')}]({png.name}) ([SVG]({svg.name}))", ""]
    for task in sorted({r.config["task"] for r in recs}):
        lines += _task_section(task, [r for r in recs if r.config["task"] == task])
    return lines + _reading(curves)


#: The quality suite's metrics (each record: one task, model, backend, mode and beam width).
METRICS = {
    "precision@10": Metric("relevant identifiers among the first 10 results, over 10; mean over the queries",
                           "fraction"),
    "precision@100": Metric("relevant identifiers among the first 100 results, over 100; mean over the queries",
                            "fraction"),
    "precision@100_ceiling": Metric("Precision@100 with every relevant identifier ranked first", "fraction"),
    "recall@10": Metric("relevant identifiers in the first 10 results, over the relevant ones (queries with some)",
                        "fraction"),
    "recall@100": Metric("relevant identifiers in the first 100 results, over the relevant ones (queries with "
                         "some)", "fraction"),
    "exact_match": Metric("hit@1: the first result is relevant", "fraction"),
    "latency_ms_per_query": Metric("the search per query (NAR) or the whole generate() per query (AR)", "ms"),
    "model_ms_per_query": Metric("the NAR head's pass per query that makes the proposals (not in the latency)", "ms"),
    "mean_results": Metric("results per query, mean", "results"),
}

SUITE = register(Suite(name="quality", title="Retrieval quality against beam width", owns=_owns,
                       sections=sections, figures=figures, metrics=METRICS))
