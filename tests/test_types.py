"""Core types: KeywordSet, Proposals, SearchConfig construction, validation messages and file round trips."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import keyword_lists

from flashtrie import InputError, KeywordSet, Proposals, SearchConfig, SearchResult
from flashtrie.search_core import normalize_prefixes

PAD = 2**32 - 1


# ----------------------------------------------------------------------------------------- KeywordSet
def test_keywordset_constructors_agree(tmp_path: Path) -> None:
    seqs = [[5, 6], [5], [4294967294, 0, 65536], [5, 6]]
    a = KeywordSet.from_sequences(seqs)
    b = KeywordSet.from_arrays(np.array([5, 6, 5, 4294967294, 0, 65536, 5, 6], np.uint32), [0, 2, 3, 6, 8])
    path = tmp_path / "kw.txt"
    a.to_token_file(path)
    assert path.read_text() == "5 6\n5\n4294967294 0 65536\n5 6\n"
    c = KeywordSet.from_token_file(path)
    for kw in (a, b, c):
        assert kw.to_sequences() == seqs
        assert kw.tokens.dtype == np.uint32 and kw.offsets.dtype == np.int64
        assert len(kw) == 4 and kw.max_length == 3
        assert kw.lengths.tolist() == [2, 1, 3, 2]
    assert a[-1].tolist() == [5, 6]
    with pytest.raises(IndexError):
        a[4]


@given(keyword_lists(max_keywords=20, max_length=6))
def test_text_round_trip(tmp_path_factory: pytest.TempPathFactory, kws: list[list[int]]) -> None:
    path = tmp_path_factory.mktemp("kw") / "kw.txt"
    KeywordSet.from_sequences(kws).to_token_file(path)
    back = KeywordSet.from_token_file(path)
    assert back.to_sequences() == kws


def test_text_details(tmp_path: Path) -> None:
    path = tmp_path / "kw.txt"
    path.write_bytes(b"1  2\t3\r\n007\n\n\n")  # mixed spaces, CRLF, leading zeros, trailing blank lines
    assert KeywordSet.from_token_file(path).to_sequences() == [[1, 2, 3], [7]]
    KeywordSet.from_sequences([]).to_token_file(path)
    assert len(KeywordSet.from_token_file(path)) == 0


@pytest.mark.parametrize(("seqs", "words"), [
    ([[1], []], ["keyword 1", "empty"]),
    ([[1, -2]], ["keyword 0", "-2", "4294967294"]),
    ([[4294967295]], ["keyword 0", "4294967295", "4294967294"]),
    ([[2**40]], ["keyword 0", str(2**40), "4294967294"]),
    ([[1.5]], ["keyword 0", "integer", "float"]),
    ([["a"]], ["keyword 0", "integer"]),
    ([[[1, 2]]], ["keyword 0", "1-D"]),
])
def test_keywordset_bad_sequences(seqs: list, words: list[str]) -> None:
    with pytest.raises(InputError) as e:
        KeywordSet.from_sequences(seqs)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


@pytest.mark.parametrize(("tokens", "offsets", "words"), [
    ([1, 2], [0, 1, 1, 2], ["keyword 1", "empty"]),
    ([1, -1], [0, 2], ["keyword 0", "-1", "4294967294"]),
    (np.array([1, 4294967295], np.uint32), [0, 1, 2], ["keyword 1", "4294967295"]),
    ([1.0], [0, 1], ["tokens", "float64"]),
    ([1], [1, 1], ["offsets[0]", "1"]),
    ([1], [0, 2], ["offsets[-1]", "1", "2"]),
    ([[1]], [0, 1], ["tokens", "1-D"]),
    ([1, 2, 3, 4], [0, 3, 2, 4], ["offsets[2]", "must increase", "offsets[1] = 3 > offsets[2] = 2"]),
    ([1, 2, 3, 4], np.array([0, 2**63 + 5, 4], np.uint64), ["offsets[1]", "9223372036854775813", "limit"]),
])
def test_keywordset_bad_arrays(tokens: list, offsets: list, words: list[str]) -> None:
    with pytest.raises(InputError) as e:
        KeywordSet.from_arrays(tokens, offsets)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


@pytest.mark.parametrize(("data", "words"), [
    (b"1 2\n\n3\n", ["line 2", "empty"]),
    (b"1 x\n", ["line 1", "'x'"]),
    (b"1\n-2\n", ["line 2", "'-'"]),
    (b"4294967295\n", ["line 1", "4294967295", "4294967294"]),
    (b"1\n99999999999\n", ["line 2", "99999999999", "4294967294"]),
    (b"1 2\r3 4\n", ["line 1", "carriage return"]),
])
def test_keywordset_bad_text(tmp_path: Path, data: bytes, words: list[str]) -> None:
    path = tmp_path / "bad.txt"
    path.write_bytes(data)
    with pytest.raises(InputError) as e:
        KeywordSet.from_token_file(path)
    for w in words + [str(path)]:
        assert w in str(e.value), (w, str(e.value))


def test_keywordset_plain_constructor_checks_invariants() -> None:
    ok = KeywordSet(np.array([1, 2], np.uint32), np.array([0, 1, 2], np.int64))
    assert ok.to_sequences() == [[1], [2]]
    with pytest.raises(InputError, match="tokens: expected a 1-D uint32 array.*from_arrays"):
        KeywordSet(np.array([-1, 3]), np.array([0, 2]))
    with pytest.raises(InputError, match="4294967295"):
        KeywordSet(np.array([2**32 - 1], np.uint32), np.array([0, 1], np.int64))
    with pytest.raises(InputError, match="offsets: expected"):
        KeywordSet(np.array([1], np.uint32), [0, 1])  # type: ignore[arg-type]
    with pytest.raises(InputError, match="empty keyword"):
        KeywordSet(np.array([1], np.uint32), np.array([0, 0, 1], np.int64))


@pytest.mark.parametrize("chunk", [1, 3, 16, 1 << 20])
def test_text_parsed_in_pieces_is_the_same(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    import flashtrie.keywords as kmod

    rng = np.random.default_rng(chunk)
    seqs = [rng.integers(0, 2**32 - 1, rng.integers(1, 6)).tolist() for _ in range(300)]
    data = ("\r\n".join(" ".join(map(str, q)) for q in seqs) + "\n\n").encode()
    monkeypatch.setattr(kmod, "TEXT_CHUNK_BYTES", chunk)
    assert KeywordSet.from_token_bytes(data).to_sequences() == seqs
    lines = data.split(b"\r\n")
    lines[200] = b"7 x"
    with pytest.raises(InputError, match="line 201: unexpected character 'x'"):
        KeywordSet.from_token_bytes(b"\r\n".join(lines))
    lines[200] = b""
    with pytest.raises(InputError, match="line 201: empty keyword"):
        KeywordSet.from_token_bytes(b"\r\n".join(lines))


def test_text_crlf_is_a_line_end() -> None:
    assert KeywordSet.from_token_bytes(b"1 2\r\n3 4\r\n").to_sequences() == [[1, 2], [3, 4]]


# ------------------------------------------------------------------------------------------ Proposals
def test_proposals_accepts_both_paddings_and_nan_in_padding() -> None:
    tok = np.array([[[3, -1, PAD, 4294967294]]], dtype=np.int64)
    lp = np.array([[[-1.0, np.nan, np.inf, -np.inf]]], dtype=np.float32)
    p = Proposals(tok, lp)
    assert p.tokens.dtype == np.uint32 and p.logprobs.dtype == np.float32
    assert p.tokens.tolist() == [[[3, PAD, PAD, 4294967294]]]
    assert p.shape == (1, 1, 4) and p.num_queries == 1
    assert p[0].shape == (1, 1, 4) and p[0:0].shape == (0, 1, 4)


@pytest.mark.parametrize(("tok", "lp", "words"), [
    ([[[1, 2]]], [[[-1.0, np.nan]]], ["logprobs[0, 0, 1]", "nan"]),
    ([[[1, 2]], [[1, 2]]], [[[-1.0, 0.0]], [[np.inf, 0.0]]], ["logprobs[1, 0, 0]", "inf"]),
    ([[[1, 5, 1]]], [[[0.0, 0.0, 0.0]]], ["tokens[0, 0, :]", "token 1", "more than once"]),
    ([[[1, 2]]], [[[0.0, 0.0, 0.0]]], ["logprobs", "(1, 1, 3)", "(1, 1, 2)"]),
    ([[1, 2]], [[0.0, 0.0]], ["tokens", "[Q, T, K]"]),
    ([[[1, -2]]], [[[0.0, 0.0]]], ["tokens[0, 0, 1]", "-2"]),
    ([[[2**32]]], [[[0.0]]], ["tokens[0, 0, 0]", str(2**32)]),
    ([[[1.5]]], [[[0.0]]], ["tokens", "float64"]),
    ([[[1]]], [[[0]]], ["logprobs", "int"]),
])
def test_proposals_bad(tok: list, lp: list, words: list[str]) -> None:
    with pytest.raises(InputError) as e:
        Proposals(np.array(tok), np.array(lp))
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_proposals_limits_without_memory() -> None:
    with pytest.raises(InputError, match=r"T = 256.*255"):
        Proposals(np.zeros((0, 256, 1), np.uint32), np.zeros((0, 256, 1), np.float32))
    with pytest.raises(InputError, match=r"K = 65536.*65535"):
        Proposals(np.zeros((0, 1, 65536), np.uint32), np.zeros((0, 1, 65536), np.float32))
    Proposals(np.zeros((0, 255, 65535), np.uint32), np.zeros((0, 255, 65535), np.float32))  # at the limits


def test_proposals_float64_overflow_is_an_error() -> None:
    with pytest.raises(InputError, match="inf"):
        Proposals(np.array([[[1]]]), np.array([[[1e300]]]))


def test_tsv_round_trip_bit_exact(tmp_path: Path) -> None:
    lp_values = [-0.0, 0.0, -1e-45, -np.float32(0.7), -3.4e38, -np.inf, 0.25, -1.1754944e-38]
    tok = np.array([[[9, 4294967294, 0, 65536], [7, 8, PAD, PAD]],
                    [[1, PAD, PAD, PAD], [PAD, PAD, PAD, PAD]]], dtype=np.uint32)
    rng = np.random.default_rng(0)
    lp = np.array(rng.choice(np.array(lp_values, dtype=np.float32), size=tok.shape), dtype=np.float32)
    lp[tok == PAD] = -np.inf
    p = Proposals(tok, lp)
    path = tmp_path / "p.tsv"
    p.to_tsv(path, queries=["first query", "zweite"])
    back, names = Proposals.from_tsv(path)
    assert names == ["first query", "zweite"]
    assert back.tokens.tolist() == p.tokens.tolist()
    assert back.logprobs.view(np.uint32).tolist() == p.logprobs.view(np.uint32).tolist()
    p.to_tsv(path)
    assert Proposals.from_tsv(path)[1] == ["q0", "q1"]


@pytest.mark.parametrize("name", ["a\tb", "a\nb", "a\rb", "a\u2028b"])
def test_tsv_rejects_names_that_break_lines(tmp_path: Path, name: str) -> None:
    p = Proposals(np.array([[[1]]]), np.zeros((1, 1, 1), np.float32))
    with pytest.raises(InputError, match=r"queries\[0\]"):
        p.to_tsv(tmp_path / "p.tsv", queries=[name])


def test_tsv_bad_files(tmp_path: Path) -> None:
    path = tmp_path / "p.tsv"
    path.write_text('q0\t{"indices": [[1]], "probs": [[0.0]]}\nq1\t{"indices": [], "probs": []}\n')
    with pytest.raises(InputError, match="same number of steps"):
        Proposals.from_tsv(path)
    path.write_text("q0 no tab\n")
    with pytest.raises(InputError, match="line 1"):
        Proposals.from_tsv(path)
    path.write_text('q0\t{"indices": [[1, 2]], "probs": [[0.0]]}\n')
    with pytest.raises(InputError, match="differ in shape"):
        Proposals.from_tsv(path)


# --------------------------------------------------------------------------------------- SearchConfig
def test_config_defaults() -> None:
    c = SearchConfig(beam_width=5)
    assert c.results == 5 and c.token_threshold == -math.inf and c.score_threshold == -math.inf
    assert c.length_norm == 0.0
    assert SearchConfig(beam_width=5, max_results=9).results == 9
    SearchConfig(beam_width=np.int64(65535), max_results=65535, token_threshold=np.float32(-1.0), length_norm=2)


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"beam_width": 0}, ["beam_width", "0", "65535"]),
    ({"beam_width": 65536}, ["beam_width", "65536", "65535"]),
    ({"beam_width": 1.5}, ["beam_width", "1.5"]),
    ({"beam_width": True}, ["beam_width", "True"]),
    ({"beam_width": "3"}, ["beam_width", "'3'"]),
    ({"beam_width": 2, "max_results": 0}, ["max_results", "0", "65535"]),
    ({"beam_width": 2, "max_results": 65536}, ["max_results", "65536"]),
    ({"beam_width": 2, "token_threshold": math.nan}, ["token_threshold", "nan"]),
    ({"beam_width": 2, "score_threshold": "x"}, ["score_threshold", "'x'"]),
    ({"beam_width": 2, "length_norm": -0.5}, ["length_norm", "-0.5"]),
    ({"beam_width": 2, "length_norm": math.inf}, ["length_norm", "inf"]),
    ({"beam_width": 2, "length_norm": math.nan}, ["length_norm", "nan"]),
])
def test_config_bad(kwargs: dict, words: list[str]) -> None:
    with pytest.raises(InputError) as e:
        SearchConfig(**kwargs)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_normalize_prefixes() -> None:
    assert normalize_prefixes(None, 3) is None
    out = normalize_prefixes([[], [1, 4294967294], np.array([7], np.int64)], 3)
    assert [o.tolist() for o in out] == [[], [1, 4294967294], [7]]
    assert all(o.dtype == np.uint32 for o in out)
    with pytest.raises(InputError, match=r"prefixes.*3.*2"):
        normalize_prefixes([[], []], 3)
    with pytest.raises(InputError, match=r"prefixes\[0\]\[1\].*4294967295"):
        normalize_prefixes([[1, 4294967295]], 1)
    with pytest.raises(InputError, match=r"prefixes\[1\]"):
        normalize_prefixes([[1], ["a"]], 2)


@given(st.integers(0, 4), st.integers(1, 5))
def test_search_result_empty_and_equality(q_n: int, r_n: int) -> None:
    a = SearchResult.empty(q_n, r_n)
    b = SearchResult.empty(q_n, r_n)
    assert a.shape == (q_n, r_n) and a.equals(b)
    assert a.num_results.tolist() == [0] * q_n
    if q_n:
        b.keyword_ids[0, 0], b.scores[0, 0], b.norm_scores[0, 0], b.lengths[0, 0] = 3, -0.0, -0.0, 1
        b.num_results[0] = 1
        assert a.first_difference(b) is not None
        c = SearchResult(b.keyword_ids.copy(), b.scores.copy(), b.norm_scores.copy(), b.lengths.copy())
        assert c.num_results.tolist() == b.num_results.tolist() and c.equals(b)
        c.scores[0, 0] = 0.0  # +0.0 vs -0.0: not bit-identical
        assert "scores" in c.first_difference(b)


def test_text_leading_zeros_and_huge_tokens():
    ks = KeywordSet.from_token_bytes(b"00000000001 2\n0000000000004294967294\n")
    assert ks.to_sequences() == [[1, 2], [4294967294]]
    with pytest.raises(InputError, match="larger than the limit"):
        KeywordSet.from_token_bytes(b"10000000000001\n")


@pytest.mark.parametrize("kwargs", [{"token_threshold": True}, {"score_threshold": False}, {"length_norm": True}])
def test_config_refuses_bools(kwargs):
    with pytest.raises(InputError):
        SearchConfig(beam_width=3, **kwargs)


def test_length_norm_underflow_refused():
    from flashtrie.scoring import length_norm_table

    assert length_norm_table(100.0, 8)[8] > 0
    with pytest.raises(InputError, match="length_norm"):
        length_norm_table(1e6, 8)


# ------------------------------------------------------------------------ one shared token check
@pytest.mark.parametrize(("prefix", "words"), [
    ([12.9, "7", True], ["prefixes[0][0]", "12.9", "4294967294"]),
    ([1, True], ["prefixes[0][1]", "True", "4294967294"]),
    ([1, np.True_], ["prefixes[0][1]", "True"]),
    ([1, 2.0], ["prefixes[0][1]", "2.0"]),
    ([1, "7"], ["prefixes[0][1]", "'7'"]),
    ([1, np.float32(3)], ["prefixes[0][1]", "3.0"]),
    (np.array([1.0, 2.0]), ["prefixes[0][0]", "float64", "4294967294"]),
    (np.array([True]), ["prefixes[0][0]", "bool"]),
    (np.array(["1"]), ["prefixes[0][0]", "'1'"]),
    (np.array([1, 2.7], dtype=object), ["prefixes[0][1]", "2.7"]),
    ([1, 2**64], ["prefixes[0][1]", str(2**64), "4294967294"]),
    ([-1], ["prefixes[0][0]", "-1", "4294967294"]),
    (np.array([5, 2**32], np.uint64), ["prefixes[0][1]", str(2**32), "4294967294"]),
    ([1, [2]], ["prefixes[0][1]", "[2]"]),
    ("12", ["prefixes[0]", "'12'"]),
    (5, ["prefixes[0]", "5"]),
])
def test_normalize_prefixes_refuses_non_integer_tokens(prefix: object, words: list[str]) -> None:
    with pytest.raises(InputError) as e:
        normalize_prefixes([prefix], 1)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_normalize_prefixes_accepts_integer_kinds() -> None:
    out = normalize_prefixes([(np.uint64(3), np.int8(2)), range(2), np.array([], np.float64), None,
                              np.array([4294967294], np.uint64), np.array([7], dtype=object)], 6)
    assert [o.tolist() for o in out] == [[3, 2], [0, 1], [], [], [4294967294], [7]]
    assert all(o.dtype == np.uint32 for o in out)


@pytest.mark.parametrize(("seqs", "words"), [
    ([np.array([1, 2.7], dtype=object)], ["keyword 0", "2.7", "4294967294"]),
    ([[1], [2, True]], ["keyword 1", "True"]),
    ([[1], np.array([True, False])], ["keyword 1", "bool"]),
    ([[1], [2], [3], [4, 5.0]], ["keyword 3", "5.0"]),
    ([np.array([1, 2**40], dtype=object)], ["keyword 0", str(2**40), "4294967294"]),
    ([np.array([1, "2"], dtype=object)], ["keyword 0", "'2'"]),
])
def test_keywordset_from_sequences_refuses_non_integer_tokens(seqs: list, words: list[str]) -> None:
    with pytest.raises(InputError) as e:
        KeywordSet.from_sequences(seqs)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_keywordset_from_sequences_integer_kinds() -> None:
    seqs = [np.array([1, 2], dtype=object), [np.uint64(4294967294), np.int16(3)], np.array([9], np.uint64), range(2)]
    assert KeywordSet.from_sequences(seqs).to_sequences() == [[1, 2], [4294967294, 3], [9], [0, 1]]


def test_one_shared_token_check() -> None:
    import flashtrie.keywords
    import flashtrie.search_core
    from flashtrie import tokens

    assert flashtrie.keywords.check_token_sequence is tokens.check_token_sequence
    assert flashtrie.search_core.check_token_sequence is tokens.check_token_sequence


# ----------------------------------------------------------------------------- Proposals indexing
def test_proposals_negative_index() -> None:
    tok = np.arange(3, dtype=np.uint32).reshape(3, 1, 1)
    p = Proposals(tok, np.zeros((3, 1, 1), np.float32))
    assert p[-1].tokens.tolist() == [[[2]]]
    assert p[-3].tokens.tolist() == [[[0]]]
    assert p[np.int64(-2)].tokens.tolist() == [[[1]]]
    assert p[2].tokens.tolist() == [[[2]]]
    for i in (3, -4, np.int64(7)):
        with pytest.raises(IndexError, match="out of range"):
            p[i]
    with pytest.raises(IndexError):
        Proposals(np.zeros((0, 1, 1), np.uint32), np.zeros((0, 1, 1), np.float32))[-1]


# ----------------------------------------------------------------------------------- TSV records
@pytest.mark.parametrize(("record", "words"), [
    ('{"indices": [[1, 2.5]], "probs": [[0.0, -1.0]]}', ["indices[0][1]", "2.5", "4294967294"]),
    ('{"indices": [[2.0]], "probs": [[0.0]]}', ["indices[0][0]", "2.0"]),
    ('{"indices": [["x"]], "probs": [[0.0]]}', ["indices[0][0]", "'x'"]),
    ('{"indices": [[true]], "probs": [[0.0]]}', ["indices[0][0]", "True"]),
    ('{"indices": [[-2]], "probs": [[0.0]]}', ["indices[0][0]", "-2", "4294967294"]),
    ('{"indices": [[4294967296]], "probs": [[0.0]]}', ["indices[0][0]", "4294967296"]),
    ('{"indices": [[[1]]], "probs": [[0.0]]}', ["indices[0]", "1-D"]),
    ('{"indices": [1], "probs": [0.0]}', ["indices[0]", "expected a list"]),
    ('{"indices": [[1]], "probs": [0.0]}', ["probs[0]", "expected a list"]),
    ('{"indices": 3, "probs": [[0.0]]}', ["'indices'", "3"]),
    ('{"indices": [[1]], "probs": [["a"]]}', ["probs[0][0]", "'a'"]),
    ('{"indices": [[1]], "probs": [[true]]}', ["probs[0][0]", "True"]),
    ('{"indices": [[1]], "probs": [[NaN]]}', ["probs[0][0]", "nan"]),
    ('{"indices": [[1]], "probs": [[Infinity]]}', ["probs[0][0]", "inf"]),
    ('{"indices": [[1]], "probs": [[1e300]]}', ["probs[0][0]", "1e+300"]),
    ('{"indices": [[1]], "probs": [[1' + "0" * 400 + ']]}', ["probs[0][0]", "out of range"]),
    ('{"indices": [[1, 1]], "probs": [[0.0, 0.0]]}', ["indices[0]", "token 1", "more than once"]),
    ('{"indices": [[1, 2]], "probs": [[0.0]]}', ["differ in shape"]),
    ('{"indices": [[1]], "probs": [[0.0], [0.0]]}', ["differ in shape"]),
    ('[1, 2]', ["'indices'", "'probs'"]),
    ('"text"', ["'indices'", "'probs'"]),
    ('{"indices": [[1]]}', ["'indices'", "'probs'"]),
    ('{"indices": [[1]', ["'indices'", "'probs'"]),
    ('{"indices": [[1]], "probs": [[0.0]], "x": 1}\nq2\t{"indices": [], "probs": []}',
     ["line 4", "0 steps", "line 1", "same number"]),
])
def test_tsv_bad_records_name_file_and_line(tmp_path: Path, record: str, words: list[str]) -> None:
    path = tmp_path / "p.tsv"
    path.write_text('q0\t{"indices": [[5]], "probs": [[0.0]]}\n\nq1\t' + record + "\n")
    with pytest.raises(InputError) as e:
        Proposals.from_tsv(path)
    msg = str(e.value)
    assert str(path) in msg, msg
    if not any(w.startswith("line") for w in words):
        assert "line 3" in msg, msg
    for w in words:
        assert w in msg, (w, msg)


def test_tsv_padding_and_limits(tmp_path: Path) -> None:
    path = tmp_path / "p.tsv"
    path.write_text('q0\t{"indices": [[-1, 4294967295, 3]], "probs": [[NaN, 0.0, -Infinity]]}\n')
    p, _ = Proposals.from_tsv(path)
    assert p.tokens.tolist() == [[[PAD, PAD, 3]]] and p.logprobs[0, 0, 2] == -np.inf
    path.write_text("q0\t" + '{"indices": ' + str([[1]] * 256) + ', "probs": ' + str([[0.0]] * 256) + "}\n")
    with pytest.raises(InputError, match=r"p\.tsv.*T = 256.*255"):
        Proposals.from_tsv(path)
    path.write_bytes(b'q0\xff\t{"indices": [[1]], "probs": [[0.0]]}\n')
    with pytest.raises(InputError, match="UTF-8"):
        Proposals.from_tsv(path)


def test_huge_integer_thresholds_keep_their_meaning() -> None:
    cfg = SearchConfig(beam_width=1, score_threshold=-10**400, token_threshold=10**400)
    assert cfg.score_threshold == -math.inf and cfg.token_threshold == math.inf
    with pytest.raises(InputError, match="length_norm: expected a finite number >= 0, got int of 401"):
        SearchConfig(beam_width=1, length_norm=10**400)


def test_ragged_proposals_are_refused_by_name() -> None:
    with pytest.raises(InputError, match="tokens: expected a rectangular"):
        Proposals([[[1, 2], [3]]], [[[0.0, 0.0], [0.0]]])
    with pytest.raises(InputError, match="logprobs: expected a rectangular"):
        Proposals([[[1, 2], [3, 4]]], [[[0.0, 0.0], [0.0]]])


@pytest.mark.parametrize("dtype", [np.uint32, np.int64])
def test_proposals_own_their_checked_arrays(dtype: type) -> None:
    tok = np.array([[[1, 2]]], dtype)
    lp = np.array([[[-1.0, -2.0]]], np.float32)
    p = Proposals(tok, lp)
    tok[0, 0, 1] = 1  # the caller's buffer changes after the checks: the proposals do not
    lp[0, 0, 0] = np.nan
    assert p.tokens.tolist() == [[[1, 2]]] and p.logprobs[0, 0, 0] == -1.0
    with pytest.raises(ValueError, match="read-only"):
        p.tokens[0, 0, 0] = 2


# ------------------------------------------------------------------- dtypes that look like integers
@pytest.mark.parametrize("dtype", ["m8[s]", "M8[s]", "?", "c16", "O"])
def test_non_integer_token_dtypes_are_refused_by_name(dtype: str) -> None:
    from flashtrie.tokens import check_token_sequence

    arr = np.ones((1, 1, 2), dtype=dtype)
    if dtype == "O":
        arr[0, 0, 0] = np.timedelta64(1)
    name = re.escape(str(np.dtype(dtype)))
    with pytest.raises(InputError, match=f"^tokens: expected an integer array, got dtype {name}"):
        Proposals(arr, np.zeros((1, 1, 2), np.float32))
    with pytest.raises(InputError, match="^logprobs: expected a float array"):
        Proposals(np.ones((1, 1, 2), dtype=np.int64), np.ones((1, 1, 2), dtype=dtype))
    with pytest.raises(InputError, match=r"^prefixes\[0\]\[0\]: .* is not an integer token"):
        check_token_sequence(arr[0, 0], "prefixes[0]")
    with pytest.raises(InputError, match=r"keyword 0"):
        KeywordSet.from_sequences([arr[0, 0]])


def test_timedelta_scalars_in_a_list_are_not_tokens() -> None:
    from flashtrie.tokens import check_token_sequence

    with pytest.raises(InputError, match=r"^p\[1\]: .*\(timedelta64\) is not an integer token"):
        check_token_sequence([1, np.timedelta64(2)], "p")


# ------------------------------------------------------------------------------ PyTorch CPU tensors
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float64"])
def test_torch_logprobs_convert_exactly(dtype: str) -> None:
    torch = pytest.importorskip("torch")
    values = [-0.1, -1.3, -7.0e-5, -float("inf"), -65504.0]
    t_lp = torch.tensor([[values]], dtype=getattr(torch, dtype), requires_grad=dtype != "float64")
    p = Proposals(torch.tensor([[[1, 2, 3, 4, 5]]]), t_lp)
    want = t_lp.detach().to(torch.float32).numpy()  # bf16 / f16 values are exact in float32
    assert p.logprobs.dtype == np.float32
    assert p.logprobs.view(np.uint32).tolist() == want.view(np.uint32).tolist()


def test_torch_tensors_that_cannot_be_tokens_get_flashtrie_errors() -> None:
    torch = pytest.importorskip("torch")
    lp = torch.zeros((1, 1, 2))
    for dtype in ("bfloat16", "float16", "float32", "bool"):
        with pytest.raises(InputError, match="^tokens: expected an integer array, got dtype"):
            Proposals(torch.ones((1, 1, 2), dtype=getattr(torch, dtype)), lp)
    p = Proposals(torch.tensor([[[7, -1]]], dtype=torch.int32), torch.zeros((1, 1, 2), requires_grad=True))
    assert p.tokens.tolist() == [[[7, 2**32 - 1]]]
