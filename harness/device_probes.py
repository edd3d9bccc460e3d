"""Small measurements of the GPU machine as suites of the lab: each writes records (sweep ``smoke``,
``upload``, ``load`` or ``compile``) that `probe_report` renders through the one report pipeline.  Without a usable GPU
smoke, upload and compile write one ``skipped`` record with the reason and exit with status 1 (a check that could
not run is no pass).

    flashtrie bench smoke --out FILE.jsonl [--keywords 20000] [--queries 4] [--steps 6]
        GPU == numpy bit for bit on a generated library, eight configurations (four beam widths, each plain
        and with thresholds and fewer results); exit status 1 on any difference.
    flashtrie bench upload INDEX.ftrie --out FILE.jsonl
        load (verified, then trusted) and `GpuSearcher` set-up of one index file: seconds, the upload's
        bytes, copy seconds and host-to-device GB/s, the node flags derived on the device, bytes per keyword.
    flashtrie bench load FILE... --out FILE.jsonl [--workers 1,2,16] [--repeats 3] [--device auto|cpu|gpu]
                                 [--set louds_pass.PIECE_BITS=262144 ...]
        ``NarrowLoudsIndex.load(path, verify=True)`` on w CPUs for each ``--workers`` count (the process's
        CPU affinity set to w CPUs, so every threaded check sees w): the best seconds and GB/s (file bytes per
        second), the least CPU seconds of a load (GB per CPU-second: per-core speed, less sensitive to a busy
        machine) and the split of the fastest load into its steps.  ``--set MODULE.NAME=INT`` sets a
        piece-size constant of ``flashtrie.index.MODULE`` first (to compare piece sizes on one machine).
    flashtrie bench compile --out FILE.jsonl
        search.cu compiled by NVRTC for this device (the kernel cache bypassed), then loaded from the kernel
        cache: seconds of each, the compiler's register and spill report.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import os
import sys
import time
from typing import Any

from flashtrie.index import NarrowLoudsIndex
from flashtrie.search_types import SearchConfig

from .argtypes import count, ints
from .backends import availability
from .records import Record, append_records, new_run_id

__all__ = ["smoke_main", "upload_main", "load_main", "compile_main", "SMOKE_CASES"]

#: (beam width, proposals per step, length-norm alpha) of the smoke run
SMOKE_CASES = ((4, 16, 0.0), (32, 64, 0.5), (128, 256, 0.0), (600, 300, 1.0))


class _Out:
    """The records of one run: this command, the environment, one run id."""

    def __init__(self, path: str, sweep: str, argv: list[str]) -> None:
        from .env import snapshot

        self.path, self.sweep, self.env = path, sweep, snapshot()
        self.command, self.run_id = ["flashtrie", "bench", sweep, *argv], new_run_id()

    def record(self, backend: str, **fields: Any) -> Record:
        """Append one record: kind ``parity`` for the smoke run, ``compile`` for the compile run, ``build``
        (set-up seconds) for the others."""
        ts = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        kind = {"smoke": "parity", "compile": "compile"}.get(self.sweep, "build")
        rec = Record(kind=kind, backend=backend, sweep=self.sweep, env=self.env, command=self.command,
                     run_id=self.run_id, timestamp=ts, **fields)
        append_records(self.path, [rec])
        return rec


def _smoke_configs(b: int, alpha: float) -> tuple[SearchConfig, SearchConfig]:
    """The two configurations of one case: plain with length normalisation, and with thresholds and fewer results."""
    return (SearchConfig(beam_width=b, length_norm=alpha),
            SearchConfig(beam_width=b, max_results=max(1, b // 3), token_threshold=-6.0, score_threshold=-20.0))


def smoke_main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="flashtrie bench smoke", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="records file (JSON Lines, appended)")
    ap.add_argument("--keywords", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=4)
    ap.add_argument("--steps", type=int, default=6)
    a = ap.parse_args(argv)
    out = _Out(a.out, "smoke", argv)
    workload = {"num_keywords": a.keywords, "num_queries": a.queries, "num_steps": a.steps, "vocab_size": 50_000}
    why = availability("gpu")
    if why is not None:
        out.record("gpu", status="skipped", message=why, workload=workload)
        print(f"smoke: skipped ({why})")
        return 1
    from flashtrie.datasets.keywords import generate_keywords
    from flashtrie.datasets.queries import generate_queries
    from flashtrie.gpu_impl import GpuSearcher
    from flashtrie.reference_cpu.numpy_search import NumpySearcher

    ks = generate_keywords(a.keywords, vocab_size=50_000, seed=1)
    index = NarrowLoudsIndex.build(ks)
    gpu, ref, bad = GpuSearcher(index), NumpySearcher(index), 0
    for b, k, alpha in SMOKE_CASES:
        wl = generate_queries(ks, a.queries, num_steps=a.steps, proposals_per_step=k, seed=b)
        for cfg in _smoke_configs(b, alpha):
            got, want = gpu.search(wl.proposals, cfg), ref.search(wl.proposals, cfg)
            diff = got.first_difference(want)
            bad += diff is not None
            out.record("gpu", status="ok" if diff is None else "mismatch", message=diff, workload={**workload, "K": k},
                       config=cfg.to_dict(), metrics={"results": int(want.num_results.sum()),
                                                      "device_ms": gpu.last_device_ms})
            said = "OK" if diff is None else f"MISMATCH {diff}"
            print(f"B={b} K={k} R={cfg.results} alpha={cfg.length_norm}: {said}")
    print("smoke:", "PASS" if bad == 0 else f"FAIL ({bad})")
    return 1 if bad else 0


def upload_main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="flashtrie bench upload", description=__doc__.splitlines()[0])
    ap.add_argument("index", help="an index file (.ftrie)")
    ap.add_argument("--out", required=True, help="records file (JSON Lines, appended)")
    a = ap.parse_args(argv)
    out = _Out(a.out, "upload", argv)
    why = availability("gpu")
    if why is not None:
        out.record("gpu", status="skipped", message=why, workload={"index": a.index})
        print(f"upload: skipped ({why})")
        return 1
    from flashtrie.gpu_impl import GpuSearcher

    for verify in (True, False):  # verified (pages in the page cache after the checksums), then trusted
        t0 = time.perf_counter()
        ix = NarrowLoudsIndex.load(a.index, verify=verify)
        t_load = time.perf_counter() - t0
        t0 = time.perf_counter()
        g = GpuSearcher(ix)
        t_new = time.perf_counter() - t0
        st = g.upload_stats
        assert st is not None, "GpuSearcher uploads its index at construction"
        wl = {"index": a.index, "num_keywords": ix.num_keywords, "num_nodes": ix.num_nodes}
        m = {"load_s": t_load, "searcher_s": t_new, **st.as_dict(),
             "file_bytes": sum(arr.nbytes for arr in ix.arrays.values()),
             "bytes_per_keyword": ix.stats()["bytes_per_keyword_without_id_map"]}
        out.record("gpu", workload=wl, config={"verify": verify}, metrics=m)
        print(f"load verify={verify} {t_load:.2f} s; upload {st.seconds:.3f} s: {st.bytes / 1e6:.1f} MB copied in "
              f"{st.copy_seconds:.3f} s = {st.gb_per_s:.2f} GB/s, flags derived on the device in "
              f"{st.derive_seconds * 1e3:.2f} ms; {m['bytes_per_keyword']:.3f} B/keyword")
        del g
    return 0


def _load_once(path: str, workers: int, repeats: int, device: str) -> dict[str, Any]:
    """Best of ``repeats`` verified loads of ``path`` on ``workers`` CPUs, and the step split of the best."""
    all_cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, all_cpus[:workers])
    try:
        best, cpu, split = float("inf"), float("inf"), {}
        for _ in range(repeats):
            t: dict[str, float] = {}
            c0, t0 = time.process_time(), time.perf_counter()
            NarrowLoudsIndex.load(path, verify=True, timings=t, verify_device=device)
            dt, cpu = time.perf_counter() - t0, min(cpu, time.process_time() - c0)
            if dt < best:
                best, split = dt, t
    finally:
        os.sched_setaffinity(0, all_cpus)
    size = os.path.getsize(path)
    return {"bytes": size, "seconds": best, "gb_per_s": size / best / 1e9, "cpu_seconds": cpu,
            "gb_per_cpu_s": size / cpu / 1e9, "split": split}


def _set_constants(ap: argparse.ArgumentParser, items: list[str]) -> dict[str, int]:
    """Apply ``MODULE.NAME=INT`` settings to the integer constants of ``flashtrie.index`` modules."""
    done = {}
    for item in items:
        target, _, value = item.partition("=")
        mod, _, name = target.rpartition(".")
        try:
            module = importlib.import_module(f"flashtrie.index.{mod}")
            if not isinstance(getattr(module, name), int):
                raise AttributeError(name)
            setattr(module, name, int(value))
        except (ImportError, AttributeError, ValueError):
            ap.error(f"--set: expected MODULE.CONSTANT=INT of flashtrie.index, got {item!r}")
        done[target] = int(value)
    return done


def load_main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="flashtrie bench load", description="verified-load speed of index files")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", required=True, help="records file (JSON Lines, appended)")
    ap.add_argument("--workers", type=ints, default=[1, 2], help="CPU counts (capped at the usable ones)")
    ap.add_argument("--repeats", type=count, default=3)
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"),
                    help="where the LOUDS pass runs (load's verify_device)")
    ap.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=INT",
                    help="set a piece-size constant of flashtrie.index.MODULE (repeatable)")
    a = ap.parse_args(argv)
    settings = _set_constants(ap, a.set)
    missing = [f for f in a.files if not os.path.isfile(f)]
    if missing:
        ap.error(f"FILE: {missing[0]} is not a file")
    out, usable = _Out(a.out, "load", argv), len(os.sched_getaffinity(0))
    for path in a.files:
        with open(path, "rb", buffering=0) as f:  # once, so that the timed loads find it in the page cache
            while f.read(16 << 20):
                pass
        for w in sorted({min(max(w, 1), usable) for w in a.workers}):
            m = _load_once(path, w, a.repeats, a.device)
            out.record("host", workload={"index": os.path.basename(path), "bytes": m["bytes"]},
                       config={"workers": w, "repeats": a.repeats, "device": a.device, **settings}, metrics=m)
            split = ", ".join(f"{k} {v:.3f}" for k, v in m["split"].items())
            print(f"{os.path.basename(path)} ({m['bytes'] / 1e9:.3f} GB) {w:>2} cores: {m['seconds']:.3f} s, "
                  f"{m['gb_per_s']:.3f} GB/s; CPU {m['cpu_seconds']:.3f} s, {m['gb_per_cpu_s']:.3f} GB per "
                  f"CPU-second | {split}", flush=True)
    return 0


def _compile_once(arch: str, use_cache: bool) -> tuple[float, bool, dict[str, dict[str, int]]]:
    """search.cu compiled (or loaded from the kernel cache) for ``arch``: seconds, from the cache, and the
    compiler's resources per kernel (`spill_report`; empty from the cache)."""
    from flashtrie.gpu_impl.compile import compile_kernel, spill_report

    k = compile_kernel("search.cu", arch, {"FT_THREADS": "512"}, use_cache=use_cache, verbose=not use_cache)
    return k.seconds, bool(k.from_cache), spill_report(k.log)


def compile_main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="flashtrie bench compile",
                                 description="search.cu compiled on first use, then loaded from the kernel cache")
    ap.add_argument("--out", required=True, help="records file (JSON Lines, appended)")
    ap.add_argument("--arch", default=None, help="target architecture, e.g. sm_90 (default: the device's own)")
    a = ap.parse_args(argv)
    out = _Out(a.out, "compile", argv)
    why = availability("gpu")
    if why is not None:
        out.record("gpu", status="skipped", message=why, workload={"kernel": "search.cu"})
        print(f"compile: skipped ({why})")
        return 1
    arch = a.arch or _device_arch()
    for use_cache in (False, True):
        seconds, cached, resources = _compile_once(arch, use_cache)
        out.record("gpu", workload={"kernel": "search.cu"}, config={"arch": arch, "use_cache": use_cache},
                   metrics={"seconds": seconds, "from_cache": cached, "resources": resources})
        if use_cache:
            print(f"cached load {seconds * 1e3:.1f} ms (from_cache={cached})")
        else:
            print(f"compile {arch}: first use {seconds:.2f} s, resources {resources}")
    return 0


def _device_arch() -> str:
    """The architecture of device 0, made current (``sm_XY``)."""
    from cuda.core import Device

    d = Device(0)
    d.set_current()
    cc = d.compute_capability
    cc = cc() if callable(cc) else cc
    return f"sm_{cc.major}{cc.minor}"
