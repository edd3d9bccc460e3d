"""The steps of the ``serve`` process: upload the index to the GPU, benchmark the searchers, check them against
the numpy reference."""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

from .recorder import LIBRARY, Recorder
from .state import EXIT_MISMATCH, State, index, keywords, reference, workload

__all__ = ["CHECK_BEAMS", "gpu_missing", "run_context", "same_as_numpy", "step_bench", "step_check",
           "step_marisa", "step_upload", "upload_metrics"]

CHECK_BEAMS = (10, 1000)


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
    """The first difference from the numpy reference at each beam (K = beam) on the first ``queries``
    (`flashtrie.harness.parity.compare_backends`); ``seconds`` (optional) receives the time of each side's
    searches ("backend", "numpy")."""
    from flashtrie.harness.parity import compare_backends
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
        report = compare_backends({"numpy": want, "backend": got}, "numpy")
        if not report.ok:
            bad.append(f"beam {beam}: {report.outcome('backend').mismatch}")
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
    """The sweeps' `SweepContext`: the recorder's run (env, command, run id), records to ``--out``."""
    from flashtrie.harness.sweep import SweepContext

    ctx = SweepContext(run=rec.run, out=Path(rec.out), warmup=args.warmup, repeats=args.repeats,
                       max_seconds=args.max_seconds, stats_queries=args.stats_queries, progress=False)
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
