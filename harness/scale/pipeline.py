"""``flashtrie bench scale``: the paper-scale pipeline in one command, under one time budget.

For each curve size of ``--sizes`` (default 1M, 10M, 100M), then for ``--n`` (default 800M), two processes of
the scale pipeline (`stages`: ``flashtrie bench scale-step PROCESS``), each appending records to
``OUT/scale.jsonl`` as every stage ends:

* prepare: the keywords, 16 dense queries (K = 1000), the GPU builder's warm-up, the build (``--builder``), the
  saved index; at ``--marisa-size-n`` also the file sizes against marisa-trie's;
* serve: the verified load, the upload, the beam sweep on the GPU (numpy beside it at ``--numpy-sizes``; the
  batches of ``--batches`` at N), GPU == numpy at ``--check-sizes``, marisa at ``--marisa-sizes``.

A size's files are removed once it is done (``--keep`` keeps them).  Marisa at ``--marisa-last`` (curve sizes not
in ``--marisa-sizes``) runs after N, in the time left.  The curve sizes must end ``--reserve`` seconds before
``--total``, so N keeps its time.  Each step has a limit (``--budget STEP=SECONDS``); a step past it is recorded
as timed out and its process ends; a process that dies is recorded by ``fail``.  At the end: the stage table,
``OUT/report/report.md`` (the report pipeline, judging the ``--targets`` file, copied beside the records) and,
with ``--bundle``, ``OUT/scale.tgz`` of everything.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from flashtrie.harness.argtypes import count

__all__ = ["main", "parser"]

#: seconds each step may take (``--budget`` overrides some)
BUDGETS = {"gen": 150, "queries": 120, "warmup": 60, "build": 120, "sizes": 60, "load": 60, "upload": 60,
           "check": 60, "bench": 120, "marisa": 150}
#: exit statuses of a process that recorded what went wrong (`stages`): 3 mismatch, 4 failed, 5 no time
RECORDED = (3, 4, 5)


def _sizes(text: str) -> list[str]:
    return [s for s in text.replace(" ", ",").split(",") if s]


class Pipeline:
    """One run: the options, the log, the deadline arithmetic and whether anything failed."""

    def __init__(self, a: argparse.Namespace) -> None:
        self.a, self.t0, self.failed = a, time.time(), False
        self.out, self.dir = Path(a.out), Path(a.dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.records = self.out / "scale.jsonl"
        self.log = (self.out / "scale.log").open("a", encoding="utf-8")
        merged = {**BUDGETS, **dict(b.split("=", 1) for part in a.budget for b in part.split(",") if b)}
        self.budget = ",".join(f"{k}={v}" for k, v in merged.items())

    def say(self, text: str) -> None:
        print(text, flush=True)
        self.log.write(text + "\n")
        self.log.flush()

    def step(self, *argv: str, timeout: float | None = None) -> int:
        """``flashtrie bench scale-step ARGV`` in a child process, its output into the log; its exit status."""
        cmd = [sys.executable, "-m", "flashtrie", "bench", "scale-step", *argv]
        try:
            done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            text = e.stdout if isinstance(e.stdout, str) else (e.stdout or b"").decode(errors="replace")
            self.say(text.rstrip())
            return 124
        self.say(done.stdout.rstrip())
        return done.returncode

    def process(self, name: str, size: str, d: Path, deadline: float, *extra: str) -> int:
        """One process of `stages` for ``size`` under ``deadline``; a process that died is recorded by ``fail``."""
        where = ("--n", size, "--dir", str(d), "--out", str(self.records))
        left = deadline - time.time()
        if left < 5:
            self.failed = True
            self.say(f"[{size}] {name}: no time left")
            self.step("fail", *where, "--failed", name, "--message", "not started: no time left before the deadline")
            return 1
        rc = self.step(name, *where, "--deadline", f"{deadline:.0f}", "--budget", self.budget, *extra,
                       timeout=left + 5)
        if rc == 0:
            return 0
        self.failed = True
        if rc in RECORDED:
            self.say(f"[{size}] {name}: exit status {rc} (recorded: 3 mismatch, 4 a step failed, 5 no time left)")
        else:
            why = {124: "timed out (exit status 124)",
                   -9: "killed (out of memory, or the timeout)"}.get(rc, f"exit status {rc}")
            self.step("fail", *where, "--failed", name, "--message", why)
        return rc

    def size(self, size: str, deadline: float, batches: str) -> bool:
        """prepare + serve of one library size; True when its files are kept for marisa after N."""
        a, d = self.a, self.dir / f"n{size}"
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        has = lambda sizes: size in sizes  # noqa: E731
        late = size != a.n and has(a.marisa_last) and not has(a.marisa_sizes)
        prep = ["--builder", a.builder] + (["--save-keywords"] if has(a.marisa_sizes) or late else [])
        prep += ["--marisa-size"] if size == a.marisa_size_n else []
        cpu = (["numpy"] if a.numpy_sizes == ["all"] or has(a.numpy_sizes) else []) + (
            ["marisa"] if has(a.marisa_sizes) else [])
        check = (a.check_sizes == ["all"] or has(a.check_sizes) if a.check_sizes
                 else "numpy" in cpu or size == a.n)
        serve = ["--batches", batches] + ([] if check else ["--no-check"]) + (["--cpu", ",".join(cpu)] if cpu else [])
        self.say(f"== {size}: prepare {' '.join(prep)}; serve {' '.join(serve)} "
                 f"(deadline in {deadline - time.time():.0f} s)")
        self.process("prepare", size, d, deadline, *prep)
        if (d / "kw.ftrie").is_file() and (d / "q.npz").is_file():
            self.process("serve", size, d, deadline, *serve)
        else:
            self.say(f"[{size}] serve not run: prepare left no index or no queries")
        if not (a.keep or late):
            shutil.rmtree(d, ignore_errors=True)
        self.say(f"== {size} done at {time.time() - self.t0:.0f} s")
        return late

    def run(self) -> int:
        a = self.a
        late = [s for s in a.sizes if s != a.n and self.size(s, self.t0 + a.total - a.reserve, "1")]
        self.size(a.n, self.t0 + a.total - 8, ",".join(map(str, a.batches)))
        for s in late:  # marisa at the sizes it was left out of, in the time N left
            d = self.dir / f"n{s}"
            if all((d / f).is_file() for f in ("kw.npz", "kw.ftrie", "q.npz")):
                self.process("marisa", s, d, self.t0 + a.total - 15, "--cpu", "marisa", "--batches", "1")
            else:
                self.say(f"[{s}] marisa not run: its keywords, index or queries are missing")
            if not a.keep:
                shutil.rmtree(d, ignore_errors=True)
        self.step("table", "--out", str(self.records))
        if a.targets:  # the targets the report judges, kept beside the records (`targets.find_targets`)
            shutil.copyfile(a.targets, self.out / "targets.toml")
        if self.step("render", str(self.records), "--out", str(self.out / "report")) != 0:
            self.say("render FAILED")
        self.say(f"total {time.time() - self.t0:.0f} s")
        if a.bundle:
            self.bundle()
        return 1 if self.failed else 0

    def bundle(self) -> None:
        """Everything in ``OUT/scale.tgz``; only it, the records and the log stay in OUT."""
        self.log.close()
        tmp = self.out.parent / f".{self.out.name}.scale.tgz.tmp"
        with tarfile.open(tmp, "w:gz") as tar:
            for p in sorted(self.out.iterdir()):
                if p.name != "scale.tgz":
                    tar.add(p, arcname=f"./{p.name}")
        os.replace(tmp, self.out / "scale.tgz")
        for p in self.out.iterdir():
            if p.name not in ("scale.tgz", "scale.jsonl", "scale.log", "targets.toml"):
                shutil.rmtree(p) if p.is_dir() else p.unlink()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flashtrie bench scale", description=__doc__.splitlines()[0])
    p.add_argument("--n", default="800M", help="the largest library (default 800M)")
    p.add_argument("--sizes", type=_sizes, default=["1M", "10M", "100M"], help="curve sizes before N")
    p.add_argument("--out", default="out", help="folder of the records, the log, the report and the bundle")
    p.add_argument("--dir", default="/tmp/ftscale", help="where each size's files go while it runs")
    p.add_argument("--total", type=float, default=570.0, help="seconds for the whole command")
    p.add_argument("--reserve", type=float, default=330.0, help="seconds the curve sizes leave for N")
    p.add_argument("--numpy-sizes", type=_sizes, default=["1M", "10M"], help="sizes with numpy beside the GPU (all)")
    p.add_argument("--marisa-sizes", type=_sizes, default=["1M"], help="sizes with marisa, in their turn")
    p.add_argument("--marisa-last", type=_sizes, default=["10M"], help="sizes with marisa after N")
    p.add_argument("--check-sizes", type=_sizes, default=["all"],
                   help="sizes with GPU == numpy (all; empty: where numpy runs, and N)")
    p.add_argument("--marisa-size-n", default="10M", help="the size of the file-size comparison with marisa-trie")
    p.add_argument("--batches", type=lambda t: [count(x) for x in t.split(",")], default=[1, 8],
                   help="batch sizes at N")
    p.add_argument("--builder", choices=("auto", "gpu", "cpu"), default="auto")
    p.add_argument("--budget", action="append", default=[], metavar="STEP=SECONDS[,...]",
                   help=f"limits of the steps (defaults {BUDGETS})")
    p.add_argument("--targets", metavar="FILE", help="a targets.toml for the report to judge (kept beside the records)")
    p.add_argument("--keep", action="store_true", help="keep each size's files under --dir")
    p.add_argument("--bundle", action=argparse.BooleanOptionalAction, default=True,
                   help="leave OUT/scale.tgz, the records and the log only")
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("SCALE_COMMAND", " ".join(["flashtrie", "bench", "scale", *(argv or sys.argv[1:])]))
    if not os.environ.get("SCALE_RUN_ID"):
        from flashtrie.harness.records import new_run_id

        os.environ["SCALE_RUN_ID"] = new_run_id()
    return Pipeline(a).run()
