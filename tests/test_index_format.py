"""The index file format (version 3): older and foreign files refused, hardened reading of crafted headers and
arrays, atomic saves."""

from __future__ import annotations

import copy
import json
import os
import struct
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flashtrie import IndexFormatError, InputError, KeywordSet, NarrowLoudsIndex
from flashtrie.index import fileformat
from flashtrie.io_util import STALE_TEMP_SECONDS, atomic_write, remove_stale_temporaries
from flashtrie.limits import MAX_KEYWORDS

DATA = Path(__file__).resolve().parent / "data"
PREFIX = struct.Struct("<8sIIQ")


class Saved(tuple):
    def __repr__(self) -> str:  # keep hypothesis' reports short
        return f"Saved({self[0]}, {len(self[1])} bytes)"


@pytest.fixture()
def saved(tmp_path) -> tuple[Path, bytes]:
    rng = np.random.default_rng(11)
    kws = [rng.integers(0, 100_000, size=int(rng.integers(1, 7))).tolist() for _ in range(300)]
    path = tmp_path / "a.ftrie"
    NarrowLoudsIndex.build(KeywordSet.from_sequences(kws)).save(path)
    return Saved((path, path.read_bytes()))


def split(raw: bytes) -> tuple[dict, bytes]:
    _, _, _, n = PREFIX.unpack_from(raw)
    return json.loads(raw[24 : 24 + n]), raw[-(-(24 + n) // 64) * 64 :]


def assemble(doc_or_header: dict | bytes, data: bytes, version: int = fileformat.FORMAT_VERSION) -> bytes:
    """A file with this header (a valid header checksum) and array area."""
    head = doc_or_header if isinstance(doc_or_header, bytes) else json.dumps(doc_or_header).encode()
    prefix = PREFIX.pack(b"FLTRIE\x00\x01", version, zlib.crc32(head) & 0xFFFF_FFFF, len(head)) + head
    return prefix + b"\0" * (-len(prefix) % 64) + data


def with_array(raw: bytes, name: str, edit) -> bytes:
    """``raw`` with array ``name``'s bytes changed by ``edit(bytearray)`` and its checksums fixed."""
    doc, data = split(raw)
    data = bytearray(data)
    e = next(e for e in doc["arrays"] if e["name"] == name)
    part = bytearray(data[e["offset"] : e["offset"] + e["nbytes"]])
    edit(part)
    data[e["offset"] : e["offset"] + e["nbytes"]] = part
    e["crc32s"] = [zlib.crc32(bytes(part[i : i + 8 << 20])) for i in range(0, len(part), 8 << 20)]
    return assemble(doc, bytes(data))


def refused(tmp_path: Path, raw: bytes, match: str = "", verify: bool = True) -> str:
    bad = tmp_path / "bad.ftrie"
    bad.write_bytes(raw)
    with pytest.raises(IndexFormatError, match=match) as e:
        NarrowLoudsIndex.load(bad, verify=verify)
    return str(e.value)


def test_v1_file_is_refused_with_how_to_rebuild():
    # tests/data/v1-small.ftrie was written by the format-1 code (main at 59cae3b)
    with pytest.raises(IndexFormatError, match=r"version 1 is no longer read.*flashtrie build KEYWORDS -o FILE"):
        NarrowLoudsIndex.load(DATA / "v1-small.ftrie")


def test_v2_file_is_refused_with_how_to_rebuild():
    # tests/data/v2-small.ftrie was written by the format-2 code (main at 6f9f5bf): it stores node_flags
    with pytest.raises(IndexFormatError, match=r"version 2 is no longer read \(this flashtrie reads version 3\); "
                                               r"rebuild it with `flashtrie build KEYWORDS -o FILE`"):
        NarrowLoudsIndex.load(DATA / "v2-small.ftrie")
    head = (DATA / "v2-small.ftrie").read_bytes()
    assert PREFIX.unpack_from(head)[1] == 2 and b'"node_flags"' in head


def test_a_stored_node_flags_array_is_refused(tmp_path, saved):
    """Format 3 derives the flags: a version-3 file that carries a node_flags array is foreign."""
    _, raw = saved
    doc, data = split(raw)
    assert "node_flags" not in {e["name"] for e in doc["arrays"]}
    last = doc["arrays"][-1]
    doc["arrays"].append({"name": "node_flags", "dtype": "uint32", "shape": [16], "nbytes": 64,
                          "offset": last["offset"] + -(-last["nbytes"] // 64) * 64, "crc32s": [zlib.crc32(b"\0" * 64)]})
    refused(tmp_path, assemble(doc, data + b"\0" * 64), "unknown array 'node_flags'")


def test_paths_that_are_not_index_files(tmp_path):
    with pytest.raises(IndexFormatError, match="empty path"):
        NarrowLoudsIndex.load("")
    with pytest.raises(IndexFormatError, match="is a directory"):
        NarrowLoudsIndex.load(tmp_path)
    with pytest.raises(IndexFormatError, match="is a directory"):
        NarrowLoudsIndex.load(".")
    with pytest.raises(IndexFormatError, match="is not a regular file"):
        NarrowLoudsIndex.load("/dev/zero")
    with pytest.raises(IndexFormatError, match="no such index file"):
        NarrowLoudsIndex.load(tmp_path / "missing")
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1]]))
    with pytest.raises(InputError, match="empty path"):
        ix.save("")
    with pytest.raises(InputError, match="is a directory"):
        ix.save(tmp_path)


def test_copy_load_reads_into_memory(saved):
    path, _ = saved
    mapped = NarrowLoudsIndex.load(path)
    copied = NarrowLoudsIndex.load(path, copy=True)
    for name, a in mapped.arrays.items():
        b = copied.arrays[name]
        np.testing.assert_array_equal(a, b)
        assert not isinstance(b, np.memmap) and not isinstance(b.base, np.memmap) and not b.flags.writeable
    path.write_bytes(b"")  # the copy no longer depends on the file
    assert copied.lookup(copied.keyword(0).tolist()) == 0


def test_sparse_terabyte_array_refused_before_any_checksum(tmp_path, saved, monkeypatch):
    _, raw = saved
    doc, data = split(raw)
    e = next(e for e in doc["arrays"] if e["name"] == "suffix.words")
    grow = (1 << 40) // 8
    e["shape"] = [e["shape"][0] + grow]
    e["nbytes"] += 8 * grow
    e["crc32s"] = [0] * -(-e["nbytes"] // (8 << 20))
    for later in doc["arrays"][doc["arrays"].index(e) + 1 :]:
        later["offset"] += 8 * grow
    doc["meta"]["suffix.size"] = (e["nbytes"] - 8) * 8 // doc["meta"]["suffix.width"]
    bad = tmp_path / "sparse.ftrie"
    head = assemble(doc, b"")
    with open(bad, "wb") as f:
        f.write(head)
    os.truncate(bad, len(head) + sum(-(-x["nbytes"] // 64) * 64 for x in doc["arrays"]))  # a 1 TB hole
    assert bad.stat().st_size > 1 << 40 and bad.stat().st_blocks * 512 < 1 << 20
    calls = []
    monkeypatch.setattr(fileformat.IndexFile, "verify", lambda self, w=None: calls.append(1))
    with pytest.raises(IndexFormatError, match="inconsistent index"):
        NarrowLoudsIndex.load(bad)
    assert calls == []  # refused by the cheap checks: no array was checksummed


# every crafted header below has a valid header checksum
def _meta(field, value):
    return lambda d: d["meta"].__setitem__(field, value)


def _entry(k, field, value):
    return lambda d: d["arrays"][k].__setitem__(field, value)


CRAFTED = {
    "infinity count": (_meta("num_nodes", float("inf")), "corrupt header"),
    "nan width": (_meta("labels_hi.width", float("nan")), "corrupt header"),
    "float count": (_meta("louds.nbits", 12.0), "corrupt metadata"),
    "bool count": (_meta("max_keyword_length", True), "corrupt metadata"),
    "string count": (_meta("num_unique", "7"), "corrupt metadata"),
    "negative count": (_meta("max_degree", -1), "corrupt metadata"),
    "huge float": (_meta("max_keyword_length", 1e300), "corrupt metadata"),
    "huge int": (_meta("num_keywords", 2**64 + 344), "corrupt header"),
    "bigger than int64 wraps": (_meta("num_nodes", 2**62), "corrupt metadata"),
    "long keyword claim": (_meta("max_keyword_length", 10**9), "max_keyword_length = 1000000000, but the trie "
                                                               "height 2 and its 744 tail tokens allow at most 746"),
    "long keyword claim as float": (_meta("max_keyword_length", 1e9), "corrupt metadata"),
    "keyword claim one longer": (lambda d: d["meta"].__setitem__("max_keyword_length", 7), "longest keyword has 6"),
    "short keyword claim": (_meta("max_keyword_length", 1), "max_keyword_length = 1, but a path of the trie is "
                                                            r"longer \(trie height over 1, longest edge"),
    "max_token too small": (lambda d: d["meta"].__setitem__("max_token", d["meta"]["max_token"] // 2), "max_token"),
    "max_degree": (lambda d: d["meta"].__setitem__("max_degree", d["meta"]["max_degree"] + 1), "max_degree = 298"),
    "max_degree_nonroot": (lambda d: d["meta"].__setitem__("max_degree_nonroot", 0),
                           "max_degree_nonroot = 0, but the LOUDS gives 2"),
    "id order": (_meta("id_order", "sorted"), "id_order"),
    "index ids with a map": (_meta("id_order", "index"), "id_order = 'index', but the file has an id map"),
    "unknown meta": (_meta("extra", 1), "unknown"),
    "missing meta": (lambda d: d["meta"].pop("max_degree"), "missing"),
    "shape wraps int64": (_entry(0, "shape", [8, 2**61 + 43]), "is not one count"),
    "shape entry over 2**64": (_entry(0, "shape", [2**64 + 344]), "corrupt header"),
    "negative shape": (_entry(0, "shape", [-4]), "is not one count"),
    "bool shape": (_entry(0, "shape", [True]), "is not one count"),
    "infinite offset": (_entry(1, "offset", float("inf")), "corrupt header"),
    "string nbytes": (_entry(1, "nbytes", "64"), "does not match"),
    "dtype": (_entry(0, "dtype", "float64"), "dtype"),
    "duplicate name": (lambda d: d["arrays"][1].__setitem__("name", d["arrays"][0]["name"]), "appears twice"),
    "unknown name": (_entry(2, "name", "louds.extra"), "unknown array"),
    "missing array": (lambda d: d["arrays"].pop(), "missing arrays"),
    "checksum list": (_entry(0, "crc32s", [1, 2]), "checksums"),
    "checksum algorithm": (lambda d: d["checksum"].__setitem__("algorithm", "md5"), "checksum"),
    "extra top-level field": (lambda d: d.__setitem__("x", 1), "fields"),
    "format name": (lambda d: d.__setitem__("format", "other"), "not a narrow-LOUDS index"),
}


# a smaller degree below the root than the root's, a longest keyword one too long: only the bits tell
VERIFY_ONLY = {"max_degree_nonroot", "keyword claim one longer"}


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_crafted_headers_get_index_format_errors(tmp_path, saved, name):
    _, raw = saved
    edit, match = CRAFTED[name]
    doc, data = split(raw)
    edit(doc)
    if name == "missing array":
        data = data[: doc["arrays"][-1]["offset"] + -(-doc["arrays"][-1]["nbytes"] // 64) * 64]
    crafted = assemble(json.dumps(doc, allow_nan=True).encode(), data)
    for verify in (True, False) if name not in VERIFY_ONLY else (True,):
        refused(tmp_path, crafted, match, verify=verify)


def test_verify_false_trusts_what_only_the_bits_can_disprove(tmp_path, saved):
    _, raw = saved
    doc, data = split(raw)
    CRAFTED["max_degree_nonroot"][0](doc)
    bad = tmp_path / "bad.ftrie"
    bad.write_bytes(assemble(doc, data))
    assert NarrowLoudsIndex.load(bad, verify=False).max_degree_nonroot == 0  # documented: trusted files only


@pytest.mark.parametrize("header, match", [
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"meta": {"a": 1, "a": 2}}', "duplicate key"),
    (b'{"version": NaN}', "NaN is not allowed"),
    (b"\xff\xfe", "corrupt header"),
    (b'{"format": "flashtrie.narrow-louds", "version": 3, "x": 1' + b"1" * 5000 + b"}", "out of range"),
])
def test_hostile_json_headers(tmp_path, header, match):
    refused(tmp_path, assemble(header, b""), match)


def test_header_length_over_the_limit(tmp_path):
    raw = PREFIX.pack(b"FLTRIE\x00\x01", 3, 0, 1 << 40) + b"\0" * 40
    refused(tmp_path, raw, "over the limit")


@pytest.mark.parametrize("array, edit, match", [
    ("terminal.words", lambda b: b.__setitem__(len(b) - 1, 0x80), "bits set past its end"),
    ("keyword_ids.words", lambda b: b.__setitem__(len(b) - 1, 0x80), "keyword_ids.size = 300, but .* bits set past"),
    ("louds.select0", lambda b: b.__setitem__(0, 0xFF), "select0 hints"),
])
def test_arrays_crafted_with_valid_checksums(tmp_path, saved, array, edit, match):
    _, raw = saved
    refused(tmp_path, with_array(raw, array, edit), match)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(["louds.rank", "louds.select0", "hi_flag.rank", "linked.rank", "terminal.rank",
                        "link_starts.words", "louds.words", "terminal.words", "linked.words", "labels_hi.words"]),
       st.integers(0, 10**6), st.integers(0, 255))
def test_fuzz_array_bytes_with_valid_checksums_only_index_format_errors(tmp_path, saved, name, where, value):
    _, raw = saved

    def edit(b: bytearray) -> None:
        b[where % len(b)] = value

    bad = tmp_path / "fuzz.ftrie"
    bad.write_bytes(with_array(raw, name, edit))
    for verify in (True, False):
        try:
            NarrowLoudsIndex.load(bad, verify=verify)
        except IndexFormatError:
            pass


def test_every_array_is_covered_by_checksums_and_padding(tmp_path, saved):
    _, raw = saved
    doc, data = split(raw)
    start = len(raw) - len(data)
    for e in doc["arrays"]:
        if e["nbytes"]:
            flipped = bytearray(raw)
            flipped[start + e["offset"] + e["nbytes"] // 2] ^= 0x04
            refused(tmp_path, bytes(flipped), "corrupt|inconsistent")
        if e["nbytes"] % 64:
            flipped = bytearray(raw)
            flipped[start + e["offset"] + e["nbytes"]] = 1  # the alignment padding after it
            refused(tmp_path, bytes(flipped), "padding")
        refused(tmp_path, raw[: start + e["offset"] + e["nbytes"] // 2], "truncated")


def test_a_crafted_keyword_count_does_not_size_the_id_inverse(tmp_path, saved, monkeypatch):
    """num_keywords only bounds the ids; keyword(i) through the map needs memory for the map, not 8 bytes
    per claimed keyword (2**32 of them, the most a file may claim: a 32 GB np.full)."""
    path, raw = saved
    good = NarrowLoudsIndex.load(path)
    assert good.keyword_ids.size
    doc, data = split(raw)
    doc["meta"]["num_keywords"] = MAX_KEYWORDS
    bad = tmp_path / "count.ftrie"
    bad.write_bytes(assemble(doc, data))
    ix = NarrowLoudsIndex.load(bad)  # nothing in the arrays disproves the count (duplicates are not stored)
    real_full = np.full
    monkeypatch.setattr(np, "full", lambda n, *a, **k: real_full(n, *a, **k) if n < 1 << 24 else pytest.fail(
        f"np.full({n})"))
    ids = good.keyword_ids.to_array()
    for i in (int(ids[0]), int(ids.max()), int(ids.min())):
        assert ix.keyword(i).tolist() == good.keyword(i).tolist()
    with pytest.raises(InputError, match="duplicate"):
        ix.keyword(2**31)


def test_sparse_keyword_ids_use_the_sorted_inverse():
    # 3 unique keywords among 3M inputs: the last kept id is ~3M, far more than 8 per stored id
    n = 3_000_000
    tokens = np.concatenate([[5], np.ones(n - 2), [3]]).astype(np.uint32)  # [5], [1] x (n - 2), [3]
    ix = NarrowLoudsIndex.build(KeywordSet(tokens, np.arange(n + 1, dtype=np.int64)))
    assert ix.keyword_ids.size == 3 and ix.num_keywords == n
    assert [ix.keyword(i).tolist() for i in (0, 1, n - 1)] == [[5], [1], [3]]
    assert isinstance(ix._node_of_id, tuple)
    with pytest.raises(InputError, match="duplicate"):
        ix.keyword(5)


def test_stale_temporaries_of_a_killed_save_are_removed(tmp_path):
    target = tmp_path / "a.ftrie"
    old = [tmp_path / ".a.ftrie.ab_c12z9.tmp", tmp_path / ".a.ftrie.00000000.tmp"]
    young = tmp_path / ".a.ftrie.young123.tmp"
    others = [tmp_path / ".a.ftrie.my-notes.tmp", tmp_path / ".b.ftrie.abcdefgh.tmp", tmp_path / "a.ftrie.abcdefgh.tmp"]
    for p in old + [young] + others:
        p.write_bytes(b"x")
    past = time.time() - STALE_TEMP_SECONDS - 60
    for p in old + others:
        os.utime(p, (past, past))
    NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2]])).save(target)
    assert not any(p.exists() for p in old)
    assert young.exists() and all(p.exists() for p in others)
    assert remove_stale_temporaries(target, older_than=-1) == [young]


def test_failed_save_removes_its_temporary(tmp_path):
    def boom(f):
        f.write(b"partial")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        from flashtrie.io_util import atomic_write_with

        atomic_write_with(tmp_path / "a.bin", boom)
    assert list(tmp_path.iterdir()) == []
    atomic_write(tmp_path / "a.bin", b"ok")
    assert [p.name for p in tmp_path.iterdir()] == ["a.bin"]


_FIELD_VALUES = st.one_of(st.integers(-3, 3), st.integers(-(2**70), 2**70), st.sampled_from(
    [0, 1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64 + 344, -(2**63), 1e9, 1.5, float("inf"), float("nan"),
     True, False, None, "", "7", [], {}, [1], [8, 2**61 + 43]]))


@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "300")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_fuzz_header_fields_only_index_format_errors(tmp_path, saved, data):
    _, raw = saved
    doc, area = split(raw)
    for _ in range(data.draw(st.integers(1, 3))):
        where = data.draw(st.sampled_from(["meta", "entry", "top", "checksum"]))
        if not (isinstance(doc.get("meta"), dict) and doc["meta"] and isinstance(doc.get("arrays"), list)
                and doc["arrays"] and isinstance(doc.get("checksum"), dict)):
            where = "top"
        value = copy.deepcopy(data.draw(_FIELD_VALUES))  # sampled lists and dicts are shared objects
        if where == "meta":
            doc["meta"][data.draw(st.sampled_from(sorted(doc["meta"])))] = value
        elif where == "entry":
            e = data.draw(st.sampled_from(doc["arrays"]))
            if not isinstance(e, dict):
                continue
            field = data.draw(st.sampled_from(["name", "dtype", "shape", "offset", "nbytes", "crc32s"]))
            e[field] = copy.deepcopy(data.draw(st.one_of(st.just(value), st.lists(_FIELD_VALUES, max_size=3))))
        elif where == "top":
            doc[data.draw(st.sampled_from(["format", "version", "meta", "arrays", "checksum"]))] = value
        else:
            doc["checksum"][data.draw(st.sampled_from(["algorithm", "chunk_bytes"]))] = value
    bad = tmp_path / "fuzz.ftrie"
    bad.write_bytes(assemble(json.dumps(doc, allow_nan=True).encode(), area))
    for verify in (True, False):
        try:
            NarrowLoudsIndex.load(bad, verify=verify)
        except IndexFormatError:
            pass
