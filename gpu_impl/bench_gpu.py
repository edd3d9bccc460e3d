"""Benchmark `GpuSearcher` on the dense workload (``flashtrie.datasets``); JSON lines out.

    python -m flashtrie.gpu_impl.bench_gpu --keywords 10000000 --out bench.jsonl

Per (beam width B = K, batch): mean / p50 / p99 latency of one host call (numpy proposals in, numpy
results out), mean device time of the kernel (CUDA events), throughput.  Before timing, the GPU results
are checked bit for bit against `NumpySearcher` on a subset of the queries.  The first line written is
an environment snapshot (GPU, driver, versions, commit, index statistics).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from flashtrie import NarrowLoudsIndex, Proposals, SearchConfig


def environment(searcher: Any) -> dict[str, Any]:
    """The harness's environment snapshot (CPU, GPU, driver, versions, commit, command) plus the kernel's."""
    from flashtrie.harness.env import snapshot

    env: dict[str, Any] = {"kind": "environment", **snapshot()}
    env["arch"] = searcher.arch
    env["sms"] = searcher._num_sms
    env["compile_seconds"] = round(searcher.compile_seconds, 3)
    env["compile_from_cache"] = searcher.compile_from_cache
    return env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keywords", type=int, default=10_000_000)
    ap.add_argument("--vocab", type=int, default=2_200_000)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--beams", default="1,10,100,200,500,1000")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--queries", type=int, default=64, help="distinct queries per beam width (rotated)")
    ap.add_argument("--iters", type=int, default=200, help="timed calls per (beam, batch)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--check", type=int, default=16, help="queries checked against NumpySearcher per beam")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--direct-variant", action="store_true",
                    help="also time the largest beam with proposals uploaded straight from numpy (no staging)")
    ap.add_argument("--index", help="index file to load or to write (skips the build when it exists)")
    ap.add_argument("--out", default="bench_gpu.jsonl")
    args = ap.parse_args(argv)

    from flashtrie.datasets.keywords import generate_keywords
    from flashtrie.datasets.queries import generate_queries
    from flashtrie.reference_cpu.numpy_search import NumpySearcher

    from .searcher import GpuSearcher

    out = open(args.out, "a")

    def emit(rec: dict[str, Any]) -> None:
        out.write(json.dumps(rec) + "\n")
        out.flush()

    t0 = time.perf_counter()
    ks = generate_keywords(args.keywords, vocab_size=args.vocab, seed=args.seed)
    t_gen = time.perf_counter() - t0
    if args.index and Path(args.index).exists():
        index = NarrowLoudsIndex.load(args.index)
    else:
        index = NarrowLoudsIndex.build(ks)
        if args.index:
            index.save(args.index)
    t_build = time.perf_counter() - t0 - t_gen
    print(f"keywords {len(ks):,} in {t_gen:.1f} s; index {index.num_nodes:,} nodes in {t_build:.1f} s", flush=True)
    gpu = GpuSearcher(index)
    env = environment(gpu)
    env.update(keywords=len(ks), nodes=int(index.num_nodes), index_bytes=int(gpu.index_bytes),
               max_degree=gpu.max_degree, max_degree_nonroot=gpu.max_degree_nonroot, steps=args.steps,
               gen_seconds=round(t_gen, 2), build_seconds=round(t_build, 2),
               upload_seconds=round(gpu.upload_seconds, 3))
    emit(env)
    print(json.dumps(env), flush=True)
    ref = NumpySearcher(index) if args.check else None

    beams = [int(x) for x in args.beams.split(",")]
    batches = [int(x) for x in args.batches.split(",")]
    rows = []
    for b in beams:
        wl = generate_queries(ks, args.queries, num_steps=args.steps, proposals_per_step=b, preset="dense",
                              seed=args.seed + b)
        props: Proposals = wl.proposals
        cfg = SearchConfig(beam_width=b)
        if ref is not None:
            sub = props[: min(args.check, props.num_queries)]
            want = ref.search(sub, cfg)
            got = gpu.search(sub, cfg)
            diff = got.first_difference(want)
            emit({"kind": "check", "beam": b, "queries": sub.num_queries, "equal": diff is None, "diff": diff,
                  "mean_results": float(want.num_results.mean())})
            print(f"check beam {b}: {'OK' if diff is None else 'MISMATCH ' + str(diff)}", flush=True)
            if diff is not None:
                rows.append((b, 0, float("nan"), float("nan"), float("nan"), float("nan"), 0.0, "MISMATCH"))
                continue
        variants = [(bs, True) for bs in batches]
        if b == max(beams) and args.direct_variant:
            variants += [(bs, False) for bs in batches]
        for bs, staged in variants:
            gpu.stage_inputs = staged
            groups = [props[i: i + bs] for i in range(0, props.num_queries - bs + 1, bs)]
            for i in range(args.warmup):
                gpu.search(groups[i % len(groups)], cfg)
            host, dev, parts = [], [], []
            for i in range(args.iters):
                g = groups[i % len(groups)]
                t = time.perf_counter()
                gpu.search(g, cfg)
                host.append((time.perf_counter() - t) * 1e3)
                dev.append(gpu.last_device_ms)
                parts.append(gpu.last_breakdown)
            h = np.array(host)
            d = np.array(dev)
            rec = {"kind": "bench", "beam": b, "K": b, "batch": bs,
                   "upload": "staged" if staged else "direct", "steps": args.steps, "iters": args.iters,
                   "mean_ms": float(h.mean()), "p50_ms": float(np.percentile(h, 50)),
                   "p99_ms": float(np.percentile(h, 99)), "device_mean_ms": float(d.mean()),
                   "device_p99_ms": float(np.percentile(d, 99)), "qps": bs / (float(h.mean()) / 1e3)}
            rec["last_stats"] = gpu.last_stats.to_dict()
            rec["host_breakdown_ms"] = {k: float(np.mean([p[k] for p in parts])) for k in parts[0]}
            emit(rec)
            rows.append((b, bs, rec["mean_ms"], rec["p99_ms"], rec["device_mean_ms"], rec["device_p99_ms"],
                         rec["qps"], "" if staged else "direct upload"))
            print(f"beam {b:5d} batch {bs:3d} {rec['upload']}: mean {rec['mean_ms']:.3f} ms p99 {rec['p99_ms']:.3f} ms "
                  f"device {rec['device_mean_ms']:.3f} ms  {rec['qps']:,.0f} q/s  host parts "
                  + " ".join(f"{k[:-3]} {v:.3f}" for k, v in rec["host_breakdown_ms"].items()), flush=True)
    out.close()
    print()
    print(f"{'beam':>5} {'batch':>5} {'mean ms':>8} {'p99 ms':>8} {'dev ms':>8} {'dev p99':>8} {'q/s':>9}")
    for b, bs, m, p, dm, dp, qps, note in rows:
        print(f"{b:>5} {bs:>5} {m:>8.3f} {p:>8.3f} {dm:>8.3f} {dp:>8.3f} {qps:>9,.0f} {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
