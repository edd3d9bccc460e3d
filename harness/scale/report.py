"""``report.md`` of the scale pipeline's records, from the records only.

    flashtrie report RECORDS... -o reports/h200-800m   (or: flashtrie bench scale-step render ...)

Sections: provenance (records, runs, dates, commit, commands), environment, the targets of the `targets.toml`
beside the report or its records (`targets`; each with the
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
from pathlib import Path
from typing import Any

from flashtrie.harness.markdown import command_text, fmt, table
from flashtrie.harness.records import Record
from flashtrie.harness.suites import Metric, Page, Suite, register

from .plots import CURVE_NAME, curve_plot, curve_series, process_of, size_of, stage_plot
from .targets import FILE, find_stage, find_targets, load_targets, size_text, target_rows

__all__ = ["SUITE", "sections", "figures"]

GB = 1e9


def stage_records(records: Sequence[Record]) -> list[Record]:
    return [r for r in records if r.sweep == "scale" and r.kind == "build"]


def latency_records(records: Sequence[Record]) -> list[Record]:
    return [r for r in records if r.kind == "latency"]


def map_bytes(r: Record) -> int:
    """Bytes of the keyword-id map among a save record's arrays (``keyword_ids.*``)."""
    return sum(int(v) for k, v in (r.metrics.get("array_bytes") or {}).items() if k.startswith("keyword_ids"))


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
        lines += [f"## Stages at {size_text(n)} keywords ({n:,})", ""]
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
        lines += [f"## Search latency at {size_text(n)} keywords (K = beam; host arrays in and out)", ""]
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
    head = ["backend", "beam", *[f"{size_text(n)}: mean / p99 ms" for n in sizes]]
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
    return ([f"## Search at {size_text(top)} keywords: p50 / p99 per beam and batch (per call, host arrays in and "
             "out)", ""] + table(head, rows) + [""])


def _by_size(records: Sequence[Record], stage: str) -> list[Record]:
    """The records of one stage, smallest library first."""
    return sorted((r for r in stage_records(records) if r.config.get("stage") == stage), key=lambda r: size_of(r) or 0)


def _failed_row(r: Record, blanks: int) -> list:
    """A table row for a stage that did not end ok: its size, ``blanks`` empty cells, its status."""
    return [size_text(size_of(r)), *[None] * blanks, f"{r.status}: {r.message}"]


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
        rows.append([size_text(size_of(r)), m.get("index_bytes"), m.get("copy_bytes"), m.get("copy_seconds"),
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
        rows.append([size_text(n), m.get("numpy_decode", rm.get("decode")), rm.get("seconds"),
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
        rows.append([size_text(size_of(r)), u, per(m["ours_no_map_bytes"]), per(m["marisa_bytes"]),
                     f"{m['ours_no_map_bytes'] / m['marisa_bytes']:.3f}", per(m["ours_bytes"]), per(theirs_map),
                     f"{m['ours_bytes'] / theirs_map:.3f}", "ok"])
    head = ["N", "distinct keywords", "ours, no map", "marisa-trie, no map", "ratio, no map", "ours, with map",
            "marisa-trie + map", "ratio, with map", "status"]
    return lines + table(head, rows) + [
        "", "Bytes of the files (per distinct keyword). Ours without a map: built with `ids=\"index\"` (ids are the "
        "index order); with one: the saved index (`ids=\"input\"`, its map in as few bits as the ids need). "
        "marisa-trie: a default `BinaryTrie` of the keywords as 4-byte big-endian token keys; its map: key id "
        "-> input id at ceil(log2 N) bits, packed (not stored by marisa, counted). Ratio: ours / marisa-trie's.", ""]


def _targets(records: Sequence[Record], page: Page) -> list[str]:
    """The targets of the ``targets.toml`` beside the report or its records (`targets`), judged."""
    path = find_targets(page.out_dir, page.sources)
    if path is None:
        return ["## Targets", "", f"No `{FILE}` beside this report or its records: no verdicts.", ""]
    beside = "report" if path.parent == Path(page.out_dir) else "records"
    lines = ["## Targets", "", f"From the `{FILE}` beside the {beside}.", ""]
    lines += table(["target", "measured", "verdict", "note"], target_rows(records, load_targets(path)))
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
    lines += _provenance(records, page.sources, page.commit) + _environment(records) + _targets(records, page)
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
