"""This tree against another on the same GPU and inputs, in alternating rounds (`check.sh compare`).

    python3 tools/device/compare.py BASE NEW OUT

Each tree is installed (no dependencies) into its own folder, /tmp/site_base and /tmp/site_new, and run from
there: the base tree generates the library and queries once, each tree builds its own index; then, ROUNDS
times, base then new, ``flashtrie bench beam`` (gpu and numpy, parity checked) into OUT/bench_TREE.jsonl and
the stepwise suite's fused 2 x 70 step into OUT/step_TREE.jsonl (records named ``TREE-roundK`` by
FLASHTRIE_COMMIT).  Variables: N=10M BEAMS=100,1000 ROUNDS=2 STEP_CASE=fixed:20M:32768 BENCH_TIMEOUT=90
STEP_TIMEOUT=150.  Exit status 1 when any install or run failed.  `summarize.py compare OUT` prints the table.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ENV = os.environ.get


def _tree(tree: str, argv: list[str], log: Path, timeout: float | None = None, commit: str | None = None) -> bool:
    """``python3 ARGV`` with the installed copy of ``tree`` (run from /tmp, not from a checkout)."""
    env = {**os.environ, "PYTHONPATH": f"/tmp/site_{tree}:/tmp/site"}
    if commit:
        env["FLASHTRIE_COMMIT"] = commit
    with log.open("a") as f:
        try:
            return subprocess.run([sys.executable, *argv], cwd="/tmp", env=env, stdout=f,
                                  stderr=subprocess.STDOUT, timeout=timeout).returncode == 0
        except subprocess.TimeoutExpired:
            f.write(f"timed out after {timeout} s\n")
            return False


def _step_args(base: Path, tree: str) -> list[str]:
    """The stepwise suite's command in ``tree`` (an older base names it otherwise)."""
    if tree == "base" and not (base / "harness" / "stepwise").is_dir():
        return ["-m", "flashtrie.harness.stepwise_bench"]
    suites = base / "harness" / "suites.py"
    if tree == "base" and not (suites.is_file() and "register_command" in suites.read_text(encoding="utf-8")):
        return ["-m", "flashtrie.harness.stepwise"]
    return ["-m", "flashtrie", "bench", "stepwise"]


def _cli(*argv: str) -> list[str]:
    return ["-m", "flashtrie", *argv]


def main(base: Path, new: Path, out: Path) -> int:
    ok = True
    out.mkdir(parents=True, exist_ok=True)
    for tree, src in (("base", base), ("new", new)):
        ok &= subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                              "--no-build-isolation", "--no-compile", "--target", f"/tmp/site_{tree}", str(src)],
                             stdout=(out / "install.log").open("a"), stderr=subprocess.STDOUT).returncode == 0
    w = Path(tempfile.mkdtemp(prefix="ftcmp-"))
    kw, q = str(w / "kw.npz"), str(w / "q.npz")
    ok &= _tree("base", _cli("gen-keywords", "-n", ENV("N", "10M"), "-o", kw, "--quiet"), out / "data.log")
    ok &= _tree("base", _cli("gen-queries", kw, "-n", "16", "-K", "1000", "--preset", "dense", "-o", q, "--quiet"),
                out / "data.log")
    for tree in ("base", "new"):
        ok &= _tree(tree, _cli("build", kw, "-o", str(w / f"{tree}.ftrie"), "--quiet"), out / "data.log")
    rounds = range(1, int(ENV("ROUNDS", "2")) + 1)
    for k in rounds:
        for tree in ("base", "new"):
            ok &= _tree(tree, _cli("bench", "beam", "--keywords", kw, "--index", str(w / f"{tree}.ftrie"), "--queries",
                                   q, "--backends", "gpu,numpy", "--beams", ENV("BEAMS", "100,1000"), "--repeats", "20",
                                   "--max-seconds", "20", "-o", str(out / f"bench_{tree}.jsonl"), "--quiet"),
                        out / "bench.log", float(ENV("BENCH_TIMEOUT", "90")), f"{tree}-round{k}")
    shutil.rmtree(w, ignore_errors=True)
    for k in rounds:  # the fused 2 x 70 step, rows at the root and inside keywords
        for tree in ("base", "new"):
            step = [*_step_args(base, tree), "--out", str(out / f"step_{tree}.jsonl"), "--cases",
                    ENV("STEP_CASE", "fixed:20M:32768"), "--shapes", "2x70", "--states", "root,mid", "--repeats", "30",
                    "--max-seconds", "120"]
            ok &= _tree(tree, step, out / "step.log", float(ENV("STEP_TIMEOUT", "150")), f"{tree}-round{k}")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    sys.exit(main(*(Path(a).resolve() for a in sys.argv[1:])))
