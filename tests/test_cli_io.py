"""Issue #11 at the command line: nothing half-written, failed writes and wrong files as one-line errors,
clear input messages, and what a new user sees (K used, marisa progress, the bench table, tokens)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from flashtrie.reference_cpu import NumpySearcher

from flashtrie import KeywordSet, NarrowLoudsIndex, Proposals, SearchConfig
from flashtrie.cli import main
from flashtrie.errors import InputError
from flashtrie.io_util import _umask


def _files(tmp_path: Path) -> dict[str, Path]:
    rng = np.random.default_rng(1)
    seqs = {tuple(rng.integers(0, 12, rng.integers(1, 5)).tolist()) for _ in range(300)}
    kws = KeywordSet.from_sequences(sorted(seqs))
    kw = tmp_path / "kw.txt"
    kws.to_token_file(kw)
    tok = np.stack([[rng.permutation(14)[:8] for _ in range(4)] for _ in range(3)]).astype(np.int64)
    tok[tok >= 12] = -1
    lp = np.log(rng.random(tok.shape)).astype(np.float32)
    q = tmp_path / "q.tsv"
    Proposals(tok, lp).to_tsv(q)
    idx = tmp_path / "kw.ftrie"
    NarrowLoudsIndex.build(kws).save(idx)
    return {"kw": kw, "q": q, "idx": idx, "tmp": tmp_path}


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("flashtrie: error: ") and "Traceback" not in "\n".join(err), err
    assert len([line for line in err if "error" in line]) == 1, err
    return err[-1]


def _result_lines(out: str) -> list[str]:
    """The printed results of ``flashtrie search``, without its timing line."""
    return [line for line in out.splitlines() if not line.startswith("numpy:")]


def _enospc(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


# ------------------------------------------------------------------------------ failed writes (#11.4)
def test_build_on_a_full_disk_is_one_line_naming_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    f = _files(tmp_path)
    out = tmp_path / "new.ftrie"
    monkeypatch.setattr(NarrowLoudsIndex, "save", _enospc)
    assert main(["build", str(f["kw"]), "-o", str(out), "--quiet"]) == 2
    line = _error_line(capsys)
    assert f"{out}: No space left on device; free some space" in line
    assert not out.exists()


@pytest.mark.parametrize("cmd", ["gen-keywords", "gen-queries"])
def test_generators_on_a_full_disk(cmd: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    from flashtrie.harness import workloads

    from flashtrie import datasets

    f = _files(tmp_path)
    out = tmp_path / "out.npz"
    if cmd == "gen-keywords":
        monkeypatch.setattr(datasets, "save_keywords", _enospc)
    else:
        monkeypatch.setattr(workloads, "save_workload_file", _enospc)
    argv = (["gen-keywords", "-n", "50"] if cmd == "gen-keywords"
            else ["gen-queries", str(f["kw"]), "-n", "2", "-K", "4"])
    assert main([*argv, "-o", str(out), "--quiet"]) == 2
    assert f"{out}: No space left on device" in _error_line(capsys)
    assert not out.exists()


def test_search_output_on_a_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    from flashtrie import io_util

    f = _files(tmp_path)
    out = tmp_path / "res.npz"
    monkeypatch.setattr(io_util, "atomic_write_with", _enospc)
    rc = main(["search", "--index", str(f["idx"]), "--queries", str(f["q"]), "--beam", "4", "-o", str(out), "--quiet"])
    assert rc == 2 and f"{out}: No space left on device" in _error_line(capsys)
    assert not out.exists()


def _short_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """os.write in the records module writes half of what it is given, as a full disk does."""
    from flashtrie.harness import records

    real = os.write

    def half(fd: int, data: bytes) -> int:
        return real(fd, bytes(data)[: max(1, len(data) // 2)])

    monkeypatch.setattr(records.os, "write", half)


def test_append_records_never_leaves_half_a_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flashtrie.harness.records import Record, append_records, read_records

    path = tmp_path / "r.jsonl"
    rec = Record(kind="parity", backend="numpy", config={"beam_width": 4})
    append_records(path, [rec])
    before = path.read_bytes()
    _short_write(monkeypatch)
    with pytest.raises(OSError, match="short write") as e:
        append_records(path, [rec, rec])
    assert e.value.filename == str(path)
    assert path.read_bytes() == before  # truncated back: the file is as it was
    monkeypatch.undo()
    assert len(read_records(path)) == 1


def test_append_records_undoes_a_failed_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flashtrie.harness import records

    path = tmp_path / "r.jsonl"
    rec = records.Record(kind="parity", backend="numpy")
    records.append_records(path, [rec])
    before = path.read_bytes()
    real = os.write

    def write_then_fail(fd: int, data: bytes) -> int:
        real(fd, bytes(data)[:10])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(records.os, "write", write_then_fail)
    with pytest.raises(OSError):
        records.append_records(path, [rec])
    assert path.read_bytes() == before


def test_a_failed_append_to_a_new_file_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flashtrie.harness.records import Record, append_records, read_records

    path, link = tmp_path / "new.jsonl", tmp_path / "link.jsonl"
    _short_write(monkeypatch)
    with pytest.raises(OSError, match="short write"):
        append_records(path, [Record(kind="parity", backend="numpy")])
    assert not path.exists()
    monkeypatch.undo()
    link.symlink_to(path)  # a dangling link: the file it names is made, as before
    assert append_records(link, [Record(kind="parity", backend="numpy")]) == 1
    assert link.is_symlink() and len(read_records(path)) == 1


def test_parity_records_on_a_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    f = _files(tmp_path)
    rec = tmp_path / "p.jsonl"
    _short_write(monkeypatch)
    rc = main(["parity", "--keywords", str(f["kw"]), "--index", str(f["idx"]), "--queries", str(f["q"]), "--beam",
               "4", "--backends", "numpy,marisa",
               "--records", str(rec), "--quiet"])
    assert rc == 2
    line = _error_line(capsys)
    assert str(rec) in line and "short write" in line and "free some space" in line
    assert not rec.exists()  # the append made the file, so the failed append removes it again


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_info_into_a_full_stdout(tmp_path: Path) -> None:
    f = _files(tmp_path)
    with open("/dev/full", "w") as full:
        res = subprocess.run([sys.executable, "-m", "flashtrie", "info", str(f["idx"])], stdout=full,
                             stderr=subprocess.PIPE, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    err = res.stderr.strip().splitlines()
    assert err == ["flashtrie: error: standard output: No space left on device; free some space or write "
                   "somewhere else"], err


def test_info_on_a_crafted_file_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    f = _files(tmp_path)

    def crafted(*args: object, **kwargs: object) -> None:
        raise OverflowError("cannot convert float infinity to integer")

    monkeypatch.setattr(NarrowLoudsIndex, "load", crafted)
    assert main(["info", str(f["idx"])]) == 2
    line = _error_line(capsys)
    assert str(f["idx"]) in line and "not a valid flashtrie index" in line and "flashtrie build" in line
    assert capsys.readouterr().out == ""


def test_report_failing_midway_leaves_no_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from flashtrie.harness import report

    f = _files(tmp_path)
    res = tmp_path / "b.jsonl"
    assert main(["bench", "beam", "--index", str(f["idx"]), "--queries", str(f["q"]), "--beams", "2",
                 "--repeats", "1", "--warmup", "0", "-o", str(res), "--quiet"]) == 0
    real = report.draw

    def draw_then_fail(records: object, out_dir: Path) -> None:
        real(records, out_dir)  # some figures are written, then the disk is full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(report, "draw", draw_then_fail)
    out = tmp_path / "rep"
    assert main(["report", str(res), "-o", str(out)]) == 2
    assert "No space left on device" in _error_line(capsys)
    assert not out.exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".rep")] == []
    # into an existing folder: its other files stay, and nothing of the failed report lands there
    out.mkdir()
    (out / "README.md").write_text("keep me")
    assert main(["report", str(res), "-o", str(out)]) == 2
    assert [p.name for p in out.iterdir()] == ["README.md"]
    monkeypatch.undo()
    assert main(["report", str(res), "-o", str(out)]) == 0
    assert (out / "report.md").exists() and (out / "README.md").read_text() == "keep me"
    new = tmp_path / "new-rep"
    assert main(["report", str(res), "-o", str(new)]) == 0
    assert new.stat().st_mode & 0o777 == 0o777 & ~_umask()  # renamed into place with the usual permissions


def test_report_removes_the_stale_folders_of_killed_reports(tmp_path: Path) -> None:
    import time

    from flashtrie.io_util import STALE_TEMP_SECONDS

    f = _files(tmp_path)
    res = tmp_path / "b.jsonl"
    assert main(["bench", "beam", "--index", str(f["idx"]), "--queries", str(f["q"]), "--beams", "2",
                 "--repeats", "1", "--warmup", "0", "-o", str(res), "--quiet"]) == 0
    old, young, other = tmp_path / ".rep.ab_c12z9.tmp", tmp_path / ".rep.young123.tmp", tmp_path / ".rap.abcdefgh.tmp"
    for d in (old, young, other):
        d.mkdir()
        (d / "fig.svg").write_text("half")
    past = time.time() - STALE_TEMP_SECONDS - 60
    for d in (old, other):
        os.utime(d, (past, past))
    assert main(["report", str(res), "-o", str(tmp_path / "rep")]) == 0
    assert not old.exists() and young.exists() and other.exists()  # a young one may be a report still running
    assert (tmp_path / "rep" / "report.md").exists()


# ------------------------------------------------------------------------- damaged records (#11.2)
def test_report_skips_a_damaged_last_line_with_a_warning(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    f = _files(tmp_path)
    res = tmp_path / "b.jsonl"
    assert main(["bench", "beam", "--index", str(f["idx"]), "--queries", str(f["q"]), "--beams", "2,3",
                 "--repeats", "1", "--warmup", "0", "-o", str(res), "--quiet"]) == 0
    good = res.read_text()
    res.write_text(good + '{"schema": "flashtrie.rec')  # half a line, as an interrupted append left it
    capsys.readouterr()
    assert main(["report", str(res), "-o", str(tmp_path / "rep")]) == 0
    err = capsys.readouterr().err
    assert f"flashtrie: warning: {res}: line 3: not a whole record" in err and "Traceback" not in err
    assert (tmp_path / "rep" / "report.md").exists()
    lines = good.splitlines()
    res.write_text(lines[0] + "\n{broken\n" + lines[1] + "\n")  # damage anywhere: skipped, the rest read
    assert main(["report", str(res), "-o", str(tmp_path / "rep2")]) == 0
    assert f"flashtrie: warning: {res}: line 2: not a whole record" in capsys.readouterr().err
    res.write_text("{broken\n")  # no whole record at all: not a records file
    assert main(["report", str(res), "-o", str(tmp_path / "rep3")]) == 2
    assert "line 1: not JSON" in _error_line(capsys)


# ---------------------------------------------------------------------------- input messages (#11.5)
def test_tsv_starting_with_a_blank_line_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = _files(tmp_path)
    blank = tmp_path / "blank.tsv"
    blank.write_text("\n\n" + f["q"].read_text())
    args = ["search", "--index", str(f["idx"]), "--beam", "4", "--quiet", "--queries"]
    assert main([*args, str(f["q"])]) == 0
    want = _result_lines(capsys.readouterr().out)
    assert main([*args, str(blank)]) == 0
    assert _result_lines(capsys.readouterr().out) == want and want


def test_tsv_line_without_a_tab_gets_the_parsers_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = _files(tmp_path)
    bad = tmp_path / "notab.tsv"
    bad.write_text('{"indices": [[1, 2]], "probs": [[-0.1, -0.2]]}\n')
    assert main(["search", "--index", str(f["idx"]), "--queries", str(bad), "--quiet"]) == 2
    line = _error_line(capsys)
    assert f"{bad}: line 1: expected 'query<TAB>" in line and "found no tab" in line


def test_a_npz_given_as_the_index_gets_the_same_message_everywhere(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    f = _files(tmp_path)
    npz = tmp_path / "kw.npz"
    assert main(["gen-keywords", "-n", "50", "-o", str(npz), "--quiet"]) == 0
    want = f"{npz}: expected a flashtrie index (from 'flashtrie build'), found a numpy .npz archive"
    assert main(["info", str(npz)]) == 2
    assert _error_line(capsys) == f"flashtrie: error: {want}"
    assert main(["search", "--index", str(npz), "--queries", str(f["q"]), "--quiet"]) == 2
    assert _error_line(capsys) == f"flashtrie: error: {want}"


def _prob_tsv(tmp_path: Path) -> tuple[Path, Path]:
    probs = {"indices": [[1, 2, 3], [2, 4]], "probs": [[0.6, 0.3, 0.1], [0.5, 0.0]]}
    logs = {"indices": probs["indices"], "probs": [[float(np.log(p)) if p else -np.inf for p in row]
                                                   for row in probs["probs"]]}
    a, b = tmp_path / "p.tsv", tmp_path / "lp.tsv"
    a.write_text("q0\t" + json.dumps(probs) + "\n")
    b.write_text("q0\t" + json.dumps(logs).replace("-Infinity", "-1e400") + "\n")
    return a, b


def test_probabilities_are_refused_unless_asked_for(tmp_path: Path) -> None:
    probs, logs = _prob_tsv(tmp_path)
    with pytest.raises(InputError, match=r"line 1: probs\[0\]\[0\]: 0.6 and every other value lie in \[0, 1\]: "
                                         r"these look like probabilities; pass log-probabilities \(log p\)"):
        Proposals.from_tsv(probs)
    mixed = tmp_path / "mixed.tsv"  # model scores with a positive value among negative ones: accepted as given
    mixed.write_text('q\t{"indices": [[1, 2]], "probs": [[0.25, -1.5]]}\n')
    assert Proposals.from_tsv(mixed)[0].logprobs[0, 0].tolist() == [0.25, -1.5]
    converted, _ = Proposals.from_tsv(probs, probabilities=True)
    direct, _ = Proposals.from_tsv(logs)
    assert np.array_equal(converted.tokens, direct.tokens)
    assert np.array_equal(converted.logprobs.view(np.uint32), direct.logprobs.view(np.uint32))
    with pytest.raises(InputError, match=r"probs\[0\]\[0\]: -0.5 is not a probability in \[0, 1\]"):
        bad = tmp_path / "neg.tsv"
        bad.write_text('q\t{"indices": [[1]], "probs": [[-0.5]]}\n')
        Proposals.from_tsv(bad, probabilities=True)


def test_probabilities_flag_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    probs, logs = _prob_tsv(tmp_path)
    idx = tmp_path / "i.ftrie"
    NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2], [1, 4], [2, 4], [3]])).save(idx)
    base = ["search", "--index", str(idx), "--beam", "3", "--quiet", "--queries"]
    assert main([*base, str(probs)]) == 2
    line = _error_line(capsys)
    assert "these look like probabilities; pass log-probabilities" in line and "--probabilities" in line
    assert main([*base, str(probs), "--probabilities"]) == 0
    got = capsys.readouterr().out
    assert main([*base, str(logs)]) == 0
    assert _result_lines(capsys.readouterr().out) == _result_lines(got) and "query 0: 2 results" in got


# ------------------------------------------------------------------------------ new users (#11.6)
def test_search_uses_k_equal_to_the_beam_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = _files(tmp_path)
    assert main(["search", "--index", str(f["idx"]), "--queries", str(f["q"]), "--beam", "4"]) == 0
    cap = capsys.readouterr()
    assert "K = 4 proposals per step (of 8; the beam width" in cap.err
    assert "numpy: 3 queries, K = 4," in cap.out
    assert main(["search", "--index", str(f["idx"]), "--queries", str(f["q"]), "--beam", "4", "--all-proposals"]) == 0
    assert "numpy: 3 queries, K = 8," in capsys.readouterr().out
    assert main(["search", "--index", str(f["idx"]), "--queries", str(f["q"]), "--beam", "4", "-K", "6"]) == 0
    assert "K = 6," in capsys.readouterr().out


def test_search_and_bench_agree_at_the_same_beam(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = _files(tmp_path)
    out, res = tmp_path / "s.npz", tmp_path / "b.jsonl"
    assert main(["search", "--index", str(f["idx"]), "--queries", str(f["q"]), "--beam", "4", "-o", str(out),
                 "--quiet"]) == 0
    assert main(["bench", "beam", "--index", str(f["idx"]), "--queries", str(f["q"]), "--beams", "4",
                 "--repeats", "1", "--warmup", "0", "-o", str(res), "--quiet"]) == 0
    from flashtrie.harness.records import read_records
    from flashtrie.harness.workloads import load_workload, truncate_proposals
    from flashtrie.reference_cpu import NumpySearcher

    (rec,) = read_records(res)
    assert rec.config["K"] == 4
    props = truncate_proposals(load_workload(f["q"]).proposals, rec.config["K"])
    want = NumpySearcher(NarrowLoudsIndex.load(f["idx"])).search(props, __import__("flashtrie").SearchConfig(4))
    with np.load(out) as z:
        assert np.array_equal(z["keyword_ids"], want.keyword_ids)


def test_marisa_construction_is_announced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("marisa_trie")
    f = _files(tmp_path)
    assert main(["parity", "--keywords", str(f["kw"]), "--index", str(f["idx"]), "--queries", str(f["q"]),
                 "--beam", "4", "--backends", "marisa,numpy"]) == 0
    assert "building the marisa trie for backend marisa ... done" in capsys.readouterr().err
    res = tmp_path / "b.jsonl"
    assert main(["bench", "beam", "--keywords", str(f["kw"]), "--index", str(f["idx"]), "--queries", str(f["q"]),
                 "--beams", "2", "--backends", "marisa,numpy", "--repeats", "1", "--warmup", "0", "-o", str(res)]) == 0
    err = capsys.readouterr().err
    assert "building the marisa trie for backend marisa" in err
    assert "backend marisa ready in " in err


def test_bench_prints_what_it_measured(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = _files(tmp_path)
    res = tmp_path / "b.jsonl"
    assert main(["bench", "beam", "--index", str(f["idx"]), "--queries", str(f["q"]), "--beams", "2,4",
                 "--backends", "numpy", "--repeats", "1", "--warmup", "0", "-o", str(res)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["kind", "backend", "keywords", "beam", "K", "batch", "mean", "p99", "vs", "marisa",
                              "status"]
    rows = [line.split() for line in out[2:]]
    assert [(r[0], r[1], r[3], r[4], r[5], r[-1]) for r in rows] == [("latency", "numpy", "2", "2", "1", "ok"),
                                                                   ("latency", "numpy", "4", "4", "1", "ok")]
    assert all(r[7] == "ms" for r in rows)  # the mean, in ms


@pytest.mark.parametrize("with_keywords", [True, False])
def test_search_shows_tokens(with_keywords: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = _files(tmp_path)
    kws = KeywordSet.from_token_file(f["kw"])
    argv = ["search", "--index", str(f["idx"]), "--queries", str(f["q"]), "--beam", "4", "--show-tokens", "--quiet"]
    assert main([*argv, *(["--keywords", str(f["kw"])] if with_keywords else [])]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if " id " in line]
    assert rows
    for line in rows:
        kid = int(line.split(" id ")[1].split()[0])
        assert line.split("tokens ")[1].split() == [str(t) for t in kws[kid]]


def test_keyword_tokens_from_the_index_alone() -> None:
    from flashtrie.harness.runs import keyword_tokens

    rng = np.random.default_rng(7)
    seqs = [rng.integers(0, 70_000 if i % 5 == 0 else 6, rng.integers(1, 9)).tolist() for i in range(400)]
    kws = KeywordSet.from_sequences(seqs)
    index = NarrowLoudsIndex.build(kws)
    ids = list(range(len(kws)))
    firsts = {}
    for i, s in enumerate(seqs):
        firsts.setdefault(tuple(s), i)
    kept = sorted(set(firsts.values()))  # duplicates collapse to their smallest id
    got = keyword_tokens(ids, None, index)
    assert sorted(got) == kept
    assert all(got[i] == seqs[i] for i in kept)
    assert keyword_tokens(ids[:5], kws, index) == {i: seqs[i] for i in range(5)}


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
@pytest.mark.parametrize("path, expected", [("/dev/zero", "/dev/zero: is not a regular file"),
                                            ("{tmp}", "{tmp}: is a folder; expected a file")])
def test_info_on_what_is_not_a_file(path: str, expected: str, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", path.format(tmp=tmp_path)]) == 2
    assert expected.format(tmp=tmp_path) in _error_line(capsys)


def test_every_package_folder_is_installed() -> None:
    """A wheel holds flashtrie/cli/ (the entry point `flashtrie.cli:main`) and every other package folder."""
    import tomllib

    root = Path(__file__).resolve().parent.parent
    conf = tomllib.loads((root / "pyproject.toml").read_text())
    listed = set(conf["tool"]["setuptools"]["packages"])
    found = {"flashtrie." + p.parent.relative_to(root / "flashtrie").as_posix().replace("/", ".")
             for p in (root / "flashtrie").glob("*/__init__.py")}
    assert found <= listed, found - listed
    assert conf["project"]["scripts"]["flashtrie"] == "flashtrie.cli:main"


def test_build_with_index_order_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`build --ids index` stores no id map; searches then return index-order ids, whose tokens the index
    gives back, and the same keywords as the input-order index."""
    f = _files(tmp_path)
    out = tmp_path / "ix.ftrie"
    assert main(["build", str(f["kw"]), "-o", str(out), "--ids", "index"]) == 0
    by_index, by_input = NarrowLoudsIndex.load(out), NarrowLoudsIndex.load(f["idx"])
    assert by_index.id_order == "index" and by_index.keyword_ids.size == 0
    p, _ = Proposals.from_tsv(f["q"])
    config = SearchConfig(beam_width=4)
    a = NumpySearcher(by_index).search(p, config)
    b = NumpySearcher(by_input).search(p, config)
    tokens = lambda ix, ids: [ix.keyword(int(i)).tolist() for i in ids if i >= 0]  # noqa: E731
    for q in range(p.num_queries):
        assert tokens(by_index, a.keyword_ids[q]) == tokens(by_input, b.keyword_ids[q])
    assert np.array_equal(a.scores.view(np.uint32), b.scores.view(np.uint32))


def test_build_on_the_gpu_without_cupy_says_what_to_install(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    f = _files(tmp_path)
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy fails, as on a machine without it
    assert main(["build", str(f["kw"]), "-o", str(tmp_path / "g.ftrie"), "--gpu"]) == 2
    assert "flashtrie[gpu-build]" in _error_line(capsys)
    assert not (tmp_path / "g.ftrie").exists()
