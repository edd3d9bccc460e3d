"""Measurements of the GPU builder, one per process (so each peak RSS is its own), a suite of the lab: each
appends one record of kind ``gpu-build`` (sweep ``gpubuild``, its configuration ``what`` and the options) that
`probe_report` renders; without cupy or a GPU one ``skipped`` record with the reason, exit status 1.

    flashtrie bench gpubuild build --out FILE.jsonl --n 100M [--numpy] [--ids input|index] [--pool-peaks]
    flashtrie bench gpubuild compare --out FILE.jsonl --n 5M [--numpy]
    flashtrie bench gpubuild transfer --out FILE.jsonl --gb 4
    flashtrie bench gpubuild directories --out FILE.jsonl --nodes 720M

* ``build``: `generate_keywords` (all cores), then `build_gpu.build_index` (``--numpy``: the same code on the
  CPU, where every "device" array is a host array: its peak is then the GPU's memory, not the host's),
  each sub-stage's seconds, cupy's pool (reserved bytes) at each stage start (``--pool-peaks``: the cached
  blocks freed at every stage start, so that each figure is about the previous stage's own peak), the host memory:
  the input's resident size, the build's peak above it (VmHWM after a reset), and the index arrays' bytes;
* ``compare``: the CPU builder and the GPU builder on the same library, both id modes, array for array
  (``mismatch`` where they differ);
* ``transfer``: host->GPU and GPU->host copies of a ``--gb`` array, cupy's own against `host_transfer.Stager`
  (``mismatch`` where a round trip changed the data);
* ``directories``: `BitVector.from_words` on random words of a trie of ``--nodes`` nodes (the host's part).
"""

from __future__ import annotations

import argparse
import functools
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from flashtrie.errors import DeviceError

from .argtypes import count
from .records import append_records
from .run_context import RunContext


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def rss() -> int:
    """Resident bytes now."""
    return _status_kb("VmRSS") * 1024


def reset_peak() -> bool:
    """Reset this process's peak resident size (Linux: clear_refs 5); False where that is not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak() -> int:
    """Peak resident bytes since the last `reset_peak` (VmHWM)."""
    return _status_kb("VmHWM") * 1024


def _cupy() -> Any:
    from flashtrie.arrays import cupy_module

    return cupy_module()


def cmd_build(a: argparse.Namespace) -> dict[str, Any]:
    from flashtrie.datasets import generate_keywords
    from flashtrie.gpu_impl import build_gpu

    t0 = time.perf_counter()
    ks = generate_keywords(a.n, seed=a.seed)
    gen_s = time.perf_counter() - t0
    print(f"[build] generated {a.n:,} keywords in {gen_s:.1f} s", file=sys.stderr, flush=True)
    xp = np if a.numpy else _cupy()
    pool = None if a.numpy else xp.get_default_memory_pool()
    t0 = time.perf_counter()
    if pool is not None:  # the CUDA context and cupy's kernels (compiled at first use) outside the build's time
        build_gpu.build_index(generate_keywords(200_000, seed=a.seed + 1), xp=xp)
        pool.free_all_blocks()
    warm_s = time.perf_counter() - t0
    print(f"[build] warm-up {warm_s:.1f} s", file=sys.stderr, flush=True)
    base = rss()
    was_reset = reset_peak()
    marks: list[tuple[str, float, int]] = []

    def progress(stage: str) -> None:
        marks.append((stage, time.perf_counter(), pool.total_bytes() if pool is not None else 0))
        if a.pool_peaks and pool is not None:  # the next mark's total is then about that stage's own peak
            pool.free_all_blocks()
        print(f"[build] {stage} at {marks[-1][1] - t0:.2f} s", file=sys.stderr, flush=True)  # shows where a timeout hit

    t0 = time.perf_counter()
    idx = build_gpu.build_index(ks, progress, ids=a.ids, xp=xp)
    t1 = time.perf_counter()
    stages = [[s, round((marks[i + 1][1] if i + 1 < len(marks) else t1) - t, 3)] for i, (s, t, _) in enumerate(marks)]
    gpu_pool = [[s, b] for s, _, b in marks]
    out_bytes = sum(int(v.nbytes) for v in idx.arrays.values())
    ks_bytes = int(ks.tokens.nbytes + ks.offsets.nbytes)
    hwm = peak() if was_reset else int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
    return {"n": a.n, "ids": a.ids, "xp": xp.__name__, "pool_peaks": a.pool_peaks, "generate_s": round(gen_s, 3),
            "warmup_s": round(warm_s, 3), "build_s": round(t1 - t0, 3),
            "stages": stages, "gpu_pool_total_bytes_at_stage": gpu_pool, "num_nodes": idx.num_nodes,
            "num_unique": idx.num_unique, "input_bytes": ks_bytes, "rss_before_build": base,
            "peak_rss_during_build": hwm, "peak_reset": was_reset, "build_peak_above_input": hwm - base,
            "index_array_bytes": out_bytes,
            "ru_maxrss_bytes": int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024}


def cmd_compare(a: argparse.Namespace) -> dict[str, Any]:
    from flashtrie.datasets import generate_keywords
    from flashtrie.gpu_impl import build_gpu

    from flashtrie import NarrowLoudsIndex

    ks = generate_keywords(a.n, seed=a.seed, duplicate_fraction=0.02)
    xp = np if a.numpy else _cupy()
    res: dict[str, Any] = {"n": a.n, "xp": xp.__name__, "modes": {}}
    for ids in ("input", "index"):
        t0 = time.perf_counter()
        cpu, cpu_order = NarrowLoudsIndex.build(ks, ids=ids, return_order=True)
        t1 = time.perf_counter()
        gpu, gpu_order = build_gpu.build_index(ks, ids=ids, xp=xp, return_order=True)
        t2 = time.perf_counter()
        ca, ga = cpu.arrays, gpu.arrays
        diff = [k for k in ca if k not in ga or ca[k].dtype != ga[k].dtype or not np.array_equal(ca[k], ga[k])]
        diff += [k for k in ga if k not in ca]
        meta = {k for k in set(cpu.meta) | set(gpu.meta) if k != "build_seconds" and cpu.meta.get(k) != gpu.meta.get(k)}
        if not np.array_equal(cpu_order, gpu_order):
            diff.append("order")
        res["modes"][ids] = {"cpu_s": round(t1 - t0, 3), "gpu_s": round(t2 - t1, 3), "arrays": len(ca),
                             "different_arrays": diff, "different_meta": sorted(meta), "equal": not diff and not meta}
    res["equal"] = all(m["equal"] for m in res["modes"].values())
    return res


def _gbps(nbytes: int, fn: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    v = fn()
    return round(nbytes / (time.perf_counter() - t0) / 1e9, 2), v


def cmd_transfer(a: argparse.Namespace) -> dict[str, Any]:
    from flashtrie.gpu_impl.host_transfer import Stager, download_plain, upload_plain

    cp = _cupy()
    nbytes = int(a.gb * 1e9) // 8 * 8
    host = np.arange(nbytes // 8, dtype=np.uint64)  # touched: resident
    cp.zeros(1).sum()
    t0 = time.perf_counter()
    stager = Stager(cp)
    setup_s = time.perf_counter() - t0
    out: dict[str, Any] = {"bytes": nbytes, "stager_setup_s": round(setup_s, 3)}
    for rep in range(2):
        out[f"upload_plain_gbps_{rep}"], dev = _gbps(nbytes, lambda: upload_plain(cp, host))
        del dev
        out[f"upload_staged_gbps_{rep}"], dev = _gbps(nbytes, lambda: stager.upload(host))
        out[f"download_plain_fresh_gbps_{rep}"], back = _gbps(nbytes, lambda d=dev: download_plain(cp, d))
        same = bool(np.array_equal(back, host))
        del back
        out[f"download_staged_fresh_gbps_{rep}"], back = _gbps(nbytes, lambda d=dev: stager.download(d))
        out[f"round_trip_equal_{rep}"] = same and bool(np.array_equal(back, host))
        del back, dev
        cp.get_default_memory_pool().free_all_blocks()
    stager.close()
    return out


def cmd_directories(a: argparse.Namespace) -> dict[str, Any]:
    from flashtrie.cpus import in_parallel, usable_cpus
    from flashtrie.index.bits import BitVector

    rng = np.random.default_rng(0)
    out: dict[str, Any] = {"nodes": a.nodes, "cores": usable_cpus()}
    vecs = [("louds", 2 * a.nodes - 1, True)] + [(k, a.nodes, False) for k in ("hi_flag", "linked", "terminal")]
    words = {}
    for name, nbits, _ in vecs:
        w = rng.integers(0, 2**63, BitVector.word_count(nbits), dtype=np.uint64)
        w[-(-nbits // 64):] = 0
        words[name] = w
    for name, nbits, sel in vecs:
        t0 = time.perf_counter()
        BitVector.from_words(words[name], nbits, with_select0=sel)
        out[f"{name}_s"] = round(time.perf_counter() - t0, 3)
    t0 = time.perf_counter()
    in_parallel([functools.partial(BitVector.from_words, words[name], nbits, with_select0=sel)
                 for name, nbits, sel in vecs], usable_cpus())
    out["all_four_on_threads_s"] = round(time.perf_counter() - t0, 3)
    return out


def parse(argv: list[str]) -> argparse.Namespace:
    """The suite's options."""
    ap = argparse.ArgumentParser(prog="flashtrie bench gpubuild", description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("build", "compare", "transfer", "directories"))
    ap.add_argument("--out", required=True, help="records file (JSON Lines, appended)")
    ap.add_argument("--n", type=count, default=10_000_000)
    ap.add_argument("--nodes", type=count, default=30_000_000)
    ap.add_argument("--gb", type=float, default=4.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ids", choices=("input", "index"), default="input")
    ap.add_argument("--numpy", action="store_true", help="run the GPU builder's code with numpy")
    ap.add_argument("--pool-peaks", action="store_true",
                    help="build: free cupy's cached blocks at every stage start (each stage's reserved peak; slower)")
    return ap.parse_args(argv)


#: what -> its measurement, and the options that configure it
MEASURES = {"build": (cmd_build, ("n", "seed", "ids", "numpy", "pool_peaks")),
            "compare": (cmd_compare, ("n", "seed", "numpy")), "transfer": (cmd_transfer, ("gb",)),
            "directories": (cmd_directories, ("nodes",))}


def _verdict(res: dict[str, Any]) -> tuple[str, str | None]:
    """The record's status and message: ``mismatch`` where the builders' results or a round trip differ."""
    if not res.get("equal", True):
        bad = {m: v["different_arrays"] + v["different_meta"] for m, v in res["modes"].items() if not v["equal"]}
        return "mismatch", f"CPU and GPU builds differ: {bad}"
    trips = [k for k, v in res.items() if k.startswith("round_trip_equal") and not v]
    return ("mismatch", f"a copy's round trip changed the data: {', '.join(trips)}") if trips else ("ok", None)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = parse(argv)
    run = RunContext.start(["flashtrie", "bench", "gpubuild", *argv])
    measure, options = MEASURES[a.what]
    config = {"what": a.what, **{k: getattr(a, k) for k in options}}
    backend = "host" if a.what == "directories" else "numpy" if a.numpy and a.what != "transfer" else "gpu"
    try:
        res = measure(a)
    except DeviceError as e:
        append_records(a.out, [run.record(kind="gpu-build", backend=backend, sweep="gpubuild", status="skipped",
                                          message=str(e), config=config)])
        print(f"gpubuild {a.what}: skipped ({e})")
        return 1
    status, message = _verdict(res)
    append_records(a.out, [run.record(kind="gpu-build", backend=backend, sweep="gpubuild", status=status,
                                      message=message, config=config, metrics=res)])
    print(f"{a.what}: {res}", flush=True)
    return 0 if status == "ok" else 1
