"""Search commands: ``search`` (one backend, printed results) and ``parity`` (every backend, compared)."""

from __future__ import annotations

import argparse
from typing import Any

from flashtrie.errors import InputError
from flashtrie.io_util import check_output_file
from flashtrie.limits import PAD_TOKEN

from .common import (
    BACKENDS_HELP,
    TSV_HELP,
    Stage,
    add_command,
    add_input_options,
    add_search_options,
    choose_backends,
    hidden_alias,
    load_inputs,
    make_searchers,
    needs_keywords,
    nonneg,
    proposals_k,
    run_context,
    say,
    search_config,
    writing_to,
)

__all__ = ["add_parsers", "prepare_workload", "parity_run", "write_parity_records", "first_tokens",
           "empty_queries"]


def prepare_workload(args: argparse.Namespace, workload: Any) -> Any:
    """The workload with its proposals cut to the K the search uses (`proposals_k`), saying which K."""
    from flashtrie.harness.workloads import Loaded, relevant_sets, truncate_proposals, workload_params

    available = workload.proposals.shape[2]
    k = proposals_k(args, available)
    if getattr(args, "K", None) is not None:
        why = "-K"
    elif getattr(args, "all_proposals", False):
        why = "--all-proposals"
    else:
        why = "the beam width, as in 'flashtrie bench'"
    if not args.quiet:
        say(f"K = {k} proposals per step (of {available}; {why})")
    if k >= available:
        return workload
    return Loaded(proposals=truncate_proposals(workload.proposals, k), relevant=relevant_sets(workload),
                  params={**workload_params(workload), "K_used": k})


def _shown_queries(res: Any, args: argparse.Namespace) -> int:
    return res.shape[0] if args.all else min(res.shape[0], args.show_queries)


def _print_results(res: Any, args: argparse.Namespace, tokens: dict[int, list[int]] | None,
                   texts: dict[int, str] | None, names: list[str] | None) -> None:
    shown = _shown_queries(res, args)
    for q in range(shown):
        name = f" for {names[q]!r}" if names is not None else ""
        n = int(res.num_results[q])
        part = f" (showing {args.show}; --show N for more)" if n > args.show and not args.all else ""
        print(f"query {q}: {n} results{name}{part}")
        for rank, (kid, score, norm, length) in enumerate(res.query(q)[: None if args.all else args.show]):
            line = f"  {rank:>4}  id {kid:>10}  score {score:.6g}  norm {norm:.6g}  length {length}"
            if tokens is not None:
                line += "  tokens " + " ".join(str(t) for t in tokens.get(int(kid), []))
            if texts is not None:
                line += f"  text {texts[int(kid)]!r}"
            print(line)
    if shown < res.shape[0]:
        print(f"showing {shown} of {res.shape[0]} queries (--show-queries N or --all to print more)")


def _query_names(workload: Any) -> list[str] | None:
    """The query names of a proposal TSV (None for a generated workload), cut to the queries searched."""
    names = getattr(workload, "params", None)
    names = names.get("queries") if isinstance(names, dict) else None
    return list(names[: workload.proposals.shape[0]]) if names is not None else None


def _shown_texts(res: Any, args: argparse.Namespace, index: Any) -> dict[int, str] | None:
    """The strings of the printed results (``--show-text``): the index must hold strings."""
    if not args.show_text:
        return None
    if index is None or not index.has_texts:
        raise InputError("--show-text: needs an index that holds strings (--index FILE, built with `flashtrie build "
                         "NAMES.txt --tokenizer SPEC`)")
    ids = sorted(set(_shown_ids(res, args)))
    return dict(zip(ids, index.texts(ids), strict=True))


def _shown_ids(res: Any, args: argparse.Namespace) -> list[int]:
    show = None if args.all else args.show
    return [int(e[0]) for q in range(_shown_queries(res, args)) for e in res.query(q)[:show]]


def first_tokens(keywords: Any, index: Any) -> Any:
    """The tokens that start a keyword (the index's first level), ascending."""
    import numpy as np

    if index is not None:
        from flashtrie.stepwise import TrieStepper

        stepper = TrieStepper(index)
        offsets, allowed = stepper.allowed(stepper.start(1))
        return np.asarray(allowed[offsets[0] : offsets[1]], dtype=np.int64)
    lengths = keywords.lengths
    return np.unique(keywords.tokens[keywords.offsets[:-1][lengths > 0]].astype(np.int64))


def empty_queries(res: Any, workload: Any, config: Any, starts: Any) -> list[tuple[int, str]]:
    """(query, why) of every query without a result: no step-0 proposal above the token threshold starts a
    keyword, or none of its beams reached a keyword's end within its steps."""
    import numpy as np

    tokens = np.asarray(workload.proposals.tokens).astype(np.int64)
    logprobs = np.asarray(workload.proposals.logprobs)
    t_count = tokens.shape[1]
    out = []
    for q in np.flatnonzero(np.asarray(res.num_results) == 0).tolist():
        row = tokens[q, 0][(logprobs[q, 0] > config.token_threshold) & (tokens[q, 0] != PAD_TOKEN)]
        if not np.isin(row, starts).any():
            out.append((q, f"none of its {row.size} step-0 proposals starts a keyword of the index (its first level "
                           f"holds {starts.size:,} tokens); were the token ids made by the index's tokenizer?"))
        else:
            out.append((q, f"no beam reached the end of a keyword within its {t_count} steps"
                           + (" above the thresholds" if np.isfinite([config.token_threshold,
                                                                       config.score_threshold]).any() else "")))
    return out


def warn_empty(res: Any, workload: Any, config: Any, keywords: Any, index: Any, names: list[str] | None) -> bool:
    """Say on stderr which queries found no result and why (a line each, at most 5); True when none found any."""
    import numpy as np

    if not bool((np.asarray(res.num_results) == 0).any()):
        return False
    empty = empty_queries(res, workload, config, first_tokens(keywords, index))
    for q, why in empty[:5]:
        name = f" ({names[q]!r})" if names is not None else ""
        say(f"warning: query {q}{name}: 0 results: {why}")
    if len(empty) > 5:
        say(f"warning: {len(empty) - 5:,} more queries have 0 results")
    return len(empty) == res.shape[0]


def cmd_search(args: argparse.Namespace) -> int:
    from flashtrie.harness.backends import BACKENDS, availability, close_searchers
    from flashtrie.harness.runs import keyword_tokens, time_per_query
    from flashtrie.harness.timing import summarize

    if args.backend not in BACKENDS:
        raise InputError(f"--backend: unknown backend {args.backend!r}; expected one of {', '.join(BACKENDS)}")
    why = availability(args.backend)
    if why is not None:
        raise InputError(f"--backend: {args.backend} is not available here: {why}")
    spec = BACKENDS[args.backend]
    if args.output:
        check_output_file(args.output, "--output", (args.keywords, args.index, args.queries))
    keywords, index, workload = load_inputs(args, need_index=spec.needs == "index" or args.show_text,
                                            need_keywords=spec.needs == "keywords")
    workload = prepare_workload(args, workload)
    config = search_config(args)
    made, failed = make_searchers([args.backend], keywords, index, args.quiet)
    if failed:
        raise InputError(f"--backend: could not construct {args.backend}: {failed[args.backend]}")
    try:
        times, res = time_per_query(made[args.backend], workload.proposals, config,
                                    None if args.quiet else f"search ({args.backend})")
    finally:
        close_searchers(made)
    tokens = keyword_tokens(_shown_ids(res, args), keywords, index) if args.show_tokens else None
    texts = _shown_texts(res, args, index)
    names = _query_names(workload)
    st = summarize(times)
    _print_results(res, args, tokens, texts, names)
    print(f"{args.backend}: {res.shape[0]} queries, K = {workload.proposals.shape[2]}, mean {st.mean:.3f} ms/query, "
          f"p99 {st.p99:.3f} ms, mean {float(res.num_results.mean()):.1f} results/query")
    none_found = warn_empty(res, workload, config, keywords, index, names)
    if args.output:
        import numpy as np

        from flashtrie.io_util import atomic_write_with

        with writing_to(args.output):
            extra: dict[str, Any] = {} if names is None else {"query_names": np.array(names, dtype=str)}
            atomic_write_with(args.output, lambda f: np.savez(f, keyword_ids=res.keyword_ids, scores=res.scores,
                                                              norm_scores=res.norm_scores, lengths=res.lengths,
                                                              num_results=res.num_results, **extra))
        say(f"results -> {args.output}")
    return 1 if none_found else 0


def parity_run(args: argparse.Namespace, keywords: Any, index: Any, workload: Any, backends: list[str],
               timed: bool, passes: int = 1) -> tuple[Any, dict[str, list[float]]]:
    """Every backend on the workload, then the parity check: (report, per-query ms when ``timed``, ``passes``
    timed passes after a warm-up pass when more than one)."""
    from flashtrie.harness.backends import close_searchers, reference_first
    from flashtrie.harness.parity import check_parity
    from flashtrie.harness.runs import run_backends

    config = search_config(args)
    searchers, failed = make_searchers(backends, keywords, index, args.quiet)
    for name, err in failed.items():
        say(f"warning: backend {name} could not be constructed: {err}")
    try:
        results, times = run_backends(searchers, workload.proposals, config, timed=timed, progress=not args.quiet,
                                      warn=say, stage=lambda what: Stage(what, args.quiet), passes=passes)
        ordered = {n: searchers[n] for n in reference_first(searchers)}
        report = check_parity(ordered, workload.proposals, config, results=results)
    finally:
        close_searchers(searchers)
    return report, times


def write_parity_records(args: argparse.Namespace, report: Any, workload: Any, times: dict[str, list[float]]
                         ) -> None:
    """Append the parity records to ``-o/--output`` (when given)."""
    if not getattr(args, "output", None):
        return
    from flashtrie.harness.records import append_records
    from flashtrie.harness.runs import parity_records

    ctx = run_context(args, None)
    recs = parity_records(report, workload, search_config(args), times, ctx.record)
    with writing_to(args.output):
        append_records(args.output, recs)
    say(f"{len(recs)} records -> {args.output}")


def check_records_file(args: argparse.Namespace) -> None:
    """Refuse a bad ``-o/--output`` records path before any work."""
    if getattr(args, "output", None):
        check_output_file(args.output, "--output")


def cmd_parity(args: argparse.Namespace) -> int:
    check_records_file(args)
    skipped: dict[str, str] = {}
    backends = choose_backends(args, have_keywords=bool(args.keywords), skipped=skipped)
    if len(backends) < 2:
        why = "".join(f"; {name} skipped: {reason}" for name, reason in skipped.items())
        raise InputError(f"--backends: only {backends[0]} can run here{why}; parity compares two or more backends, "
                         "so nothing would be compared")
    keywords, index, workload = load_inputs(args, need_index=any(not needs_keywords(b) for b in backends),
                                            need_keywords=any(needs_keywords(b) for b in backends))
    workload = prepare_workload(args, workload)
    report, _ = parity_run(args, keywords, index, workload, backends, timed=False)
    print(f"K = {workload.proposals.shape[2]} proposals per step, beam {args.beam}")
    print(report.summary())
    write_parity_records(args, report, workload, {})
    if len(report.outcomes) < 2:
        say(f"error: nothing was compared: only {report.reference} ran (see the warnings above)")
        return 1
    return 0 if report.ok else 1


#: Every backend `--backend` accepts (the registry's names), so the help and the error list the same ones.
_BACKEND_HELP = ("one of marisa, marisa-lookup (marisa with lookups only), oracle (the brute-force reference: small "
                 "libraries only), numpy, gpu")


def add_parsers(subs: Any) -> None:
    """Declare search and parity."""
    p = add_command(subs, "search", "search a workload with one backend and print the top results", """
        Runs one query per call (batch 1) and prints per-query results and the mean latency.  The numpy
        and gpu backends need --index (or --keywords to build one on the fly); marisa needs --keywords.
        Each row keeps its top K = beam width proposals, as in 'flashtrie bench' (-K or --all-proposals
        to change it); the K used is printed.  --show-text prints each result's string (an index built
        from names with --tokenizer).

        Exit status: 0; 1 when no query found any result (a warning on stderr names each query without
        results and why: no step-0 proposal starts a keyword of the index, or no beam reached a keyword's
        end); 2 on an error.

        example:  flashtrie search --index data/kw.ftrie --queries data/q.npz --beam 100 --show 5
        """, cmd_search)
    p.epilog = TSV_HELP
    add_input_options(p)
    add_search_options(p)
    p.add_argument("--backend", "-b", default="numpy", help=_BACKEND_HELP)
    p.add_argument("--show", type=nonneg, default=10, help="results to print per query")
    p.add_argument("--show-queries", type=nonneg, default=3, help="queries to print")
    p.add_argument("--all", action="store_true", help="print every query and every result (--show and "
                   "--show-queries are left aside)")
    p.add_argument("--show-tokens", action="store_true",
                   help="also print each result's tokens (from --keywords when given, else from the index)")
    p.add_argument("--show-text", action="store_true",
                   help="also print each result's string (needs an index that holds them: build --tokenizer)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="also write all results to this .npz (keyword_ids, scores, norm_scores, lengths, num_results; "
                        "query_names for a proposal TSV)")

    p = add_command(subs, "parity", "check that backends return exactly the same results", """
        Runs every selected backend on the same workload and compares ids, order and float32 score bits
        query by query against the first one; on a mismatch it prints the first differing query and rank
        with both backends' entries.  Exit status 0 when all agree, 1 otherwise (or when fewer than two
        backends ran: nothing was compared); fewer than two backends available is an error.  K as in 'search'.

        example:  flashtrie parity --keywords data/kw.npz --index data/kw.ftrie --queries data/q.npz
        """, cmd_parity)
    p.epilog = TSV_HELP
    add_input_options(p)
    add_search_options(p)
    p.add_argument("--backends", default="all", help=BACKENDS_HELP)
    p.add_argument("-o", "--output", metavar="FILE", help="also append parity records to this .jsonl")
    hidden_alias(p, "--records", dest="output", metavar="FILE")
