"""Benchmark sweeps; each writes one record per (backend, case) as soon as the case is measured.

* `sweep_beam_width`: latency per call vs beam width B (K = B proposals per row), batch 1 by default;
* `sweep_batch_size`: throughput vs batch size at a fixed beam width;
* `sweep_library_size`: latency vs number of keywords (generates a library and workload per size);
* `sweep_build`: build time and serialized bytes of the narrow-LOUDS index vs a marisa-trie BinaryTrie
  of the keywords themselves (4-byte big-endian token keys, default options).

Every case runs each backend on the same batches, checks all results against the first backend that
produced them (exact: ids, order, float32 bits), and stores the speed-up over marisa measured in the
same case.  Timing (`flashtrie.harness.timing.time_searcher`, the harness's one timing loop): ``warmup``
untimed calls, then passes over the batches until ``repeats`` passes or ``max_seconds`` (after one full
pass); a backend's device time, host breakdown and own counters are recorded with its wall times.  A
backend whose last warmup call shows that one pass would take far over the budget (``skip_factor`` x
``max_seconds``) is recorded as ``skipped`` rather than timed.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from flashtrie.reference_cpu.numpy_search import NumpySearcher

from flashtrie.index import NarrowLoudsIndex
from flashtrie.keywords import KeywordSet
from flashtrie.progress import progress, say
from flashtrie.proposals import Proposals
from flashtrie.search_types import SearchConfig, SearchResult, SearchStats

from .backends import BASELINE, close_searchers, make_searchers, reference_first, setup_text
from .lab_deps import require_lab
from .parity import compare_backends
from .records import Record, append_records
from .run_context import RunContext
from .timing import OverBudget, Timing, TimingPlan, summarize, time_searcher
from .workloads import tile_proposals, truncate_proposals, workload_params

require_lab()  # the sweeps are the lab's: a base install is told which extra to add, before any work

__all__ = ["SweepContext", "BeamStats", "stats_searcher", "measure_case", "sweep_beam_width", "sweep_batch_size",
           "sweep_library_size", "sweep_build", "workload_statistics", "num_keywords_of", "build_index_timed",
           "marisa_binary_trie"]


@dataclasses.dataclass
class SweepContext:
    """A sweep's settings and the run its records belong to (`RunContext`: run id, command, environment)."""

    run: RunContext = dataclasses.field(default_factory=RunContext)
    out: Path | None = None
    warmup: int = 2
    repeats: int = 10
    max_seconds: float = 10.0
    skip_factor: float = 6.0  # skip when the predicted pass time is over skip_factor * max_seconds
    stats_queries: int = 8
    progress: bool = True
    #: the keyword library of the run (`flashtrie.harness.workloads.describe_keywords`), added to every
    #: record's workload as "keywords" unless the record names its own
    library: dict[str, Any] | None = None
    records: list[Record] = dataclasses.field(default_factory=list)

    def record(self, **fields: Any) -> Record:
        """A record of the run (`RunContext.record`), its workload naming the run's library."""
        if self.library is not None and "keywords" not in fields.get("workload", {}):
            fields["workload"] = {**fields.get("workload", {}), "keywords": self.library}
        return self.run.record(**fields)

    def announce(self, backend: str) -> None:
        """Say on stderr that ``backend`` is being set up (marisa builds its trie: seconds per million keywords)."""
        if self.progress:
            say(f"{setup_text(backend)} ...")

    def make_searchers(self, backends: Sequence[str], keywords: KeywordSet | None, index: Any
                       ) -> tuple[dict[str, Any], dict[str, str]]:
        """`flashtrie.harness.backends.make_searchers`, announcing each backend and how long it took."""
        made: dict[str, Any] = {}
        failed: dict[str, str] = {}
        for name in backends:
            t0 = time.perf_counter()
            m, f = make_searchers([name], keywords, index, progress=self.announce)
            made.update(m)
            failed.update(f)
            if self.progress and name in m:
                say(f"backend {name} ready in {time.perf_counter() - t0:.1f} s")
        return made, failed

    def emit(self, records: Sequence[Record]) -> None:
        """Keep the records and append them to the output file (if any) right away."""
        self.records.extend(records)
        if self.out is not None and records:
            append_records(self.out, records)


# ------------------------------------------------------------------------------------------ statistics
@dataclasses.dataclass
class BeamStats:
    """Workload statistics of a case, from a `NumpySearcher` run with ``early_stop=False``.

    Definitions (``docs/semantics.md``; `SearchStats` has the per-step counts), over the first
    ``queries`` queries of the case and every step run:

    * ``considered``: pairs (hypothesis of F_t, proposal of row t that is not padding and above the
      token threshold);
    * ``valid``: those pairs whose extension is a trie prefix (step 2 of the semantics);
    * ``valid_fraction`` = valid / considered;
    * ``beam_fill[t]`` = mean over queries of ``|F_{t+1}| / B`` for t = 0 … T−1 (0 once a query's
      frontier is empty; |F_T| counts the B best candidates with a child of the last step);
    * ``mean_results``: mean number of results per query.
    """

    queries: int = 0
    steps: int = 0
    beam_width: int = 0
    considered: int = 0
    valid: int = 0
    beam_fill: list[float] = dataclasses.field(default_factory=list)
    mean_results: float = 0.0

    @classmethod
    def from_search(cls, stats: SearchStats, result: SearchResult) -> BeamStats:
        """Summarise the `SearchStats` of one search and its result."""
        fill = stats.beam_fill
        assert fill is not None, "the search did not count its frontier"
        return cls(queries=stats.queries, steps=stats.steps, beam_width=stats.beam_width,
                   considered=int(stats.column("considered").sum()), valid=int(stats.column("valid").sum()),
                   beam_fill=[float(v) for v in fill],
                   mean_results=float(result.num_results.mean()) if result.shape[0] else 0.0)

    @property
    def valid_fraction(self) -> float | None:
        return self.valid / self.considered if self.considered else None

    @property
    def mean_beam_fill(self) -> float | None:
        return float(np.mean(self.beam_fill)) if self.beam_fill else None

    def to_dict(self) -> dict[str, Any]:
        return {"stats_queries": self.queries, "valid_fraction": self.valid_fraction, "considered": self.considered,
                "valid": self.valid, "beam_fill_per_step": list(self.beam_fill),
                "mean_beam_fill": self.mean_beam_fill, "mean_results": self.mean_results,
                "source": "numpy reference search (early_stop=False)"}


def stats_searcher(index: NarrowLoudsIndex | None) -> NumpySearcher | None:
    """A `NumpySearcher` of its own over ``index`` with ``early_stop=False, collect_stats=True`` (None without
    an index): the workload statistics come from the contract's full frontiers, and the timed searchers stay
    as they were configured."""
    if index is None:
        return None
    return NumpySearcher(index, early_stop=False, collect_stats=True)


def workload_statistics(stats: NumpySearcher | None, proposals: Proposals, config: SearchConfig,
                        stats_queries: int) -> dict[str, Any]:
    """Fraction of valid proposals and mean beam fill per step for this case.

    Computed by ``stats`` (see `stats_searcher`) on the first ``stats_queries`` queries; `BeamStats` has the
    definitions.  Empty without a stats searcher or queries.
    """
    if stats is None or stats_queries <= 0 or proposals.num_queries == 0:
        return {}
    if not (stats.collect_stats and not stats.early_stop):
        raise ValueError("workload_statistics: needs a NumpySearcher with early_stop=False, collect_stats=True")
    res = stats.search(proposals[: min(stats_queries, proposals.num_queries)], config)
    assert stats.last_stats is not None
    return BeamStats.from_search(stats.last_stats, res).to_dict()


def num_keywords_of(keywords: KeywordSet | None, index: Any) -> int:
    """Number of keywords (duplicates included): from the keywords when loaded, else from the index."""
    return len(keywords) if keywords is not None else int(index.num_keywords)


# --------------------------------------------------------------------------------------------- timing
def timing_plan(ctx: SweepContext) -> TimingPlan:
    """The run's timing settings as a `TimingPlan`: a pass predicted over ``skip_factor`` x ``max_seconds``
    is refused."""
    return TimingPlan(warmup=ctx.warmup, repeats=max(ctx.repeats, 1), max_seconds=ctx.max_seconds,
                      budget_s=ctx.skip_factor * ctx.max_seconds)


def _time_backend(searcher: Any, batches: list[Proposals], config: SearchConfig, ctx: SweepContext
                  ) -> tuple[Timing, SearchResult]:
    """Time passes over ``batches`` with `flashtrie.harness.timing.time_searcher` (raises `OverBudget`)."""
    t = time_searcher(searcher, batches, config, timing_plan(ctx))
    assert t.first_pass is not None
    return t, t.first_pass


#: Attributes a searcher may expose about itself (the GPU: its arch, compile and upload costs), recorded
#: as metrics of every case it is timed in.
_BACKEND_INFO = ("arch", "compile_seconds", "compile_from_cache", "upload_seconds", "index_bytes")


def backend_info(searcher: Any) -> dict[str, Any]:
    """The `_BACKEND_INFO` attributes ``searcher`` has (plain numbers, strings or booleans), as metrics."""
    out: dict[str, Any] = {}
    for name in _BACKEND_INFO:
        v = getattr(searcher, name, None)
        if isinstance(v, (bool, int, float, str)):
            out[f"backend_{name}"] = v
    return out


def measure_case(ctx: SweepContext, searchers: dict[str, Any], batches: list[Proposals], config: SearchConfig, *,
                 sweep: str, workload: dict[str, Any], extra_config: dict[str, Any], workload_stats: dict[str, Any],
                 ) -> list[Record]:
    """Time every searcher on ``batches``, check parity, and return one record per backend."""
    batch = batches[0].num_queries
    cfg = {**config.to_dict(), "batch_size": batch, **extra_config}
    timings: dict[str, Timing] = {}
    results: dict[str, SearchResult] = {}
    errors: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for name, s in searchers.items():
        try:
            timings[name], results[name] = _time_backend(s, batches, config, ctx)
        except OverBudget as e:
            skipped[name] = str(e)
        except Exception as e:  # noqa: BLE001 - recorded as an error
            errors[name] = f"{type(e).__name__}: {e}"
    ref = next((n for n in reference_first(searchers) if n in results), None)
    parity = compare_backends(results, ref, errors=errors) if ref is not None else None
    status: dict[str, tuple[str, str | None]] = {n: ("skipped", m) for n, m in skipped.items()}
    status.update({n: ("error", m) for n, m in errors.items()})
    for o in parity.outcomes if parity is not None else ():
        if o.mismatch is not None:
            status[o.name] = ("mismatch", f"differs from {ref} (left = {ref}, right = {o.name}): {o.mismatch}")
        elif o.error is None:
            status[o.name] = ("ok", None)
    base = timings.get(BASELINE)
    out = []
    for name in searchers:
        st, msg = status[name]
        metrics: dict[str, Any] = {}
        if name in timings:
            t = timings[name]
            w = t.wall
            metrics = {f"{k}_ms": v for k, v in w.to_dict().items() if k != "n"}
            metrics["samples"] = w.n
            metrics["per_query_ms"] = w.mean / batch
            metrics["throughput_qps"] = 1000.0 * batch / w.mean if w.mean > 0 else None
            dev = t.device
            if dev is not None:
                metrics.update({f"device_{k}_ms": v for k, v in dev.to_dict().items() if k != "n"})
            metrics.update({f"host_{k}": v for k, v in t.breakdown_means().items()})  # e.g. host_prep_ms
            metrics.update(backend_info(searchers[name]))
            last = getattr(searchers[name], "last_stats", None)
            if isinstance(last, SearchStats):  # the backend's own counters of its last call (the GPU's)
                metrics["last_stats"] = last.to_dict()
            if base is not None:
                metrics["baseline"] = BASELINE
                metrics["speedup_vs_marisa"] = base.wall.mean / w.mean if w.mean > 0 else None
                metrics["speedup_p99_vs_marisa"] = base.wall.p99 / w.p99 if w.p99 > 0 else None
            metrics["reference"] = ref
            metrics["timing"] = {"warmup": ctx.warmup, "repeats": ctx.repeats, "max_seconds": ctx.max_seconds}
            metrics["mean_results"] = float(results[name].num_results.mean())
        out.append(ctx.record(kind="latency" if sweep != "batch_size" else "throughput", backend=name, status=st,
                              message=msg, sweep=sweep, workload=workload, config=cfg, metrics=metrics,
                              workload_stats=workload_stats))
    ctx.emit(out)
    return out


def _batches(p: Proposals, batch: int, max_calls: int | None) -> list[Proposals]:
    """Split the queries into consecutive batches of ``batch`` (wrapping around for a full last batch)."""
    q_n = p.num_queries
    calls = max(1, -(-q_n // batch))
    if max_calls is not None:
        calls = min(calls, max_calls)
    return [tile_proposals(p, batch, start=i * batch) for i in range(calls)]


# --------------------------------------------------------------------------------------------- sweeps
def sweep_beam_width(ctx: SweepContext, keywords: KeywordSet, index: Any, workload: Any, backends: Sequence[str],
                     beams: Sequence[int] = (1, 10, 100, 500, 1000), batch_size: int = 1,
                     length_norm: float = 0.0, searchers: dict[str, Any] | None = None) -> list[Record]:
    """Latency per call vs beam width B, with K = B proposals per row (at most the workload's K)."""
    own = searchers is None
    wl = {**workload_params(workload), "num_keywords": num_keywords_of(keywords, index)}
    if searchers is None:
        searchers, failed = ctx.make_searchers(backends, keywords, index)
        ctx.emit(_construction_errors(ctx, failed, "beam_width", wl))
    stats_search = stats_searcher(index) if ctx.stats_queries > 0 else None  # no decode of the index for nothing
    out: list[Record] = []
    try:
        for b in progress(list(beams), desc="latency vs beam width", disable=not ctx.progress, unit="beam"):
            props = truncate_proposals(workload.proposals, int(b))
            k = props.shape[2]
            config = SearchConfig(beam_width=int(b), length_norm=length_norm)
            stats = workload_statistics(stats_search, props, config, ctx.stats_queries)
            out += measure_case(ctx, searchers, _batches(props, batch_size, None), config, sweep="beam_width",
                                workload={**wl, "K_used": k}, extra_config={"K": k}, workload_stats=stats)
    finally:
        if own:
            close_searchers(searchers)
    return out


def sweep_batch_size(ctx: SweepContext, keywords: KeywordSet, index: Any, workload: Any, backends: Sequence[str],
                     batch_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32), beam_width: int = 100,
                     calls: int = 4, length_norm: float = 0.0) -> list[Record]:
    """Throughput (queries per second) vs batch size at one beam width (K = B); ``calls`` batches per size."""
    searchers, failed = ctx.make_searchers(backends, keywords, index)
    wl = {**workload_params(workload), "num_keywords": num_keywords_of(keywords, index)}
    ctx.emit(_construction_errors(ctx, failed, "batch_size", wl))
    props = truncate_proposals(workload.proposals, beam_width)
    k = props.shape[2]
    config = SearchConfig(beam_width=beam_width, length_norm=length_norm)
    stats = workload_statistics(stats_searcher(index), props, config, ctx.stats_queries)
    out: list[Record] = []
    try:
        for bs in progress(list(batch_sizes), desc="throughput vs batch size", disable=not ctx.progress, unit="batch"):
            out += measure_case(ctx, searchers, _batches(props, int(bs), calls), config, sweep="batch_size",
                                workload={**wl, "K_used": k}, extra_config={"K": k}, workload_stats=stats)
    finally:
        close_searchers(searchers)
    return out


def sweep_library_size(ctx: SweepContext, sizes: Sequence[int], backends: Sequence[str], *,
                       make_keywords: Callable[[int], tuple[KeywordSet, dict[str, Any]]],
                       make_workload: Callable[[KeywordSet, int], Any], beam_width: int = 100,
                       with_build: bool = True, length_norm: float = 0.0) -> list[Record]:
    """Latency vs library size: per size, generate keywords and a workload, build, time every backend."""
    out: list[Record] = []
    for n in progress(list(sizes), desc="latency vs library size", disable=not ctx.progress, unit="size"):
        keywords, kw_params = make_keywords(int(n))
        workload = make_workload(keywords, int(n))
        if with_build:
            out += sweep_build(ctx, [(keywords, kw_params)], sweep="library_size")
        index = NarrowLoudsIndex.build(keywords)
        searchers, failed = ctx.make_searchers(backends, keywords, index)
        wl = {**workload_params(workload), "keywords": kw_params, "num_keywords": len(keywords)}
        ctx.emit(_construction_errors(ctx, failed, "library_size", wl))
        try:
            props = truncate_proposals(workload.proposals, beam_width)
            k = props.shape[2]
            config = SearchConfig(beam_width=beam_width, length_norm=length_norm)
            stats = workload_statistics(stats_searcher(index), props, config, ctx.stats_queries)
            out += measure_case(ctx, searchers, _batches(props, 1, None), config, sweep="library_size",
                                workload={**wl, "K_used": k}, extra_config={"K": k, "num_keywords": len(keywords)},
                                workload_stats=stats)
        finally:
            close_searchers(searchers)
    return out


def _construction_errors(ctx: SweepContext, failed: dict[str, str], sweep: str, wl: dict[str, Any]) -> list[Record]:
    return [ctx.record(kind="latency", backend=n, status="error", message=f"could not construct: {msg}",
                       sweep=sweep, workload=wl) for n, msg in failed.items()]


# ---------------------------------------------------------------------------------------------- build
def build_index_timed(keywords: KeywordSet, progress: bool = False) -> tuple[NarrowLoudsIndex, float]:
    """Build a `NarrowLoudsIndex`; returns it and the wall seconds."""
    t0 = time.perf_counter()
    idx = NarrowLoudsIndex.build(keywords, progress=progress or None)
    return idx, time.perf_counter() - t0


def marisa_binary_trie(keywords: KeywordSet) -> tuple[Any, float, float]:
    """A default-options ``marisa_trie.BinaryTrie`` of the keywords as 4-byte big-endian token keys.

    Returns (trie, seconds to make the keys, seconds to build the trie).
    """
    import marisa_trie

    t0 = time.perf_counter()
    be = keywords.tokens.astype(">u4").tobytes()
    off = (keywords.offsets * 4).tolist()
    keys = [be[a:b] for a, b in zip(off[:-1], off[1:], strict=True)]
    t1 = time.perf_counter()
    trie = marisa_trie.BinaryTrie(keys)
    t2 = time.perf_counter()
    return trie, t1 - t0, t2 - t1


def _file_bytes(save: Callable[[str], None]) -> int:
    with tempfile.TemporaryDirectory(prefix="flashtrie-size-") as d:
        p = os.path.join(d, "f")
        save(p)
        return os.path.getsize(p)


def sweep_build(ctx: SweepContext, libraries: Sequence[tuple[KeywordSet, dict[str, Any]]], repeats: int = 1,
                sweep: str = "build") -> list[Record]:
    """Build time (best of ``repeats``) and serialized size: narrow-LOUDS index vs marisa-trie BinaryTrie.

    Records are labelled with ``sweep``, the sweep that produced them ("build" for ``bench build``,
    "library_size" for ``bench size``), so runs of the same library stay apart.  ``bytes_per_keyword``
    divides the serialized bytes by the unique keywords, as `NarrowLoudsIndex.stats` does.
    """
    out: list[Record] = []
    bar = progress(total=2 * max(repeats, 1) * len(libraries), desc="builds (narrow-LOUDS, marisa-trie)",
               disable=not ctx.progress, unit="build")
    for keywords, params in libraries:
        n = len(keywords)
        wl = {"keywords": params, "num_keywords": n}
        cases: list[tuple[str, Callable[[], tuple[Any, float, dict[str, Any]]], Callable[[Any, str], None]]] = []

        def ours(keywords: KeywordSet = keywords) -> tuple[Any, float, dict[str, Any]]:
            idx, s = build_index_timed(keywords)
            # the keyword-id map (trie order -> input id) has no counterpart in marisa-trie's file
            return idx, s, {"nodes": int(idx.num_nodes), "unique_keywords": int(idx.num_unique),
                            "in_memory_bytes": int(sum(a.nbytes for a in idx.arrays.values())),
                            "id_map_bytes": int(idx.arrays["keyword_ids.words"].nbytes)}

        def theirs(keywords: KeywordSet = keywords) -> tuple[Any, float, dict[str, Any]]:
            trie, key_s, build_s = marisa_binary_trie(keywords)
            return trie, build_s, {"key_prep_s": key_s, "unique_keywords": len(trie)}

        cases.append(("narrow-louds", ours, lambda obj, p: obj.save(p)))
        cases.append(("marisa-trie", theirs, lambda obj, p: obj.save(p)))
        recs = []
        for name, build, save in cases:
            try:
                times: list[float] = []
                extra: dict[str, Any] = {}
                obj = None
                for _ in range(max(repeats, 1)):
                    bar.set_postfix_str(f"{name}, {n:,} keywords")
                    obj, s, extra = build()
                    times.append(s)
                    bar.update()
                size = _file_bytes(partial(save, obj))
                st = summarize(np.asarray(times) * 1000.0)
                metrics = {"build_s": min(times), "build_mean_s": st.mean / 1000.0, "builds": len(times),
                           "bytes": size, "bytes_per_keyword": size / max(int(extra["unique_keywords"]), 1),
                           **extra}
                recs.append(ctx.record(kind="build", backend=name, sweep=sweep, workload=wl,
                                       config={"num_keywords": n}, metrics=metrics))
            except Exception as e:  # noqa: BLE001
                recs.append(ctx.record(kind="build", backend=name, status="error", message=f"{type(e).__name__}: {e}",
                                       sweep=sweep, workload=wl, config={"num_keywords": n}))
        base = next((r for r in recs if r.backend == "marisa-trie" and r.status == "ok"), None)
        for r in recs:
            if base is not None and r.status == "ok":
                r.metrics["build_speedup_vs_marisa"] = base.metrics["build_s"] / max(r.metrics["build_s"], 1e-12)
                r.metrics["size_ratio_vs_marisa"] = r.metrics["bytes"] / max(base.metrics["bytes"], 1)
                r.metrics["size_ratio_vs_marisa_without_id_map"] = (
                    (r.metrics["bytes"] - r.metrics.get("id_map_bytes", 0)) / max(base.metrics["bytes"], 1))
        ctx.emit(recs)
        out += recs
    bar.close()
    return out
