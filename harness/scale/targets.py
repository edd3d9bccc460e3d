"""The scale report's acceptance targets: data in a ``targets.toml`` kept beside the report it judges (or
beside its records), read here; the measures (what each target reads from the records) are code.

    n = 800_000_000                     # the library size the targets judge
    [[target]]
    measure = "build"                   # one of MEASURES
    limit = 60.0
    at_most = true                      # met when the value is at most the limit (false: at least)
    memory_gb = 64                      # build: the build's peak host memory must stay within this too
    [[target]]
    measure = "search_p99"
    limit = 1.0
    beam = 1000                         # search_p99: the case judged
    batch = 1

Each target's row says what was measured (or "not measured in this run", with the nearest size's number as a
note) and met / missed / not measured.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flashtrie.harness.markdown import fmt
from flashtrie.harness.records import Record

from flashtrie.errors import InputError

from .plots import size_of

__all__ = ["FILE", "MEASURES", "NOT_MEASURED", "Target", "find_latency", "find_stage", "find_targets", "load_targets",
           "size_text", "target_rows", "verdict"]

FILE = "targets.toml"
NOT_MEASURED = "not measured in this run"
GB = 1e9

Measured = tuple[float | None, str, str]  # (value or None, what was measured, a note)


@dataclass(frozen=True)
class Target:
    """One acceptance target: a measure of the records, its limit and direction, at library size ``n``."""

    measure: str
    limit: float
    at_most: bool
    n: int
    options: dict[str, Any] = field(default_factory=dict)  # memory_gb (build), beam and batch (search_p99)

    @property
    def name(self) -> str:
        return MEASURES[self.measure][0](self)


def size_text(n: int | None) -> str:
    """A library size as the report writes it: 800M, 1G, 12,345."""
    if n is None:
        return "?"
    for unit, word in ((10**9, "G"), (10**6, "M"), (10**3, "k")):
        if n >= unit and n % (unit // 10) == 0:
            return f"{n / unit:g}{word}"
    return f"{n:,}"


def _last_at(hits: list[Record], n: int | None) -> Record | None:
    """The last of ``hits`` at size ``n`` (None: at the largest size among them)."""
    if n is None:
        n = max((size_of(r) or 0 for r in hits), default=None)
    at = [r for r in hits if size_of(r) == n]
    return at[-1] if at else None


def find_stage(records: Sequence[Record], stage: str, n: int | None) -> Record | None:
    """The last record of ``stage`` at size ``n`` (None: at the largest size that has one)."""
    return _last_at([r for r in records if r.sweep == "scale" and r.kind == "build"
                     and r.config.get("stage") == stage], n)


def find_latency(records: Sequence[Record], beam: int, batch: int, n: int | None) -> Record | None:
    return _last_at([r for r in records if r.kind == "latency" and r.config.get("beam_width") == beam
                     and r.config.get("batch_size", 1) == batch], n)


def _stage(stage: str, metric: str, unit: str, anywhere: bool = False
           ) -> Callable[[Sequence[Record], Target], Measured]:
    def measure(records: Sequence[Record], t: Target) -> Measured:
        r = find_stage(records, stage, None if anywhere else t.n)
        if r is None:
            other = find_stage(records, stage, None)
            note = (f"at {size_text(size_of(other))}: {fmt(other.metrics.get(metric))} {unit}"
                    if other is not None and other.status == "ok" else "")
            return None, NOT_MEASURED, note
        if r.status == "skipped":
            return None, NOT_MEASURED, f"{r.status}: {r.message}"
        if r.status != "ok":
            return None, f"{r.status}: {r.message}", ""
        v = r.metrics.get(metric)
        return (float(v) if v is not None else None), f"{fmt(v)} {unit} at {size_text(size_of(r))}", ""
    return measure


def _build(records: Sequence[Record], t: Target) -> Measured:
    v, text, note = _stage("build", "seconds", "s")(records, t)
    r = find_stage(records, "build", t.n)
    if v is not None and r is not None:
        text += f", peak host RSS {r.metrics['peak_rss_bytes'] / GB:.1f} GB ({r.backend} builder)"
    return v, text, note


def _build_memory_ok(records: Sequence[Record], t: Target) -> bool:
    r = find_stage(records, "build", t.n)
    limit = float(t.options.get("memory_gb", float("inf"))) * GB
    return r is not None and r.metrics.get("peak_rss_bytes", float("inf")) <= limit


def _upload(records: Sequence[Record], t: Target) -> Measured:
    """The index upload's own seconds (``upload_seconds``: without the kernel's compile or cache load), else the
    whole `GpuSearcher` construction."""
    stage = "upload (GpuSearcher)"
    r = find_stage(records, stage, t.n)
    either = r if r is not None else find_stage(records, stage, None)
    metric = "upload_seconds" if either is not None and "upload_seconds" in either.metrics else "seconds"
    v, text, note = _stage(stage, metric, "s")(records, t)
    if v is not None and r is not None:
        bw = r.metrics.get("copy_gb_per_s", r.metrics.get("h2d_gb_per_s"))
        text += (f" ({'the upload' if metric == 'upload_seconds' else 'GpuSearcher construction'}"
                 + (f", {fmt(bw)} GB/s host to device" if bw else "") + ")")
    return v, text, note


def _index_size(records: Sequence[Record], t: Target) -> Measured:
    r = find_stage(records, "save index", t.n)
    if r is None or r.status != "ok":
        return None, NOT_MEASURED, ""
    arrays = r.metrics.get("array_bytes") or {}
    n, total = size_of(r) or 0, int(r.metrics["bytes"])
    ids = sum(int(v) for k, v in arrays.items() if k.startswith("keyword_ids"))
    v = (total - ids) / n
    b = find_stage(records, "build", t.n)
    uniq = b.metrics.get("num_unique") if b is not None else None
    per_unique = f", {(total - ids) / uniq:.2f} per distinct keyword" if uniq else ""
    return v, (f"{v:.2f} B per input keyword at {size_text(n)}: file {total:,} bytes less the map's {ids:,}"
               f"{per_unique}"), ""


def _search_p99(records: Sequence[Record], t: Target) -> Measured:
    beam, batch = int(t.options.get("beam", 1000)), int(t.options.get("batch", 1))
    r = find_latency(records, beam, batch, t.n)
    if r is None:
        other = find_latency(records, beam, batch, None)
        note = ""
        if other is not None and other.status == "ok":
            dev = other.metrics.get("device_p99_ms")
            note = (f"at {size_text(size_of(other))}: p99 {other.metrics['p99_ms']:.3f} ms ({other.backend}"
                    + (f", device {dev:.3f}" if isinstance(dev, (int, float)) else "") + ")")
        return None, NOT_MEASURED, note
    if r.status == "skipped":
        return None, NOT_MEASURED, f"{r.status}: {r.message}"
    if r.status != "ok":
        return None, f"{r.status}: {r.message}", ""
    v = float(r.metrics["p99_ms"])
    return v, f"p99 {v:.3f} ms at {size_text(size_of(r))}", ""


def _le(t: Target) -> str:
    return "≤" if t.at_most else "≥"


#: measure -> (the target's name, what it reads from the records, a further condition or None)
MEASURES: dict[str, tuple[Callable[[Target], str], Callable[[Sequence[Record], Target], Measured],
                          Callable[[Sequence[Record], Target], bool] | None]] = {
    "build": (lambda t: f"build {_le(t)} {t.limit:g} s at {size_text(t.n)}"
              + (f" within {t.options['memory_gb']:g} GB of host memory" if "memory_gb" in t.options else ""),
              _build, _build_memory_ok),
    "index_size": (lambda t: f"index {_le(t)} {t.limit:g} B/keyword at {size_text(t.n)} without the map",
                   _index_size, None),
    "load_gbps": (lambda t: f"load with verification {_le(t)} {t.limit:g} GB/s",
                  _stage("load index (verify)", "gb_per_s", "GB/s", anywhere=True), None),
    "upload": (lambda t: f"upload (GpuSearcher) {_le(t)} {t.limit:g} s at {size_text(t.n)}", _upload, None),
    "queries": (lambda t: f"16 dense queries {_le(t)} {t.limit:g} s at {size_text(t.n)}",
                _stage("generate 16 queries", "seconds", "s"), None),
    "keywords": (lambda t: f"keyword generator {_le(t)} {t.limit:g} s at {size_text(t.n)}",
                 _stage("generate keywords", "seconds", "s"), None),
    "search_p99": (lambda t: f"search p99 {_le(t)} {t.limit:g} ms at beam {t.options.get('beam', 1000)}, batch "
                             f"{t.options.get('batch', 1)}, {size_text(t.n)}", _search_p99, None),
}


def load_targets(path: Path) -> list[Target]:
    """The targets of a ``targets.toml``; `InputError` naming the file and the entry when one is malformed."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise InputError(f"{path}: not a readable targets file ({e})") from e
    n = data.get("n")
    if not isinstance(n, int) or n < 1:
        raise InputError(f"{path}: n = {n!r}: expected the library size the targets judge (a positive integer)")
    out = []
    for i, raw in enumerate(data.get("target", [])):
        m, limit, at_most = raw.get("measure"), raw.get("limit"), raw.get("at_most", True)
        if m not in MEASURES or not isinstance(limit, (int, float)) or not isinstance(at_most, bool):
            raise InputError(f"{path}: target {i}: measure {m!r}, limit {limit!r}, at_most {at_most!r}; expected a "
                             f"measure of {', '.join(MEASURES)}, a number and true or false")
        options = {k: v for k, v in raw.items() if k not in ("measure", "limit", "at_most", "n")}
        out.append(Target(m, float(limit), at_most, int(raw.get("n", n)), options))
    return out


def find_targets(out_dir: Path, sources: Sequence[str]) -> Path | None:
    """The ``targets.toml`` beside the report (``out_dir``), else beside its records or one folder up."""
    where = [Path(out_dir)] + [d for s in sources for d in (Path(s).parent, Path(s).parent.parent)]
    return next((d / FILE for d in where if (d / FILE).is_file()), None)


def verdict(t: Target, records: Sequence[Record]) -> tuple[str, str, str]:
    """(measured, verdict, note) of one target: verdict "met", "missed" or "not measured"."""
    _, measure, second = MEASURES[t.measure]
    v, text, note = measure(records, t)
    if v is None:
        return text, ("missed" if text != NOT_MEASURED else "not measured"), note
    ok = v <= t.limit if t.at_most else v >= t.limit
    if second is not None:
        ok = ok and second(records, t)
    return text, "met" if ok else "missed", note


def target_rows(records: Sequence[Record], targets: Sequence[Target]) -> list[list[str]]:
    return [[t.name, *verdict(t, records)] for t in targets]
