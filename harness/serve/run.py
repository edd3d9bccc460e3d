"""The serving benchmark: per call, fresh proposals (a head's top-K on the GPU, or a `Proposals` built from host
arrays) searched by one backend, the results left where the backend makes them (on the device for the GPU);
timed per call by the host clock and, on the GPU, by CUDA events on the searcher's stream.

One record of kind ``serve`` per (library, proposals, backend, beam, batch): ``metrics.mean_ms`` / ``p99_ms``
(host wall per call, proposals made to results ready), ``queries_per_second``, ``host_us_per_query`` (host
time of a call less its waits for the device), ``device_mean_ms`` / ``device_p99_ms`` (CUDA events).  A GPU
case first checks one call's results against the numpy reference on the same proposals, bit for bit.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from flashtrie.proposals import Proposals
from flashtrie.search_types import SearchConfig, SearchResult, result_difference

from ..timing import percentiles
from .sources import DeviceSource, HostSource, head_rows, host_arrays

__all__ = ["ServePlan", "CallTimes", "DeviceClock", "time_calls", "serve_cases", "PROPOSAL_KINDS"]

PROPOSAL_KINDS = ("device", "host")


@dataclass(frozen=True)
class ServePlan:
    """What one `serve_cases` run measures and how long."""

    beams: Sequence[int] = (100, 1000)
    batch_sizes: Sequence[int] = (1, 8, 32, 128)
    proposals: Sequence[str] = PROPOSAL_KINDS
    vocab: int = 32_768
    warmup: int = 5
    repeats: int = 200
    max_seconds: float = 5.0
    check_queries: int = 2
    length_norm: float = 0.0


@dataclass
class CallTimes:
    """Per-call samples (ms): host wall, host time less the waits for the device, device (CUDA events)."""

    wall: list[float]
    host: list[float]
    device: list[float]

    def metrics(self, batch: int) -> dict[str, float]:
        mean = float(np.mean(self.wall))
        p50, p99 = percentiles(self.wall, (50, 99))
        out = {"mean_ms": mean, "median_ms": p50, "p99_ms": p99, "queries_per_second": batch / (mean / 1e3),
               "host_us_per_query": float(np.mean(self.host)) * 1e3 / batch, "calls": len(self.wall)}
        if self.device:
            out["device_mean_ms"] = float(np.mean(self.device))
            out["device_p99_ms"] = percentiles(self.device, (99,))[0]
        return {k: round(v, 6) if isinstance(v, float) else v for k, v in out.items()}


def _wait_ms(searcher: Any) -> float:
    """The part of the searcher's last call spent waiting for the device (0 for a host backend)."""
    return float((getattr(searcher, "last_breakdown", None) or {}).get("wait_ms", 0.0))


@dataclass(frozen=True)
class DeviceClock:
    """Two timing events (``torch.cuda.Event``) recorded on ``stream`` around each call."""

    start: Any
    end: Any
    stream: Any


def time_calls(call: Callable[[], Any], searcher: Any, plan: ServePlan, clock: DeviceClock | None = None
               ) -> CallTimes:
    """``plan.warmup`` untimed calls, then up to ``plan.repeats`` timed ones (at least one; stop after
    ``plan.max_seconds``).  ``clock``: device time of each call, which also waits for it (None: host only)."""
    for _ in range(plan.warmup):
        call()
    if clock is not None:
        clock.stream.synchronize()
    times = CallTimes([], [], [])
    gc_was = gc.isenabled()
    gc.disable()
    try:
        t_end = time.perf_counter() + plan.max_seconds
        for _ in range(max(plan.repeats, 1)):
            t0 = time.perf_counter_ns()
            if clock is not None:
                clock.start.record(clock.stream)
            call()
            t_ret = time.perf_counter_ns()
            if clock is not None:
                clock.end.record(clock.stream)
                clock.end.synchronize()
            t1 = time.perf_counter_ns()
            times.wall.append((t1 - t0) / 1e6)
            times.host.append((t_ret - t0) / 1e6 - _wait_ms(searcher))
            if clock is not None:
                times.device.append(float(clock.start.elapsed_time(clock.end)))
            if time.perf_counter() > t_end:
                break
    finally:
        if gc_was:
            gc.enable()
    return times


def _check(searcher: Any, reference: Any, source: Any, config: SearchConfig, n: int) -> str | None:
    """One call of ``source`` searched by ``searcher`` against ``reference`` on its first ``n`` queries:
    None when identical, else the first difference."""
    if isinstance(source, DeviceSource):
        tokens, vals = source()
        with source.current():
            res = searcher.search((tokens, vals), config, device_out=True)
        source.stream.synchronize()
        tok, lp = tokens.cpu().numpy().astype(np.int64), vals.cpu().numpy()
        got = _first(res, n, lambda c: c.get())
    else:
        tok, lp = source.tokens, source.logprobs
        got = _first(searcher.search(source(), config), n, np.asarray)
    want = reference.search(Proposals(tok[:n], lp[:n]), config)
    diff = result_difference(got, want)
    return None if diff is None else str(diff)


def _first(res: SearchResult, n: int, host: Callable[[Any], np.ndarray]) -> SearchResult:
    """The first ``n`` queries of ``res`` as host arrays (``host`` reads one column)."""
    cols = (res.keyword_ids, res.scores, res.norm_scores, res.lengths, res.num_results)
    return SearchResult(*(np.ascontiguousarray(host(c)[:n]) for c in cols))


def serve_cases(searchers: dict[str, Any], workload: Proposals, library_size: int, plan: ServePlan,
                make_record: Callable[..., Any], reference: Any = None,
                progress: Callable[[str], None] | None = None) -> list[Any]:
    """Every (proposals, backend, beam, batch) case of ``plan`` on one library: its records (a case that fails
    is recorded as an error and the others still run).  ``reference``: the numpy searcher the GPU's results
    are checked against (None: no check)."""
    out = []
    cases = [(kind, name, beam, batch) for kind in plan.proposals for name in searchers
             for beam in plan.beams for batch in plan.batch_sizes if kind == "host" or name == "gpu"]
    for kind, name, beam, batch in cases:
        fields = _fields(workload, library_size, plan, kind, name, beam, batch)
        if progress is not None:
            progress(f"serve {name} {kind} proposals: beam {beam} batch {batch}")
        cfg = SearchConfig(beam_width=beam, length_norm=plan.length_norm)
        try:
            rec = _one_case(searchers[name], name, kind, workload, cfg, batch, fields["config"]["K"], plan,
                            reference)
            out.append(make_record(**fields, **rec))
        except Exception as e:
            out.append(make_record(**fields, status="error", message=f"{type(e).__name__}: {e}"))
    return out


def _fields(workload: Proposals, library_size: int, plan: ServePlan, kind: str, name: str, beam: int, batch: int
            ) -> dict[str, Any]:
    """A case's record fields but its outcome: kind, backend, sweep, workload and config."""
    q_w, t_n, k_w = workload.shape
    k = min(beam, k_w)
    return dict(kind="serve", backend=name, sweep="serve",
                workload={"library_size": library_size, "proposals": kind, "shape_QTK": [batch, t_n, k],
                          "workload_queries": q_w, "vocab": plan.vocab if name == "gpu" else None},
                config={"beam_width": beam, "batch_size": batch, "K": k, "T": t_n, "max_results": beam,
                        "length_norm": plan.length_norm})


def _one_case(searcher: Any, name: str, kind: str, workload: Proposals, cfg: SearchConfig, batch: int, k: int,
              plan: ServePlan, reference: Any) -> dict[str, Any]:
    """Make the case's source, check it (GPU), time it: the record's status, message and metrics."""
    clock = None
    if name == "gpu":
        import torch

        stream = torch.cuda.ExternalStream(int(searcher.stream.handle))
        rounds = max(1, min(4, workload.num_queries // batch))
        dev = DeviceSource(head_rows(workload, rounds * batch, plan.vocab), batch, k, stream)
        source: Any = dev if kind == "device" else HostSource(*dev.host_copy())
        clock = DeviceClock(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True), stream)
    else:
        source = HostSource(*host_arrays(workload, batch, k))
    status, message = "ok", None
    if reference is not None and reference is not searcher:
        diff = _check(searcher, reference, source, cfg, min(plan.check_queries, batch))
        if diff is not None:
            status, message = "mismatch", f"differs from numpy on the same proposals: {diff}"
    if isinstance(source, DeviceSource):
        def call() -> Any:
            with source.current():  # the arrays' DLPack export then orders nothing beyond the stream itself
                return searcher.search(source(), cfg, device_out=True)
    else:
        def call() -> Any:
            return searcher.search(source(), cfg)
    times = time_calls(call, searcher, plan, clock)
    return {"status": status, "message": message, "metrics": times.metrics(batch)}
