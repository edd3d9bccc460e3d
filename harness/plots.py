"""Figures drawn from stored records only (PNG and SVG, matplotlib's Agg canvas, no pyplot state)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from .lab_deps import lab_module

matplotlib = lab_module("matplotlib")
matplotlib.use("Agg")

from matplotlib.figure import Figure  # noqa: E402

from .backends import BASELINE  # noqa: E402
from .records import Record  # noqa: E402
from .select import bytes_per_unique_keyword, groups_of, latest_builds, num_keywords, series, workload_group  # noqa: E402

__all__ = ["plot_all", "FIGURES", "plain_number", "new_figure", "save_figure"]

_STYLE = {"marisa": ("tab:gray", "o"), "marisa-lookup": ("tab:brown", "D"), "numpy": ("tab:blue", "s"),
          "gpu": ("tab:green", "^"),
          "narrow-louds": ("tab:blue", "s"), "marisa-trie": ("tab:gray", "o"),
          "unconstrained": ("tab:red", "v")}


def _color(name: str) -> tuple[str | None, str]:
    return _STYLE.get(name.split(" ")[0], (None, "D"))


def _batch_label(r: Record) -> str:
    b = r.config.get("batch_size", 1)
    return r.backend if b in (None, 1) else f"{r.backend} (batch {b})"


def _metric(name: str, r: Record) -> Any:
    return r.metrics[name]


def save_figure(fig: Figure, out_dir: Path, name: str, *, ticks: bool = True) -> list[Path]:
    """Write ``name``.png and .svg, each to a temporary file in ``out_dir`` renamed over the target
    (`flashtrie.io_util.atomic_write_with`), so a crash never leaves half a figure; the SVG without a date and
    with a fixed hash salt (the same records, the same bytes).  ``ticks``: plain tick labels on every axis."""
    from flashtrie.io_util import atomic_write_with

    if ticks:
        for ax in fig.axes:
            _readable_ticks(ax)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    with matplotlib.rc_context({"svg.hashsalt": "flashtrie.scale_report"}):
        for ext in ("png", "svg"):
            p = out_dir / f"{name}.{ext}"
            meta = {"Date": None} if ext == "svg" else {}
            atomic_write_with(p, partial(fig.savefig, format=ext, dpi=130 if ext == "png" else None,
                                         bbox_inches="tight", metadata=meta))
            paths.append(p)
    return paths


def plain_number(v: float) -> str:
    """A tick label without exponents: 0.6, 25, 1,000 -> "1k", 10,000,000 -> "10M"."""
    for unit, word in ((1e6, "M"), (1e3, "k")):
        if abs(v) >= unit and (v / unit) == round(v / unit, 1):
            return f"{v / unit:g}{word}"
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"


def _log_ticks(lo: float, hi: float) -> list[float]:
    """1-2-5 ticks inside [lo, hi] (positive); 1-9 ticks when fewer than two 1-2-5 values lie inside, and
    the data's ends when even those do not."""
    import math

    for mantissas in ((1, 2, 5), (1, 1.5, 2, 3, 4, 5, 6, 7, 8, 9)):
        ticks = [float(f"{m * 10.0 ** e:.3g}") for e in range(math.floor(math.log10(lo)) - 1,
                                                              math.ceil(math.log10(hi)) + 1) for m in mantissas]
        inside = [t for t in ticks if lo * 0.999 <= t <= hi * 1.001]
        if len(inside) >= 2:
            return inside
    return sorted({float(f"{lo:.2g}"), float(f"{hi:.2g}")})


def _readable_ticks(ax: Any) -> None:
    """Plain labels at readable places on the log axes of ``ax``: the x axis at the measured values (when
    there are few), the y axis at 1-2-5 values inside the data; no minor labels (no ``6×10⁻¹``)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    lines = [ln for ln in ax.get_lines() if len(ln.get_xdata()) and not ln.get_label().startswith("_")]
    if not lines:
        return
    fmt = FuncFormatter(lambda v, _pos: plain_number(v))
    for axis, scale, values in ((ax.xaxis, ax.get_xscale(), [v for ln in lines for v in ln.get_xdata()]),
                                (ax.yaxis, ax.get_yscale(), [v for ln in lines for v in ln.get_ydata()])):
        pos = sorted({float(v) for v in values if float(v) > 0})
        if scale != "log" or not pos:
            continue
        ticks = pos if axis is ax.xaxis and len(pos) <= 12 else _log_ticks(pos[0], pos[-1])
        axis.set_major_locator(FixedLocator(ticks))
        axis.set_major_formatter(fmt)
        axis.set_minor_formatter(NullFormatter())


def _axes_lines(ax: Any, data: dict[str, list[tuple[float, float]]], dashed: bool = False, suffix: str = "") -> None:
    for name, pts in data.items():
        c, m = _color(name)
        xs, ys = zip(*pts, strict=True)
        ax.plot(xs, ys, marker=m, color=c, linestyle="--" if dashed else "-", label=f"{name}{suffix}",
                alpha=0.7 if dashed else 1.0)


def _legend(ax: Any, size: int) -> None:
    """A legend when the axes hold labelled lines (matplotlib warns about an empty one)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=size)


def new_figure(title: str, xlabel: str, ylabel: str, logx: bool = True, logy: bool = True, ncols: int = 1
         ) -> tuple[Figure, list[Any]]:
    fig = Figure(figsize=(6.4 * ncols, 4.2), layout="constrained")
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    for ax in axes:
        if logx:
            ax.set_xscale("log")
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(title)
    return fig, axes


def _beam_records(records: Sequence[Record]) -> list[Record]:
    return [r for r in records if r.kind == "latency" and r.sweep == "beam_width"]


def latency_vs_beam(records: Sequence[Record], out_dir: Path) -> list[Path]:
    """One panel per workload (preset, library size): mean and p99 per backend."""
    recs = _beam_records(records)
    groups = groups_of(recs)
    if not recs:
        return []
    bw = lambda r: r.config["beam_width"]  # noqa: E731
    fig, axes = new_figure("Latency per call vs beam width (K = beam width)", "beam width B", "ms per call",
                     ncols=len(groups))
    for ax, g in zip(axes, groups, strict=True):
        sub = [r for r in recs if workload_group(r) == g]
        _axes_lines(ax, series(sub, "latency", "beam_width", bw, lambda r: r.metrics["mean_ms"], _batch_label),
                    suffix=" mean")
        _axes_lines(ax, series(sub, "latency", "beam_width", bw, lambda r: r.metrics["p99_ms"], _batch_label),
                    dashed=True, suffix=" p99")
        ax.set_title(g, fontsize=9)
        _legend(ax, 8)
    return save_figure(fig, out_dir, "latency_vs_beam")


def speedup_vs_beam(records: Sequence[Record], out_dir: Path) -> list[Path]:
    """One panel per workload: each backend's speed-up over marisa measured in the same run."""
    recs = _beam_records(records)
    groups = [g for g in groups_of(recs)
              if any(r.metrics.get("speedup_vs_marisa") for r in recs if workload_group(r) == g)]
    if not groups:
        return []
    fig, axes = new_figure("Speed-up over the marisa-trie baseline (same run)", "beam width B",
                     "speed-up (marisa mean / backend mean)", ncols=len(groups))
    for ax, g in zip(axes, groups, strict=True):
        sub = [r for r in recs if workload_group(r) == g]
        data = series(sub, "latency", "beam_width", lambda r: r.config["beam_width"],
                      lambda r: r.metrics["speedup_vs_marisa"], _batch_label)
        _axes_lines(ax, {k: v for k, v in data.items() if k.split(" ")[0] != BASELINE})
        ax.axhline(1.0, color="k", linewidth=0.8)
        ax.annotate(f"1x = baseline ({BASELINE})", xy=(0.01, 1.0), xycoords=ax.get_yaxis_transform(), va="bottom",
                    fontsize=8)
        ax.set_title(g, fontsize=9)
        _legend(ax, 8)
    return save_figure(fig, out_dir, "speedup_vs_beam")


def latency_vs_library(records: Sequence[Record], out_dir: Path) -> list[Path]:
    mean = series(records, "latency", "library_size", num_keywords, lambda r: r.metrics["mean_ms"])
    p99 = series(records, "latency", "library_size", num_keywords, lambda r: r.metrics["p99_ms"])
    if not mean:
        return []
    fig, (ax,) = new_figure("Latency per call vs library size", "keywords", "ms per call")
    _axes_lines(ax, mean, suffix=" mean")
    _axes_lines(ax, p99, dashed=True, suffix=" p99")
    _legend(ax, 8)
    return save_figure(fig, out_dir, "latency_vs_library_size")


def throughput_vs_batch(records: Sequence[Record], out_dir: Path) -> list[Path]:
    data = series(records, "throughput", "batch_size", lambda r: r.config["batch_size"],
                  lambda r: r.metrics["throughput_qps"])
    if not data:
        return []
    fig, (ax,) = new_figure("Throughput vs batch size", "queries per call (batch size)", "queries per second")
    ax.set_title("; ".join(groups_of([r for r in records if r.kind == "throughput"])), fontsize=9)
    _axes_lines(ax, data)
    _legend(ax, 8)
    return save_figure(fig, out_dir, "throughput_vs_batch")


def quality_vs_beam(records: Sequence[Record], out_dir: Path) -> list[Path]:
    qrecs = [r for r in records if r.kind == "synthetic-quality" and r.status == "ok"]
    ks = sorted({int(m.split("@")[1]) for r in qrecs for m in r.metrics if m.startswith("precision@")})
    if not ks:
        return []
    fig, axes = new_figure("Retrieval quality vs beam width", "beam width B", "", logy=False, ncols=2)
    for ax, metric in zip(axes, ("precision", "recall"), strict=True):
        ax.set_ylabel(f"{metric.capitalize()}@k")
        for k in ks:
            data = series(records, "synthetic-quality", "beam_width", lambda r: r.config["beam_width"],
                          partial(_metric, f"{metric}@{k}"),
                          lambda r: r.config.get("mode", r.backend))
            for name, pts in data.items():
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, marker="o" if name.startswith("constrained") else "v",
                        linestyle="-" if name.startswith("constrained") else "--", label=f"{name}, k={k}")
        ax.set_ylim(0, 1.02)
        _legend(ax, 7)
    return save_figure(fig, out_dir, "quality_vs_beam")


def build_vs_marisa(records: Sequence[Record], out_dir: Path) -> list[Path]:
    """One point per structure and library size: the latest run's (the report's table lists every run).
    Records of a single library size are drawn as bars (a line over one size would be lone points)."""
    recs = latest_builds(records)
    t = series(recs, "build", None, num_keywords, lambda r: r.metrics["build_s"])
    b = series(recs, "build", None, num_keywords, bytes_per_unique_keyword)
    if not t:
        return []
    sizes = sorted({x for pts in t.values() for x, _ in pts})
    one = len(sizes) == 1
    title = "Build time and size: narrow-LOUDS index vs marisa-trie BinaryTrie"
    fig, (ax1, ax2) = new_figure(title + (f" ({plain_number(sizes[0])} keywords)" if one else ""),
                           "structure" if one else "keywords", "", logx=not one, logy=not one, ncols=2)
    ax1.set_ylabel("build seconds")
    ax2.set_ylabel("serialized bytes per unique keyword")
    ax2.set_yscale("linear")
    if one:
        for ax, data in ((ax1, t), (ax2, b)):
            names = list(data)
            ax.bar(names, [data[n][0][1] for n in names], color=[_color(n)[0] for n in names])
            ax.grid(True, axis="y", alpha=0.3)
    else:
        _axes_lines(ax1, t)
        _axes_lines(ax2, b)
        _legend(ax1, 8)
        _legend(ax2, 8)
    return save_figure(fig, out_dir, "build_vs_marisa")


FIGURES: dict[str, tuple[str, Callable[[Sequence[Record], Path], list[Path]]]] = {
    "latency_vs_beam": ("Latency (mean and p99) vs beam width", latency_vs_beam),
    "speedup_vs_beam": ("Speed-up over marisa vs beam width", speedup_vs_beam),
    "latency_vs_library_size": ("Latency vs library size", latency_vs_library),
    "throughput_vs_batch": ("Throughput vs batch size", throughput_vs_batch),
    "quality_vs_beam": ("Quality vs beam width", quality_vs_beam),
    "build_vs_marisa": ("Build time and bytes per unique keyword vs marisa-trie", build_vs_marisa),
}


def plot_all(records: Sequence[Record], out_dir: str | Path) -> dict[str, list[Path]]:
    """Draw every figure the records have data for; {figure name: [png, svg]}."""
    out = Path(out_dir)
    drawn: dict[str, list[Path]] = {}
    for name, (_, fn) in FIGURES.items():
        paths = fn(records, out)
        if paths:
            drawn[name] = paths
    return drawn
