"""Tests of flashtrie.datasets: generators, determinism, validity, files."""

from __future__ import annotations

import hashlib
import zipfile

import numpy as np
import pytest
from flashtrie.datasets import (
    KeywordParams,
    QueryParams,
    QueryWorkload,
    generate_keywords,
    generate_keywords_from,
    generate_queries,
    keyword_stats,
    library_fingerprint,
    load_keywords,
    load_workload,
    save_keywords,
    save_workload,
)
from flashtrie.datasets._keywords_v2 import CHUNK, VERSION
from flashtrie.datasets._queries_v2 import VERSION as QUERY_VERSION

from flashtrie import InputError, KeywordSet, Proposals
from flashtrie.limits import PAD_TOKEN

WEIGHTS = (2, 10, 45, 25, 10, 5, 2, 1)


@pytest.fixture(scope="module")
def small_lib() -> KeywordSet:
    return generate_keywords(20_000, vocab_size=50_000, seed=3)


@pytest.fixture(scope="module")
def mid_lib() -> KeywordSet:
    return generate_keywords(200_000, seed=1)


def _prefix_set(ks: KeywordSet) -> set[tuple[int, ...]]:
    out: set[tuple[int, ...]] = set()
    for kw in ks.to_sequences():
        for i in range(1, len(kw) + 1):
            out.add(tuple(kw[:i]))
    return out


# ------------------------------------------------------------------------------------------ keywords
def test_keywords_shape_dtype_range(small_lib: KeywordSet) -> None:
    ks = small_lib
    assert len(ks) == 20_000
    assert ks.tokens.dtype == np.uint32 and ks.offsets.dtype == np.int64
    assert ks.offsets[0] == 0 and ks.offsets[-1] == ks.tokens.size
    assert ks.lengths.min() >= 1 and ks.lengths.max() <= len(WEIGHTS)
    assert int(ks.tokens.max()) < 50_000
    KeywordSet.from_arrays(ks.tokens, ks.offsets)  # validates


def test_keywords_deterministic() -> None:
    a = generate_keywords(5_000, seed=7)
    b = generate_keywords(5_000, seed=7)
    c = generate_keywords(5_000, seed=8)
    assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.offsets, b.offsets)
    assert not (a.tokens.size == c.tokens.size and np.array_equal(a.tokens, c.tokens))
    p = KeywordParams(n=5_000, seed=7)
    assert np.array_equal(generate_keywords_from(p).tokens, a.tokens)
    d1 = generate_keywords(5_000, seed=7, duplicate_fraction=0.05)
    d2 = generate_keywords(5_000, seed=7, duplicate_fraction=0.05)
    assert np.array_equal(d1.tokens, d2.tokens) and np.array_equal(d1.offsets, d2.offsets)


def test_length_distribution(mid_lib: KeywordSet) -> None:
    hist = np.bincount(mid_lib.lengths, minlength=len(WEIGHTS) + 1)[1:] / len(mid_lib)
    want = np.asarray(WEIGHTS, float) / sum(WEIGHTS)
    assert np.allclose(hist, want, atol=0.01)


def test_custom_length_weights() -> None:
    ks = generate_keywords(3_000, length_weights=(0, 1, 0, 1), seed=2)
    assert set(np.unique(ks.lengths).tolist()) == {2, 4}


def test_structure_is_realistic(mid_lib: KeywordSet) -> None:
    s = keyword_stats(mid_lib)
    assert s["keywords"] == 200_000
    assert s["duplicates"] < 0.01 * len(mid_lib)
    # heavy-tailed root fan-out, most inner nodes small, prefixes shared
    assert 1_000 < s["root_fanout"] < 100_000
    depth1 = s["fanout_per_depth"][1]
    assert depth1["p50"] <= 2 and depth1["max"] > 100 * depth1["p50"]
    assert s["distinct_prefixes_per_depth"][2] < 0.9 * (mid_lib.lengths >= 3).sum()
    # token frequency falls with the id (Zipf-like): the first 1% of ids are far more frequent
    counts = np.bincount(mid_lib.tokens, minlength=2_200_000)
    assert counts[:22_000].sum() > 10 * counts[-22_000:].sum()


@pytest.mark.parametrize("dup", [0.0, 0.02])
def test_keywords_same_for_any_thread_count(dup: float) -> None:
    # 600k keywords span three fixed chunks; the chunking, not the threads, fixes the streams
    n = 2 * CHUNK + 75_000
    one = generate_keywords(n, seed=11, duplicate_fraction=dup, threads=1)
    for threads in (2, 3, 7):
        other = generate_keywords(n, seed=11, duplicate_fraction=dup, threads=threads)
        assert np.array_equal(one.offsets, other.offsets) and np.array_equal(one.tokens, other.tokens)
    assert library_fingerprint(one) != library_fingerprint(generate_keywords(n, seed=12, threads=2))


def test_version_1_still_reproduces() -> None:
    # fingerprints of the version-1 output at commit 59cae3b (the generator before version 2)
    v1 = "flashtrie.datasets.keywords/1"
    assert library_fingerprint(generate_keywords(30_000, seed=5, generator=v1)) == "d1b1d8113c792560"
    assert library_fingerprint(generate_keywords(5_000, seed=2, duplicate_fraction=0.1, generator=v1)) \
        == "e05ca61b9323f28d"
    p = KeywordParams(n=10, generator=v1)
    assert KeywordParams.from_dict(p.to_dict()).generator == v1
    with pytest.raises(InputError, match="generator"):
        KeywordParams(n=10, generator="flashtrie.datasets.keywords/9")


def test_version_2_is_the_default_and_has_no_accidental_duplicates() -> None:
    assert KeywordParams(n=1).generator == VERSION
    ks = generate_keywords(3 * CHUNK, seed=4, threads=2)
    s = keyword_stats(ks)
    assert s["duplicates"] == 0
    # every keyword of a parent ends on its own slot: equal parents never share a last token
    assert s["distinct_prefixes_per_depth"][0] > 10_000


def test_duplicate_fraction() -> None:
    ks = generate_keywords(10_000, duplicate_fraction=0.05, seed=4)
    s = keyword_stats(ks)
    assert 300 < s["duplicates"] <= 500
    seqs = ks.to_sequences()
    assert len(set(map(tuple, seqs))) == s["distinct_keywords"]


def test_keyword_params_validated() -> None:
    with pytest.raises(InputError, match="vocab_size"):
        generate_keywords(10, vocab_size=0)
    with pytest.raises(InputError, match="length_weights"):
        generate_keywords(10, length_weights=(0, 0))
    with pytest.raises(InputError, match="n:"):
        generate_keywords(-1)
    assert len(generate_keywords(0)) == 0


def test_tiny_vocab_stays_in_range() -> None:
    ks = generate_keywords(2_000, vocab_size=7, seed=1)
    assert int(ks.tokens.max()) < 7


# ------------------------------------------------------------------------------------------ queries
@pytest.fixture(scope="module")
def dense(small_lib: KeywordSet) -> QueryWorkload:
    return generate_queries(small_lib, 6, num_steps=5, proposals_per_step=300, preset="dense", seed=5)


@pytest.fixture(scope="module")
def sparse(small_lib: KeywordSet) -> QueryWorkload:
    return generate_queries(small_lib, 6, num_steps=5, proposals_per_step=300, preset="sparse", seed=5)


def test_queries_shapes_and_validity(dense: QueryWorkload, sparse: QueryWorkload) -> None:
    for wl in (dense, sparse):
        p = wl.proposals
        assert isinstance(p, Proposals)
        assert p.shape == (6, 5, 300)
        assert p.tokens.dtype == np.uint32 and p.logprobs.dtype == np.float32
        Proposals(p.tokens, p.logprobs)  # validates: range, no duplicates per row, no NaN / +inf
        real = p.tokens != PAD_TOKEN
        assert real.all()  # a 50k vocabulary fills every row
        assert int(p.tokens.max()) < 50_000
        assert np.all(p.logprobs < 0) and np.all(np.isfinite(p.logprobs))
        # sorted-ish: the first tenth of a row beats the last tenth on average, but rows are not sorted
        assert p.logprobs[:, :, :30].mean() > p.logprobs[:, :, -30:].mean()
        assert len(wl.relevant) == 6 and wl.topics.shape == (6, 1)
        assert isinstance(wl.params, QueryParams)


def test_queries_deterministic(small_lib: KeywordSet, dense: QueryWorkload) -> None:
    again = generate_queries(small_lib, 6, num_steps=5, proposals_per_step=300, preset="dense", seed=5)
    assert np.array_equal(again.proposals.tokens, dense.proposals.tokens)
    assert np.array_equal(again.proposals.logprobs, dense.proposals.logprobs)
    assert all(np.array_equal(a, b) for a, b in zip(again.relevant, dense.relevant, strict=True))
    other = generate_queries(small_lib, 6, num_steps=5, proposals_per_step=300, preset="dense", seed=6)
    assert not np.array_equal(other.proposals.tokens, dense.proposals.tokens)


def test_relevant_tokens_in_rows(small_lib: KeywordSet, dense: QueryWorkload, sparse: QueryWorkload) -> None:
    for wl in (dense, sparse):
        t_n = wl.proposals.shape[1]
        for q, rel in enumerate(wl.relevant):
            assert rel.size >= 1 and np.all(np.diff(rel) > 0)
            for i in rel.tolist():
                kw = small_lib[i]
                assert np.array_equal(kw[: wl.topics.shape[1]], wl.topics[q])
                for t in range(min(kw.size, t_n)):
                    assert kw[t] in wl.proposals.tokens[q, t]
    assert max(r.size for r in dense.relevant) > 8 >= max(r.size for r in sparse.relevant)
    lengths = np.concatenate([small_lib.lengths[r] for r in dense.relevant])
    assert lengths.max() >= 6  # some relevant keywords are long


def test_dense_has_many_more_valid_proposals(small_lib: KeywordSet, dense: QueryWorkload,
                                             sparse: QueryWorkload) -> None:
    prefixes = _prefix_set(small_lib)

    def valid_step0(wl: QueryWorkload) -> float:
        rows = wl.proposals.tokens[:, 0, :]
        return float(np.mean([sum((int(x),) in prefixes for x in row) for row in rows]))

    d, s = valid_step0(dense), valid_step0(sparse)
    assert d > 0.8 * 300
    assert d > 5 * s
    # step 1: the continuations of the top step-0 tokens are there too
    q = 0
    row0 = dense.proposals.tokens[q, 0]
    best = row0[np.argsort(-dense.proposals.logprobs[q, 0])[:32]]
    row1 = dense.proposals.tokens[q, 1]
    pairs = sum((int(a), int(b)) in prefixes for a in best for b in row1)
    assert pairs >= 32


def test_small_vocab_pads_rows() -> None:
    ks = generate_keywords(500, vocab_size=40, seed=2)
    wl = generate_queries(ks, 2, num_steps=3, proposals_per_step=60, preset="sparse", seed=1)
    tok = wl.proposals.tokens
    assert np.all((tok == PAD_TOKEN).sum(axis=2) == 60 - 40)
    assert np.all(tok[tok != PAD_TOKEN] < 40)
    assert np.all(wl.proposals.logprobs[tok == PAD_TOKEN] == -np.inf)


def test_query_options(small_lib: KeywordSet) -> None:
    wl = generate_queries(small_lib, 3, num_steps=4, proposals_per_step=100, preset="dense", sort_rows=True,
                          topic_depth=2, num_relevant=16, density=0.5, seed=2)
    lp = wl.proposals.logprobs
    assert np.all(np.diff(lp, axis=2) <= 0)
    assert wl.topics.shape == (3, 2) and all(r.size <= 16 for r in wl.relevant)
    assert wl.params.num_relevant == 16 and wl.params.density == 0.5 and wl.params.preset == "dense"
    with pytest.raises(InputError, match="preset"):
        generate_queries(small_lib, 1, preset="nope")
    with pytest.raises(InputError, match="density"):
        generate_queries(small_lib, 1, density=2.0)


def test_relevant_ids_are_canonical() -> None:
    ks = KeywordSet.from_sequences([[1, 2, 3]] * 3 + [[1, 2, 4], [1, 2, 3, 5]])
    wl = generate_queries(ks, 4, num_steps=4, proposals_per_step=8, preset="sparse", num_relevant=5,
                          min_topic_size=1, seed=0)
    for rel in wl.relevant:
        assert set(rel.tolist()) <= {0, 3, 4}


# ------------------------------------------------------------------------------------------ files
def test_keywords_round_trip(tmp_path, small_lib: KeywordSet) -> None:
    params = KeywordParams(n=20_000, vocab_size=50_000, seed=3)
    path = tmp_path / "lib.npz"
    save_keywords(path, small_lib, params)
    ks, p = load_keywords(path)
    assert np.array_equal(ks.tokens, small_lib.tokens) and np.array_equal(ks.offsets, small_lib.offsets)
    assert p == params
    save_keywords(tmp_path / "bare.npz", small_lib, compress=True)
    assert load_keywords(tmp_path / "bare.npz").params is None
    assert not list(tmp_path.glob(".*.tmp"))


def test_workload_round_trip(tmp_path, dense: QueryWorkload) -> None:
    path = tmp_path / "wl.npz"
    save_workload(path, dense)
    wl = load_workload(path)
    assert np.array_equal(wl.proposals.tokens, dense.proposals.tokens)
    assert np.array_equal(wl.proposals.logprobs, dense.proposals.logprobs)
    assert all(np.array_equal(a, b) for a, b in zip(wl.relevant, dense.relevant, strict=True))
    assert np.array_equal(wl.topics, dense.topics)
    assert wl.params == dense.params


def test_wrong_files_refused(tmp_path, small_lib: KeywordSet, dense: QueryWorkload) -> None:
    lib_path, wl_path = tmp_path / "lib.npz", tmp_path / "wl.npz"
    save_keywords(lib_path, small_lib)
    save_workload(wl_path, dense)
    with pytest.raises(InputError, match="expected a keyword library.*found a query workload"):
        load_keywords(wl_path)
    with pytest.raises(InputError, match="expected a query workload.*found a keyword library"):
        load_workload(lib_path)
    foreign = tmp_path / "foreign.npz"
    np.savez(foreign, a=np.arange(3))
    with pytest.raises(InputError, match="expected a keyword library.*without a flashtrie 'meta'"):
        load_keywords(foreign)
    data = lib_path.read_bytes()
    for cut in (10, len(data) // 2, len(data) - 5):
        bad = tmp_path / f"cut{cut}.npz"
        bad.write_bytes(data[:cut])
        with pytest.raises(InputError) as e:
            load_keywords(bad)
        assert "\n" not in str(e.value) and "keyword library" in str(e.value)
    text = tmp_path / "x.npz"
    text.write_text("hello")
    with pytest.raises(InputError, match="not a readable .npz"):
        load_workload(text)
    with pytest.raises(InputError, match="no such file"):
        load_keywords(tmp_path / "missing.npz")
    # a zip whose meta says another version
    ver = tmp_path / "ver.npz"
    np.savez(ver, meta=np.array('{"format": "flashtrie.datasets.keywords", "version": 99}'))
    with pytest.raises(InputError, match="version 99"):
        load_keywords(ver)
    assert zipfile.is_zipfile(lib_path)
    # an unknown compression method in the zip directory (zipfile raises NotImplementedError)
    raw = bytearray(data)
    i = raw.rfind(b"PK\x01\x02")
    raw[i + 10] ^= 0xFF
    odd = tmp_path / "odd.npz"
    odd.write_bytes(bytes(raw))
    with pytest.raises(InputError, match="not a readable .npz"):
        load_keywords(odd)
    bad_params = tmp_path / "params.npz"
    np.savez(bad_params, meta=np.array('{"format": "flashtrie.datasets.keywords", "version": 1, "num_keywords": 1, '
                                       '"params": {"bogus": 1}}'), tokens=np.array([1], np.uint32),
             offsets=np.array([0, 1], np.int64))
    with pytest.raises(InputError, match=f"{bad_params}.*generator parameters"):
        load_keywords(bad_params)


# ------------------------------------------------------------------------------------------ versions
def _workload_digest(wl: QueryWorkload) -> str:
    h = hashlib.sha256()
    for a in (wl.proposals.tokens, wl.proposals.logprobs, wl.topics, *wl.relevant):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def test_query_version_1_still_reproduces(small_lib: KeywordSet) -> None:
    # digests of version-1 workloads over the version-1 library, at commit 59cae3b (before version 2)
    kw = generate_keywords(20_000, vocab_size=50_000, seed=3, generator="flashtrie.datasets.keywords/1")
    want = {"dense": "fed1646d3c84b0ae", "sparse": "52d4754554da98f4"}
    for preset, digest in want.items():
        wl = generate_queries(kw, 3, proposals_per_step=300, preset=preset, seed=5, min_topic_size=64,
                              generator="flashtrie.datasets.queries/1")
        assert wl.params.generator == "flashtrie.datasets.queries/1"
        assert _workload_digest(wl) == digest


@pytest.mark.slow
def test_queries_same_for_any_thread_count() -> None:
    kw = generate_keywords(2_500_000, seed=2, duplicate_fraction=0.01, threads=2)  # several ranges per pass
    a = generate_queries(kw, 4, proposals_per_step=200, seed=1, min_topic_size=256, threads=1)
    b = generate_queries(kw, 4, proposals_per_step=200, seed=1, min_topic_size=256, threads=3)
    assert a.params.generator == QUERY_VERSION and _workload_digest(a) == _workload_digest(b)


def _inclusion(generator: str, kw: KeywordSet, runs: int, **kw_args: object) -> np.ndarray:
    wl = generate_queries(kw, runs, num_steps=2, proposals_per_step=8, preset="sparse", seed=9,
                          generator=generator, **kw_args)
    return np.bincount(np.concatenate(wl.relevant), minlength=len(kw)) / runs


@pytest.mark.slow
def test_query_versions_draw_the_same_law() -> None:
    # one topic (first token 1) of 7 keywords of lengths 1..4 (two duplicates of keyword 4): the chance
    # that each is relevant (length-biased, without replacement) must agree between the versions
    seqs = [[1], [1, 2], [1, 3], [1, 4, 5], [1, 4, 6, 7], [1, 4, 6, 7], [1, 8, 9, 10], [2, 3]]
    kw = KeywordSet.from_sequences(seqs)
    args = {"num_relevant": 3, "min_topic_size": 5, "length_bias": 1.5, "topic_sample": 4}
    v1 = _inclusion("flashtrie.datasets.queries/1", kw, 3000, **args)
    v2 = _inclusion(QUERY_VERSION, kw, 3000, **args)
    assert v1[5] == v2[5] == 0  # keyword 5 repeats keyword 4: relevant ids are canonical
    assert v1[7] == v2[7] == 0  # outside the topic
    assert np.abs(v1 - v2).max() < 0.05  # 3000 draws: standard error of a difference about 0.013
    assert v2[6] > v2[3] > v2[1] > v2[0] > 0  # longer is likelier (length_bias > 0)


def test_stored_member_fast_read_checks_crc(tmp_path, small_lib: KeywordSet) -> None:
    path = tmp_path / "lib.npz"
    save_keywords(path, small_lib)
    back = load_keywords(path).keywords
    assert np.array_equal(back.tokens, small_lib.tokens) and np.array_equal(back.offsets, small_lib.offsets)
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("tokens.npy")
    raw = bytearray(path.read_bytes())
    raw[info.header_offset + 30 + len("tokens.npy") + 200] ^= 0x01  # one bit inside the token array
    bad = tmp_path / "flip.npz"
    bad.write_bytes(bytes(raw))
    with pytest.raises(InputError, match="CRC"):
        load_keywords(bad)
    # a compressed file takes numpy's own reader
    packed = tmp_path / "packed.npz"
    save_keywords(packed, small_lib, compress=True)
    assert np.array_equal(load_keywords(packed).keywords.tokens, small_lib.tokens)
