"""The ``flashtrie`` command line: help texts, the demo, file commands, and one-line input errors."""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from flashtrie import KeywordSet, Proposals
from flashtrie.cli import _ints, build_parser, main

COMMANDS = ["gen-keywords", "gen-queries", "build", "info", "search", "parity", "bench", "report", "demo"]


def test_top_level_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for cmd in COMMANDS:
        assert cmd in out


@pytest.mark.parametrize("cmd", COMMANDS)
def test_subcommand_help(cmd: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main([cmd, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: flashtrie {cmd}")
    assert "example:" in out and f"flashtrie {cmd}" in out.split("example:")[1]


def test_python_dash_m() -> None:
    res = subprocess.run([sys.executable, "-m", "flashtrie", "demo", "--help"], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0 and "usage: flashtrie demo" in res.stdout


def test_demo_tiny(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("flashtrie.datasets.queries")
    rec = tmp_path / "demo.jsonl"
    rc = main(["demo", "--num-keywords", "3000", "--num-queries", "3", "--beam", "8", "--quiet", "-o", str(rec)])
    out = capsys.readouterr().out
    assert "backend" in out and "median ms/query" in out and "min-max of 5 passes" in out and "results agree" in out
    assert "numpy" in out and "reference" in out
    assert rc == 0, out
    assert "agree exactly" in out
    from flashtrie.harness.records import read_records

    recs = read_records(rec)
    assert {r.backend for r in recs} >= {"numpy"} and all(r.kind == "parity" for r in recs)


def _files(tmp_path: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(1)
    seqs = {tuple(rng.integers(0, 12, rng.integers(1, 5)).tolist()) for _ in range(300)}
    kws = KeywordSet.from_sequences(sorted(seqs))  # no duplicates: these tests are about the command line
    kw_path = tmp_path / "kw.txt"
    kws.to_token_file(kw_path)
    tok = np.stack([[rng.permutation(14)[:8] for _ in range(4)] for _ in range(3)]).astype(np.int64)
    tok[tok >= 12] = -1
    lp = np.log(rng.random(tok.shape)).astype(np.float32)
    q_path = tmp_path / "q.tsv"
    Proposals(tok, lp).to_tsv(q_path)
    return kw_path, q_path


def test_build_search_parity_bench_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kw, q = _files(tmp_path)
    idx = tmp_path / "kw.ftrie"
    assert main(["build", str(kw), "-o", str(idx), "--quiet"]) == 0
    assert idx.stat().st_size > 0
    assert main(["search", "--index", str(idx), "--queries", str(q), "--beam", "4", "--show", "2", "--quiet",
                 "-o", str(tmp_path / "res.npz")]) == 0
    out = capsys.readouterr().out
    assert "query 0:" in out and "numpy: 3 queries" in out
    with np.load(tmp_path / "res.npz") as z:
        assert z["keyword_ids"].shape == (3, 4)
    rc = main(["parity", "--keywords", str(kw), "--index", str(idx), "--queries", str(q), "--beam", "4", "--quiet"])
    out = capsys.readouterr().out
    assert "reference = numpy" in out
    assert rc == 0, out
    res = tmp_path / "bench.jsonl"
    rc = main(["bench", "beam", "--keywords", str(kw), "--index", str(idx), "--queries", str(q), "--beams", "2,4",
               "--repeats", "1", "--warmup", "0", "--stats-queries", "2", "-o", str(res), "--quiet"])
    assert rc == 0
    from flashtrie.harness.records import read_records

    recs = read_records(res)
    assert {r.config["beam_width"] for r in recs} == {2, 4}
    assert all(r.status == "ok" and r.workload_stats.get("valid_fraction") is not None for r in recs)
    assert all(r.command[:2] == ["flashtrie", "bench"] for r in recs)
    assert main(["report", str(res), "-o", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "Latency vs beam width" in md and (tmp_path / "rep" / "latency_vs_beam.png").exists()


def _cli_inputs(tmp_path: Path) -> dict[str, Path]:
    """Files for the error tests: keywords, queries, an index, a records file of one bench run, an empty one,
    and one whose only record is a bare schema line."""
    kw, q = _files(tmp_path)
    idx = tmp_path / "kw.ftrie"
    main(["build", str(kw), "-o", str(idx), "--quiet"])
    bare = tmp_path / "bare.jsonl"
    bare.write_text('{"schema": "flashtrie.record/1"}\n')
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    res = tmp_path / "r.jsonl"
    main(["bench", "beam", "--index", str(idx), "--queries", str(q), "--beams", "2", "--repeats", "1", "--warmup", "0",
          "-o", str(res), "--quiet"])
    return {"kw": kw, "q": q, "idx": idx, "bare": bare, "empty": empty, "records": res, "tmp": tmp_path}


@pytest.mark.parametrize("argv, expected", [
    (["build", "{bare}", "-o", "{tmp}/x.ftrie"], "expected a keyword file"),
    (["search", "--index", "{kw}", "--queries", "{q}"], "expected a flashtrie index"),
    (["search", "--index", "{idx}", "--queries", "{kw}"], "expected a query workload"),
    (["report", "{kw}", "-o", "{tmp}/rep"], "expected a flashtrie benchmark record"),
    (["report", "{tmp}/missing.jsonl", "-o", "{tmp}/rep"], "no such records file"),
])
def test_wrong_kind_input_is_one_line_error(argv: list[str], expected: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    subst = _cli_inputs(tmp_path)
    capsys.readouterr()
    rc = main([a.format(**subst) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    errors = [line for line in err if "error" in line]
    assert len(errors) == 1 and err[-1] == errors[0], err  # one line, and nothing after it (no traceback)
    assert errors[0].startswith("flashtrie: error: ") and expected in errors[0], err


def test_bad_backend_name(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    kw, q = _files(tmp_path)
    rc = main(["parity", "--keywords", str(kw), "--queries", str(q), "--backends", "numpy,cobol", "--quiet"])
    assert rc == 2 and "unknown backend 'cobol'" in capsys.readouterr().err


def test_parser_builds() -> None:
    assert build_parser().prog == "flashtrie"


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("flashtrie: error: ") and "Traceback" not in "\n".join(err), err
    return err[-1]


def test_parity_refuses_a_named_backend_it_cannot_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kw, q = _files(tmp_path)
    idx = tmp_path / "kw.ftrie"
    assert main(["build", str(kw), "-o", str(idx), "--quiet"]) == 0
    capsys.readouterr()
    rc = main(["parity", "--backends", "marisa,numpy", "--index", str(idx), "--queries", str(q), "--beam", "4"])
    assert rc == 2
    line = _one_line_error(capsys)
    assert "marisa" in line and "--keywords" in line
    # 'all' (the default) leaves marisa out with a note and checks the rest (where two or more remain)
    from flashtrie.harness.backends import availability

    rc = main(["parity", "--index", str(idx), "--queries", str(q), "--beam", "4"])
    cap = capsys.readouterr()
    assert "note: backend marisa skipped" in cap.err
    if availability("gpu") is None:
        assert rc == 0 and "reference = numpy" in cap.out, cap
    else:  # numpy alone: nothing to compare
        assert rc == 2 and "nothing would be compared" in cap.err and "marisa skipped" in cap.err.splitlines()[-1]


def test_bench_without_keywords_when_marisa_is_not_selected(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    kw, q = _files(tmp_path)
    idx = tmp_path / "kw.ftrie"
    assert main(["build", str(kw), "-o", str(idx), "--quiet"]) == 0
    res = tmp_path / "b.jsonl"
    rc = main(["bench", "beam", "--backends", "numpy", "--index", str(idx), "--queries", str(q), "--beams", "3",
               "--repeats", "1", "--warmup", "0", "-o", str(res), "--quiet"])
    assert rc == 0, capsys.readouterr().err
    from flashtrie.harness.records import read_records

    from flashtrie.index import NarrowLoudsIndex

    recs = read_records(res)
    assert [r.backend for r in recs] == ["numpy"] and recs[0].status == "ok"
    assert recs[0].workload["num_keywords"] == NarrowLoudsIndex.load(idx).num_keywords
    # a -inf threshold is stored as "-inf" (strict JSON) and read back as -inf
    assert recs[0].config["token_threshold"] == -math.inf
    assert '"token_threshold":"-inf"' in res.read_text()
    # marisa named explicitly without the keywords: refused
    capsys.readouterr()
    rc = main(["bench", "beam", "--backends", "marisa,numpy", "--index", str(idx), "--queries", str(q),
               "--beams", "3", "-o", str(res), "--quiet"])
    assert rc == 2 and "marisa needs the keyword library" in _one_line_error(capsys)


@pytest.mark.parametrize("sweep", ["beam", "batch", "quality", "all"])
def test_bench_without_queries_is_one_line_error(sweep: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    kw, _ = _files(tmp_path)
    rc = main(["bench", sweep, "--keywords", str(kw), "-o", str(tmp_path / "b.jsonl"), "--quiet"])
    assert rc == 2
    line = _one_line_error(capsys)
    assert line.startswith("flashtrie: error: --queries:") and "gen-queries" in line
    assert not (tmp_path / "b.jsonl").exists()


def test_bench_build_records_say_build(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("marisa_trie")
    kw, _ = _files(tmp_path)
    res = tmp_path / "b.jsonl"
    assert main(["bench", "build", "--keywords", str(kw), "-o", str(res), "--quiet"]) == 0
    from flashtrie.harness.records import read_records

    recs = read_records(res)
    assert {r.backend for r in recs} == {"narrow-louds", "marisa-trie"} and {r.sweep for r in recs} == {"build"}


@pytest.mark.parametrize("text, expected", [("1,10,100", [1, 10, 100]), ("10k, 2M", [10_000, 2_000_000]),
                                            ("1e3", [1000]), ("5,", [5])])
def test_integer_lists_parse(text: str, expected: list[int]) -> None:
    assert _ints(text) == expected


@pytest.mark.parametrize("text", ["2.7", "1,2.5", "0", "-3", "x", "", "1.5k1", "nan", "inf"])
def test_integer_lists_refuse_non_integers(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="positive integers"):
        _ints(text)
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["bench", "beam", "-o", "x.jsonl", "--beams", text])
    assert e.value.code == 2 and "--beams" in capsys.readouterr().err


def test_info(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from flashtrie import KeywordSet, NarrowLoudsIndex

    idx = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2, 3], [1, 2, 4], [70000], [1, 2, 3]]))
    path = tmp_path / "kw.ftrie"
    idx.save(path)
    capsys.readouterr()
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{path.stat().st_size:,} bytes" in out and "4 (3 unique, 1 duplicates)" in out
    assert "labels_lo" in out and "1 labels >= 65536" in out
    assert main(["info", str(path), "--json", "--no-verify"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["nodes"] == idx.num_nodes and st["file_bytes"] == path.stat().st_size
    assert sum(st["arrays"].values()) == st["bytes"]
    assert main(["info", str(tmp_path / "missing.ftrie")]) == 2
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "bad.ftrie").write_bytes(b"not an index at all, just text")
    assert main(["info", str(tmp_path / "bad.ftrie")]) == 2
    assert "not a flashtrie index" in capsys.readouterr().err


@pytest.mark.parametrize("argv, expected", [
    (["build", "{kw}", "-o", "{tmp}"], "--output: {tmp} is a folder"),
    (["build", "{kw}", "-o", "{kw}"], "is also the input"),
    (["build", "{kw}", "-o", "{kw}/sub.ftrie"], "--output: cannot create the folder"),
    (["gen-keywords", "-n", "10", "-o", "/dev/null"], "is not a regular file"),
    (["search", "--index", "{idx}", "--queries", "{q}", "-o", "{tmp}"], "--output: {tmp} is a folder"),
    (["bench", "beam", "--index", "{idx}", "--queries", "{q}", "-o", "{tmp}"], "--output: {tmp} is a folder"),
    (["parity", "--index", "{idx}", "--queries", "{q}", "-o", "{tmp}"], "--output: {tmp} is a folder"),
    (["report", "{records}", "-o", "{kw}"], "--output: {kw} is a file"),
    (["report", "{empty}", "-o", "{tmp}/rep"], "no records in"),
    (["parity", "--index", "{idx}", "--queries", "{q}", "--backends", ""], "--backends: expected a comma"),
    (["search", "--backend", "marisa", "--index", "{idx}", "--queries", "{q}"], "choose --backend numpy or gpu"),
    (["build", "{tmp}", "-o", "{tmp}/x.ftrie"], "is a folder; expected a file"),
])
def test_bad_paths_are_one_line_errors_before_work(argv: list[str], expected: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    subst = _cli_inputs(tmp_path)
    capsys.readouterr()
    rc = main([a.format(**subst) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2, err
    assert len(err) == 1 and err[0].startswith("flashtrie: error: ") and expected.format(**subst) in err[0], err
    assert not (tmp_path / "rep").exists()


@pytest.mark.parametrize("argv, flag", [
    (["bench", "beam", "--batch-size", "0"], "--batch-size"),
    (["bench", "size", "--num-queries", "0"], "--num-queries"),
    (["bench", "beam", "--repeats", "0"], "--repeats"),
    (["bench", "beam", "--warmup", "-1"], "--warmup"),
    (["bench", "beam", "--max-seconds", "nan"], "--max-seconds"),
    (["bench", "beam", "--max-seconds", "-1"], "--max-seconds"),
    (["bench", "build", "--build-repeats", "0"], "--build-repeats"),
    (["search", "--show", "-1"], "--show"),
    (["search", "--beam", "0"], "--beam"),
    (["demo", "--beam", "0"], "--beam"),
    (["gen-queries", "kw.npz", "-K", "0"], "-K"),
    (["gen-keywords", "--seed", "-1"], "--seed"),
])
def test_bad_numbers_name_their_flag(argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main([*argv, "-o", "x"] if argv[0] in ("bench", "gen-keywords", "gen-queries") else argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}" in err and "Traceback" not in err, err


def test_bench_records_library_and_timing(tmp_path: Path) -> None:
    kw = tmp_path / "kw.npz"
    assert main(["gen-keywords", "-n", "3000", "--seed", "5", "-o", str(kw), "--quiet"]) == 0
    res = tmp_path / "b.jsonl"
    assert main(["bench", "build", "--keywords", str(kw), "-o", str(res), "--quiet"]) == 0
    from flashtrie.harness.records import read_records

    recs = read_records(res)
    assert {r.backend for r in recs} == {"narrow-louds", "marisa-trie"}
    for r in recs:
        lib = r.workload["keywords"]
        assert lib["generator"]["n"] == 3000 and lib["generator"]["seed"] == 5
        assert lib["num_keywords"] == 3000 and len(lib["crc32"]) == 8
    q, idx = tmp_path / "q.npz", tmp_path / "kw.ftrie"
    assert main(["gen-queries", str(kw), "-n", "2", "-K", "8", "--seed", "3", "-o", str(q), "--quiet"]) == 0
    assert main(["build", str(kw), "-o", str(idx), "--quiet"]) == 0
    beam = tmp_path / "beam.jsonl"
    assert main(["bench", "beam", "--keywords", str(kw), "--index", str(idx), "--queries", str(q), "--beams", "4",
                 "--backends", "numpy", "--repeats", "1", "--warmup", "0", "-o", str(beam), "--quiet"]) == 0
    assert main(["report", str(beam), "-o", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text().split("## Reproduce")[1]
    made = [line for line in md.splitlines() if line.startswith("flashtrie ")]
    assert made[:3] == [f"flashtrie gen-keywords -n 3000 --seed 5 -o {kw}",
                        f"flashtrie gen-queries {kw} -n 2 -K 8 -T 8 --preset dense --seed 3 -o {q}",
                        f"flashtrie build {kw} -o {idx}"], made


def test_marisa_search_with_an_index_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """marisa needs no index: one given beside the keywords is not loaded, and the search runs."""
    pytest.importorskip("marisa_trie")
    kw, q = _files(tmp_path)
    idx = tmp_path / "kw.ftrie"
    assert main(["build", str(kw), "-o", str(idx), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["search", "--backend", "marisa", "--keywords", str(kw), "--index", str(idx), "--queries", str(q),
                 "--quiet"]) == 0
    assert "marisa: 3 queries" in capsys.readouterr().out
