"""The numpy reference searcher's set-up and per-search cost, by decode mode: eager (every node decoded at
construction) against lazy (only the nodes a search reaches), on one library.

    python benchmarks/numpy_setup.py --n 1M --beams 10,100,1000 --modes eager,lazy --json out.json

Generates ``--n`` keywords (`generate_keywords`), builds the index (``--builder cpu|gpu``), generates 16
dense queries (K = 1000, truncated to K = beam per sweep point), then per mode: the searcher's construction
seconds and its own peak RSS growth, and per beam the batch-1 search time of each query (ms; the first pass
over the queries is a warm-up, not timed).  With both modes, the results of every query and beam are compared
bit for bit (`result_difference`).  ``--index``/``--queries`` reuse saved files instead.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def _rss() -> tuple[Any, Any]:
    from flashtrie.harness.scale.recorder import current_rss, peak_rss, reset_peak_rss

    return (reset_peak_rss, lambda: (peak_rss(), current_rss()))


def make_inputs(args: argparse.Namespace) -> tuple[Any, Any, dict[str, float]]:
    """(index, proposals, seconds of each input step)."""
    from flashtrie.datasets import generate_keywords, generate_queries

    from flashtrie import NarrowLoudsIndex
    from flashtrie.cli.common import count

    times: dict[str, float] = {}
    n = count(args.n)
    t0 = time.perf_counter()
    ks = generate_keywords(n, seed=args.seed)
    times["generate keywords"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    if args.builder == "gpu":
        from flashtrie.gpu_impl.build_gpu import build_index

        idx = build_index(ks)
    else:
        idx = NarrowLoudsIndex.build(ks)
    times["build"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    wl = generate_queries(ks, args.queries, proposals_per_step=1000, preset="dense", seed=args.seed)
    times["queries"] = time.perf_counter() - t0
    del ks
    return idx, wl.proposals, times


def time_mode(idx: Any, proposals: Any, mode: str, beams: list[int], repeats: int, clock: Any = time.perf_counter
              ) -> tuple[dict[str, Any], dict]:
    """Construction and per-search figures of one decode mode, and its results per beam."""
    from flashtrie.harness.workloads import truncate_proposals
    from flashtrie.reference_cpu.numpy_search import NumpySearcher

    from flashtrie import Proposals, SearchConfig

    reset, rss = _rss()
    reset()
    before = rss()[1] or 0
    t0 = time.perf_counter()
    s = NumpySearcher(idx, **({"decode": mode} if "decode" in inspect.signature(NumpySearcher).parameters else {}))
    setup = time.perf_counter() - t0
    peak, _ = rss()
    out: dict[str, Any] = {"mode": getattr(s, "decode", "eager"), "setup_s": round(setup, 4),
                           "setup_peak_rss_growth": peak - before, "beams": {}}
    results: dict[int, list[Any]] = {}
    for b in beams:
        p = truncate_proposals(proposals, b)
        cfg = SearchConfig(beam_width=b)
        one = [Proposals(p.tokens[q : q + 1], p.logprobs[q : q + 1]) for q in range(p.num_queries)]
        results[b] = [s.search(x, cfg) for x in one]  # warm-up (and, lazily, the first decodes)
        ms = []
        for _ in range(repeats):
            for x in one:
                t0 = clock()
                s.search(x, cfg)
                ms.append(1e3 * (clock() - t0))
        out["beams"][str(b)] = {"mean_ms": round(float(np.mean(ms)), 3), "median_ms": round(float(np.median(ms)), 3)}
    out["peak_rss_after_searches"], out["rss_after"] = rss()
    return out, results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", default="1M")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--queries", type=int, default=16)
    ap.add_argument("--beams", default="10,100,1000")
    ap.add_argument("--modes", default="eager,lazy")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--builder", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--json", default=None)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="per-search time: wall clock, or this thread's CPU time (steadier on a shared machine)")
    args = ap.parse_args(argv)
    from flashtrie.search_types import result_difference

    idx, proposals, times = make_inputs(args)
    print(f"[numpy_setup] n={args.n} nodes={idx.num_nodes:,} inputs " +
          ", ".join(f"{k} {v:.1f} s" for k, v in times.items()), flush=True)
    beams = [int(b) for b in args.beams.split(",")]
    runs, res = [], {}
    for mode in args.modes.split(","):
        clock = time.thread_time if args.clock == "cpu" else time.perf_counter
        r, res[mode] = time_mode(idx, proposals, mode, beams, args.repeats, clock)
        runs.append(r)
        print(f"[numpy_setup] {mode}: set-up {r['setup_s']:.3f} s, +{r['setup_peak_rss_growth'] / 1e6:.0f} MB; "
              + ", ".join(f"beam {b} {v['mean_ms']:.2f} ms" for b, v in r["beams"].items()), flush=True)
    diffs = []
    modes = list(res)
    for m in modes[1:]:
        for b in beams:
            for q, (x, y) in enumerate(zip(res[modes[0]][b], res[m][b], strict=True)):
                d = result_difference(x, y)
                if d:
                    diffs.append(f"{modes[0]} vs {m} beam {b} query {q}: {d}")
    print(f"[numpy_setup] results equal across modes: {not diffs}" + "".join(f"\n  {d}" for d in diffs[:5]))
    rec = {"n": args.n, "nodes": int(idx.num_nodes), "inputs_s": times, "runs": runs, "differences": diffs}
    if args.json:
        Path(args.json).write_text(json.dumps(rec, indent=1))
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
