"""Where the time of one fused stepwise step goes, on the GPU machine: a suite of the lab, records of kind
``step-probe`` (sweep ``step-probe``) that `probe_report` renders.

    flashtrie bench step-probe --out FILE.jsonl [--case fixed:20M:32768] [--shape 2x70] [--index FILE]
    flashtrie bench step-probe --ncu --index FILE        # a few eager launches for ncu, no records

Device µs from CUDA-graph replays (as the stepwise bench, harness/timing.py), rows at the root and inside keywords:
* floors with the fused step's grid (rows x blocks per row, 256 threads): an empty kernel; -inf stored over
  every logit (16-byte stores, the rows' own alignment); a dependent chain of 1, 3 and 6 global loads at random
  addresses of the index's size by one thread per block before those stores;
* the stepper's kernels: fused (advance + mask), mask alone, advance alone, and each kernel variant named by
  ``--variants`` (the stepper built with other options or step.cu's macros: NAME=KEY=VALUE+KEY=VALUE,...).
The default stepper's results are compared with numpy's, each variant's with the default's.  Writes a record per
timing (``device_us``) and per comparison (``equal``; ``mismatch`` where they differ) and prints one table;
without a usable GPU one ``skipped`` record with the reason, exit status 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from .backends import availability
from .records import Record, append_records
from .run_context import RunContext

FLOOR_SRC = r"""
typedef unsigned int u32;
typedef unsigned long long u64;
extern "C" __global__ void probe_empty() {}

__device__ __forceinline__ void neg_span(float* rowp, u64 ca, u64 cb) {
    const float ni = __int_as_float(0xff800000);
    const u32 mis = (u32)(((unsigned long long)(rowp + ca) >> 2) & 3u);
    u64 a = ca + ((4u - mis) & 3u);
    if (a > cb) a = cb;
    const u64 nvec = (cb - a) >> 2;
    float4* vp = reinterpret_cast<float4*>(rowp + a);
    for (u64 i = threadIdx.x; i < nvec; i += blockDim.x) vp[i] = make_float4(ni, ni, ni, ni);
    for (u64 v = ca + threadIdx.x; v < a; v += blockDim.x) rowp[v] = ni;
    for (u64 v = a + 4 * nvec + threadIdx.x; v < cb; v += blockDim.x) rowp[v] = ni;
}

// -inf over the block's part of its row (rows [0, extra) in parts + 1 equal parts, the others in `parts`: the
// stepper's grid, kernels/step_mask.cuh mask_row), after `depth` dependent loads by thread 0 (0: none)
extern "C" __global__ void probe_store(float* out, u64 row_stride, u64 V, u32 parts, u32 extra,
                                       const u32* table, u64 table_mask, u32 depth, u32* sink) {
    __shared__ u32 s;
    const u32 big = extra * (parts + 1);
    const u32 k = blockIdx.x < big ? parts + 1 : parts, i = blockIdx.x < big ? blockIdx.x : blockIdx.x - big;
    const u32 row = (blockIdx.x < big ? 0u : extra) + i / k, b = i % k;
    if (depth) {
        if (threadIdx.x == 0) {
            u64 x = (u64)blockIdx.x * 2654435761ull;
            for (u32 k = 0; k < depth; ++k) x = (x * 6364136223846793005ull + __ldg(&table[x & table_mask])) ;
            s = (u32)x;
        }
        __syncthreads();
        if (s == 0xFFFFFFFFu && threadIdx.x == 0) sink[0] = s;  // keeps the chain
    }
    if (!out) return;
    neg_span(out + (u64)row * row_stride, V * b / k, V * (b + 1) / k);
}

// -inf over out[0, total) (contiguous rows) in gridDim.x equal parts, one a block
extern "C" __global__ void probe_store_flat(float* out, u64 total) {
    neg_span(out, total * blockIdx.x / gridDim.x, total * (blockIdx.x + 1) / gridDim.x);
}
"""


def _graph_us(f: Any, inner: int = 1) -> float:
    """Device µs per call as the stepwise bench measures them (`harness.timing.graph_us`)."""
    from .timing import GRAPH_REPLAYS, graph_us

    return graph_us(f, GRAPH_REPLAYS, inner)


def _index(args: argparse.Namespace) -> tuple[Any, Any]:
    from flashtrie import NarrowLoudsIndex

    from .stepwise.cases import library

    keywords, _ = library(args.case)
    if args.index and Path(args.index).exists():
        return keywords, NarrowLoudsIndex.load(args.index)
    t0 = time.perf_counter()
    index = NarrowLoudsIndex.build(keywords)
    print(f"# built {args.case}: {index.num_nodes:,} nodes in {time.perf_counter() - t0:.1f} s", flush=True)
    if args.index:
        index.save(args.index)
    return keywords, index


def _rows(keywords: Any, cpu: Any, rows: int) -> dict[str, tuple[Any, np.ndarray]]:
    from .stepwise.cases import sample_rows

    out = {}
    for name, root in (("root", True), ("mid", False)):
        prefixes, nxt = sample_rows(keywords, rows, root, seed=rows)
        out[name] = (cpu.start_from_prefixes(prefixes), nxt)
    return out


def _steppers(index: Any, variants: list[str]) -> dict[str, Any]:
    """The default stepper and one per variant NAME=KEY=VALUE[+KEY=VALUE] (same device index): FT_STEP_CHUNK is
    the stepper's chunk; child_table, root_table and blocks_per_row its options of those names; source=FILE
    compiles kernels/FILE in place of step.cu (another step.cu with the same kernel parameters, for an A/B); any
    other key is one of step.cu's tuning macros (`GpuTrieStepper(defines=...)`)."""
    from flashtrie.gpu_impl.step_options import CHILD_TABLE, ROOT_TABLE
    from flashtrie.gpu_impl.stepwise import GpuTrieStepper

    base = GpuTrieStepper(index)
    out = {"default": base}
    shared = SimpleNamespace(index=index, index_address=base.index_address)
    for spec in variants:
        name, _, macros = spec.partition("=")
        defines = dict(m.split("=", 1) for m in macros.split("+") if m)
        chunk = int(defines.pop("FT_STEP_CHUNK", base.chunk))  # the host must cut chunks the same way
        child_table = int(defines.pop("child_table", CHILD_TABLE))
        root_table = int(defines.pop("root_table", ROOT_TABLE))
        bpr = defines.pop("blocks_per_row", None)
        with compiled_from(defines.pop("source", None)):
            out[name] = GpuTrieStepper(index, searcher=shared, chunk=chunk, defines=defines,
                                       child_table=child_table, root_table=root_table)
        out[name].blocks_per_row = int(bpr) if bpr else None
    return out


@contextmanager
def compiled_from(source: str | None) -> Iterator[None]:
    """Within: kernels/step.cu compiled from ``kernels/<source>`` in its place (None: nothing changes), and
    loaded apart from the kernels this process loaded before (`gpu_impl.launch.load_kernels` keeps one load
    per file and macros)."""
    from flashtrie.gpu_impl import launch

    if not source:
        yield
        return
    compile_kernel, loaded = launch.compile_kernel, launch._LOADED
    launch.compile_kernel = lambda _file, *a, **k: compile_kernel(source, *a, **k)
    launch._LOADED = {}
    try:
        yield
    finally:
        launch.compile_kernel, launch._LOADED = compile_kernel, loaded


def _stream(handle: int) -> Any:
    """A cuda.core stream for a raw handle (0 and 2: the legacy and per-thread default streams)."""
    import cuda.core as cc

    if handle == 0:
        return cc.LEGACY_DEFAULT_STREAM
    if handle == 2:
        return cc.PER_THREAD_DEFAULT_STREAM
    return cc.Stream.from_handle(handle)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="flashtrie bench step-probe", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", default="fixed:20M:32768")
    ap.add_argument("--shape", default="2x70")
    ap.add_argument("--index", default="", help="an index file to load (or to save the built index to)")
    ap.add_argument("--variants", default="", help="NAME=KEY=VALUE[+KEY=VALUE],...: steppers with other options "
                    "or step.cu macros (FT_STEP_CHUNK=N: the stepper's chunk; see _steppers)")
    ap.add_argument("--ncu", action="store_true", help="only a few eager fused launches (for ncu; no records)")
    ap.add_argument("--out", default="", help="records file (JSON Lines, appended; needed unless --ncu)")
    a = ap.parse_args(argv)
    if not a.out and not a.ncu:
        ap.error("--out: a records file is needed (unless --ncu)")
    return a


def _setup(args: argparse.Namespace) -> SimpleNamespace:
    """The index, the rows at the root and inside keywords (host and device), the steppers and the logits."""
    import torch

    from flashtrie.stepwise import StepStates, TrieStepper

    keywords, index = _index(args)
    b, k = (int(x) for x in args.shape.lower().split("x"))
    vocab_last = int(args.case.split(":")[2])
    rows, V, eos = b * k, vocab_last + 1, vocab_last
    cpu = TrieStepper(index)
    sets = _rows(keywords, cpu, rows)
    steppers = _steppers(index, [v for v in args.variants.split(",") if v])
    dev = {n: (StepStates(torch.as_tensor(s.node, device="cuda"), torch.as_tensor(s.off, device="cuda")),
               torch.as_tensor(t, device="cuda")) for n, (s, t) in sets.items()}
    return SimpleNamespace(index=index, rows=rows, V=V, eos=eos, cpu=cpu, sets=sets, steppers=steppers,
                           gpu=steppers["default"], dev=dev, logits=torch.randn(rows, V, device="cuda"))


def _ncu(c: SimpleNamespace) -> None:
    """Two eager fused launches of every stepper on each row set (for ncu's --launch-count)."""
    import torch

    for _ in range(2):
        for n in ("root", "mid"):
            d, tok = c.dev[n]
            for g in c.steppers.values():
                g.advance_mask(d, tok, c.V, c.eos, out=c.logits)
    torch.cuda.synchronize()


def _grid(c: SimpleNamespace) -> tuple[int, int, int]:
    """(blocks, parts, extra) of the default stepper's fused launch (`step_launch.mask_grid`)."""
    from flashtrie.gpu_impl.step_launch import mask_grid

    g = c.gpu
    parts, extra = mask_grid(c.rows, c.V, True, g.chunk, g.blocks_per_row, g._target_blocks)
    return c.rows * parts + extra, parts, extra


def _floors(c: SimpleNamespace, blocks: int, parts: int,
            extra: int) -> tuple[dict[str, float], Callable[[], Any]]:
    """Device µs of the floors on the fused step's grid (an empty kernel, -inf stores, dependent load chains),
    and the empty kernel's launch (timed again at the end)."""
    import torch
    from cuda.core import LaunchConfig, ObjectCode, Program, ProgramOptions, launch

    opts = ProgramOptions(std="c++17", arch=c.gpu.arch)
    obj = ObjectCode.from_cubin(bytes(Program(FLOOR_SRC, "c++", opts).compile("cubin").code))
    k_empty, k_store, k_flat = (obj.get_kernel(f"probe_{n}") for n in ("empty", "store", "store_flat"))
    table_n = 1 << 27  # 512 MiB of u32: the index's size class, random addresses miss the L2
    table = torch.randint(0, 2**31 - 1, (table_n,), dtype=torch.int32, device="cuda")
    sink = torch.zeros(1, dtype=torch.int32, device="cuda")
    cfg = LaunchConfig(grid=blocks, block=256)
    logits, rows, V = c.logits, c.rows, c.V

    def stream() -> Any:
        return _stream(c.gpu.xp.stream())

    def store(depth: int, out: Any = logits, parts: int = parts, extra: int = extra) -> Callable[[], Any]:
        sc = LaunchConfig(grid=rows * parts + extra, block=256)
        return lambda: launch(stream(), sc, k_store, np.uint64(out.data_ptr() if out is not None else 0),
                              np.uint64(V), np.uint64(V), np.uint32(parts), np.uint32(extra),
                              np.uint64(table.data_ptr()), np.uint64(table_n - 1), np.uint32(depth),
                              np.uint64(sink.data_ptr()))

    def empty() -> Any:
        return launch(stream(), cfg, k_empty)

    t: dict[str, float] = {"empty": _graph_us(empty), "empty x10": _graph_us(empty, inner=10)}
    for depth in (0, 1, 3, 6):
        t[f"chain {depth}, no stores"] = _graph_us(store(depth, None)) if depth else t["empty"]
        t[f"chain {depth} + stores"] = _graph_us(store(depth))
    t["stores x10"] = _graph_us(store(0), inner=10)
    # the same bytes with other spans: 3 parts a row, equal parts of the whole tensor
    t["stores x10, 3 parts a row"] = _graph_us(store(0, parts=3, extra=0), inner=10)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for nb in (blocks, 3 * sms, 4 * sms):
        fcfg = LaunchConfig(grid=nb, block=256)
        t[f"stores x10, {nb} equal parts of the tensor"] = _graph_us(
            lambda fcfg=fcfg: launch(stream(), fcfg, k_flat, np.uint64(logits.data_ptr()), np.uint64(rows * V)),
            inner=10)
    return t, empty


def _kernels(c: SimpleNamespace, t: dict[str, float], res: dict[str, Any]) -> None:
    """Device µs of the steppers' kernels into ``t``; GPU == numpy and every variant == the default into ``res``."""
    import torch

    gpu, V, eos, logits = c.gpu, c.V, c.eos, c.logits
    for n, (d, tok) in c.dev.items():
        for name, g in c.steppers.items():
            def fused(g: Any = g, d: Any = d, tok: Any = tok) -> Any:
                return g.advance_mask(d, tok, V, eos, out=logits)

            t[f"{n}: fused [{name}]"] = _graph_us(fused)
            t[f"{n}: fused x10 [{name}]"] = _graph_us(fused, inner=10)
        t[f"{n}: mask"] = _graph_us(lambda d=d: gpu.mask(d, V, eos, out=logits))
        t[f"{n}: advance"] = _graph_us(lambda d=d, tok=tok: gpu.advance(d, tok, eos))
        base = torch.randn(c.rows, V, device="cuda")
        ref = gpu.advance_mask(d, tok, V, eos, out=base.clone())
        host_states, host_tok = c.sets[n]
        want_states = c.cpu.advance(host_states, host_tok, eos)
        want = c.cpu.mask(want_states, V, eos, out=base.cpu().numpy().copy())
        res[f"{n}: GPU == numpy"] = bool(
            np.array_equal(ref[0].node.cpu().numpy(), want_states.node)
            and np.array_equal(ref[0].off.cpu().numpy(), want_states.off)
            and np.array_equal(ref[1].cpu().numpy().view(np.uint32), want.view(np.uint32)))
        for name, g in c.steppers.items():
            got = g.advance_mask(d, tok, V, eos, out=base.clone())
            res[f"{n}: same [{name}]"] = bool(
                torch.equal(got[0].node, ref[0].node) and torch.equal(got[0].off, ref[0].off)
                and torch.equal(got[1].view(torch.int32), ref[1].view(torch.int32)))


def measure(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, float], dict[str, bool]]:
    """The probe on the device: its shape (case, rows, vocabulary, grid), the device µs by name and the
    comparisons (GPU == numpy, each variant == the default)."""
    import torch

    c = _setup(args)
    blocks, parts, extra = _grid(c)
    res: dict[str, Any] = {"case": args.case, "shape": args.shape, "rows": c.rows, "vocab": c.V,
                           "gpu": torch.cuda.get_device_name(), "blocks_per_row": [parts, extra], "blocks": blocks}
    t, empty = _floors(c, blocks, parts, extra)
    _kernels(c, t, res)
    t["empty (again)"] = _graph_us(empty)
    same = {k: bool(res.pop(k)) for k in [k for k in res if "same" in k or "numpy" in k]}
    return res, t, same


def records(run: RunContext, shape: dict[str, Any], t: dict[str, float], same: dict[str, bool]) -> list[Record]:
    """A record per timing (``device_us``) and per comparison (``equal``; ``mismatch`` where it fails)."""
    out = [run.record(kind="step-probe", backend="gpu", sweep="step-probe", workload=shape, config={"what": k},
                      metrics={"device_us": v}) for k, v in t.items()]
    out += [run.record(kind="step-probe", backend="gpu", sweep="step-probe", workload=shape, config={"what": k},
                       metrics={"equal": ok}, status="ok" if ok else "mismatch",
                       message=None if ok else f"{k}: the results differ") for k, ok in same.items()]
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parse(argv)
    run = RunContext.start(["flashtrie", "bench", "step-probe", *argv])
    why = availability("gpu")
    if why is not None:
        if args.out:
            append_records(args.out, [run.record(kind="step-probe", backend="gpu", sweep="step-probe",
                                                 status="skipped", message=why,
                                                 workload={"case": args.case, "shape": args.shape})])
        print(f"step-probe: skipped ({why})")
        return 1
    if args.ncu:
        _ncu(_setup(args))
        return 0
    shape, t, same = measure(args)
    append_records(args.out, records(run, shape, t, same))
    parts, extra = shape["blocks_per_row"]
    print(f"| {args.case} {args.shape}: {shape['rows']} rows x {shape['vocab']}, {shape['blocks']} blocks ({parts} per "
          f"row, {parts + 1} for {extra} rows) | device µs |")
    print("| --- | ---: |")
    for key, v in t.items():
        print(f"| {key} | {v:.2f} |")
    print(same)
    return 0 if all(same.values()) else 1
