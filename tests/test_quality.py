"""Quality against beam width: metrics on hand-computed cases, tasks, deterministic training, and a toy run
end to end (data -> training -> constrained decoding -> metrics -> records -> report).

``tests/data/quality_fixture.json`` holds real WordNet relations (every synset of 'run', 'bank', 'break',
'line', 'head', 'light', 'play', 'cut' and the hyponyms of 'dog', 'fruit', 'vehicle', as
`flashtrie.datasets.quality_sources.wordnet_relations` reads them, renumbered), so CI needs no WordNet.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from flashtrie.datasets.quality_tasks import EOS, build_task, byte_tokenizer, load_task, save_task  # noqa: E402
from flashtrie.harness.quality_eval import IdTable, eval_sample, generated_ids, nar_library  # noqa: E402
from flashtrie.harness.quality_metrics import hits_at_k, mean_metrics, query_metrics  # noqa: E402

from flashtrie.errors import InputError  # noqa: E402

FIXTURE = Path(__file__).parent / "data" / "quality_fixture.json"


# ------------------------------------------------------------------------------------------------ metrics
def test_metrics_fewer_results_than_k_divide_by_k():
    m = query_metrics([5, 7], [5, 9], ks=(10, 100))
    assert m["precision@10"] == 1 / 10 and m["precision@100"] == 1 / 100
    assert m["recall@10"] == 1 / 2 and m["exact_match"] == 1.0


def test_metrics_duplicates_count_once_and_take_their_slot():
    # ranked 3, 3, 4: the repeat of 3 takes slot 2, so 4 is only in the top 3
    assert hits_at_k([3, 3, 4], [3, 4], 2) == 1
    assert hits_at_k([3, 3, 4], [3, 4], 3) == 2
    m = query_metrics([3, 3, 3], [3], ks=(10,))
    assert m["precision@10"] == 1 / 10 and m["recall@10"] == 1.0


def test_metrics_ties_follow_the_given_order():
    # two results with one score: the list's order (the search's tie-break) decides which is in the top 1
    assert query_metrics([8, 2], [2], ks=(1,))["precision@1"] == 0.0
    assert query_metrics([2, 8], [2], ks=(1,))["precision@1"] == 1.0


def test_metrics_no_relevant_item_and_padding():
    m = query_metrics([1, 2, -1, 5], [], ks=(10,))
    assert m["precision@10"] == 0.0 and m["recall@10"] is None and m["exact_match"] == 0.0
    assert hits_at_k([1, -1, 2], [2], 10) == 0  # padding ends the list
    mean = mean_metrics([[1], [4, 2]], [[], [2, 9]], ks=(10,))
    assert mean["recall@10"] == 0.5  # the query without relevant ids is left out of recall
    assert mean["precision@10"] == pytest.approx((0 + 1 / 10) / 2)
    assert mean["exact_match"] == 0.0 and mean["mean_results"] == 1.5
    assert math.isnan(mean_metrics([[1]], [[]], ks=(10,))["recall@10"])
    with pytest.raises(ValueError, match="k: expected >= 1"):
        hits_at_k([1], [1], 0)


# -------------------------------------------------------------------------------------------------- tasks
def fixture_task(seed: int = 0):
    d = json.loads(FIXTURE.read_text())
    return build_task("fixture", d["identifiers"], d["queries"], byte_tokenizer, seed=seed, strata=d["strata"],
                      info=d["info"])


def test_task_split_is_seeded_held_out_and_round_trips(tmp_path):
    a, b = fixture_task(0), fixture_task(0)
    assert a.splits["test"].texts == b.splits["test"].texts
    assert fixture_task(1).splits["test"].texts != a.splits["test"].texts
    parts = [set(a.splits[k].texts) for k in ("train", "validation", "test")]
    assert not (parts[0] & parts[2]) and not (parts[0] & parts[1]) and not (parts[1] & parts[2])
    assert {k for s in a.splits.values() for k in s.kinds} == {"lemma", "hyponyms"}
    assert all(set(s.kinds) == {"lemma", "hyponyms"} for s in a.splits.values())
    # relevant ids are the fixture's relations, and identifiers keep their texts
    d = json.loads(FIXTURE.read_text())
    q = a.splits["test"].texts[0]
    assert a.splits["test"].relevant[0].tolist() == sorted(d["queries"][q])
    assert int(a.library.tokens.min()) >= 3 and a.vocab[:3].tolist() == [-1, -1, -1]
    save_task(a, tmp_path / "t.npz")
    c = load_task(tmp_path / "t.npz")
    assert c.texts == a.texts and np.array_equal(c.library.tokens, a.library.tokens)
    assert all(np.array_equal(x, y) for x, y in zip(c.splits["test"].relevant, a.splits["test"].relevant, strict=True))
    assert c.splits["train"].kinds == a.splits["train"].kinds and c.info == a.info


def test_task_refuses_duplicate_identifiers_and_bad_ids():
    with pytest.raises(InputError, match="given twice"):
        build_task("x", ["a", "a"], {"q": [0]}, byte_tokenizer, seed=0)
    with pytest.raises(InputError, match="out of range"):
        build_task("x", ["a", "b"], {"q": [2]}, byte_tokenizer, seed=0)
    with pytest.raises(InputError, match="same tokens"):
        build_task("x", ["a", "b"], {"q": [0]}, lambda texts: [[7] for _ in texts], seed=0)


def test_nar_library_appends_eos_and_ids_map_back():
    task = fixture_task()
    lib = nar_library(task)
    assert len(lib) == len(task.library)
    for i in (0, 17, len(lib) - 1):
        assert lib[i].tolist() == task.library[i].tolist() + [EOS]
    table = IdTable(task.library)
    seqs = np.array([[1, *task.library[3].tolist(), EOS, 0], [1, *task.library[3].tolist(), 0, 0]])
    assert generated_ids(table, seqs, EOS, 1).tolist() == [3, -1]  # no EOS: not an identifier
    pick = eval_sample(task.splits["test"], 10, 0)
    kinds = [task.splits["test"].kinds[i] for i in pick]
    assert len(pick) == 10 and kinds.count("lemma") == kinds.count("hyponyms") == 5


# ---------------------------------------------------------------------------------------- training, e2e
def test_training_is_deterministic_with_the_seed():
    from flashtrie.harness.quality_models import ModelSize
    from flashtrie.harness.quality_train import TrainConfig, train_ar, train_nar

    task = fixture_task()
    cfg = TrainConfig(4, 8, 1e-3, warmup=2, size=ModelSize(32, 1, 2))
    for train in (train_nar, train_ar):
        a, b = train(task, cfg, 3, "cpu"), train(task, cfg, 3, "cpu")
        assert a.losses == b.losses
        assert train(task, cfg, 4, "cpu").losses != a.losses


def test_toy_run_end_to_end(tmp_path):
    from flashtrie.harness.quality_report import render_quality_report
    from flashtrie.harness.quality_run import CONFIGS, run_quality
    from flashtrie.harness.records import Record, read_records

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
    assert keys >= {("nar", b, beam) for b in ("numpy", "unconstrained") for beam in cfg.nar_beams}
    assert keys >= {("ar", b, beam) for b in ("hf+numpy", "hf") for beam in cfg.ar_beams}
    for r in stored:
        assert r.kind == "quality" and r.status == "ok"
        assert 0.0 <= r.metrics["precision@100"] <= 1.0 and r.metrics["recall@100"] >= r.metrics["recall@10"]
        assert len(r.config["model_info"]["checkpoint_sha256"]) == 64
        assert r.workload["identifiers"] == len(task.library)
    # constrained results are identifiers only: every NAR numpy result comes from the library (mean_results > 0)
    nar = [r for r in stored if r.config["model"] == "nar" and r.backend == "numpy"]
    assert max(r.metrics["mean_results"] for r in nar) > 0
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["fixture-ar-toy.pt", "fixture-nar-toy.pt"]
    assert any("NAR beam" in line for line in lines)
    md = render_quality_report(stored, tmp_path / "report")
    assert (tmp_path / "report" / "quality_vs_beam.png").stat().st_size > 0
    assert (tmp_path / "report" / "quality_vs_latency.png").stat().st_size > 0
    assert "fixture" in md.read_text()
