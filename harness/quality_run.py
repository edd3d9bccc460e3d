"""Quality against beam width, end to end: train both models on each task, decode the test queries at every
beam width with every backend, constrained and unconstrained, and write one record per (task, model,
backend, beam, mode).

`CONFIGS` holds the sizes: ``toy`` runs in seconds on a CPU (CI), ``cpu`` in minutes on a CPU, ``full``
trains both models on both tasks and runs every measurement in one command on one H200.

Time guards, so that a run ends within ``deadline_s``: each task gets an equal share; within it each
model's training stops at ``TRAIN_SHARE`` / models of the share (the steps run are recorded), and each
model's sweep gets an equal part of what is left.  A measurement started after its sweep's time, or whose
predicted time (the backend's previous beam scaled by B x K, or by B for ``generate``) is over
``budget_s``, is recorded as ``skipped``: where the CPU runs out of budget and the GPU does not is part of
the answer.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from flashtrie.datasets.quality_tasks import EOS, Task

from flashtrie.index import NarrowLoudsIndex
from flashtrie.search_types import SearchConfig, result_difference

from .quality_eval import (
    MAX_RESULTS,
    ar_decode,
    eval_sample,
    nar_library,
    nar_proposals,
    ranked_lists,
    timed,
    truncated,
)
from .quality_metrics import KS, mean_metrics, precision_ceiling
from .quality_models import ModelSize
from .quality_train import TrainConfig, Trained, save_checkpoint, train_ar, train_nar
from .records import Record, append_records
from .unconstrained import KeywordTable, unconstrained_search

__all__ = ["QualityConfig", "CONFIGS", "TRAIN_SHARE", "run_quality", "measure_task"]

#: the part of a task's time its models' training may take (the rest measures)
TRAIN_SHARE = 0.6


@dataclass(frozen=True)
class QualityConfig:
    """Task size, training sizes, the evaluation sample, the beam widths and the time guards of one run."""

    name: str
    identifiers: int  # per task ('flashtrie quality tasks --config NAME' builds tasks of this size)
    ar: TrainConfig
    nar: TrainConfig
    eval_queries: int
    nar_beams: tuple[int, ...]
    ar_beams: tuple[int, ...]
    budget_s: float  # the most one measurement (one backend, beam and mode over the sample) may take
    ar_rows: int  # beam rows per generate() call
    deadline_s: float = 1e9  # after this many seconds of the run, what is left is recorded as skipped
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "identifiers": self.identifiers, "eval_queries": self.eval_queries,
                "nar_beams": list(self.nar_beams), "ar_beams": list(self.ar_beams), "budget_s": self.budget_s,
                "deadline_s": self.deadline_s, "seed": self.seed}


def _train(steps: int, batch: int, lr: float, size: ModelSize) -> TrainConfig:
    return TrainConfig(steps, batch, lr, warmup=max(1, steps // 20), size=size)


_BEAMS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
CONFIGS = {
    "toy": QualityConfig("toy", 300, ar=_train(20, 16, 3e-3, ModelSize(32, 1, 2)),
                         nar=_train(20, 16, 3e-3, ModelSize(32, 1, 2)), eval_queries=12,
                         nar_beams=(1, 4, 16, 64), ar_beams=(1, 4), budget_s=60.0, ar_rows=256),
    "cpu": QualityConfig("cpu", 3000, ar=_train(2000, 64, 2e-3, ModelSize(128, 2, 4)),
                         nar=_train(2000, 64, 2e-3, ModelSize(128, 2, 4)), eval_queries=100,
                         nar_beams=(1, 10, 100, 1000), ar_beams=(1, 10, 100), budget_s=60.0, ar_rows=1000,
                         deadline_s=1080.0),
    "full": QualityConfig("full", 20000, ar=_train(3000, 256, 2e-3, ModelSize(256, 3, 4)),
                          nar=_train(3000, 256, 2e-3, ModelSize(256, 3, 4)), eval_queries=200,
                          nar_beams=_BEAMS, ar_beams=_BEAMS[:-1], budget_s=10.0, ar_rows=16384,
                          deadline_s=400.0),
}


def _metrics(lists: list[np.ndarray], relevant: list[np.ndarray], kinds: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = mean_metrics(lists, relevant)
    out.update({f"precision@{k}_ceiling": precision_ceiling(relevant, k) for k in KS})
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
        return "this phase's share of the run's time was spent"
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
            lists, secs = ar_decode(model.model, queries, index, beam, proc, ctx.device, ctx.cfg.ar_rows,
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
                 models: Sequence[str] = ("nar", "ar"), seconds: float = float("inf"),
                 emit: Callable[[list[Record]], object] | None = None) -> list[Record]:
    """Train the models on ``task`` and measure them, in ``seconds`` at most (the time guards: each
    model's training stops at its share; each sweep skips what is left at its share).  ``emit`` gets each
    sweep's records as soon as it ends."""
    end = time.monotonic() + seconds
    test = task.splits["test"]
    pick = eval_sample(test, cfg.eval_queries, cfg.seed)
    queries = [test.queries[int(i)] for i in pick]
    trained: dict[str, Trained] = {}
    share = TRAIN_SHARE * seconds / len(models)
    for kind in models:
        train_cfg = cfg.nar if kind == "nar" else cfg.ar
        train = train_nar if kind == "nar" else train_ar
        t = train(task, replace(train_cfg, max_seconds=min(train_cfg.max_seconds, share)), cfg.seed, device, progress)
        save_checkpoint(t, cache, f"{task.name}-{kind}-{cfg.name}")
        progress(f"{task.name} {kind.upper()}: {t.parameters:,} parameters, {len(t.losses)} steps in "
                 f"{t.seconds:.1f} s, final loss {t.losses[-1]:.3f}, sha256 {t.sha256[:12]}")
        trained[kind] = t
    records: list[Record] = []
    for j, kind in enumerate(models):
        deadline = time.monotonic() + (end - time.monotonic()) / (len(models) - j)
        ctx = _Ctx(task, cfg, device, [test.relevant[int(i)] for i in pick],
                   [test.kinds[int(i)] if test.kinds else "" for i in pick], make, progress, deadline)
        recs = (_nar_sweep if kind == "nar" else _ar_sweep)(ctx, trained[kind], queries)
        if emit is not None:
            emit(recs)
        records += recs
    return records


def run_quality(tasks: Sequence[Task], cfg: QualityConfig, *, out: str | os.PathLike[str] | None, cache: str,
                make: Callable[..., Record], progress: Callable[[str], None], device: str | None = None
                ) -> list[Record]:
    """`measure_task` for every task, each in an equal share of ``cfg.deadline_s``; records are appended to
    ``out`` after each sweep."""
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if dev.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    records: list[Record] = []
    end = time.monotonic() + cfg.deadline_s
    for j, task in enumerate(tasks):
        progress(f"task {task.name}: {task.sizes()}")
        seconds = (end - time.monotonic()) / (len(tasks) - j)
        records += measure_task(task, cfg, dev, cache, make, progress, seconds=seconds,
                                emit=None if out is None else lambda recs: append_records(out, recs))
    return records
