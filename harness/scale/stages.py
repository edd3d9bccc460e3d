"""The steps of the scale pipeline (tools/device/scale.sh); each step appends its records to ``--out`` as it ends.

    python -m flashtrie.harness.scale PROCESS --n 800M --dir /tmp/ftscale/n800M --out scale.jsonl

A process runs a list of steps sharing what they made (the keywords stay in memory from ``gen`` to ``build``,
so the 17.9 GB keyword file of 800M is neither written nor read back unless ``--save-keywords``):

* ``prepare``: gen, queries, warmup, build (+ sizes with ``--marisa-size``);  ``serve``: load, upload, bench,
  check (``--no-check``: none), marisa (when ``--cpu`` names it);  ``gen`` / ``queries`` / ``build`` /
  ``sizes`` / ``check`` / ``bench`` / ``marisa``: one step (or the few it needs), reading the files of earlier
  processes from ``--dir`` (``marisa`` with ``--cpu marisa``: the marisa step alone, after the others).
* Steps: ``gen`` generates the keywords (`generate_keywords_from`, all cores); ``queries`` 16 dense queries,
  K = 1000 (`generate_queries`, its seconds per step in the record's ``split``); ``warmup`` chooses the
  builder and, for the GPU builder, builds `WARMUP_KEYWORDS` keywords as its own stage (cupy's first-use
  kernel compilation is then not in the build's figure); ``build`` the index (the GPU builder where cupy
  and a GPU are present, else the CPU builder, or ``--builder``) and saves it; ``sizes`` our file with and
  without the keyword-id map against marisa-trie's BinaryTrie with and without one; ``load`` the index with
  verification (its seconds per check in ``split``); ``upload`` `GpuSearcher`; ``bench`` `sweep_beam_width`
  (beams 1 ... 1000, K = beam, host arrays in and out) on the GPU
  and ``--cpu`` numpy at batch 1 (every case compared with numpy), the GPU alone at the other ``--batches``;
  ``check`` GPU == numpy on a few queries; ``marisa`` the marisa searcher, its sweep at batch 1 and
  marisa == numpy on a few queries.  The numpy reference is made once per process and timed as its own
  stage (``decode="auto"``: every node decoded up front on small indexes, only the nodes a search reaches
  on large ones; the record's ``decode`` says which), so the check costs seconds at 800M; the check's record
  holds each side's search seconds.  Without a GPU the GPU steps record ``skipped`` with the reason.
* ``--budget KEY=SECONDS`` (keys: the step names) and ``--deadline EPOCH`` bound the steps: one past its
  limit is recorded as timed out and the process exits with status 124 (`scale_recorder`).
* Exit status: 0 all ok, 3 a mismatch, 4 a step failed (recorded), 5 a step found no time left (recorded
  as skipped), 124 a step ran past its limit (recorded); anything else is a crash the shell records with
  ``fail --failed PROCESS --message WHY`` (it names the stage in progress from the marker file).
* ``table``: the stage table of ``--out``; ``render RECORDS... --out DIR``: ``DIR/report.md``
  (`harness/scale/report.py`).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashtrie.harness.argtypes import count, ints
from flashtrie.harness.records import read_records

from .recorder import LIBRARY, OutOfTime, Recorder

__all__ = ["PROCESSES", "State", "main"]

#: The steps of each process, in order (``sizes`` and ``marisa`` run only when their option asks).
PROCESSES: dict[str, tuple[str, ...]] = {
    "prepare": ("gen", "queries", "warmup", "build", "sizes"),
    "serve": ("load", "upload", "bench", "check", "marisa"),
    "gen": ("gen",), "queries": ("queries",), "build": ("warmup", "build"), "sizes": ("sizes",),
    "check": ("load", "upload", "check"), "bench": ("load", "upload", "bench", "marisa"), "marisa": ("marisa",),
}
#: Keywords of the GPU builder's warm-up build (cupy compiles its kernels on first use, about 20 s on a fresh
#: machine; cached on disk after that): enough for every path of the build (high labels, links, duplicates).
WARMUP_KEYWORDS = 20_000
_count = count  # 800M, 10k, 1G (the CLI's parser)
CHECK_BEAMS = (10, 1000)
EXIT_MISMATCH, EXIT_FAILED, EXIT_NO_TIME = 3, 4, 5


@dataclass
class State:
    """What the steps of one process share."""

    d: Path
    ks: Any = None  # KeywordSet
    wl: Any = None  # QueryWorkload
    idx: Any = None  # NarrowLoudsIndex
    gpu: Any = None  # GpuSearcher
    ref: Any = None  # NumpySearcher (made once, shared; eager up to its EAGER_MAX_NODES, else lazy)
    no_gpu: str | None = None  # why the GPU steps are skipped
    builder: str | None = None  # "gpu" | "cpu", chosen by the warm-up step
    no_gpu_builder: str | None = None  # why the GPU builder is not used

    @property
    def kw_path(self) -> Path:
        return self.d / "kw.npz"

    @property
    def index_path(self) -> Path:
        return self.d / "kw.ftrie"

    @property
    def queries_path(self) -> Path:
        return self.d / "q.npz"


def _ks_bytes(ks: Any) -> int:
    return int(ks.tokens.nbytes + ks.offsets.nbytes)


# ---------------------------------------------------------------------------------------------- inputs
def keywords(rec: Recorder, st: State) -> Any:
    """The keywords of this process, read from ``kw.npz`` the first time a step needs them."""
    if st.ks is None:
        from flashtrie.datasets import load_keywords

        st.ks = rec.timed("load keywords", lambda: load_keywords(st.kw_path).keywords, nbytes=_ks_bytes)
    return st.ks


def workload(st: State) -> Any:
    if st.wl is None:
        from flashtrie.datasets import load_workload

        st.wl = load_workload(st.queries_path)
    return st.wl


def index(rec: Recorder, st: State) -> Any:
    if st.idx is None:
        step_load(rec, st, None)
    return st.idx


def reference(rec: Recorder, st: State) -> Any:
    """The numpy reference searcher of the index, made (and timed) on first use: ``decode="auto"`` decodes
    every node up front on small indexes, only the nodes each search reaches on large ones (the record
    says which)."""
    if st.ref is None:
        from flashtrie.reference_cpu.numpy_search import NumpySearcher

        idx = index(rec, st)
        with rec.span("numpy searcher", backend="numpy") as m:
            st.ref = NumpySearcher(idx)
            m.update(nodes=int(idx.num_nodes), decode=st.ref.decode)
    return st.ref


# ---------------------------------------------------------------------------------------------- prepare
def step_gen(rec: Recorder, st: State, args: argparse.Namespace) -> None:
    from flashtrie.datasets import KeywordParams, generate_keywords_from, save_keywords

    params = KeywordParams(n=rec.n, seed=args.seed)
    st.ks = rec.timed("generate keywords", lambda: generate_keywords_from(params), backend="datasets",
                      nbytes=_ks_bytes, threads=os.cpu_count())
    if args.save_keywords or args.process == "gen":
        rec.timed("save keywords", lambda: save_keywords(st.kw_path, st.ks, params),
                  nbytes=lambda _: _ks_bytes(st.ks))


def step_queries(rec: Recorder, st: State, args: argparse.Namespace) -> None:
    from flashtrie.datasets import generate_queries, save_workload

    ks = keywords(rec, st)
    split: dict[str, float] = {}  # seconds per step, filled by the time the record is written
    st.wl = rec.timed(f"generate {args.queries} queries", lambda: generate_queries(
        ks, args.queries, proposals_per_step=1000, preset="dense", seed=args.seed, timings=split),
        backend="datasets", queries=args.queries, K=1000, split=split)
    save_workload(st.queries_path, st.wl)


def choose_builder(wanted: str) -> tuple[str, str | None]:
    """("gpu" | "cpu", why the GPU builder is not used): ``auto`` takes the GPU builder where it can run."""
    if wanted != "auto":
        return wanted, None
    try:
        from flashtrie.arrays import cupy_module

        cupy_module()
        return "gpu", None
    except Exception as e:  # noqa: BLE001 - no cupy or no device: the CPU builder
        return "cpu", f"{type(e).__name__}: {e}"


def build_with(builder: str, ks: Any, progress: Any = None, ids: str = "input") -> Any:
    """A `NarrowLoudsIndex` of ``ks`` from the GPU or the CPU builder (the same arrays)."""
    if builder == "gpu":
        from flashtrie.gpu_impl.build_gpu import build_index

        return build_index(ks, progress, ids=ids)
    from flashtrie import NarrowLoudsIndex

    return NarrowLoudsIndex.build(ks, progress, ids=ids)


def step_warmup(rec: Recorder, st: State, args: argparse.Namespace) -> None:
    """Chooses the builder; for the GPU builder, one build of `WARMUP_KEYWORDS` keywords as its own stage, so
    that cupy's first-use kernel compilation is not charged to the build's figure."""
    st.builder, st.no_gpu_builder = choose_builder(args.builder)
    if st.no_gpu_builder:
        print(f"[scale] GPU builder unavailable ({st.no_gpu_builder}); building on the CPU", flush=True)
    if st.builder != "gpu":
        return
    from flashtrie.datasets import generate_keywords

    small = generate_keywords(WARMUP_KEYWORDS, seed=args.seed + 1, threads=1)
    rec.timed("GPU builder warm-up", lambda: build_with("gpu", small), backend="gpu", keywords=WARMUP_KEYWORDS)


def step_build(rec: Recorder, st: State, args: argparse.Namespace) -> None:
    ks = keywords(rec, st)
    if st.builder is None:
        step_warmup(rec, st, args)
    why = st.no_gpu_builder
    marks: list[tuple[str, float]] = []
    assert st.builder is not None  # (chosen by step_warmup)
    with rec.span("build", backend=st.builder) as m:
        t0 = time.perf_counter()
        idx = build_with(st.builder, ks, lambda stage: marks.append((stage, time.perf_counter())))
        t1 = time.perf_counter()
        m.update(nbytes=_ks_bytes(ks), num_nodes=int(idx.num_nodes), num_unique=int(idx.num_unique),
                 stages=[[s, round((marks[i + 1][1] if i + 1 < len(marks) else t1) - t, 3)]
                         for i, (s, t) in enumerate(marks)], build_seconds=round(t1 - t0, 3))
        if why:
            m["gpu_builder_unavailable"] = why[:300]
    with rec.span("save index") as m:
        idx.save(st.index_path)
        size = st.index_path.stat().st_size
        m.update(nbytes=size, bytes_per_keyword=round(size / rec.n, 3),
                 array_bytes={k: int(v.nbytes) for k, v in idx.arrays.items()}, id_map_bytes=_map_bytes(idx))
    print(f"[scale] index file {size / 2**30:.2f} GiB, {size / rec.n:.2f} B/keyword", flush=True)
    st.idx = idx


def _map_bytes(idx: Any) -> int:
    """Bytes of the keyword-id map among the index's arrays (0: no map)."""
    kid = getattr(idx, "keyword_ids", None)
    if kid is not None and getattr(kid, "size", 1) == 0:
        return 0
    return sum(int(v.nbytes) for k, v in idx.arrays.items() if k.startswith("keyword_ids"))


def step_sizes(rec: Recorder, st: State, args: argparse.Namespace) -> None:
    """Our file with and without the keyword-id map against marisa-trie's BinaryTrie of the same keywords
    (4-byte big-endian token keys, default options) without and with a packed key id -> input id map."""
    from flashtrie.harness.sweep import marisa_binary_trie

    ks = keywords(rec, st)
    builder = st.builder or choose_builder(args.builder)[0]
    with rec.span("index size vs marisa-trie", backend="marisa-trie") as m:
        if not st.index_path.is_file():
            build_with(builder, ks).save(st.index_path)
        ours = st.index_path.stat().st_size
        if st.idx is None:
            from flashtrie import NarrowLoudsIndex

            st.idx = NarrowLoudsIndex.load(st.index_path, verify=False)
        ours_map = _map_bytes(st.idx)
        t0 = time.perf_counter()
        plain = st.d / "kw_index_ids.ftrie"
        build_with(builder, ks, ids="index").save(plain)
        ours_plain_s = time.perf_counter() - t0
        ours_plain = plain.stat().st_size
        plain.unlink()
        trie, key_s, build_s = marisa_binary_trie(ks)
        path = st.d / "marisa.trie"
        trie.save(str(path))
        theirs, unique = path.stat().st_size, len(trie)
        del trie
        path.unlink()
        their_map = math.ceil(unique * max(1, (len(ks) - 1).bit_length()) / 8)  # key id -> input id, packed
        m.update(ours_bytes=ours, ours_map_bytes=ours_map, ours_no_map_bytes=ours_plain,
                 ours_no_map_build_seconds=round(ours_plain_s, 3), builder=builder, marisa_bytes=theirs,
                 marisa_map_bytes=their_map, marisa_build_seconds=round(build_s, 3),
                 marisa_key_seconds=round(key_s, 3), unique_keywords=unique,
                 ratio_without_map=round(ours_plain / theirs, 4),
                 ratio_with_map=round(ours / (theirs + their_map), 4))


# ---------------------------------------------------------------------------------------------- serve
def step_load(rec: Recorder, st: State, args: argparse.Namespace | None) -> None:
    from flashtrie import NarrowLoudsIndex

    size = st.index_path.stat().st_size
    split: dict[str, float] = {}  # seconds per check (`NarrowLoudsIndex.load`'s ``timings``), filled by the record
    st.idx = rec.timed("load index (verify)", lambda: NarrowLoudsIndex.load(st.index_path, verify=True,
                                                                             timings=split),
                       nbytes=lambda _: size, split=split)


def gpu_missing() -> str | None:
    """Why the GPU backend cannot run here (None: it can)."""
    from flashtrie.harness.backends import availability

    why = availability("gpu")
    return f"no GPU ({why})" if why else None


def upload_metrics(gpu: Any) -> dict[str, Any]:
    """What a `GpuSearcher` says about its upload: the index's device bytes, the upload's seconds and, where
    the searcher has them (``upload_stats``), the bytes copied, the copy time and the H2D bandwidth."""
    out: dict[str, Any] = {}
    for name in ("upload_seconds", "index_bytes", "compile_seconds", "compile_from_cache", "load_seconds"):
        v = getattr(gpu, name, None)
        if isinstance(v, (bool, int, float)):
            out[name] = round(v, 4) if isinstance(v, float) else v
    stats = getattr(gpu, "upload_stats", None)
    if stats is not None:
        for key, name in (("bytes", "copy_bytes"), ("copy_seconds", "copy_seconds"),
                          ("derive_seconds", "derive_flags_seconds"), ("gb_per_s", "copy_gb_per_s")):
            v = stats.get(key) if isinstance(stats, dict) else getattr(stats, key, None)
            if isinstance(v, (int, float)) and math.isfinite(v):
                out[name] = round(v, 4) if isinstance(v, float) else v
    if "copy_gb_per_s" not in out and out.get("upload_seconds") and out.get("index_bytes"):
        out["h2d_gb_per_s"] = round(out["index_bytes"] / out["upload_seconds"] / 1e9, 3)  # the whole upload
    return out


def step_upload(rec: Recorder, st: State, args: argparse.Namespace) -> None:
    idx = index(rec, st)
    st.no_gpu = gpu_missing()
    if st.no_gpu:
        rec.skip("upload (GpuSearcher)", st.no_gpu, backend="gpu")
        return
    from flashtrie.gpu_impl import GpuSearcher

    with rec.span("upload (GpuSearcher)", backend="gpu") as m:
        st.gpu = GpuSearcher(idx)
        m.update(upload_metrics(st.gpu))
        m["nbytes"] = m.get("copy_bytes", m.get("index_bytes", st.index_path.stat().st_size))


def same_as_numpy(searcher: Any, ref: Any, wl: Any, queries: int, beams: tuple[int, ...],
                  seconds: dict[str, float] | None = None) -> list[str]:
    """The first difference from the numpy reference at each beam (K = beam) on the first ``queries``;
    ``seconds`` (optional) receives the time of each side's searches ("backend", "numpy")."""
    from flashtrie.harness.workloads import truncate_proposals

    from flashtrie import SearchConfig

    bad = []
    for beam in beams:
        p = truncate_proposals(wl.proposals[:queries], beam)
        cfg = SearchConfig(beam_width=beam)
        t0 = time.perf_counter()
        got = searcher.search(p, cfg)
        t1 = time.perf_counter()
        want = ref.search(p, cfg)
        if seconds is not None:
            seconds["backend"] = round(seconds.get("backend", 0.0) + t1 - t0, 4)
            seconds["numpy"] = round(seconds.get("numpy", 0.0) + time.perf_counter() - t1, 4)
        diff = got.first_difference(want)
        if diff is not None:
            bad.append(f"beam {beam}: {diff}")
    return bad


def step_check(rec: Recorder, st: State, args: argparse.Namespace) -> int:
    if st.gpu is None:
        rec.skip("GPU == numpy", st.no_gpu or "no GPU searcher", backend="gpu")
        return 0
    wl = workload(st)
    q = min(args.check_queries, wl.proposals.num_queries)
    ref = reference(rec, st)
    with rec.span("GPU == numpy", backend="gpu") as m:
        split: dict[str, float] = {}
        bad = same_as_numpy(st.gpu, ref, wl, q, CHECK_BEAMS, split)
        m.update(status="mismatch" if bad else "ok", message="; ".join(bad) or None, queries=q,
                 beams=list(CHECK_BEAMS), numpy_decode=ref.decode, gpu_search_seconds=split.get("backend"),
                 numpy_search_seconds=split.get("numpy"))
    return EXIT_MISMATCH if bad else 0


def run_context(rec: Recorder, args: argparse.Namespace) -> Any:
    """The sweeps' `RunContext`: this process's env, command and run id, records to ``--out``."""
    from flashtrie.harness.sweep import RunContext

    ctx = RunContext(out=Path(rec.out), env=rec.env, command=rec.command, run_id=rec.run_id, warmup=args.warmup,
                     repeats=args.repeats, max_seconds=args.max_seconds, stats_queries=args.stats_queries,
                     progress=False)
    ctx.library = {"N": rec.n, "name": LIBRARY}
    return ctx


def _sweep(rec: Recorder, st: State, args: argparse.Namespace, stage: str, searchers: dict[str, Any],
           batch: int, ks: Any = None) -> int:
    """One `sweep_beam_width` as one stage record; `EXIT_MISMATCH` when a case is not ok (a mismatch, an error)."""
    from flashtrie.harness.sweep import sweep_beam_width

    backend = "+".join(searchers)
    with rec.span(stage, backend=backend) as m:
        recs = sweep_beam_width(run_context(rec, args), ks, st.idx, workload(st), [], beams=args.beams,
                                batch_size=batch, searchers=searchers)
        bad = [f"{r.backend} beam {r.config.get('beam_width')}: {r.status}: {r.message}" for r in recs
               if r.status in ("mismatch", "error")]
        skipped = [r for r in recs if r.status == "skipped"]
        m.update(cases=len(recs), skipped=len(skipped), batch_size=batch, beams=list(args.beams),
                 status="mismatch" if bad else "ok", message="; ".join(bad)[:2000] or None)
    return EXIT_MISMATCH if bad else 0


def step_bench(rec: Recorder, st: State, args: argparse.Namespace) -> int:
    """The GPU (and ``--cpu`` numpy) at batch 1, the GPU alone at the other batch sizes."""
    index(rec, st)
    rc = 0
    for batch in args.batches:
        searchers: dict[str, Any] = {}
        if batch == 1 and "numpy" in args.cpu:
            searchers["numpy"] = reference(rec, st)
        if st.gpu is not None:
            searchers["gpu"] = st.gpu
        else:
            rec.skip(f"bench batch {batch} (gpu)", st.no_gpu or gpu_missing() or "no GPU searcher",
                     backend="gpu")
        if searchers:
            rc = max(rc, _sweep(rec, st, args, f"bench batch {batch}", searchers, batch))
    return rc


def step_marisa(rec: Recorder, st: State, args: argparse.Namespace) -> int:
    """marisa-trie's searcher (its trie and children table built), its sweep at batch 1, marisa == numpy."""
    from flashtrie.reference_cpu import MarisaSearcher

    ks = keywords(rec, st)
    index(rec, st)  # loaded already in a serve process; the marisa process loads it here
    ms = rec.timed("marisa searcher", lambda: MarisaSearcher(ks), backend="marisa")
    rc = _sweep(rec, st, args, "bench batch 1 (marisa)", {"marisa": ms}, 1, ks)
    q = min(args.check_queries, workload(st).proposals.num_queries)
    ref = reference(rec, st)
    with rec.span("marisa == numpy", backend="marisa") as m:
        split: dict[str, float] = {}
        bad = same_as_numpy(ms, ref, workload(st), q, CHECK_BEAMS, split)
        m.update(status="mismatch" if bad else "ok", message="; ".join(bad) or None, queries=q,
                 beams=list(CHECK_BEAMS), numpy_decode=ref.decode, marisa_search_seconds=split.get("backend"),
                 numpy_search_seconds=split.get("numpy"))
    return max(rc, EXIT_MISMATCH if bad else 0)


STEPS = {"gen": step_gen, "queries": step_queries, "warmup": step_warmup, "build": step_build, "sizes": step_sizes,
         "load": step_load, "upload": step_upload, "check": step_check, "bench": step_bench, "marisa": step_marisa}


def wanted(step: str, args: argparse.Namespace) -> bool:
    """Whether ``step`` of this process runs: ``sizes`` with ``--marisa-size`` (or alone), ``marisa`` when
    ``--cpu`` names it."""
    if step == "sizes":
        return args.marisa_size or args.process == "sizes"
    if step == "marisa":
        return "marisa" in args.cpu
    if step == "check":
        return args.check
    return True


def run_process(rec: Recorder, args: argparse.Namespace) -> int:
    """The steps of ``args.process`` in order, each under its budget.  A step that finds no time left is
    recorded as skipped; a step that fails is recorded as an error and the steps after it as skipped."""
    st = State(Path(args.dir))
    st.d.mkdir(parents=True, exist_ok=True)
    rec.clear_marker()
    rc = 0
    steps = [s for s in PROCESSES[args.process] if wanted(s, args)]
    for i, step in enumerate(steps):
        try:
            with rec.budget(step):
                rc = max(rc, int(STEPS[step](rec, st, args) or 0))
        except OutOfTime as e:
            rec.skip(step, str(e))
            rc = max(rc, EXIT_NO_TIME)
        except Exception as e:  # noqa: BLE001 - recorded (by the span it left, or here), then the rest skipped
            if not rec.recorded(e):
                rec.emit(step, 0.0, status="error", message=f"{type(e).__name__}: {e}"[:2000])
            rec.clear_marker()
            for later in steps[i + 1:]:
                rec.skip(later, f"step {step} failed")
            return EXIT_FAILED
    return rc


# ---------------------------------------------------------------------------------------------- CLI
def stage_table(out: str) -> None:
    recs = [r for r in read_records(out) if r.sweep == "scale"]
    print(f"{'stage':<28} {'N':>12} {'backend':<12} {'seconds':>9} {'peak RSS GB':>12} {'GB/s':>7}  status")
    for r in recs:
        m = r.metrics
        gbs = f"{m['gb_per_s']:.2f}" if m.get("gb_per_s") else ""
        print(f"{r.config.get('stage', '?'):<28} {r.workload.get('N', 0):>12,} {r.backend:<12} {m['seconds']:>9.2f} "
              f"{m['peak_rss_bytes'] / 1e9:>12.1f} {gbs:>7}  {r.status}" + (f": {r.message}" if r.message else ""))
        if m.get("stages"):
            print("    " + ", ".join(f"{name} {sec:.2f} s" for name, sec in m["stages"]))


def _budgets(items: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in (part for text in items for part in text.split(",") if part):
        key, _, value = item.partition("=")
        if key not in STEPS or not value:
            raise SystemExit(f"--budget: expected STEP=SECONDS with STEP one of {', '.join(STEPS)}, got {item!r}")
        out[key] = float(value)
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m flashtrie.harness.scale", description=__doc__.splitlines()[0])
    ap.add_argument("process", choices=(*PROCESSES, "fail", "table"))
    ap.add_argument("--n", type=_count, default=800_000_000, help="keywords (800M, 10M, ...)")
    ap.add_argument("--dir", default="/tmp/ftscale", help="where the keyword, query and index files go")
    ap.add_argument("--out", default="scale.jsonl", help="records file (JSON Lines, appended)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--queries", type=int, default=16)
    ap.add_argument("--check-queries", type=int, default=4)
    ap.add_argument("--builder", choices=("auto", "gpu", "cpu"), default="auto")
    ap.add_argument("--save-keywords", action="store_true", help="gen: also write kw.npz (for a later process)")
    ap.add_argument("--marisa-size", action="store_true", help="prepare: also the size comparison with marisa-trie")
    ap.add_argument("--cpu", type=lambda t: [s for s in t.split(",") if s], default=[],
                    help="bench: CPU backends beside the GPU (numpy at batch 1; marisa: its own step)")
    ap.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                    help="GPU == numpy on --check-queries queries (the numpy reference decodes every node first)")
    ap.add_argument("--beams", type=ints, default=[1, 10, 100, 500, 1000])
    ap.add_argument("--batches", type=ints, default=[1])
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=50, help="timed passes over the queries per case (at most)")
    ap.add_argument("--max-seconds", type=float, default=1.0, help="time per backend and case (after one pass)")
    ap.add_argument("--stats-queries", type=int, default=0,
                    help="queries replayed for the workload statistics (a numpy searcher of its own: 0 = none)")
    ap.add_argument("--budget", action="append", default=[], metavar="STEP=SECONDS[,...]")
    ap.add_argument("--deadline", type=float, default=None, help="epoch seconds by which every step must end")
    ap.add_argument("--message", default="", help="fail: what stopped the process")
    ap.add_argument("--failed", default="", help="fail: the process that stopped")
    return ap


def render(argv: list[str]) -> int:
    """``render RECORDS... --out DIR [--commit C]``: the report pipeline (`flashtrie report`) over the records,
    with the commit given by hand where the records' own is wrong (a copied tree)."""
    from flashtrie.harness.report import build_report

    ap = argparse.ArgumentParser(prog="python -m flashtrie.harness.scale render")
    ap.add_argument("records", nargs="+", help="records files (JSON Lines)")
    ap.add_argument("--out", required=True, help="folder for report.md and the figures")
    ap.add_argument("--commit", help="the commit the run's tree was, given by hand (the records' env.git wrong)")
    args = ap.parse_args(argv)
    print(build_report(args.records, args.out, commit=args.commit))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["render"]:
        return render(argv[1:])
    args = parser().parse_args(argv)
    if args.process == "table":
        stage_table(args.out)
        return 0
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    rec = Recorder(args.out, args.n, ["python", "-m", "flashtrie.harness.scale", *argv],
                   marker=d / "stage.json", budgets=_budgets(args.budget), deadline=args.deadline)
    if args.process == "fail":
        print(f"[scale] {rec.record_failure(args.failed or '?', args.message or 'stopped')}", flush=True)
        return 0
    return run_process(rec, args)


if __name__ == "__main__":
    sys.exit(main())
