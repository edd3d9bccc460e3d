"""What every command shares: argument types, option groups, progress stages, loading inputs, errors."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from flashtrie.errors import InputError
from flashtrie.harness.argtypes import (
    alpha,
    beam_width,
    beam_widths,
    count,
    ints,
    proposals_count,
    results_count,
    steps_count,
    vocab_count,
)
from flashtrie.io_util import temp_names

if TYPE_CHECKING:
    from flashtrie.index import NarrowLoudsIndex
    from flashtrie.keywords import KeywordSet

__all__ = ["PROG", "Parser", "Formatter", "add_command", "hidden_alias", "QUIET_HELP", "count", "ints", "beam_width",
           "beam_widths", "check_suffix", "plural", "check_same_library", "nonneg", "proposals_count", "steps_count",
           "results_count", "vocab_count", "alpha", "seconds", "number", "say", "Stage", "search_config",
           "add_search_options", "add_input_options", "load_inputs", "build_index", "choose_backends",
           "needs_keywords", "make_searchers", "proposals_k", "run_context", "BACKENDS_HELP", "writing_to",
           "load_keyword_file", "KEYWORDS_HELP", "TSV_HELP"]

PROG = "flashtrie"

BACKENDS_HELP = ("comma-separated backends: marisa, numpy, gpu, and marisa-lookup (marisa with lookups only; "
                 "run only when named); or 'all' available here")


class Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Keep the hand-wrapped descriptions and show every option's default (unless its help names it)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default:" in text or action.default is None or action.default is False:
            return text
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line, ``flashtrie: error: ... (see flashtrie CMD --help)``, with
    exit status 2, like every other error of the command line (not argparse's usage block)."""

    def error(self, message: str) -> NoReturn:
        print(f"{PROG}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


QUIET_HELP = "no progress bars or stage messages (also accepted before the command)"


def add_command(subs: Any, name: str, help_line: str, body: str, fn: Callable[[argparse.Namespace], int]
                ) -> argparse.ArgumentParser:
    """A subcommand parser with its description, ``--quiet`` and the function that runs it."""
    p = subs.add_parser(name, help=help_line, description=help_line + "\n\n" + textwrap.dedent(body).strip(),
                        formatter_class=Formatter)
    p.set_defaults(func=fn)
    p.add_argument("--quiet", action="store_true", help=QUIET_HELP)
    return p


def hidden_alias(p: argparse.ArgumentParser | Any, *flags: str, dest: str, **kw: Any) -> None:
    """An old spelling of an option: parsed into ``dest`` like the option, left out of ``--help``."""
    p.add_argument(*flags, dest=dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kw)


# ------------------------------------------------------------------------------------- argument types
def nonneg(text: str) -> int:
    """An integer >= 0."""
    try:
        v = int(text.strip())
    except ValueError:
        v = -1
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return v


def seconds(text: str) -> float:
    """A finite number of seconds > 0."""
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return v


def number(text: str) -> float:
    """Any float but NaN, -inf included."""
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if math.isnan(v):
        raise argparse.ArgumentTypeError(f"expected a number (or -inf), got {text!r}")
    return v


# ------------------------------------------------------------------------------------------- output
def check_suffix(path: str, arg: str, suffixes: tuple[str, ...], what: str) -> None:
    """An `InputError` unless ``path`` ends with one of ``suffixes`` (the suffix picks the format written)."""
    if not str(path).lower().endswith(suffixes):
        raise InputError(f"{arg}: {path} has no suffix that names a format for {what}; expected "
                         f"{' or '.join(suffixes)}")


def plural(n: int, word: str) -> str:
    """``1 duplicate``, ``2 duplicates`` (thousands separated)."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


@contextlib.contextmanager
def writing_to(path: str | os.PathLike[str]) -> Iterator[None]:
    """Name ``path`` in an `OSError` raised while writing it that names no file, or only the temporary file
    it is written through (a full disk fails a ``write``, which carries no file name)."""
    try:
        yield
    except OSError as e:
        name = os.fsdecode(e.filename) if e.filename is not None else None
        if name is None or Path(name).name.startswith(temp_names(Path(path))[0]):
            e.filename = os.fspath(path)
        raise


# ------------------------------------------------------------------------------------------- progress
def say(msg: str) -> None:
    """One line on stderr (notes, summaries, where results went)."""
    print(msg, file=sys.stderr, flush=True)


class Stage:
    """``with Stage("building index"):`` reports the stage and its duration on stderr.

    On a terminal the stage is announced when it starts; otherwise one line is written when it ends
    (and none when it fails, so an error stays a single line).
    """

    def __init__(self, what: str, quiet: bool = False) -> None:
        self.what, self.quiet = what, quiet
        self.live = not quiet and sys.stderr.isatty()

    def __enter__(self) -> Stage:
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


# ---------------------------------------------------------------------------------- search options
def search_config(args: argparse.Namespace) -> Any:
    """The `SearchConfig` of the search options."""
    from flashtrie.search_types import SearchConfig

    return SearchConfig(beam_width=args.beam, max_results=args.results, token_threshold=args.token_threshold,
                        score_threshold=args.score_threshold, length_norm=args.length_norm)


def add_search_options(p: argparse.ArgumentParser, proposals: bool = True) -> None:
    """--beam, --results, the thresholds, --length-norm; and (``proposals``) -K / --all-proposals."""
    g = p.add_argument_group("search configuration (see docs/semantics.md)")
    g.add_argument("--beam", "-B", type=beam_width, default=100, help="beam width B (at most 65,535)")
    g.add_argument("--results", "-R", type=results_count, default=None, help="results per query R (default: B)")
    g.add_argument("--token-threshold", type=number, default=-math.inf,
                   help="skip proposals whose logprob is <= this")
    g.add_argument("--score-threshold", type=number, default=-math.inf,
                   help="drop candidates whose summed score is <= this")
    g.add_argument("--length-norm", type=alpha, default=0.0,
                   help="alpha of the length normalisation (6 / (5 + length)) ** alpha used to rank results")
    if proposals:
        g.add_argument("-K", "--num-proposals", type=proposals_count, default=None, dest="K",
                       help="proposals per step used: the top K of each row (default: K = beam width, as in "
                            "'flashtrie bench'; --all-proposals keeps every one)")
        g.add_argument("--all-proposals", action="store_true", help="use every proposal of each row")


def proposals_k(args: argparse.Namespace, available: int) -> int:
    """K used by search / parity: -K, else every proposal with --all-proposals, else the beam width (capped
    at the workload's K), the same default as the sweeps of ``flashtrie bench``."""
    if getattr(args, "all_proposals", False):
        if getattr(args, "K", None) is not None:
            raise InputError(f"-K: give either -K {args.K} or --all-proposals, not both")
        return available
    k = args.K if getattr(args, "K", None) is not None else args.beam
    return min(int(k), available)


# ------------------------------------------------------------------------------------------- inputs
KEYWORDS_HELP = ("keyword library: a text file of space-separated token ids, one keyword per line; a .npz from "
                 "'flashtrie gen-keywords'; your own arrays, an .npz of 'tokens' (flat) and 'offsets' (N + 1, from "
                 "0), or an .npy / .npz of one padded [N, L] int array (-1 after each keyword)")

TSV_HELP = """\
proposal TSV (--queries FILE.tsv): one query a line, its name, a tab, then a JSON record:
  NAME<TAB>{"indices": [[7, 12, ...], [3, ...], ...], "probs": [[-0.1, -2.3, ...], [-0.5, ...], ...]}
indices[t] holds the tokens proposed at step t (each once), probs[t] their log-probabilities (finite or
-inf; with --probabilities, probabilities in [0, 1]).  Rows may differ in length (padded to the longest);
every query has the same number of steps.  NAME names the query in the printed and saved results."""


#: Names from which `load_keyword_file` shows a progress bar while tokenizing.
PROGRESS_BAR_NAMES = 50_000


def _looks_like_names(path: str) -> str | None:
    """The first line of ``path`` when it is text with letters (names, not token ids), else None."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return None
    if head.startswith((b"FLTRIE", b"PK\x03\x04", b"\x93NUMPY")):
        return None
    text = head.decode("utf-8-sig", "ignore")
    first = text.lstrip().split("\n", 1)[0].rstrip("\r")
    return first if any(c.isalpha() for c in text) else None


def load_keyword_file(path: str, quiet: bool, tokenizer: str | None = None, duplicates: str = "error",
                      unknown: str = "error") -> Any:
    """The `KeywordSet` of a keyword file (`KEYWORDS_HELP`) or, with ``tokenizer`` (a `flashtrie.tokenize`
    spec), of a file of names (one a line), tokenized and carrying its strings.  A file of names given without
    a tokenizer is refused with the command that tokenizes it."""
    from flashtrie.harness.workloads import load_keywords, sniff_kind

    if tokenizer is None:
        first = _looks_like_names(path)
        if first is not None and sniff_kind(path) in ("text", "unknown"):
            from flashtrie.tokenize import TOKENIZER_SPEC_HELP

            raise InputError(f"{path}: holds words (line 1: {first[:40]!r}), not token ids; to index names, tokenize "
                             f"them: `flashtrie build {path} --tokenizer SPEC -o OUT.ftrie`, SPEC being "
                             f"{TOKENIZER_SPEC_HELP}")
        with Stage(f"loading keywords {path}", quiet):
            kw = load_keywords(path)
        if len(kw) == 0:
            raise InputError(f"{path}: the keyword library is empty (no keyword in the file); an index needs at "
                             "least one keyword")
        return kw
    from flashtrie.datasets.io import load_names
    from flashtrie.keywords import KeywordSet
    from flashtrie.tokenize import load_tokenizer

    with Stage(f"loading the tokenizer {tokenizer}", quiet):
        tok = load_tokenizer(tokenizer)
    names = load_names(path)
    bar = not quiet and len(names) >= PROGRESS_BAR_NAMES
    with Stage(f"tokenizing {len(names):,} names", quiet or bar):  # the bar says it (a stage line would break it)
        return KeywordSet.from_texts(names, tok, duplicates=duplicates, unknown=unknown,  # type: ignore[arg-type]
                                     progress=bar)


def add_input_options(p: argparse.ArgumentParser, keywords_required: bool = False) -> None:
    """--keywords, --index, --queries, --limit."""
    g = p.add_argument_group("inputs")
    g.add_argument("--keywords", "-k", metavar="FILE", required=keywords_required,
                   help=KEYWORDS_HELP + "; needed by the marisa backend, and to build an index when --index is not "
                        "given")
    g.add_argument("--index", "-i", metavar="FILE", help="narrow-LOUDS index from 'flashtrie build'")
    g.add_argument("--queries", "-q", metavar="FILE", required=True,
                   help="query workload (.npz from gen-queries, or a proposal TSV: see the format below)")
    g.add_argument("--limit", type=count, default=None, metavar="Q", help="use only the first Q queries")
    g.add_argument("--probabilities", action="store_true",
                   help="a proposal TSV's \"probs\" hold probabilities in [0, 1]: take their logs (by default they "
                        "are log-probabilities, and a file of values all in [0, 1] is refused as probabilities)")


def load_inputs(args: argparse.Namespace, need_index: bool, need_keywords: bool) -> tuple[Any, Any, Any]:
    """(keywords or None, index or None, workload), each loaded with a progress stage."""
    from flashtrie.harness.workloads import limit_workload, load_workload

    if not getattr(args, "queries", None):
        raise InputError("--queries: expected a query workload: --queries FILE (a .npz from 'flashtrie gen-queries', "
                         "or a proposal TSV)")
    keywords = index = None
    if args.keywords:
        keywords = load_keyword_file(args.keywords, args.quiet)
    elif need_keywords:
        hint = ("or choose --backend numpy or gpu" if hasattr(args, "backend")
                else "or leave marisa out, e.g. --backends numpy,gpu")
        raise InputError(f"--keywords: the marisa backend needs the keyword library; pass --keywords FILE {hint}")
    if need_index:
        if args.index:
            with Stage(f"loading index {args.index}", args.quiet):
                index = load_index_arg(args.index)
        elif keywords is not None:
            index = build_index(keywords, args.quiet)
        else:
            raise InputError("--index: expected an index file (or --keywords FILE to build one)")
    if keywords is not None and index is not None and args.index:  # (a marisa-only run loads no index)
        check_same_library(keywords, index, args.keywords, args.index)
    with Stage(f"loading queries {args.queries}", args.quiet):
        workload = load_workload(args.queries, probabilities=getattr(args, "probabilities", False))
    if args.limit is not None:
        workload = limit_workload(workload, args.limit)
    return keywords, index, workload


def load_index_arg(path: str) -> Any:
    """The index file of ``--index``; a keyword library given there is refused with a pointer to --keywords."""
    from flashtrie.errors import FlashTrieError
    from flashtrie.harness.workloads import load_index

    try:
        return load_index(path)
    except FlashTrieError as e:
        if "found a keyword" in str(e) or "not a flashtrie index" in str(e):
            raise type(e)(f"--index: {e}; a keyword library (.txt or .npz) goes to --keywords FILE (the index "
                          "is then built from it)") from None
        raise


def check_same_library(keywords: KeywordSet, index: NarrowLoudsIndex, keywords_path: str, index_path: str) -> None:
    """An `InputError` unless the keyword file is the library the index was built from: the fingerprint in
    the index metadata where it has one, else the counts a file written before it can be compared on."""
    from flashtrie.index.fingerprint import FINGERPRINT_KEY, keywords_fingerprint

    stored = index.meta.get(FINGERPRINT_KEY)
    lengths = keywords.lengths
    have = (len(keywords), int(lengths.max()) if len(keywords) else 0, int(keywords.tokens.max(initial=0)))
    want = (index.num_keywords, index.max_keyword_length, index.max_token)
    if have != want:
        why = (f"the index holds {want[0]:,} keywords (longest {want[1]}, largest token {want[2]:,}), the file "
               f"{have[0]:,} (longest {have[1]}, largest token {have[2]:,})")
    elif stored is not None and stored != keywords_fingerprint(keywords):
        why = "the same counts, other keywords (the keyword-set fingerprints differ)"
    else:
        return
    raise InputError(f"--keywords: {keywords_path} is not the keyword library of the index {index_path}: {why}; "
                     "pass the file the index was built from, or leave --keywords out")


def build_index(keywords: KeywordSet, quiet: bool, ids: Literal["input", "index"] = "input", gpu: bool = False
                ) -> NarrowLoudsIndex:
    """`NarrowLoudsIndex.build` (or, with ``gpu``, `flashtrie.gpu_impl.build_index`: the same arrays) with a
    stage line (a progress line per stage for large libraries)."""
    from flashtrie.index import NarrowLoudsIndex

    if gpu:
        from flashtrie.gpu_impl import build_index as build_on_gpu

        with Stage(f"building the index of {len(keywords):,} keywords on the GPU", quiet):
            return build_on_gpu(keywords, ids=ids)
    if quiet or len(keywords) < 500_000:
        with Stage(f"building the index of {len(keywords):,} keywords", quiet):
            return NarrowLoudsIndex.build(keywords, ids=ids)
    return NarrowLoudsIndex.build(keywords, progress=True, ids=ids)


# ----------------------------------------------------------------------------------------- backends
def needs_keywords(name: str) -> bool:
    """Whether backend ``name`` is built from the keyword library (marisa) rather than the index."""
    from flashtrie.harness.backends import BACKENDS

    return BACKENDS[name].needs == "keywords"


def choose_backends(args: argparse.Namespace, have_keywords: bool = True, skipped: dict[str, str] | None = None
                    ) -> list[str]:
    """The backends to run: those named by ``--backends``, or every one available here for 'all'.

    A backend named explicitly that cannot run (not available here, or marisa without the keyword library)
    is an error; with 'all' it is left out with a note on stderr (and its reason put in ``skipped``).
    """
    skipped = {} if skipped is None else skipped
    from flashtrie.harness.backends import BACKENDS, available_backends, parse_backends

    wanted = parse_backends(args.backends)
    ok, missing = available_backends(wanted)
    for name, why in missing.items():
        if wanted is not None:
            raise InputError(f"--backends: {name} is not available here: {why}")
        skipped[name] = why
        if not args.quiet:
            say(f"note: backend {name} skipped: {why}")
    for name in [b for b in ok if BACKENDS[b].needs == "keywords" and not have_keywords]:
        if wanted is not None:
            raise InputError(f"--backends: {name} needs the keyword library; pass --keywords FILE, or leave {name} "
                             "out of --backends")
        ok.remove(name)
        skipped[name] = "it needs the keyword library (--keywords FILE)"
        if not args.quiet:
            say(f"note: backend {name} skipped: it needs the keyword library (--keywords FILE)")
    if not ok:
        raise InputError("--backends: no backend is available on this machine")
    return ok


def make_searchers(names: list[str], keywords: KeywordSet | None, index: NarrowLoudsIndex | None, quiet: bool
                   ) -> tuple[dict[str, Any], dict[str, str]]:
    """`flashtrie.harness.backends.make_searchers` with a stage line per backend (marisa builds its trie
    here: seconds for a million keywords)."""
    from flashtrie.harness.backends import make_searchers as make
    from flashtrie.harness.backends import setup_text

    made: dict[str, Any] = {}
    failed: dict[str, str] = {}
    for name in names:
        with Stage(setup_text(name), quiet):
            m, f = make([name], keywords, index)
        made.update(m)
        failed.update(f)
    return made, failed


def run_context(args: argparse.Namespace, out: str | None) -> Any:
    """The sweeps' `SweepContext`: this command's run (`RunContext.start`), output file and timing flags."""
    from flashtrie.harness.run_context import RunContext
    from flashtrie.harness.sweep import SweepContext

    ctx = SweepContext(run=RunContext.start(args.argv), out=Path(out) if out else None, progress=not args.quiet)
    for name in ("warmup", "repeats", "max_seconds", "stats_queries"):
        if getattr(args, name, None) is not None:
            setattr(ctx, name, getattr(args, name))
    return ctx
