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
    seqs = [list(s) for s in KeywordSet.from_text(f["kw"])]
    if change == "larger":
        seqs = seqs + [[1, 2, 3, 4, 5, 6, 7]]
    elif change == "smaller":
        seqs = seqs[:10]
    else:  # the same counts, two keywords swapped
        seqs[0], seqs[1] = seqs[1], seqs[0]
    other = tmp_path / f"other_{change}.txt"
    KeywordSet.from_sequences(seqs).to_text(other)
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
    assert ix.meta[FINGERPRINT_KEY] == keywords_fingerprint(KeywordSet.from_text(f["kw"]))
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
