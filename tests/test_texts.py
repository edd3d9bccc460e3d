"""Strings in and out: `KeywordSet.from_texts` with every tokenizer kind, the index's string store (build, save,
load, corrupt files), and strings never changing ids, order or scores."""

from __future__ import annotations

import json
import struct
import zlib

import numpy as np
import pytest
import text_tokenizers as tt
from flashtrie.reference_cpu import NumpySearcher
from hypothesis import given, settings
from hypothesis import strategies as st

from flashtrie import IndexFormatError, InputError, KeywordSet, NarrowLoudsIndex, Proposals, SearchConfig
from flashtrie.index.fileformat import write_index_file
from flashtrie.limits import MAX_TOKEN
from flashtrie.texts import TextStore

KINDS = ["tokenizers", "transformers", "tiktoken", "sentencepiece", "callable"]


def byte_tokens(s: str) -> list[int]:
    return list(s.encode("utf-8"))


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sp")
    return {"tokenizers": tt.bpe(), "transformers": tt.transformers_fast(), "tiktoken": tt.tiktoken_encoding(),
            "sentencepiece": tt.sentencepiece_model(tmp), "callable": byte_tokens}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ids", ["input", "index"])
def test_every_text_round_trips_through_each_tokenizer_kind(tmp_path, tokenizers, kind, ids):
    tok = tokenizers[kind]
    ks = KeywordSet.from_texts(tt.NAMES, tok)
    own = [tt.encode_one(kind, tok, t) for t in tt.NAMES]
    assert ks.to_sequences() == own  # batch encoding = the library's own, no special tokens added
    ix = NarrowLoudsIndex.build(ks, ids=ids)
    ix.save(tmp_path / "a.ftrie")
    for index in (ix, NarrowLoudsIndex.load(tmp_path / "a.ftrie"), NarrowLoudsIndex.load(tmp_path / "a.ftrie",
                                                                                         copy=True)):
        assert index.has_texts
        assert [index.text(index.lookup(t)) for t in own] == tt.NAMES
        if ids == "input":
            assert [index.text(i) for i in range(len(tt.NAMES))] == tt.NAMES  # keyword id i == texts[i]


def test_transformers_tokenizer_adds_no_special_tokens(tokenizers):
    tok = tokenizers["transformers"]
    assert tok("red")["input_ids"][-1] == tok.eos_token_id  # its post-processor would append EOS
    ks = KeywordSet.from_texts(["red"], tok)
    assert tok.eos_token_id not in ks.tokens.tolist()


alphabet = st.characters(codec="utf-8", exclude_categories=("Cs",))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(alphabet, min_size=1, max_size=12), min_size=1, max_size=30, unique=True),
       st.sampled_from(["input", "index"]))
def test_random_strings_round_trip_through_a_byte_level_tokenizer(tmp_path_factory, texts, ids):
    ks = KeywordSet.from_texts(texts, byte_tokens)
    ix = NarrowLoudsIndex.build(ks, ids=ids)
    path = tmp_path_factory.mktemp("h") / "a.ftrie"
    ix.save(path)
    loaded = NarrowLoudsIndex.load(path)
    got = [loaded.text(loaded.lookup(byte_tokens(t))) for t in texts]
    assert got == texts
    every = loaded.texts(np.arange(len(texts)))
    assert sorted(every) == sorted(texts)


def test_strings_never_change_ids_order_or_scores(tmp_path):
    rng = np.random.default_rng(3)
    texts = sorted({"".join(rng.choice(list("abcde"), size=int(rng.integers(1, 6)))) for _ in range(300)})
    rng.shuffle(texts)
    with_texts = KeywordSet.from_texts(texts, byte_tokens)
    plain = KeywordSet.from_arrays(with_texts.tokens, with_texts.offsets)
    tok = rng.integers(97, 102, size=(6, 5, 5))
    tok = np.where(np.arange(5)[None, None, :] < 4, tok, -1)
    tok = np.sort(tok, axis=2)
    tok[:, :, 1:][tok[:, :, 1:] == tok[:, :, :-1]] = -1  # one proposal per token and row
    props = Proposals(tok, rng.normal(-1, 1, size=tok.shape).astype(np.float32))
    for ids in ("input", "index"):
        a, b = NarrowLoudsIndex.build(with_texts, ids=ids), NarrowLoudsIndex.build(plain, ids=ids)
        a.save(tmp_path / "a.ftrie")
        b.save(tmp_path / "b.ftrie")
        a2, b2 = NarrowLoudsIndex.load(tmp_path / "a.ftrie"), NarrowLoudsIndex.load(tmp_path / "b.ftrie")
        for name, arr in b2.arrays.items():
            np.testing.assert_array_equal(a2.arrays[name], arr)
        cfg = SearchConfig(beam_width=8)
        ra, rb = NumpySearcher(a2).search(props, cfg), NumpySearcher(b2).search(props, cfg)
        assert ra.equals(rb)
        got = ra.texts(a2)
        assert got == [[texts[i] if ids == "input" else a2.text(i) for i in ra.keyword_ids[q, : ra.num_results[q]]]
                       for q in range(6)]
        for q, row in enumerate(got):  # each string spells its result's tokens
            assert [byte_tokens(s) for s in row] == [a2.keyword(int(i)).tolist()
                                                     for i in ra.keyword_ids[q, : ra.num_results[q]]]


def test_texts_of_ids_padding_and_errors():
    ix = NarrowLoudsIndex.build(KeywordSet.from_texts(["ab", "b", "abc"], byte_tokens))
    assert ix.texts([[0, -1], [2, 1]]) == [["ab", None], ["abc", "b"]]
    assert ix.texts(np.int64(2)) == "abc" and ix.texts([]) == []
    for bad in ([3], [-2], [0.5], [True]):
        with pytest.raises(InputError, match="ids"):
            ix.texts(bad)
    for bad in (3, -1, True, "0"):
        with pytest.raises(InputError, match="keyword id"):
            ix.text(bad)
    plain = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1], [2]]))
    assert not plain.has_texts and "strings: none" in plain.describe()
    for call in (lambda: plain.text(0), lambda: plain.texts([0])):
        with pytest.raises(InputError, match="holds no strings.*from_texts"):
            call()


def test_duplicates_are_refused_or_kept_aligned():
    lower = lambda s: byte_tokens(s.lower())  # noqa: E731 - "Paris" and "paris" tokenize alike
    texts = ["Paris", "rome", "paris", "PARIS", "oslo"]
    with pytest.raises(InputError, match=r"texts\[2\] = 'paris' has the same tokens as texts\[0\] = 'Paris'.*2 texts"):
        KeywordSet.from_texts(texts, lower)
    ks = KeywordSet.from_texts(texts, lower, duplicates="keep")
    ix = NarrowLoudsIndex.build(ks)
    assert ix.duplicates == 2 and ix.lookup(lower("PARIS")) == 0
    assert [ix.text(i) for i in range(5)] == texts  # ids stay the input positions
    ixi = NarrowLoudsIndex.build(ks, ids="index")
    assert sorted(ixi.texts(np.arange(ixi.num_unique))) == ["Paris", "oslo", "rome"]  # the first of equal keywords
    with pytest.raises(InputError, match="duplicates"):
        KeywordSet.from_texts(texts, lower, duplicates="first")


class Recorder:
    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, s):
        self.calls += 1
        return self.fn(s)


@pytest.mark.parametrize("texts, match", [
    (["a", 3, "b"], r"texts\[1\]: expected a str, got int"),
    (["a", b"b"], r"texts\[1\]: expected a str, got bytes"),
    ("abc", "got one string"),
    (["a", "\ud800"], r"texts\[1\].*lone surrogate"),
])
def test_non_strings_refused_before_any_tokenizing(texts, match):
    rec = Recorder(byte_tokens)
    with pytest.raises(InputError, match=match):
        KeywordSet.from_texts(texts, rec)
    assert rec.calls == 0


@pytest.mark.parametrize("fn, match", [
    (lambda s: [] if s == "b" else [1], r"texts\[1\] = 'b' tokenizes to no tokens"),
    (lambda s: [-1], r"token -1"),
    (lambda s: [MAX_TOKEN + 1], "out of range"),
    (lambda s: [1.0], "not an integer token"),
    (lambda s: "12", "expected a sequence of integer tokens"),
    (lambda s: None, "expected a sequence of integer tokens"),
])
def test_bad_tokenizer_output_refused(fn, match):
    with pytest.raises(InputError, match=match):
        KeywordSet.from_texts(["a", "b"], fn)


def test_tokens_beyond_the_vocabulary_refused(tokenizers):
    with pytest.raises(InputError, match=r"token 98 for 'b': not in the vocabulary of 98 tokens"):
        KeywordSet.from_texts(["a", "b"], byte_tokens, vocab_size=98)
    tok = tokenizers["tokenizers"]
    with pytest.raises(InputError, match=r"not in the vocabulary of 50 tokens \(tokenizers\)"):
        KeywordSet.from_texts(["red shoes"], tok, vocab_size=50)
    for bad in (0, -3, True, 2.5):
        with pytest.raises(InputError, match="vocab_size"):
            KeywordSet.from_texts(["a"], byte_tokens, vocab_size=bad)
    with pytest.raises(InputError, match="tokenizer: expected a callable"):
        KeywordSet.from_texts(["a"], object())


def test_with_texts_and_keyword_set_checks():
    ks = KeywordSet.from_sequences([[1], [2, 3]])
    assert NarrowLoudsIndex.build(ks.with_texts(["one", "two three"])).text(1) == "two three"
    with pytest.raises(InputError, match="2 keywords"):
        ks.with_texts(["one"])
    with pytest.raises(InputError, match="texts: 1 strings for 2 keywords"):
        KeywordSet(ks.tokens, ks.offsets, TextStore.from_strings(["x"]))
    with pytest.raises(InputError, match="TextStore"):
        KeywordSet(ks.tokens, ks.offsets, ["x", "y"])


def test_text_store_take_and_limits():
    s = TextStore.from_strings(["", "é", "abc", "東京"])
    assert s.take(np.array([3, 0, 2, 2])).to_list() == ["東京", "", "abc", "abc"]
    assert s.take(np.zeros(0, np.int64)).to_list() == []
    with pytest.raises(InputError, match="offsets"):
        TextStore(s.data, np.array([0, 5, 3, 9, 9], dtype=np.int64)[:5])


# ------------------------------------------------------------------------------- the file's strings section
@pytest.fixture
def saved(tmp_path):
    texts = [f"name {i} é" for i in range(40)]
    ix = NarrowLoudsIndex.build(KeywordSet.from_texts(texts, byte_tokens))
    path = tmp_path / "a.ftrie"
    ix.save(path)
    return ix, path, texts


def _header(raw: bytes) -> tuple[dict, int]:
    n = struct.unpack_from("<8sIIQ", raw)[3]
    return json.loads(raw[24 : 24 + n]), -(-(24 + n) // 64) * 64


def _with_array(raw: bytes, name: str, edit) -> bytes:
    """``raw`` with array ``name``'s bytes changed by ``edit(bytearray)`` and its checksums fixed (a crafted
    file: only the content checks can refuse it)."""
    doc, start = _header(raw)
    e = next(e for e in doc["arrays"] if e["name"] == name)
    out = bytearray(raw)
    part = bytearray(out[start + e["offset"] : start + e["offset"] + e["nbytes"]])
    edit(part)
    out[start + e["offset"] : start + e["offset"] + e["nbytes"]] = part
    e["crc32s"] = [zlib.crc32(bytes(part)) & 0xFFFF_FFFF]
    head = json.dumps(doc, sort_keys=True).encode()
    assert len(head) <= start - 24
    return (struct.pack("<8sIIQ", raw[:8], 3, zlib.crc32(head) & 0xFFFF_FFFF, len(head)) + head
            + b" " * (start - 24 - len(head)) + bytes(out[start:]))


def test_files_without_strings_load_as_before(tmp_path):
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2], [3]]))
    ix.save(tmp_path / "a.ftrie")
    doc, _ = _header((tmp_path / "a.ftrie").read_bytes())
    assert [e["name"] for e in doc["arrays"]] == list(ix.arrays)  # no strings section at all
    assert not NarrowLoudsIndex.load(tmp_path / "a.ftrie").has_texts


def test_strings_section_layout(saved):
    ix, path, texts = saved
    doc, _ = _header(path.read_bytes())
    entries = {e["name"]: e for e in doc["arrays"]}
    assert entries["texts.data"]["nbytes"] == len("".join(texts).encode())
    from flashtrie.index.packed import PackedInts

    width = len("".join(texts).encode()).bit_length()
    assert width == 9  # offsets packed in the bits the blob's size needs
    assert entries["texts.offsets.words"]["nbytes"] == 8 * PackedInts.num_words(41, width) < 8 * 41
    st_ = ix.stats()
    assert st_["texts"] == 40 and st_["text_bytes"] == entries["texts.data"]["nbytes"] + entries[
        "texts.offsets.words"]["nbytes"]
    assert "strings: 40 stored" in ix.describe()


def test_corrupt_strings_refused(saved, tmp_path):
    _, path, _ = saved
    raw = path.read_bytes()
    doc, start = _header(raw)
    data = next(e for e in doc["arrays"] if e["name"] == "texts.data")
    bad = tmp_path / "bad.ftrie"

    flipped = bytearray(raw)
    flipped[start + data["offset"] + 3] ^= 0x20
    bad.write_bytes(bytes(flipped))
    with pytest.raises(IndexFormatError, match="array texts.data is corrupt"):
        NarrowLoudsIndex.load(bad)
    assert NarrowLoudsIndex.load(bad, verify=False).has_texts  # a trusted file: no checksums read

    bad.write_bytes(raw[: start + data["offset"] + 5])
    with pytest.raises(IndexFormatError, match="truncated"):
        NarrowLoudsIndex.load(bad)

    def set_byte(at, value):
        def edit(part):
            part[at] = value
        return edit

    cases = [
        ("texts.data", set_byte(0, 0xFF), "strings: the blob is not UTF-8"),
        ("texts.data", set_byte(len("name 0 "), ord("e")), "strings: the blob is not UTF-8|ends inside"),
        ("texts.offsets.words", set_byte(0, 1), "strings: offsets run from 1"),
    ]
    for name, edit, match in cases:
        bad.write_bytes(_with_array(raw, name, edit))
        with pytest.raises(IndexFormatError, match=match):
            NarrowLoudsIndex.load(bad)


def test_crafted_strings_sections_refused(tmp_path):
    ix = NarrowLoudsIndex.build(KeywordSet.from_texts(["ab", "é", "c"], byte_tokens))
    good = {"texts.data": np.frombuffer("abéc".encode(), np.uint8).copy()}

    def offsets(values, width=3):
        from flashtrie.index.packed import PackedInts

        return PackedInts.from_values(np.array(values, dtype=np.int64), width=width).words

    cases = [
        ({**good, "texts.offsets.words": offsets([0, 2, 3, 5])}, "ends inside a UTF-8 character"),
        ({**good, "texts.offsets.words": offsets([0, 4, 2, 5])}, "offset 2 \\(2\\) is below offset 1"),
        ({**good, "texts.offsets.words": offsets([0, 2, 4] + [5] * 70)}, "num_keywords = 3 .* offsets"),
        ({**good}, "texts.data without texts.offsets.words"),
        ({"texts.data": good["texts.data"][:4], "texts.offsets.words": offsets([0, 2, 4, 5])}, "expected 0 to 4"),
        ({**good, "texts.offsets.words": offsets([0, 2, 4, 5]) | np.uint64(1 << 40)}, "bits set past 4 values"),
    ]
    for extra, match in cases:
        write_index_file(tmp_path / "bad.ftrie", {**ix.arrays, **extra}, ix.meta)
        with pytest.raises(IndexFormatError, match=match):
            NarrowLoudsIndex.load(tmp_path / "bad.ftrie")
    write_index_file(tmp_path / "bad.ftrie", {**ix.arrays, "texts.data": np.zeros(3, np.int8)}, ix.meta)
    with pytest.raises(IndexFormatError, match="texts.data: dtype int8, expected uint8"):
        NarrowLoudsIndex.load(tmp_path / "bad.ftrie")
    write_index_file(tmp_path / "ok.ftrie", {**ix.arrays, **good, "texts.offsets.words": offsets([0, 2, 4, 5])},
                     ix.meta)
    assert NarrowLoudsIndex.load(tmp_path / "ok.ftrie").texts([0, 1, 2]) == ["ab", "é", "c"]


def test_gpu_builder_code_path_keeps_the_strings():
    from flashtrie.gpu_impl import build_gpu

    ks = KeywordSet.from_texts(["red", "re", "blue", "b"], byte_tokens)
    for ids in ("input", "index"):
        cpu, gpu = NarrowLoudsIndex.build(ks, ids=ids), build_gpu.build_index(ks, ids=ids, xp=np)
        assert gpu.texts(np.arange(4)) == cpu.texts(np.arange(4))
        assert [gpu.text(gpu.lookup(byte_tokens(t))) for t in ("red", "re", "blue", "b")] == ["red", "re", "blue", "b"]
