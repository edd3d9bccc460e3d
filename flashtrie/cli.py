"""The ``flashtrie`` command line: generate data, build an index, search, check parity, benchmark, report.

Run ``flashtrie --help`` or ``flashtrie COMMAND --help``.  Errors in the input (a file of the wrong kind,
an out-of-range argument) print one line ``flashtrie: error: ...`` and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from flashtrie.errors import FlashTrieError, InputError
from flashtrie.io_util import check_output_file

__all__ = ["main", "build_parser"]

PROG = "flashtrie"

_DESCRIPTION = """\
flashtrie: exact trie-constrained beam search for generative retrieval.

A generative-retrieval model proposes, at each decoding step, K candidate tokens with log-probabilities.
flashtrie keeps only the beams that stay inside a library of keywords (a trie) and returns the best
whole keywords, with the same ids, order and float32 scores on every backend:

  marisa   CPU baseline on marisa-trie
  numpy    CPU reference over the narrow-LOUDS index
  gpu      one-launch CUDA kernels (needs an NVIDIA GPU and flashtrie[gpu])

Typical session:

  flashtrie gen-keywords -n 200000 -o data/kw.npz
  flashtrie gen-queries data/kw.npz -n 16 -K 100 -o data/q.npz
  flashtrie build data/kw.npz -o data/kw.ftrie
  flashtrie search --index data/kw.ftrie --queries data/q.npz --beam 100
  flashtrie parity --keywords data/kw.npz --index data/kw.ftrie --queries data/q.npz --beam 100
  flashtrie bench beam --keywords data/kw.npz --queries data/q.npz -o results/run.jsonl
  flashtrie report results/run.jsonl -o reports/run/

or just `flashtrie demo` for all of it on a small generated library.
"""


class _Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Keep the hand-wrapped descriptions and show every option's default (unless its help names it)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default:" in text or action.default is None or action.default is False:
            return text
        return super()._get_help_string(action)


def _parse_count(text: str) -> int | None:
    """``text`` as a positive integer (200000, 200k, 2M, 1e6), or None when it is not one."""
    t = text.strip().lower().replace("_", "")
    mult = 1
    if t.endswith("k"):
        mult, t = 1_000, t[:-1]
    elif t.endswith("m"):
        mult, t = 1_000_000, t[:-1]
    try:
        v = int(t) * mult
    except ValueError:
        try:
            f = float(t) * mult
        except ValueError:
            return None
        if not math.isfinite(f) or f != int(f):
            return None
        v = int(f)
    return v if v >= 1 else None


def _ints(text: str) -> list[int]:
    """A comma-separated list of positive integers; each accepts what `_count` does (10, 10k, 1e3)."""
    parts = [t for t in text.replace(" ", "").split(",") if t]
    vals = [_parse_count(t) for t in parts]
    if not parts or any(v is None for v in vals):
        bad = next((t for t, v in zip(parts, vals, strict=True) if v is None), text)
        where = "" if bad == text.strip() else f" in {text!r}"
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of positive integers (such as 1,10,100 "
                                         f"or 10k,100k), got {bad!r}{where}")
    return [int(v) for v in vals if v is not None]


def _count(text: str) -> int:
    """An integer >= 1; accepts 200000, 200k, 2M, 1e6."""
    v = _parse_count(text)
    if v is None:
        raise argparse.ArgumentTypeError(f"expected a positive integer count such as 200000, 200k or 2M, "
                                         f"got {text!r}")
    return v


def _nonneg(text: str) -> int:
    """An integer >= 0."""
    try:
        v = int(text.strip())
    except ValueError:
        v = -1
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return v


def _seconds(text: str) -> float:
    """A finite number of seconds > 0."""
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return v


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number (or -inf), got {text!r}") from None


# ----------------------------------------------------------------------------------------- helpers
def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class _Stage:
    """``with _Stage("building index"):`` reports the stage and its duration on stderr.

    On a terminal the stage is announced when it starts; otherwise one line is written when it ends
    (and none when it fails, so an error stays a single line).
    """

    def __init__(self, what: str, quiet: bool = False) -> None:
        self.what, self.quiet = what, quiet
        self.live = not quiet and sys.stderr.isatty()

    def __enter__(self) -> _Stage:
        self.t0 = time.perf_counter()
        if self.live:
            print(f"{self.what} ...", end="", file=sys.stderr, flush=True)
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if self.quiet:
            return
        dt = time.perf_counter() - self.t0
        if self.live:
            print(f" {'done' if exc_type is None else 'failed'} ({dt:.1f} s)", file=sys.stderr, flush=True)
        elif exc_type is None:
            print(f"{self.what} ... done ({dt:.1f} s)", file=sys.stderr, flush=True)


def _config(args: argparse.Namespace) -> Any:
    from flashtrie.search_types import SearchConfig

    return SearchConfig(beam_width=args.beam, max_results=args.results, token_threshold=args.token_threshold,
                        score_threshold=args.score_threshold, length_norm=args.length_norm)


def _add_search_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("search configuration (see docs/semantics.md)")
    g.add_argument("--beam", "-B", type=_count, default=100, help="beam width B")
    g.add_argument("--results", "-R", type=_count, default=None, help="results per query R (default: B)")
    g.add_argument("--token-threshold", type=_float, default=-math.inf,
                   help="skip proposals whose logprob is <= this")
    g.add_argument("--score-threshold", type=_float, default=-math.inf,
                   help="drop candidates whose summed score is <= this")
    g.add_argument("--length-norm", type=float, default=0.0,
                   help="alpha of the length normalisation (6 / (5 + length)) ** alpha used to rank results")


def _add_input_options(p: argparse.ArgumentParser, keywords_required: bool = False) -> None:
    g = p.add_argument_group("inputs")
    g.add_argument("--keywords", "-k", metavar="FILE", required=keywords_required,
                   help="keyword library (text: one keyword per line of token ids; or .npz from gen-keywords); "
                        "needed by the marisa backend, and to build an index when --index is not given")
    g.add_argument("--index", "-i", metavar="FILE", help="narrow-LOUDS index from 'flashtrie build'")
    g.add_argument("--queries", "-q", metavar="FILE", required=True,
                   help="query workload (.npz from gen-queries, or a proposal TSV)")
    g.add_argument("--limit", type=_count, default=None, metavar="Q", help="use only the first Q queries")


def _load_inputs(args: argparse.Namespace, need_index: bool, need_keywords: bool) -> tuple[Any, Any, Any]:
    """(keywords or None, index or None, workload)."""
    from flashtrie.harness.workloads import load_index, load_keywords, load_workload

    if not getattr(args, "queries", None):
        raise InputError("--queries: expected a query workload: --queries FILE (a .npz from 'flashtrie gen-queries', "
                         "or a proposal TSV)")
    keywords = index = None
    if args.keywords:
        with _Stage(f"loading keywords {args.keywords}", args.quiet):
            keywords = load_keywords(args.keywords)
    elif need_keywords:
        hint = ("or choose --backend numpy or gpu" if hasattr(args, "backend")
                else "or leave marisa out, e.g. --backends numpy,gpu")
        raise InputError(f"--keywords: the marisa backend needs the keyword library; pass --keywords FILE {hint}")
    if need_index:
        if args.index:
            with _Stage(f"loading index {args.index}", args.quiet):
                index = load_index(args.index)
        elif keywords is not None:
            index = _build_index(keywords, args.quiet)
        else:
            raise InputError("--index: expected an index file (or --keywords FILE to build one)")
    with _Stage(f"loading queries {args.queries}", args.quiet):
        workload = load_workload(args.queries)
    if args.limit is not None:
        workload = _limit(workload, args.limit)
    return keywords, index, workload


def _limit(workload: Any, q: int) -> Any:
    from flashtrie.harness.workloads import Loaded, relevant_sets, workload_params

    if q < 1:
        raise InputError(f"--limit: expected a positive number of queries, got {q}")
    rel = relevant_sets(workload)
    params = workload_params(workload)
    params["limit"] = q
    return Loaded(proposals=workload.proposals[:q], relevant=rel[:q] if rel is not None else None, params=params)


def _build_index(keywords: Any, quiet: bool) -> Any:
    from flashtrie.index import NarrowLoudsIndex

    if quiet or len(keywords) < 500_000:
        with _Stage(f"building the index of {len(keywords):,} keywords", quiet):
            return NarrowLoudsIndex.build(keywords)
    return NarrowLoudsIndex.build(keywords, progress=True)


_BACKENDS_HELP = ("comma-separated backends: marisa, numpy, gpu, and marisa-lookup (marisa with lookups only; "
                  "run only when named); or 'all' available here")


def _needs_keywords(name: str) -> bool:
    from flashtrie.harness.backends import BACKENDS

    return BACKENDS[name].needs == "keywords"


def _backends(args: argparse.Namespace, have_keywords: bool = True) -> list[str]:
    """The backends to run: those named by ``--backends``, or every one available here for 'all'.

    A backend named explicitly that cannot run (not available here, or marisa without the keyword library)
    is an error; with 'all' it is left out with a note on stderr.
    """
    from flashtrie.harness.backends import BACKENDS, available_backends, parse_backends

    wanted = parse_backends(args.backends)
    ok, missing = available_backends(wanted)
    for name, why in missing.items():
        if wanted is not None:
            raise InputError(f"--backends: {name} is not available here: {why}")
        if not args.quiet:
            _say(f"note: backend {name} skipped: {why}")
    for name in [b for b in ok if BACKENDS[b].needs == "keywords" and not have_keywords]:
        if wanted is not None:
            raise InputError(f"--backends: {name} needs the keyword library; pass --keywords FILE, or leave {name} "
                             "out of --backends")
        ok.remove(name)
        if not args.quiet:
            _say(f"note: backend {name} skipped: it needs the keyword library (--keywords FILE)")
    if not ok:
        raise InputError("--backends: no backend is available on this machine")
    return ok


def _context(args: argparse.Namespace, out: str | None) -> Any:
    from flashtrie.harness import env
    from flashtrie.harness.sweep import RunContext

    ctx = RunContext(out=Path(out) if out else None, env=env.snapshot(), command=list(args.argv),
                     progress=not args.quiet)
    for name in ("warmup", "repeats", "max_seconds", "stats_queries"):
        if getattr(args, name, None) is not None:
            setattr(ctx, name, getattr(args, name))
    return ctx


def _time_per_query(searcher: Any, proposals: Any, config: Any, desc: str, quiet: bool, warmup: int = 1
                    ) -> tuple[list[float], Any]:
    """Search one query per call (batch 1), timing each; returns per-call ms and the stacked result."""
    from tqdm.auto import tqdm

    from flashtrie.harness.workloads import concat_results

    for i in range(min(warmup, proposals.num_queries)):
        searcher.search(proposals[i], config)
    times, parts = [], []
    for q in tqdm(range(proposals.num_queries), desc=desc, disable=quiet, unit="query", leave=False):
        one = proposals[q]
        t0 = time.perf_counter_ns()
        parts.append(searcher.search(one, config))
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return times, concat_results(parts)


# ---------------------------------------------------------------------------------------- commands
def cmd_gen_keywords(args: argparse.Namespace) -> int:
    from flashtrie.datasets import KeywordParams, generate_keywords_from
    from flashtrie.harness.workloads import save_keywords

    check_output_file(args.output, "--output")
    params = KeywordParams(n=args.n, seed=args.seed, **({} if args.vocab_size is None else
                                                         {"vocab_size": args.vocab_size}))
    with _Stage(f"generating {args.n:,} keywords (seed {args.seed})", args.quiet):
        kw = generate_keywords_from(params)
    with _Stage(f"writing {args.output}", args.quiet):
        save_keywords(kw, args.output, params)
    import numpy as np

    from flashtrie.datasets._hashing import full_keyword_hashes

    dups = len(kw) - int(np.unique(full_keyword_hashes(kw)).size)  # 64-bit hashes: collisions are negligible
    _say(f"{len(kw):,} keywords ({dups:,} exact duplicates), {kw.tokens.size:,} tokens, max length {kw.max_length} "
         f"-> {args.output}")
    return 0


def _generate_workload(keywords: Any, n: int, k: int, steps: int | None, preset: str, seed: int) -> Any:
    from flashtrie.datasets import generate_queries

    extra = {} if steps is None else {"num_steps": steps}
    return generate_queries(keywords, n, proposals_per_step=k, preset=preset, seed=seed, **extra)


def cmd_gen_queries(args: argparse.Namespace) -> int:
    from flashtrie.datasets import save_workload
    from flashtrie.harness.workloads import load_keywords

    check_output_file(args.output, "--output", (args.keywords,))
    with _Stage(f"loading keywords {args.keywords}", args.quiet):
        kw = load_keywords(args.keywords)
    with _Stage(f"generating {args.n} '{args.preset}' queries, K = {args.K}", args.quiet):
        wl = _generate_workload(kw, args.n, args.K, args.steps, args.preset, args.seed)
    with _Stage(f"writing {args.output}", args.quiet):
        if str(args.output).endswith(".tsv"):
            wl.proposals.to_tsv(args.output)  # the public FlashTrie format: proposals only, no ground truth
        else:
            save_workload(args.output, wl)
    q, t, k = wl.proposals.shape
    _say(f"{q} queries x {t} steps x {k} proposals -> {args.output}")
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from flashtrie.harness.workloads import load_keywords

    check_output_file(args.output, "--output", (args.keywords,))
    with _Stage(f"loading keywords {args.keywords}", args.quiet):
        kw = load_keywords(args.keywords)
    t0 = time.perf_counter()
    idx = _build_index(kw, args.quiet)
    dt = time.perf_counter() - t0
    with _Stage(f"writing {args.output}", args.quiet):
        idx.save(args.output)
    size = Path(args.output).stat().st_size
    _say(f"{idx.num_keywords:,} keywords ({idx.num_unique:,} unique, {idx.duplicates:,} duplicates collapsed), "
         f"{idx.num_nodes:,} nodes, {size:,} bytes ({size / max(idx.num_unique, 1):.2f} bytes/keyword), "
         f"built in {dt:.2f} s -> {args.output}")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from flashtrie.index import NarrowLoudsIndex
    from flashtrie.index.fileformat import FORMAT_VERSION

    path = Path(args.index)
    if not path.exists():
        raise InputError(f"{args.index}: no such file; build one with `flashtrie build KEYWORDS -o {args.index}`")
    idx = NarrowLoudsIndex.load(path, verify=not args.no_verify)
    st = idx.stats()
    if args.json:
        print(json.dumps({"file": str(path), "file_bytes": path.stat().st_size, **st, "meta": idx.meta},
                         indent=1, sort_keys=True, default=str))
        return 0
    size = path.stat().st_size
    print(f"{path}: {size:,} bytes, format version {FORMAT_VERSION}")  # load refuses any other version
    print(f"  keywords {st['keywords']:,} ({st['unique_keywords']:,} unique, {st['duplicates']:,} duplicates), "
          f"longest {idx.max_keyword_length} tokens, largest token {idx.max_token:,}")
    print(f"  nodes {st['nodes']:,}: {st['terminal_nodes']:,} keyword ends, {st['linked_nodes']:,} with a "
          f"compressed edge ({st['suffix_tokens']:,} tail tokens), {st['high_label_nodes']:,} labels >= 65536")
    print(f"  arrays {st['bytes']:,} bytes, {st['bytes_per_keyword']:.2f} bytes per unique keyword"
          + (f", built in {st['build_seconds']:.2f} s" if st.get("build_seconds") is not None else ""))
    width = max(len(k) for k in st["arrays"])
    for name, nbytes in sorted(st["arrays"].items(), key=lambda kv: -kv[1]):
        print(f"    {name:<{width}}  {nbytes:>14,}  {100 * nbytes / max(st['bytes'], 1):5.1f} %")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from flashtrie.harness.backends import BACKENDS, availability, close_searchers, make_searchers
    from flashtrie.harness.timing import summarize

    if args.backend not in BACKENDS:
        raise InputError(f"--backend: unknown backend {args.backend!r}; expected one of {', '.join(BACKENDS)}")
    why = availability(args.backend)
    if why is not None:
        raise InputError(f"--backend: {args.backend} is not available here: {why}")
    spec = BACKENDS[args.backend]
    if args.output:
        check_output_file(args.output, "--output", (args.keywords, args.index, args.queries))
    keywords, index, workload = _load_inputs(args, need_index=spec.needs == "index",
                                             need_keywords=spec.needs == "keywords")
    config = _config(args)
    made, failed = make_searchers([args.backend], keywords, index)
    if failed:
        raise InputError(f"--backend: could not construct {args.backend}: {failed[args.backend]}")
    s = made[args.backend]
    try:
        times, res = _time_per_query(s, workload.proposals, config, f"search ({args.backend})", args.quiet)
    finally:
        close_searchers(made)
    st = summarize(times)
    for q in range(min(res.shape[0], args.show_queries)):
        print(f"query {q}: {int(res.num_results[q])} results")
        for rank, (kid, score, norm, length) in enumerate(res.query(q)[: args.show]):
            print(f"  {rank:>4}  id {kid:>10}  score {score:.6g}  norm {norm:.6g}  length {length}")
    print(f"{args.backend}: {res.shape[0]} queries, mean {st.mean:.3f} ms/query, p99 {st.p99:.3f} ms, "
          f"mean {float(res.num_results.mean()):.1f} results/query")
    if args.output:
        import numpy as np

        from flashtrie.io_util import atomic_write_with

        atomic_write_with(args.output, lambda f: np.savez(f, keyword_ids=res.keyword_ids, scores=res.scores,
                                                          norm_scores=res.norm_scores, lengths=res.lengths,
                                                          num_results=res.num_results))
        _say(f"results -> {args.output}")
    return 0


def _parity_run(args: argparse.Namespace, keywords: Any, index: Any, workload: Any, backends: list[str],
                timed: bool) -> tuple[Any, dict[str, list[float]]]:
    from flashtrie.harness.backends import close_searchers, make_searchers, reference_first
    from flashtrie.harness.parity import check_parity

    config = _config(args)
    searchers, failed = make_searchers(backends, keywords, index)
    for name, err in failed.items():
        _say(f"warning: backend {name} could not be constructed: {err}")
    results: dict[str, Any] = {}
    times: dict[str, list[float]] = {}
    try:
        for name, s in searchers.items():
            try:
                if timed:
                    times[name], results[name] = _time_per_query(s, workload.proposals, config,
                                                                 f"searching with {name}", args.quiet)
                else:
                    with _Stage(f"searching with {name}", args.quiet):
                        results[name] = s.search(workload.proposals, config)
            except FlashTrieError:
                raise
            except Exception as e:  # noqa: BLE001 - left for check_parity to report as an error
                _say(f"warning: backend {name} failed: {type(e).__name__}: {e}")
        ordered = {n: searchers[n] for n in reference_first(searchers)}
        report = check_parity(ordered, workload.proposals, config, results=results)
    finally:
        close_searchers(searchers)
    return report, times


def _parity_records(args: argparse.Namespace, report: Any, workload: Any, kind: str,
                    times: dict[str, list[float]]) -> None:
    if not getattr(args, "records", None):
        return
    from flashtrie.harness.records import append_records
    from flashtrie.harness.timing import summarize
    from flashtrie.harness.workloads import workload_params

    ctx = _context(args, None)
    config = _config(args)
    cfg = {"beam_width": config.beam_width, "max_results": config.results, "token_threshold": config.token_threshold,
           "score_threshold": config.score_threshold, "length_norm": config.length_norm, "batch_size": 1}
    base = times.get("marisa")
    recs = []
    for o in report.outcomes:
        metrics: dict[str, Any] = {"num_queries": report.num_queries, "reference": report.reference}
        if o.name in times:
            st = summarize(times[o.name])
            metrics.update({f"{k}_ms": v for k, v in st.to_dict().items() if k != "n"})
            if base:
                metrics["speedup_vs_marisa"] = summarize(base).mean / st.mean if st.mean > 0 else None
        msg = o.error if o.error else (str(o.mismatch) if o.mismatch else None)
        recs.append(ctx.record(kind=kind, backend=o.name, status=o.status, message=msg, sweep=None,
                               workload=workload_params(workload), config=cfg, metrics=metrics))
    append_records(args.records, recs)
    _say(f"{len(recs)} records -> {args.records}")


def _check_records_file(args: argparse.Namespace) -> None:
    if getattr(args, "records", None):
        check_output_file(args.records, "--records")


def cmd_parity(args: argparse.Namespace) -> int:
    _check_records_file(args)
    backends = _backends(args, have_keywords=bool(args.keywords))
    keywords, index, workload = _load_inputs(args, need_index=any(not _needs_keywords(b) for b in backends),
                                             need_keywords=any(_needs_keywords(b) for b in backends))
    report, _ = _parity_run(args, keywords, index, workload, backends, timed=False)
    print(report.summary())
    _parity_records(args, report, workload, "parity", {})
    return 0 if report.ok else 1


def cmd_bench(args: argparse.Namespace) -> int:
    from flashtrie.harness import sweep as sw

    what = args.sweep
    check_output_file(args.output, "--output", (args.keywords, args.index, args.queries))
    if what in ("beam", "batch", "quality", "all") and not args.queries:
        raise InputError(f"--queries: 'bench {what}' needs a query workload: --queries FILE (a .npz from "
                         "'flashtrie gen-queries', or a proposal TSV)")
    if what in ("build", "quality", "all") and not args.keywords:
        raise InputError(f"--keywords: 'bench {what}' needs the keyword library: --keywords FILE (.txt or a .npz "
                         "from 'flashtrie gen-keywords')")
    # the size sweep generates its own libraries; the others have keywords only when --keywords is given
    backends = _backends(args, have_keywords=bool(args.keywords) or what == "size")
    ctx = _context(args, args.output)
    if what == "build":
        from flashtrie.harness.workloads import describe_keywords, load_keywords

        with _Stage(f"loading keywords {args.keywords}", args.quiet):
            kw = load_keywords(args.keywords)
        sw.sweep_build(ctx, [(kw, describe_keywords(args.keywords, kw))], repeats=args.build_repeats, sweep="build")
    elif what == "size":
        from flashtrie.datasets import generate_keywords

        def make_keywords(n: int) -> tuple[Any, dict[str, Any]]:
            kw = generate_keywords(n, seed=args.seed)
            return kw, {"n": n, "seed": args.seed, "generator": "flashtrie.datasets.generate_keywords"}

        def make_workload(kw: Any, n: int) -> Any:
            return _generate_workload(kw, args.num_queries, args.beam, args.steps, args.preset, args.seed)

        sw.sweep_library_size(ctx, args.sizes, backends, make_keywords=make_keywords, make_workload=make_workload,
                              beam_width=args.beam, length_norm=args.length_norm)
    else:
        from flashtrie.harness.workloads import describe_keywords

        keywords, index, workload = _load_inputs(args, need_index=True,
                                                 need_keywords=any(_needs_keywords(b) for b in backends)
                                                 or what in ("quality", "all"))
        ctx.library = (describe_keywords(args.keywords, keywords) if keywords is not None else
                       {"source": args.index, "num_keywords": int(index.num_keywords), "from": "the index file"})
        if what in ("beam", "all"):
            sw.sweep_beam_width(ctx, keywords, index, workload, backends, beams=args.beams,
                                batch_size=args.batch_size, length_norm=args.length_norm)
        if what in ("batch", "all"):
            sw.sweep_batch_size(ctx, keywords, index, workload, backends, batch_sizes=args.batch_sizes,
                                beam_width=args.beam, length_norm=args.length_norm)
        if what in ("quality", "all"):
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
        if what == "all":
            sw.sweep_build(ctx, [(keywords, ctx.library)], repeats=args.build_repeats, sweep="build")
    bad = [r for r in ctx.records if r.status in ("mismatch", "error")]
    skipped = [r for r in ctx.records if r.status == "skipped"]
    notes = [f"{len(bad)} not ok"] if bad else []
    notes += [f"{len(skipped)} skipped"] if skipped else []
    _say(f"{len(ctx.records)} records -> {args.output}" + (f" ({', '.join(notes)})" if notes else ""))
    for r in bad + skipped:
        _say(f"  {r.kind} {r.backend} beam={r.config.get('beam_width')} batch={r.config.get('batch_size')}: "
             f"{r.status}: {r.message}")
    return 1 if bad else 0


def cmd_report(args: argparse.Namespace) -> int:
    from flashtrie.harness.report import build_report

    out = Path(args.output)
    if out.exists() and not out.is_dir():
        raise InputError(f"--output: {args.output} is a file; the report needs a folder, such as reports/<name>/")
    path = build_report(args.results, args.output, title=args.title, include_anchors=not args.no_anchors)
    _say(f"report -> {path}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from flashtrie.datasets import generate_keywords
    from flashtrie.harness.timing import summarize
    from flashtrie.harness.workloads import Loaded

    _check_records_file(args)
    backends = _backends(args)
    t_start = time.perf_counter()
    with _Stage(f"generating {args.keywords:,} keywords (seed {args.seed})", args.quiet):
        keywords = generate_keywords(args.keywords, seed=args.seed)
    k = args.K if args.K is not None else args.beam
    with _Stage(f"generating {args.queries} '{args.preset}' queries (K = {k})", args.quiet):
        workload = _generate_workload(keywords, args.queries, k, args.steps, args.preset, args.seed)
    index = _build_index(keywords, args.quiet)
    q, t, kk = workload.proposals.shape
    print(f"demo: {len(keywords):,} keywords ({index.num_nodes:,} trie nodes), {q} queries x {t} steps x "
          f"{kk} proposals, beam {args.beam}, batch 1")
    report, times = _parity_run(args, keywords, index, Loaded(workload.proposals, None, {}), backends, timed=True)
    base = summarize(times["marisa"]).mean if "marisa" in times else None
    rows = []
    for o in sorted(report.outcomes, key=lambda o: backends.index(o.name) if o.name in backends else 99):
        if o.name in times:
            st = summarize(times[o.name])
            speed = f"{base / st.mean:.1f}x" if base and st.mean > 0 else "-"
            mean, p99 = f"{st.mean:.3f}", f"{st.p99:.3f}"
        else:
            mean = p99 = speed = "-"
        agree = {"ok": "reference" if o.name == report.reference else "yes", "mismatch": "NO",
                 "error": "error"}[o.status]
        rows.append((o.name, mean, p99, speed, agree))
    head = ("backend", "mean ms/query", "p99 ms", "speed-up vs marisa", "results agree")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    if not report.ok:
        print(report.summary())
    else:
        n_res = report.outcomes[0].result.num_results
        print(f"all {len(report.outcomes)} backends agree exactly (ids, order, float32 bits) on {q} queries; "
              f"mean {float(n_res.mean()):.1f} results/query; total {time.perf_counter() - t_start:.1f} s")
    _parity_records(args, report, workload, "parity", times)
    return 0 if report.ok else 1


# ------------------------------------------------------------------------------------------ parser
def _sub(subs: Any, name: str, help_line: str, body: str, fn: Callable[[argparse.Namespace], int]
         ) -> argparse.ArgumentParser:
    p = subs.add_parser(name, help=help_line, description=help_line + "\n\n" + textwrap.dedent(body).strip(),
                        formatter_class=_Formatter)
    p.set_defaults(func=fn)
    p.add_argument("--quiet", action="store_true", help="no progress bars or stage messages")
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=_DESCRIPTION, formatter_class=_Formatter)
    from flashtrie import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subs = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = _sub(subs, "gen-keywords", "generate a synthetic keyword library", """
        Keywords are token sequences of length 1-8 grown as a prefix tree with heavy-tailed fan-out
        (Zipf-shared prefixes over a 2.2M-token vocabulary), like a real ad-keyword library.  The output
        is deterministic in --seed.  Write .npz (keeps the generator parameters) or .txt (one keyword per
        line, space-separated token ids; the marisa-build format).

        example:  flashtrie gen-keywords -n 200k -o data/kw.npz
        """, cmd_gen_keywords)
    p.add_argument("-n", type=_count, default=200_000, help="number of keywords (200000, 200k, 2M ...)")
    p.add_argument("--seed", type=_nonneg, default=0, help="random seed")
    p.add_argument("--vocab-size", type=_count, default=None, help="vocabulary size (default: the generator's, 2.2M)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="output file (.npz or .txt)")

    p = _sub(subs, "gen-queries", "generate a query workload (proposals + ground truth) for a library", """
        Each query picks a topic in the library and a set of relevant keywords under it; row t of the
        proposals holds their step-t tokens, then real continuations, then random tokens, with noisy
        log-softmax logprobs.  Preset 'dense' fills the beams every step (production-like); 'sparse'
        has few valid proposals.  The .npz keeps the proposals, the relevant ids and every parameter.

        example:  flashtrie gen-queries data/kw.npz -n 16 -K 1000 -o data/q.npz
        """, cmd_gen_queries)
    p.add_argument("keywords", metavar="KEYWORDS", help="keyword library the queries are drawn from")
    p.add_argument("-n", type=_count, default=16, help="number of queries")
    p.add_argument("-K", type=_count, default=1000, help="proposals per step (benchmarks truncate to K = beam width)")
    p.add_argument("--steps", "-T", type=_count, default=None, help="decoding steps T (default: the generator's, 8)")
    p.add_argument("--preset", choices=("dense", "sparse"), default="dense", help="workload shape")
    p.add_argument("--seed", type=_nonneg, default=0, help="random seed")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="output .npz (or .tsv: the public FlashTrie proposal format, without ground truth)")

    p = _sub(subs, "build", "build the narrow-LOUDS index of a keyword library", """
        The index is a path-compressed trie stored as plain arrays (see docs/index-format.md); the file
        is memory-mapped when loaded and checked with CRC-32s.  Duplicated keywords keep the smaller id.

        example:  flashtrie build data/kw.npz -o data/kw.ftrie
        """, cmd_build)
    p.add_argument("keywords", metavar="KEYWORDS", help="keyword library (.txt or .npz)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="index file to write")

    p = _sub(subs, "info", "show what an index file holds: counts and bytes per array", """
        Loads the index (memory-mapped; the CRC-32 of every array is checked unless --no-verify) and
        prints its keyword and node counts and the bytes of each array, largest first.  The layout is
        described in docs/index-format.md.

        example:  flashtrie info data/kw.ftrie
        """, cmd_info)
    p.add_argument("index", metavar="INDEX", help="index file (from flashtrie build)")
    p.add_argument("--json", action="store_true", help="print the statistics and metadata as JSON")
    p.add_argument("--no-verify", action="store_true", help="skip the checksums (faster on a large file)")

    p = _sub(subs, "search", "search a workload with one backend and print the top results", """
        Runs one query per call (batch 1) and prints per-query results and the mean latency.  The numpy
        and gpu backends need --index (or --keywords to build one on the fly); marisa needs --keywords.

        example:  flashtrie search --index data/kw.ftrie --queries data/q.npz --beam 100 --show 5
        """, cmd_search)
    _add_input_options(p)
    _add_search_options(p)
    p.add_argument("--backend", "-b", default="numpy", help="marisa, numpy or gpu")
    p.add_argument("--show", type=_nonneg, default=10, help="results to print per query")
    p.add_argument("--show-queries", type=_nonneg, default=3, help="queries to print")
    p.add_argument("-o", "--output", metavar="FILE", help="also write all results to this .npz")

    p = _sub(subs, "parity", "check that backends return exactly the same results", """
        Runs every selected backend on the same workload and compares ids, order and float32 score bits
        query by query against the first one; on a mismatch it prints the first differing query and rank
        with both backends' entries.  Exit status 0 when all agree, 1 otherwise.

        example:  flashtrie parity --keywords data/kw.npz --index data/kw.ftrie --queries data/q.npz
        """, cmd_parity)
    _add_input_options(p)
    _add_search_options(p)
    p.add_argument("--backends", default="all", help=_BACKENDS_HELP)
    p.add_argument("--records", metavar="FILE", help="also append parity records to this .jsonl")

    p = _sub(subs, "bench", "run a benchmark sweep and append records to a JSON Lines file", """
        sweeps:
          beam     latency per call vs beam width (K = beam width; proposals truncated to the top K)
          batch    throughput vs batch size at --beam
          size     latency vs library size (generates a library and workload per --sizes entry;
                   also records build time and size)
          build    build time and bytes: narrow-LOUDS index vs a marisa-trie BinaryTrie of the keywords
          quality  Precision@k / Recall@k vs beam width: constrained vs unconstrained decoding + filtering
          all      beam, batch, quality and build on the given inputs

        Each case compares every backend's results exactly (ids, order, float32 bits); a case that differs
        is recorded as 'mismatch' and the command exits with status 1.  Records store the speed-up over
        marisa measured in the same case, the workload statistics, the library and workload parameters,
        the environment and this command.  A backend whose last warmup call shows that one pass would take
        more than 6x --max-seconds is recorded as 'skipped' (and listed at the end).  Draw figures and
        tables afterwards with 'flashtrie report'.

        example:  flashtrie bench beam --keywords data/kw.npz --queries data/q.npz --beams 1,10,100 \\
                      -o results/beam.jsonl
        """, cmd_bench)
    p.add_argument("sweep", choices=("beam", "batch", "size", "build", "quality", "all"), help="what to sweep")
    g = p.add_argument_group("inputs")
    g.add_argument("--keywords", "-k", metavar="FILE",
                   help="keyword library; needed by the marisa backend and by the build, quality and all sweeps")
    g.add_argument("--index", "-i", metavar="FILE", help="index (built from --keywords when not given)")
    g.add_argument("--queries", "-q", metavar="FILE",
                   help="query workload (.npz from gen-queries, or a proposal TSV); needed by every sweep but "
                        "build and size")
    g.add_argument("--limit", type=_count, default=None, metavar="Q", help="use only the first Q queries")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="records file (.jsonl, appended)")
    p.add_argument("--backends", default="all", help=_BACKENDS_HELP)
    p.add_argument("--beams", type=_ints, default=[1, 10, 100, 500, 1000], help="beam widths (beam, quality)")
    p.add_argument("--beam", "-B", type=_count, default=100, help="beam width for the batch and size sweeps")
    p.add_argument("--batch-size", type=_count, default=1, help="queries per call in the beam sweep")
    p.add_argument("--batch-sizes", type=_ints, default=[1, 2, 4, 8, 16, 32], help="batch sizes (batch)")
    p.add_argument("--sizes", type=_ints, default=[10_000, 100_000, 1_000_000], help="library sizes (size)")
    p.add_argument("--ks", type=_ints, default=[10, 100], help="k of Precision@k / Recall@k (quality)")
    p.add_argument("--length-norm", type=float, default=0.0, help="length normalisation alpha")
    p.add_argument("--num-queries", type=_count, default=16, help="queries per generated workload (size)")
    p.add_argument("--steps", type=_count, default=None, help="decoding steps of generated workloads (size)")
    p.add_argument("--preset", choices=("dense", "sparse"), default="dense", help="generated workloads (size)")
    p.add_argument("--seed", type=_nonneg, default=0, help="seed of generated data (size)")
    t = p.add_argument_group("timing")
    t.add_argument("--warmup", type=_nonneg, default=2, help="untimed calls before timing")
    t.add_argument("--repeats", type=_count, default=10, help="timed passes over the queries")
    t.add_argument("--max-seconds", type=_seconds, default=10.0,
                   help="time budget per backend and case (at least one full pass is timed; a backend whose "
                        "last warmup call shows that a pass would take over 6x this is recorded as skipped)")
    t.add_argument("--stats-queries", type=_nonneg, default=8,
                   help="queries replayed to measure valid-proposal fraction and beam fill")
    t.add_argument("--build-repeats", type=_count, default=1, help="builds per library (best is kept)")

    p = _sub(subs, "report", "write a Markdown report with figures from stored records", """
        Reads records only (it never runs a benchmark) and writes OUTPUT/report.md with tables,
        PNG and SVG figures, the environment of the runs and the exact commands that reproduce them.
        A final section shows reference numbers taken from the anchors page, clearly labelled as not
        measured by the report (--no-anchors leaves it out).

        example:  flashtrie report results/beam.jsonl results/build.jsonl -o reports/h200-dense/
        """, cmd_report)
    p.add_argument("results", nargs="+", metavar="RESULTS", help="records files (.jsonl) from 'flashtrie bench'")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="report folder, e.g. reports/<name>/")
    p.add_argument("--title", default=None, help="report title")
    p.add_argument("--no-anchors", action="store_true", help="leave out the reference-numbers section")

    p = _sub(subs, "demo", "end to end on a generated library: build, search with every backend, compare", """
        Generates a keyword library and a dense query workload, builds the index, searches with every
        backend available here (marisa, numpy, and gpu when a GPU and cuda-core are present), checks that
        all return exactly the same results, and prints mean latency per query and the speed-up over
        marisa.  Nothing is written unless --records is given.

        example:  flashtrie demo --keywords 200k --queries 16 --beam 100
        """, cmd_demo)
    p.add_argument("--keywords", type=_count, default=200_000, help="number of generated keywords")
    p.add_argument("--queries", type=_count, default=16, help="number of generated queries")
    p.add_argument("-K", type=_count, default=None, help="proposals per step (default: the beam width)")
    p.add_argument("--steps", type=_count, default=None, help="decoding steps (default: the generator's)")
    p.add_argument("--preset", choices=("dense", "sparse"), default="dense", help="workload shape")
    p.add_argument("--seed", type=_nonneg, default=0, help="random seed")
    p.add_argument("--backends", default="all", help=_BACKENDS_HELP)
    p.add_argument("--records", metavar="FILE", help="also append the demo's records to this .jsonl")
    _add_search_options(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``flashtrie`` command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = [PROG, *(sys.argv[1:] if argv is None else argv)]
    try:
        return int(args.func(args) or 0)
    except FlashTrieError as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"{PROG}: error: {msg}", file=sys.stderr)
        return 2
    except MemoryError:
        print(f"{PROG}: error: out of memory; try a smaller input (-n, --limit, --sizes) or a machine with more "
              "RAM", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into a reader that stopped early (`| head`): not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail again
        return 0


if __name__ == "__main__":
    sys.exit(main())
