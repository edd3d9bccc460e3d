"""The command line refuses up front, in one line: mismatched inputs, impossible sizes, wrong file kinds."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli_io import _error_line, _files

from flashtrie import KeywordSet, NarrowLoudsIndex
from flashtrie.cli import main
from flashtrie.index.fingerprint import FINGERPRINT_KEY, keywords_fingerprint


# ------------------------------------------------------------------ a keyword file that is not the index's
def _other_keywords(tmp_path: Path, f: dict[str, Path], change: str) -> Path:
    seqs = [list(s) for s in KeywordSet.from_token_file(f["kw"])]
    if change == "larger":
        seqs = seqs + [[1, 2, 3, 4, 5, 6, 7]]
    elif change == "smaller":
        seqs = seqs[:10]
    else:  # the same counts, two keywords swapped
        seqs[0], seqs[1] = seqs[1], seqs[0]
    other = tmp_path / f"other_{change}.txt"
    KeywordSet.from_sequences(seqs).to_token_file(other)
    return other


@pytest.mark.parametrize("change", ["larger", "smaller", "same counts"])
def test_show_tokens_with_another_keyword_file_is_refused(change: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    f = _files(tmp_path)
    other = _other_keywords(tmp_path, f, change)
    assert main(["search", "--index", str(f["idx"]), "--queries", str(f["q"]), "--beam", "4", "--show-tokens",
                 "--quiet", "-k", str(other)]) == 2
    line = _error_line(capsys)
    assert f"--keywords: {other} is not the keyword library of the index {f['idx']}" in line
    assert capsys.readouterr().out == ""


def test_old_index_without_fingerprint_compares_the_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = _files(tmp_path)
    ix = NarrowLoudsIndex.load(f["idx"])
    assert ix.meta[FINGERPRINT_KEY] == keywords_fingerprint(KeywordSet.from_token_file(f["kw"]))
    meta = {k: v for k, v in ix.meta.items() if k != FINGERPRINT_KEY}
    old = NarrowLoudsIndex(ix.louds, ix.labels_lo, ix.hi_flag, ix.labels_hi, ix.linked, ix.link_starts, ix.suffix,
                           ix.terminal, ix.keyword_ids, None, meta)
    old.save(tmp_path / "old.ftrie")
    assert FINGERPRINT_KEY not in NarrowLoudsIndex.load(tmp_path / "old.ftrie").meta
    argv = ["search", "--index", str(tmp_path / "old.ftrie"), "--queries", str(f["q"]), "--beam", "4",
            "--show-tokens", "--quiet", "-k"]
    assert main([*argv, str(_other_keywords(tmp_path, f, "larger"))]) == 2
    assert "the index holds" in _error_line(capsys)
    assert main([*argv, str(f["kw"])]) == 0


def test_a_bad_fingerprint_field_is_corrupt_metadata(tmp_path: Path) -> None:
    from flashtrie import IndexFormatError

    f = _files(tmp_path)
    ix = NarrowLoudsIndex.load(f["idx"])
    ix.meta[FINGERPRINT_KEY] = "md5:1234"
    ix.save(tmp_path / "bad.ftrie")
    with pytest.raises(IndexFormatError, match="keywords_fingerprint .* is not a keyword-set fingerprint"):
        NarrowLoudsIndex.load(tmp_path / "bad.ftrie")


def test_fingerprint_depends_on_every_token_and_boundary() -> None:
    a = KeywordSet.from_sequences([[1, 2], [3]])
    assert keywords_fingerprint(a) == keywords_fingerprint(KeywordSet.from_sequences([[1, 2], [3]]))
    for other in ([[1], [2, 3]], [[1, 2], [4]], [[3], [1, 2]], [[1, 2], [3], [3]]):
        assert keywords_fingerprint(KeywordSet.from_sequences(other)) != keywords_fingerprint(a)


# ------------------------------------------------------------------ messages and rough edges
def test_a_legal_long_output_name_is_written(tmp_path: Path) -> None:
    from flashtrie.io_util import atomic_write, remove_stale_temporaries, temp_names

    target = tmp_path / ("k" * 244 + ".ftrie")  # 250 bytes: legal, but ".NAME.XXXXXXXX.tmp" would not be
    atomic_write(target, b"data")
    assert target.read_bytes() == b"data"
    prefix, suffix = temp_names(target)
    assert len((prefix + "XXXXXXXX" + suffix).encode()) <= 255 and temp_names(target) == (prefix, suffix)
    leftover = tmp_path / f"{prefix}abcdefgh{suffix}"
    leftover.write_bytes(b"half")
    assert remove_stale_temporaries(target, older_than=-1) == [leftover]


@pytest.mark.parametrize(("argv", "suffixes"), [
    (["gen-keywords", "-n", "10", "-o"], ".npz or .txt"),
    (["gen-queries", "KW", "-n", "2", "-o"], ".npz or .tsv"),
])
def test_an_output_suffix_that_names_no_format_is_refused(argv: list[str], suffixes: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    f = _files(tmp_path)
    argv = [str(f["kw"]) if a == "KW" else a for a in argv]
    for name in ("x.json", "z.csv"):
        assert main([*argv, str(tmp_path / name), "--quiet"]) == 2
        line = _error_line(capsys)
        assert f"--output: {tmp_path / name} has no suffix that names a format" in line and suffixes in line
        assert not (tmp_path / name).exists()


@pytest.mark.parametrize("bad", [None, 3, 2.5])
def test_load_of_a_non_path_is_an_input_error(bad: object) -> None:
    from flashtrie.errors import InputError

    with pytest.raises(InputError, match=f"path: expected the path of an index file .* got {type(bad).__name__}"):
        NarrowLoudsIndex.load(bad)  # type: ignore[arg-type]


def test_truncated_and_corrupt_headers_say_rebuild(tmp_path: Path) -> None:
    from flashtrie import IndexFormatError

    f = _files(tmp_path)
    raw = f["idx"].read_bytes()
    cases = {"short": raw[:10], "header cut": raw[:40], "arrays cut": raw[: len(raw) - 64],
             "header crc": raw[:12] + bytes([raw[12] ^ 1]) + raw[13:], "extra": raw + b"\0" * 64}
    for name, data in cases.items():
        (tmp_path / f"{name}.ftrie").write_bytes(data)
        with pytest.raises(IndexFormatError, match="rebuild it with `flashtrie build KEYWORDS -o FILE`"):
            NarrowLoudsIndex.load(tmp_path / f"{name}.ftrie")


def test_an_empty_keyword_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert main(["build", str(empty), "-o", str(tmp_path / "e.ftrie"), "--quiet"]) == 2
    assert f"{empty}: the keyword library is empty" in _error_line(capsys)


def test_a_keyword_file_as_index_points_to_keywords(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = _files(tmp_path)
    assert main(["search", "--index", str(f["kw"]), "--queries", str(f["q"]), "--quiet"]) == 2
    assert "a keyword library (.txt or .npz) goes to --keywords FILE" in _error_line(capsys)


def test_demo_keywords_is_a_count_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--keywords", "mykw.txt"])
    err = capsys.readouterr().err
    assert "in demo this is the number of keywords to generate" in err and "flashtrie search --index" in err


@pytest.mark.parametrize("argv", [["search", "--beam", "70000"], ["bench", "beam", "--beams", "10,70000"],
                                  ["bench", "batch", "--beam", "1M"]])
def test_beam_widths_over_the_limit_are_refused_while_parsing(argv: list[str],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(argv)
    err = capsys.readouterr().err
    assert "65,535" in err and "200k" not in err and "2M" not in err


def test_search_help_lists_every_backend(capsys: pytest.CaptureFixture[str]) -> None:
    from flashtrie.harness.backends import BACKENDS

    with pytest.raises(SystemExit):
        main(["search", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for name in BACKENDS:
        assert name in help_text


def test_bare_flashtrie_prints_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    err = capsys.readouterr().err
    assert "gen-keywords" in err and "search" in err and "demo" in err
    assert "the following arguments are required" not in err


def test_one_duplicate_is_singular(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kw = tmp_path / "kw.txt"
    KeywordSet.from_sequences([[1, 2], [1, 2], [3]]).to_token_file(kw)
    assert main(["build", str(kw), "-o", str(tmp_path / "kw.ftrie")]) == 0
    err = capsys.readouterr().err
    assert "(2 unique, 1 duplicate collapsed)" in err


# ------------------------------------------------------------------ memory and arguments before any work
def _little_memory(monkeypatch: pytest.MonkeyPatch, have: int = 200 << 20) -> None:
    from flashtrie.cli import memory

    monkeypatch.setattr(memory, "available_memory", lambda: (have, "the address-space limit (ulimit -v)"))


@pytest.mark.parametrize("n", ["1e20", "2G"])
def test_gen_keywords_too_many_for_memory_is_refused_first(n: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    _little_memory(monkeypatch)
    assert main(["gen-keywords", "-n", n, "-o", str(tmp_path / "kw.npz")]) == 2
    line = _error_line(capsys)
    assert line.startswith("flashtrie: error: -n: ") and "GB of memory" in line and "ulimit -v" in line
    assert not (tmp_path / "kw.npz").exists()


def test_available_memory_reads_the_limits() -> None:
    from flashtrie.cli.memory import available_memory

    have, source = available_memory()
    assert have > 0 and source


def test_bench_batch_too_large_is_refused_before_any_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    f = _files(tmp_path)
    _little_memory(monkeypatch, 1 << 20)
    res = tmp_path / "b.jsonl"
    assert main(["bench", "batch", "--index", str(f["idx"]), "--queries", str(f["q"]), "--batch-sizes", "1,1M",
                 "--backends", "numpy", "-o", str(res), "--quiet"]) == 2
    assert "--batch-sizes: 1,000,000 needs about" in _error_line(capsys)
    assert not res.exists()


def test_bench_beam_wider_than_k_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = _files(tmp_path)  # K = 8 proposals per step
    res = tmp_path / "b.jsonl"
    assert main(["bench", "beam", "--index", str(f["idx"]), "--queries", str(f["q"]), "--beams", "2,16",
                 "--backends", "numpy", "--repeats", "1", "--warmup", "0", "-o", str(res)]) == 0
    err = capsys.readouterr().err
    assert "warning: the workload has K = 8 proposals per step: beam 16 run with K = 8 < beam" in err
    from flashtrie.harness.records import read_records

    assert [(r.config["beam_width"], r.config["K"]) for r in read_records(res)] == [(2, 2), (16, 8)]


@pytest.mark.parametrize(("argv", "start"), [
    (["gen-queries", "NOFILE", "-n", "1M", "-K", "65535", "-o", "OUT.npz"], "-n / -K: 1,000,000 / 65,535 needs"),
    (["bench", "size", "--sizes", "10,1G", "-o", "OUT.jsonl"], "--sizes: 1,000,000,000 needs"),
    (["demo", "--num-keywords", "1G", "-o", "OUT.jsonl"], "--num-keywords: 1,000,000,000 needs"),
    (["demo", "--num-keywords", "100", "--num-queries", "1M", "-K", "65k", "-o", "OUT.jsonl"],
     "--num-queries: 1,000,000 needs"),
    (["demo", "--num-keywords", "100", "--beam", "60000", "-K", "1", "-o", "OUT.jsonl"], "--beam: 60,000 needs"),
])
def test_a_run_too_large_for_memory_is_refused_before_any_work(argv: list[str], start: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    import time

    _little_memory(monkeypatch)  # 200 MB
    out = tmp_path / ("OUT.npz" if "OUT.npz" in argv else "OUT.jsonl")
    argv = [str(out) if a.startswith("OUT") else str(tmp_path / "missing.txt") if a == "NOFILE" else a for a in argv]
    t0 = time.perf_counter()
    assert main([*argv, "--backends", "numpy,marisa"] if argv[0] != "gen-queries" else argv) == 2
    line = _error_line(capsys)
    assert line.startswith(f"flashtrie: error: {start} about ") and "MB are available" in line, line
    assert not out.exists() and time.perf_counter() - t0 < 5  # nothing generated, nothing recorded


def test_bench_beam_too_wide_for_memory_is_refused_before_any_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    f = _files(tmp_path)
    _little_memory(monkeypatch)
    res = tmp_path / "b.jsonl"
    assert main(["bench", "beam", "--index", str(f["idx"]), "--queries", str(f["q"]), "--beams", "2,60000",
                 "--batch-size", "1k", "--backends", "numpy", "-o", str(res), "--quiet"]) == 2
    assert "--beams: 60,000 needs about" in _error_line(capsys)
    assert not res.exists()


@pytest.mark.parametrize("sweep", ["build", "index"])
def test_a_library_too_large_to_build_is_refused_before_building(sweep: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    f = _files(tmp_path)
    _little_memory(monkeypatch, 1000)  # bytes: less than any index
    out = tmp_path / ("b.jsonl" if sweep == "build" else "new.ftrie")
    argv = (["bench", "build", "--keywords", str(f["kw"]), "--backends", "numpy", "-o", str(out)] if sweep == "build"
            else ["build", str(f["kw"]), "-o", str(out)])
    assert main(argv) == 2
    line = _error_line(capsys)
    assert f"{f['kw']} (" in line and "keywords) needs about" in line and "the index of" in line
    assert not out.exists()


@pytest.mark.parametrize(("argv", "limit"), [
    (["gen-queries", "KW", "-K", "70000"], "65,535"), (["gen-queries", "KW", "--steps", "256"], "255"),
    (["demo", "-K", "1M"], "65,535"), (["demo", "--steps", "0"], "255"), (["bench", "size", "--steps", "300"], "255"),
    (["search", "-q", "Q", "--results", "70000"], "65,535"), (["search", "-q", "Q", "-K", "65536"], "65,535"),
    (["gen-keywords", "--vocab-size", "5G"], "4,294,967,295"),
    (["search", "-q", "Q", "--length-norm", "nan"], ">= 0"), (["bench", "beam", "--length-norm", "-1"], ">= 0"),
    (["search", "-q", "Q", "--token-threshold", "nan"], "-inf"),
])
def test_out_of_range_arguments_are_refused_while_parsing(argv: list[str], limit: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main([*argv, "-o", "never.npz"] if argv[0] in ("gen-queries", "gen-keywords", "bench") else argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    flag = next(a for a in argv if a.startswith("-") and a not in ("-q",))
    assert f"argument {flag}" in err and limit in err, err
    assert not Path("never.npz").exists()


def test_the_memory_estimates_cover_measured_peaks() -> None:
    """Each estimate is above what tracemalloc measures on a small run (numpy's allocations are traced)."""
    import tracemalloc

    from flashtrie.datasets import generate_keywords, generate_queries

    from flashtrie.cli import memory

    def peak(fn):  # type: ignore[no-untyped-def]
        tracemalloc.start()
        try:
            out = fn()
            return out, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    n = 20_000
    kw, used = peak(lambda: generate_keywords(n, seed=1))
    assert used <= memory.generation_part("-n", n)[2]
    ix, used = peak(lambda: NarrowLoudsIndex.build(kw))
    assert used <= memory.build_part("KW", "", n)[2]
    wl, used = peak(lambda: generate_queries(kw, 64, proposals_per_step=500, num_steps=4, seed=1, device="cpu"))
    assert used <= memory.workload_part("-n", "", 64, 4, 500, library=n)[2]
    from flashtrie.reference_cpu import NumpySearcher

    from flashtrie import SearchConfig

    s = NumpySearcher(ix)
    batch = wl.proposals[0:4]
    s.search(batch, SearchConfig(beam_width=400))
    _, used = peak(lambda: s.search(batch, SearchConfig(beam_width=400)))
    assert used <= memory.search_part("--beam", "", 400, 4)[2]
