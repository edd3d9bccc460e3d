"""Where the host's microseconds of one fused step (`GpuTrieStepper.advance_mask`, eager, no synchronisation)
go: each part of the call timed alone, and the launch through cuda-bindings against the driver's C entry
point called through ctypes (with the library's kernel handle, and with the context's function handle).

    python3 tools/probes/launch_probe.py [--keywords 200000] [--rows 140] [--vocab 32768] [--calls 3000]

Prints one line per part: the median and p90 of ``--calls`` calls, in microseconds.
"""

from __future__ import annotations

import argparse
import ctypes
import time
from collections.abc import Callable
from typing import Any

import numpy as np


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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keywords", type=int, default=200_000)
    p.add_argument("--rows", type=int, default=140)
    p.add_argument("--vocab", type=int, default=32_768)
    p.add_argument("--calls", type=int, default=3000)
    a = p.parse_args()

    import torch
    from cuda.bindings import driver
    from flashtrie.datasets import generate_keywords
    from flashtrie.gpu_impl import step_arrays, step_launch
    from flashtrie.gpu_impl.stepwise import GpuTrieStepper

    from flashtrie import NarrowLoudsIndex

    kw = generate_keywords(a.keywords, seed=0, vocab_size=a.vocab - 1)
    index = NarrowLoudsIndex.build(kw)
    g = GpuTrieStepper(index)
    eos, v, n = a.vocab - 1, a.vocab, a.rows
    states = g.start(n)
    lo, hi = (int(x[0]) for x in index.child_range(np.zeros(1, np.int64)))
    first = index.labels(np.arange(lo, hi, dtype=np.int64))  # tokens that leave the root: rows stay in the trie
    toks = torch.tensor(np.resize(first, n).astype(np.int64), device="cuda")
    logits = torch.zeros((n, v), dtype=torch.float32, device="cuda")
    sync = torch.cuda.synchronize

    rows: list[tuple[str, tuple[float, float]]] = []
    rows.append(("advance_mask (whole call)", timed(lambda: g.advance_mask(states, toks, v, eos, out=logits), a.calls,
                                                    sync)))
    sv = step_arrays.state_views
    rows.append(("state_views", timed(lambda: sv(states), a.calls, sync)))
    rows.append(("tokens view", timed(lambda: g._tokens(toks, n), a.calls, sync)))
    rows.append(("eos", timed(lambda: g._eos(eos), a.calls, sync)))
    e = g._eos(eos)[0]
    rows.append(("mask args (cached)", timed(lambda: g._mask_args(n, v, e, logits, True), a.calls, sync)))
    rows.append(("new states", timed(lambda: g._new_states(n), a.calls, sync)))
    pk = step_launch.ROWS["advance_mask"]
    rows.append(("rows packed", timed(lambda: pk(1, 2, 3, 4, 5, 6, 1, n, True, 1), a.calls, sync)))
    rows.append(("stream handle", timed(g.xp.stream, a.calls, sync)))

    _, blocks, mask = g._mask_args(n, v, e, logits, True)
    aa, bb, _ = sv(states)
    new = g._new_states(n)
    params = g._head + pk(aa.ptr, bb.ptr, step_arrays.ptr(new.node), step_arrays.ptr(new.off),
                          g._tokens(toks, n).ptr, step_arrays.ptr(g._eos(eos)[1]), 1, n, True, 1) + mask
    h = g.xp.stream()
    rows.append(("launch: cuda-bindings", timed(lambda: g._launch_fn(h, "advance_mask", blocks, g.threads, params),
                                                a.calls, sync)))

    cuda = ctypes.CDLL("libcuda.so.1")
    fn = cuda.cuLaunchKernel
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    buf = ctypes.create_string_buffer(params, len(params))
    base = ctypes.addressof(buf)
    offs = step_launch._OFFSETS
    ptrs = (ctypes.c_void_p * len(offs))(*[base + o for o in offs])
    kern = int(g._k["advance_mask"].handle)
    rows.append(("launch: ctypes, kernel handle", timed(lambda: fn(kern, blocks, 1, 1, g.threads, 1, 1, 0, h, ptrs,
                                                                   None), a.calls, sync)))
    err, func = driver.cuKernelGetFunction(driver.CUkernel(kern))
    f = int(func)
    rows.append(("launch: ctypes, function handle", timed(lambda: fn(f, blocks, 1, 1, g.threads, 1, 1, 0, h, ptrs,
                                                                     None), a.calls, sync)))
    rows.append(("memmove of the parameters", timed(lambda: ctypes.memmove(buf, params, len(params)), a.calls,
                                                    sync)))
    from flashtrie.harness.timing import busy, host_us

    fused = lambda: g.advance_mask(states, toks, v, eos, out=logits)  # noqa: E731 - as the stepwise suite times it
    for repeats in (30, 300):  # the stepwise suite's loop: a busy warm-up, then ``repeats`` calls
        busy(fused)
        us = host_us(fused, repeats)
        sync()
        rows.append((f"suite's loop, {repeats} calls", (float(np.median(us)), float(np.percentile(us, 90)))))
    print(f"fused step at {n} rows, V = {v}, {a.keywords:,} keywords; {a.calls} calls; cuKernelGetFunction {err}")
    for name, (med, p90) in rows:
        print(f"{name:34} median {med:7.2f} us   p90 {p90:7.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
