"""Where the host's microseconds of one fused step (`GpuTrieStepper.advance_mask`, eager, no synchronisation)
go: each part of the call timed alone, and the launch through the project's `Launcher` (cuda-bindings'
``cuLaunchKernel``, the context's function handle, its parameter copy and checks) against the bare calls it is
made of and the driver's C entry point through ctypes.  A suite of the lab: records of kind ``launch`` (sweep
``launch``), rendered by `probe_report`.

    flashtrie bench launch --out FILE.jsonl [--keywords 200000] [--rows 140] [--vocab 32768] [--calls 3000]

Writes one record per part (the median and p90 of ``--calls`` calls, in microseconds) and prints it as a line;
without a usable GPU one ``skipped`` record with the reason, exit status 1.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .backends import availability
from .records import append_records
from .run_context import RunContext

#: the fused step's entry point (gpu_impl/layout.py KERNEL_PARAMS)
FUSED = "ft_step_advance_mask"


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The probe's options."""
    p = argparse.ArgumentParser(prog="flashtrie bench launch", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="records file (JSON Lines, appended)")
    p.add_argument("--keywords", type=int, default=200_000)
    p.add_argument("--rows", type=int, default=140)
    p.add_argument("--vocab", type=int, default=32_768)
    p.add_argument("--calls", type=int, default=3000)
    a = p.parse_args(argv)
    for name in ("keywords", "rows", "vocab", "calls"):
        if getattr(a, name) < 1:
            p.error(f"--{name}: expected a positive count, got {getattr(a, name)}")
    return a


def timed(fn: Callable[[], Any], calls: int, sync: Callable[[], None], every: int = 200) -> tuple[float, float]:
    """Median and p90 µs of ``fn`` over ``calls`` calls (a synchronisation every ``every`` calls, not timed)."""
    for _ in range(50):
        fn()
    sync()
    out = []
    for i in range(calls):
        t0 = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t0) / 1e3)
        if i % every == every - 1:
            sync()
    sync()
    a = np.asarray(out)
    return float(np.median(a)), float(np.percentile(a, 90))


def fused_rows(node_in: int, off_in: int, node_out: int, off_out: int, tok: int, eos: int, n: int,
               n_eos: int = 1) -> bytes:
    """The fused step's rows (kernels/step_params.cuh StepRows), packed by name as `GpuTrieStepper.advance_mask`
    packs them: int64 tokens of stride 1."""
    from flashtrie.gpu_impl.step_launch import ROWS

    return ROWS["advance_mask"](node_in=node_in, off_in=off_in, node_out=node_out, off_out=off_out, tok=tok,
                                eos=eos, tok_stride=1, n=n, tok_is64=True, n_eos=n_eos)


def param_pointers(base: int, name: str = FUSED) -> Any:
    """The driver's ``kernelParams`` of entry point ``name`` for parameters packed at host address ``base``:
    one pointer per parameter, at its offset (as `Launcher` lays them out)."""
    from flashtrie.gpu_impl.layout import KERNEL_PARAMS

    offsets = KERNEL_PARAMS[name].offsets
    return (ctypes.c_void_p * len(offsets))(*[base + off for off in offsets])


def _driver_launch() -> Any:
    """The driver's C ``cuLaunchKernel`` through ctypes."""
    fn = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    return fn


def _parts(g: Any, a: argparse.Namespace) -> list[tuple[str, tuple[float, float]]]:
    """The whole call and each of its host-side parts, timed alone."""
    import torch
    from flashtrie.gpu_impl import step_arrays

    index, eos, v, n = g.index, a.vocab - 1, a.vocab, a.rows
    states = g.start(n)
    lo, hi = (int(x[0]) for x in index.child_range(np.zeros(1, np.int64)))
    first = index.labels(np.arange(lo, hi, dtype=np.int64))  # tokens that leave the root: rows stay in the trie
    toks = torch.tensor(np.resize(first, n).astype(np.int64), device="cuda")
    logits = torch.zeros((n, v), dtype=torch.float32, device="cuda")
    sync = torch.cuda.synchronize
    e = g._eos(eos)[0]
    rows: list[tuple[str, tuple[float, float]]] = [
        ("advance_mask (whole call)", timed(lambda: g.advance_mask(states, toks, v, eos, out=logits), a.calls, sync)),
        ("state_views", timed(lambda: step_arrays.state_views(states), a.calls, sync)),
        ("tokens view", timed(lambda: g._tokens(toks, n), a.calls, sync)),
        ("eos", timed(lambda: g._eos(eos), a.calls, sync)),
        ("mask args (cached)", timed(lambda: g._mask_args(n, v, e, logits, True), a.calls, sync)),
        ("new states", timed(lambda: g._new_states(n), a.calls, sync)),
        ("rows packed by name", timed(lambda: fused_rows(1, 2, 3, 4, 5, 6, n), a.calls, sync)),
        ("stream handle", timed(g.xp.stream, a.calls, sync)),
    ]
    rows += _launches(g, states, toks, logits, a)
    from .timing import busy, host_us

    fused = lambda: g.advance_mask(states, toks, v, eos, out=logits)  # noqa: E731 - as the stepwise suite times it
    for repeats in (30, 300):  # the stepwise suite's loop: a busy warm-up, then ``repeats`` calls
        busy(fused)
        us = host_us(fused, repeats)
        sync()
        rows.append((f"suite's loop, {repeats} calls", (float(np.median(us)), float(np.percentile(us, 90)))))
    return rows


def _launches(g: Any, states: Any, toks: Any, logits: Any, a: argparse.Namespace
              ) -> list[tuple[str, tuple[float, float]]]:
    """One fused launch (the same parameters) through the project's `Launcher` and through the alternatives."""
    import torch
    from cuda.bindings import driver
    from flashtrie.gpu_impl import step_arrays
    from flashtrie.gpu_impl.launch import Launcher, load_kernels

    eos, v, n, sync = a.vocab - 1, a.vocab, a.rows, torch.cuda.synchronize
    e, eos_dev = g._eos(eos)
    _, blocks, mask = g._mask_args(n, v, e, logits, True)
    aa, bb, _ = step_arrays.state_views(states)
    new = g._new_states(n)
    params = g._head + fused_rows(aa.ptr, bb.ptr, step_arrays.ptr(new.node), step_arrays.ptr(new.off),
                                  g._tokens(toks, n).ptr, step_arrays.ptr(eos_dev), n, len(e)) + mask
    h = g.xp.stream()
    loaded = load_kernels("step.cu", g.arch, {"FT_STEP_THREADS": str(g.threads), "FT_STEP_CHUNK": str(g.chunk)},
                          g.device.device_id)  # the stepper's own load (cached): the same kernel handles
    launcher = Launcher(loaded)
    out = [("launch: Launcher (whole call)",
            timed(lambda: launcher.launch(h, FUSED, blocks, g.threads, params), a.calls, sync))]
    fn = _driver_launch()
    buf = ctypes.create_string_buffer(params, len(params))
    ptrs = param_pointers(ctypes.addressof(buf))
    err, func = driver.cuKernelGetFunction(driver.CUkernel(int(loaded[FUSED].handle)))
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuKernelGetFunction({FUSED}): {err}")
    f = int(func)
    stream = driver.CUstream(h)
    out += [
        ("launch: ctypes, function handle",
         timed(lambda: fn(f, blocks, 1, 1, g.threads, 1, 1, 0, h, ptrs, None), a.calls, sync)),
        ("launch: cuda-bindings, function handle",
         timed(lambda: driver.cuLaunchKernel(func, blocks, 1, 1, g.threads, 1, 1, 0, stream, ctypes.addressof(ptrs),
                                             0), a.calls, sync)),
        ("launch: cuda-bindings, stream object per call",
         timed(lambda: driver.cuLaunchKernel(func, blocks, 1, 1, g.threads, 1, 1, 0, driver.CUstream(h),
                                             ctypes.addressof(ptrs), 0), a.calls, sync)),
        ("memmove of the parameters", timed(lambda: ctypes.memmove(buf, params, len(params)), a.calls, sync)),
    ]
    return out


def measure(a: argparse.Namespace) -> list[tuple[str, tuple[float, float]]]:
    """Every part of the fused step at ``a``'s shape, timed: (part, (median µs, p90 µs))."""
    from flashtrie.datasets import generate_keywords
    from flashtrie.gpu_impl.stepwise import GpuTrieStepper

    from flashtrie import NarrowLoudsIndex

    index = NarrowLoudsIndex.build(generate_keywords(a.keywords, seed=0, vocab_size=a.vocab - 1))
    return _parts(GpuTrieStepper(index), a)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = parse(argv)
    run = RunContext.start(["flashtrie", "bench", "launch", *argv])
    workload = {"num_keywords": a.keywords, "rows": a.rows, "vocab_size": a.vocab}
    why = availability("gpu")
    if why is not None:
        append_records(a.out, [run.record(kind="launch", backend="gpu", sweep="launch", status="skipped",
                                          message=why, workload=workload, config={"calls": a.calls})])
        print(f"launch: skipped ({why})")
        return 1
    rows = measure(a)
    append_records(a.out, [run.record(kind="launch", backend="gpu", sweep="launch", workload=workload,
                                      config={"part": name, "calls": a.calls},
                                      metrics={"median_us": med, "p90_us": p90}) for name, (med, p90) in rows])
    print(f"fused step at {a.rows} rows, V = {a.vocab}, {a.keywords:,} keywords; {a.calls} calls")
    for name, (med, p90) in rows:
        print(f"{name:40} median {med:7.2f} us   p90 {p90:7.2f} us")
    return 0
