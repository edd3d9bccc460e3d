"""Timing, the lab's one module for it: the loop that times a searcher (warm-up, passes over batches, a time
budget), host timing of any call, device timing by CUDA events and CUDA-graph replay, and summary statistics.

Percentiles, everywhere in the lab: linear interpolation between the closest ranks (``numpy.percentile``'s
default), so the p50 of an even sample is the mean of its two middle values.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from flashtrie.progress import progress
from flashtrie.search_types import SearchResult

from .lab_deps import lab_module

__all__ = ["Stats", "Timing", "TimingPlan", "OverBudget", "summarize", "time_searcher", "device_ms_of", "breakdown_of",
           "percentiles", "sample_stats", "host_us", "busy", "graph_us", "stream_us", "GRAPH_REPLAYS", "GRAPH_BLOCKS",
           "WARM_S"]


@dataclass(frozen=True)
class Stats:
    """Summary of a sample of durations in milliseconds; ``ci95_*`` bound the mean (Student t, computed when
    asked: scipy is a dependency of the lab, and the library's commands read only the mean and percentiles)."""

    n: int
    mean: float
    median: float
    p90: float
    p99: float
    std: float
    min: float
    max: float

    @property
    def ci95_half(self) -> float:
        """``t(0.975, n-1) · std / sqrt(n)``; 0 with one sample or no spread."""
        if self.n < 2 or self.std <= 0:
            return 0.0
        t = lab_module("scipy.stats").t
        return float(t.ppf(0.975, self.n - 1)) * self.std / math.sqrt(self.n)

    @property
    def ci95_low(self) -> float:
        return self.mean - self.ci95_half

    @property
    def ci95_high(self) -> float:
        return self.mean + self.ci95_half

    def to_dict(self) -> dict[str, float | int]:
        return {**asdict(self), "ci95_low": self.ci95_low, "ci95_high": self.ci95_high}


def percentiles(samples: Sequence[float] | np.ndarray, qs: Sequence[float]) -> list[float]:
    """The ``qs`` percentiles (0-100) of ``samples``: the lab's one definition (module docstring)."""
    return [float(v) for v in np.percentile(np.asarray(samples, dtype=np.float64), list(qs))]


def sample_stats(samples: Sequence[float]) -> dict[str, float]:
    """Mean, p50 and p99 of a sample (per-call µs of the stepwise suite)."""
    p50, p99 = percentiles(samples, [50, 99])
    return {"mean": statistics.fmean(samples), "p50": p50, "p99": p99}


def summarize(samples_ms: np.ndarray | list[float]) -> Stats:
    """Mean, median, p90, p99 (linear interpolation), sample std, min, max and a 95 % CI of the mean.

    The interval is ``mean ± t(0.975, n-1) · std / sqrt(n)``; with one sample it collapses to the mean.
    """
    x = np.asarray(samples_ms, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"samples_ms: expected a non-empty 1-D sample, got shape {x.shape}")
    n = int(x.size)
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if n > 1 else 0.0
    p50, p90, p99 = percentiles(x, [50, 90, 99])
    return Stats(n=n, mean=mean, median=p50, p90=p90, p99=p99, std=std, min=float(x.min()), max=float(x.max()))


def device_ms_of(obj: object) -> float | None:
    """The device time of the last call, when the backend exposes one as ``last_device_ms``."""
    v = getattr(obj, "last_device_ms", None)
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def breakdown_of(obj: object) -> dict[str, float]:
    """The host-side parts of the last call (``last_breakdown``: e.g. the GPU's prep / enqueue / wait /
    post milliseconds), finite numbers only; empty when the backend reports none."""
    raw = getattr(obj, "last_breakdown", None)
    if not isinstance(raw, dict):
        return {}
    out: dict[str, float] = {}
    for k, v in raw.items():
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f):
            out[str(k)] = f
    return out


@dataclass
class Timing:
    """Raw per-call samples of one timed searcher.

    ``wall`` and ``device`` summarise them (device is None when the backend reports no device time);
    ``breakdown_ms`` holds the host-side parts per call (`breakdown_of`), ``first_pass`` the results of
    the first timed pass over the batches, stacked (for parity checks).
    """

    wall_ms: list[float]
    device_ms: list[float]
    warmup: int
    first_pass: SearchResult | None = None
    breakdown_ms: dict[str, list[float]] = field(default_factory=dict)

    @property
    def wall(self) -> Stats:
        return summarize(self.wall_ms)

    @property
    def device(self) -> Stats | None:
        return summarize(self.device_ms) if self.device_ms else None

    def breakdown_means(self) -> dict[str, float]:
        """Mean of each host-side part over the timed calls (``{"prep_ms": ..., ...}``)."""
        return {k: float(np.mean(v)) for k, v in self.breakdown_ms.items() if v}


class OverBudget(Exception):
    """A measured call showed that one pass over the batches would take over the time budget."""


@dataclass(frozen=True)
class TimingPlan:
    """How to time: ``warmup`` untimed calls (cycling over the batches), then passes over the batches until
    ``repeats`` passes or, after the first full pass, ``max_seconds``.  ``budget_s``: refuse (`OverBudget`)
    when the last warmup call (the first timed call without warmup) times the number of batches exceeds it."""

    warmup: int = 2
    repeats: int = 10
    max_seconds: float | None = None
    budget_s: float | None = None


def _check_budget(call_s: float, calls: int, plan: TimingPlan) -> None:
    if plan.budget_s is not None and call_s * calls > plan.budget_s:
        raise OverBudget(f"one call took {call_s:.3g} s, so one pass over {calls} calls would take about "
                         f"{call_s * calls:.3g} s, over the {plan.budget_s:g} s that --max-seconds allows (raise it to "
                         "time it)")


def time_searcher(searcher: Any, batches: Sequence[Any], config: Any, plan: TimingPlan = TimingPlan(), *,
                  desc: str | None = None) -> Timing:
    """The one timing loop of the harness (CLI ``search``/``parity``/``demo``, every sweep, the GPU runs).

    Each timed sample is one ``searcher.search(batch, config)`` call, host wall-clock (``perf_counter_ns``),
    with the backend's ``last_device_ms`` and ``last_breakdown`` read after it when it has them.  ``desc``
    shows a progress bar over the calls of the first pass.
    """
    if not batches:
        raise ValueError("batches: expected at least one batch to time")
    n = len(batches)
    for i in range(plan.warmup):
        t0 = time.perf_counter()
        searcher.search(batches[i % n], config)
        if i == plan.warmup - 1:
            _check_budget(time.perf_counter() - t0, n, plan)
    wall: list[float] = []
    device: list[float] = []
    parts: dict[str, list[float]] = {}
    first: list[SearchResult] = []
    start = time.perf_counter()
    for rep in range(max(plan.repeats, 1)):
        calls = batches
        if rep == 0 and desc is not None:
            calls = progress(batches, desc=desc, unit="call", leave=False)
        for b in calls:
            t0 = time.perf_counter_ns()
            res = searcher.search(b, config)
            wall.append((time.perf_counter_ns() - t0) / 1e6)
            if plan.warmup == 0 and len(wall) == 1:
                _check_budget(wall[0] / 1000.0, n, plan)
            d = device_ms_of(searcher)
            if d is not None:
                device.append(d)
            for k, v in breakdown_of(searcher).items():
                parts.setdefault(k, []).append(v)
            if rep == 0:
                first.append(res)
        if plan.max_seconds is not None and time.perf_counter() - start > plan.max_seconds:
            break
    return Timing(wall_ms=wall, device_ms=device, warmup=plan.warmup, first_pass=SearchResult.concat(first),
                  breakdown_ms=parts)


# ------------------------------------------------------------------------------ any call, host and device
WARM_S = 0.03  # seconds of calls (or graph replays) before each timed loop: clocks up, caches warm
GRAPH_REPLAYS = 200  # replays of a one-step graph per timed block (fewer where a step is long: about 0.1 s)
GRAPH_BLOCKS = 3  # timed blocks per graph measurement: the median is reported


def _synchronize() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def busy(f: Callable[[], Any], seconds: float = WARM_S) -> None:
    """Call ``f`` for about ``seconds`` (at least 5 times), then synchronise the device."""
    t_end, k = time.perf_counter() + seconds, 0
    while k < 5 or time.perf_counter() < t_end:
        f()
        k += 1
    _synchronize()


def host_us(f: Callable[[], Any], repeats: int, *, sync: bool = False) -> list[float]:
    """Host wall µs of ``repeats`` calls of ``f`` (``sync``: each followed by a device synchronisation), with the
    garbage collector off during the loop (as timeit does)."""
    gc_was = gc.isenabled()
    gc.disable()
    try:
        out = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            f()
            if sync:
                _synchronize()
            out.append((time.perf_counter() - t0) * 1e6)
    finally:
        if gc_was:
            gc.enable()
    return out


def stream_us(f: Callable[[], Any], repeats: int) -> float:
    """Device µs per call of ``f`` by CUDA events around ``repeats`` eager calls (launch gaps included)."""
    import torch

    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(repeats):
        f()
    e1.record()
    torch.cuda.synchronize()
    return float(e0.elapsed_time(e1)) * 1e3 / repeats


def graph_us(f: Callable[[], Any], replays: int, inner: int = 1, blocks: int = GRAPH_BLOCKS) -> float:
    """Device µs per call of ``f``: CUDA events around ``replays`` back-to-back replays of a CUDA graph of
    ``inner`` calls of ``f`` (1: one call per graph, a graph launch between calls), after ``WARM_S`` of replays;
    the median of ``blocks`` such timings."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        f()
        with torch.cuda.graph(g, stream=side):
            for _ in range(inner):
                f()
    torch.cuda.synchronize()
    busy(g.replay)
    times = []
    for _ in range(blocks):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(replays):
            g.replay()
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1) * 1e3 / (replays * inner))
    return statistics.median(times)
