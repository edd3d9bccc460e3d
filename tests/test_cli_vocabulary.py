"""One vocabulary of flags across every command: one visible spelling per meaning, counts as -n/--num-...,
input files positional or --keywords/--queries/--index FILE, output -o/--output, --quiet before and after the
command, old spellings kept as hidden aliases, and argparse's errors as one line."""

from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Iterator

import pytest

from flashtrie.cli import build_parser, main


def leaves(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command parser that runs something (``search``, ``quality run``, ...)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield parser.prog, parser
    for action in subs:
        for sub in action.choices.values():
            yield from leaves(sub)


def visible(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS
            and not isinstance(a, argparse._HelpAction)]


def long_flags(action: argparse.Action) -> list[str]:
    return [s for s in action.option_strings if s.startswith("--")]


COMMANDS = list(leaves(build_parser()))


def test_the_walk_finds_every_command() -> None:
    names = {prog.split(" ", 1)[1] for prog, _ in COMMANDS}
    assert {"build", "search", "parity", "demo", "bench", "report", "quality tasks", "quality run",
            "real bench", "gen-keywords", "gen-queries", "info"} <= names


def test_each_visible_option_has_one_long_spelling() -> None:
    for prog, p in COMMANDS:
        for a in visible(p):
            assert len(long_flags(a)) == 1, f"{prog}: {a.option_strings} shows two spellings of one option"


def test_one_spelling_per_meaning_across_commands() -> None:
    """A meaning (the parsed name) has one visible flag everywhere, and a flag one meaning and one value type."""
    flags_of: dict[str, set[str]] = defaultdict(set)
    meanings_of: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for _, p in COMMANDS:
        for a in visible(p):
            flag = long_flags(a)[0]
            flags_of[a.dest].add(flag)
            meanings_of[flag].add((a.dest, getattr(a.type, "__name__", repr(a.type))))
    assert {d: f for d, f in flags_of.items() if len(f) > 1} == {}
    assert {f: m for f, m in meanings_of.items() if len(m) > 1} == {}


def test_output_is_dash_o_output_and_counts_are_num() -> None:
    for prog, p in COMMANDS:
        for a in visible(p):
            flags = set(a.option_strings)
            assert not flags & {"--out", "--records"}, f"{prog}: {flags}: output is -o/--output"
            if "-o" in flags:
                assert flags == {"-o", "--output"}, prog
            if "-n" in flags:
                assert long_flags(a)[0].startswith("--num-"), f"{prog}: -n is a count, --num-..."
            if long_flags(a)[0] in ("--keywords", "--queries", "--index"):
                assert a.metavar == "FILE" and a.type is None, f"{prog}: {a.option_strings} take a file"
            if a.metavar in ("FILE", "PATH") and "-o" not in flags:
                assert long_flags(a)[0] in ("--keywords", "--queries", "--index"), \
                    f"{prog}: input files are positional or --keywords/--queries/--index FILE: {a.option_strings}"


def test_every_command_takes_quiet_after_it() -> None:
    for prog, p in COMMANDS:
        assert any("--quiet" in a.option_strings for a in visible(p)), prog


@pytest.mark.parametrize("argv", [["--quiet", "demo"], ["demo", "--quiet"]])
def test_quiet_before_or_after_the_command(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    args.quiet = bool(args.quiet or args.quiet_before)  # as main() does
    assert args.quiet


def test_quiet_before_the_command_silences_progress(tmp_path, capsys) -> None:
    out = tmp_path / "kw.npz"
    assert main(["--quiet", "gen-keywords", "-n", "300", "-o", str(out)]) == 0
    assert "generating" not in capsys.readouterr().err


@pytest.mark.parametrize(("old", "new", "dest", "value"), [
    (["demo", "--keywords", "5k"], ["demo", "--num-keywords", "5k"], "num_keywords", 5000),
    (["demo", "--queries", "3"], ["demo", "--num-queries", "3"], "num_queries", 3),
    (["demo", "--records", "r.jsonl"], ["demo", "-o", "r.jsonl"], "output", "r.jsonl"),
    (["parity", "-q", "q", "--records", "r.jsonl"], ["parity", "-q", "q", "--output", "r.jsonl"], "output",
     "r.jsonl"),
    (["quality", "tasks", "--out", "d"], ["quality", "tasks", "-o", "d"], "output", "d"),
    (["gen-keywords", "-n", "7", "-o", "k.npz"], ["gen-keywords", "--num-keywords", "7", "-o", "k.npz"],
     "num_keywords", 7),
    (["gen-queries", "kw", "-n", "7", "-o", "q.npz"], ["gen-queries", "kw", "--num-queries", "7", "-o", "q.npz"],
     "num_queries", 7),
])
def test_old_spellings_still_work(old: list[str], new: list[str], dest: str, value: object) -> None:
    assert getattr(build_parser().parse_args(old), dest) == value
    assert getattr(build_parser().parse_args(new), dest) == value


def test_quality_run_takes_its_task_files_as_an_argument_and_by_the_old_flag() -> None:
    args = build_parser().parse_args(["quality", "run", "tasks/", "-o", "q.jsonl"])
    assert args.tasks == "tasks/"
    args = build_parser().parse_args(["quality", "run", "--tasks", "tasks/", "-o", "q.jsonl"])
    assert args.tasks_option == "tasks/"


def test_quality_run_without_task_files_is_one_error_line(capsys) -> None:
    assert main(["quality", "run", "-o", "q.jsonl"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("flashtrie: error: TASKS:") and "\n" not in err


@pytest.mark.parametrize("argv", [["search"], ["demo", "--beam", "zero"], ["build"], ["nonsense"], ["quality"],
                                  ["search", "-q", "q.tsv", "--no-such-flag"]])
def test_argparse_errors_are_one_line_naming_the_help(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("flashtrie: error: ") and "--help)" in err and "usage:" not in err
