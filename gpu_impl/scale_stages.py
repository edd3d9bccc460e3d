"""The stages of `gpu_impl/device_scale.sh`, one process each, every stage appending a record to ``--out``.

    python -m flashtrie.gpu_impl.scale_stages STAGE --n 800M --dir /tmp/ftscale --out scale.jsonl

* ``gen``: `generate_keywords(n)` (version 2, all cores), then the ``.npz`` written;
* ``queries``: the keywords read back, 16 dense queries with K = 1000 (`generate_queries`), written;
* ``build``: the keywords read back, the index built (the GPU builder where cupy and a GPU are present,
  else the CPU builder, or the one ``--builder`` names), saved;
* ``check``: the index loaded with verification, uploaded (`GpuSearcher`), GPU == numpy on a few queries;
* ``fail``: an error record for a stage the shell stopped (``--message`` says why: a timeout, a crash);
* ``table``: the stage table of the records in ``--out``;
* ``render RECORDS... --out DIR [--commit C]``: ``DIR/report.md`` from the records (`gpu_impl/scale_report.py`).

Each record (kind ``build``, sweep ``scale``) holds the stage's seconds, the process's peak RSS so far
(``resource.getrusage``), the bytes it moved and GB/s, with the environment snapshot of `harness.env`.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flashtrie.harness.env import snapshot
from flashtrie.harness.records import Record, append_record, new_run_id, read_records

from flashtrie.cli.common import count

STAGES = ("gen", "queries", "build", "check", "fail", "table", "render")


_count = count  # 800M, 10k, 1G (the CLI's parser)


def peak_rss() -> int:
    """Peak resident memory of this process, bytes (Linux reports kilobytes)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


class Recorder:
    """Appends one record per finished (sub-)stage; prints a line for each."""

    def __init__(self, out: str, n: int, argv: list[str]) -> None:
        self.out, self.n = out, n
        self.env = snapshot(argv)
        self.run_id = os.environ.get("SCALE_RUN_ID") or new_run_id()

    def timed(self, stage: str, fn: Callable[[], Any], *, backend: str = "host", nbytes: Callable[[Any], int]
              | None = None, **extra: Any) -> Any:
        t0 = time.perf_counter()
        value = fn()
        seconds = time.perf_counter() - t0
        size = int(nbytes(value)) if nbytes else None
        self.emit(stage, seconds, backend=backend, nbytes=size, **extra)
        return value

    def emit(self, stage: str, seconds: float, *, backend: str = "host", nbytes: int | None = None,
             status: str = "ok", message: str | None = None, **extra: Any) -> None:
        metrics: dict[str, Any] = {"seconds": round(seconds, 3), "peak_rss_bytes": peak_rss(), **extra}
        if nbytes is not None:
            metrics["bytes"] = nbytes
            metrics["gb_per_s"] = round(nbytes / seconds / 1e9, 3) if seconds > 0 else None
        rec = Record(kind="build", backend=backend, status=status, message=message, sweep="scale",
                     workload={"N": self.n, "name": "gen-keywords default library"}, config={"stage": stage},
                     metrics=metrics, env=self.env, command=list(self.env["command"]), run_id=self.run_id,
                     timestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        append_record(self.out, rec)
        gb = f"  {metrics['gb_per_s']:.2f} GB/s" if metrics.get("gb_per_s") else ""
        print(f"[scale] {stage:<22} {seconds:8.2f} s  peak RSS {metrics['peak_rss_bytes'] / 1e9:6.1f} GB{gb}"
              + (f"  {status}: {message}" if status != "ok" else ""), flush=True)


def _ks_bytes(ks: Any) -> int:
    return int(ks.tokens.nbytes + ks.offsets.nbytes)


def stage_gen(rec: Recorder, d: Path, args: argparse.Namespace) -> None:
    from flashtrie.datasets import KeywordParams, generate_keywords_from, save_keywords

    params = KeywordParams(n=rec.n, seed=args.seed)
    ks = rec.timed("generate keywords", lambda: generate_keywords_from(params), backend="datasets",
                   nbytes=_ks_bytes, threads=os.cpu_count())
    rec.timed("save keywords", lambda: save_keywords(d / "kw.npz", ks, params), nbytes=lambda _: _ks_bytes(ks))


def _load_kw(rec: Recorder, d: Path) -> Any:
    from flashtrie.datasets import load_keywords

    return rec.timed("load keywords", lambda: load_keywords(d / "kw.npz").keywords, nbytes=_ks_bytes)


def stage_queries(rec: Recorder, d: Path, args: argparse.Namespace) -> None:
    from flashtrie.datasets import generate_queries, save_workload

    ks = _load_kw(rec, d)
    split: dict[str, float] = {}  # seconds per step, filled by the time the record is written
    wl = rec.timed(f"generate {args.queries} queries", lambda: generate_queries(
        ks, args.queries, proposals_per_step=1000, preset="dense", seed=args.seed, timings=split),
        backend="datasets", queries=args.queries, K=1000, split=split)
    save_workload(d / "q.npz", wl)


def stage_build(rec: Recorder, d: Path, args: argparse.Namespace) -> None:
    from flashtrie import NarrowLoudsIndex

    ks = _load_kw(rec, d)
    builder = args.builder
    if builder == "auto":
        try:
            from flashtrie.gpu_impl.build_gpu import cupy_module

            cupy_module()
            builder = "gpu"
        except Exception as e:  # no cupy or no device: the CPU builder
            print(f"[scale] GPU builder unavailable ({e}); building on the CPU", flush=True)
            builder = "cpu"
    marks: list[tuple[str, float]] = []

    def progress(stage: str) -> None:
        marks.append((stage, time.perf_counter()))

    def build() -> Any:
        if builder == "gpu":
            from flashtrie.gpu_impl.build_gpu import build_index

            return build_index(ks, progress)
        return NarrowLoudsIndex.build(ks, progress)

    t0 = time.perf_counter()
    idx = build()
    t1 = time.perf_counter()
    stages = [[s, round((marks[i + 1][1] if i + 1 < len(marks) else t1) - t, 3)] for i, (s, t) in enumerate(marks)]
    rec.emit("build", t1 - t0, backend=builder, nbytes=_ks_bytes(ks), stages=stages,
             num_nodes=idx.num_nodes, num_unique=idx.num_unique)
    path = d / "kw.ftrie"
    t0 = time.perf_counter()
    idx.save(path)
    size = path.stat().st_size
    rec.emit("save index", time.perf_counter() - t0, nbytes=size, bytes_per_keyword=round(size / rec.n, 3),
             array_bytes={k: int(v.nbytes) for k, v in idx.arrays.items()})
    print(f"[scale] index file {size / 2**30:.2f} GiB, {size / rec.n:.2f} B/keyword", flush=True)


def stage_check(rec: Recorder, d: Path, args: argparse.Namespace) -> int:
    from flashtrie.datasets import load_workload
    from flashtrie.gpu_impl import GpuSearcher
    from flashtrie.reference_cpu.numpy_search import NumpySearcher

    from flashtrie import NarrowLoudsIndex, Proposals, SearchConfig

    path = d / "kw.ftrie"
    size = path.stat().st_size
    idx = rec.timed("load index (verify)", lambda: NarrowLoudsIndex.load(path, verify=True), nbytes=lambda _: size)
    gpu = rec.timed("upload (GpuSearcher)", lambda: GpuSearcher(idx), backend="gpu", nbytes=lambda _: size)
    wl = load_workload(d / "q.npz")
    ref = NumpySearcher(idx)
    q = min(args.check_queries, wl.proposals.num_queries)
    bad: list[str] = []
    t0 = time.perf_counter()
    for beam in (10, 1000):
        p = Proposals(wl.proposals.tokens[:q, :, :beam].copy(), wl.proposals.logprobs[:q, :, :beam].copy())
        cfg = SearchConfig(beam_width=beam)
        diff = gpu.search(p, cfg).first_difference(ref.search(p, cfg))
        if diff is not None:
            bad.append(f"beam {beam}: {diff}")
    rec.emit("GPU == numpy", time.perf_counter() - t0, backend="gpu", status="mismatch" if bad else "ok",
             message="; ".join(bad) or None, queries=q, beams=[10, 1000])
    return 1 if bad else 0


def stage_table(out: str) -> None:
    recs = [r for r in read_records(out) if r.sweep == "scale"]
    print(f"{'stage':<24} {'N':>12} {'backend':<9} {'seconds':>9} {'peak RSS GB':>12} {'GB/s':>7}  status")
    for r in recs:
        m = r.metrics
        gbs = f"{m['gb_per_s']:.2f}" if m.get("gb_per_s") else ""
        print(f"{r.config.get('stage', '?'):<24} {r.workload.get('N', 0):>12,} {r.backend:<9} {m['seconds']:>9.2f} "
              f"{m['peak_rss_bytes'] / 1e9:>12.1f} {gbs:>7}  {r.status}")
        if m.get("stages"):
            print("    " + ", ".join(f"{name} {sec:.2f} s" for name, sec in m["stages"]))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["render"]:
        from flashtrie.gpu_impl.scale_report import main as render_main

        return render_main(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stage", choices=STAGES)
    ap.add_argument("--n", type=_count, default=800_000_000, help="keywords (800M, 10M, ...)")
    ap.add_argument("--dir", default="/tmp/ftscale", help="where the keyword, query and index files go")
    ap.add_argument("--out", default="scale.jsonl", help="records file (JSON Lines, appended)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--queries", type=int, default=16)
    ap.add_argument("--check-queries", type=int, default=4)
    ap.add_argument("--builder", choices=("auto", "gpu", "cpu"), default="auto")
    ap.add_argument("--message", default="", help="fail: what stopped the stage")
    ap.add_argument("--failed", default="", help="fail: the stage's name")
    args = ap.parse_args(argv)
    if args.stage == "table":
        stage_table(args.out)
        return 0
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    rec = Recorder(args.out, args.n, ["python", "-m", "flashtrie.gpu_impl.scale_stages", *argv])
    if args.stage == "fail":
        rec.emit(args.failed or "?", 0.0, status="error", message=args.message or "stopped")
        return 0
    run = {"gen": stage_gen, "queries": stage_queries, "build": stage_build, "check": stage_check}[args.stage]
    return int(run(rec, d, args) or 0)


if __name__ == "__main__":
    sys.exit(main())
