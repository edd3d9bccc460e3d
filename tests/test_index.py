"""Narrow-LOUDS index: every keyword reachable with its id, nothing else; building blocks; file format."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashtrie import IndexFormatError, InputError, KeywordSet, NarrowLoudsIndex
from flashtrie.index import BitVector, PackedInts, build_sort, builder
from flashtrie.limits import MAX_TOKEN


def decode_all(idx: NarrowLoudsIndex) -> dict[tuple[int, ...], int]:
    """Every keyword stored in the index (by a level-order walk of the arrays), mapped to its id."""
    out: dict[tuple[int, ...], int] = {}
    paths: dict[int, tuple[int, ...]] = {0: ()}
    nodes = np.arange(idx.num_nodes, dtype=np.int64)
    first, end = idx.child_range(nodes)
    lens = idx.edge_lengths(nodes)
    ids = idx.keyword_ids_of(nodes)
    for i in range(idx.num_nodes):  # level order: a parent is decoded before its children
        for c in range(int(first[i]), int(end[i])):
            m = int(lens[c])
            edge = idx.edge_tokens(np.full(m, c), np.arange(m)).tolist()
            paths[c] = paths[i] + tuple(edge)
            if ids[c] >= 0:
                out[paths[c]] = int(ids[c])
    assert len(paths) == idx.num_nodes
    return out


def expected(kws: list[list[int]]) -> dict[tuple[int, ...], int]:
    exp: dict[tuple[int, ...], int] = {}
    for i, k in enumerate(kws):
        exp.setdefault(tuple(k), i)
    return exp


def check_index(kws: list[list[int]]) -> NarrowLoudsIndex:
    idx = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    exp = expected(kws)
    assert decode_all(idx) == exp
    assert idx.num_unique == len(exp) and idx.duplicates == len(kws) - len(exp)
    for k, i in exp.items():
        assert idx.lookup(k) == i
    prefixes = {k[:j] for k in exp for j in range(1, len(k) + 1)}
    for p in prefixes:
        assert idx.walk(p) is not None
        if p not in exp:
            assert idx.lookup(p) == -1
    # children of every node are sorted by label, strictly
    nodes = np.arange(idx.num_nodes)
    first, end = idx.child_range(nodes)
    labels = idx.labels(np.arange(1, idx.num_nodes))
    for i in range(idx.num_nodes):
        lab = labels[first[i] - 1 : end[i] - 1]
        assert np.all(np.diff(lab.astype(np.int64)) > 0)
    return idx


tokens = st.one_of(st.integers(0, 5), st.integers(65_530, 65_540), st.integers(MAX_TOKEN - 3, MAX_TOKEN),
                   st.integers(0, MAX_TOKEN))
keyword_lists = st.lists(st.lists(tokens, min_size=1, max_size=10), min_size=1, max_size=30)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(keyword_lists)
def test_every_keyword_reachable_hypothesis(kws):
    check_index(kws)


def _arrays(idx: NarrowLoudsIndex) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in idx.arrays.items()}


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(keyword_lists, st.integers(2, 6))
def test_build_split_across_threads_equals_one_part(kws, cores):
    # the builder splits keywords by first token into parts built on threads; force the split on small
    # inputs and check it gives the very same arrays as one part
    ks = KeywordSet.from_sequences(kws)
    one = _arrays(NarrowLoudsIndex.build(ks))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(builder, "MIN_PART", 1)
        mp.setattr(builder, "_cores", lambda: cores)
        split = NarrowLoudsIndex.build(ks)
        assert decode_all(split) == expected(kws)
    got = _arrays(split)
    assert got.keys() == one.keys()
    for name in one:
        np.testing.assert_array_equal(got[name], one[name], err_msg=name)


@settings(max_examples=200, deadline=None)
@given(keyword_lists, st.sampled_from([0.0, 0.25, 1.0]), st.booleans())
def test_sort_and_common_prefixes_match_python(kws, follow_below, subset):
    # every pair a column at a time (0.0, the GPU's way), the pairs still equal followed apart (1.0), and
    # the CPU's mix; all keywords or every other one (a part of the CPU's split)
    ks = KeywordSet.from_sequences(kws)
    starts, lens = ks.offsets[:-1], ks.lengths
    ids = np.arange(0, len(kws), 2, dtype=np.int64) if subset else None
    order = build_sort.sort_keywords(np, ks.tokens, starts, lens, int(lens.max()), ids)
    chosen = range(0, len(kws), 2) if subset else range(len(kws))
    assert order.tolist() == sorted(chosen, key=lambda i: (kws[i], i))
    lcp = build_sort.neighbour_lcp(np, ks.tokens, starts[order], lens[order], follow_below)
    exp = [0]
    for a, b in zip(order[:-1].tolist(), order[1:].tolist(), strict=True):
        x, y = kws[a], kws[b]
        n = 0
        while n < min(len(x), len(y)) and x[n] == y[n]:
            n += 1
        exp.append(n)
    assert lcp.tolist() == exp


def test_public_flashtrie_defect_chain_past_internal_node():
    # the public FlashTrie loses keys that continue past a compressed edge at an internal node
    kws = [[1, 2, 3, 4], [1, 2, 3, 5], [1, 2], [1, 2, 3, 4, 9, 9, 9], [1, 2, 3, 4, 9, 9, 8]]
    idx = check_index(kws)
    assert idx.lookup([1, 2, 3]) == -1
    assert idx.walk([1, 2, 3, 4, 9]) is not None
    assert idx.walk([1, 2, 3, 6]) is None


@pytest.mark.slow
def test_generated_library_exhaustive():
    rng = np.random.default_rng(7)
    # shared prefixes: draw keywords as extensions of earlier ones
    kws: list[list[int]] = []
    for _ in range(3000):
        if kws and rng.random() < 0.6:
            base = kws[rng.integers(len(kws))]
            cut = int(rng.integers(0, len(base) + 1))
            k = base[:cut] + rng.integers(0, 50, size=int(rng.integers(1, 5))).tolist()
        else:
            k = rng.integers(0, 2**32 - 1, size=int(rng.integers(1, 9)), dtype=np.int64).tolist()
        kws.append(k)
    check_index(kws)


def test_huge_fanout_and_long_keywords():
    fan = [[int(t)] for t in np.random.default_rng(1).permutation(200_000)[:100_000]]
    long_kw = [list(range(64)), list(range(63)) + [1000], list(range(5, 69))]
    kws = fan + long_kw + [[MAX_TOKEN] * 3, [MAX_TOKEN, MAX_TOKEN - 1]]
    idx = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    first, end = idx.child_range(np.array([0]))
    assert end[0] - first[0] >= 100_000
    for i in list(range(0, 100_000, 997)) + list(range(len(fan), len(kws))):
        assert idx.lookup(kws[i]) == i
    assert idx.walk([200_001]) is None
    assert idx.lookup(list(range(62))) == -1
    assert idx.max_keyword_length == 64


@pytest.mark.slow
def test_random_non_keywords_are_not_found():
    rng = np.random.default_rng(3)
    kws = [rng.integers(0, 1000, size=int(rng.integers(1, 6))).tolist() for _ in range(2000)]
    idx = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    exp = expected(kws)
    prefixes = {k[:j] for k in exp for j in range(1, len(k) + 1)}
    for _ in range(3000):
        q = tuple(rng.integers(0, 1200, size=int(rng.integers(1, 6))).tolist())
        st_ = idx.walk(q)
        assert (st_ is not None) == (q in prefixes)
        assert idx.lookup(q) == exp.get(q, -1)


def test_build_refuses_bad_input():
    with pytest.raises(InputError, match="keywords"):
        NarrowLoudsIndex.build([[1, 2]])  # type: ignore[arg-type]
    with pytest.raises(InputError, match="empty"):
        NarrowLoudsIndex.build(KeywordSet.from_sequences([]))


def test_stats():
    idx = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2, 3], [1, 2, 3], [1, 70000], [5]]))
    s = idx.stats()
    assert s["keywords"] == 4 and s["unique_keywords"] == 3 and s["duplicates"] == 1
    assert s["bytes"] == sum(s["arrays"].values()) > 0
    assert s["high_label_nodes"] == 1


# ---------------------------------------------------------------- building blocks


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 5000), st.floats(0.0, 1.0), st.integers(0, 2**31))
def test_bitvector_rank_select(n, p, seed):
    b = np.random.default_rng(seed).random(n) < p
    bv = BitVector.from_bools(b, with_select0=True)
    assert np.array_equal(bv.rank1(np.arange(n + 1)), np.concatenate(([0], np.cumsum(b))))
    zeros, ones = np.flatnonzero(~b), np.flatnonzero(b)
    assert np.array_equal(bv.select0(np.arange(zeros.size)), zeros)
    assert np.array_equal(bv.select1(np.arange(ones.size)), ones)
    assert np.array_equal(bv.to_bools(), b)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 3000)), min_size=1, max_size=12))
def test_bitvector_runs_across_blocks_and_sub_blocks(runs):
    """Long runs of ones or zeros: whole 1024-bit blocks and 256-bit sub-blocks of one value, empty blocks."""
    b = np.concatenate([np.full(k, v) for v, k in runs])
    bv = BitVector.from_bools(b, with_select0=True)
    assert np.array_equal(bv.rank1(np.arange(b.size + 1)), np.concatenate(([0], np.cumsum(b))))
    zeros, ones = np.flatnonzero(~b), np.flatnonzero(b)
    assert np.array_equal(bv.select0(np.arange(zeros.size)), zeros)
    assert np.array_equal(bv.select1(np.arange(ones.size)), ones)


def test_rank_entry_layout():
    """docs/index-format.md: bits 0-33 ones before the block, 34-43 / 44-53 / 54-63 ones in its words
    [0, 4) / [0, 8) / [0, 12); the full 768 ones of 12 words fit the 10-bit counts."""
    b = np.zeros(3 * 1024 + 5, dtype=bool)
    b[:1024] = True  # block 0 all ones
    b[1024 + 256 : 1024 + 300] = True  # block 1: 44 ones in its sub-block 1
    b[2048 + 1000] = True  # block 2: one in its sub-block 3
    bv = BitVector.from_bools(b)
    e = [int(x) for x in bv.rank]
    assert [x & (2**34 - 1) for x in e] == [0, 1024, 1068, 1069, 1069]  # 4 blocks (50 words, padded), the end
    assert [(e[0] >> s) & 1023 for s in (34, 44, 54)] == [256, 512, 768]
    assert [(e[1] >> s) & 1023 for s in (34, 44, 54)] == [0, 44, 44]
    assert [(e[2] >> s) & 1023 for s in (34, 44, 54)] == [0, 0, 0]


def test_rank_directory_limit_is_a_clear_error(monkeypatch):
    from flashtrie.index import bits

    monkeypatch.setattr(bits, "ABS_BITS", 10)  # a 34-bit count overflows the same way at 2**34 ones
    with pytest.raises(InputError, match=r"2,000 ones in 2,000 bits is over the rank directory's limit of 2\*\*10 - 1"):
        BitVector.from_bools(np.ones(2000, dtype=bool))
    BitVector.from_bools(np.ones(1023, dtype=bool))


@pytest.mark.parametrize("nbits", [0, 1, 63, 64, 65, 191, 192, 193, 255, 256, 257, 1000, 1023, 1024, 1025, 5000])
def test_bitvector_sizes_match_index_format_doc(nbits):
    """docs/index-format.md: words is uint64[16 * ceil((ceil(nbits/64) + 1) / 16)], rank uint64[nwords/16 + 1]."""
    bv = BitVector.from_bools(np.ones(nbits, dtype=bool), with_select0=True)
    nwords = 16 * -(-(-(-nbits // 64) + 1) // 16)
    assert bv.words.dtype == np.uint64 and bv.words.size == nwords
    assert bv.words.size * 64 >= nbits + 64  # at least one whole zero word of padding
    assert not bv.words[(nbits + 63) // 64:].any()
    assert bv.rank.dtype == np.uint64 and bv.rank.size == nwords // 16 + 1
    doc = (Path(__file__).resolve().parents[1] / "docs" / "index-format.md").read_text()
    assert "`uint64[nwords]` with `nwords = 16 * ceil((ceil(nbits/64) + 1) / 16)`" in doc
    assert "ceil(nbits/64) + 1]" not in doc


def test_select0_long_runs_of_ones():
    b = np.ones(300_000, dtype=bool)
    b[[0, 5, 150_000, 299_999]] = False
    bv = BitVector.from_bools(b, with_select0=True)
    assert bv.select0(np.arange(4)).tolist() == [0, 5, 150_000, 299_999]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 32), st.integers(0, 500), st.integers(0, 2**31))
def test_packed_ints_round_trip(width, n, seed):
    v = np.random.default_rng(seed).integers(0, 2**width, size=n, dtype=np.uint64)
    p = PackedInts.from_values(v, width)
    assert np.array_equal(p.to_array(), v.astype(np.int64))


# ---------------------------------------------------------------- file format


@pytest.fixture()
def small_index() -> NarrowLoudsIndex:
    rng = np.random.default_rng(11)
    kws = [rng.integers(0, 100_000, size=int(rng.integers(1, 7))).tolist() for _ in range(500)]
    return NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))


def test_save_load_round_trip(tmp_path, small_index):
    path = tmp_path / "a.ftrie"
    small_index.save(path)
    loaded = NarrowLoudsIndex.load(path)
    for name, a in small_index.arrays.items():
        assert np.array_equal(loaded.arrays[name], a), name
    assert isinstance(loaded.labels_lo, np.memmap) or isinstance(loaded.labels_lo.base, np.memmap)
    assert decode_all(loaded) == decode_all(small_index)
    assert [p.name for p in tmp_path.iterdir()] == ["a.ftrie"]  # no temporary file left behind


def test_load_refuses_corrupt_truncated_foreign_future(tmp_path, small_index):
    path = tmp_path / "a.ftrie"
    small_index.save(path)
    raw = path.read_bytes()
    bad = tmp_path / "bad.ftrie"

    bad.write_bytes(raw[:-100])
    with pytest.raises(IndexFormatError, match="truncated"):
        NarrowLoudsIndex.load(bad)
    flipped = bytearray(raw)
    flipped[-70] ^= 0x40
    bad.write_bytes(bytes(flipped))
    with pytest.raises(IndexFormatError, match="corrupt"):
        NarrowLoudsIndex.load(bad)
    bad.write_bytes(b"PK\x03\x04" + raw[4:])
    with pytest.raises(IndexFormatError, match="not a flashtrie index"):
        NarrowLoudsIndex.load(bad)
    bad.write_bytes(raw[:4])
    with pytest.raises(IndexFormatError, match="too short"):
        NarrowLoudsIndex.load(bad)
    future = bytearray(raw)
    future[8:12] = struct.pack("<I", 99)
    bad.write_bytes(bytes(future))
    with pytest.raises(IndexFormatError, match="newer"):
        NarrowLoudsIndex.load(bad)
    hdr = bytearray(raw)
    hdr[30] ^= 0x01  # inside the JSON header
    bad.write_bytes(bytes(hdr))
    with pytest.raises(IndexFormatError, match="header"):
        NarrowLoudsIndex.load(bad)
    with pytest.raises(IndexFormatError, match="no such"):
        NarrowLoudsIndex.load(tmp_path / "missing.ftrie")
    assert zlib.crc32(raw) == zlib.crc32(path.read_bytes())


def test_failed_save_keeps_old_file(tmp_path, small_index, monkeypatch):
    path = tmp_path / "a.ftrie"
    small_index.save(path)
    before = path.read_bytes()

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr("flashtrie.index.fileformat.np.ascontiguousarray", boom)
    with pytest.raises(OSError):
        small_index.save(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["a.ftrie"]


def _rewrite_header(raw: bytes, edit) -> bytes:
    """``raw`` with its JSON header changed by ``edit(doc)`` and a valid header checksum (a crafted file)."""
    import json

    magic, version, _, n = struct.unpack_from("<8sIIQ", raw)
    doc = json.loads(raw[24 : 24 + n])
    edit(doc)
    head = json.dumps(doc, sort_keys=True).encode()
    old_start = -(-(24 + n) // 64) * 64
    new_start = -(-(24 + len(head)) // 64) * 64
    prefix = struct.pack("<8sIIQ", magic, version, zlib.crc32(head) & 0xFFFF_FFFF, len(head)) + head
    return prefix + b"\0" * (new_start - len(prefix)) + raw[old_start:]


@pytest.mark.parametrize("field, value, match", [
    ("suffix.width", 5, "inconsistent index"),
    ("labels_hi.width", 40, "inconsistent index"),
    ("num_nodes", 3, "inconsistent index"),
    ("louds.nbits", "x", "corrupt metadata"),
    ("keyword_ids.size", 1, "inconsistent index"),
])
def test_load_refuses_crafted_metadata(tmp_path, small_index, field, value, match):
    path = tmp_path / "a.ftrie"
    small_index.save(path)
    bad = tmp_path / "bad.ftrie"
    bad.write_bytes(_rewrite_header(path.read_bytes(), lambda d: d["meta"].__setitem__(field, value)))
    with pytest.raises(IndexFormatError, match=match):
        NarrowLoudsIndex.load(bad)


def test_load_refuses_bad_array_table_and_trailing_bytes(tmp_path, small_index):
    path = tmp_path / "a.ftrie"
    small_index.save(path)
    raw = path.read_bytes()
    bad = tmp_path / "bad.ftrie"
    bad.write_bytes(raw + b"\0" * 64)
    with pytest.raises(IndexFormatError, match="unexpected bytes after the last array"):
        NarrowLoudsIndex.load(bad)

    def shift(d):
        d["arrays"][1]["offset"] += 64

    bad.write_bytes(_rewrite_header(raw, shift))
    with pytest.raises(IndexFormatError, match="bad array entry"):
        NarrowLoudsIndex.load(bad)

    def bad_shape(d):
        d["arrays"][0]["shape"] = ["3"]

    bad.write_bytes(_rewrite_header(raw, bad_shape))
    with pytest.raises(IndexFormatError, match="bad array entry"):
        NarrowLoudsIndex.load(bad)
    rank = next(i for i, e in enumerate(small_index.arrays) if e == "louds.rank")

    def corrupt_rank(d):
        d["arrays"][rank]["crc32s"] = [0]

    bad.write_bytes(_rewrite_header(raw, corrupt_rank))  # the table lies about a checksum only
    with pytest.raises(IndexFormatError, match="checksum"):
        NarrowLoudsIndex.load(bad)
    assert NarrowLoudsIndex.load(bad, verify=False).num_nodes == small_index.num_nodes


@pytest.mark.parametrize("bad", [[1.5, 2], ["1"], [True], [2**64], [-1], [MAX_TOKEN + 1]])
def test_walk_and_lookup_refuse_non_tokens(small_index, bad):
    with pytest.raises(InputError, match=r"tokens\[0\]"):
        small_index.lookup(bad)
    with pytest.raises(InputError, match=r"tokens\[0\]"):
        small_index.walk(bad)


def test_saved_file_mode_and_symlink(tmp_path, small_index):
    import os

    path = tmp_path / "a.ftrie"
    umask = os.umask(0o022)
    try:
        small_index.save(path)
        assert path.stat().st_mode & 0o777 == 0o644
        path.chmod(0o640)
        small_index.save(path)  # replacing keeps the old file's permissions
        assert path.stat().st_mode & 0o777 == 0o640
        link = tmp_path / "current.ftrie"
        link.symlink_to(path)
        small_index.save(link)  # the link stays a link; the file it points to is replaced
        assert link.is_symlink() and NarrowLoudsIndex.load(link).num_nodes == small_index.num_nodes
    finally:
        os.umask(umask)


@pytest.mark.parametrize("n", [254, 255, 256, 511, 767])
def test_save_load_at_select0_hint_boundaries(tmp_path, n):
    # n one-token keywords: n + 1 nodes, n + 1 LOUDS zeros; 256 zeros fill a select0 hint exactly
    idx = NarrowLoudsIndex.build(KeywordSet.from_sequences([[t] for t in range(n)]))
    path = tmp_path / "a.ftrie"
    idx.save(path)
    for verify in (True, False):
        loaded = NarrowLoudsIndex.load(path, verify=verify)
        assert [loaded.lookup([t]) for t in (0, n - 1)] == [0, n - 1]


def test_damaged_links_refused_even_without_verify(tmp_path, small_index):
    import json

    assert small_index.linked.num_ones > 0
    path = tmp_path / "a.ftrie"
    small_index.save(path)
    raw = bytearray(path.read_bytes())
    _, _, _, n = struct.unpack_from("<8sIIQ", raw)
    entry = next(e for e in json.loads(raw[24 : 24 + n])["arrays"] if e["name"] == "link_starts.words")
    raw[-(-(24 + n) // 64) * 64 + entry["offset"]] ^= 0x01  # link_starts[0] becomes odd: no longer 0
    bad = tmp_path / "bad.ftrie"
    bad.write_bytes(bytes(raw))
    with pytest.raises(IndexFormatError, match="link_starts do not cover the suffix store"):
        NarrowLoudsIndex.load(bad, verify=False)


def test_header_checksum_is_checked(tmp_path, small_index):
    path = tmp_path / "a.ftrie"
    small_index.save(path)
    raw = bytearray(path.read_bytes())
    i = raw.index(b'"build_seconds": ') + len(b'"build_seconds": ')
    raw[i] = ord("7") if raw[i] != ord("7") else ord("8")  # still valid JSON, same length
    bad = tmp_path / "bad.ftrie"
    bad.write_bytes(bytes(raw))
    with pytest.raises(IndexFormatError, match="checksum"):
        NarrowLoudsIndex.load(bad)


def test_rank_directory_recomputed_when_verifying(tmp_path, small_index):
    import json

    path = tmp_path / "a.ftrie"
    small_index.save(path)
    raw = bytearray(path.read_bytes())
    _, _, _, n = struct.unpack_from("<8sIIQ", raw)
    table = json.loads(raw[24 : 24 + n])["arrays"]
    entry = next(e for e in table if e["name"] == "louds.rank")
    start = -(-(24 + n) // 64) * 64 + entry["offset"]
    raw[start + 5] ^= 0x01  # block 0's count of ones in its first word (bits 40-47): counts stay consistent
    crc = zlib.crc32(bytes(raw[start : start + entry["nbytes"]])) & 0xFFFF_FFFF

    def fix(d):
        next(e for e in d["arrays"] if e["name"] == "louds.rank")["crc32s"] = [crc]

    bad = tmp_path / "bad.ftrie"
    bad.write_bytes(_rewrite_header(bytes(raw), fix))
    with pytest.raises(IndexFormatError, match="inconsistent index"):
        NarrowLoudsIndex.load(bad)


@pytest.mark.parametrize("edit, match", [
    (lambda d: d["meta"].__setitem__("labels_hi.width", 17), "labels_hi.width = 17 .* labels_hi.words holds"),
    (lambda d: d["meta"].__setitem__("num_keywords", d["meta"]["num_keywords"] - 1), "inconsistent index"),
    (lambda d: d["arrays"][0].__setitem__("shape", [d["arrays"][0]["shape"][0] + 1]), "does not match"),
])
def test_crafted_headers_beyond_sizes(tmp_path, small_index, edit, match):
    path = tmp_path / "a.ftrie"
    small_index.save(path)
    bad = tmp_path / "bad.ftrie"
    bad.write_bytes(_rewrite_header(path.read_bytes(), edit))
    with pytest.raises(IndexFormatError, match=match):
        NarrowLoudsIndex.load(bad)


def test_save_failing_midway_keeps_old_file(tmp_path, small_index, monkeypatch):
    path = tmp_path / "a.ftrie"
    small_index.save(path)
    before = path.read_bytes()
    calls = []

    class Boom(OSError):
        pass

    real = np.ascontiguousarray

    def flaky(a, *args, **kw):  # the writer gets some arrays out, then fails (like a full disk)
        calls.append(1)
        if len(calls) > 2 * len(small_index.arrays) + 3:
            raise Boom("disk full")
        return real(a, *args, **kw)

    monkeypatch.setattr("flashtrie.index.fileformat.np.ascontiguousarray", flaky)
    with pytest.raises(Boom):
        small_index.save(path)
    assert len(calls) > 2 * len(small_index.arrays) + 3  # it failed inside the write, not before
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["a.ftrie"]


def test_walk_and_lookup_at_wide_nodes():
    """Nodes of hundreds of children with labels on both sides of 2**16 and near 2**32 (the binary search of a
    wide child range), and of a few: every keyword found with its id, every near miss refused."""
    rng = np.random.default_rng(11)
    roots = np.unique(np.concatenate([rng.integers(0, 2**17, 300), rng.integers(2**32 - 500, 2**32 - 1, 40)]))
    under = np.unique(rng.integers(0, 2**20, 200))
    kws = [[int(r)] for r in roots] + [[int(roots[3]), int(u)] for u in under] + [[int(roots[5]), 7, 8]]
    ks = KeywordSet.from_sequences(kws)
    index = NarrowLoudsIndex.build(ks)
    want = {tuple(int(t) for t in ks[i]): i for i in range(len(ks))}
    for kw, i in want.items():
        assert index.lookup(list(kw)) == i
        assert index.walk(list(kw)) is not None
    taken = set(int(r) for r in roots)
    for x in (int(roots[0]) - 1, int(roots[-1]) + 1, 2**16, 2**32 - 2, *(int(r) + 1 for r in roots[:50])):
        if 0 <= x <= 2**32 - 2 and x not in taken:
            assert index.walk([x]) is None and index.lookup([x]) == -1
    for u in (int(under[0]) - 1, int(under[-1]) + 1, *(int(v) + 1 for v in under[:40])):
        if u >= 0 and u not in set(int(v) for v in under):
            assert index.walk([int(roots[3]), u]) is None
    assert index.lookup([int(roots[5]), 7]) == -1 and index.walk([int(roots[5]), 7]) is not None
