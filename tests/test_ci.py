"""Issue #11, CI on GPU runners: the GitHub Actions workflow, the nox session it runs, the README's way to run
the same session by hand, and the parity exit status that makes a mismatch fail the job."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "gpu.yml"


def _steps() -> tuple[dict, list[dict]]:
    doc = yaml.safe_load(WORKFLOW.read_text())
    (job,) = doc["jobs"].values()
    return job, job["steps"]


def test_workflow_runs_the_gpu_session_on_a_gpu_runner_and_uploads_the_report() -> None:
    job, steps = _steps()
    assert {"self-hosted", "gpu"} <= set(job["runs-on"])
    runs = "\n".join(s.get("run", "") for s in steps)
    assert "actions/checkout" in steps[0]["uses"]
    assert re.search(r"pip install -e \"?\.\[gpu,test,lab\]", runs), "installs the project from its own files"
    assert "python3 -m venv" in runs and "nox -s gpu" in runs
    upload = next(s for s in steps if "upload-artifact" in s.get("uses", ""))
    assert upload.get("if") == "always()"  # the report also comes back from a failed run
    assert upload["with"]["path"].rstrip("/") == job["env"]["FLASHTRIE_GPU_OUT"]


def test_gpu_nox_session_tests_checks_parity_and_reports() -> None:
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    (gpu,) = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "gpu"]
    src = ast.get_source_segment((ROOT / "noxfile.py").read_text(), gpu) or ""
    for part in ("tests/test_gpu_compile.py", "tests/test_gpu_search.py", '"parity"', '"bench"', '"report"',
                 "FLASHTRIE_GPU_OUT"):
        assert part in src, part
    assert re.search(r'"parity",[^)]*"--backends", "[^"]*gpu', src), "parity on the gpu backend"


def test_readme_says_how_to_run_the_session_by_hand() -> None:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Development", 1)[1].split("\n## ", 1)[0]
    assert ".github/workflows/gpu.yml" in section and "nox -s gpu" in section and "CUDA 12" in text
    assert (ROOT / ".ci" / "run").exists()  # the CPU CI stays


def test_parity_exits_1_on_a_mismatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """What fails the GPU job on a mismatch: `flashtrie parity` (run by `nox -s gpu`) exits non-zero."""
    pytest.importorskip("marisa_trie")
    from dataclasses import replace

    from flashtrie.reference_cpu import MarisaSearcher

    from flashtrie import KeywordSet, NarrowLoudsIndex, Proposals
    from flashtrie.cli import main

    kws = KeywordSet.from_sequences([[1, 2], [1, 3], [2], [3, 1]])
    kw, idx, q = tmp_path / "kw.txt", tmp_path / "kw.ftrie", tmp_path / "q.tsv"
    kws.to_token_file(kw)
    NarrowLoudsIndex.build(kws).save(idx)
    Proposals(np.array([[[1, 2, 3], [2, 3, 1]]]), np.log(np.array([[[.5, .3, .2], [.6, .3, .1]]], np.float32))
              ).to_tsv(q)
    argv = ["parity", "--keywords", str(kw), "--index", str(idx), "--queries", str(q), "--beam", "3",
            "--backends", "numpy,marisa", "--quiet"]
    assert main(argv) == 0
    real = MarisaSearcher.search

    def off_by_one_ulp(self, proposals, config, prefixes=None):  # type: ignore[no-untyped-def]
        res = real(self, proposals, config, prefixes)
        scores = res.scores.copy()
        scores.view(np.uint32)[0, 0] += 1
        return replace(res, scores=scores)

    monkeypatch.setattr(MarisaSearcher, "search", off_by_one_ulp)
    capsys.readouterr()
    assert main(argv) == 1
    assert "marisa" in capsys.readouterr().out
