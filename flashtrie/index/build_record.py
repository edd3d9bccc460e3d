"""The build record of an index, kept apart from the id fields the library acts on.

The metadata's ``num_keywords`` and ``id_order`` are what the builder was given and asked for. The library
answers questions about the index (which ids exist, how many keywords were collapsed, whether an id is an
input position) only from values the arrays pin:

- with an id map, the ids are input positions ("input"), the map's values; ``num_keywords`` is checked
  against the map (above its largest id, wide enough for its width) and kept;
- with strings and no map, the strings' count is the number of ids: more strings than keyword ends means
  input-order ids with duplicates (``num_keywords`` = the count, checked); as many as the ends means the ids
  are the ranks ("index");
- with neither, the ids are the ranks ``[0, num_unique)``: ``num_keywords`` = ``num_unique`` and "index".
  An input-order build gives such a file only when its first ``num_unique`` keywords are the distinct ones
  in the index's order (later ones duplicates), so its ids are the ranks too; the arrays cannot tell the two
  requests apart, nor count the trailing duplicates.

The stored values stay in the file unchanged, as the build record (`build_record`), with the build's
duration and the keyword-set fingerprint: reported as such, never used to answer a question about the index.
"""

from __future__ import annotations

from typing import Any

from .fingerprint import FINGERPRINT_KEY

__all__ = ["BUILD_RECORD_FIELDS", "acted_ids", "build_record"]

#: The metadata fields kept as a record of the build (the first two are also read by `acted_ids`).
BUILD_RECORD_FIELDS = ("num_keywords", "id_order", "build_seconds", FINGERPRINT_KEY)


def acted_ids(meta: dict[str, Any], has_map: bool, text_count: int | None) -> tuple[int, str]:
    """``(num_keywords, id_order)`` the library acts on, for a file whose metadata ``meta`` has passed the
    checks: derived from the arrays (an id map or not, ``text_count`` strings or None) as the module says."""
    num_unique = int(meta["num_unique"])
    if has_map:
        return int(meta["num_keywords"]), "input"
    if text_count is not None and text_count > num_unique:
        return text_count, "input"
    if text_count is not None:  # index-order ids: the input count is only the record's
        return int(meta["num_keywords"]), "index"
    return num_unique, "index"


def build_record(meta: dict[str, Any]) -> dict[str, Any]:
    """The build record of ``meta``: the input keyword count, the requested id order, the build's seconds
    and the keyword-set fingerprint (None where the file has none)."""
    return {name: meta.get(name) for name in BUILD_RECORD_FIELDS}
