"""The search suite's report sections (the NAR sweeps of `flashtrie bench`: beam width, batch, library size,
build, quality, parity): status, environment, latency and throughput tables, quality, build vs marisa-trie,
workloads and the commands to reproduce; registered with the report pipeline (`harness/report.py`)."""

from __future__ import annotations

import datetime as _dt
import json
import shlex
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .backends import ORDER
from .env import summary_line
from .markdown import command_text, fmt, table
from .plots import FIGURES, plot_all
from .records import KINDS, Record
from .runs import speedup_text
from .select import bytes_per_unique_keyword, groups_of, latest, workload_group
from .suites import Metric, Page, Suite, register

__all__ = ["SUITE", "sections", "build_sweep"]


def _backend_rank(name: str) -> tuple[int, str]:
    return (ORDER.index(name) if name in ORDER else len(ORDER), name)


def _status_cell(r: Record) -> str:
    if r.status == "ok":
        return "ok"
    return f"**{r.status}**"


def _wstats(r: Record) -> tuple[Any, Any]:
    ws = r.workload_stats or {}
    return ws.get("valid_fraction"), ws.get("mean_beam_fill")


def _workload_line(r: Record, per_size: bool = False) -> str:
    """The workload of ``r`` in words; ``per_size``: the library varies between the rows (size sweep)."""
    w = r.workload
    bits = []
    for k in ("name", "kind", "generator"):
        if k in w and isinstance(w[k], str):
            bits.append(w[k])
    if per_size:
        bits.append("a library and a workload generated for each size")
    elif "num_keywords" in w:
        bits.append(f"{w['num_keywords']:,} keywords")
    if "shape_QTK" in w:
        q, t, k = w["shape_QTK"]
        bits.append(f"Q={q}, T={t}, K={k}")
    return ", ".join(bits) if bits else "unnamed workload"


def _latency_section(recs: list[Record], title: str, x_name: str, x_of: Any) -> list[str]:
    if not recs:
        return []
    lines = [f"## {title}", "", f"Workload: {_workload_line(recs[0], per_size=x_name == 'keywords')}.", ""]
    rows = []
    by_batch = x_name == "batch"  # the x column is the batch size already; show the beam instead
    runs = sorted({r.run_id for r in recs})  # more than one run in a table: say which row is which
    lead = ["run"] if len(runs) > 1 else []
    for r in sorted(recs, key=lambda r: (x_of(r) or 0, r.config.get("batch_size", 1), _backend_rank(r.backend))):
        m = r.metrics
        vf, bf = _wstats(r)
        ci = (f"{fmt(m.get('ci95_low_ms'))}–{fmt(m.get('ci95_high_ms'))}" if "ci95_low_ms" in m else None)
        third = r.config.get("beam_width") if by_batch else r.config.get("batch_size")
        rows.append([*([r.run_id] if lead else []), x_of(r), r.config.get("K"), third, r.backend, m.get("mean_ms"),
                     m.get("median_ms"), m.get("p99_ms"), ci, m.get("device_mean_ms"), m.get("throughput_qps"),
                     speedup_text(m.get("speedup_vs_marisa"), "–"), vf, bf, _status_cell(r)])
    lines += table([*lead, x_name, "K", "beam" if by_batch else "batch", "backend", "mean ms", "median ms", "p99 ms",
                     "95% CI of mean (ms)", "device ms", "q/s", "speed-up vs marisa", "valid proposals",
                     "mean beam fill", "status"], rows)
    lines.append("")
    if lead:
        lines += ["Rows come from more than one run (the `run` column); speed-ups compare backends of the same "
                  "run only.", ""]
    return lines


def _problems(records: list[Record]) -> list[str]:
    bad = [r for r in records if r.status != "ok"]
    if not bad:
        return ["Every measured case returned status `ok`: all backends agreed exactly (ids, order, float32 bits) "
                "with the reference backend of their case.", ""]
    lines = ["Cases that did not return `ok`:", ""]
    rows = [[r.kind, r.sweep, r.backend, r.config.get("beam_width"), r.config.get("batch_size"), r.status,
             (r.message or "")[:300]] for r in bad]
    lines += table(["kind", "sweep", "backend", "beam", "batch", "status", "message"], rows)
    lines.append("")
    return lines


def _environment(records: list[Record]) -> list[str]:
    envs: dict[str, dict[str, Any]] = {}
    for r in records:
        key = json.dumps({k: v for k, v in r.env.items() if k not in ("timestamp", "command")}, sort_keys=True)
        envs.setdefault(key, r.env)
    lines = ["## Environment", ""]
    if not envs or all(not e for e in envs.values()):
        return lines + ["The records carry no environment snapshot.", ""]
    for i, env in enumerate(envs.values(), 1):
        if len(envs) > 1:
            lines += [f"### Environment {i}", ""]
        pk = env.get("packages") or {}
        gpus = env.get("gpus") or []
        git = env.get("git") or {}
        ram = env.get("ram_bytes")
        rows: list[list[Any]] = [
            ["summary", summary_line(env)],
            ["CPU", f"{env.get('cpu')} ({env.get('cpu_cores')} cores)"],
            ["RAM", f"{ram / 2**30:.1f} GiB" if isinstance(ram, (int, float)) else None],
            ["OS", env.get("os")],
            ["Python", env.get("python")],
            ["packages", ", ".join(f"{k} {v}" for k, v in pk.items() if v)],
            ["GPU", "; ".join(f"{g.get('name')} (cc {g.get('compute_capability')}, "
                              f"{g.get('memory_bytes', 0) / 2**30:.0f} GiB, driver {g.get('driver_release') or '?'}, "
                              f"CUDA driver API {g.get('driver')})"
                              for g in gpus) or "none"],
            ["git commit", (f"{git.get('commit')}{' (dirty tree)' if git.get('dirty') else ''}" if git.get("commit")
                            else "unknown (not run from a git checkout)")],
            ["host", env.get("hostname")],
        ]
        lines += table(["", "value"], rows)
        lines.append("")
    return lines


_WORKLOAD_COLUMNS = (("preset", "preset"), ("num_queries", "Q"), ("num_steps", "T"), ("proposals_per_step", "K"),
                     ("seed", "seed"))


def _library_cell(w: dict[str, Any]) -> str:
    kw = w.get("keywords")
    lib: dict[str, Any] = kw if isinstance(kw, dict) else {}
    found = lib.get("generator")
    gen: dict[str, Any] = found if isinstance(found, dict) else lib  # size sweep: params inline
    bits = [str(lib["source"])] if lib.get("source") else []
    if isinstance(lib.get("generator"), str):
        bits.append(f"generated by {lib['generator']}")
    bits += [f"{k} {gen[k]}" for k in ("n", "seed", "vocab_size") if k in gen]
    return ", ".join(bits)


def _other_params(w: dict[str, Any]) -> str:
    skip = {"keywords", "num_keywords", "shape_QTK", "queries", *(k for k, _ in _WORKLOAD_COLUMNS)}
    out = []
    for k, v in sorted(w.items()):
        if k in skip or isinstance(v, dict):
            continue
        out.append(f"{k} = {json.dumps(v) if isinstance(v, list) else v}")
    return "; ".join(out)[:600]


def _workloads(records: list[Record]) -> list[str]:
    """One table row per distinct workload the records name: library, generator parameters, shape."""
    seen: dict[str, dict[str, Any]] = {}
    for r in records:
        w = {k: v for k, v in r.workload.items() if k not in ("K_used", "limit")}
        if w:
            seen.setdefault(json.dumps(w, sort_keys=True, default=str), w)
    if not seen:
        return []
    rows = []
    for w in seen.values():
        shape = w.get("shape_QTK")
        rows.append([_library_cell(w), w.get("num_keywords"),
                     " × ".join(str(x) for x in shape) if isinstance(shape, list) else None,
                     *(w.get(k) for k, _ in _WORKLOAD_COLUMNS), _other_params(w)])
    lines = ["## Workloads", "", "Dataset parameters as stored in the records (Q × T × K as searched; the "
             "generator's Q, T, K and seed alongside):", ""]
    lines += table(["library", "keywords", "Q × T × K", *(h for _, h in _WORKLOAD_COLUMNS), "other parameters"],
                    rows)
    return lines + [""]


def _arg(cmd: Sequence[str], flag: str) -> str | None:
    """The value after ``flag`` in a stored command line, or None."""
    return cmd[cmd.index(flag) + 1] if flag in cmd and cmd.index(flag) + 1 < len(cmd) else None


def _input_commands(records: list[Record]) -> list[str]:
    """Commands that make the input files the records name again, from the generator parameters stored
    with them (libraries and workloads whose parameters the command line cannot express get a comment)."""
    from flashtrie.datasets import KeywordParams, QueryParams
    from flashtrie.datasets.queries import PRESETS

    out: list[str] = []
    for r in records:
        kw = r.workload.get("keywords")
        lib: dict[str, Any] = kw if isinstance(kw, dict) else {}
        raw = lib.get("generator")
        gen = {k: v for k, v in raw.items() if k != "command"} if isinstance(raw, dict) else {}
        src = lib.get("source")
        if gen and src:
            try:
                plain = KeywordParams(n=gen["n"], seed=gen["seed"], vocab_size=gen["vocab_size"]).to_dict() == gen
            except (KeyError, TypeError, ValueError):
                plain = False
            vocab = [] if gen.get("vocab_size") == KeywordParams(n=1).vocab_size else ["--vocab-size",
                                                                                       str(gen.get("vocab_size"))]
            line = (shlex.join(["flashtrie", "gen-keywords", "-n", str(gen["n"]), "--seed", str(gen["seed"]), *vocab,
                                "-o", src]) if plain else f"# {src}: generator parameters beyond the command "
                                                               "line's; see Workloads")
            if line not in out:
                out.append(line)
        w, queries = r.workload, _arg(r.command, "--queries")
        preset = w.get("preset")
        if src and queries and str(w.get("generator", "")).startswith("flashtrie.datasets.queries") \
                and preset in PRESETS:
            plain = w.get("generator") == QueryParams(num_queries=0).generator and all(
                w.get(k) == (list(v) if isinstance(v, tuple) else v) for k, v in PRESETS[preset].items())
            line = (shlex.join(["flashtrie", "gen-queries", src, "-n", str(w.get("num_queries")), "-K",
                                str(w.get("proposals_per_step")), "-T", str(w.get("num_steps")), "--preset", preset,
                                "--seed", str(w.get("seed")), "-o", queries])
                    if plain else f"# {queries}: workload parameters beyond the command line's; see Workloads")
            if line not in out:
                out.append(line)
        index = _arg(r.command, "--index")
        if src and index:
            line = shlex.join(["flashtrie", "build", src, "-o", index])
            if line not in out:
                out.append(line)
    return out


def build_sweep(r: Record) -> str | None:
    """The sweep that produced a build record: "build" (``bench build`` / ``bench all``) or "library_size"
    (``bench size``).  Build records written before they carried it say "library_size" whatever produced
    them; for those the stored command tells."""
    cmd = r.command
    if r.sweep == "library_size" and len(cmd) >= 3 and cmd[1] == "bench" and cmd[2] in ("build", "all"):
        return "build"
    return r.sweep


def _build_section(records: list[Record], drawn: dict[str, list[Path]], out_dir: Path) -> list[str]:
    """Every run's build records, one row per (library size, run, structure): runs are never merged."""
    rows_by_key: dict[tuple[Any, ...], Record] = {}
    for r in records:
        if r.kind == "build":  # the same record read twice (a file given twice) is listed once
            rows_by_key[(r.run_id, r.timestamp, r.backend, r.sweep, _num_kw(r))] = r
    build = list(rows_by_key.values())
    if not build:
        return []
    lines = ["## Build time and size vs marisa-trie", "",
             "narrow-louds = `NarrowLoudsIndex.build` and `save`; marisa-trie = `marisa_trie.BinaryTrie` of the "
             "keywords as 4-byte big-endian token keys, default options, `save` (key preparation not timed). "
             "Bytes / unique keyword divides the serialized bytes by the *unique* keywords (duplicates "
             "collapsed), as `NarrowLoudsIndex.stats()` and `flashtrie build` do. The last ratio leaves out "
             "narrow-louds' keyword-id map (trie order to input ids), which has no counterpart in marisa-trie's "
             "file. Each run is listed on its own rows (sweep "
             "`build` = `flashtrie bench build`, `library_size` = `flashtrie bench size`; run = the records' run "
             "id); speed-up and size ratio compare with marisa-trie in the same run.", ""]
    run_start: dict[str, str] = {}
    for r in build:
        run_start[r.run_id] = min(run_start.get(r.run_id, r.timestamp), r.timestamp)
    rows = [[_num_kw(r), build_sweep(r), r.run_id, r.timestamp[:10], r.backend, r.metrics.get("build_s"),
             r.metrics.get("bytes"), r.metrics.get("unique_keywords"), bytes_per_unique_keyword(r),
             speedup_text(r.metrics.get("build_speedup_vs_marisa"), "–"), r.metrics.get("size_ratio_vs_marisa"),
             r.metrics.get("size_ratio_vs_marisa_without_id_map"), _status_cell(r)]
            for r in sorted(build, key=lambda r: (_num_kw(r) or 0, run_start[r.run_id], r.run_id, r.backend))]
    lines += table(["keywords", "sweep", "run", "date", "structure", "build s", "bytes", "unique keywords",
                     "bytes / unique keyword", "build speed-up vs marisa", "size / marisa size",
                     "size without id map / marisa size", "status"], rows)
    lines.append("")
    runs_per_size: dict[Any, set[str]] = {}
    for r in build:
        runs_per_size.setdefault(_num_kw(r), set()).add(r.run_id)
    multi = sorted(n for n, runs in runs_per_size.items() if len(runs) > 1 and n is not None)
    if multi:
        lines += ["Measured by more than one run (compare their rows; the figure shows the latest run of each "
                  "size): " + ", ".join(f"{fmt(n)} keywords ({len(runs_per_size[n])} runs)" for n in multi)
                  + ".", ""]
    lines += _figure_links(drawn, ["build_vs_marisa"], out_dir)
    return lines


def _num_kw(r: Record) -> Any:
    return r.config.get("num_keywords", r.workload.get("num_keywords"))


def _figure_links(drawn: dict[str, list[Path]], names: Sequence[str], out_dir: Path) -> list[str]:
    lines = []
    for n in names:
        if n in drawn:
            png, svg = drawn[n]
            lines.append(f"![{FIGURES[n][0]}]({png.name}) ([SVG]({svg.name}))")  # beside report.md
            lines.append("")
    return lines


def _intro(records: list[Record], sources: Sequence[str]) -> list[str]:
    """Where the records come from and how to read the numbers."""
    now = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    counts = Counter(r.status for r in records)
    runs = sorted({(r.run_id, r.timestamp[:19]) for r in records}, key=lambda x: x[1])
    run_first: dict[str, str] = {}
    for rid, ts in runs:
        run_first.setdefault(rid, ts)
    status_text = ", ".join(f"{v} {k}" for k, v in counts.items())
    source_text = ", ".join(f"`{s}`" for s in sources)
    run_text = ", ".join(f"`{k}` ({v})" for k, v in run_first.items())
    return [f"Generated {now} from {len(records)} stored records ({status_text}) in {source_text}; runs {run_text}. "
            "This report only reads records; it runs no benchmark.", "",
            "Latency is host wall-clock time per `search` call (proposals in, results out), after warm-up. "
            "Speed-ups divide the marisa-trie baseline's mean by the backend's mean in the same case of the same "
            "run. Every case compares all backends' results exactly (ids, order, float32 bits); a case whose results "
            "differ is marked `mismatch` below. Every number here was measured by the runs named above; the "
            "method follows the FlashTrie paper (arXiv:2607.10044), none of whose numbers are shown.", "",
            "## Status", ""]


def _latency_sections(newest: list[Record], drawn: dict[str, list[Path]], out_dir: Path) -> list[str]:
    """Latency vs beam width (one section per workload), vs library size, throughput vs batch size."""
    lines: list[str] = []
    beam = [r for r in newest if r.kind == "latency" and r.sweep == "beam_width"]
    for g in groups_of(beam):
        lines += _latency_section([r for r in beam if workload_group(r) == g],
                                  f"Latency vs beam width (K = beam width): {g}", "beam",
                                  lambda r: r.config.get("beam_width"))
    lines += _figure_links(drawn, ["latency_vs_beam", "speedup_vs_beam"], out_dir)
    lib = [r for r in newest if r.kind == "latency" and r.sweep == "library_size"]
    lines += _latency_section(lib, "Latency vs library size", "keywords",
                              lambda r: r.config.get("num_keywords", r.workload.get("num_keywords")))
    lines += _figure_links(drawn, ["latency_vs_library_size"], out_dir)
    thr = [r for r in newest if r.kind == "throughput"]
    lines += _latency_section(thr, "Throughput vs batch size", "batch", lambda r: r.config.get("batch_size"))
    lines += _figure_links(drawn, ["throughput_vs_batch"], out_dir)
    return lines


def _quality_section(newest: list[Record], drawn: dict[str, list[Path]], out_dir: Path) -> list[str]:
    qual = [r for r in newest if r.kind == "synthetic-quality"]
    if not qual:
        return []
    metric_names = sorted({m for r in qual for m in r.metrics if "@" in m},
                          key=lambda m: (m.split("@")[0], int(m.split("@")[1])))
    lines = ["## Quality vs beam width", "", f"Workload: {_workload_line(qual[0])}. "
             "Constrained = trie-constrained beam search; unconstrained+filter = beam search over the raw "
             "proposals without the trie, keeping the top-B sequences of each length, then only those that are "
             "whole keywords (see `flashtrie.harness.quality`).", ""]
    rows = [[r.config.get("beam_width"), r.config.get("mode", r.backend), r.backend,
             *(r.metrics.get(m) for m in metric_names), r.metrics.get("mean_results"), _status_cell(r)]
            for r in sorted(qual, key=lambda r: (r.config.get("beam_width", 0), r.config.get("mode", "")))]
    lines += table(["beam", "mode", "backend", *metric_names, "mean results", "status"], rows)
    lines.append("")
    return lines + _figure_links(drawn, ["quality_vs_beam"], out_dir)


def _parity_section(newest: list[Record]) -> list[str]:
    par = [r for r in newest if r.kind in ("parity", "search")]
    if not par:
        return []
    rows = [[r.kind, r.backend, r.config.get("beam_width"), r.metrics.get("num_queries"), _status_cell(r),
             (r.message or "")[:200]] for r in par]
    return ["## Parity and search runs", "", *table(["kind", "backend", "beam", "queries", "status", "message"], rows),
            ""]


def _reproduce(records: list[Record], sources: Sequence[str], out_dir: Path) -> list[str]:
    """The commands that made the inputs and the records, and this report's own."""
    cmds: list[str] = []
    for r in sorted(records, key=lambda r: r.timestamp):
        c = command_text(r.command)
        if c and c not in cmds:
            n = r.workload.get("num_keywords")
            note = f"# run {r.run_id}" + (f", {n:,} keywords" if isinstance(n, int) and r.sweep != "library_size"
                                          else "")
            cmds += [note, c]
    inputs = _input_commands(sorted(records, key=lambda r: r.timestamp))
    lines = ["## Reproduce", "", "The commands that produced these records, run from the repository root. Input "
             "files they name come from `flashtrie gen-keywords` / `gen-queries`, which are deterministic in their "
             "seeds; the generator parameters stored with each workload are listed above"
             + (", and the first commands below make the inputs again from them." if inputs else "."), "", "```sh"]
    lines += inputs
    lines += cmds or ["# (the records carry no command line)"]
    lines += [shlex.join(["flashtrie", "report", *sources, "-o", str(out_dir)]), "```", ""]
    return lines


def sections(records: list[Record], page: Page) -> list[str]:
    """The search suite's part of a report (``page.drawn``: its figures, drawn beside report.md)."""
    newest = latest(records)
    lines = _intro(records, page.sources) + _problems(records) + _environment(records)
    lines += _latency_sections(newest, page.drawn, page.out_dir)
    lines += _quality_section(newest, page.drawn, page.out_dir)
    lines += _build_section(records, page.drawn, page.out_dir)
    lines += _parity_section(newest)
    return lines + _workloads(newest) + _reproduce(records, page.sources, page.out_dir)


def _owns(r: Record) -> bool:
    return r.kind in KINDS


#: The search suite's metrics (the columns of its latency tables).
METRICS = {
    "mean_ms": Metric("host wall-clock time per search call, mean over the timed calls", "ms"),
    "median_ms": Metric("median of the per-call times", "ms"),
    "p99_ms": Metric("99th percentile of the per-call times", "ms"),
    "device_mean_ms": Metric("device time per call (CUDA events around the kernel), mean; GPU only", "ms"),
    "throughput_qps": Metric("queries per second of a batch size's calls", "queries/s"),
    "speedup_vs_marisa": Metric("marisa-trie's mean divided by this backend's, same case and run", "x"),
    "build_s": Metric("index build time (build records)", "s"),
}

SUITE = register(Suite(name="search", title="flashtrie benchmark report", owns=_owns, sections=sections,
                       figures=plot_all, metrics=METRICS, fallback=True))
