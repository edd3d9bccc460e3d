"""Quality against beam width, end to end: train both models on each task, decode the test queries at every
beam width with every backend, constrained and unconstrained, and write one record per (task, model,
backend, beam, mode).

`CONFIGS` holds the sizes: ``toy`` runs in seconds on a CPU (CI), ``cpu`` in minutes on a CPU, ``full``
trains both models on both tasks and runs every measurement in one command on one H200.

Training is not time-guarded: each model trains its planned steps (``steps_run == steps`` in the records;
the validation curve and the stopping rule's step say whether the plan passed convergence).  The sweeps are:
each gets ``sweep_s`` seconds (``ar_sweep_s`` for the AR model), and a measurement started after them, or
whose predicted time (the backend's previous beam, timed warm, scaled by B x K, or by B for ``generate``) is
over ``budget_s`` (``ar_budget_s``) or past the sweep's end, is recorded as ``skipped``: where the CPU runs
out of budget and the GPU does not is part of the answer.  Every measurement is preceded by an untimed call
of the same backend at the same beam on a few queries (first-use costs: kernel compiles and loads,
allocations).  The run's time is then about the training plus each sweep's share (the plan of the ``full``
config is in `CONFIGS`' comment).

``smoke`` (`smoke_config`) runs a config's code path with a few training steps and queries: a check that
the full config will not fail on the device, not a measurement.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from flashtrie.datasets.quality_tasks import EOS, Task

from flashtrie.index import NarrowLoudsIndex
from flashtrie.search_types import SearchConfig

from .parity import compare_backends
from .quality_eval import (
    ar_decode,
    eval_sample,
    nar_library,
    nar_proposals,
    ranked_lists,
    timed,
    truncated,
)
from .quality_metrics import KS, mean_metrics, per_query, precision_ceiling
from .quality_models import ModelSize
from .quality_train import TrainConfig, Trained, save_checkpoint, train_ar, train_nar
from .records import Record, append_records
from .unconstrained import KeywordTable, unconstrained_search

__all__ = ["QualityConfig", "CONFIGS", "run_quality", "measure_task", "smoke_config", "eval_sets", "EvalSet"]


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
    sweep_s: float = 1e9  # after this many seconds of a sweep, what is left is recorded as skipped
    ar_budget_s: float | None = None  # ``budget_s`` of the AR sweeps (None: the same)
    ar_sweep_s: float | None = None  # ``sweep_s`` of the AR sweeps (None: the same)
    seed: int = 0
    smoke: bool = False
    #: planned steps of one task's model where they differ from ``ar``/``nar`` ("TASK/ar": steps)
    task_steps: Mapping[str, int] = field(default_factory=dict)

    def train_config(self, task: str, kind: str) -> TrainConfig:
        """The training of ``task``'s ``kind`` ("ar" or "nar") model: ``task_steps``' plan where it has one."""
        base = self.nar if kind == "nar" else self.ar
        steps = self.task_steps.get(f"{task}/{kind}")
        return base if steps is None or self.smoke else replace(base, steps=steps, warmup=max(1, steps // 20))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "identifiers": self.identifiers, "eval_queries": self.eval_queries,
                "nar_beams": list(self.nar_beams), "ar_beams": list(self.ar_beams), "budget_s": self.budget_s,
                "sweep_s": self.sweep_s, "ar_budget_s": self.ar_budget_s, "ar_sweep_s": self.ar_sweep_s,
                "seed": self.seed, "smoke": self.smoke, "task_steps": dict(self.task_steps),
                "train": {k: {"steps": c.steps, "batch_size": c.batch_size, "lr": c.lr, "eval_every": c.eval_every,
                              **c.size.to_dict()} for k, c in (("ar", self.ar), ("nar", self.nar))}}


def _train(steps: int, batch: int, lr: float, size: ModelSize, eval_every: int = 50) -> TrainConfig:
    return TrainConfig(steps, batch, lr, warmup=max(1, steps // 20), size=size, eval_every=eval_every)


def smoke_config(cfg: QualityConfig) -> QualityConfig:
    """``cfg``'s code path with 6 training steps and 4 queries (its beams and sizes otherwise)."""
    def tiny(t: TrainConfig) -> TrainConfig:
        return replace(t, steps=6, warmup=1, eval_every=3, val_pairs=64, batch_size=min(t.batch_size, 32))

    return replace(cfg, ar=tiny(cfg.ar), nar=tiny(cfg.nar), eval_queries=4, smoke=True)


_BEAMS = (1, 10, 30, 100, 300, 1000)
#: planned training steps of each model (cpu; full: NAR, AR; the hyponyms AR model's).  The full plan comes from
#: the validation curves of runs at 1,000 and 2,500 steps: the NAR heads' validation loss was lowest at steps
#: 150-700 (the stopping rule stopped them at 400 and 600); the countries AR model's at 1,500 (the rule stopped
#: it there); the hyponyms AR model's still fell at 2,500 (0.9% over the last 500 steps)
CPU_STEPS, FULL_NAR_STEPS, FULL_AR_STEPS, FULL_HYPONYMS_AR_STEPS = 200, 800, 2500, 5000
#: the AR model's peak learning rates (cpu, full): the post-LN BART stays at its unigram solution (its loss
#: the entropy of the identifiers' tokens) at 2e-3; the lowest validation loss of the rates tried at each
#: size (the quality README); the NAR head (pre-LN) trains at 2e-3
CPU_AR_LR, FULL_AR_LR = 5e-4, 2e-4
CONFIGS = {
    "toy": QualityConfig("toy", 300, ar=_train(20, 16, 3e-3, ModelSize(32, 1, 2), 5),
                         nar=_train(20, 16, 3e-3, ModelSize(32, 1, 2), 5), eval_queries=12,
                         nar_beams=(1, 4, 16, 64), ar_beams=(1, 4), budget_s=60.0, ar_rows=256),
    "cpu": QualityConfig("cpu", 3000,
                         ar=replace(_train(CPU_STEPS, 32, CPU_AR_LR, ModelSize(96, 2, 4), 20), val_pairs=512),
                         nar=replace(_train(CPU_STEPS, 32, 2e-3, ModelSize(96, 2, 4), 20), val_pairs=512),
                         eval_queries=100,
                         nar_beams=(1, 10, 100, 300, 1000), ar_beams=(1, 10, 100), budget_s=20.0, ar_rows=2000,
                         sweep_s=30.0),
    # The GPU plan: 2 x FULL_NAR_STEPS + FULL_AR_STEPS + FULL_HYPONYMS_AR_STEPS steps of 1,024 (an H100 ran 18-25
    # NAR and 18-21 AR steps/s: 45 + 32 + 138 + 238 s), the NAR sweeps (30 s each at most, about 5 s as measured) and
    # the AR sweeps (100 s each at most, 14 to 28 s as measured; a measurement predicted past the sweep's end
    # is skipped).
    "full": QualityConfig("full", 30000, ar=_train(FULL_AR_STEPS, 1024, FULL_AR_LR, ModelSize(256, 3, 4)),
                          nar=_train(FULL_NAR_STEPS, 1024, 2e-3, ModelSize(256, 3, 4)), eval_queries=200,
                          task_steps={"hyponyms/ar": FULL_HYPONYMS_AR_STEPS},
                          nar_beams=_BEAMS, ar_beams=_BEAMS, budget_s=12.0, ar_rows=32768, sweep_s=30.0,
                          ar_budget_s=60.0, ar_sweep_s=100.0),
}


#: the widest beam at which the AR model's numpy processor runs beside the GPU's (their lists compared)
PARITY_BEAM = 100
#: the metrics whose per-query values the records keep (for paired differences between beams)
PER_QUERY = ("precision@10", "precision@100", "recall@100", "ndcg@100")


@dataclass(frozen=True)
class EvalSet:
    """The measured queries of one split: their relevant ids and the known ids the filtered setting removes."""

    relevant: list[np.ndarray]
    exclude: list[np.ndarray]
    kinds: list[str]


def eval_sets(task: Task, pick: np.ndarray) -> dict[str, EvalSet]:
    """The held-out evaluation (``test``: the test pairs; a query's train and validation identifiers are
    removed from its ranked list) and, where the splits share their queries (pairs held out), the training
    evaluation (``train``: the train pairs; validation and test identifiers removed) of the queries ``pick``."""
    out = {}
    for split in ("test", "train"):
        s = task.splits[split]
        if split == "train" and s.texts != task.splits["test"].texts:
            continue
        known = task.known(split)
        out[split] = EvalSet([s.relevant[int(i)] for i in pick], [known[int(i)] for i in pick],
                             [s.kinds[int(i)] if s.kinds else "" for i in pick])
    return out


def _one(lists: list[np.ndarray], ev: EvalSet) -> dict[str, Any]:
    out: dict[str, Any] = mean_metrics(lists, ev.relevant, KS, ev.exclude, intervals=True)
    out.update({f"precision@{k}_ceiling": precision_ceiling(ev.relevant, k) for k in KS})
    per = per_query(lists, ev.relevant, KS, ev.exclude)
    out["per_query"] = {k: [None if v is None else round(v, 5) for v in per[k]] for k in PER_QUERY}
    kinds = sorted(set(ev.kinds))
    if len(kinds) > 1:
        out["by_kind"] = {k: {**mean_metrics([lists[i] for i, x in enumerate(ev.kinds) if x == k],
                                             [ev.relevant[i] for i, x in enumerate(ev.kinds) if x == k]),
                              "queries": ev.kinds.count(k)} for k in kinds}
    return out


def _metrics(lists: list[np.ndarray], sets: dict[str, EvalSet]) -> dict[str, Any]:
    """The held-out metrics at the top level; the training pairs' under ``train_pairs``."""
    out = _one(lists, sets["test"])
    if "train" in sets:
        out["train_pairs"] = _one(lists, sets["train"])
    return out


@dataclass
class _Ctx:
    """What every record of one task shares."""

    task: Task
    cfg: QualityConfig
    device: str
    sets: dict[str, EvalSet]
    make: Callable[..., Record]
    progress: Callable[[str], None]
    deadline: float = float("inf")  # time.monotonic() after which measurements are skipped
    budget_s: float = float("inf")  # the most one measurement may take

    def record(self, model: Trained, backend: str, mode: str, beam: int, k: int | None, metrics: dict[str, Any] | None,
               status: str = "ok", message: str | None = None) -> Record:
        config = {"task": self.task.name, "model": model.kind, "mode": mode, "beam_width": beam, "K": k,
                  "max_results": beam, "device": self.device, "run_config": self.cfg.to_dict(),
                  "model_info": model.describe()}
        workload = {"name": self.task.name, **self.task.sizes(), "eval_queries": len(self.sets["test"].relevant),
                    "task_info": self.task.info}
        return self.make(kind="quality", backend=backend, status=status, message=message, sweep="beam_width",
                         workload=workload, config=config, metrics=metrics or {})


def _over(ctx: _Ctx, last: dict[str, tuple[float, float]], name: str, cost: float) -> str | None:
    """Why ``name`` at ``cost`` is skipped: the sweep's time is up, or its predicted seconds (``last``: its
    previous measurement, warm) are over the budget or past the sweep's end."""
    left = ctx.deadline - time.monotonic()
    if left < 0:
        return "this phase's share of the run's time was spent"
    if name not in last:
        return None
    c0, s0 = last[name]
    pred = s0 * cost / max(c0, 1e-9)
    if pred > ctx.budget_s:
        return f"predicted {pred:.0f} s is over the budget of {ctx.budget_s:.0f} s"
    if pred > left:
        return f"predicted {pred:.0f} s is past the {left:.0f} s left of this phase's share of the run's time"
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
        props, cfg = truncated(tokens, lps, k), SearchConfig(beam_width=beam)
        got = {}
        for name, run in runs.items():
            mode = "unconstrained+filter" if name == "unconstrained" else "constrained"
            why = _over(ctx, last, name, beam * k)
            if why is not None:
                records.append(ctx.record(model, name, mode, beam, k, None, "skipped", why))
                continue
            run(truncated(tokens[:8], lps[:8], k), cfg)  # first use at this shape: not timed
            res, secs = timed(lambda run=run, props=props, cfg=cfg: run(props, cfg), False)
            last[name] = (beam * k, secs)
            got[name] = res
            m = {**_metrics(ranked_lists(res), ctx.sets), "latency_ms_per_query":
                 secs * 1e3 / len(queries), "model_ms_per_query": model_ms}
            if name == "gpu" and "numpy" in got:
                m["identical_to_numpy"] = compare_backends({"numpy": got["numpy"], "gpu": res}).ok
            records.append(ctx.record(model, name, mode, beam, k, m))
        ctx.progress(f"{ctx.task.name} NAR beam {beam}: " + ", ".join(
            f"{n} P@100 {r.metrics['precision@100']:.3f} {r.metrics['latency_ms_per_query']:.2f} ms"
            for n, r in ((r.backend, r) for r in records[-len(runs):]) if r.status == "ok"))
    return records


def _ar_sweep(ctx: _Ctx, model: Trained, queries: list[np.ndarray]) -> list[Record]:
    from flashtrie.hf import TrieLogitsProcessor

    index = NarrowLoudsIndex.build(ctx.task.library)
    backends = ["gpu", "numpy"] if ctx.device.startswith("cuda") else ["numpy"]
    runs: list[tuple[str, str | None]] = [(f"hf+{backends[0]}", backends[0]), ("hf", None)] + [
        (f"hf+{b}", b) for b in backends[1:]]
    records: list[Record] = []
    last: dict[str, tuple[float, float]] = {}
    for beam in ctx.cfg.ar_beams:
        got = {}
        for name, backend in runs:
            mode = "constrained" if backend else "unconstrained+filter"
            why = _over(ctx, last, name, beam)
            if name == "hf+numpy" and "hf+gpu" in got and beam > PARITY_BEAM:
                why = f"numpy's processor checks the GPU's up to beam {PARITY_BEAM} (the sweep's time goes to the GPU)"
            if why is not None:
                records.append(ctx.record(model, name, mode, beam, None, None, "skipped", why))
                continue
            proc = TrieLogitsProcessor(index, EOS, prompt_length=1, backend=backend) if backend else None
            longest = ctx.task.library.max_length + 1
            ar_decode(model.model, queries[:2], index, beam, proc, ctx.device, ctx.cfg.ar_rows, longest)  # not timed
            lists, secs = ar_decode(model.model, queries, index, beam, proc, ctx.device, ctx.cfg.ar_rows, longest)
            last[name] = (beam, secs)
            got[name] = lists
            m = {**_metrics(lists, ctx.sets), "latency_ms_per_query": secs * 1e3 / len(queries)}
            if name == "hf+numpy" and "hf+gpu" in got:
                m["identical_to_gpu"] = all(np.array_equal(a, b) for a, b in zip(got["hf+gpu"], lists, strict=True))
            records.append(ctx.record(model, name, mode, beam, None, m))
            ctx.progress(f"{ctx.task.name} AR beam {beam} {name}: P@100 {m['precision@100']:.3f} "
                         f"hit@1 {m['exact_match']:.3f} {m['latency_ms_per_query']:.1f} ms/query")
    return records


def measure_task(task: Task, cfg: QualityConfig, device: str, cache: str | os.PathLike[str],
                 make: Callable[..., Record], progress: Callable[[str], None],
                 models: Sequence[str] = ("nar", "ar"),
                 emit: Callable[[list[Record]], object] | None = None) -> list[Record]:
    """Train the models on ``task`` (their planned steps) and measure them (each sweep in ``cfg.sweep_s``
    at most).  ``emit`` gets each sweep's records as soon as it ends."""
    test = task.splits["test"]
    pick = eval_sample(test, cfg.eval_queries, cfg.seed)
    queries = [test.queries[int(i)] for i in pick]
    trained: dict[str, Trained] = {}
    for kind in models:
        train = train_nar if kind == "nar" else train_ar
        t = train(task, cfg.train_config(task.name, kind), cfg.seed, device, progress)
        save_checkpoint(t, cache, f"{task.name}-{kind}-{cfg.name}")
        d = t.describe()
        stop = d["stopping_step"]
        progress(f"{task.name} {kind.upper()}: {t.parameters:,} parameters, {len(t.losses)} of {t.config.steps} steps "
                 f"in {t.seconds:.1f} s, final loss {t.losses[-1]:.3f}, best validation loss "
                 f"{d['best_val_loss'] or float('nan'):.4f} at step {d['best_step']}; the stopping rule "
                 + (f"stops at step {stop}: the plan passes it" if stop else
                    "does NOT stop within the plan: more steps would still help"))
        trained[kind] = t
    records: list[Record] = []
    for kind in models:
        ar = kind == "ar"
        share = cfg.ar_sweep_s if ar and cfg.ar_sweep_s is not None else cfg.sweep_s
        budget = cfg.ar_budget_s if ar and cfg.ar_budget_s is not None else cfg.budget_s
        ctx = _Ctx(task, cfg, device, eval_sets(task, pick), make, progress, time.monotonic() + share, budget)
        recs = (_nar_sweep if kind == "nar" else _ar_sweep)(ctx, trained[kind], queries)
        if emit is not None:
            emit(recs)
        records += recs
    return records


def run_quality(tasks: Sequence[Task], cfg: QualityConfig, *, out: str | os.PathLike[str] | None, cache: str,
                make: Callable[..., Record], progress: Callable[[str], None], device: str | None = None
                ) -> list[Record]:
    """`measure_task` for every task; records are appended to ``out`` after each sweep."""
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if dev.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    records: list[Record] = []
    for task in tasks:
        progress(f"task {task.name}: {task.sizes()}")
        records += measure_task(task, cfg, dev, cache, make, progress,
                                emit=None if out is None else lambda recs: append_records(out, recs))
    return records
