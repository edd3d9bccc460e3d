"""Data commands: ``gen-keywords``, ``gen-queries``, ``build``, ``info``."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from flashtrie.errors import InputError
from flashtrie.io_util import check_output_file
from flashtrie.tokenize import TOKENIZER_SPEC_HELP

from .common import (
    KEYWORDS_HELP,
    Stage,
    add_command,
    build_index,
    check_suffix,
    count,
    load_keyword_file,
    nonneg,
    plural,
    proposals_count,
    say,
    steps_count,
    vocab_count,
    writing_to,
)
from .memory import build_part, check_parts, generation_part, workload_part

__all__ = ["add_parsers"]


def cmd_gen_keywords(args: argparse.Namespace) -> int:
    from flashtrie.datasets import KeywordParams, generate_keywords_from, save_keywords
    from flashtrie.harness.workloads import duplicate_count

    check_output_file(args.output, "--output")
    check_suffix(args.output, "--output", (".npz", ".txt"), "a keyword library")
    check_parts([generation_part("-n", args.num_keywords)])
    params = KeywordParams(n=args.num_keywords, seed=args.seed, **({} if args.vocab_size is None else
                                                         {"vocab_size": args.vocab_size}))
    with Stage(f"generating {args.num_keywords:,} keywords (seed {args.seed})", args.quiet):
        kw = generate_keywords_from(params)
    with Stage(f"writing {args.output}", args.quiet), writing_to(args.output):
        save_keywords(args.output, kw, params)
    say(f"{len(kw):,} keywords ({duplicate_count(kw):,} exact duplicates), {kw.tokens.size:,} tokens, max length "
        f"{kw.max_length} -> {args.output}")
    return 0


def cmd_gen_queries(args: argparse.Namespace) -> int:
    from flashtrie.harness.workloads import generate_workload, save_workload_file

    check_output_file(args.output, "--output", (args.keywords,))
    check_suffix(args.output, "--output", (".npz", ".tsv"), "a query workload")
    shape = ("-n / -K", f"{args.num_queries:,} / {args.K:,}", args.num_queries, args.steps, args.K)
    check_parts([workload_part(*shape)])
    kw = load_keyword_file(args.keywords, args.quiet)
    check_parts([workload_part(*shape, library=len(kw))])
    with Stage(f"generating {args.num_queries} '{args.preset}' queries, K = {args.K}", args.quiet):
        timings: dict[str, float] = {}
        wl = generate_workload(kw, args.num_queries, args.K, args.steps, args.preset, args.seed, device=args.device,
                               timings=timings)
    ran = next((k.split(" (")[0] for k in timings if k.startswith("library pass on")), None)
    if ran and not args.quiet:
        say(f"{ran}: {timings[next(k for k in timings if k.startswith(ran))]:.2f} s")
    with Stage(f"writing {args.output}", args.quiet), writing_to(args.output):
        save_workload_file(wl, args.output)
    q, t, k = wl.proposals.shape
    say(f"{q} queries x {t} steps x {k} proposals -> {args.output}")
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    check_output_file(args.output, "--output", (args.keywords,))
    if args.duplicates != "error" and args.tokenizer is None:
        raise InputError("--duplicates: applies to names tokenized with --tokenizer SPEC")
    if args.unknown != "error" and args.tokenizer is None:
        raise InputError("--unknown: applies to names tokenized with --tokenizer SPEC")
    if args.gpu:  # before any name is read or tokenized
        from flashtrie.arrays import cupy_module

        cupy_module()
    kw = load_keyword_file(args.keywords, args.quiet, args.tokenizer, args.duplicates, args.unknown)
    check_parts([build_part("KEYWORDS", f"{args.keywords} ({len(kw):,} keywords)", len(kw))])
    t0 = time.perf_counter()
    idx = build_index(kw, args.quiet, ids=args.ids, gpu=args.gpu)
    dt = time.perf_counter() - t0
    with Stage(f"writing {args.output}", args.quiet), writing_to(args.output):
        idx.save(args.output)
    size = Path(args.output).stat().st_size
    say(f"{idx.num_keywords:,} keywords ({idx.num_unique:,} unique, {plural(idx.duplicates, 'duplicate')} collapsed), "
        f"{idx.num_nodes:,} nodes, {size:,} bytes ({size / max(idx.num_unique, 1):.2f} bytes/keyword), "
        f"built in {dt:.2f} s -> {args.output}" + (f"; strings kept ({idx.stats()['text_bytes']:,} bytes)"
                                                      if idx.has_texts else ""))
    return 0


def info_lines(path: Path, idx: Any) -> list[str]:
    """The text ``flashtrie info`` prints for a loaded index."""
    from flashtrie.index.fileformat import FORMAT_VERSION

    st = idx.stats()
    size = path.stat().st_size
    lines = [f"{path}: {size:,} bytes, format version {FORMAT_VERSION}",  # load refuses any other version
             f"  keywords {st['keywords']:,} ({st['unique_keywords']:,} unique, {st['duplicates']:,} duplicates), "
             f"longest {idx.max_keyword_length} tokens, largest token {idx.max_token:,}",
             f"  nodes {st['nodes']:,}: {st['terminal_nodes']:,} keyword ends, {st['linked_nodes']:,} with a "
             f"compressed edge ({st['suffix_tokens']:,} tail tokens), {st['high_label_nodes']:,} labels >= 65536",
             f"  arrays {st['bytes']:,} bytes, {st['bytes_per_keyword']:.2f} bytes per unique keyword"
             + (f", built in {st['build_seconds']:.2f} s" if st.get("build_seconds") is not None else ""),
             f"  strings {st['texts']:,} stored, {st['text_bytes']:,} bytes (UTF-8 and packed offsets)" if st["texts"]
             else "  strings none stored (build from names with --tokenizer to keep them)"]
    width = max(len(k) for k in st["arrays"])
    for name, nbytes in sorted(st["arrays"].items(), key=lambda kv: -kv[1]):
        lines.append(f"    {name:<{width}}  {nbytes:>14,}  {100 * nbytes / max(st['bytes'], 1):5.1f} %")
    return lines


def cmd_info(args: argparse.Namespace) -> int:
    from flashtrie.harness.workloads import load_index

    path = Path(args.index)
    if not path.exists():
        raise InputError(f"{args.index}: no such file; build one with `flashtrie build KEYWORDS -o {args.index}`")
    idx = load_index(path, verify=not args.no_verify)
    if args.json:
        text = json.dumps({"file": str(path), "file_bytes": path.stat().st_size, **idx.stats(), "meta": idx.meta},
                          indent=1, sort_keys=True, default=str)
    else:
        text = "\n".join(info_lines(path, idx))
    print(text)  # one write of the whole text: an error (a full stdout) leaves no partial listing behind
    return 0


def add_parsers(subs: Any) -> None:
    """Declare gen-keywords, gen-queries, build and info."""
    p = add_command(subs, "gen-keywords", "generate a synthetic keyword library", """
        Keywords are token sequences of length 1-8 grown as a prefix tree with heavy-tailed fan-out
        (Zipf-shared prefixes over a 2.2M-token vocabulary), like a real ad-keyword library.  The output
        is deterministic in --seed.  Write .npz (keeps the generator parameters) or .txt (one keyword per
        line, space-separated token ids; the marisa-build format).

        example:  flashtrie gen-keywords -n 200k -o data/kw.npz
        """, cmd_gen_keywords)
    p.add_argument("-n", "--num-keywords", type=count, default=200_000,
                   help="number of keywords (200000, 200k, 2M ...)")
    p.add_argument("--seed", type=nonneg, default=0, help="random seed")
    p.add_argument("--vocab-size", type=vocab_count, default=None,
                   help="vocabulary size (default: the generator's, 2.2M)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="output file (.npz or .txt)")

    p = add_command(subs, "gen-queries", "generate a query workload (proposals + ground truth) for a library", """
        Each query picks a topic in the library and a set of relevant keywords under it; row t of the
        proposals holds their step-t tokens, then real continuations, then random tokens, with noisy
        log-softmax logprobs.  Preset 'dense' fills the beams every step (production-like); 'sparse'
        has few valid proposals.  The .npz keeps the proposals, the relevant ids and every parameter.

        example:  flashtrie gen-queries data/kw.npz -n 16 -K 1000 -o data/q.npz
        """, cmd_gen_queries)
    p.add_argument("keywords", metavar="KEYWORDS", help="keyword library the queries are drawn from")
    p.add_argument("-n", "--num-queries", type=count, default=16, help="number of queries")
    p.add_argument("-K", "--num-proposals", type=proposals_count, default=1000, dest="K",
                   help="proposals per step (search and bench use the top K = beam width of them)")
    p.add_argument("--steps", "-T", type=steps_count, default=None,
                   help="decoding steps T (default: the generator's, 8)")
    p.add_argument("--preset", choices=("dense", "sparse"), default="dense", help="workload shape")
    p.add_argument("--seed", type=nonneg, default=0, help="random seed")
    p.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto",
                   help="where the one pass over the library (lengths, hashes, token counts) runs: 'auto' takes "
                        "the GPU where cupy and a GPU are present (the CPU where they are not, or where the GPU is "
                        "short of memory; the output says which ran); the queries are the same bit for bit on each")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="output .npz (or .tsv: the public FlashTrie proposal format, without ground truth)")

    p = add_command(subs, "build", "build the narrow-LOUDS index of a keyword library", """
        The index is a path-compressed trie stored as plain arrays (see docs/index-format.md); the file
        is memory-mapped when loaded and checked with CRC-32s.  Duplicated keywords keep the smaller id.
        With --tokenizer, KEYWORDS is a UTF-8 text file of names, one per line: each is tokenized (no
        special tokens added) and the index keeps the strings (`search --show-text`, index.text(id)).

        example:  flashtrie build data/kw.npz -o data/kw.ftrie
                  flashtrie build names.txt --tokenizer tokenizer.json -o names.ftrie
        """, cmd_build)
    p.add_argument("keywords", metavar="KEYWORDS", help=KEYWORDS_HELP + "; with --tokenizer, a text file of names, "
                   "one per line")
    p.add_argument("--tokenizer", "-t", metavar="SPEC", default=None,
                   help="tokenize KEYWORDS, a file of names, with this tokenizer and keep the names: " +
                   TOKENIZER_SPEC_HELP)
    p.add_argument("--duplicates", choices=("error", "keep"), default="error",
                   help="names with the same tokens: 'error' refuses them (naming the first), 'keep' keeps them "
                        "(the index returns the first one's id)")
    p.add_argument("--unknown", choices=("error", "keep"), default="error",
                   help="names holding the tokenizer's unknown token (a character its vocabulary lacks): 'error' "
                        "refuses them (naming the first few), 'keep' keeps them")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="index file to write")
    p.add_argument("--ids", choices=("input", "index"), default="input",
                   help="what result ids mean: 'input' = the keyword's position in KEYWORDS (a map is stored "
                        "unless that already is the index's order); 'index' = the index's own order, no map (a "
                        "smaller file; `search --show-tokens` shows each id's tokens)")
    p.add_argument("--gpu", action="store_true",
                   help="build on the GPU (the same arrays; needs flashtrie[gpu-build], i.e. cupy)")

    p = add_command(subs, "info", "show what an index file holds: counts and bytes per array", """
        Loads the index (memory-mapped; the CRC-32 of every array is checked unless --no-verify) and
        prints its keyword and node counts and the bytes of each array, largest first.  The layout is
        described in docs/index-format.md.

        example:  flashtrie info data/kw.ftrie
        """, cmd_info)
    p.add_argument("index", metavar="INDEX", help="index file (from flashtrie build)")
    p.add_argument("--json", action="store_true", help="print the statistics and metadata as JSON")
    p.add_argument("--no-verify", action="store_true", help="skip the checksums (faster on a large file)")
