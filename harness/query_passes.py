"""Seconds of the query generator's library pass on the CPU (at several thread counts) and the GPU, and of
16 dense queries (K = 1000) on each path, over `flashtrie gen-keywords`' default library; checks that the
GPU's facts and workload equal the CPU's bit for bit.  A suite of the lab: records of kind ``query-pass``
(sweep ``query-passes``), rendered by `probe_report`.

    flashtrie bench query-passes --out FILE.jsonl [--n 100M] [--threads 1,4,16] [--pieces 18,20]
                                 [--tally-keys 21] [--no-gpu]

Writes one record per measurement as it comes (printed as a line) and a last record with the verdict, GPU ==
CPU (``mismatch`` when they differ, ``skipped`` with ``--no-gpu``); exits 1 unless the paths were compared and
equal.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import sys
import time
from typing import Any

import numpy as np
from flashtrie.datasets import KeywordParams, generate_keywords_from, generate_queries
from flashtrie.datasets import _library_pass as lp
from flashtrie.datasets._library_pass import LibraryFacts, library_pass
from flashtrie.datasets._queries_v2 import max_token

from .argtypes import count, ints
from .records import Record, append_records
from .run_context import RunContext

#: the verdict's row
VERDICT = "GPU == CPU (facts and workload digests)"


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(fn: Any) -> tuple[Any, float, float]:
    """fn's result, its wall seconds and the CPU seconds of the process meanwhile."""
    c, t = cpu_seconds(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t, cpu_seconds() - c


def forked_blocks(ks: Any, top: int, workers: int) -> tuple[float, float]:
    """Wall and CPU seconds of the CPU pass's blocks (lengths, hashes, counts; no merge) in ``workers`` forked
    processes: a diagnostic of what threads lose to the GIL (the results are dropped)."""
    n = len(ks)
    step = -(-n // workers)
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    pids = []
    for s in range(0, n, step):
        pid = os.fork()
        if pid == 0:  # the child: its block, then out without Python's shutdown
            code = 1
            try:
                facts = LibraryFacts(np.empty(n, np.uint8), np.empty(n, np.uint64), "", np.zeros(0, np.int64), [])
                lp._Block(ks, facts, 8, top + 1, True, step).run(s, min(s + step, n))
                code = 0
            finally:
                os._exit(code)
        pids.append(pid)
    bad = sum(os.waitpid(pid, 0)[1] != 0 for pid in pids)
    wall = time.perf_counter() - t
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if bad:
        raise RuntimeError(f"{bad} forked blocks failed")
    return wall, c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime


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


def row_record(run: RunContext, n: int, row: dict[str, Any]) -> Record:
    """One measurement as a record: its ``what`` and thread count the configuration, its numbers the metrics;
    ``mismatch`` where the GPU's facts differ from the CPU's, ``error`` where the GPU pass failed."""
    m = {k: v for k, v in row.items() if k not in ("what", "differs", "error", "threads")}
    status, message = "ok", None
    if row.get("error"):
        status, message = "error", row["error"]
    elif row.get("differs"):
        status, message = "mismatch", "facts differ: " + ", ".join(row["differs"])
    backend = "gpu" if "GPU" in row["what"] or row["what"].endswith("device=gpu") else "cpu"
    config = {"what": row["what"], **({"threads": row["threads"]} if "threads" in row else {})}
    return run.record(kind="query-pass", backend=backend, sweep="query-passes", status=status, message=message,
                      workload={"num_keywords": n}, config=config, metrics=m)


class Bench:
    """The measurements, one row each (printed, and appended as a record to ``out``, as they come)."""

    def __init__(self, ks: Any, threads: list[int], run: RunContext | None = None, out: str | None = None) -> None:
        self.ks, self.threads, self.top = ks, threads, max_token(ks)
        self.rows: list[dict[str, Any]] = []
        self.ref: LibraryFacts | None = None
        self.ok = True
        self.run, self.out = run or RunContext(), out

    def row(self, what: str, wall: float, cpu: float, **extra: Any) -> None:
        self.rows.append({"what": what, "seconds": round(wall, 3), "cpu_seconds": round(cpu, 3), **extra})
        self._keep(self.rows[-1])
        shown = {k: v for k, v in extra.items() if k != "threads"}
        print(f"{what:48s} {wall:8.2f} s  (CPU {cpu:7.2f} s) {shown or ''}", flush=True)

    def _keep(self, row: dict[str, Any]) -> None:
        if self.out is not None:
            append_records(self.out, [row_record(self.run, len(self.ks), row)])

    def cpu(self) -> None:
        ks, top = self.ks, self.top
        for t in self.threads:
            facts, w, c = timed(lambda t=t: library_pass(ks, 8, top, t))
            self.row(f"CPU pass, {t} threads", w, c, threads=t)
            self.ref = self.ref or facts
        most = self.threads[-1]
        _, w, c = timed(lambda: library_pass(ks, 0, top, most))
        self.row(f"CPU pass without counts, {most} threads", w, c, threads=most)
        try:
            w, c = forked_blocks(ks, top, most)  # before any GPU use: no driver threads to fork
            self.row(f"CPU blocks in {most} forked processes (no GIL)", w, c, threads=most)
        except (OSError, RuntimeError) as e:  # a diagnostic only
            print(f"forked blocks: {e}", flush=True)

    def gpu(self) -> bool:
        from flashtrie.datasets._library_pass_gpu import library_pass_gpu

        moved = (self.ks.tokens.nbytes + self.ks.offsets.nbytes) / 1e9
        for rep in (1, 2):
            parts: dict[str, float] = {}
            try:
                facts, w, c = timed(lambda p=parts: library_pass_gpu(self.ks, 8, self.top, timings=p))
            except Exception as e:  # record it, go on with the CPU rows
                print(f"GPU pass failed: {type(e).__name__}: {e}", flush=True)
                self.rows.append({"what": "GPU pass", "seconds": float("nan"), "cpu_seconds": float("nan"),
                                  "error": f"{type(e).__name__}: {e}"})
                self._keep(self.rows[-1])
                self.ok = False
                return False
            bad = same_facts(self.ref, facts) if self.ref is not None else ["no CPU reference"]
            self.ok &= not bad
            self.row(f"GPU pass (run {rep})", w, c, differs=bad, split={k: round(v, 3) for k, v in parts.items()},
                     upload_GBps=round(moved / max(parts["upload"], 1e-9), 2))
        return True

    def queries(self, devices: tuple[str, ...]) -> None:
        for device in devices:
            split: dict[str, float] = {}
            wl, w, c = timed(lambda d=device, s=split: generate_queries(
                self.ks, 16, proposals_per_step=1000, preset="dense", seed=0, timings=s, device=d))
            self.row(f"16 dense queries, device={device}", w, c, digest=digest(wl),
                     split={k: round(v, 3) for k, v in split.items()})
        self.ok &= len({r["digest"] for r in self.rows if "digest" in r}) == 1

    def variant(self, what: str, threads: int, **values: Any) -> None:
        """The CPU pass with ``lp.<name> = value`` for each of ``values``."""
        defaults = {k: getattr(lp, k) for k in values}
        for k, v in values.items():
            setattr(lp, k, v)
        try:
            _, w, c = timed(lambda: library_pass(self.ks, 8, self.top, threads))
        finally:
            for k, v in defaults.items():
                setattr(lp, k, v)
        self.row(f"CPU pass, {threads} threads, {what}", w, c, threads=threads)


def parse(argv: list[str]) -> argparse.Namespace:
    """The suite's options."""
    ap = argparse.ArgumentParser(prog="flashtrie bench query-passes", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="records file (JSON Lines, appended)")
    ap.add_argument("--n", type=count, default=100_000_000, help="library size (default 100M)")
    ap.add_argument("--threads", type=ints, default=[1, 4, 16], help="CPU thread counts of the pass, comma-separated")
    ap.add_argument("--pieces", default="18,20",
                    help="log2 of other piece sizes (keywords) to time the CPU pass with, at the most threads")
    ap.add_argument("--tally-keys", default="21",
                    help="log2 of other count buffer sizes (keys) to time the CPU pass with, at the most threads")
    ap.add_argument("--no-gpu", action="store_true", help="CPU only")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    run = RunContext.start(["flashtrie", "bench", "query-passes", *argv])
    ks, w, c = timed(lambda: generate_keywords_from(KeywordParams(n=args.n, seed=0)))
    b = Bench(ks, args.threads, run, args.out)
    b.row(f"generate {args.n:,} keywords", w, c, tokens=int(ks.tokens.size))
    b.cpu()
    gpu = not args.no_gpu and b.gpu()
    b.queries(("cpu", "gpu") if gpu else ("cpu",))
    if args.no_gpu:
        b.ok = False  # nothing compared
    most = b.threads[-1]
    b.variant("pieces of 2^17, count buffer of 2^18 (the defaults before)", most, PIECE=1 << 17, _TALLY_KEYS=1 << 18)
    b.variant("bincount counting", most, COUNTING="bincount")
    for log in [int(x) for x in args.pieces.split(",") if x]:
        b.variant(f"pieces of 2^{log}", most, PIECE=1 << log)
    for log in [int(x) for x in args.tally_keys.split(",") if x]:
        b.variant(f"count buffer of 2^{log}", most, _TALLY_KEYS=1 << log)
    _verdict(b, args.no_gpu)
    print("\n| step | seconds | CPU seconds |\n| --- | ---: | ---: |")
    for r in b.rows:
        print(f"| {r['what']} | {r['seconds']:.2f} | {r['cpu_seconds']:.2f} |")
    print(f"{VERDICT}: {'yes' if b.ok else 'NO'}")
    return 0 if b.ok else 1


def _verdict(b: Bench, no_gpu: bool) -> None:
    """The last record: GPU == CPU, or why not (skipped without the GPU, mismatch when they differ)."""
    if no_gpu:
        status, message = "skipped", "--no-gpu: the GPU pass was not run, nothing compared"
    elif b.ok:
        status, message = "ok", None
    else:
        status, message = "mismatch", "the GPU's facts or workload differ from the CPU's, or the GPU pass failed"
    if b.out is not None:
        append_records(b.out, [b.run.record(kind="query-pass", backend="gpu", sweep="query-passes", status=status,
                                            message=message, workload={"num_keywords": len(b.ks)},
                                            config={"what": VERDICT}, metrics={"same": b.ok})])
