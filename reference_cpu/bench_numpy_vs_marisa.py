"""Benchmark: `NumpySearcher` vs `MarisaSearcher` on a 1M-keyword library and a dense workload.

Checks that both return bit-identical results, times both (one untimed warm-up, then several
repetitions; mean wall time per query) and prints the ratio.  A script, not a test::

    python reference_cpu/bench_numpy_vs_marisa.py [--keywords 1000000] [--queries 64] [--reps 3]

The marisa baseline is run single-process (``processes=1``), like numpy, which is single-threaded.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from flashtrie.datasets.keywords import generate_keywords
from flashtrie.datasets.queries import generate_queries
from flashtrie.reference_cpu.marisa import MarisaSearcher
from flashtrie.reference_cpu.numpy_search import NumpySearcher

from flashtrie import NarrowLoudsIndex, SearchConfig


def _time(fn, reps: int) -> tuple[list[float], list[float], object]:
    """Wall times and process CPU times of ``reps`` calls of ``fn``, and the last result."""
    wall, cpu, out = [], [], None
    for _ in range(reps):
        start, start_cpu = time.perf_counter(), time.process_time()
        out = fn()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return wall, cpu, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keywords", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=64)
    ap.add_argument("--marisa-queries", type=int, default=None,
                    help="time marisa on the first N queries only (default: all)")
    ap.add_argument("--beam", type=int, default=100)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--preset", default="dense")
    ap.add_argument("--no-early-stop", action="store_true", help="run every step in both backends")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    early = not args.no_early_stop

    t0 = time.perf_counter()
    keywords = generate_keywords(args.keywords, seed=args.seed)
    t1 = time.perf_counter()
    work = generate_queries(keywords, args.queries, num_steps=args.steps, proposals_per_step=args.k,
                            preset=args.preset, seed=args.seed + 1)
    t2 = time.perf_counter()
    index = NarrowLoudsIndex.build(keywords)
    t3 = time.perf_counter()
    numpy_s = NumpySearcher(index, early_stop=early)
    t4 = time.perf_counter()
    marisa_s = MarisaSearcher(keywords, early_stop=early)
    t5 = time.perf_counter()
    print(f"library: {len(keywords):,} keywords ({t1 - t0:.1f} s), index {index.num_nodes:,} nodes "
          f"({t3 - t2:.1f} s), numpy decode {t4 - t3:.1f} s, marisa build {t5 - t4:.1f} s; "
          f"workload {args.preset}: Q={args.queries} T={args.steps} K={args.k} ({t2 - t1:.1f} s)")

    config = SearchConfig(beam_width=args.beam)
    proposals = work.proposals
    mq = args.marisa_queries or proposals.num_queries
    marisa_props = proposals[:mq]

    numpy_s.search(proposals[:8], config)  # warm-up (page faults, allocator), untimed
    marisa_s.search(marisa_props[:2], config)
    numpy_times, numpy_cpu, numpy_res = _time(lambda: numpy_s.search(proposals, config), args.reps)
    marisa_times, marisa_cpu, marisa_res = _time(lambda: marisa_s.search(marisa_props, config), args.reps)

    numpy_sub = numpy_s.search(marisa_props, config)
    diff = numpy_sub.first_difference(marisa_res)
    batch_diff = None
    if mq < proposals.num_queries:  # numpy's full batch must equal numpy on the marisa subset
        full = numpy_res
        batch_diff = (None if np.array_equal(full.keyword_ids[:mq], numpy_sub.keyword_ids)
                      else "numpy batch != numpy subset")
    counts = numpy_s.path_counts
    print(f"numpy candidates per query (last run): mid {counts['mid'] / proposals.num_queries:,.0f}, "
          f"enum {counts['enum'] / proposals.num_queries:,.0f}, pair {counts['pair'] / proposals.num_queries:,.0f}; "
          f"mean results {float(numpy_res.num_results.mean()):.1f}")
    per_np = [x / proposals.num_queries for x in numpy_times]
    per_mr = [x / mq for x in marisa_times]
    m_np, m_mr = statistics.mean(per_np), statistics.mean(per_mr)
    print(f"numpy : {m_np * 1e3:9.3f} ms/query (mean of {args.reps}; runs "
          f"{', '.join(f'{x * 1e3:.3f}' for x in per_np)})")
    print(f"marisa: {m_mr * 1e3:9.3f} ms/query (mean of {args.reps}; runs "
          f"{', '.join(f'{x * 1e3:.3f}' for x in per_mr)}) over {mq} queries")
    c_np = statistics.mean(numpy_cpu) / proposals.num_queries
    c_mr = statistics.mean(marisa_cpu) / mq
    print(f"CPU time: numpy {c_np * 1e3:.3f} ms/query, marisa {c_mr * 1e3:.3f} ms/query")
    print(f"ratio marisa / numpy: {m_mr / m_np:.1f}x wall (means), {min(per_mr) / min(per_np):.1f}x wall (best runs), "
          f"{c_mr / c_np:.1f}x CPU time (target >= 10x)")
    if diff is not None or batch_diff is not None:
        print(f"MISMATCH: {diff or batch_diff}")
        return 1
    print(f"numpy == marisa exactly on {mq} queries")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
