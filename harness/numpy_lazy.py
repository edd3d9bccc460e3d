"""The lazy numpy reference at scale (GPU == numpy at 800M), a suite of the lab: records of kind ``numpy-lazy``
(sweep ``numpylazy``), rendered by `probe_report`.

    flashtrie bench numpylazy --out FILE.jsonl [--n 100M] [--eager-below 40]

Generates ``--n`` keywords, builds them with the GPU builder (the CPU builder without cupy), generates 16
dense queries (K = 1000), then times ``NumpySearcher(index, decode="lazy")``'s set-up and its peak RSS growth,
times numpy's side of the scale command's GPU == numpy check (4 queries, beams 10 and 1000, cold), searches
the 16 queries at beam 1000 (one batch) with numpy and with the GPU and compares them bit for bit,
and times numpy's batch-1 search of each query (warm: the second pass).  ``--eager-below S``: also the eager
set-up when the run so far took under S seconds.  Each measurement is a record as it comes (``what`` and its
value; a comparison ``mismatch`` when the results differ, ``skipped`` when it could not run), printed as a line;
a short table last.  Exit status 1 when a comparison differs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np

from .argtypes import count
from .records import append_records
from .run_context import RunContext

#: the entries that compare two searches: "equal" or why not
COMPARISONS = ("gpu == numpy", "numpy eager == lazy (beam 1000)")


class Log(dict[str, Any]):
    """The run's measurements by name; each one set is appended to ``out`` as a record as it comes."""

    def __init__(self, run: RunContext, out: str, n: int) -> None:
        super().__init__()
        self.run, self.out, self.n = run, out, n

    def __setitem__(self, name: str, value: Any) -> None:
        super().__setitem__(name, value)
        status, message = "ok", None
        if name in COMPARISONS and value != "equal":
            status, message = ("skipped" if str(value).startswith("not run") else "mismatch"), str(value)
        append_records(self.out, [self.run.record(
            kind="numpy-lazy", backend="gpu" if name.startswith(("gpu", "Gpu")) else "numpy", sweep="numpylazy",
            status=status, message=message, workload={"num_keywords": self.n}, config={"what": name},
            metrics={"value": value})])


def _timed(log: dict[str, Any], name: str, fn: Any) -> Any:
    t0 = time.perf_counter()
    out = fn()
    log[name] = round(time.perf_counter() - t0, 3)
    print(f"[numpylazy] {name}: {log[name]:.2f} s", flush=True)
    return out


def inputs(n: int, log: dict[str, Any]) -> tuple[Any, Any]:
    from flashtrie.datasets import generate_keywords, generate_queries
    from flashtrie.harness.scale.prepare import build_with, choose_builder

    ks = _timed(log, "generate keywords", lambda: generate_keywords(n, seed=0))
    builder, why = choose_builder("auto")
    log["builder"] = builder if not why else f"cpu ({why[:120]})"
    if builder == "gpu":  # cupy compiles its kernels on first use: not part of the build's figure
        from flashtrie.gpu_impl.build_gpu import build_index

        _timed(log, "gpu warm-up build (tiny)", lambda: build_index(type(ks).from_sequences([[1, 2], [3]])))
    idx = _timed(log, "build", lambda: build_with(builder, ks))
    wl = _timed(log, "16 queries", lambda: generate_queries(ks, 16, proposals_per_step=1000, preset="dense",
                                                            seed=0))
    return idx, wl.proposals


def searcher_setup(idx: Any, mode: str, log: dict[str, Any]) -> Any:
    from flashtrie.harness.scale.recorder import current_rss, peak_rss, reset_peak_rss
    from flashtrie.reference_cpu.numpy_search import NumpySearcher

    reset_peak_rss()
    before = current_rss() or 0
    s = _timed(log, f"numpy {mode} set-up", lambda: NumpySearcher(idx, decode=mode))
    log[f"numpy {mode} set-up peak RSS growth MB"] = round((peak_rss() - before) / 1e6, 1)
    return s


def check_like(ref: Any, proposals: Any, log: dict[str, Any]) -> None:
    """numpy's side of the scale command's check (4 queries, beams 10 and 1000, K = beam), cold."""
    from flashtrie.harness.workloads import truncate_proposals

    from flashtrie import Proposals, SearchConfig

    t0 = time.perf_counter()
    for beam in (10, 1000):
        p = truncate_proposals(Proposals(proposals.tokens[:4], proposals.logprobs[:4]), beam)
        ref.search(p, SearchConfig(beam_width=beam))
    log["numpy side of the scale check (4 queries, beams 10 + 1000, cold) s"] = round(time.perf_counter() - t0, 3)


def compare(idx: Any, ref: Any, proposals: Any, log: dict[str, Any]) -> list[str]:
    """GPU == numpy at beam 1000 on the 16 queries (one batch), and numpy's batch-1 times."""
    from flashtrie.harness.scale.recorder import current_rss, peak_rss, reset_peak_rss

    from flashtrie import Proposals, SearchConfig
    from flashtrie.search_types import result_difference

    cfg = SearchConfig(beam_width=1000)
    reset_peak_rss()
    before = current_rss() or 0
    want = _timed(log, "numpy search 16 queries (batch, cold)", lambda: ref.search(proposals, cfg))
    log["numpy search peak RSS growth MB"] = round((peak_rss() - before) / 1e6, 1)
    log["wide-node cache keys"] = getattr(ref._nodes, "cached_keys", None)
    bad = []
    try:
        from flashtrie.gpu_impl import GpuSearcher

        gpu = _timed(log, "GpuSearcher upload", lambda: GpuSearcher(idx))
        got = _timed(log, "gpu search 16 queries", lambda: gpu.search(proposals, cfg))
        d = result_difference(got, want)
        bad = [] if d is None else [str(d)]
        log["gpu == numpy"] = "equal" if not bad else bad[0][:300]
    except Exception as e:  # noqa: BLE001 - no GPU here: the numpy figures still count
        log["gpu == numpy"] = f"not run: {type(e).__name__}: {str(e)[:200]}"
    ms = []
    for q in range(proposals.num_queries):
        one = Proposals(proposals.tokens[q : q + 1], proposals.logprobs[q : q + 1])
        t0 = time.perf_counter()
        ref.search(one, cfg)
        ms.append(1e3 * (time.perf_counter() - t0))
    log["numpy batch-1 beam 1000 mean ms (warm)"] = round(float(np.mean(ms)), 2)
    log["numpy batch-1 beam 1000 max ms (warm)"] = round(float(np.max(ms)), 2)
    return bad


def parse(argv: list[str]) -> argparse.Namespace:
    """The suite's options."""
    ap = argparse.ArgumentParser(prog="flashtrie bench numpylazy", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="records file (JSON Lines, appended)")
    ap.add_argument("--n", type=count, default=100_000_000, help="library size (default 100M)")
    ap.add_argument("--eager-below", type=float, default=0.0, metavar="S",
                    help="also the eager set-up when the run so far took under S seconds")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    t_start = time.perf_counter()
    log = Log(RunContext.start(["flashtrie", "bench", "numpylazy", *argv]), args.out, args.n)
    log["cpus"] = os.cpu_count()
    idx, proposals = inputs(args.n, log)
    log["nodes"] = int(idx.num_nodes)
    ref = searcher_setup(idx, "lazy", log)
    check_like(ref, proposals, log)
    bad = compare(idx, ref, proposals, log)
    if args.eager_below and time.perf_counter() - t_start < args.eager_below:
        from flashtrie import SearchConfig
        from flashtrie.search_types import result_difference

        lazy = ref.search(proposals, SearchConfig(beam_width=1000))
        del ref
        eager = searcher_setup(idx, "eager", log).search(proposals, SearchConfig(beam_width=1000))
        d = result_difference(eager, lazy)
        log["numpy eager == lazy (beam 1000)"] = "equal" if d is None else str(d)[:300]
        bad += [] if d is None else [str(d)]
    log["total s"] = round(time.perf_counter() - t_start, 1)
    print("\n| what | value |\n| --- | --- |")
    for k, v in log.items():
        print(f"| {k} | {v} |")
    return 1 if bad else 0
