"""The stepwise suite's measurements of one step: device µs by CUDA-graph replay and CUDA events, host µs of
the eager calls (with and without a synchronisation), the host time split into our Python and the launch."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
from flashtrie.harness.timing import GRAPH_REPLAYS, busy, graph_us, host_us, sample_stats, stream_us

from flashtrie.stepwise import StepStates, TrieStepper

__all__ = ["INNER", "gpu_step_metrics", "numpy_step_metrics"]

INNER = 10  # steps per graph of the graph10_fused_us measurement


def _steps(gpu: Any, states: StepStates, tokens: np.ndarray, vocab: int, eos: int, parts: bool,
           notab: Any) -> dict[str, Callable[[], Any]]:
    """The calls to time, on device copies of ``states`` and ``tokens``: the fused step, mask + advance, and
    (``parts``) each alone, the boolean mask, and the fused step without the child table (``notab``)."""
    import torch

    rows = len(states)
    d = StepStates(torch.as_tensor(states.node, device="cuda"), torch.as_tensor(states.off, device="cuda"))
    tok = torch.as_tensor(tokens, device="cuda")
    logits = torch.randn(rows, vocab, device="cuda")
    boolmask = torch.empty(rows, vocab, dtype=torch.bool, device="cuda")
    steps: dict[str, Callable[[], Any]] = {
        "fused": lambda: gpu.advance_mask(d, tok, vocab, eos, out=logits),
        "step": lambda: (gpu.mask(d, vocab, eos, out=logits), gpu.advance(d, tok, eos)),
    }
    if parts:
        steps.update({
            "mask": lambda: gpu.mask(d, vocab, eos, out=logits),
            "advance": lambda: gpu.advance(d, tok, eos),
            "bool_fused": lambda: gpu.advance_mask(d, tok, vocab, eos, out=boolmask, additive=False),
            "bool_step": lambda: (gpu.mask(d, vocab, eos, out=boolmask, additive=False), gpu.advance(d, tok, eos)),
        })
        if notab is not None:
            steps["fused_notable"] = lambda: notab.advance_mask(d, tok, vocab, eos, out=logits)
    return steps


def _host_times(steps: dict[str, Callable[[], Any]], repeats: int) -> dict[str, Any]:
    """Host µs of the eager fused step and of mask + advance, without and with a synchronisation."""
    import torch

    out: dict[str, Any] = {}
    for name in ("fused", "step"):
        busy(steps[name])  # warm-up, not timed (the first calls after a setup run slower)
        host = host_us(steps[name], repeats)
        torch.cuda.synchronize()
        synced = host_us(steps[name], repeats, sync=True)
        sfx = "" if name == "step" else "_fused"
        out[f"host{sfx}_us"], out[f"sync{sfx}_us"] = sample_stats(host), sample_stats(synced)
    return out


def _graph_times(steps: dict[str, Callable[[], Any]], replays: int, progress: Callable[[str], None]
                 ) -> dict[str, Any]:
    """Device µs of each call by CUDA-graph replay, and of the fused step ``INNER`` times in one graph."""
    out: dict[str, Any] = {"graph_replays": replays}
    for name, f in steps.items():
        try:
            out[f"graph_{name}_us"] = graph_us(f, replays)
        except Exception as e:  # noqa: BLE001 - keep the eager numbers
            out["graph_error"] = f"{type(e).__name__}: {e}"
            break
        progress(f"graph {name}: {out[f'graph_{name}_us']:.1f} us ({replays} replays)")
    try:  # the fused step 10 times in one graph: no graph launch gap between steps (as in a captured decode loop)
        out[f"graph{INNER}_fused_us"] = graph_us(steps["fused"], max(3, replays // INNER), INNER)
    except Exception as e:  # noqa: BLE001
        out["graph_error"] = f"{type(e).__name__}: {e}"
    return out


def gpu_step_metrics(gpu: Any, states: StepStates, tokens: np.ndarray, vocab: int, eos: int, repeats: int,
                     parts: bool = True, notab: Any = None) -> dict[str, Any]:
    """Device and host time of one step; ``parts``: also mask alone, advance alone, bool, and (``notab``: a
    stepper of the same device index without the child table) the fused step without the table."""
    import torch

    t_begin = time.perf_counter()

    def progress(what: str) -> None:  # long cases (1 x 1000 at V = 2.2M) show where their time goes
        print(f"    {what} ({time.perf_counter() - t_begin:.1f} s)", flush=True)

    steps = _steps(gpu, states, tokens, vocab, eos, parts, notab)
    for f in steps.values():
        f()
    torch.cuda.synchronize()
    progress("first calls")
    t0 = time.perf_counter()
    steps["fused"]()
    torch.cuda.synchronize()
    once = time.perf_counter() - t0
    repeats = max(5, min(repeats, int(0.25 / max(once, 1e-9))))  # about 0.25 s per measurement at most
    out: dict[str, Any] = {"repeats": repeats, **_host_times(steps, repeats)}
    out.update(_host_split(gpu, steps["fused"], repeats))
    progress(f"host timings ({repeats} calls each)")
    out["stream_us"] = stream_us(steps["step"], repeats)  # eager, launch gaps included
    out.update(_graph_times(steps, max(3, min(GRAPH_REPLAYS, int(0.1 / max(once, 1e-9)))), progress))
    out["dead_rows"] = gpu.dead_count
    out["blocks_per_row"] = gpu.blocks_per_row
    return out


def _host_split(gpu: Any, fused: Callable[[], Any], repeats: int) -> dict[str, Any]:
    """The host time of a fused call split in two: the stepper's own Python work (its launch replaced by a
    no-op: ``host_py_fused_us``) and the launch of the same kernel arguments (``host_launch_us``)."""
    import torch

    real, calls, keep = gpu._launch_fn, [], []  # keep: the outputs the recorded launches write stay allocated
    gpu._launch_fn = lambda *a: calls.append(a)
    try:
        py = []
        for _ in range(max(repeats, 100)):
            t0 = time.perf_counter()
            r = fused()
            py.append((time.perf_counter() - t0) * 1e6)
            keep.append(r)
    finally:
        gpu._launch_fn = real
    args, launch = calls[-1], []
    for _ in range(max(repeats, 100)):
        t0 = time.perf_counter()
        real(*args)
        launch.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    del keep
    return {"host_py_fused_us": sample_stats(py), "host_launch_us": sample_stats(launch)}


def numpy_step_metrics(cpu: TrieStepper, states: StepStates, tokens: np.ndarray, vocab: int, eos: int,
                       repeats: int) -> dict[str, Any]:
    logits = np.random.default_rng(0).normal(size=(len(states), vocab)).astype(np.float32)
    host = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        cpu.mask(states, vocab, eos, out=logits)
        cpu.advance(states, tokens, eos)
        host.append((time.perf_counter() - t0) * 1e6)
    return {"host_us": sample_stats(host), "sync_us": sample_stats(host)}
