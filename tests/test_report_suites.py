"""The real-library and quality suites of the one report pipeline (`flashtrie.harness.report`): which records
each owns, their sections, figures and metrics through `build_report`, and their CLI wrappers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flashtrie.harness.records import Record, append_records, read_records
from flashtrie.harness.report import build_report, by_suite
from flashtrie.harness.suites import SUITES, suite_of

from flashtrie.cli import main

ENV = {"cpu": "test cpu", "cpu_cores": 2, "git": {"commit": "abcdef0"}}


def _rec(**kw) -> Record:
    base = dict(env=ENV, run_id="r1", timestamp="2026-01-01T00:00:00+00:00", config={}, metrics={})
    return Record(**{**base, **kw})


def _real_records() -> list[Record]:
    """One library as `flashtrie real bench` records it: sizes, reachability, a beam sweep, a stepwise step."""
    lib = {"name": "wordnet-lemmas", "num_keywords": 9, "tokens": 27, "max_length": 5, "num_queries": 9,
           "identifier": "a lemma", "queries": "a lemma -> its synsets", "version": "v1"}
    w = {"keywords": lib}
    cmd = ["flashtrie", "real", "bench", "-o", "real.jsonl"]
    out = [_rec(kind="build", backend=s, sweep="real-size", workload=w, command=cmd,
                metrics={"bytes": 100 + i, "bytes_per_keyword": 11.5 + i, "bytes_per_keyword_without_id_map": 10.25,
                         "size_ratio_vs_marisa_tokens": 1.5, "build_s": 0.125})
           for i, s in enumerate(("narrow-louds", "marisa-trie-tokens", "marisa-trie-strings"))]
    out.append(_rec(kind="search", backend="numpy", sweep="real-reachability", workload=w, command=cmd,
                    metrics={"identifiers": 9, "reached": 9, "walk_s": 0.5}))
    lw = {**w, "name": "real:wordnet-lemmas", "shape_QTK": [4, 5, 10]}
    for b, (ms, speed) in {"numpy": (0.625, 2.5), "marisa": (1.5625, 1.0)}.items():
        out.append(_rec(kind="latency", backend=b, sweep="beam_width", workload=lw, command=cmd,
                        config={"beam_width": 10, "K": 10, "batch_size": 1}, workload_stats={"valid_fraction": 0.3},
                        metrics={"mean_ms": ms, "p99_ms": 2 * ms, "speedup_vs_marisa": speed}))
    out.append(_rec(kind="latency", backend="numpy-stepwise", sweep="real-stepwise", workload=w, command=cmd,
                    config={"states": "root", "vocab_size": 256},
                    metrics={"host_fused_us": {"mean": 41.5, "p50": 40.25, "p99": 60.75}}))
    return out


def _quality_records() -> list[Record]:
    """One task and one model as `flashtrie quality run` records them, at two beams (and one skipped)."""
    info = {"parameters": 1234, "d_model": 32, "layers": 1, "steps": 10, "batch_size": 8, "train_seconds": 1.5,
            "final_loss": 0.75, "checkpoint_sha256": "ab" * 32}
    w = {"identifiers": 300, "vocab": 50, "task_info": {"library": "wordnet-synsets", "subset": "a subset",
                                                        "library_params": {"source": "wordnet-base",
                                                                           "identifier": "LEMMA.POS.NN",
                                                                           "queries": "a lemma -> its synsets"}}}
    cmd = ["flashtrie", "quality", "run", "--config", "toy", "-o", "q.jsonl"]
    out = []
    for beam, p in ((1, 0.0125), (100, 0.0375)):
        m = {"precision@10": 4 * p, "recall@10": 0.25, "precision@100": p, "recall@100": 0.5, "exact_match": 0.125,
             "precision@100_ceiling": 0.0625, "latency_ms_per_query": 0.5 * beam, "mean_results": 10.0}
        out.append(_rec(kind="quality", backend="numpy", sweep="beam_width", workload=w, command=cmd, metrics=m,
                        config={"task": "wordnet", "model": "nar", "mode": "constrained", "beam_width": beam, "K": beam,
                                "model_info": info}))
    out.append(_rec(kind="quality", backend="gpu", sweep="beam_width", workload=w, command=cmd, status="skipped",
                    message="over the time budget", config={"task": "wordnet", "model": "nar", "mode": "constrained",
                                                            "beam_width": 1000, "K": 1000, "model_info": info}))
    return out


def _search_records() -> list[Record]:
    """Records of ``flashtrie bench``: synthetic quality and latency (a workload not named real:)."""
    return [_rec(kind="synthetic-quality", backend="numpy", sweep="beam_width",
                 command=["flashtrie", "bench", "quality"], workload={"num_keywords": 100},
                 config={"beam_width": 10, "mode": "constrained"}, metrics={"precision@10": 0.5}),
            _rec(kind="latency", backend="numpy", sweep="beam_width", command=["flashtrie", "bench", "beam"],
                 workload={"name": "zipf", "num_keywords": 100}, config={"beam_width": 10, "batch_size": 1, "K": 10},
                 metrics={"mean_ms": 0.5})]


def test_each_record_has_one_owner() -> None:
    samples = {"real": _real_records(), "quality": _quality_records(), "search": _search_records()}
    for name, recs in samples.items():
        for r in recs:
            assert suite_of(r) is SUITES[name]
            owners = [s.name for s in SUITES.values() if not s.fallback and s.owns(r)]
            assert owners == ([] if name == "search" else [name])  # the suites' own records are disjoint


def test_only_the_model_study_is_kind_quality() -> None:
    assert all(r.kind == "quality" for r in _quality_records())
    assert {r.kind for r in _search_records()} == {"synthetic-quality", "latency"}
    study = _rec(kind="quality", backend="numpy")
    assert [s.name for s in SUITES.values() if not s.fallback and s.owns(study)] == ["quality"]
    assert not SUITES["quality"].owns(_search_records()[0])


def test_an_older_synthetic_quality_record_renders_in_the_search_report(tmp_path: Path) -> None:
    """Before the synthetic sweep had a kind of its own it wrote ``quality`` (a workload, no task or model)."""
    old = _search_records()[0].to_dict() | {"kind": "quality"}
    src = tmp_path / "old.jsonl"
    src.write_text(json.dumps(old) + "\n")
    (rec,) = read_records(src)
    assert rec.kind == "synthetic-quality" and suite_of(rec) is SUITES["search"]
    study = tmp_path / "study.jsonl"
    append_records(study, _quality_records())
    assert [r.kind for r in read_records(study)] == ["quality"] * 3  # the model study's stay as they are
    md = build_report([src], tmp_path / "rep").read_text()
    assert "## Quality vs beam width" in md and "| 10 | constrained | numpy | 0.5 |" in md
    assert "## Does a wider beam buy quality?" not in md and (tmp_path / "rep" / "quality_vs_beam.png").is_file()


def test_real_suite_renders_through_the_pipeline(tmp_path: Path) -> None:
    src = tmp_path / "real.jsonl"
    append_records(src, _real_records())
    md = build_report([src], tmp_path / "rep").read_text()
    assert md.startswith(f"# {SUITES['real'].title}\n")
    for section in ("## Libraries", "## Index size and build time", "## Every identifier reachable",
                    "## Beam search latency per query (ms)", "## Stepwise step (2 x 70 rows)", "## Commands",
                    "## Metrics"):
        assert section in md
    assert "| wordnet-lemmas | narrow-louds | 10.2 | 11.5 | 9.54e-05 | 1.5 | 0.125 |" in md
    assert "| 10 | 0.625 (1.2) | 2.50x | 1.6 (3.1) | [4, 5, 10] | 0.3 |" in md
    assert "| wordnet-lemmas | numpy-stepwise | root | 256 | 41.5 | 40.2 | 60.8 | – | ok |" in md
    assert f"flashtrie report {src} -o {tmp_path / 'rep'}" in md
    metrics = md.split("## Metrics")[1]
    assert "| real | `reached` | identifiers |" in metrics and "| real | `host_fused_us` | µs |" in metrics
    assert "`graph_fused_us`" not in metrics  # no record carries it


def test_quality_suite_renders_through_the_pipeline(tmp_path: Path) -> None:
    src = tmp_path / "q.jsonl"
    append_records(src, _quality_records())
    out = tmp_path / "rep"
    md = build_report([src], out).read_text()
    assert md.startswith(f"# {SUITES['quality'].title}\n")
    assert "## Does a wider beam buy quality?" in md and "### Task `wordnet`" in md and "### Summary" in md
    assert "- source: wordnet-synsets (wordnet-base); a subset" in md and "- identifier: LEMMA.POS.NN" in md
    # records without an interval or nDCG (an older run's) render what they hold
    assert "| nar | numpy | constrained | 100 | 0.150 | 0.037 | 0.500 | - | 0.125 | 10.0 | 50.000 |  |" in md
    assert "| nar | gpu | constrained | 1000 | - | - | - | - | - | - | skipped: over the time budget | |" in md
    assert "| wordnet | NAR, numpy (constrained) | - | 0.037 (100) | not measured at both beams |" in md
    for fig in ("precision_vs_beam", "recall_vs_beam", "precision_vs_latency"):
        assert (out / f"{fig}.png").stat().st_size > 0 and (out / f"{fig}.svg").stat().st_size > 0
        assert f"({fig}.png)" in md
    metrics = md.split("## Metrics")[1]
    assert "| quality | `precision@100` | fraction |" in metrics and "`model_ms_per_query`" not in metrics


def test_suites_share_one_report(tmp_path: Path) -> None:
    recs = [*_real_records(), *_quality_records(), *_search_records()]
    groups = by_suite(recs)
    assert {s.name: len(v) for s, v in groups.items()} == {"quality": 3, "real": 7, "search": 2}
    src = tmp_path / "all.jsonl"
    append_records(src, recs)
    md = build_report([src], tmp_path / "rep", title="all").read_text()
    assert md.index("## Does a wider beam buy quality?") < md.index("## Libraries") < md.index("## Status")
    assert {"| quality |", "| real |", "| search |"} <= {line[:line.index(" |", 2) + 2] for line in
                                                       md.split("## Metrics")[1].splitlines() if line.startswith("| ")}


def test_cli_wrappers_call_the_pipeline(tmp_path: Path) -> None:
    src = tmp_path / "r.jsonl"
    append_records(src, _real_records())
    assert main(["real", "report", str(src), "-o", str(tmp_path / "real"), "--title", "mine"]) == 0
    assert (tmp_path / "real" / "report.md").read_text().startswith("# mine\n")
    assert main(["real", "report", str(src), "-o", str(tmp_path / "real" / "report.md")]) == 2  # a file: refused
    q = tmp_path / "q.jsonl"
    append_records(q, _quality_records())
    assert main(["quality", "report", str(q), "-o", str(tmp_path / "quality")]) == 0
    text = (tmp_path / "quality" / "report.md").read_text()
    assert text == build_report([q], tmp_path / "again").read_text().replace(str(tmp_path / "again"),
                                                                            str(tmp_path / "quality"))


@pytest.mark.parametrize("kind", ["real", "quality"])
def test_a_suite_without_its_records_is_absent(tmp_path: Path, kind: str) -> None:
    src = tmp_path / "s.jsonl"
    append_records(src, _search_records())
    md = build_report([src], tmp_path / "rep").read_text()
    assert f"| {kind} |" not in md and "## Libraries" not in md and "## Does a wider beam" not in md
