"""The figures of the scale report, from the records only: PNG and SVG, matplotlib's Agg canvas.

* `curve_plot`: latency per call against the library size at batch 1, the GPU at every beam width and
  numpy / marisa-trie where the records measured them; mean and p99 side by side, log-log.
* `stage_plot`: the stage seconds at the largest size, the build split into its sub-stages.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from flashtrie.harness.plots import plain_number, save_figure
from flashtrie.harness.records import Record

__all__ = ["curve_plot", "stage_plot", "curve_series", "process_of", "size_of", "ticks_125", "CURVE_NAME"]

CURVE_NAME = "latency_vs_size"
#: The pipeline's module, as earlier records name it (``python -m MODULE PROCESS``; now ``flashtrie bench
#: scale-step PROCESS``), the first its former place in the lab, the second in the GPU backend.
MODULES = ("flashtrie.harness.scale", "flashtrie.gpu_impl.scale_stages")
_STYLE = {"gpu": ("-", "^"), "numpy": ("--", "s"), "marisa": (":", "o")}


def _n_text(n: int) -> str:
    return plain_number(float(n))


def size_of(r: Record) -> int | None:
    """Library size of a stage record (``N``) or of a latency record (``library_size``)."""
    w = r.workload
    n = w.get("N", w.get("library_size", w.get("num_keywords")))
    return int(n) if isinstance(n, (int, float)) else None


def curve_series(records: Sequence[Record], metric: str = "mean_ms", batch: int = 1
                 ) -> dict[tuple[str, int], list[tuple[int, float]]]:
    """{(backend, beam): [(library size, value)] by size}: the last ok latency record of each point."""
    points: dict[tuple[str, int], dict[int, float]] = {}
    for r in records:
        if r.kind != "latency" or r.status != "ok" or r.config.get("batch_size", 1) != batch:
            continue
        n, beam, v = size_of(r), r.config.get("beam_width"), r.metrics.get(metric)
        if n is None or not isinstance(beam, int) or not isinstance(v, (int, float)):
            continue
        points.setdefault((r.backend, beam), {})[n] = float(v)
    return {k: sorted(v.items()) for k, v in sorted(points.items(), key=lambda kv: (_order(kv[0][0]), kv[0][1]))}


def ticks_125(lo: float, hi: float) -> list[float]:
    """1-2-5 values inside [lo, hi] (positive), with the decade below and above when fewer than 3 fall inside."""
    import math

    vals = [m * 10.0 ** e for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 2)
            for m in (1, 2, 5)]
    inside = [float(f"{v:.3g}") for v in vals if lo * 0.999 <= v <= hi * 1.001]
    if len(inside) >= 3:
        return inside
    below = [v for v in vals if v < lo][-1:]
    above = [v for v in vals if v > hi][:1]
    return [float(f"{v:.3g}") for v in below + inside + above]


def _order(backend: str) -> int:
    return list(_STYLE).index(backend) if backend in _STYLE else len(_STYLE)


def curve_plot(records: Sequence[Record], out_dir: Path) -> list[Path]:
    """``latency_vs_size.png`` / ``.svg``; [] when no latency record is ok."""
    panels = [("mean_ms", "mean latency per call (ms)"), ("p99_ms", "p99 latency per call (ms)")]
    data = [curve_series(records, metric) for metric, _ in panels]
    if not any(data):
        return []
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    beams = sorted({beam for series in data for _, beam in series})
    colours = {b: matplotlib.colormaps["viridis"](i / max(len(beams) - 1, 1)) for i, b in enumerate(beams)}
    fig = Figure(figsize=(12.5, 4.6), layout="constrained")
    sizes = sorted({n for series in data for pts in series.values() for n, _ in pts})
    for i, ((_, label), series) in enumerate(zip(panels, data, strict=True)):
        ax = fig.add_subplot(1, 2, i + 1)
        for (backend, beam), pts in series.items():
            style, marker = _STYLE.get(backend, ("-.", "D"))
            xs, ys = zip(*pts, strict=True)
            ax.plot(xs, ys, linestyle=style, marker=marker, color=colours[beam], label=f"{backend}, beam {beam}",
                    alpha=1.0 if backend == "gpu" else 0.75)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(FixedLocator([float(n) for n in sizes]))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: plain_number(v)))
        ax.xaxis.set_minor_formatter(NullFormatter())
        shown = [v for pts in series.values() for _, v in pts if v > 0]
        if shown:
            ax.yaxis.set_major_locator(FixedLocator(ticks_125(min(shown), max(shown))))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: plain_number(v)))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("library size (keywords)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        if i == 1:
            ax.legend(fontsize=7, ncols=2 if len(series) > 8 else 1, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.suptitle("Search latency vs library size, batch 1, K = beam, host arrays in and out")
    return save_figure(fig, out_dir, CURVE_NAME, ticks=False)


def stage_plot(records: Sequence[Record], out_dir: Path) -> list[Path]:
    """Stage seconds at the largest size with two or more ok stages, the build split into its sub-stages."""
    recs = [r for r in records if r.sweep == "scale" and r.kind == "build"]
    top = max((size_of(r) or 0 for r in recs), default=0)
    at = [r for r in recs if size_of(r) == top and r.status == "ok"]
    if len(at) < 2:
        return []
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    bars: list[tuple[str, float, str]] = []
    for r in at:
        stage = r.config.get("stage", "?")
        if stage == "build" and r.metrics.get("stages"):
            bars += [(f"build: {name}", float(sec), "tab:green") for name, sec in r.metrics["stages"]]
        else:
            step = process_of(r)
            bars.append((f"{stage} ({step})" if step else stage, float(r.metrics["seconds"]), "tab:blue"))
    fig = Figure(figsize=(7, 0.35 * len(bars) + 1.2))
    ax = fig.add_subplot()
    ys = list(range(len(bars)))[::-1]
    ax.barh(ys, [b[1] for b in bars], color=[b[2] for b in bars])
    ax.set_yticks(ys, [b[0] for b in bars])
    ax.set_xlabel("seconds")
    ax.set_title(f"Stage times at {_n_text(top)} keywords (build split into its sub-stages)")
    ax.grid(axis="x", alpha=0.3)
    return save_figure(fig, out_dir, f"stages_{_n_text(top)}", ticks=False)


def process_of(r: Record) -> str | None:
    """The pipeline process a record came from (``prepare``, ``serve``, ``gen`` ...)."""
    cmd = r.command
    if len(cmd) > 3 and (cmd[:3] == ["flashtrie", "bench", "scale-step"]
                         or (cmd[:2] == ["python", "-m"] and cmd[2] in MODULES)):
        return cmd[3]
    return None
