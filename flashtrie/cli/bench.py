"""Measurement commands: ``bench`` (sweeps, JSON Lines records) and ``report`` (Markdown from records)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flashtrie.errors import InputError
from flashtrie.io_util import check_output_file

from .common import (
    BACKENDS_HELP,
    add_command,
    alpha,
    beam_width,
    beam_widths,
    choose_backends,
    count,
    ints,
    load_inputs,
    load_keyword_file,
    needs_keywords,
    nonneg,
    run_context,
    say,
    seconds,
    steps_count,
    writing_to,
)
from .memory import batches_part, build_part, check_parts, library_parts, marisa_part, search_part, workload_part

__all__ = ["add_parsers", "suite_command"]


def suite_command(argv: Sequence[str]) -> argparse.Namespace | None:
    """``bench NAME ARGS...`` where NAME is a registered measurement (`flashtrie.harness.suites.COMMANDS`):
    the parsed command, its ARGS left to the measurement's own parser; None for any other command line."""
    from flashtrie.harness.suites import COMMANDS

    if len(argv) < 2 or argv[0] != "bench" or argv[1] not in COMMANDS:
        return None
    command, rest = COMMANDS[argv[1]], list(argv[2:])
    return argparse.Namespace(command="bench", func=lambda args: command.run(rest))


def _suite_lines() -> str:
    from flashtrie.harness.suites import COMMANDS

    width = max((len(name) for name in COMMANDS), default=0) + 2
    return "\n".join(f"          {c.name:<{width}}{c.help}" for c in COMMANDS.values())


def _check_bench_inputs(args: argparse.Namespace) -> None:
    what = args.sweep
    check_output_file(args.output, "--output", (args.keywords, args.index, args.queries))
    if what in ("beam", "batch", "quality", "all", "serve") and not args.queries:
        raise InputError(f"--queries: 'bench {what}' needs a query workload: --queries FILE (a .npz from "
                         "'flashtrie gen-queries', or a proposal TSV)")
    if what in ("build", "quality", "all") and not args.keywords:
        raise InputError(f"--keywords: 'bench {what}' needs the keyword library: --keywords FILE (.txt or a .npz "
                         "from 'flashtrie gen-keywords')")


def _sweep_build(args: argparse.Namespace, ctx: Any) -> None:
    from flashtrie.harness import sweep as sw
    from flashtrie.harness.workloads import describe_keywords

    kw = load_keyword_file(args.keywords, args.quiet)
    value = f"{args.keywords} ({len(kw):,} keywords)"
    check_parts([build_part("--keywords", value, len(kw)), marisa_part("--keywords", value, len(kw))])
    sw.sweep_build(ctx, [(kw, describe_keywords(args.keywords, kw))], repeats=args.build_repeats, sweep="build")


def _sweep_size(args: argparse.Namespace, ctx: Any, backends: list[str]) -> None:
    from flashtrie.datasets import generate_keywords
    from flashtrie.harness import sweep as sw
    from flashtrie.harness.workloads import generate_workload

    def make_keywords(n: int) -> tuple[Any, dict[str, Any]]:
        kw = generate_keywords(n, seed=args.seed)
        return kw, {"n": n, "seed": args.seed, "generator": "flashtrie.datasets.generate_keywords"}

    def make_workload(kw: Any, n: int) -> Any:
        return generate_workload(kw, args.num_queries, args.beam, args.steps, args.preset, args.seed)

    sw.sweep_library_size(ctx, args.sizes, backends, make_keywords=make_keywords, make_workload=make_workload,
                          beam_width=args.beam, length_norm=args.length_norm)


def _sweep_quality(args: argparse.Namespace, ctx: Any, keywords: Any, index: Any, workload: Any,
                   backends: list[str]) -> None:
    from flashtrie.harness.backends import close_searchers, make_searchers
    from flashtrie.harness.quality import quality_sweep

    ref = "numpy" if "numpy" in backends else backends[0]
    made, failed = make_searchers([ref], keywords, index)
    if failed:
        raise InputError(f"quality: could not construct {ref}: {failed[ref]}")
    try:
        recs = quality_sweep(keywords, workload, made[ref], args.beams, args.ks, make_record=ctx.record,
                             length_norm=args.length_norm, progress=not args.quiet)
    finally:
        close_searchers(made)
    ctx.emit(recs)


def _check_workload_fits(args: argparse.Namespace, workload: Any) -> None:
    """Before any run or record: the widest beam and the largest batch fit in memory, and a beam wider than
    the workload's K is said (it runs with every proposal, K < beam)."""
    q, t, k = workload.proposals.shape
    held = ("--limit", f"{q:,} queries", workload.proposals.tokens.nbytes + workload.proposals.logprobs.nbytes,
            "the workload")
    if args.sweep in ("beam", "quality", "all"):
        b = max(args.beams)
        check_parts([held, search_part("--beams", f"{b:,}", b, args.batch_size)])
    if args.sweep in ("batch", "all"):
        bs = max(args.batch_sizes)
        check_parts([held, batches_part("--batch-sizes", f"{bs:,}", max(q, bs), t, min(k, args.beam)),
                     search_part("--batch-sizes", f"{bs:,}", args.beam, bs)])
    narrow = [b for b in (args.beams if args.sweep in ("beam", "quality", "all") else []) if b > k]
    if narrow and not args.quiet:
        say(f"warning: the workload has K = {k} proposals per step: beam{'s' if len(narrow) > 1 else ''} "
            f"{', '.join(map(str, narrow))} run with K = {k} < beam (the records say so in config.K); "
            f"generate the queries with -K {max(narrow)} for K = beam")


def _check_size_fits(args: argparse.Namespace, backends: list[str]) -> None:
    """Before any run or record: each --sizes entry's library, index, marisa trie, workload and search fit."""
    for n in args.sizes:
        check_parts([*library_parts("--sizes", n, backends),
                     workload_part("--num-queries", f"{args.num_queries:,}", args.num_queries, args.steps, args.beam,
                                   library=n),
                     search_part("--beam", f"{args.beam:,}", args.beam, 1)])


def _sweeps_on_inputs(args: argparse.Namespace, ctx: Any, backends: list[str]) -> None:
    """The sweeps over given inputs: beam, batch, quality (and build for 'all')."""
    from flashtrie.harness import sweep as sw
    from flashtrie.harness.workloads import describe_keywords

    what = args.sweep
    keywords, index, workload = load_inputs(args, need_index=True,
                                            need_keywords=any(needs_keywords(b) for b in backends)
                                            or what in ("quality", "all"))
    _check_workload_fits(args, workload)
    ctx.library = (describe_keywords(args.keywords, keywords) if keywords is not None else
                   {"source": args.index, "num_keywords": int(index.num_keywords), "from": "the index file"})
    if what in ("beam", "all"):
        sw.sweep_beam_width(ctx, keywords, index, workload, backends, beams=args.beams,
                            batch_size=args.batch_size, length_norm=args.length_norm)
    if what in ("batch", "all"):
        sw.sweep_batch_size(ctx, keywords, index, workload, backends, batch_sizes=args.batch_sizes,
                            beam_width=args.beam, length_norm=args.length_norm)
    if what in ("quality", "all"):
        _sweep_quality(args, ctx, keywords, index, workload, backends)
    if what == "all":
        sw.sweep_build(ctx, [(keywords, ctx.library)], repeats=args.build_repeats, sweep="build")


#: Defaults that differ by sweep (the serve sweep's; None: every other sweep's).
_DEFAULTS: dict[str, dict[str | None, Any]] = {
    "beams": {"serve": [100, 1000], None: [1, 10, 100, 500, 1000]},
    "batch_sizes": {"serve": [1, 8, 32, 128], None: [1, 2, 4, 8, 16, 32]},
    "warmup": {"serve": 5, None: 2},
    "repeats": {"serve": 200, None: 10},
}


def _sweep_serve(args: argparse.Namespace, ctx: Any, backends: list[str]) -> None:
    """The serving benchmark on one library (--index, or built from --keywords) and --queries."""
    from flashtrie.harness.backends import close_searchers
    from flashtrie.harness.serve.run import ServePlan, serve_cases
    from flashtrie.harness.workloads import describe_keywords

    if "gpu" not in backends and "device" in args.proposals:
        if args.proposals == ["device"]:
            raise InputError("--proposals: device proposals are made on the GPU, and the gpu backend is not among "
                             f"the backends run here ({', '.join(backends)}); use --proposals host")
        if not args.quiet:
            say("note: device proposals skipped: they are made on the GPU (the gpu backend is not run here)")
    keywords, index, workload = load_inputs(args, need_index=True,
                                            need_keywords=any(needs_keywords(b) for b in backends))
    ctx.library = (describe_keywords(args.keywords, keywords) if keywords is not None else
                   {"source": args.index, "num_keywords": int(index.num_keywords), "from": "the index file"})
    plan = ServePlan(beams=args.beams, batch_sizes=args.batch_sizes, proposals=args.proposals, vocab=args.vocab,
                     warmup=args.warmup, repeats=args.repeats, max_seconds=args.max_seconds,
                     length_norm=args.length_norm)
    made, failed = ctx.make_searchers(backends, keywords, index)
    if failed:
        raise InputError("--backends: " + "; ".join(f"{k}: {v}" for k, v in failed.items()))
    reference = None
    if "gpu" in made:
        reference = made.get("numpy") or ctx.make_searchers(["numpy"], keywords, index)[0].get("numpy")
    try:
        ctx.emit(serve_cases(made, workload.proposals, int(index.num_keywords), plan, ctx.record, reference,
                             progress=say if ctx.progress else None))
    finally:
        close_searchers(made)


def cmd_bench(args: argparse.Namespace) -> int:
    from flashtrie.harness.runs import bench_table

    for name, by_sweep in _DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, by_sweep.get(args.sweep, by_sweep[None]))
    _check_bench_inputs(args)
    # the size sweep generates its own libraries; the others have keywords only when --keywords is given
    backends = choose_backends(args, have_keywords=bool(args.keywords) or args.sweep == "size")
    if args.sweep == "size":
        _check_size_fits(args, backends)
    ctx = run_context(args, args.output)
    if args.sweep == "build":
        _sweep_build(args, ctx)
    elif args.sweep == "size":
        _sweep_size(args, ctx, backends)
    elif args.sweep == "serve":
        _sweep_serve(args, ctx, backends)
    else:
        _sweeps_on_inputs(args, ctx, backends)
    if ctx.records:  # the result of the command, on stdout (--quiet silences progress only)
        print("\n".join(bench_table(ctx.records)))
    bad = [r for r in ctx.records if r.status in ("mismatch", "error")]
    skipped = [r for r in ctx.records if r.status == "skipped"]
    notes = [f"{len(bad)} not ok"] if bad else []
    notes += [f"{len(skipped)} skipped"] if skipped else []
    say(f"{len(ctx.records)} records -> {args.output}" + (f" ({', '.join(notes)})" if notes else ""))
    for r in bad + skipped:
        say(f"  {r.kind} {r.backend} beam={r.config.get('beam_width')} batch={r.config.get('batch_size')}: "
            f"{r.status}: {r.message}")
    return 1 if bad else 0


def cmd_report(args: argparse.Namespace) -> int:
    from flashtrie.harness.report import build_report

    out = Path(args.output)
    if out.exists() and not out.is_dir():
        raise InputError(f"--output: {args.output} is a file; the report needs a folder, such as reports/<name>/")
    with writing_to(args.output):
        path = build_report(args.results, args.output, title=args.title)
    say(f"report -> {path}")
    return 0


def _add_bench_parser(subs: Any) -> None:
    p = add_command(subs, "bench", "run a benchmark sweep and append records to a JSON Lines file", """
        sweeps:
          beam     latency per call vs beam width (K = beam width; proposals truncated to the top K)
          batch    throughput vs batch size at --beam
          size     latency vs library size (generates a library and workload per --sizes entry;
                   also records build time and size)
          build    build time and bytes: narrow-LOUDS index vs a marisa-trie BinaryTrie of the keywords
          quality  Precision@k / Recall@k vs beam width: constrained vs unconstrained decoding + filtering
          all      beam, batch, quality and build on the given inputs
          serve    serving: fresh proposals every call, searched where they are made (GPU: a model head's
                   top-K on the device, searched from device arrays, results left there; every backend:
                   a Proposals built from host arrays per call); records of kind 'serve' with mean / p99
                   ms, queries/s and host µs per query; one library per run (--index or --keywords),
                   --beams default 100,1000 and --batch-sizes 1,8,32,128 here

        Each case compares every backend's results exactly (ids, order, float32 bits); a case that differs
        is recorded as 'mismatch' and the command exits with status 1.  Records store the speed-up over
        marisa measured in the same case, the workload statistics, the library and workload parameters,
        the environment and this command; a backend that reports them (the GPU) adds its device time and
        its host-side breakdown per call (host_prep_ms, host_enqueue_ms, host_wait_ms, host_post_ms).  A
        backend whose last warmup call shows that one pass would take more than 6x --max-seconds is
        recorded as 'skipped' (and listed at the end).  A short table of the measured cases is printed;
        draw figures and tables afterwards with 'flashtrie report'.

        suites with options of their own (flashtrie bench SUITE --help):
{suites}

        example:  flashtrie bench beam --keywords data/kw.npz --queries data/q.npz --beams 1,10,100 \\
                      -o results/beam.jsonl
        """.replace("{suites}", _suite_lines()), cmd_bench)
    p.add_argument("sweep", choices=("beam", "batch", "size", "build", "quality", "all", "serve"),
                   help="what to sweep")
    g = p.add_argument_group("inputs")
    g.add_argument("--keywords", "-k", metavar="FILE",
                   help="keyword library; needed by the marisa backend and by the build, quality and all sweeps")
    g.add_argument("--index", "-i", metavar="FILE", help="index (built from --keywords when not given)")
    g.add_argument("--queries", "-q", metavar="FILE",
                   help="query workload (.npz from gen-queries, or a proposal TSV); needed by every sweep but "
                        "build and size")
    g.add_argument("--limit", type=count, default=None, metavar="Q", help="use only the first Q queries")
    g.add_argument("--probabilities", action="store_true",
                   help="a proposal TSV's \"probs\" are probabilities: take their logs")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="records file (.jsonl, appended)")
    p.add_argument("--backends", default="all", help=BACKENDS_HELP)
    p.add_argument("--beams", type=beam_widths, default=None,
                   help="beam widths (beam, quality: default 1,10,100,500,1000; serve: 100,1000)")
    p.add_argument("--beam", "-B", type=beam_width, default=100, help="beam width for the batch and size sweeps")
    p.add_argument("--batch-size", type=count, default=1, help="queries per call in the beam sweep")
    p.add_argument("--batch-sizes", type=ints, default=None,
                   help="batch sizes (batch: default 1,2,4,8,16,32; serve: 1,8,32,128)")
    p.add_argument("--proposals", type=_proposal_kinds, default=["device", "host"],
                   help="serve: where each call's proposals are made: device (GPU only), host, or both (default)")
    p.add_argument("--vocab", type=count, default=32_768,
                   help="serve: the vocabulary V of the GPU head's logits [batch, T, V] (default 32768)")
    p.add_argument("--sizes", type=ints, default=[10_000, 100_000, 1_000_000], help="library sizes (size)")
    p.add_argument("--ks", type=ints, default=[10, 100], help="k of Precision@k / Recall@k (quality)")
    p.add_argument("--length-norm", type=alpha, default=0.0, help="length normalisation alpha")
    p.add_argument("--num-queries", type=count, default=16, help="queries per generated workload (size)")
    p.add_argument("--steps", type=steps_count, default=None, help="decoding steps of generated workloads (size)")
    p.add_argument("--preset", choices=("dense", "sparse"), default="dense", help="generated workloads (size)")
    p.add_argument("--seed", type=nonneg, default=0, help="seed of generated data (size)")
    t = p.add_argument_group("timing")
    t.add_argument("--warmup", type=nonneg, default=None, help="untimed calls before timing (default 2; serve: 5)")
    t.add_argument("--repeats", type=count, default=None,
                   help="timed passes over the queries (default 10; serve: timed calls per case, 200)")
    t.add_argument("--max-seconds", type=seconds, default=10.0,
                   help="time budget per backend and case (at least one full pass is timed; a backend whose "
                        "last warmup call shows that a pass would take over 6x this is recorded as skipped)")
    t.add_argument("--stats-queries", type=nonneg, default=8,
                   help="queries replayed to measure valid-proposal fraction and beam fill")
    t.add_argument("--build-repeats", type=count, default=1, help="builds per library (best is kept)")


def _proposal_kinds(text: str) -> list[str]:
    kinds = [t for t in text.replace(" ", "").split(",") if t]
    bad = [t for t in kinds if t not in ("device", "host")]
    if not kinds or bad:
        raise argparse.ArgumentTypeError(f"expected device, host or device,host, got {text!r}")
    return list(dict.fromkeys(kinds))


def add_parsers(subs: Any) -> None:
    """Declare bench and report."""
    _add_bench_parser(subs)
    p = add_command(subs, "report", "write a Markdown report with figures from stored records", """
        Reads records only (it never runs a benchmark) and writes OUTPUT/report.md with tables,
        PNG and SVG figures, the environment of the runs and the exact commands that reproduce them.
        The report is written to a temporary folder next to OUTPUT and renamed into place, so a failure
        leaves no partial report.  A damaged last line of a records file (a write cut short) is skipped
        with a warning.

        example:  flashtrie report results/beam.jsonl results/build.jsonl -o reports/h200-dense/
        """, cmd_report)
    p.add_argument("results", nargs="+", metavar="RESULTS", help="records files (.jsonl) from 'flashtrie bench'")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="report folder, e.g. reports/<name>/")
    p.add_argument("--title", default=None, help="report title")
    p.add_argument("--no-anchors", action="store_true",
                   help="accepted for old scripts; the report holds only what the records measured")
