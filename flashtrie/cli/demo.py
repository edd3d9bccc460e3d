"""``flashtrie demo``: generate a library and queries, build, search with every backend, compare, print a table."""

from __future__ import annotations

import argparse
import time
from typing import Any

from .common import (
    BACKENDS_HELP,
    Stage,
    add_command,
    add_search_options,
    build_index,
    choose_backends,
    count,
    hidden_alias,
    nonneg,
    proposals_count,
    steps_count,
)
from .memory import check_parts, library_parts, search_part, workload_part
from .search import check_records_file, parity_run, write_parity_records

__all__ = ["add_parsers"]


def cmd_demo(args: argparse.Namespace) -> int:
    from flashtrie.datasets import generate_keywords
    from flashtrie.harness.runs import demo_rows, text_table
    from flashtrie.harness.workloads import Loaded, generate_workload

    check_records_file(args)
    backends = choose_backends(args)
    k = args.K if args.K is not None else args.beam
    check_parts([*library_parts("--num-keywords", args.num_keywords, backends),
                 workload_part("--num-queries", f"{args.num_queries:,}", args.num_queries, args.steps, k,
                               library=args.num_keywords),
                 search_part("--beam", f"{args.beam:,}", args.beam, 1)])
    t_start = time.perf_counter()
    with Stage(f"generating {args.num_keywords:,} keywords (seed {args.seed})", args.quiet):
        keywords = generate_keywords(args.num_keywords, seed=args.seed)
    with Stage(f"generating {args.num_queries} '{args.preset}' queries (K = {k})", args.quiet):
        workload = generate_workload(keywords, args.num_queries, k, args.steps, args.preset, args.seed)
    index = build_index(keywords, args.quiet)
    q, t, kk = workload.proposals.shape
    passes = f"{args.repeats:,} pass{'' if args.repeats == 1 else 'es'}"
    print(f"demo: {len(keywords):,} keywords ({index.num_nodes:,} trie nodes), {q} queries x {t} steps x "
          f"{kk} proposals (K = {kk}), beam {args.beam}, batch 1; per backend 1 warm-up pass, then "
          f"{passes} timed")
    report, times = parity_run(args, keywords, index, Loaded(workload.proposals, None, {}), backends, timed=True,
                               passes=args.repeats)
    head = ("backend", "median ms/query", f"min-max of {passes}", "p99 ms", "speed-up vs marisa", "results agree")
    print("\n".join(text_table(head, demo_rows(report, times, backends, q))))
    if not report.ok:
        print(report.summary())
    else:
        n_res = report.outcomes[0].result.num_results
        print(f"all {len(report.outcomes)} backends agree exactly (ids, order, float32 bits) on {q} queries; "
              f"mean {float(n_res.mean()):.1f} results/query; speed-up = marisa's median / the backend's; "
              f"total {time.perf_counter() - t_start:.1f} s")
    write_parity_records(args, report, workload, times)
    return 0 if report.ok else 1


def keyword_count(text: str) -> int:
    """demo's old --keywords: a count of generated keywords; a file name gets a pointer to ``search``."""
    try:
        return count(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"in demo this is the number of keywords to generate (such as 200k), got {text!r}; to search your own "
            "library: flashtrie build KEYWORDS -o INDEX, then flashtrie search --index INDEX --queries FILE") from None


def add_parsers(subs: Any) -> None:
    """Declare demo."""
    p = add_command(subs, "demo", "end to end on a generated library: build, search with every backend, compare", """
        Generates a keyword library and a dense query workload, builds the index, searches with every
        backend available here (marisa, numpy, and gpu when a GPU and cuda-core are present), checks that
        all return exactly the same results, and prints mean latency per query and the speed-up over
        marisa.  Each backend makes one untimed warm-up pass over the queries, then --repeats timed passes; the
        table shows the median of the passes' mean ms per query, their spread (min-max), and the speed-up as the
        ratio of the medians.  Nothing is written unless -o/--output is given.

        example:  flashtrie demo --num-keywords 200k --num-queries 16 --beam 100
        """, cmd_demo)
    p.add_argument("-n", "--num-keywords", type=count, default=200_000, dest="num_keywords",
                   help="number of generated keywords")
    hidden_alias(p, "--keywords", dest="num_keywords", type=keyword_count)
    p.add_argument("--num-queries", type=count, default=16, help="number of generated queries")
    hidden_alias(p, "--queries", dest="num_queries", type=count)
    p.add_argument("-K", "--num-proposals", type=proposals_count, default=None, dest="K",
                   help="proposals per step (default: the beam width)")
    p.add_argument("--steps", type=steps_count, default=None, help="decoding steps (default: the generator's)")
    p.add_argument("--preset", choices=("dense", "sparse"), default="dense", help="workload shape")
    p.add_argument("--seed", type=nonneg, default=0, help="random seed")
    p.add_argument("--backends", default="all", help=BACKENDS_HELP)
    p.add_argument("--repeats", type=count, default=5,
                   help="timed passes over the queries per backend, after one warm-up pass (the table shows their "
                        "median and spread)")
    p.add_argument("-o", "--output", metavar="FILE", help="also append the demo's records to this .jsonl")
    hidden_alias(p, "--records", dest="output", metavar="FILE")
    add_search_options(p, proposals=False)
