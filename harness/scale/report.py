"""``report.md`` of the scale pipeline's records, from the records only.

    flashtrie report RECORDS... -o reports/h200-800m   (or: flashtrie bench scale-step render ...)

Sections: provenance (records, runs, dates, commit, commands), environment, the targets (each with the
number measured in these records, or "not measured in this run", and met / missed / not measured), the
latency-versus-library-size figure and its numbers, p50 / p99 at the largest size per beam and batch, the
upload's host-to-device bandwidth, GPU == numpy per size (the numpy reference's decode mode and set-up), our
index against marisa-trie's with and without the id maps, then one stage table per library size (the build's
sub-stages, the query generator's and the verified load's seconds per step, the index's bytes per array) and
every latency record.
``--commit`` names the commit by hand where the records' ``env.git`` is wrong (a copied tree run without
``FLASHTRIE_COMMIT``); the report says it was given by hand and what the records say.  Figures
(`scale_plots`): latency vs size, and the stage times at the largest size.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashtrie.harness.markdown import command_text, fmt, table
from flashtrie.harness.records import Record
from flashtrie.harness.suites import Metric, Page, Suite, register

from .plots import CURVE_NAME, curve_plot, curve_series, process_of, size_of, stage_plot

__all__ = ["BARS", "Bar", "bar_rows", "SUITE", "sections", "figures"]

PAPER_N = 800_000_000
GB = 1e9
NOT_MEASURED = "not measured in this run"


def _n_text(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, word in ((10**9, "G"), (10**6, "M"), (10**3, "k")):
        if n >= unit and n % (unit // 10) == 0:
            return f"{n / unit:g}{word}"
    return f"{n:,}"


def stage_records(records: Sequence[Record]) -> list[Record]:
    return [r for r in records if r.sweep == "scale" and r.kind == "build"]


def latency_records(records: Sequence[Record]) -> list[Record]:
    return [r for r in records if r.kind == "latency"]


def find_stage(records: Sequence[Record], stage: str, n: int | None = PAPER_N) -> Record | None:
    """The last record of ``stage`` at size ``n`` (None: at the largest size that has one)."""
    return _last_at([r for r in stage_records(records) if r.config.get("stage") == stage], n)


def find_latency(records: Sequence[Record], beam: int, batch: int, n: int | None = PAPER_N) -> Record | None:
    return _last_at([r for r in latency_records(records)
                     if r.config.get("beam_width") == beam and r.config.get("batch_size", 1) == batch], n)


def _last_at(hits: list[Record], n: int | None) -> Record | None:
    """The last of ``hits`` at size ``n`` (None: at the largest size among them)."""
    if n is None:
        n = max((size_of(r) or 0 for r in hits), default=None)
    at = [r for r in hits if size_of(r) == n]
    return at[-1] if at else None


def map_bytes(r: Record) -> int:
    """Bytes of the keyword-id map among a save record's arrays (``keyword_ids.*``)."""
    return sum(int(v) for k, v in (r.metrics.get("array_bytes") or {}).items() if k.startswith("keyword_ids"))


@dataclass(frozen=True)
class Bar:
    """One of the targets: ``measure`` gives (value or None, what was measured, a note)."""

    name: str
    limit: float
    at_most: bool
    measure: Callable[[Sequence[Record]], tuple[float | None, str, str]]
    second: Callable[[Sequence[Record]], bool] | None = None  # a further condition (the build's memory)


def _stage_measure(stage: str, metric: str, unit: str, n: int | None = PAPER_N
                   ) -> Callable[[Sequence[Record]], tuple[float | None, str, str]]:
    def measure(records: Sequence[Record]) -> tuple[float | None, str, str]:
        r = find_stage(records, stage, n)
        if r is None:
            other = find_stage(records, stage, None)
            note = (f"at {_n_text(size_of(other))}: {fmt(other.metrics.get(metric))} {unit}"
                    if other is not None and other.status == "ok" else "")
            return None, NOT_MEASURED, note
        if r.status == "skipped":
            return None, NOT_MEASURED, f"{r.status}: {r.message}"
        if r.status != "ok":
            return None, f"{r.status}: {r.message}", ""
        v = r.metrics.get(metric)
        return (float(v) if v is not None else None), f"{fmt(v)} {unit} at {_n_text(size_of(r))}", ""
    return measure


def _build_measure(records: Sequence[Record]) -> tuple[float | None, str, str]:
    v, text, note = _stage_measure("build", "seconds", "s")(records)
    r = find_stage(records, "build")
    if v is not None and r is not None:
        text += f", peak host RSS {r.metrics['peak_rss_bytes'] / GB:.1f} GB ({r.backend} builder)"
    return v, text, note


def _upload_measure(records: Sequence[Record]) -> tuple[float | None, str, str]:
    """The index upload's own seconds (``upload_seconds``: without the kernel's compile or cache load),
    else the whole `GpuSearcher` construction."""
    r = find_stage(records, "upload (GpuSearcher)")
    either = r if r is not None else find_stage(records, "upload (GpuSearcher)", None)
    metric = "upload_seconds" if either is not None and "upload_seconds" in either.metrics else "seconds"
    v, text, note = _stage_measure("upload (GpuSearcher)", metric, "s")(records)
    if v is not None and r is not None:
        bw = r.metrics.get("copy_gb_per_s", r.metrics.get("h2d_gb_per_s"))
        text += (f" ({'the upload' if metric == 'upload_seconds' else 'GpuSearcher construction'}"
                 + (f", {fmt(bw)} GB/s host to device" if bw else "") + ")")
    return v, text, note


def _build_memory_ok(records: Sequence[Record]) -> bool:
    r = find_stage(records, "build")
    return r is not None and r.metrics.get("peak_rss_bytes", float("inf")) <= 64 * GB


def _size_measure(records: Sequence[Record]) -> tuple[float | None, str, str]:
    r = find_stage(records, "save index")
    if r is None or r.status != "ok":
        return None, NOT_MEASURED, ""
    n, total, ids = size_of(r) or 0, int(r.metrics["bytes"]), map_bytes(r)
    v = (total - ids) / n
    b = find_stage(records, "build")
    uniq = b.metrics.get("num_unique") if b is not None else None
    per_unique = f", {(total - ids) / uniq:.2f} per distinct keyword" if uniq else ""
    return v, (f"{v:.2f} B per input keyword at {_n_text(n)}: file {total:,} bytes less the map's {ids:,}"
               f"{per_unique}"), ""


def _search_measure(records: Sequence[Record]) -> tuple[float | None, str, str]:
    r = find_latency(records, 1000, 1)
    if r is None:
        other = find_latency(records, 1000, 1, None)
        note = ""
        if other is not None and other.status == "ok":
            dev = other.metrics.get("device_p99_ms")
            note = (f"at {_n_text(size_of(other))}: p99 {other.metrics['p99_ms']:.3f} ms ({other.backend}"
                    + (f", device {dev:.3f}" if isinstance(dev, (int, float)) else "") + ")")
        return None, NOT_MEASURED, note
    if r.status == "skipped":
        return None, NOT_MEASURED, f"{r.status}: {r.message}"
    if r.status != "ok":
        return None, f"{r.status}: {r.message}", ""
    v = float(r.metrics["p99_ms"])
    return v, f"p99 {v:.3f} ms at {_n_text(size_of(r))}", ""


BARS: tuple[Bar, ...] = (
    Bar("build ≤ 60 s at 800M within 64 GB of host memory", 60.0, True, _build_measure, _build_memory_ok),
    Bar("index ≤ 3.2 B/keyword at 800M without the map", 3.2, True, _size_measure),
    Bar("load with verification ≥ 2 GB/s", 2.0, False, _stage_measure("load index (verify)", "gb_per_s", "GB/s",
                                                                   None)),
    Bar("upload (GpuSearcher) ≤ 3 s at 800M", 3.0, True, _upload_measure),
    Bar("16 dense queries ≤ 30 s at 800M", 30.0, True, _stage_measure("generate 16 queries", "seconds", "s")),
    Bar("keyword generator ≤ 120 s at 800M", 120.0, True, _stage_measure("generate keywords", "seconds", "s")),
    Bar("search p99 ≤ 1.0 ms at beam 1000, batch 1, 800M", 1.0, True, _search_measure),
)


def verdict(bar: Bar, records: Sequence[Record]) -> tuple[str, str, str]:
    """(measured, verdict, note) of one bar: verdict "met", "missed" or "not measured"."""
    v, text, note = bar.measure(records)
    if v is None:
        return text, ("missed" if text != NOT_MEASURED else "not measured"), note
    ok = v <= bar.limit if bar.at_most else v >= bar.limit
    if bar.second is not None:
        ok = ok and bar.second(records)
    return text, "met" if ok else "missed", note


def bar_rows(records: Sequence[Record]) -> list[list[str]]:
    return [[b.name, *verdict(b, records)] for b in BARS]


def _provenance(records: Sequence[Record], sources: Sequence[str], commit: str | None) -> list[str]:
    commits = sorted({str((r.env.get("git") or {}).get("commit")) for r in records if r.env})
    stamps = sorted(r.timestamp for r in records if r.timestamp)
    runs = sorted({r.run_id for r in records if r.run_id})
    said = ", ".join(f"`{c[:12]}`" for c in commits) or "none"
    given = (f"`{commit}` (given by hand on the command line: `--commit {commit}`); the records' `env.git` says "
             f"{said}" if commit else f"{said} (from the records' `env.git`)")
    lines = ["## Provenance", ""]
    rows: list[list[Any]] = [["records", ", ".join(f"`{s}`" for s in sources)], ["records read", len(records)],
            ["runs (run ids)", ", ".join(runs)],
            ["recorded", f"{stamps[0]} – {stamps[-1]}" if stamps else None], ["commit", given]]
    lines += table(["", "value"], rows)
    shells = list(dict.fromkeys(str(r.env["scale_command"]) for r in records if r.env.get("scale_command")))
    if shells:
        lines += ["", "The pipeline's command, as it recorded itself:", "", "```", *shells, "```"]
    cmds = list(dict.fromkeys(command_text(r.command) for r in records if r.command))
    lines += ["", "Commands, as the records hold them (in order):", "", "```"] + cmds + ["```", ""]
    return lines


def _environment(records: Sequence[Record]) -> list[str]:
    envs = list({r.env.get("hostname", "") + str(r.env.get("gpus")): r.env for r in records if r.env}.values())
    lines = ["## Environment", ""]
    if not envs:
        return lines + ["The records carry no environment snapshot.", ""]
    for env in envs:
        gpus = "; ".join(f"{g.get('name')} ({g.get('memory_bytes', 0) / 2**30:.0f} GiB, {g.get('multiprocessors')} "
                         f"SMs, cc {g.get('compute_capability')})" for g in env.get("gpus") or []) or "none"
        drivers = "; ".join(f"{g.get('driver_release')} (CUDA driver API {g.get('driver')})"
                            for g in env.get("gpus") or []) or "–"
        ram = env.get("ram_bytes")
        rows: list[list[Any]] = [
            ["GPU", gpus], ["driver", drivers], ["CPU", f"{env.get('cpu')}, {env.get('cpu_cores')} cores"],
            ["RAM", f"{ram / 2**30:.1f} GiB" if isinstance(ram, (int, float)) else None],
            ["OS", env.get("os")], ["Python", env.get("python")],
            ["packages", ", ".join(f"{k} {v}" for k, v in (env.get("packages") or {}).items() if v)]]
        lines += table(["", "value"], rows) + [""]
    return lines


def _stage_tables(records: Sequence[Record]) -> list[str]:
    recs = stage_records(records)
    lines: list[str] = []
    for n in sorted({s for s in map(size_of, recs) if s is not None}):
        lines += [f"## Stages at {_n_text(n)} keywords ({n:,})", ""]
        rows = []
        for r in (r for r in recs if size_of(r) == n):
            m = r.metrics
            nb = m.get("bytes")
            scope = "" if m.get("rss_scope") == "stage" else " *"
            rows.append([r.config.get("stage", "?"), process_of(r), r.backend, m.get("seconds"),
                         f"{m['peak_rss_bytes'] / GB:.1f}{scope}" if m.get("peak_rss_bytes") and r.status != "skipped"
                         else None,
                         f"{nb / GB:.2f}" if nb else None, m.get("gb_per_s"),
                         r.status + (f": {r.message}" if r.message else "")])
        head = ["stage", "process", "backend", "seconds", "peak RSS GB", "bytes GB", "GB/s", "status"]
        lines += table(head, rows) + [""]
        if any(r.metrics.get("rss_scope") != "stage" for r in recs if size_of(r) == n):
            lines += ["Peak RSS: the stage's own (the high-water mark reset as it starts); * the process's peak so "
                      "far (no reset possible, or a record written outside a stage).", ""]
        lines += _substages(recs, n) + _query_split(recs, n) + _load_split(recs, n) + _array_bytes(recs, n)
    return lines


def _substages(recs: Sequence[Record], n: int) -> list[str]:
    builds = [r for r in recs if size_of(r) == n and r.config.get("stage") == "build" and r.metrics.get("stages")]
    if not builds:
        return []
    b = builds[-1]
    total = float(b.metrics["seconds"])
    rows = [[name, sec, f"{100 * sec / total:.0f} %" if total > 0 else None] for name, sec in b.metrics["stages"]]
    head = (f"Build sub-stages ({b.backend} builder; {b.metrics.get('num_unique', 0):,} distinct keywords, "
            f"{b.metrics.get('num_nodes', 0):,} nodes):")
    return [head, ""] + table(["sub-stage", "seconds", "of the build"], rows) + [""]


def _split(recs: Sequence[Record], n: int, pick: Callable[[str], bool], title: str, step: str) -> list[str]:
    """The seconds per step (``split``) of the last record at ``n`` whose stage ``pick`` accepts."""
    hits = [r for r in recs if size_of(r) == n and pick(str(r.config.get("stage", "")))
            and isinstance(r.metrics.get("split"), dict)]
    if not hits or not hits[-1].metrics["split"]:
        return []
    g = hits[-1]
    total = float(g.metrics["seconds"])
    rows = [[name, sec, f"{100 * float(sec) / total:.0f} %" if total > 0 else None]
            for name, sec in g.metrics["split"].items()]
    return [f"{title} ({g.config['stage']}):", ""] + table([step, "seconds", "of the stage"], rows) + [""]


def _query_split(recs: Sequence[Record], n: int) -> list[str]:
    """The query generator's seconds per step (``split``, where the generator reports them)."""
    return _split(recs, n, lambda st: st.startswith("generate ") and "queries" in st, "Query generation by step",
                  "step")


def _load_split(recs: Sequence[Record], n: int) -> list[str]:
    """The verified load's seconds per check (`NarrowLoudsIndex.load`'s ``timings``)."""
    return _split(recs, n, lambda st: st == "load index (verify)", "Verified load by check", "check")


def _array_bytes(recs: Sequence[Record], n: int) -> list[str]:
    saves = [r for r in recs if size_of(r) == n and r.metrics.get("array_bytes")]
    if not saves:
        return []
    arrays = saves[-1].metrics["array_bytes"]
    rows = [[k, int(v), f"{int(v) / n:.3f}"] for k, v in sorted(arrays.items(), key=lambda kv: -int(kv[1]))]
    rows.append(["**file**", int(saves[-1].metrics["bytes"]), f"{int(saves[-1].metrics['bytes']) / n:.3f}"])
    return ["Index bytes per array (per input keyword):", ""] + table(["array", "bytes", "B/keyword"], rows) + [""]


def _latency_tables(records: Sequence[Record]) -> list[str]:
    recs = latency_records(records)
    lines: list[str] = []
    for n in sorted({s for s in map(size_of, recs) if s is not None}):
        lines += [f"## Search latency at {_n_text(n)} keywords (K = beam; host arrays in and out)", ""]
        rows = []
        for r in sorted((r for r in recs if size_of(r) == n),
                        key=lambda r: (r.backend, r.config.get("batch_size", 1), r.config.get("beam_width", 0))):
            m = r.metrics
            rows.append([r.backend, r.config.get("beam_width"), r.config.get("batch_size", 1), m.get("median_ms"),
                         m.get("mean_ms"), m.get("per_query_ms"), m.get("p99_ms"), m.get("device_mean_ms"),
                         m.get("device_p99_ms"), m.get("samples"), r.status + (f": {r.message}" if r.message else "")])
        lines += table(["backend", "beam", "batch", "p50 ms", "mean ms (call)", "per query ms", "p99 ms",
                         "device mean ms", "device p99 ms", "samples", "status"], rows) + [""]
    return lines


def _curve(records: Sequence[Record], fig: Path | None) -> list[str]:
    """The latency-vs-size figure and its numbers: mean / p99 ms per call at batch 1, per backend and beam."""
    means, p99s = curve_series(records, "mean_ms"), curve_series(records, "p99_ms")
    lines = ["## Latency vs library size (batch 1, K = beam)", ""]
    if not p99s:
        return lines + ["No latency record is ok in these records.", ""]
    if fig is not None:
        lines += [f"![latency vs library size]({fig.name})", "",
                  "The GPU at every beam width (solid), numpy (dashed) and marisa-trie (dotted) where measured.", ""]
    sizes = sorted({n for pts in p99s.values() for n, _ in pts})
    rows = []
    for key, pts in p99s.items():
        mean, p99 = dict(means.get(key, [])), dict(pts)
        rows.append([key[0], key[1], *[f"{fmt(mean.get(n))} / {fmt(p99[n])}" if n in p99 else None
                                       for n in sizes]])
    head = ["backend", "beam", *[f"{_n_text(n)}: mean / p99 ms" for n in sizes]]
    return lines + table(head, rows) + [""]


def _largest(records: Sequence[Record]) -> list[str]:
    """p50 / mean / p99 per backend, beam and batch at the largest size with latency records."""
    recs = latency_records(records)
    top = max((size_of(r) or 0 for r in recs), default=0)
    at = sorted((r for r in recs if size_of(r) == top), key=lambda r: (
        r.backend != "gpu", r.backend, r.config.get("batch_size", 1), r.config.get("beam_width", 0)))
    if not at:
        return []
    rows = [[r.backend, r.config.get("beam_width"), r.config.get("batch_size", 1), r.metrics.get("median_ms"),
             r.metrics.get("mean_ms"), r.metrics.get("p99_ms"), r.metrics.get("device_median_ms"),
             r.metrics.get("device_p99_ms"), r.metrics.get("samples"), r.status] for r in at]
    head = ["backend", "beam", "batch", "p50 ms", "mean ms", "p99 ms", "device p50 ms", "device p99 ms", "samples",
            "status"]
    return ([f"## Search at {_n_text(top)} keywords: p50 / p99 per beam and batch (per call, host arrays in and "
             "out)", ""] + table(head, rows) + [""])


def _by_size(records: Sequence[Record], stage: str) -> list[Record]:
    """The records of one stage, smallest library first."""
    return sorted((r for r in stage_records(records) if r.config.get("stage") == stage), key=lambda r: size_of(r) or 0)


def _failed_row(r: Record, blanks: int) -> list:
    """A table row for a stage that did not end ok: its size, ``blanks`` empty cells, its status."""
    return [_n_text(size_of(r)), *[None] * blanks, f"{r.status}: {r.message}"]


def _upload(records: Sequence[Record]) -> list[str]:
    """The index uploads: bytes, seconds and the host-to-device bandwidth, per size."""
    ups = _by_size(records, "upload (GpuSearcher)")
    lines = ["## Upload (GpuSearcher): host-to-device bandwidth", ""]
    if not ups:
        return lines + ["No upload in these records.", ""]
    rows = []
    for r in ups:
        m = r.metrics
        if r.status != "ok":
            rows.append(_failed_row(r, 7))
            continue
        bw = m.get("copy_gb_per_s", m.get("h2d_gb_per_s"))
        rows.append([_n_text(size_of(r)), m.get("index_bytes"), m.get("copy_bytes"), m.get("copy_seconds"),
                     f"{fmt(bw)}" + ("" if "copy_gb_per_s" in m else " (whole upload)") if bw else None,
                     m.get("derive_flags_seconds"), m.get("upload_seconds"), m.get("seconds"), "ok"])
    head = ["N", "device bytes", "bytes copied", "copy s", "H2D GB/s", "flags on device s", "upload s",
            "GpuSearcher() s", "status"]
    return lines + table(head, rows) + ["", "`GpuSearcher() s` includes loading the kernel (compiled or cached); "
                                         "`upload s` is the index's upload alone.", ""]


def _checks(records: Sequence[Record]) -> list[str]:
    """GPU == numpy per size: the numpy reference's decode mode and set-up, each side's search seconds."""
    checks = _by_size(records, "GPU == numpy")
    lines = ["## GPU == numpy (bit for bit, the numpy reference)", ""]
    if not checks:
        return lines + ["No check in these records.", ""]
    rows = []
    for r in checks:
        n, m = size_of(r), r.metrics
        ref = find_stage(records, "numpy searcher", n)
        rm = ref.metrics if ref is not None else {}
        rows.append([_n_text(n), m.get("numpy_decode", rm.get("decode")), rm.get("seconds"),
                     f"{rm['peak_rss_bytes'] / GB:.1f}" if rm.get("peak_rss_bytes") else None, m.get("queries"),
                     ", ".join(str(b) for b in m.get("beams") or []) or None, m.get("gpu_search_seconds"),
                     m.get("numpy_search_seconds"), m.get("seconds"), r.status + (f": {r.message}" if r.message
                                                                                 else "")])
    head = ["N", "numpy decode", "numpy set-up s", "set-up peak RSS GB", "queries", "beams (K = beam)", "GPU search s",
            "numpy search s", "check s", "status"]
    return lines + table(head, rows) + [
        "", "numpy decode: `eager` decodes every node when the searcher is made, `lazy` only the nodes each search "
        "reaches (`NumpySearcher(decode=\"auto\")` picks by the index's size); the results are the same.", ""]


def _marisa_sizes(records: Sequence[Record]) -> list[str]:
    """Our index file against marisa-trie's BinaryTrie of the same keywords, each with and without an id map."""
    recs = _by_size(records, "index size vs marisa-trie")
    lines = ["## Index size vs marisa-trie (the same keywords)", ""]
    if not recs:
        return lines + ["Not measured in these records.", ""]
    rows = []
    for r in recs:
        m = r.metrics
        if r.status != "ok":
            rows.append(_failed_row(r, 7))
            continue
        u = max(int(m["unique_keywords"]), 1)

        def per(b: float, u: int = u) -> str:
            return f"{int(b):,} ({int(b) / u:.2f} B)"

        theirs_map = int(m["marisa_bytes"]) + int(m["marisa_map_bytes"])
        rows.append([_n_text(size_of(r)), u, per(m["ours_no_map_bytes"]), per(m["marisa_bytes"]),
                     f"{m['ours_no_map_bytes'] / m['marisa_bytes']:.3f}", per(m["ours_bytes"]), per(theirs_map),
                     f"{m['ours_bytes'] / theirs_map:.3f}", "ok"])
    head = ["N", "distinct keywords", "ours, no map", "marisa-trie, no map", "ratio, no map", "ours, with map",
            "marisa-trie + map", "ratio, with map", "status"]
    return lines + table(head, rows) + [
        "", "Bytes of the files (per distinct keyword). Ours without a map: built with `ids=\"index\"` (ids are the "
        "index order); with one: the saved index (`ids=\"input\"`, its map in as few bits as the ids need). "
        "marisa-trie: a default `BinaryTrie` of the keywords as 4-byte big-endian token keys; its map: key id "
        "-> input id at ceil(log2 N) bits, packed (not stored by marisa, counted). Ratio: ours / marisa-trie's.", ""]


def _bars(records: Sequence[Record]) -> list[str]:
    lines = ["## Targets", ""]
    lines += table(["target", "measured", "verdict", "note"], bar_rows(records))
    return lines + [""]


def figures(records: list[Record], out_dir: Path) -> dict[str, list[Path]]:
    """The stage times at the largest size and the latency-vs-size curve (where the records have them)."""
    drawn = {}
    stages = stage_plot(records, out_dir)
    if stages:
        drawn["stages"] = stages
    curve = curve_plot(records, out_dir)
    if curve:
        drawn[CURVE_NAME] = curve
    return drawn


def sections(records: list[Record], page: Page) -> list[str]:
    """The scale pipeline's part of a report: provenance, environment, bars, curve, search at the largest
    size, upload, checks, size against marisa-trie, stage tables and latency tables."""
    curve = page.drawn.get(CURVE_NAME)
    stages = page.drawn.get("stages")
    lines = ["Rendered by `flashtrie report` from the records below only.", ""]
    lines += _provenance(records, page.sources, page.commit) + _environment(records) + _bars(records)
    lines += _curve(records, curve[0] if curve else None) + _largest(records) + _upload(records) + _checks(records)
    lines += _marisa_sizes(records) + _stage_tables(records)
    if stages:
        lines += [f"![stage times]({stages[0].name})", ""]
    return lines + _latency_tables(records)


def _owns(r: Record) -> bool:
    """The pipeline's stage records, and every record one of its processes wrote (its beam sweeps)."""
    return r.sweep == "scale" or process_of(r) is not None


#: The scale pipeline's metrics (each stage record's, and the latency records' of its beam sweep).
METRICS = {
    "seconds": Metric("wall-clock seconds of one stage", "s"),
    "peak_rss_bytes": Metric("the process's peak resident memory during the stage (or since its start)", "bytes"),
    "gb_per_s": Metric("bytes of the stage (read, copied or written) per second", "GB/s"),
    "mean_ms": Metric("search latency per call, mean (batch 1 unless stated)", "ms"),
    "p99_ms": Metric("search latency per call, 99th percentile", "ms"),
}

SUITE = register(Suite(name="scale", title="Paper scale on one GPU: stages, search and targets", owns=_owns,
                       sections=sections, figures=figures, metrics=METRICS))
