"""Quality against beam width: metrics on hand-computed cases, the tasks' rules, the models, deterministic
training, and a toy run end to end (task -> training -> constrained decoding -> metrics -> records ->
report), through the command line too.

``tests/data/quality_fixture.json`` holds a slice of real WordNet 3.0 (the 300 synsets of the most
polysemous lemmas and every lemma of them, as the ``wordnet-synsets`` library holds them, renumbered;
WordNet licence), so CI needs neither WordNet nor GPT-2's vocabulary: tokens are UTF-8 bytes.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

tiktoken = pytest.importorskip("tiktoken")

from flashtrie.datasets import real  # noqa: E402
from flashtrie.datasets.quality_groups import MAX_RELEVANT, MIN_RELEVANT, build_group_task  # noqa: E402
from flashtrie.datasets.quality_tasks import (  # noqa: E402
    EOS,
    SEP,
    build_task,
    city_subset,
    load_task,
    save_task,
    task_from_library,
)
from flashtrie.harness.quality_eval import eval_sample, nar_library  # noqa: E402
from flashtrie.harness.quality_metrics import (  # noqa: E402
    bootstrap_ci,
    mean_metrics,
    paired_difference,
    precision_ceiling,
    query_metrics,
    ranked,
)

from flashtrie.errors import InputError  # noqa: E402
from flashtrie.hf import generated_keywords  # noqa: E402
from flashtrie.index import NarrowLoudsIndex  # noqa: E402

FIXTURE = Path(__file__).parent / "data" / "quality_fixture.json"


# ------------------------------------------------------------------------------------------------ metrics
def test_metrics_fewer_results_than_k_divide_by_k():
    m = query_metrics([5, 7], [5, 9], ks=(10, 100))
    assert m["precision@10"] == 1 / 10 and m["precision@100"] == 1 / 100
    assert m["recall@10"] == 1 / 2 and m["exact_match"] == 1.0
    # nDCG@10: the hit at rank 1 gains 1; the ideal ranks both relevant ids first: 1 + 1/log2(3)
    assert m["ndcg@10"] == pytest.approx(1 / (1 + 1 / math.log2(3)))


def test_metrics_repeats_are_removed_and_the_list_closes_up():
    # ranked 3, 3, 4: the repeat of 3 is dropped, so 4 moves up to rank 2 and is in the top 2
    assert ranked([3, 3, 4]) == [3, 4]
    m = query_metrics([3, 3, 4], [3, 4], ks=(2,))
    assert m["precision@2"] == 1.0 and m["recall@2"] == 1.0 and m["ndcg@2"] == pytest.approx(1.0)
    m = query_metrics([3, 3, 3], [3], ks=(10,))
    assert m["precision@10"] == 1 / 10 and m["recall@10"] == 1.0


def test_metrics_ndcg_hand_computed():
    # relevant {2, 9}; ranked 8, 2, 9: hits at ranks 2 and 3
    m = query_metrics([8, 2, 9], [2, 9], ks=(2, 3))
    ideal = 1 + 1 / math.log2(3)
    assert m["ndcg@2"] == pytest.approx((1 / math.log2(3)) / ideal)
    assert m["ndcg@3"] == pytest.approx((1 / math.log2(3) + 1 / math.log2(4)) / ideal)


def test_metrics_filtered_setting_excludes_known_answers():
    # 5 is a training answer of the query: removed, so 7 is rank 1
    m = query_metrics([5, 7, 1], [7], ks=(1,), exclude={5})
    assert m["precision@1"] == 1.0 and m["exact_match"] == 1.0
    mean = mean_metrics([[5, 7, 1]], [[7]], ks=(1,), exclude=[{5}])
    assert mean["mean_results"] == 2.0


def test_metrics_ties_follow_the_given_order():
    # two results with one score: the list's order (the search's tie-break) decides which is in the top 1
    assert query_metrics([8, 2], [2], ks=(1,))["precision@1"] == 0.0
    assert query_metrics([2, 8], [2], ks=(1,))["precision@1"] == 1.0


def test_metrics_no_relevant_item_and_padding():
    m = query_metrics([1, 2, -1, 5], [], ks=(10,))
    assert m["precision@10"] == 0.0 and m["recall@10"] is None and m["ndcg@10"] is None
    assert m["exact_match"] == 0.0
    assert query_metrics([1, -1, 2], [2], ks=(10,))["precision@10"] == 0.0  # padding ends the list
    mean = mean_metrics([[1], [4, 2]], [[], [2, 9]], ks=(10,))
    assert mean["recall@10"] == 0.5  # the query without relevant ids is left out of recall
    assert mean["precision@10"] == pytest.approx((0 + 1 / 10) / 2)
    assert mean["exact_match"] == 0.0 and mean["mean_results"] == 1.5
    assert math.isnan(mean_metrics([[1]], [[]], ks=(10,))["recall@10"])
    with pytest.raises(ValueError, match="ks: expected cut-offs >= 1"):
        query_metrics([1], [1], ks=(0,))


def test_bootstrap_intervals():
    lo, hi = bootstrap_ci([0.5] * 20)
    assert lo == hi == 0.5
    lo, hi = bootstrap_ci([0.0, 1.0] * 50)
    assert lo < 0.5 < hi and 0.3 < lo and hi < 0.7
    assert all(math.isnan(x) for x in bootstrap_ci([None]))
    # paired: b is a + 0.1 on every query, so the difference is exactly 0.1 whatever the resample
    a = list(np.linspace(0, 0.8, 30))
    d, lo, hi = paired_difference(a, [x + 0.1 for x in a])
    assert d == pytest.approx(0.1) and lo == pytest.approx(0.1) and hi == pytest.approx(0.1)
    with pytest.raises(ValueError, match="same queries"):
        paired_difference([1.0], [1.0, 2.0])
    mean = mean_metrics([[1], [2]], [[1], [3]], ks=(1,), intervals=True)
    assert mean["precision@1_ci"] == [pytest.approx(0.0), pytest.approx(1.0)]


def test_precision_ceiling_is_the_best_ranking():
    assert precision_ceiling([[1, 2, 3], [4], [4, 4]], 2) == pytest.approx((2 / 2 + 1 / 2 + 1 / 2) / 3)
    assert precision_ceiling([list(range(150))], 100) == 1.0 and math.isnan(precision_ceiling([], 10))


# -------------------------------------------------------------------------------------------------- tasks
ENC = tiktoken.Encoding("bytes", pat_str=r"\S+|\s+", mergeable_ranks={bytes([i]): i for i in range(256)},
                        special_tokens={})


def _bytes(texts):
    return ENC.encode_ordinary_batch(list(texts))


def fixture_library() -> real.RealLibrary:
    d = json.loads(FIXTURE.read_text())
    return real.RealLibrary("wordnet-synsets", d["texts"], real.keywords_from_texts(d["texts"], ENC),
                            d["query_texts"], [np.asarray(r, dtype=np.int64) for r in d["relevant"]], {})


def fixture_task(seed: int = 0, size: int = 300):
    return task_from_library("wordnet", fixture_library(), size, ENC, seed=seed)


def test_task_split_is_seeded_held_out_and_round_trips(tmp_path):
    a, b = fixture_task(0), fixture_task(0)
    assert a.splits["test"].texts == b.splits["test"].texts
    assert fixture_task(1).splits["test"].texts != a.splits["test"].texts
    parts = [set(a.splits[k].texts) for k in ("train", "validation", "test")]
    assert not (parts[0] & parts[2]) and not (parts[0] & parts[1]) and not (parts[1] & parts[2])
    assert not (set(a.texts) & parts[2])  # a held-out query is never an identifier's text (indexing trains those)
    assert all(set(s.kinds) == {"one", "several"} for s in a.splits.values())
    # relevant ids are the library's relation, and identifiers keep their texts and tokens
    lib = fixture_library()
    of = dict(zip(lib.query_texts, lib.relevant, strict=True))
    for q, r, kind in zip(a.splits["test"].texts, a.splits["test"].relevant, a.splits["test"].kinds, strict=True):
        assert [a.texts[i] for i in r] == [lib.texts[i] for i in of[q]]
        assert kind == ("one" if r.size == 1 else "several")
    assert [bytes(a.vocab[a.library[i]].astype(np.uint8)).decode() for i in (0, 299)] == [a.texts[0], a.texts[299]]
    assert int(a.library.tokens.min()) >= 3 and a.vocab[:3].tolist() == [-1, -1, -1]
    save_task(a, tmp_path / "t.npz")
    c = load_task(tmp_path / "t.npz")
    assert c.texts == a.texts and np.array_equal(c.library.tokens, a.library.tokens)
    assert all(np.array_equal(x, y) for x, y in zip(c.splits["test"].relevant, a.splits["test"].relevant, strict=True))
    assert c.splits["train"].kinds == a.splits["train"].kinds and c.info == a.info


def group_fixture(seed: int = 0):
    """Three hand-made groups of 100 to 150 members (two sharing members, as a hierarchy's do) and one too small."""
    groups = {"alpha": [f"a{i:03d}" for i in range(150)], "beta": [f"a{i:03d}" for i in range(50, 150)]
              + [f"b{i:03d}" for i in range(20)], "gamma": [f"c{i:03d}" for i in range(100)],
              "tiny": [f"t{i}" for i in range(5)]}
    return groups, build_group_task("groups", groups, _bytes, size=10_000, seed=seed)


def test_group_task_holds_out_pairs_and_round_trips(tmp_path):
    groups, task = group_fixture()
    tr, va, te = (task.splits[k] for k in ("train", "validation", "test"))
    assert tr.texts == va.texts == te.texts == ["alpha", "beta", "gamma"]  # 'tiny' has under 100 members
    assert sorted(task.texts) == task.texts and len(task.texts) == 270
    for i, q in enumerate(tr.texts):
        parts = [set(x.relevant[i].tolist()) for x in (tr, va, te)]
        assert not (parts[0] & parts[1]) and not (parts[0] & parts[2]) and not (parts[1] & parts[2])
        assert {task.texts[j] for p in parts for j in p} == set(groups[q])  # the pairs partition the group
        n = len(groups[q])
        assert len(parts[1]) == round(0.1 * n) and len(parts[2]) == round(0.4 * n)
        assert set(task.known("test")[i].tolist()) == parts[0] | parts[1]
        assert set(task.known("train")[i].tolist()) == parts[1] | parts[2]
        assert tr.queries[i][0] == SEP  # a query asks for its members; the identifier names itself
    assert build_group_task("groups", groups, _bytes, size=10_000, seed=1).splits["test"].relevant[0].tolist() \
        != te.relevant[0].tolist()
    # the size rule: queries in a seeded order while their union fits (alpha and beta share 100 members)
    small = build_group_task("groups", groups, _bytes, size=170, seed=0)
    assert len(small.texts) <= 170 and small.splits["test"].texts in (["alpha", "beta"], ["beta", "gamma"], ["gamma"],
                                                                       ["alpha"], ["beta"])
    save_task(task, tmp_path / "g.npz")
    back = load_task(tmp_path / "g.npz")
    assert back.splits["test"].texts == te.texts and back.info == task.info
    assert all(np.array_equal(a, b) for a, b in zip(back.known("test"), task.known("test"), strict=True))
    sizes = task.sizes()
    assert sizes["test_precision@100_ceiling"] == pytest.approx(np.mean([min(r.size, 100) / 100 for r in te.relevant]))
    assert sizes["test_median_relevant"] == float(np.median([r.size for r in te.relevant]))
    with pytest.raises(InputError, match="no query has 100 to 2000"):
        build_group_task("groups", {"tiny": groups["tiny"]}, _bytes, size=100, seed=0)
    with pytest.raises(InputError, match="fractions"):
        build_group_task("groups", groups, _bytes, size=100, seed=0, fractions=(0.5, 0.5))


@pytest.mark.skipif(not Path("/usr/share/wordnet/data.noun").is_file(), reason="needs Debian's wordnet-base")
def test_wordnet_hyponym_groups_are_the_closure():
    from flashtrie.datasets.quality_groups import wordnet_hyponym_groups

    g = wordnet_hyponym_groups()
    assert {"car", "bicycle", "sled"} <= set(g["vehicle"])  # car: motor vehicle: self-propelled vehicle: vehicle
    assert "vehicle" not in g["vehicle"] and "oak" in g["tree"] and "poodle" in g["dog"]
    assert MIN_RELEVANT <= len(g["vehicle"]) <= MAX_RELEVANT


def test_wordnet_subset_takes_the_most_polysemous_lemmas_whole():
    task = fixture_task(size=100)
    lib = fixture_library()
    of = dict(zip(lib.query_texts, lib.relevant, strict=True))
    top = max(of, key=lambda q: of[q].size)  # 'break': 75 synsets, taken whole, then what fits
    assert set(lib.texts[i] for i in of[top]) <= set(task.texts) and len(task.library) <= 100
    rel = dict(zip(task.splits["train"].texts + task.splits["test"].texts + task.splits["validation"].texts,
                   task.splits["train"].relevant + task.splits["test"].relevant + task.splits["validation"].relevant,
                   strict=True))
    assert [task.texts[i] for i in rel[top]] == [lib.texts[i] for i in of[top]]


def _city(gid, name, admin, alt=()):
    return {"geonameid": gid, "name": name, "countrycode": "US", "admin1code": admin, "alternatenames": list(alt)}


CITIES = {str(c["geonameid"]): c for c in [
    _city(1, "Springfield", "IL", ["Springfield IL", "Спрингфилд"]), _city(2, "Springfield", "MO", ["27"]),
    _city(3, "Paris", "TX", ["Parigi"]), _city(4, "Paris", "KY"), _city(5, "Lonely", "AK", ["Solo"]),
]}


def test_city_task_rules(tmp_path):
    lib = real.load_geonames_cities(tmp_path, cities=CITIES, countries={"US": "United States"}, encoding=ENC)
    assert city_subset(lib, 10, 0).tolist() == [0, 1, 2, 3]  # ambiguous names' cities only ('Lonely' is alone)
    assert city_subset(lib, 3, 0).size == 2  # a name's cities come whole: one pair fits in 3
    task = task_from_library("cities", lib, 10, ENC, seed=0, fractions=(0.0, 0.0))
    train = dict(zip(task.splits["train"].texts, task.splits["train"].relevant, strict=True))
    assert sorted(train) == ["Parigi", "Paris", "Springfield", "Springfield IL"]  # no Cyrillic, no bare codes
    assert [task.texts[i] for i in train["Springfield"]] == ["Springfield, IL, United States",
                                                             "Springfield, MO, United States"]
    with pytest.raises(InputError, match="built from geonames-cities"):
        task_from_library("cities", fixture_library(), 10, ENC, seed=0)


def test_task_refuses_duplicate_identifiers_and_bad_ids():
    with pytest.raises(InputError, match="given twice"):
        build_task("x", ["a", "a"], [[5], [5]], {"q": [0]}, _bytes, seed=0)
    with pytest.raises(InputError, match="out of range"):
        build_task("x", ["a", "b"], [[5], [6]], {"q": [2]}, _bytes, seed=0)
    with pytest.raises(InputError, match="same tokens"):
        build_task("x", ["a", "b"], [[7], [7]], {"q": [0]}, _bytes, seed=0)
    with pytest.raises(InputError, match="size: expected"):
        fixture_task(size=0)


def test_training_examples_index_every_identifier_then_the_train_pairs():
    from flashtrie.harness.quality_train import training_examples

    task = fixture_task()
    inputs, ids = training_examples(task)
    n = len(task.library)
    assert ids[:n].tolist() == list(range(n)) and all(np.array_equal(inputs[i], task.library[i]) for i in range(n))
    train = task.splits["train"]
    assert ids.size == n + sum(r.size for r in train.relevant)
    first = train.relevant[0]
    assert ids[n:n + first.size].tolist() == first.tolist() and np.array_equal(inputs[n], train.queries[0])


def test_nar_library_appends_eos_and_generated_keywords_map_back():
    task = fixture_task()
    lib = nar_library(task)
    assert len(lib) == len(task.library)
    for i in (0, 17, len(lib) - 1):
        assert lib[i].tolist() == task.library[i].tolist() + [EOS]
    index = NarrowLoudsIndex.build(task.library)
    kw = task.library[3].tolist()
    seqs = np.array([[1, *kw, EOS, 0], [1, *kw, 0, 0], [1, *kw[:-1], EOS, 0, 0], [EOS, *kw, EOS, 0]])
    # whole keyword + EOS; no EOS; EOS before the keyword ends; an EOS inside the prompt is not read
    assert generated_keywords(index, seqs, EOS, 1).tolist() == [3, -1, -1, 3]
    assert generated_keywords(index, torch.from_numpy(seqs), [EOS, 99], 1).tolist() == [3, -1, -1, 3]
    pick = eval_sample(task.splits["test"], 10, 0)
    kinds = [task.splits["test"].kinds[i] for i in pick]
    several = min(5, task.splits["test"].kinds.count("several"))  # the smaller kind all, up to half
    assert len(pick) == 10 and kinds.count("several") == several and kinds.count("one") == 10 - several


# ---------------------------------------------------------------------------------------- models, training
def test_nar_head_reads_the_query_by_position():
    from flashtrie.harness.quality_models import ModelSize, NarHead

    torch.manual_seed(0)
    head = NarHead(50, 8, 5, ModelSize(32, 1, 2)).eval()
    q = torch.tensor([[5, 6, 7, 0], [7, 6, 5, 0]])
    out = head(q)
    assert out.shape == (2, 5, 50)
    assert not torch.allclose(out[0], out[1])  # the same tokens in another order: other distributions
    assert torch.allclose(head(q[:, :3]), out, atol=1e-5)  # padding is not read


@pytest.mark.slow  # a minute of training on 2 cores
def test_training_is_deterministic_with_the_seed_and_learns():
    from flashtrie.harness.quality_models import ModelSize
    from flashtrie.harness.quality_train import TrainConfig, train_ar, train_nar

    task = fixture_task()
    cfg = TrainConfig(4, 8, 1e-3, warmup=2, size=ModelSize(32, 1, 2))
    for train in (train_nar, train_ar):
        a, b = train(task, cfg, 3, "cpu"), train(task, cfg, 3, "cpu")
        assert a.losses == b.losses
        assert train(task, cfg, 4, "cpu").losses != a.losses
    t = train_nar(task, TrainConfig(40, 32, 3e-3, warmup=5, size=ModelSize(32, 1, 2)), 0, "cpu")
    assert np.mean(t.losses[-5:]) < 0.7 * np.mean(t.losses[:5])
    guarded = train_nar(task, TrainConfig(10**6, 8, 1e-3, warmup=2, size=ModelSize(32, 1, 2), max_seconds=0.5), 0,
                        "cpu")
    assert 0 < len(guarded.losses) < 10**6 and guarded.describe()["steps_run"] == len(guarded.losses)


# ------------------------------------------------------------------------------------------------- e2e
@pytest.mark.slow  # trains both models on the toy config
def test_toy_run_end_to_end(tmp_path):
    from flashtrie.harness.quality_report import summary_table
    from flashtrie.harness.quality_run import CONFIGS, run_quality
    from flashtrie.harness.records import Record, read_records
    from flashtrie.harness.report import build_report

    task = fixture_task()
    out = tmp_path / "q.jsonl"
    lines: list[str] = []
    recs = run_quality([task], CONFIGS["toy"], out=out, cache=str(tmp_path / "ckpt"),
                       make=lambda **kw: Record(env={}, command=["test"], run_id="r", timestamp="t", **kw),
                       progress=lines.append, device="cpu")
    stored = read_records(out)
    assert len(stored) == len(recs) > 0
    cfg = CONFIGS["toy"]
    keys = {(r.config["model"], r.backend, r.config["beam_width"]) for r in stored}
    assert keys == ({("nar", b, beam) for b in ("numpy", "unconstrained") for beam in cfg.nar_beams}
                    | {("ar", b, beam) for b in ("hf+numpy", "hf") for beam in cfg.ar_beams})
    for r in stored:
        assert r.kind == "quality" and r.status == "ok"
        assert 0.0 <= r.metrics["precision@100"] <= 1.0 and r.metrics["recall@100"] >= r.metrics["recall@10"]
        assert len(r.config["model_info"]["checkpoint_sha256"]) == 64
        assert r.workload["identifiers"] == len(task.library)
    nar = {r.config["beam_width"]: r for r in stored if r.config["model"] == "nar" and r.backend == "numpy"}
    assert nar[64].metrics["mean_results"] == 64  # a beam of B returns B results: the pool fills
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["wordnet-ar-toy.pt", "wordnet-nar-toy.pt"]
    assert any("NAR beam" in line for line in lines)
    table = summary_table(stored, beams=cfg.nar_beams)
    assert table[0].split()[:5] == ["task", "model", "backend", "mode", "beam"] and len(table) == 2 + len(stored)
    assert len(summary_table(stored, beams=(1,))) == 2 + 8  # beam 1 and each curve's widest beam
    md = build_report([out], tmp_path / "report").read_text()
    assert (tmp_path / "report" / "precision_vs_beam.png").stat().st_size > 0
    assert (tmp_path / "report" / "precision_vs_latency.png").stat().st_size > 0
    assert "### Task `wordnet`" in md and "| quality | `precision@100` | fraction |" in md


def test_toy_run_on_a_group_task_trains_its_plan_and_measures_both_pair_sets(tmp_path):
    from flashtrie.harness.quality_report import sections
    from flashtrie.harness.quality_run import CONFIGS, run_quality
    from flashtrie.harness.records import Record
    from flashtrie.harness.suites import Page

    _, task = group_fixture()
    recs = run_quality([task], CONFIGS["toy"], out=None, cache=str(tmp_path / "ckpt"), progress=lambda m: None,
                       make=lambda **kw: Record(env={}, command=["test"], run_id="r", timestamp="t", **kw),
                       device="cpu")
    assert recs and all(r.status == "ok" for r in recs)
    for r in recs:
        mi = r.config["model_info"]
        assert mi["steps_run"] == mi["steps"] and len(mi["val_curve"]) >= 2 and mi["best_step"] is not None
        m = r.metrics
        assert len(m["per_query"]["precision@100"]) == 3 and m["precision@100_ci"][0] <= m["precision@100"]
        assert m["precision@100_ceiling"] == pytest.approx(task.sizes()["test_precision@100_ceiling"])
        assert "train_pairs" in m and m["train_pairs"]["precision@100_ceiling"] > m["precision@100_ceiling"]
        assert m["mean_results"] <= r.config["beam_width"]
    md = "\n".join(sections(recs, Page(sources=[], out_dir=tmp_path)))
    assert "### Summary: does P@100 rise from beam 100 to 1,000?" in md and "Training pairs of the same" in md


def test_time_guard_records_skipped(tmp_path):
    from dataclasses import replace

    from flashtrie.harness.quality_run import CONFIGS, run_quality
    from flashtrie.harness.records import Record

    cfg = replace(CONFIGS["toy"], sweep_s=0.0)
    recs = run_quality([fixture_task()], cfg, out=None, cache=str(tmp_path), device="cpu", progress=lambda m: None,
                       make=lambda **kw: Record(env={}, command=["t"], run_id="r", timestamp="t", **kw))
    assert recs and all(r.status == "skipped" and "time" in r.message for r in recs)


@pytest.mark.slow  # trains both models on the toy config through the command line
def test_cli_quality_run_and_report(tmp_path, capsys):
    from flashtrie.cli import main

    save_task(fixture_task(), tmp_path / "tasks" / "wordnet.npz")
    rc = main(["quality", "run", "--tasks", str(tmp_path / "tasks"), "--config", "toy", "-o", str(tmp_path / "q.jsonl"),
               "--checkpoints", str(tmp_path / "ckpt"), "--device", "cpu", "--report", str(tmp_path / "rep"),
               "--quiet"])
    assert rc == 0 and "## Does a wider beam buy quality?" in (tmp_path / "rep" / "report.md").read_text()
    assert "P@100" in capsys.readouterr().out
    assert main(["quality", "run", "--tasks", str(tmp_path / "none"), "-o", str(tmp_path / "x.jsonl")]) == 2
    with pytest.raises(SystemExit):
        main(["quality", "tasks", "-o", str(tmp_path), "--tasks", "moons"])


def test_measurements_are_timed_warm(tmp_path, monkeypatch):
    """A backend's first call (compile, load, allocate) is not in its measurement, so the next beam's
    prediction does not extrapolate it."""
    import time

    from flashtrie.harness import quality_run
    from flashtrie.harness.records import Record

    first_cost = {"hf": 1000.0, "unconstrained": 3.0}  # seconds

    def ar_first_slow(fn):
        calls = []

        def wrapped(*args, **kwargs):
            lists, secs = fn(*args, **kwargs)
            calls.append(1)
            return lists, secs + (first_cost["hf"] if len(calls) == 1 else 0.0)
        return wrapped

    def search_first_slow(fn):
        calls = []

        def wrapped(*args, **kwargs):
            if not calls:
                time.sleep(first_cost["unconstrained"])
            calls.append(1)
            return fn(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(quality_run, "ar_decode", ar_first_slow(quality_run.ar_decode))
    monkeypatch.setattr(quality_run, "unconstrained_search", search_first_slow(quality_run.unconstrained_search))
    recs = quality_run.measure_task(fixture_task(), quality_run.CONFIGS["toy"], "cpu", tmp_path,
                                    lambda **kw: Record(env={}, command=["t"], run_id="r", timestamp="t", **kw),
                                    lambda m: None)
    timed_ = [r for r in recs if r.backend in ("hf", "unconstrained")]
    assert timed_ and all(r.status == "ok" for r in timed_)
    for r in timed_:
        assert r.metrics["latency_ms_per_query"] * r.workload["eval_queries"] < first_cost[r.backend] * 1e3


def test_a_measurement_predicted_past_the_sweeps_time_is_skipped(tmp_path):
    from dataclasses import replace

    from flashtrie.harness.quality_run import CONFIGS, measure_task
    from flashtrie.harness.records import Record

    cfg = replace(CONFIGS["toy"], ar_sweep_s=1e-3, ar_budget_s=1e9)
    recs = measure_task(fixture_task(), cfg, "cpu", tmp_path, progress=lambda m: None,
                        make=lambda **kw: Record(env={}, command=["t"], run_id="r", timestamp="t", **kw))
    assert all(r.status == "ok" for r in recs if r.config["model"] == "nar")
    ar = [r for r in recs if r.config["model"] == "ar"]
    assert ar and all(r.status == "skipped" for r in ar)


def test_a_wider_beam_ranks_by_the_same_score_and_finds_scores_at_least_as_high():
    """The evaluation's order is the search's score order, and beam B's k-th best score is at least beam
    b's (b < B, K = beam): a lower P@100 at a wider beam is the model's ranking, not the search's."""
    from flashtrie.harness.quality_eval import nar_library, ranked_lists, truncated
    from flashtrie.reference_cpu import NumpySearcher

    from flashtrie.search_types import SearchConfig

    task = fixture_task()
    lib = nar_library(task)
    rng = np.random.default_rng(0)
    steps, vocab = int(lib.lengths.max()), task.vocab_size
    logits = rng.normal(size=(6, steps, vocab)).astype(np.float32)
    for row in logits:  # each query favours the tokens of a few identifiers at their positions
        for i in rng.choice(len(lib), size=20, replace=False):
            kw = lib[int(i)]
            row[np.arange(kw.size), kw] += rng.uniform(2, 6)
    lp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    order = np.argsort(-lp, axis=-1, kind="stable")
    tokens, lps = order.astype(np.uint32), np.take_along_axis(lp, order, -1).astype(np.float32)
    searcher = NumpySearcher(NarrowLoudsIndex.build(lib))
    res = {b: searcher.search(truncated(tokens, lps, b), SearchConfig(beam_width=b)) for b in (8, 64)}
    for r in res.values():
        for q, ids in enumerate(ranked_lists(r)):
            sc = r.scores[q, :ids.size]
            assert np.all(np.diff(sc) <= 0) and ids.size == len(set(ids.tolist()))
    narrow, wide = res[8], res[64]
    assert np.all(wide.num_results >= narrow.num_results) and narrow.num_results.sum() > 0
    for q in range(tokens.shape[0]):
        n = int(narrow.num_results[q])
        assert np.all(wide.scores[q, :n] >= narrow.scores[q, :n])
    assert wide.num_results.sum() > narrow.num_results.sum()


def test_task_steps_plan_one_model_of_one_task() -> None:
    """A task's own planned steps replace the config's for that model only (warm-up scaled with them)."""
    from harness.quality_run import CONFIGS, smoke_config

    cfg = replace(CONFIGS["toy"], task_steps={"hyponyms/ar": 40})
    assert cfg.train_config("hyponyms", "ar").steps == 40
    assert cfg.train_config("hyponyms", "ar").warmup == 2
    assert cfg.train_config("hyponyms", "nar") == cfg.nar
    assert cfg.train_config("countries", "ar") == cfg.ar
    assert smoke_config(cfg).train_config("hyponyms", "ar").steps == 6  # a smoke run keeps its tiny plan
    assert cfg.to_dict()["task_steps"] == {"hyponyms/ar": 40}
