"""Quality against beam width, end to end: train both models on each task, decode the test queries at every
beam width with every backend, constrained and unconstrained, and write one record per (task, model,
backend, beam, mode).

`CONFIGS` holds the sizes: ``toy`` runs in seconds on a CPU (CI), ``full`` trains both models on both
tasks and runs every measurement in one command of a few minutes on one H200.  A measurement whose
predicted time (the backend's previous beam scaled by B x K, or by B for ``generate``) is over
``budget_s`` is recorded as ``skipped``: where the CPU runs out of budget and the GPU does not is part of
the answer.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from flashtrie.datasets.quality_tasks import EOS, Task

from flashtrie.index import NarrowLoudsIndex
from flashtrie.search_types import SearchConfig, result_difference

from .quality_eval import (
    MAX_RESULTS,
    IdTable,
    ar_decode,
    eval_sample,
    nar_library,
    nar_proposals,
    ranked_lists,
    timed,
    truncated,
)
from .quality_metrics import mean_metrics
from .quality_models import ModelSize
from .quality_train import TrainConfig, Trained, save_checkpoint, train_ar, train_nar
from .records import Record, append_records
from .unconstrained import KeywordTable, unconstrained_search

__all__ = ["QualityConfig", "CONFIGS", "run_quality", "measure_task"]


@dataclass(frozen=True)
class QualityConfig:
    """Training sizes, the evaluation sample, the beam widths and the time budget of one run."""

    name: str
    ar: TrainConfig
    nar: TrainConfig
    eval_queries: int
    nar_beams: tuple[int, ...]
    ar_beams: tuple[int, ...]
    budget_s: float
    ar_rows: int  # beam rows per generate() call
    deadline_s: float = 1e9  # after this many seconds of the run, what is left is recorded as skipped
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "eval_queries": self.eval_queries, "nar_beams": list(self.nar_beams),
                "ar_beams": list(self.ar_beams), "budget_s": self.budget_s, "seed": self.seed}


_TINY = ModelSize(d_model=32, layers=1, heads=2)
CONFIGS = {
    "toy": QualityConfig("toy", ar=TrainConfig(20, 16, 3e-3, warmup=5, size=_TINY),
                         nar=TrainConfig(20, 16, 3e-3, warmup=5, size=_TINY), eval_queries=12,
                         nar_beams=(1, 4, 16, 64), ar_beams=(1, 4), budget_s=60.0, ar_rows=256),
    "cpu": QualityConfig("cpu", ar=TrainConfig(400, 64, 2e-3, warmup=40, size=ModelSize(128, 2, 4)),
                         nar=TrainConfig(400, 64, 2e-3, warmup=40, size=ModelSize(128, 2, 4)), eval_queries=100,
                         nar_beams=(1, 10, 100, 300, 1000), ar_beams=(1, 10, 30), budget_s=30.0, ar_rows=512,
                        deadline_s=300.0),
    "full": QualityConfig("full", ar=TrainConfig(2500, 512, 1e-3, warmup=200, size=ModelSize(256, 3, 4)),
                          nar=TrainConfig(2500, 512, 1e-3, warmup=200, size=ModelSize(256, 3, 4)),
                          eval_queries=400, nar_beams=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
                          ar_beams=(1, 2, 5, 10, 20, 50, 100, 200), budget_s=25.0, ar_rows=8192,
                          deadline_s=480.0),
}


def _metrics(lists: list[np.ndarray], relevant: list[np.ndarray], kinds: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = mean_metrics(lists, relevant)
    by_kind = {}
    for k in sorted(set(kinds)):
        sel = [i for i, x in enumerate(kinds) if x == k]
        by_kind[k] = {**mean_metrics([lists[i] for i in sel], [relevant[i] for i in sel]), "queries": len(sel)}
    out["by_kind"] = by_kind
    return out


@dataclass
class _Ctx:
    """What every record of one task shares."""

    task: Task
    cfg: QualityConfig
    device: str
    relevant: list[np.ndarray]
    kinds: list[str]
    make: Callable[..., Record]
    progress: Callable[[str], None]
    deadline: float = float("inf")  # time.monotonic() after which measurements are skipped

    def record(self, model: Trained, backend: str, mode: str, beam: int, k: int | None, metrics: dict[str, Any] | None,
               status: str = "ok", message: str | None = None) -> Record:
        config = {"task": self.task.name, "model": model.kind, "mode": mode, "beam_width": beam, "K": k,
                  "max_results": MAX_RESULTS, "device": self.device, "run_config": self.cfg.to_dict(),
                  "model_info": model.describe()}
        workload = {"name": self.task.name, **self.task.sizes(), "eval_queries": len(self.relevant),
                    "task_info": self.task.info}
        return self.make(kind="quality", backend=backend, status=status, message=message, sweep="beam_width",
                         workload=workload, config=config, metrics=metrics or {})


def _over(ctx: _Ctx, last: dict[str, tuple[float, float]], name: str, cost: float) -> str | None:
    """Why ``name`` at ``cost`` is skipped: its predicted seconds are over the budget, or the run's time is up."""
    if time.monotonic() > ctx.deadline:
        return f"the run's {ctx.cfg.deadline_s:.0f} s were spent"
    if name not in last:
        return None
    c0, s0 = last[name]
    pred = s0 * cost / max(c0, 1e-9)
    if pred > ctx.cfg.budget_s:
        return f"predicted {pred:.0f} s is over the budget of {ctx.cfg.budget_s:.0f} s"
    return None


def _nar_sweep(ctx: _Ctx, model: Trained, queries: list[np.ndarray]) -> list[Record]:
    from flashtrie.reference_cpu import NumpySearcher

    lib = nar_library(ctx.task)
    index = NarrowLoudsIndex.build(lib)
    table = KeywordTable(lib)
    tokens, lps, model_ms = nar_proposals(model.model, queries, max(ctx.cfg.nar_beams), ctx.device)
    runs: dict[str, Callable[..., Any]] = {"numpy": NumpySearcher(index).search}
    if ctx.device.startswith("cuda"):
        try:
            from flashtrie.gpu_impl import GpuSearcher

            runs["gpu"] = GpuSearcher(index).search
        except Exception as e:  # noqa: BLE001 - recorded, the CPU measurements go on
            ctx.progress(f"note: the GPU searcher is not usable: {type(e).__name__}: {e}")
    runs["unconstrained"] = lambda p, c: unconstrained_search(table, p, c)
    records: list[Record] = []
    last: dict[str, tuple[float, float]] = {}
    for beam in ctx.cfg.nar_beams:
        k = min(beam, tokens.shape[2])
        props, cfg = truncated(tokens, lps, k), SearchConfig(beam_width=beam, max_results=MAX_RESULTS)
        got = {}
        for name, run in runs.items():
            mode = "unconstrained+filter" if name == "unconstrained" else "constrained"
            why = _over(ctx, last, name, beam * k)
            if why is not None:
                records.append(ctx.record(model, name, mode, beam, k, None, "skipped", why))
                continue
            if name == "gpu":
                run(props[:min(8, len(queries))], cfg)  # first launch at this shape: not timed
            res, secs = timed(lambda run=run, props=props, cfg=cfg: run(props, cfg), False)
            last[name] = (beam * k, secs)
            got[name] = res
            m = {**_metrics(ranked_lists(res), ctx.relevant, ctx.kinds), "latency_ms_per_query":
                 secs * 1e3 / len(queries), "model_ms_per_query": model_ms}
            if name == "gpu" and "numpy" in got:
                m["identical_to_numpy"] = result_difference(got["numpy"], res) is None
            records.append(ctx.record(model, name, mode, beam, k, m))
        ctx.progress(f"{ctx.task.name} NAR beam {beam}: " + ", ".join(
            f"{n} P@100 {r.metrics['precision@100']:.3f} {r.metrics['latency_ms_per_query']:.2f} ms"
            for n, r in ((r.backend, r) for r in records[-len(runs):]) if r.status == "ok"))
    return records


def _ar_sweep(ctx: _Ctx, model: Trained, queries: list[np.ndarray]) -> list[Record]:
    from flashtrie.hf import TrieLogitsProcessor

    index = NarrowLoudsIndex.build(ctx.task.library)
    table = IdTable(ctx.task.library)
    backends = ["gpu", "numpy"] if ctx.device.startswith("cuda") else ["numpy"]
    runs: list[tuple[str, str | None]] = [(f"hf+{b}", b) for b in backends] + [("hf", None)]
    records: list[Record] = []
    last: dict[str, tuple[float, float]] = {}
    for beam in ctx.cfg.ar_beams:
        got = {}
        for name, backend in runs:
            mode = "constrained" if backend else "unconstrained+filter"
            why = _over(ctx, last, name, beam)
            if why is not None:
                records.append(ctx.record(model, name, mode, beam, None, None, "skipped", why))
                continue
            proc = TrieLogitsProcessor(index, EOS, prompt_length=1, backend=backend) if backend else None
            lists, secs = ar_decode(model.model, queries, table, beam, proc, ctx.device, ctx.cfg.ar_rows,
                                    ctx.task.library.max_length + 1)
            last[name] = (beam, secs)
            got[name] = lists
            m = {**_metrics(lists, ctx.relevant, ctx.kinds), "latency_ms_per_query": secs * 1e3 / len(queries)}
            if name == "hf+numpy" and "hf+gpu" in got:
                m["identical_to_gpu"] = all(np.array_equal(a, b) for a, b in zip(got["hf+gpu"], lists, strict=True))
            records.append(ctx.record(model, name, mode, beam, None, m))
            ctx.progress(f"{ctx.task.name} AR beam {beam} {name}: P@100 {m['precision@100']:.3f} "
                         f"hit@1 {m['exact_match']:.3f} {m['latency_ms_per_query']:.1f} ms/query")
    return records


def measure_task(task: Task, cfg: QualityConfig, device: str, cache: str | os.PathLike[str],
                 make: Callable[..., Record], progress: Callable[[str], None],
                 models: Sequence[str] = ("nar", "ar"), deadline: float = float("inf")) -> list[Record]:
    """Train the models on ``task`` and measure them (see the module docstring)."""
    test = task.splits["test"]
    pick = eval_sample(test, cfg.eval_queries, cfg.seed)
    queries = [test.queries[int(i)] for i in pick]
    ctx = _Ctx(task, cfg, device, [test.relevant[int(i)] for i in pick],
               [test.kinds[int(i)] if test.kinds else "" for i in pick], make, progress, deadline)
    records: list[Record] = []
    for kind in models:
        train = train_nar if kind == "nar" else train_ar
        trained = train(task, cfg.nar if kind == "nar" else cfg.ar, cfg.seed, device, progress)
        save_checkpoint(trained, cache, f"{task.name}-{kind}-{cfg.name}")
        progress(f"{task.name} {kind.upper()}: {trained.parameters:,} parameters, trained in {trained.seconds:.1f} s, "
                 f"final loss {trained.losses[-1]:.3f}, sha256 {trained.sha256[:12]}")
        sweep = _nar_sweep if kind == "nar" else _ar_sweep
        records += sweep(ctx, trained, queries)
    return records


def run_quality(tasks: Sequence[Task], cfg: QualityConfig, *, out: str | os.PathLike[str] | None, cache: str,
                make: Callable[..., Record], progress: Callable[[str], None], device: str | None = None
                ) -> list[Record]:
    """`measure_task` for every task; records are appended to ``out`` after each task."""
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    records: list[Record] = []
    deadline = time.monotonic() + cfg.deadline_s
    for task in tasks:
        progress(f"task {task.name}: {task.sizes()}")
        recs = measure_task(task, cfg, dev, cache, make, progress, deadline=deadline)
        if out is not None:
            append_records(out, recs)
        records += recs
    return records
