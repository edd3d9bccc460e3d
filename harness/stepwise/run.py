"""Per-step cost of the stepwise constraint (mask + advance) for autoregressive decoders .

    flashtrie bench stepwise --out FILE.jsonl [--cases ...] [--shapes 2x70,8x64,1x1000]
    flashtrie bench stepwise render FILE.jsonl [...] --out-dir reports/h200-stepwise   (the report pipeline)

Every case in one command (about 5 minutes on the H200, most of it
generating and building the 100M library):

    flashtrie bench stepwise --out FILE.jsonl --hf --generate \
        --sweep-cases fixed:20M:32768,var:10M

``--max-logits-gb`` skips the shapes whose logits (and bool mask) would take more device memory.

Libraries: ``fixed:N:V`` (STATIC's setting: N identifiers of 8 uniform tokens below V, a numpy generator)
and ``var:N`` (`flashtrie.datasets.generate_keywords`: lengths 1-8, 2.2M vocabulary).  For each library
and batch x beams, two state sets: every row at the root (the first step: the most children) and rows at
random depths of random keywords; each row's token is its keyword's next token.  Measured per step:

* ``graph_fused_us``: device time of one step, `advance_mask` (advance, then the in-place additive mask of
  the new states into float32 logits: one launch), from CUDA events around replays of a CUDA graph of the
  step (no host launch gaps; the median of 3 blocks of up to 200 replays, after 30 ms of replays);
  ``graph_step_us`` the same as two launches (mask, then advance); also mask alone, advance alone, the boolean
  mask, and the fused step without the child and root tables (``graph_fused_notable_us``: every child range by
  select0); ``graph10_fused_us``: the fused step 10 times in one CUDA graph (no graph launch between steps, as
  in a decode loop captured whole);
* ``host_fused_us`` / ``host_us``: host wall time of the eager calls (they need no synchronisation; the
  collector off; tables show medians), and
  ``sync_fused_us`` / ``sync_us`` the same with a synchronisation after each step;
* ``--sweep-cases``: the fused step at other chunk sizes (``--sweep-chunks``) and blocks per row
  (``--sweep-bpr``), sweep ``stepwise-chunk``.

Next to it (``--hf``): transformers' `PrefixConstrainedLogitsProcessor` over a nested-dict trie against
`flashtrie.hf.TrieLogitsProcessor` on the same ``input_ids`` / scores, and (``--generate``) the
``generate()`` of a tiny random GPT-2 unconstrained, with the processor and with the dict-trie callback.
One record per case (`harness/records.py`); a table at the end; the report is `stepwise/report.py`'s.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from flashtrie.harness.records import Record, append_record, read_records
from flashtrie.harness.run_context import RunContext

from flashtrie import KeywordSet, NarrowLoudsIndex
from flashtrie.stepwise import TrieStepper

from .cases import DEFAULT_CASES, STATES, check_case, library, nested_dict_trie, parse_shape, sample_rows
from .hf_compare import generate_metrics, hf_metrics
from .measure import gpu_step_metrics, numpy_step_metrics
from .report import brief, table

__all__ = ["run", "main", "parser"]


def _check_args(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """Every list argument parsed before any work (a bad last case must not cost the run before it)."""
    lists: list[tuple[str, str, Callable[[str], object]]] = [
        ("--cases", a.cases, check_case), ("--hf-cases", a.hf_cases, check_case),
        ("--sweep-cases", a.sweep_cases, check_case),
        ("--shapes", a.shapes, parse_shape), ("--hf-shapes", a.hf_shapes, parse_shape),
        ("--sweep-shapes", a.sweep_shapes, parse_shape)]
    for flag, value, parse in lists:
        optional = flag in ("--hf-cases", "--sweep-cases")  # empty: no comparison, no sweep
        for item in ([] if optional and not value else value.split(",")):
            try:
                parse(item)
            except argparse.ArgumentTypeError as e:
                p.error(f"{flag} {value!r}: {e}")
    if a.repeats < 1:
        p.error(f"--repeats {a.repeats}: expected at least 1")
    bad = [s for s in a.states.split(",") if s not in STATES]
    if bad or not a.states:
        p.error(f"--states {a.states!r}: expected root, mid or root,mid")


def run(args: argparse.Namespace) -> list[Record]:
    """Every case of ``args`` in order, each record appended to ``args.out`` as it is made; the records."""

    context, t_start = RunContext.start(), time.perf_counter()
    records: list[Record] = []

    def emit(rec: Record) -> None:
        records.append(context.stamp(rec))
        append_record(args.out, rec)
        m = rec.metrics
        show = {k: round(v, 2) for k, v in m.items() if isinstance(v, float)}
        show.update({k: round(v["mean"], 1) for k, v in m.items() if isinstance(v, dict) and "mean" in v})
        print(f"  {rec.backend} {rec.status} {rec.config} {show} {rec.message or ''}"[:400], flush=True)

    shapes = [parse_shape(s) for s in args.shapes.split(",")]
    for case in args.cases.split(","):
        if time.perf_counter() - t_start > args.max_seconds:
            emit(Record("latency", f"{args.backend}-stepwise", "skipped", f"stopped by --max-seconds before {case}",
                        "stepwise", {"case": case}))
            continue
        _run_case(args, case, shapes, t_start, emit)
    return records


def _prepare(args: argparse.Namespace, case: str) -> tuple[KeywordSet, NarrowLoudsIndex, dict[str, Any], TrieStepper,
                                                        Any, Any]:
    """The case's library and index, its workload fields, and the steppers (GPU ones where ``--backend gpu``)."""
    t0 = time.perf_counter()
    keywords, wl = library(case)
    t_gen = time.perf_counter() - t0
    index = NarrowLoudsIndex.build(keywords)
    t_build = time.perf_counter() - t0 - t_gen
    wl.update(case=case, index_bytes=int(sum(a.nbytes for a in index.arrays.values())),
              generate_s=round(t_gen, 2), build_s=round(t_build, 2))
    cpu = TrieStepper(index)
    gpu = notab = None
    if args.backend == "gpu":
        from types import SimpleNamespace

        from flashtrie.gpu_impl.stepwise import GpuTrieStepper

        t1 = time.perf_counter()
        gpu = GpuTrieStepper(index, chunk=args.chunk)
        wl["upload_s"] = round(time.perf_counter() - t1, 2)
        wl["child_table_nodes"], wl["root_table_labels"] = gpu.child_table, gpu.root_table
        notab = GpuTrieStepper(index, chunk=args.chunk, child_table=0, root_table=0,
                               searcher=SimpleNamespace(index=index, index_address=gpu.index_address))
    print(f"# {case}: {len(keywords):,} keywords, {index.num_nodes:,} nodes, {wl['index_bytes'] / 2**20:.0f} MiB,"
          f" gen {t_gen:.1f} s, build {t_build:.1f} s", flush=True)
    return keywords, index, wl, cpu, gpu, notab


def _run_case(args: argparse.Namespace, case: str, shapes: list[tuple[int, int]], t_start: float,
              emit: Callable[[Record], None]) -> None:
    """One library: each shape and state set, then its sweep and transformers comparisons where asked."""
    keywords, index, wl, cpu, gpu, notab = _prepare(args, case)
    v, eos = wl["vocab_size"], wl["vocab_size"]  # EOS: the id after the library's vocabulary
    vocab = v + 1
    for b, k in shapes:
        if time.perf_counter() - t_start > args.max_seconds:  # a long case stops between its shapes
            emit(Record("latency", f"{args.backend}-stepwise", "skipped", f"stopped by --max-seconds before {case} "
                        f"{b}x{k}", "stepwise", wl, {"batch": b, "beams": k, "rows": b * k}))
            continue
        if b * k * vocab * 5 > args.max_logits_gb * 2**30:
            emit(Record("latency", f"{args.backend}-stepwise", "skipped", f"logits over --max-logits-gb "
                        f"{args.max_logits_gb}", "stepwise", wl, {"batch": b, "beams": k, "rows": b * k}))
            continue
        for root in [r for r in (True, False) if ("root" if r else "mid") in args.states.split(",")]:
            prefixes, nxt = sample_rows(keywords, b * k, root, seed=b * k)
            states = cpu.start_from_prefixes(prefixes)
            cfg = {"batch": b, "beams": k, "rows": b * k, "states": "root" if root else "mid-keyword",
                   "chunk": args.chunk}
            print(f"  {case} {b}x{k} {cfg['states']}:", flush=True)
            try:
                m = (gpu_step_metrics(gpu, states, nxt, vocab, eos, args.repeats, notab=notab)
                     if gpu is not None else
                     numpy_step_metrics(cpu, states, nxt, vocab, eos, max(3, args.repeats // 10)))
                emit(Record("latency", f"{args.backend}-stepwise", sweep="stepwise", workload=wl, config=cfg,
                            metrics=m))
            except Exception as e:  # noqa: BLE001 - one failed case is recorded, the run goes on
                emit(Record("latency", f"{args.backend}-stepwise", "error", f"{type(e).__name__}: {e}",
                            "stepwise", wl, cfg))
    if gpu is not None and case in args.sweep_cases.split(","):
        _sweep(args, gpu, index, keywords, cpu, wl, emit)
    if gpu is not None and (args.hf or args.generate) and case in args.hf_cases.split(","):
        _compare_hf(args, index, keywords, wl, eos, shapes, emit)


def _sweep(args: argparse.Namespace, gpu: Any, index: NarrowLoudsIndex, keywords: KeywordSet, cpu: TrieStepper,
           wl: dict[str, Any], emit: Callable[[Record], None]) -> None:
    """The fused step at other chunk sizes and blocks per row (steppers sharing ``gpu``'s device index)."""
    from types import SimpleNamespace

    from flashtrie.gpu_impl.stepwise import GpuTrieStepper

    shared = SimpleNamespace(index=index, index_address=gpu.index_address)
    v, eos = wl["vocab_size"] + 1, wl["vocab_size"]
    for b, k in [parse_shape(x) for x in args.sweep_shapes.split(",")]:
        for root in (True, False):
            prefixes, nxt = sample_rows(keywords, b * k, root, seed=b * k)
            states = cpu.start_from_prefixes(prefixes)
            for chunk in [int(c) for c in args.sweep_chunks.split(",")]:
                g = gpu if chunk == gpu.chunk else GpuTrieStepper(index, chunk=chunk, searcher=shared)
                bprs = args.sweep_bpr.split(",") if chunk == gpu.chunk else ["auto"]
                runs = [(x, "select") for x in bprs] + ([("auto", "block")] if chunk == gpu.chunk else [])
                for bpr, how in [(None if x == "auto" else int(x), how) for x, how in runs]:
                    g.blocks_per_row, g.child_search = bpr, how
                    cfg = {"batch": b, "beams": k, "rows": b * k, "states": "root" if root else "mid-keyword",
                           "chunk": chunk, "bpr": bpr or "auto", "child_search": how}
                    try:
                        emit(Record("latency", "gpu-stepwise", sweep="stepwise-chunk", workload=wl, config=cfg,
                                    metrics=gpu_step_metrics(g, states, nxt, v, eos, args.repeats, parts=False)))
                    except Exception as e:  # noqa: BLE001
                        emit(Record("latency", "gpu-stepwise", "error", f"{type(e).__name__}: {e}", "stepwise-chunk",
                                    wl, cfg))
                g.blocks_per_row, g.child_search = None, "select"


def _compare_hf(args: argparse.Namespace, index: NarrowLoudsIndex, keywords: KeywordSet, wl: dict[str, Any],
                eos: int, shapes: list[tuple[int, int]], emit: Callable[[Record], None]) -> None:
    t0 = time.perf_counter()
    root = nested_dict_trie(keywords, eos)
    wl = {**wl, "dict_trie_s": round(time.perf_counter() - t0, 2)}
    if args.hf:
        for b, k in [parse_shape(x) for x in args.hf_shapes.split(",")]:
            for depth in [int(x) for x in args.hf_depths.split(",")]:
                rng = np.random.default_rng(depth)
                prefixes = [keywords[int(i)][:depth].tolist() for i in rng.integers(0, len(keywords), b * k)]
                cfg: dict[str, Any] = {"batch": b, "beams": k, "rows": b * k, "depth": depth}
                try:
                    emit(Record("latency", "hf-processor", sweep="stepwise-hf", workload=wl, config=cfg,
                                metrics=hf_metrics(index, root, prefixes, k, wl["vocab_size"], eos)))
                except Exception as e:  # noqa: BLE001
                    emit(Record("latency", "hf-processor", "error", f"{type(e).__name__}: {e}", "stepwise-hf", wl, cfg))
    if args.generate:
        for b in (2, 8):
            cfg = {"batch": b, "beams": 8, "model": "gpt2 2x32"}
            try:
                emit(Record("latency", "hf-generate", sweep="stepwise-generate", workload=wl, config=cfg,
                            metrics=generate_metrics(index, root, wl["vocab_size"], eos, b, 8)))
            except Exception as e:  # noqa: BLE001
                emit(Record("latency", "hf-generate", "error", f"{type(e).__name__}: {e}", "stepwise-generate", wl,
                            cfg))


def render(argv: list[str]) -> int:
    """``render RECORDS... [--out-dir DIR] [--brief]``: the report pipeline over the records (``report.md`` in
    DIR), or one short line per record for a terminal."""
    from flashtrie.harness.report import build_report

    p = argparse.ArgumentParser(prog="flashtrie bench stepwise render")
    p.add_argument("records", nargs="+")
    p.add_argument("--out-dir", default="reports/h200-stepwise")
    p.add_argument("--brief", action="store_true", help="print one short line per record instead of the report")
    a = p.parse_args(argv)
    if a.brief:
        print(brief(read_records(*a.records)))
        return 0
    print(build_report(a.records, a.out_dir))
    return 0


def parser() -> argparse.ArgumentParser:
    """The bench's arguments."""
    p = argparse.ArgumentParser(prog="flashtrie bench stepwise", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="JSON Lines records file (appended)")
    p.add_argument("--cases", default=DEFAULT_CASES, help=f"libraries, in order (default {DEFAULT_CASES})")
    p.add_argument("--shapes", default="2x70,8x64,1x1000", help="batch x beams")
    p.add_argument("--backend", choices=("gpu", "numpy"), default="gpu")
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--states", default="root,mid", help="rows at the root (root), inside keywords (mid), or root,mid")
    p.add_argument("--chunk", type=int, default=4096, help="vocabulary entries per mask chunk (GPU)")
    p.add_argument("--sweep-cases", default="", help="libraries of the chunk / blocks-per-row sweep")
    p.add_argument("--sweep-shapes", default="2x70")
    p.add_argument("--sweep-chunks", default="1024,2048,4096,8192,32768")
    p.add_argument("--sweep-bpr", default="auto,1,2,3,9,32", help="blocks per row (auto: 4 blocks per SM in all)")
    p.add_argument("--hf-shapes", default="2x70,8x64", help="batch x beams of the transformers comparison")
    p.add_argument("--hf-depths", default="0,1,2,3", help="depths of the rows of the transformers comparison")
    p.add_argument("--max-logits-gb", type=float, default=32.0, help="skip shapes with larger logits + mask")
    p.add_argument("--max-seconds", type=float, default=1e9, help="skip the cases left once this is spent")
    p.add_argument("--hf", action="store_true", help="compare with transformers' processor (small libraries)")
    p.add_argument("--generate", action="store_true", help="generate() of a tiny GPT-2 with and without")
    p.add_argument("--hf-cases", default="fixed:1M:2048",
                   help="libraries of the transformers comparisons (its dict trie and callback are slow)")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "render":
        return render(argv[1:])
    p = parser()
    a = p.parse_args(argv)
    _check_args(p, a)
    recs = run(a)
    print(table(recs))
    return 0 if all(r.status in ("ok", "skipped") for r in recs) else 1
