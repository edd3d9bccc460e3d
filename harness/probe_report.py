"""The report sections of the GPU machine's small measurements, suites of the lab (`device_probes`: sweeps
``smoke``, ``upload``, ``load`` and ``compile``; `launch_probe`: ``launch``; `query_passes`: ``query-passes``;
`numpy_lazy`: ``numpylazy``; `gpu_build_probe`: ``gpubuild``; `step_probe`: ``step-probe``): one table per
measurement, a row per record with its backend, configuration, numbers and status; registered with the report
pipeline (`harness/report.py`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .env import summary_line
from .markdown import fmt, table
from .records import Record
from .suites import Metric, Page, Suite, no_figures, register

__all__ = ["SUITE", "PROBES", "sections"]

#: sweep -> (section title, the metrics shown, in order)
PROBES: dict[str, tuple[str, tuple[str, ...]]] = {
    "smoke": ("GPU == numpy, smoke configurations", ("results", "device_ms")),
    "upload": ("Index load and upload", ("load_s", "searcher_s", "bytes", "copy_seconds", "gb_per_s",
                                         "derive_seconds", "bytes_per_keyword")),
    "load": ("Verified loads (best of the repeats)", ("bytes", "seconds", "gb_per_s", "cpu_seconds", "gb_per_cpu_s")),
    "compile": ("Kernel compile and cached load", ("seconds", "from_cache", "resources")),
    "launch": ("Host microseconds of a fused step, by part", ("median_us", "p90_us")),
    "query-passes": ("The query generator's library pass, CPU and GPU", ("seconds", "cpu_seconds", "upload_GBps")),
    "numpylazy": ("The lazy numpy reference at scale", ("value",)),
    "gpubuild": ("The GPU builder", ("build_s", "num_nodes", "build_peak_above_input", "index_array_bytes",
                                     "upload_staged_gbps_1", "download_staged_fresh_gbps_1", "equal")),
    "step-probe": ("Where a fused step's device time goes", ("device_us", "equal")),
}


def _owns(r: Record) -> bool:
    return r.sweep in PROBES


def _config_text(c: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in c.items() if v is not None and v is not False) or "–"


def _section(sweep: str, recs: Sequence[Record]) -> list[str]:
    title, shown = PROBES[sweep]
    rows = [[r.backend, _config_text({**r.workload, **r.config}) if sweep in ("load", "launch")
             else _config_text(r.config),
             *[fmt(r.metrics.get(m)) for m in shown],
             r.status + (f": {r.message}" if r.message else "")] for r in recs]
    envs = sorted({summary_line(r.env) for r in recs if r.env})
    return ([f"## {title}", ""] + [f"Environment: {e}" for e in envs] + [""]
            + table(["backend", "config", *shown, "status"], rows) + [""])


def sections(records: list[Record], page: Page) -> list[str]:
    """One table per measurement present, in `PROBES` order."""
    lines: list[str] = []
    for sweep in PROBES:
        recs = [r for r in records if r.sweep == sweep]
        if recs:
            lines += _section(sweep, recs)
    return lines


METRICS = {
    "results": Metric("results returned by the numpy reference in one smoke case", "count"),
    "device_ms": Metric("device time of the GPU's search call", "ms"),
    "load_s": Metric("seconds to load the index file (verified or trusted)", "s"),
    "searcher_s": Metric("seconds to set up GpuSearcher (the upload included)", "s"),
    "gb_per_s": Metric("the upload's host-to-device copy bandwidth, or a verified load's file bytes per second",
                       "GB/s"),
    "bytes_per_keyword": Metric("index bytes per keyword without the id map", "B"),
    "seconds": Metric("best wall seconds of a verified load; seconds of a kernel's compile or cached load, "
                      "or of one step of the query-pass suite", "s"),
    "cpu_seconds": Metric("least CPU seconds of a verified load; CPU seconds of one step of the query-pass suite",
                          "s"),
    "gb_per_cpu_s": Metric("file gigabytes per CPU-second of a verified load", "GB/s"),
    "from_cache": Metric("whether the kernel came from the kernel cache", "bool"),
    "resources": Metric("the compiler's registers and spills of each kernel", "text"),
    "upload_GBps": Metric("host-to-device GB/s of the library pass's upload", "GB/s"),
    "value": Metric("one measurement of the lazy numpy reference, its unit in its name", "as named"),
    "build_s": Metric("seconds of the GPU builder's build (its stages in the record's ``stages``)", "s"),
    "num_nodes": Metric("nodes of the built trie", "count"),
    "build_peak_above_input": Metric("the build's peak resident bytes above the input's", "B"),
    "index_array_bytes": Metric("bytes of the built index's arrays", "B"),
    "upload_staged_gbps_1": Metric("host-to-device GB/s through the pinned staging ring (second run)", "GB/s"),
    "download_staged_fresh_gbps_1": Metric("device-to-host GB/s through the pinned staging ring (second run)",
                                           "GB/s"),
    "equal": Metric("the CPU and GPU builders' indexes equal array for array", "bool"),
    "device_us": Metric("device microseconds per call from CUDA-graph replays (a floor or a stepper's kernel)", "us"),
    "median_us": Metric("median host microseconds of one part of a fused step", "us"),
    "p90_us": Metric("90th percentile host microseconds of one part of a fused step", "us"),
}

SUITE = register(Suite(name="probes", title="GPU machine checks", owns=_owns, sections=sections,
                       figures=no_figures, metrics=METRICS))
