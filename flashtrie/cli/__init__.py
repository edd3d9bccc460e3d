"""The ``flashtrie`` command line: generate data, build an index, search, check parity, benchmark, report.

Run ``flashtrie --help`` or ``flashtrie COMMAND --help``.  Errors in the input (a file of the wrong kind,
an out-of-range argument) and failures to read or write a file (a full disk, a permission) print one line
``flashtrie: error: ...`` and exit with status 2.

Each command lives in a module that declares its parser (``add_parsers``) and calls the harness:
`data` (gen-keywords, gen-queries, build, info), `search` (search, parity), `bench` (bench, report),
`demo`; `common` holds what they share.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TextIO

from flashtrie.errors import FlashTrieError

from . import bench, data, demo, quality, real, search
from .advice import command_line_advice, missing_package_line
from .common import PROG, QUIET_HELP, Formatter, Parser
from .common import ints as _ints  # noqa: F401 - the tests parse integer lists through it

__all__ = ["main", "build_parser"]

_DESCRIPTION = """\
flashtrie: exact trie-constrained beam search for generative retrieval.

A generative-retrieval model proposes, at each decoding step, K candidate tokens with log-probabilities.
flashtrie keeps only the beams that stay inside a library of keywords (a trie) and returns the best
whole keywords, with the same ids, order and float32 scores on every backend:

  marisa   CPU baseline on marisa-trie
  numpy    CPU reference over the narrow-LOUDS index
  gpu      one-launch CUDA kernels (needs an NVIDIA GPU and flashtrie[gpu])

From a file of names (one a line) and your model's tokenizer:

  flashtrie build names.txt --tokenizer tokenizer.json -o names.ftrie
  flashtrie search --index names.ftrie --queries proposals.tsv --beam 100 --show-text

On a synthetic library:

  flashtrie gen-keywords -n 200000 -o data/kw.npz
  flashtrie gen-queries data/kw.npz -n 16 -K 100 -o data/q.npz
  flashtrie build data/kw.npz -o data/kw.ftrie
  flashtrie search --index data/kw.ftrie --queries data/q.npz --beam 100
  flashtrie parity --keywords data/kw.npz --index data/kw.ftrie --queries data/q.npz --beam 100
  flashtrie bench beam --keywords data/kw.npz --queries data/q.npz -o results/run.jsonl
  flashtrie report results/run.jsonl -o reports/run/

or just `flashtrie demo` for all of it on a small generated library.
"""


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser; every command module adds its own subcommands."""
    from flashtrie import __version__

    parser = Parser(prog=PROG, description=_DESCRIPTION, formatter_class=Formatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    # a separate name: the subcommand's own --quiet (default False) would overwrite this one's value
    parser.add_argument("--quiet", dest="quiet_before", action="store_true", help=QUIET_HELP)
    subs = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (data, search, bench, demo, real, quality):
        module.add_parsers(subs)
    return parser


_OS_HINTS = {errno.ENOSPC: "free some space or write somewhere else", errno.EDQUOT: "free some space (quota)",
             errno.EACCES: "check its permissions or choose another path", errno.EPERM: "check its permissions",
             errno.EROFS: "the file system is read-only; write somewhere else",
             errno.ENOENT: "check the path", errno.ENOTDIR: "check the path", errno.EISDIR: "expected a file",
             errno.EMFILE: "too many open files; raise the limit (ulimit -n)"}


def os_error_line(e: OSError, where: str | None = None) -> str:
    """One line for a failed read or write: the file, what went wrong, what to do."""
    name = where or (os.fsdecode(e.filename) if e.filename is not None else None)
    what = e.strerror or str(e)
    hint = _OS_HINTS.get(e.errno or 0, "check the file and try again")
    return f"{name + ': ' if name else ''}{what}; {hint}"


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush of what is left does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


@contextlib.contextmanager
def _warnings_as_lines() -> Iterator[None]:
    """Warnings of flashtrie (a skipped damaged record) as one ``flashtrie: warning: ...`` line each."""
    def show(message: Warning | str, category: type[Warning], *rest: object, **kw: object) -> None:
        print(f"{PROG}: warning: {message}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


def _error(msg: str) -> int:
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    return 2


class _Stdout:
    """sys.stdout, with a failed write (a full disk behind ``> file``) raised as an `OSError` naming
    "standard output"; a reader that went away (`| head`) is still a `BrokenPipeError`."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner

    def _guard(self, call: Callable[[], object]) -> object:
        try:
            return call()
        except BrokenPipeError:
            raise
        except OSError as e:
            raise OSError(e.errno, e.strerror or str(e), "standard output") from None

    def write(self, text: str) -> object:
        return self._guard(lambda: self.inner.write(text))

    def flush(self) -> object:
        return self._guard(self.inner.flush)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``flashtrie`` command; returns the exit status."""
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else list(argv)):  # bare `flashtrie`: the commands, not one error line
        parser.print_help(sys.stderr)
        return 2
    args = bench.suite_command(sys.argv[1:] if argv is None else list(argv)) or parser.parse_args(argv)
    args.quiet = bool(getattr(args, "quiet", False) or getattr(args, "quiet_before", False))
    args.argv = [PROG, *(sys.argv[1:] if argv is None else argv)]
    try:
        with _warnings_as_lines(), contextlib.redirect_stdout(_Stdout(sys.stdout)):  # type: ignore[type-var]
            rc = int(args.func(args) or 0)
            sys.stdout.flush()  # here, so a full stdout is reported like any other failed write
        return rc
    except FlashTrieError as e:
        return _error(command_line_advice(str(e).splitlines()[0]) if str(e) else type(e).__name__)
    except ModuleNotFoundError as e:  # an optional package (an extra) a command imports when it runs
        return _error(missing_package_line(e))
    except MemoryError:
        return _error("out of memory; try a smaller input (-n, --limit, --sizes) or a machine with more RAM")
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into a reader that stopped early (`| head`): not an error
        _quiet_stdout()
        return 0
    except OSError as e:
        if e.filename == "standard output":
            _quiet_stdout()
        return _error(os_error_line(e))
