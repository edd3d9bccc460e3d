"""A small GPU-vs-numpy parity run (`tools/device/check.sh smoke`; under compute-sanitizer: `sanitizer`).

    python3 tools/probes/device_smoke.py [--keywords 20000] [--queries 4]

Exit status 0 when every configuration matches bit for bit.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from flashtrie import NarrowLoudsIndex, SearchConfig


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keywords", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=4)
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args(argv)
    from flashtrie.datasets.keywords import generate_keywords
    from flashtrie.datasets.queries import generate_queries
    from flashtrie.gpu_impl import GpuSearcher
    from flashtrie.reference_cpu.numpy_search import NumpySearcher

    ks = generate_keywords(args.keywords, vocab_size=50_000, seed=1)
    index = NarrowLoudsIndex.build(ks)
    gpu = GpuSearcher(index)
    ref = NumpySearcher(index)
    bad = 0
    for b, k, alpha in ((4, 16, 0.0), (32, 64, 0.5), (128, 256, 0.0), (600, 300, 1.0)):
        wl = generate_queries(ks, args.queries, num_steps=args.steps, proposals_per_step=k, seed=b)
        for cfg in (SearchConfig(beam_width=b, length_norm=alpha),
                    SearchConfig(beam_width=b, max_results=max(1, b // 3), token_threshold=-6.0,
                                 score_threshold=-20.0)):
            got = gpu.search(wl.proposals, cfg)
            want = ref.search(wl.proposals, cfg)
            diff = got.first_difference(want)
            print(f"B={b} K={k} R={cfg.results} alpha={alpha}: {'OK' if diff is None else 'MISMATCH ' + diff} "
                  f"(results {int(np.sum(want.num_results))}, device {gpu.last_device_ms:.3f} ms)")
            bad += diff is not None
    print("smoke:", "PASS" if bad == 0 else f"FAIL ({bad})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
