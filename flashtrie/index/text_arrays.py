"""The index file's optional strings: a `TextStore` as two arrays, and their checks at load.

``texts.data`` (uint8) is the UTF-8 blob; ``texts.offsets.words`` (uint64) the n + 1 offsets as `PackedInts`
of ``max(1, bit_length(len(blob)))`` bits, so neither width nor count needs a metadata field: the count is
the number of keyword ids (``num_keywords`` for input-order ids, ``num_unique`` for index-order ids).
"""

from __future__ import annotations

import numpy as np

from ..texts import MAX_TEXT_BYTES, TextStore, offsets_problem, utf8_problem
from .packed import PackedInts

__all__ = ["TEXT_ARRAY_DTYPES", "text_arrays", "text_count", "text_count_claim", "text_layout_problem",
           "load_text_store", "text_content_problem", "packed_offsets"]

#: The arrays of the strings section and their dtypes (both present, or both absent).
TEXT_ARRAY_DTYPES: dict[str, str] = {"texts.data": "uint8", "texts.offsets.words": "uint64"}


def text_count(id_order: str, num_keywords: int, num_unique: int) -> int:
    """How many strings an index holds when it holds any: one per keyword id."""
    return num_keywords if id_order == "input" else num_unique


def text_count_claim(id_order: str, num_keywords: int, num_unique: int) -> str:
    """What the metadata says of the strings' count (named where the strings disagree with it)."""
    field = "num_keywords" if id_order == "input" else "num_unique"
    return f"{field} = {text_count(id_order, num_keywords, num_unique)} with id_order = {id_order!r}"


def _width(nbytes: int) -> int:
    return max(1, nbytes.bit_length())


def text_arrays(store: TextStore | None) -> dict[str, np.ndarray]:
    """The file arrays of ``store`` (none for None)."""
    if store is None:
        return {}
    if store.nbytes > MAX_TEXT_BYTES:  # TextStore.from_strings refuses this already
        raise ValueError(f"{store.nbytes} bytes of strings is over {MAX_TEXT_BYTES}")
    words = PackedInts.from_values(store.offsets, width=_width(store.nbytes)).words
    return {"texts.data": store.data, "texts.offsets.words": words}


def packed_offsets(arrays: dict[str, np.ndarray], count: int) -> PackedInts:
    """The packed offsets of a file's strings section (``count`` strings)."""
    return PackedInts(arrays["texts.offsets.words"], _width(arrays["texts.data"].size), count + 1)


def text_layout_problem(arrays: dict[str, np.ndarray], count: int, claim: str = "") -> str | None:
    """Cheap checks of the strings section: both arrays or none, the offsets' word count and clear padding, the
    first offset 0 and the last the blob's size (a few words read).  ``claim``: the metadata that gave
    ``count`` (`text_count_claim`)."""
    claim = claim or f"count = {count}"
    have = [name for name in TEXT_ARRAY_DTYPES if name in arrays]
    if not have:
        return None
    if len(have) != len(TEXT_ARRAY_DTYPES):
        return f"strings: the file has {have[0]} without {next(n for n in TEXT_ARRAY_DTYPES if n not in arrays)}"
    nbytes = int(arrays["texts.data"].size)
    if nbytes > MAX_TEXT_BYTES:
        return f"strings: a blob of {nbytes:,} bytes is over the limit {MAX_TEXT_BYTES:,}"
    pk = packed_offsets(arrays, count)
    want = PackedInts.num_words(pk.size, pk.width)
    if pk.words.size != want:
        return (f"strings: metadata {claim}, but the strings' offsets hold {pk.words.size} words "
                f"({count:,} strings of {pk.width}-bit offsets take {want})")
    if not pk.padding_is_clear():
        return f"strings: metadata {claim}, but the strings' offsets have bits set past {count + 1} values"
    first, last = (int(v) for v in pk.get(np.array([0, count])))
    if first != 0 or last != nbytes:
        return (f"strings: offsets run from {first} to {last}, expected 0 to {nbytes} (the blob's bytes), "
                f"read at the count of metadata {claim}")
    return None


def load_text_store(arrays: dict[str, np.ndarray], count: int,
                    claim: str = "") -> tuple[TextStore | None, str | None]:
    """The strings of a loaded file (None when it has none) and what is wrong with them (None when nothing):
    the cheap checks, then the offsets decoded and checked never to decrease (the blob is not read)."""
    problem = text_layout_problem(arrays, count, claim)
    if problem or "texts.data" not in arrays:
        return None, problem
    offsets = packed_offsets(arrays, count).to_array().astype(np.int64)
    data = arrays["texts.data"]
    problem = offsets_problem(offsets, data.size)
    if problem:
        return None, f"strings: {problem}"
    return TextStore(data, offsets), None


def text_content_problem(store: TextStore | None) -> str | None:
    """The full check of the strings (``verify=True``, after the checksums): the blob is UTF-8 and no string
    ends inside a character."""
    problem = utf8_problem(store.data, store.offsets) if store is not None else None
    return f"strings: {problem}" if problem else None
