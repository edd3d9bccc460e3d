"""``load(verify=True)`` checks every metadata field against the arrays: one lie per field, each saved with
valid checksums (the file is written by `save`, its arrays re-packed where the lie needs it), refused with an
`IndexFormatError` that names the field, its stored value and what the arrays say."""

from __future__ import annotations

import re

import numpy as np
import pytest

from flashtrie import IndexFormatError, InputError, KeywordSet, NarrowLoudsIndex
from flashtrie.index import checks
from flashtrie.index.packed import PackedInts
from flashtrie.limits import MAX_KEYWORDS

WIDE = 70_000  # a token past 2**16: a node with a labels_hi value
BIG = (1 << 20) + 5  # a tail token wider than every label


def _index(ids: str = "input", texts: bool = False, shuffled: bool = True) -> NarrowLoudsIndex:
    """Keywords with wide and narrow labels, linked edges and duplicates; a map where ``shuffled`` and
    ``ids="input"``."""
    kws = [[1, 2, 3], [1, 2, 4], [WIDE, 5], [WIDE + 1, 6, 7, 8], [9], [9, 10], [1, 2, 3], [11, 12, 13, 14],
           [20, BIG]] + [[9]] * 8  # the largest token in the suffix; 16 + 1 keywords, 9 distinct
    if not shuffled:  # input order = the index's order (level order of the keyword ends): no map
        probe = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws), ids="index",
                                       return_order=True)[1]
        kws = [kws[i] for i in probe] + [kws[0]]
    ks = KeywordSet.from_sequences(kws)
    if texts:
        ks = ks.with_texts([" ".join(map(str, k)) for k in kws])
    return NarrowLoudsIndex.build(ks, ids=ids)


def _repacked(ix: NarrowLoudsIndex, name: str, width: int) -> None:
    """Store packed array ``name`` in ``width`` bits (the same values), with its metadata."""
    old: PackedInts = getattr(ix, name)
    words, w, size = PackedInts.pack(np, old.to_array().astype(np.uint64), width)
    setattr(ix, name, PackedInts(words, w, size))
    ix.meta.update({f"{name}.width": w, f"{name}.size": size})


def _meta(field, value):
    def lie(ix: NarrowLoudsIndex):
        ix.meta[field] = value(ix.meta[field]) if callable(value) else value
    return lie


def _width(name: str, delta: int):
    return lambda ix: _repacked(ix, name, getattr(ix, name).width + delta)


#: field -> (index kind, the lie, what the message must say besides the field and the stored value)
LIES = {
    "num_nodes": ("map", _meta("num_nodes", lambda v: v + 1), "labels_lo has"),
    "num_keywords (over the limit)": ("plain", _meta("num_keywords", 2**47), "at most 4294967296 keywords"),
    "num_keywords (below the unique)": ("map", _meta("num_keywords", lambda v: 3), "at least the num_unique"),
    "num_keywords (an id not below it)": ("map", _meta("num_keywords", lambda v: 8), "need at most"),
    "num_keywords (the strings' count)": ("strings", _meta("num_keywords", lambda v: v + 1), "offsets"),
    "num_unique": ("map", _meta("num_unique", lambda v: v - 1), "terminal bits hold"),
    "max_keyword_length (one more)": ("map", _meta("max_keyword_length", lambda v: v + 1), "longest keyword has"),
    "max_keyword_length (one less)": ("map", _meta("max_keyword_length", lambda v: v - 1), "a path of the trie"),
    "max_token (larger)": ("map", _meta("max_token", lambda v: v + 1), "the largest token is"),
    "max_token (smaller)": ("plain", _meta("max_token", lambda v: v - 1), "the largest token is"),
    "max_degree": ("map", _meta("max_degree", lambda v: v + 1), "the root has"),
    "max_degree_nonroot": ("map", _meta("max_degree_nonroot", lambda v: v + 1), "the LOUDS gives"),
    "louds.nbits": ("map", _meta("louds.nbits", lambda v: v + 2), "bits belong to"),
    "hi_flag.nbits": ("map", _meta("hi_flag.nbits", lambda v: v - 1), "bits belong to"),
    "linked.nbits": ("map", _meta("linked.nbits", lambda v: v + 64), "bits belong to"),
    "terminal.nbits": ("map", _meta("terminal.nbits", lambda v: v + 1), "bits belong to"),
    "labels_hi.width": ("map", _width("labels_hi", 1), "takes"),
    "labels_hi.width (past max_token's bound)": ("map", _width("labels_hi", 5), "leaves at most"),
    "labels_hi.size": ("map", _meta("labels_hi.size", lambda v: v + 1), "the bits give"),
    "link_starts.width": ("map", _width("link_starts", 1), "take"),
    "link_starts.size": ("map", _meta("link_starts.size", lambda v: v - 1), "the bits give"),
    "suffix.width": ("map", _width("suffix", 1), "needs"),
    "suffix.size": ("map", _meta("suffix.size", lambda v: v - 1), "bits set past"),
    "keyword_ids.width": ("map", _width("keyword_ids", 1), "its largest id"),
    "keyword_ids.width (past the count's bound)": ("map", _width("keyword_ids", 2), "need at most"),
    "keyword_ids.size": ("map", _meta("keyword_ids.size", lambda v: v - 1), "bits set past"),
    "id_order (index, with a map)": ("map", _meta("id_order", "index"), "has an id map"),
    "id_order (input, index-order strings)": ("index strings", _meta("id_order", "input"), "offsets"),
    "id_order (index, input-order strings)": ("plain strings", _meta("id_order", "index"), "offsets"),
}

KINDS = {
    "map": lambda: _index(),
    "plain": lambda: _index(shuffled=False),
    "strings": lambda: _index(texts=True),
    "index strings": lambda: _index(ids="index", texts=True),
    "plain strings": lambda: _index(texts=True, shuffled=False),
}


def test_the_kinds_are_what_the_lies_need():
    assert KINDS["map"]().keyword_ids.size and not KINDS["plain"]().keyword_ids.size
    for kind in KINDS.values():
        ix = kind()
        assert ix.labels_hi.size and ix.suffix.size and ix.duplicates >= 1 and ix.max_token == BIG


@pytest.mark.parametrize("case", sorted(LIES))
def test_every_field_lie_is_refused_naming_field_value_and_arrays(tmp_path, case):
    kind, lie, says = LIES[case]
    ix = KINDS[kind]()
    path = tmp_path / "lie.ftrie"
    ix.save(path)
    NarrowLoudsIndex.load(path)  # the honest file loads
    lie(ix)
    field = case.split(" ")[0]
    stored = ix.meta[field]
    ix.save(path)  # checksums of the lying file are valid
    for device in ("cpu", "auto"):
        with pytest.raises(IndexFormatError) as e:
            NarrowLoudsIndex.load(path, verify_device=device)
        msg = str(e.value)
        assert re.search(rf"metadata .*{re.escape(field)} = '?{re.escape(str(stored))}'?", msg), msg
        assert says in msg, msg


def test_the_field_list_covers_every_metadata_field():
    """A field added to the format must get a lie above or be named here as one the arrays cannot hold."""
    recorded = {"build_seconds", "keywords_fingerprint"}  # records about the build; format-checked only
    lied = {case.split(" ")[0] for case in LIES}
    assert lied | recorded == set(_index().meta) | {"keywords_fingerprint"}
    assert set(checks.COUNT_FIELDS) | {"id_order"} <= lied


def test_what_the_arrays_cannot_hold_is_bounded(tmp_path):
    """Without an id map or strings, the count of trailing duplicates in the input (num_keywords past
    num_unique) and which order the ids were given in are not in the arrays: the file loads with any
    num_keywords from num_unique to the limit, and the ids are the ranks either way."""
    ix = _index(shuffled=False)
    path = tmp_path / "a.ftrie"
    ix.meta["num_keywords"] = MAX_KEYWORDS
    ix.save(path)
    got = NarrowLoudsIndex.load(path)
    assert got.duplicates == MAX_KEYWORDS - got.num_unique
    with pytest.raises(InputError, match="duplicate"):
        got.keyword(got.num_unique)


def test_more_keywords_than_the_limit_are_refused_before_any_work(monkeypatch):
    from flashtrie.index import builder
    monkeypatch.setattr(builder, "MAX_KEYWORDS", 3)
    with pytest.raises(InputError, match="keywords: 4 keywords are over the limit 3"):
        NarrowLoudsIndex.build(KeywordSet.from_sequences([[1], [2], [3], [4]]))


def test_verdicts_keep_their_order_whatever_finishes_first(tmp_path, monkeypatch):
    """The checksums, rank directories, scans and child checks run at once on one pool: a file is still refused
    for the first problem in the documented order (a checksum mismatch before a rank directory that the same
    damage breaks, and before a piece that raised on the damaged bits)."""
    from flashtrie.index import verify_run

    ix = _index()
    path = tmp_path / "a.ftrie"
    ix.save(path)
    raw = bytearray(path.read_bytes())
    rank = ix.louds.rank
    at = raw.find(rank.tobytes())
    assert at > 0
    raw[at + rank.nbytes - 1] ^= 0x10  # the end entry of the LOUDS directory: its checksum and its count
    path.write_bytes(bytes(raw))

    def broken(_ix):
        def piece():
            raise IndexError("a piece read past its word")
        return [piece]

    monkeypatch.setattr(verify_run, "child_tasks", broken)
    with pytest.raises(IndexFormatError, match="array louds.rank is corrupt .checksum mismatch"):
        NarrowLoudsIndex.load(path, verify_device="cpu")
    ix.save(path)  # intact: the piece's error is the verdict, named as damage
    with pytest.raises(IndexFormatError, match="directories do not match its bits .IndexError: a piece read past"):
        NarrowLoudsIndex.load(path, verify_device="cpu")
