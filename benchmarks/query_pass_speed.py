"""Seconds of the query generator's library pass on the CPU (at several thread counts) and the GPU, and of
16 dense queries (K = 1000) on each path, over `flashtrie gen-keywords`' default library; checks that the
GPU's facts and workload equal the CPU's bit for bit.

    python benchmarks/query_pass_speed.py --n 100M --threads 1,4,16 --json out.json

Prints one line per measurement and a table last; exits 1 when the paths differ.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import sys
import time
from typing import Any

import numpy as np
from flashtrie.datasets import KeywordParams, generate_keywords_from, generate_queries
from flashtrie.datasets import _library_pass as lp
from flashtrie.datasets._library_pass import LibraryFacts, library_pass
from flashtrie.datasets._queries_v2 import max_token

from flashtrie.cli.common import count


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(fn: Any) -> tuple[Any, float, float]:
    """fn's result, its wall seconds and the CPU seconds of the process meanwhile."""
    c, t = cpu_seconds(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t, cpu_seconds() - c


def same_facts(a: LibraryFacts, b: LibraryFacts) -> list[str]:
    """Names of the fields that differ (dtype or values)."""
    bad = [f for f in ("lengths", "full", "length_counts")
           if getattr(a, f).dtype != getattr(b, f).dtype or not np.array_equal(getattr(a, f), getattr(b, f))]
    if a.fingerprint != b.fingerprint:
        bad.append("fingerprint")
    if len(a.depth_counts) != len(b.depth_counts) or any(
            t1.dtype != t2.dtype or c1.dtype != c2.dtype or not np.array_equal(t1, t2) or not np.array_equal(c1, c2)
            for (t1, c1), (t2, c2) in zip(a.depth_counts, b.depth_counts, strict=False)):
        bad.append("depth_counts")
    return bad


def digest(wl: Any) -> str:
    h = hashlib.sha256()
    for a in (wl.proposals.tokens, wl.proposals.logprobs, wl.topics, *wl.relevant):
        h.update(np.ascontiguousarray(a).tobytes())
    h.update(wl.params.library_fingerprint.encode())
    return h.hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=count, default=100_000_000, help="library size (default 100M)")
    ap.add_argument("--threads", default="1,4,16", help="CPU thread counts of the pass, comma-separated")
    ap.add_argument("--pieces", default="15,19,21",
                    help="log2 of other piece sizes (keywords) to time the CPU pass with, at the most threads")
    ap.add_argument("--tally-keys", default="16,20",
                    help="log2 of other count buffer sizes (keys) to time the CPU pass with, at the most threads")
    ap.add_argument("--no-gpu", action="store_true", help="CPU only")
    ap.add_argument("--json", default=None, help="write every measurement here")
    args = ap.parse_args(argv)
    threads = [int(x) for x in args.threads.split(",")]
    rows: list[dict[str, Any]] = []

    def row(what: str, wall: float, cpu: float, **extra: Any) -> None:
        rows.append({"what": what, "seconds": round(wall, 3), "cpu_seconds": round(cpu, 3), **extra})
        print(f"{what:48s} {wall:8.2f} s  (CPU {cpu:7.2f} s) {extra or ''}", flush=True)

    ks, w, c = timed(lambda: generate_keywords_from(KeywordParams(n=args.n, seed=0)))
    row(f"generate {args.n:,} keywords", w, c, tokens=int(ks.tokens.size))
    top = max_token(ks)
    ref = None
    for t in threads:
        facts, w, c = timed(lambda t=t: library_pass(ks, 8, top, t))
        row(f"CPU pass, {t} threads", w, c)
        ref = ref or facts
        _, w, c = timed(lambda t=t: library_pass(ks, 0, top, t))
        row(f"CPU pass without counts, {t} threads", w, c)
        lp.COUNTING = "bincount"
        try:
            _, w, c = timed(lambda t=t: library_pass(ks, 8, top, t))
        finally:
            lp.COUNTING = "sort"
        row(f"CPU pass, {t} threads, bincount counting", w, c)
    for log in [int(x) for x in args.pieces.split(",") if x]:
        default = lp.PIECE
        lp.PIECE = 1 << log
        try:
            _, w, c = timed(lambda: library_pass(ks, 8, top, threads[-1]))
        finally:
            lp.PIECE = default
        row(f"CPU pass, {threads[-1]} threads, pieces of 2^{log}", w, c)
    for log in [int(x) for x in args.tally_keys.split(",") if x]:
        default = lp._TALLY_KEYS
        lp._TALLY_KEYS = 1 << log
        try:
            _, w, c = timed(lambda: library_pass(ks, 8, top, threads[-1]))
        finally:
            lp._TALLY_KEYS = default
        row(f"CPU pass, {threads[-1]} threads, count buffer of 2^{log}", w, c)
    ok, gpu = True, not args.no_gpu
    if gpu:
        from flashtrie.datasets._library_pass_gpu import library_pass_gpu

        for rep in (1, 2):
            try:
                parts: dict[str, float] = {}
                facts, w, c = timed(lambda p=parts: library_pass_gpu(ks, 8, top, timings=p))
            except Exception as e:  # record it, go on with the CPU rows
                print(f"GPU pass failed: {type(e).__name__}: {e}", flush=True)
                rows.append({"what": "GPU pass", "seconds": float("nan"), "cpu_seconds": float("nan"),
                             "error": f"{type(e).__name__}: {e}"})
                ok = gpu = False
                break
            bad = same_facts(ref, facts)
            ok &= not bad
            moved = (ks.tokens.nbytes + ks.offsets.nbytes) / 1e9
            row(f"GPU pass (run {rep})", w, c, differs=bad, split={k: round(v, 3) for k, v in parts.items()},
                upload_GBps=round(moved / parts["upload"], 2))
    for device in ("cpu",) + (("gpu",) if gpu else ()):
        split: dict[str, float] = {}
        wl, w, c = timed(lambda d=device, s=split: generate_queries(ks, 16, proposals_per_step=1000, preset="dense",
                                                                     seed=0, timings=s, device=d))
        row(f"16 dense queries, device={device}", w, c, digest=digest(wl),
            split={k: round(v, 3) for k, v in split.items()})
    digests = {r["digest"] for r in rows if "digest" in r}
    ok &= len(digests) == 1
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"n": args.n, "rows": rows, "same": ok}, f, indent=1)
    print("\n| step | seconds | CPU seconds |\n| --- | ---: | ---: |")
    for r in rows:
        print(f"| {r['what']} | {r['seconds']:.2f} | {r['cpu_seconds']:.2f} |")
    print(f"GPU == CPU (facts and workload digests): {'yes' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
