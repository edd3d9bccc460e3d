"""Verified-load speed: ``NarrowLoudsIndex.load(path, verify=True)`` timed at several core counts, on index files
given or prepared here (``--prepare N``: N generated keywords, seed 0, built with the GPU builder where it runs,
saved in both id orders).

    python -m flashtrie.harness.load_speed FILE... [--workers 1,2,16] [--repeats 3] [--json OUT]
    python -m flashtrie.harness.load_speed --prepare 800M --dir /tmp/load --workers 1,4,16 --json load.json
                                          [--device auto|cpu|gpu] [--set louds_pass.PIECE_BITS=262144 ...]

Each worker count w runs with the process's CPU affinity set to w CPUs (so `flashtrie.cpus.usable_cpus`,
and with it every threaded check, sees w).  Prints the best seconds and GB/s (file bytes per second) per
file and count, the least CPU time of a load (GB per CPU-second: per-core speed, less sensitive than
the wall clock to a busy machine), and the split of the fastest load into its steps (the seconds spent
waiting for each verdict: the checks themselves overlap, see `flashtrie.index.verify_run`); ``--json``
writes the same as one JSON object.  ``--set MODULE.NAME=INT`` sets a piece-size constant of
``flashtrie.index.MODULE`` first (to compare piece sizes on one machine).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from pathlib import Path

from flashtrie import NarrowLoudsIndex
from flashtrie.io_util import atomic_write

from .argtypes import count

__all__ = ["main", "measure", "prepare", "set_constants", "warm", "worker_counts"]


def measure(path: str, workers: int, repeats: int, device: str = "auto") -> dict:
    """Best of ``repeats`` verified loads of ``path`` on ``workers`` CPUs, and the step split of the best."""
    all_cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, all_cpus[:workers])
    try:
        best, cpu, split = float("inf"), float("inf"), {}
        for _ in range(repeats):
            t: dict[str, float] = {}
            c0, t0 = time.process_time(), time.perf_counter()
            NarrowLoudsIndex.load(path, verify=True, timings=t, verify_device=device)
            dt, cpu = time.perf_counter() - t0, min(cpu, time.process_time() - c0)
            if dt < best:
                best, split = dt, t
    finally:
        os.sched_setaffinity(0, all_cpus)
    size = os.path.getsize(path)
    return {"path": path, "bytes": size, "workers": workers, "device": device, "seconds": round(best, 4),
            "gb_per_s": round(size / best / 1e9, 3),
            "cpu_seconds": round(cpu, 4), "gb_per_cpu_s": round(size / cpu / 1e9, 3),
            "split": {k: round(v, 4) for k, v in split.items()}}


def warm(path: str) -> None:
    """Read the whole file once, so that the timed loads find it in the page cache."""
    with open(path, "rb", buffering=0) as f:
        while f.read(16 << 20):
            pass


def worker_counts(text: str, usable: int) -> list[int]:
    """The CPU counts of ``--workers`` (each at least 1, capped at the ``usable`` CPUs)."""
    try:
        wanted = [int(w) for w in text.split(",") if w.strip()]
    except ValueError:
        raise SystemExit(f"--workers: expected comma-separated CPU counts such as 1,2,16, got {text!r}") from None
    if not wanted or min(wanted) < 1:
        raise SystemExit(f"--workers: every CPU count must be at least 1, got {text!r}")
    return sorted({min(w, usable) for w in wanted})


def set_constants(items: list[str]) -> dict[str, int]:
    """Apply ``MODULE.NAME=INT`` settings to the integer constants of ``flashtrie.index`` modules."""
    done = {}
    for item in items:
        target, _, value = item.partition("=")
        mod, _, name = target.rpartition(".")
        try:
            module = importlib.import_module(f"flashtrie.index.{mod}")
            if not isinstance(getattr(module, name), int):
                raise AttributeError(name)
            setattr(module, name, int(value))
        except (ImportError, AttributeError, ValueError):
            raise SystemExit(f"--set: expected MODULE.CONSTANT=INT of flashtrie.index, got {item!r}") from None
        done[target] = int(value)
    return done


def prepare(n: int, folder: str, seed: int = 0) -> list[str]:
    """Index files of ``n`` generated keywords in ``folder`` (input-order ids with their map, index-order ids
    without one), built where missing; returns their paths."""
    from flashtrie.datasets import KeywordParams, generate_keywords_from

    from .scale.prepare import build_with, choose_builder

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    paths = {ids: out / f"load-{n}-{ids}.ftrie" for ids in ("input", "index")}
    missing = [ids for ids, p in paths.items() if not p.exists()]
    if missing:
        t = time.perf_counter()
        ks = generate_keywords_from(KeywordParams(n=n, seed=seed))
        builder, why = choose_builder("auto")
        print(f"generated {n:,} keywords in {time.perf_counter() - t:.1f} s; building on the {builder}"
              + (f" ({why})" if why else ""), flush=True)
        for ids in missing:
            t = time.perf_counter()
            build_with(builder, ks, ids=ids).save(paths[ids])
            print(f"built and saved {paths[ids]} in {time.perf_counter() - t:.1f} s", flush=True)
    return [str(p) for p in paths.values()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--prepare", type=count, metavar="N", help="generate N keywords and build both id orders")
    ap.add_argument("--dir", default="/tmp/flashtrie-load", help="where --prepare keeps its files")
    ap.add_argument("--workers", default="1,2", help="comma-separated CPU counts (capped at the usable ones)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"),
                    help="where the LOUDS pass runs (load's verify_device)")
    ap.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=INT",
                    help="set a piece-size constant of flashtrie.index.MODULE (repeatable)")
    args = ap.parse_args(argv)
    settings = set_constants(args.set)
    if args.repeats < 1:
        raise SystemExit(f"--repeats: expected at least 1, got {args.repeats}")
    files = list(args.files) + (prepare(args.prepare, args.dir) if args.prepare else [])
    if not files:
        raise SystemExit("give index files, or --prepare N to build them")
    usable = len(os.sched_getaffinity(0))
    counts = worker_counts(args.workers, usable)
    results = []
    for path in files:
        warm(path)
        for w in counts:
            r = measure(path, w, args.repeats, args.device)
            results.append(r)
            split = ", ".join(f"{k} {v:.3f}" for k, v in r["split"].items())
            print(f"{os.path.basename(path)} ({r['bytes'] / 1e9:.3f} GB) {w:>2} cores: {r['seconds']:.3f} s, "
                  f"{r['gb_per_s']:.3f} GB/s ({r['gb_per_s'] / w:.3f} per core); CPU {r['cpu_seconds']:.3f} s, "
                  f"{r['gb_per_cpu_s']:.3f} GB per CPU-second | {split}", flush=True)
    if args.json:
        doc = {"results": results, "cpus": usable, "python": sys.version.split()[0], "settings": settings,
               "command": [sys.executable, "-m", "flashtrie.harness.load_speed", *(argv or sys.argv[1:])]}
        atomic_write(args.json, json.dumps(doc, indent=1).encode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
