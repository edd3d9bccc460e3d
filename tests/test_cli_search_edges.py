"""`search` and `parity` at their edges: queries without results say why, a partial listing says so, and a
parity run that compares nothing fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flashtrie import KeywordSet, NarrowLoudsIndex
from flashtrie.cli import main

KEYWORDS = [[10, 11], [10, 12], [20, 21], [30]]


def _tsv(path: Path, rows: list[tuple[str, list[list[int]], list[list[float]]]]) -> Path:
    path.write_text("".join(f"{n}\t{json.dumps({'indices': i, 'probs': p})}\n" for n, i, p in rows))
    return path


@pytest.fixture
def library(tmp_path: Path) -> tuple[Path, Path]:
    kws = KeywordSet.from_sequences(KEYWORDS)
    kw, idx = tmp_path / "kw.txt", tmp_path / "kw.ftrie"
    kws.to_token_file(kw)
    NarrowLoudsIndex.build(kws).save(idx)
    return kw, idx


MISS = ("miss", [[40, 41], [11, 12]], [[-0.1, -0.5], [-0.2, -0.3]])  # no step-0 token starts a keyword
HIT = ("hit", [[10, 41], [11, 12]], [[-0.1, -0.5], [-0.2, -0.3]])
SHORT = ("short", [[10, 41]], [[-0.1, -0.5]])  # starts a keyword, ends none in one step


@pytest.mark.parametrize("backend", ["numpy", "marisa"])
def test_no_result_for_any_query_is_said_and_exits_1(backend: str, library, tmp_path, capsys) -> None:
    kw, idx = library
    q = _tsv(tmp_path / "q.tsv", [MISS, MISS])
    rc = main(["search", "--backend", backend, "--keywords", str(kw), "--index", str(idx), "--queries", str(q),
               "--beam", "2", "--quiet"])
    err = capsys.readouterr().err.splitlines()
    assert rc == 1
    assert len(err) == 2 and all("0 results" in e and "starts a keyword" in e for e in err)
    assert "query 0 ('miss')" in err[0] and "first level holds 3 tokens" in err[0]


def test_a_query_without_results_among_others_is_a_warning(library, tmp_path, capsys) -> None:
    _, idx = library
    q = _tsv(tmp_path / "q.tsv", [HIT, MISS])
    assert main(["search", "--index", str(idx), "--queries", str(q), "--beam", "2", "--quiet"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [e for e in err if "query 1 ('miss'): 0 results" in e] and len(err) == 1


def test_a_query_whose_beams_end_no_keyword_says_so(library, tmp_path, capsys) -> None:
    _, idx = library
    q = _tsv(tmp_path / "q.tsv", [SHORT])
    assert main(["search", "--index", str(idx), "--queries", str(q), "--beam", "2", "--quiet"]) == 1
    assert "no beam reached the end of a keyword within its 1 steps" in capsys.readouterr().err


def test_search_says_how_many_queries_it_shows(library, tmp_path, capsys) -> None:
    _, idx = library
    q = _tsv(tmp_path / "q.tsv", [HIT] * 5)
    assert main(["search", "--index", str(idx), "--queries", str(q), "--beam", "2", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert sum(line.startswith("query ") for line in out.splitlines()) == 3
    assert "showing 3 of 5 queries (--show-queries N or --all to print more)" in out
    assert main(["search", "--index", str(idx), "--queries", str(q), "--beam", "2", "--quiet", "--all"]) == 0
    out = capsys.readouterr().out
    assert sum(line.startswith("query ") for line in out.splitlines()) == 5 and "showing" not in out
    assert main(["search", "--index", str(idx), "--queries", str(q), "--beam", "2", "--quiet", "--show", "1"]) == 0
    assert "query 0: 2 results for 'hit' (showing 1; --show N for more)" in capsys.readouterr().out


def test_parity_with_one_backend_compares_nothing_and_fails(library, tmp_path, capsys, monkeypatch) -> None:
    import flashtrie.harness.backends as hb

    kw, idx = library
    q = _tsv(tmp_path / "q.tsv", [HIT])
    real = hb.availability
    monkeypatch.setattr(hb, "availability", lambda n: "no NVIDIA GPU visible" if n == "gpu" else real(n))
    assert main(["parity", "--index", str(idx), "--queries", str(q), "--beam", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("flashtrie: error: --backends: only numpy can run here")
    assert "gpu skipped: no NVIDIA GPU visible" in err and "marisa skipped" in err
    assert "nothing would be compared" in err
    assert main(["parity", "--index", str(idx), "--queries", str(q), "--beam", "2", "--backends", "numpy"]) == 2
    capsys.readouterr()
    assert main(["parity", "--keywords", str(kw), "--index", str(idx), "--queries", str(q), "--beam", "2",
                 "--quiet"]) == 0


def test_parity_where_a_backend_fails_to_construct_compares_nothing(library, tmp_path, capsys, monkeypatch) -> None:
    import flashtrie.cli.search as cs

    kw, idx = library
    q = _tsv(tmp_path / "q.tsv", [HIT])
    real = cs.make_searchers

    def marisa_fails(names, keywords, index, quiet):  # type: ignore[no-untyped-def]
        made, failed = real([n for n in names if n != "marisa"], keywords, index, quiet)
        return made, {**failed, **{n: "broken" for n in names if n == "marisa"}}

    monkeypatch.setattr(cs, "make_searchers", marisa_fails)
    rc = main(["parity", "--keywords", str(kw), "--index", str(idx), "--queries", str(q), "--beam", "2",
               "--backends", "numpy,marisa", "--quiet"])
    cap = capsys.readouterr()
    assert rc == 1 and "nothing was compared: only numpy ran" in cap.err


def test_proposals_under_the_token_threshold_do_not_count_as_starting_a_keyword(library, tmp_path, capsys) -> None:
    _, idx = library
    q = _tsv(tmp_path / "q.tsv", [("low", [[41, 10], [11, 12]], [[-0.1, -0.5], [-0.2, -0.3]])])
    assert main(["search", "--index", str(idx), "--queries", str(q), "--beam", "2", "--token-threshold", "-0.4",
                 "--quiet"]) == 1
    assert "none of its 1 step-0 proposals starts a keyword" in capsys.readouterr().err
