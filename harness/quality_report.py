"""The quality suite's report sections, rendered from the ``kind == "quality"`` records written by
`flashtrie.harness.quality_run`; registered with the report pipeline (`harness/report.py`).

Its sections: the summary (per task and model: Precision@100 at beam 100 and at the widest beam, their
paired-bootstrap difference, and the latency), tasks, data and model sizes, training (with the stopping
rule's evidence), a table per task and model on the held-out pairs and one on the training pairs; its
figures: Precision@100 and Recall@100 against beam width (with 95% intervals), Precision@100 against
latency per query (model plus search), and the training curves.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .env import summary_line
from .plots import new_figure, save_figure
from .quality_metrics import paired_difference
from .records import Record
from .suites import Metric, Page, Suite, register

__all__ = ["SUITE", "sections", "figures", "quality_records", "summary_table"]

_METRICS = ("precision@10", "precision@100", "recall@100", "ndcg@100", "exact_match")


def _owns(r: Record) -> bool:
    """A record of a quality run (kind ``quality``; ``flashtrie bench quality`` writes ``synthetic-quality``)."""
    return r.kind == "quality"


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
    head = f"{'task':<11}{'model':<6}{'backend':<14}{'mode':<22}{'beam':>5}{'P@10':>7}{'P@100':>7}{'R@100':>7}" \
           f"{'hit@1':>7}{'ms/query':>10}"
    lines = [head, "-" * len(head)]
    for r in sorted(recs, key=lambda r: (r.config["task"], r.config["model"], r.backend, r.config["beam_width"])):
        key = (r.config["task"], r.config["model"], r.backend, r.config["mode"])
        beam = r.config["beam_width"]
        if beam not in beams and beam != widest.get(key):
            continue
        row = f"{key[0]:<11}{key[1]:<6}{key[2]:<14}{key[3]:<22}{beam:>5}"
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


def _model_line(m: str, mi: dict[str, Any]) -> str:
    stop = mi.get("stopping_step")
    rule = ""
    if "val_curve" in mi:
        rule = (f"; best validation loss {_fmt(mi.get('best_val_loss'))} at step {mi.get('best_step')} (the model "
                "measured); the stopping rule " + (f"stops at step {stop} of the plan" if stop else
                                                    "does not stop within the plan (not converged by the rule)"))
    return (f"- model {m.upper()}: {mi['parameters']:,} parameters (d {mi['d_model']}, {mi['layers']} layers), "
            f"{mi.get('steps_run', mi['steps'])} of {mi['steps']} planned steps of {mi['batch_size']}, trained in "
            f"{mi['train_seconds']:.1f} s, final training loss {_fmt(mi['final_loss'])}{rule}; checkpoint sha256 "
            f"`{mi['checkpoint_sha256'][:16]}`")


def _table(recs: Sequence[Record], part: str | None) -> list[str]:
    """The metrics of every record (``part``: None for the held-out pairs, ``"train_pairs"``)."""
    head = ["model", "backend", "mode", "beam", *_METRICS, "results", "ms/query", "same as other backend"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(recs, key=lambda r: (r.config["model"], r.backend, r.config["beam_width"])):
        pre = f"| {r.config['model']} | {r.backend} | {r.config['mode']} | {r.config['beam_width']} | "
        met = r.metrics if part is None else r.metrics.get(part)
        if r.status != "ok" or met is None:
            lines.append(pre + " | ".join(["-"] * (len(_METRICS) + 1)) + f" | {r.status}: {r.message or ''} | |")
            continue
        same = r.metrics.get("identical_to_numpy", r.metrics.get("identical_to_gpu", ""))
        lines.append(pre + " | ".join(_ci(met, k) if k != "exact_match" else _fmt(met[k]) for k in _METRICS)
                     + f" | {met.get('mean_results', float('nan')):.1f} | {_latency(r):.3f} | {same} |")
    return lines + [""]


def _task_section(task: str, recs: Sequence[Record]) -> list[str]:
    w = recs[0].workload
    sizes = ", ".join(f"{k} {w[k]:,}" if isinstance(w[k], int) else f"{k} {w[k]:.2f}" for k in
                      ("identifiers", "vocab", "train_queries", "test_queries", "train_pairs", "eval_queries",
                       "test_mean_relevant", "test_median_relevant", "test_max_relevant",
                       "test_precision@100_ceiling", "train_mean_relevant", "train_median_relevant") if k in w)
    info = w.get("task_info", {})
    lib = info.get("library_params", {})
    lines = [f"### Task `{task}`", "",
             f"- source: {info.get('library', '?')} ({lib.get('source', '?')}); {info.get('subset', '')}",
             f"- identifier: {lib.get('identifier', '?')}", f"- relations: {lib.get('queries', '?')}",
             f"- held out: {info.get('held_out', 'query strings')}",
             f"- sizes: {sizes}", ""]
    models: dict[str, dict[str, Any]] = {}
    for r in recs:
        models.setdefault(r.config["model"], r.config["model_info"])
    lines += [_model_line(m, mi) for m, mi in sorted(models.items())]
    rule = next((mi["stopping_rule"] for mi in models.values() if "stopping_rule" in mi), None)
    lines += ([f"- stopping rule: {rule}"] if rule else []) + ["", "Held-out pairs (filtered; 95% bootstrap "
                                                                  "intervals over queries):", ""]
    lines += _table(recs, None)
    if any("train_pairs" in r.metrics for r in recs):
        lines += ["Training pairs of the same queries (their validation and test identifiers removed):", ""]
        lines += _table(recs, "train_pairs")
    return lines


def _main_curve(panel: dict[str, list[Record]]) -> str | None:
    """The constrained curve the summary reads: the GPU's where it ran, else numpy's."""
    for label in ("gpu (constrained)", "hf+gpu (constrained)", "numpy (constrained)", "hf+numpy (constrained)"):
        if label in panel:
            return label
    return None


def _ci(m: dict[str, Any], key: str) -> str:
    """The value with its interval where recorded ("-" where the records predate the metric)."""
    if key not in m:
        return "-"
    lo_hi = m.get(f"{key}_ci")
    return f"{m[key]:.3f} [{lo_hi[0]:.3f}, {lo_hi[1]:.3f}]" if lo_hi else f"{m[key]:.3f}"


def _latency(r: Record) -> float:
    """Milliseconds per query, model plus search (the NAR head's pass is recorded apart)."""
    return float(r.metrics["latency_ms_per_query"]) + float(r.metrics.get("model_ms_per_query", 0.0))


def _summary(curves: dict[tuple[str, str], dict[str, list[Record]]]) -> list[str]:
    """One line per task and model: does P@100 rise from beam 100 to the widest beam, by how much, at
    what latency; and the same decoding without the trie at the widest beam both reached."""
    lines = ["### Summary: does P@100 rise from beam 100 to 1,000?", "",
             "Held-out pairs, filtered setting; the difference is the paired bootstrap over the same queries "
             "(95% interval); latency per query is model plus search.", "",
             "| task | model, decoding | P@100 at 100 | P@100 at widest (beam) | difference [95% CI] | ceiling "
             "| ms/query at 100 / widest | without the trie, P@100 at that beam |", "|---|---|---|---|---|---|---|---|"]
    for (task, model), panel in sorted(curves.items()):
        label = _main_curve(panel)
        if label is None:
            continue
        at = {r.config["beam_width"]: r for r in panel[label]}
        wide = max(at)
        if 100 not in at or wide <= 100:
            lines.append(f"| {task} | {model.upper()}, {label} | - | {at[wide].metrics['precision@100']:.3f} ({wide}) "
                         "| not measured at both beams | | | |")
            continue
        a, b = at[100].metrics, at[wide].metrics
        if "per_query" in a and "per_query" in b:
            d, lo, hi = paired_difference(a["per_query"]["precision@100"], b["per_query"]["precision@100"])
            diff = f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]"
        else:
            diff = f"{b['precision@100'] - a['precision@100']:+.3f} (no per-query values recorded)"
        unc = {r.config["beam_width"]: r for lab, rs in panel.items() if "unconstrained" in lab for r in rs}
        free = f"{unc[wide].metrics['precision@100']:.3f}" if wide in unc else "not measured"
        lines.append(f"| {task} | {model.upper()}, {label} | {_ci(a, 'precision@100')} | "
                     f"{_ci(b, 'precision@100')} ({wide}) | {diff} | "
                     f"{a.get('precision@100_ceiling', float('nan')):.3f} | {_latency(at[100]):.3f} / "
                     f"{_latency(at[wide]):.3f} | {free} |")
    return lines + [""]


#: The figures: name -> (metric, x axis).
FIGURES = {"precision_vs_beam": ("precision@100", "beam"), "recall_vs_beam": ("recall@100", "beam"),
           "precision_vs_latency": ("precision@100", "latency")}
_NAMES = {"precision@100": "Precision@100", "recall@100": "Recall@100"}


def _figure(curves: dict[tuple[str, str], dict[str, list[Record]]], metric: str, x: str, out_dir: Path, name: str
            ) -> list[Path]:
    keys = sorted(curves)
    fig, axes = new_figure(f"{_NAMES[metric]} (held-out pairs, 95% CI) against "
                           f"{'beam width' if x == 'beam' else 'latency per query (model + search)'}",
                           "beam width" if x == "beam" else "ms per query", _NAMES[metric], logy=False,
                           ncols=len(keys))
    for ax, key in zip(axes, keys, strict=True):
        for label, rs in sorted(curves[key].items()):
            xs = [r.config["beam_width"] if x == "beam" else _latency(r) for r in rs]
            ys = [r.metrics[metric] for r in rs]
            ax.plot(xs, ys, marker="o", label=label)
            ci = [r.metrics[f"{metric}_ci"] for r in rs if f"{metric}_ci" in r.metrics]
            if len(ci) == len(rs):
                ax.fill_between(xs, [c[0] for c in ci], [c[1] for c in ci], alpha=0.15)
        ceiling = next((r.metrics.get(f"{metric}_ceiling") for rs in curves[key].values() for r in rs), None)
        if isinstance(ceiling, float):
            ax.axhline(ceiling, color="grey", linestyle=":", label="ceiling")
        ax.set_title(f"{key[0]}: {key[1].upper()}")
        ax.legend(fontsize=7)
    return save_figure(fig, out_dir, name)


def _training_figure(recs: Sequence[Record], out_dir: Path) -> list[Path]:
    """Training and validation loss against step, one panel per task and model."""
    models: dict[tuple[str, str], dict[str, Any]] = {}
    for r in recs:
        models.setdefault((r.config["task"], r.config["model"]), r.config["model_info"])
    keys = [k for k in sorted(models) if models[k].get("val_curve")]
    if not keys:
        return []
    fig, axes = new_figure("Training curves (the line: the step of the best validation loss)", "step",
                           "cross-entropy", logx=False, logy=True, ncols=len(keys))
    for ax, key in zip(axes, keys, strict=True):
        mi = models[key]
        for curve, label in ((mi.get("train_curve") or [], "training"), (mi["val_curve"], "validation")):
            ax.plot([c[0] for c in curve], [c[1] for c in curve], label=label)
        if mi.get("best_step"):
            ax.axvline(mi["best_step"], color="grey", linestyle=":")
        ax.set_title(f"{key[0]}: {key[1].upper()}")
        ax.legend(fontsize=7)
    return save_figure(fig, out_dir, "training_curves")


def figures(records: list[Record], out_dir: Path) -> dict[str, list[Path]]:
    """The quality figures, drawn into ``out_dir`` (where a curve is ok)."""
    recs = quality_records(records)
    curves = _curves(recs)
    if not curves:
        return {}
    out = {name: _figure(curves, metric, x, out_dir, name) for name, (metric, x) in FIGURES.items()}
    drawn = _training_figure(recs, out_dir)
    if drawn:
        out["training_curves"] = drawn
    return out


def sections(records: list[Record], page: Page) -> list[str]:
    """The quality part of a report: how it was measured, the summary, the figures, a section per task."""
    recs = quality_records(records)
    curves = _curves(recs)
    lines = ["## Does a wider beam buy quality?", "",
             "Two small models trained from scratch on real data, the generative-retrieval way: every identifier's "
             "own text -> itself (indexing) and the training pairs (query -> relevant identifier) are the training "
             "data.  Group tasks hold out (query, identifier) pairs: every query is trained with part of its "
             "identifiers and measured on the others, in the filtered setting (a query's training and validation "
             "identifiers are removed from its ranked list and are not in its relevant set); string tasks hold out "
             "query strings.  Each model is decoded at every beam width B, returning B results per query: the NAR "
             "head's per-step top-K (K = B) searched by the numpy and GPU searchers, and the AR model's "
             "`generate()` with `TrieLogitsProcessor`; each next to the same decoding without the trie, then "
             "keeping whole identifiers.  Metrics as `flashtrie.harness.quality_metrics` defines them: P@k divides "
             "by k, so it is bounded by the relevant identifiers per query (the ceiling: every relevant id ranked "
             "first); nDCG@k has binary gains; hit@1 is exact match.  Latency per query: the NAR head's pass plus "
             "the search; the whole `generate()` (AR).", "", f"Environment: {summary_line(recs[0].env)}", ""]
    lines += _summary(curves)
    for name in [*FIGURES, "training_curves"]:
        if name in page.drawn:
            png, svg = page.drawn[name]
            lines += [f"![{name.replace('_', ' ')}]({png.name}) ([SVG]({svg.name}))", ""]
    for task in sorted({r.config["task"] for r in recs}):
        lines += _task_section(task, [r for r in recs if r.config["task"] == task])
    return lines


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
    "ndcg@100": Metric("nDCG@100 with binary gains (queries with relevant identifiers)", "fraction"),
    "ndcg@10": Metric("nDCG@10 with binary gains (queries with relevant identifiers)", "fraction"),
    "exact_match": Metric("hit@1: the first result is relevant", "fraction"),
    "latency_ms_per_query": Metric("the search per query (NAR) or the whole generate() per query (AR)", "ms"),
    "model_ms_per_query": Metric("the NAR head's pass per query that makes the proposals (added to the search's "
                                 "latency in the summary and figures)", "ms"),
    "mean_results": Metric("results per query, mean", "results"),
}

SUITE = register(Suite(name="quality", title="Retrieval quality against beam width", owns=_owns,
                       sections=sections, figures=figures, metrics=METRICS))
