"""Deprecated names still work, warn once per call with the name to use instead, and agree with the new ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashtrie import KeywordSet


def test_old_token_file_names_warn_and_agree(tmp_path: Path) -> None:
    """from_text / from_text_bytes / to_text are deprecated aliases of the token-file names."""
    path = tmp_path / "kw.txt"
    kws = KeywordSet.from_sequences([[3, 1], [2]])
    with pytest.warns(DeprecationWarning, match="use KeywordSet.to_token_file"):
        kws.to_text(path)
    with pytest.warns(DeprecationWarning, match="use KeywordSet.from_token_file"):
        old = KeywordSet.from_text(path)
    with pytest.warns(DeprecationWarning, match="use KeywordSet.from_token_bytes"):
        old_bytes = KeywordSet.from_text_bytes(path.read_bytes())
    assert old.to_sequences() == old_bytes.to_sequences() == KeywordSet.from_token_file(path).to_sequences()
