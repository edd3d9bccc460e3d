"""``load(verify=True)`` refuses structures the builder never writes, each saved with valid checksums."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_load_checks import _rebuilt

from flashtrie import IndexFormatError, KeywordSet, NarrowLoudsIndex
from flashtrie.index import checks, structure, verify_run
from flashtrie.index.bits import BitVector
from flashtrie.index.packed import PackedInts


def _saved(tmp_path, ix: NarrowLoudsIndex, **parts) -> str:
    path = str(tmp_path / "bad.ftrie")
    bad = _rebuilt(ix, **parts)
    bad.meta.update(bad._layout_meta())  # the sizes and widths of the replaced parts
    bad.save(path)
    return path


def _refused(path: str, match: str) -> None:
    for device in ("cpu", "auto"):
        with pytest.raises(IndexFormatError, match=match):
            NarrowLoudsIndex.load(path, verify_device=device)


def _problem(ix: NarrowLoudsIndex, xp=None) -> str | None:
    problem, layout = checks.layout_problem(ix)
    return problem or verify_run.content_problem(ix, layout, 2, xp=xp)


def test_swapped_sibling_labels_are_refused(tmp_path):
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 9], [3], [5]]))
    lo = ix.labels_lo.copy()
    lo[[1, 2]] = lo[[2, 1]]  # the root's children 1, 3, 5 as 3, 1, 5
    path = _saved(tmp_path, ix, labels_lo=lo)
    NarrowLoudsIndex.load(path, verify=False)  # only the full checks see it
    _refused(path, r"children of node 0 are not in increasing label order \(node 1 label 3, node 2 label 1\)")


def test_equal_sibling_labels_are_refused(tmp_path):
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences([[7, 1], [7, 2]]))
    lo = ix.labels_lo.copy()
    lo[3] = lo[2]
    _refused(_saved(tmp_path, ix, labels_lo=lo), "children of node 1 are not in increasing label order")


def test_wide_labels_out_of_order_are_refused(tmp_path):
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences([[70_000], [140_000]]))
    hi, lo = ix.labels_hi.to_array(), ix.labels_lo.copy()
    lo[1:] = lo[1:][::-1]
    _refused(_saved(tmp_path, ix, labels_lo=lo,
                    labels_hi=PackedInts.from_values(hi[::-1].copy(), width=ix.labels_hi.width)),
             "not in increasing label order \\(node 1 label 140000, node 2 label 70000\\)")


def test_the_root_marked_linked_is_refused(tmp_path):
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1], [2]]))
    linked = ix.linked.to_bools()
    linked[0] = True
    path = _saved(tmp_path, ix, linked=BitVector.from_bools(linked),
                  link_starts=PackedInts.from_values(np.array([0, 1])),
                  suffix=PackedInts.from_values(np.array([2]), width=ix.suffix.width))
    for verify in (True, False):  # a cheap check
        with pytest.raises(IndexFormatError, match="the root is marked as having an edge"):
            NarrowLoudsIndex.load(path, verify=verify)


def test_the_root_marked_terminal_is_refused(tmp_path):
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1], [2]]), ids="index")
    term = ix.terminal.to_bools()
    term[0] = True
    meta = dict(ix.meta, num_unique=ix.num_unique + 1, num_keywords=ix.num_keywords + 1)
    path = _saved(tmp_path, ix, terminal=BitVector.from_bools(term), meta=meta)
    for verify in (True, False):
        with pytest.raises(IndexFormatError, match="the root is marked as a keyword end"):
            NarrowLoudsIndex.load(path, verify=verify)


def test_the_root_with_a_label_is_refused(tmp_path):
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1], [2]]))
    lo = ix.labels_lo.copy()
    lo[0] = 4
    with pytest.raises(IndexFormatError, match="the root is marked as having an edge"):
        NarrowLoudsIndex.load(_saved(tmp_path, ix, labels_lo=lo), verify=False)


def test_a_wide_label_with_a_zero_high_part_is_refused(tmp_path):
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1], [70_000]]))
    flag = ix.hi_flag.to_bools()
    assert flag.tolist() == [False, False, True]
    flag[1] = True  # node 1 (label 1) flagged: its high part, inserted before node 2's, is 0
    hi = np.concatenate(([0], ix.labels_hi.to_array()))
    _refused(_saved(tmp_path, ix, hi_flag=BitVector.from_bools(flag),
                    labels_hi=PackedInts.from_values(hi, width=ix.labels_hi.width)),
             "node 1 is flagged as a wide label, yet its high part is 0")


def test_an_inner_node_with_one_child_that_ends_nothing_is_refused(tmp_path):
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1], [1, 2]]), ids="index")
    term = ix.terminal.to_bools()
    assert term.tolist() == [False, True, True]
    term[1] = False  # node 1: one child, no keyword end (the builder makes [1, 2] one edge)
    meta = dict(ix.meta, num_unique=1, num_keywords=1)
    _refused(_saved(tmp_path, ix, terminal=BitVector.from_bools(term), meta=meta),
             "node 1 has one child and ends no keyword")


def test_duplicate_keyword_ids_are_refused(tmp_path):
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences([[5], [1], [3]]))
    ids = ix.keyword_ids.to_array()
    assert sorted(ids.tolist()) == [0, 1, 2]
    ids[0] = ids[1]
    path = _saved(tmp_path, ix, keyword_ids=PackedInts.from_values(ids, width=ix.keyword_ids.width))
    _refused(path, "1 keyword ids appear more than once in the id map")
    bad = NarrowLoudsIndex.load(path, verify=False)
    for top in (2, 10**9):  # a bool per id, and the sorted ids where the ids are sparse
        assert structure.distinct_ids(bad, top, 2) == "1 keyword ids appear more than once in the id map"
        assert structure.distinct_ids(ix, top, 2) is None


tokens = st.one_of(st.integers(0, 5), st.integers(65_530, 65_540), st.integers(200_000, 200_003))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(tokens, min_size=1, max_size=6), min_size=1, max_size=50), st.integers(0, 10**6),
       st.sampled_from([1, 1 << 16]), st.sampled_from([1, 1 << 22]))
def test_built_indexes_pass_and_any_swap_of_siblings_is_refused(kws, pick, chunk, id_chunk):
    """What the builder writes passes (in any piece size, with the pass on whole levels too); swapping the
    labels of any two adjacent siblings is found, by both paths alike."""
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(structure, "CHILD_CHUNK_WORDS", chunk)
        mp.setattr(structure, "ID_CHUNK", id_chunk)
        assert _problem(ix) is None and _problem(ix, np) is None
        labels = ix.labels(np.arange(ix.num_nodes)).astype(np.int64)
        louds = ix.louds.to_bools()
        pairs = [c for c in range(1, ix.num_nodes - 1)
                 if louds[int(ix.louds.select1(np.array([c - 1]))[0]) + 1]]  # node c + 1 is c's sibling
        if not pairs:
            return
        c = pairs[pick % len(pairs)]
        labels[[c, c + 1]] = labels[[c + 1, c]]
        hi = labels >> 16
        bad = _rebuilt(ix, labels_lo=(labels & 0xFFFF).astype(np.uint16), hi_flag=BitVector.from_bools(hi > 0),
                       labels_hi=PackedInts.from_values(hi[hi > 0]))
        problem = _problem(bad)
        assert problem is not None and problem == _problem(bad, np)
        assert f"node {c} label {labels[c]}, node {c + 1} label {labels[c + 1]}" in problem


def test_a_select0_hint_naming_another_block_is_refused(tmp_path):
    """A hint inside the directory and in ascending order passes the cheap checks; the full checks see that
    its zero is not in the block it names."""
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences([[t] for t in range(1, 3000)]))
    hints = ix.louds.select0_hints.copy()
    k = int(np.flatnonzero(np.diff(hints.astype(np.int64)) > 0)[0]) + 1  # the first hint above the one before
    hints[k] -= 1
    louds = BitVector(ix.louds.words, ix.louds.rank, ix.louds.nbits, hints)
    path = _saved(tmp_path, ix, louds=louds)
    NarrowLoudsIndex.load(path, verify=False)  # only the full checks see it
    _refused(path, "bit vector louds: its rank directory does not match its bits")
