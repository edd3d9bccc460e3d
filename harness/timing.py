"""Wall-clock (and optional device) timing with warm-up, repetitions and summary statistics."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = ["Stats", "Timing", "summarize", "time_calls", "device_ms_of"]


@dataclass(frozen=True)
class Stats:
    """Summary of a sample of durations in milliseconds; ``ci95_*`` bound the mean (Student t)."""

    n: int
    mean: float
    median: float
    p90: float
    p99: float
    std: float
    min: float
    max: float
    ci95_low: float
    ci95_high: float

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


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
    if n > 1 and std > 0:
        from scipy import stats as st

        half = float(st.t.ppf(0.975, n - 1)) * std / math.sqrt(n)
    else:
        half = 0.0
    p50, p90, p99 = (float(v) for v in np.percentile(x, [50, 90, 99]))
    return Stats(n=n, mean=mean, median=p50, p90=p90, p99=p99, std=std, min=float(x.min()), max=float(x.max()),
                 ci95_low=mean - half, ci95_high=mean + half)


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


@dataclass
class Timing:
    """Raw per-call samples; ``wall`` and ``device`` summarise them (device is None when not reported)."""

    wall_ms: list[float]
    device_ms: list[float]
    warmup: int
    last_result: Any = None

    @property
    def wall(self) -> Stats:
        return summarize(self.wall_ms)

    @property
    def device(self) -> Stats | None:
        return summarize(self.device_ms) if self.device_ms else None


def time_calls(fn: Callable[[], Any], *, warmup: int = 2, repeats: int = 20, min_repeats: int = 3,
               max_seconds: float | None = None, device_hook: Callable[[], float | None] | None = None) -> Timing:
    """Call ``fn`` ``warmup`` times untimed, then up to ``repeats`` times, timing each call.

    ``max_seconds`` stops the timed loop early once that much time has passed (after at least
    ``min_repeats`` calls), so slow baselines do not run for minutes.  ``device_hook`` is called after each
    timed call and may return the device milliseconds of that call (e.g. ``searcher.last_device_ms``).
    The last call's return value is kept in ``last_result`` (used for parity checks and statistics).
    """
    if repeats < 1:
        raise ValueError(f"repeats: expected >= 1, got {repeats}")
    result: Any = None
    for _ in range(max(0, warmup)):
        result = fn()
    wall: list[float] = []
    device: list[float] = []
    start = time.perf_counter()
    for i in range(repeats):
        t0 = time.perf_counter_ns()
        result = fn()
        t1 = time.perf_counter_ns()
        wall.append((t1 - t0) / 1e6)
        if device_hook is not None:
            d = device_hook()
            if d is not None:
                device.append(float(d))
        if max_seconds is not None and i + 1 >= min_repeats and time.perf_counter() - start > max_seconds:
            break
    return Timing(wall_ms=wall, device_ms=device, warmup=max(0, warmup), last_result=result)
