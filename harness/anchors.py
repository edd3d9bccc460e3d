"""Reference numbers taken from the team's anchors page (``anchors.md`` of the shared docs, outside this
repository), not measured by this project.

Reports may show them in a clearly labelled section; they are never mixed with measured records.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LABEL", "SOURCE", "PAPER_LATENCY", "PAPER_INDEX", "PAPER_QUALITY", "PUBLIC_FLASHTRIE_H200",
           "PUBLIC_FLASHTRIE_NOTES"]

LABEL = "taken from the anchors page, not measured by this report"
SOURCE = "the team's anchors page (anchors.md of the shared project docs, outside this repository)"

#: The FlashTrie paper (EMNLP 2026, arXiv 2607.10044): production NAR model, 2.2M-token vocabulary,
#: 800M-keyword trie, 13,000 requests, NVIDIA A100 80 GB, batch 1.  Milliseconds and queries per second.
PAPER_LATENCY: list[dict[str, Any]] = [
    {"beam_width": 100, "cpu_mean_ms": 9.03, "cpu_p99_ms": 15.08, "gpu_mean_ms": 0.56, "gpu_p99_ms": 0.70,
     "cpu_peak_qps": 206, "gpu_peak_qps": 5754},
    {"beam_width": 500, "cpu_mean_ms": 29.47, "cpu_p99_ms": 45.36, "gpu_mean_ms": 1.36, "gpu_p99_ms": 2.04,
     "cpu_peak_qps": 40, "gpu_peak_qps": 2571},
    {"beam_width": 1000, "cpu_mean_ms": 46.30, "cpu_p99_ms": 76.71, "gpu_mean_ms": 1.91, "gpu_p99_ms": 3.31,
     "cpu_peak_qps": 23, "gpu_peak_qps": 1539},
]
PAPER_CPU = "CPU MARISA-Opt, 8 threads"
PAPER_GPU = "FlashTrie, A100"

PAPER_INDEX = {"keywords": 800_000_000, "index_bytes": 3.1e9, "marisa_opt_bytes": 4.0e9,
               "build_s": 804, "marisa_opt_build_s": 2718}
PAPER_QUALITY = {"precision@100": {100: 0.53, 1000: 0.78}, "cpu_gpu_agreement": "within 0.001"}

#: The public FlashTrie implementation measured on the project's H200 (2026-11-30), with its own benchmark
#: script: host-timed call per batch; thresholds and length normalisation off for the dense run.
PUBLIC_FLASHTRIE_H200: list[dict[str, Any]] = [
    {"workload": "its own generator (few valid proposals)", "keys": 10_000_000, "beam_width": 100, "batch": 1,
     "mean_ms": 0.132, "p99_ms": 0.150},
    {"workload": "its own generator", "keys": 10_000_000, "beam_width": 1000, "batch": 1,
     "mean_ms": 0.213, "p99_ms": 0.240},
    {"workload": "dense (beams fill up every step)", "keys": 7_550_000, "beam_width": 100, "batch": 1,
     "mean_ms": 0.283, "p99_ms": 0.438},
    {"workload": "dense", "keys": 7_550_000, "beam_width": 100, "batch": 8, "mean_ms": 0.436, "p99_ms": 0.678},
    {"workload": "dense", "keys": 7_550_000, "beam_width": 1000, "batch": 1, "mean_ms": 0.884, "p99_ms": 0.980},
    {"workload": "dense", "keys": 7_550_000, "beam_width": 1000, "batch": 8, "mean_ms": 2.531, "p99_ms": 3.842},
]
PUBLIC_FLASHTRIE_NOTES = [
    "Its dense-workload index was 88.6 MiB for 7.55M keys.",
    "Its single-thread CPU path took 1.41 s mean per query at beam 100 on the dense workload "
    "(a reference path, not a fair CPU baseline).",
    "Known defects: keys past the end of a path-compressed edge at an internal node are unreachable; tie "
    "order depends on thread timing; the top-B path for more than 1024 candidates looks broken.",
]
