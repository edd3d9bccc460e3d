"""Per-step cost of the stepwise constraint (mask + advance) for autoregressive decoders (issue #12).

    python -m flashtrie.harness.stepwise_bench --out FILE.jsonl [--cases ...] [--shapes 2x70,8x64,1x1000]
    python -m flashtrie.harness.stepwise_bench render FILE.jsonl [...] --out-dir reports/h200-stepwise

Every case of issue #12's performance section in one command (about 5 minutes on the H200, most of it
generating and building the 100M library):

    python -m flashtrie.harness.stepwise_bench --out FILE.jsonl --hf --generate \
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
One record per case (`harness/records.py`); a table at the end.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from flashtrie import KeywordSet, NarrowLoudsIndex
from flashtrie.cli.common import count
from flashtrie.io_util import atomic_write
from flashtrie.stepwise import StepStates, TrieStepper

from .records import Record, append_record, new_run_id, read_records

DEFAULT_CASES = "fixed:1M:2048,fixed:1M:32768,var:10M,fixed:20M:32768,var:100M,fixed:20M:2048"
_count = count  # 1M, 20M, 2048 (the CLI's parser)


def fixed_length_library(n: int, vocab: int, length: int = 8, seed: int = 0) -> KeywordSet:
    """n identifiers of ``length`` uniform tokens below ``vocab`` (STATIC's semantic IDs)."""
    tok = np.random.default_rng(seed).integers(0, vocab, size=n * length, dtype=np.uint32)
    return KeywordSet.from_arrays(tok, np.arange(0, n * length + 1, length, dtype=np.int64))


def library(case: str) -> tuple[KeywordSet, dict[str, Any]]:
    kind, *rest = case.split(":")
    if kind == "fixed":
        n, v = _count(rest[0]), _count(rest[1])
        return fixed_length_library(n, v), {"name": "fixed-8", "num_keywords": n, "vocab_size": v}
    if kind == "var":
        from flashtrie.datasets import generate_keywords

        n = _count(rest[0])
        return generate_keywords(n, vocab_size=2_200_000), {"name": "var-1-8", "num_keywords": n,
                                                             "vocab_size": 2_200_000}
    raise ValueError(f"library {case!r} is not fixed:N:V or var:N")


def sample_rows(keywords: KeywordSet, rows: int, root: bool, seed: int) -> tuple[list[list[int]], np.ndarray]:
    """(prefixes, next tokens): random keywords cut at depth 0 (root) or at a random depth."""
    rng = np.random.default_rng(seed)
    prefixes, nxt = [], []
    for i in rng.integers(0, len(keywords), size=rows):
        kw = keywords[int(i)]
        d = 0 if root or kw.size < 2 else int(rng.integers(1, kw.size))
        prefixes.append(kw[:d].tolist())
        nxt.append(int(kw[d]))
    return prefixes, np.asarray(nxt, dtype=np.int64)


def _stats(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {"mean": statistics.fmean(s), "p50": s[len(s) // 2], "p99": s[min(len(s) - 1, int(len(s) * 0.99))]}


def gpu_step_metrics(gpu: Any, states: StepStates, tokens: np.ndarray, vocab: int, eos: int, repeats: int,
                     parts: bool = True, notab: Any = None) -> dict[str, Any]:
    """Device and host time of one step; ``parts``: also mask alone, advance alone, bool, and (``notab``: a
    stepper of the same device index without the child table) the fused step without the table."""
    import torch

    t_begin = time.perf_counter()

    def progress(what: str) -> None:  # long cases (1 x 1000 at V = 2.2M) show where their time goes
        print(f"    {what} ({time.perf_counter() - t_begin:.1f} s)", flush=True)

    rows = len(states)
    d = StepStates(torch.as_tensor(states.node, device="cuda"), torch.as_tensor(states.off, device="cuda"))
    tok = torch.as_tensor(tokens, device="cuda")
    logits = torch.randn(rows, vocab, device="cuda")
    boolmask = torch.empty(rows, vocab, dtype=torch.bool, device="cuda")
    steps: dict[str, Callable[[], Any]] = {
        "fused": lambda: gpu.advance_mask(d, tok, vocab, eos, out=logits),
        "step": lambda: (gpu.mask(d, vocab, eos, out=logits), gpu.advance(d, tok, eos)),
    }
    if parts:
        steps.update({
            "mask": lambda: gpu.mask(d, vocab, eos, out=logits),
            "advance": lambda: gpu.advance(d, tok, eos),
            "bool_fused": lambda: gpu.advance_mask(d, tok, vocab, eos, out=boolmask, additive=False),
            "bool_step": lambda: (gpu.mask(d, vocab, eos, out=boolmask, additive=False), gpu.advance(d, tok, eos)),
        })
        if notab is not None:
            steps["fused_notable"] = lambda: notab.advance_mask(d, tok, vocab, eos, out=logits)
    for f in steps.values():
        f()
    torch.cuda.synchronize()
    progress("first calls")
    t0 = time.perf_counter()
    steps["fused"]()
    torch.cuda.synchronize()
    once = time.perf_counter() - t0
    repeats = max(5, min(repeats, int(0.25 / max(once, 1e-9))))  # about 0.25 s per measurement at most
    out: dict[str, Any] = {"repeats": repeats}
    gc_was = gc.isenabled()
    gc.disable()  # host loops without collector pauses (as timeit does)
    for name in ("fused", "step"):
        host, synced = [], []
        _busy(steps[name])  # warm-up, not timed (the first calls after a setup run slower)
        for _ in range(repeats):
            t0 = time.perf_counter()
            steps[name]()
            host.append((time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()
        for _ in range(repeats):
            t0 = time.perf_counter()
            steps[name]()
            torch.cuda.synchronize()
            synced.append((time.perf_counter() - t0) * 1e6)
        sfx = "" if name == "step" else "_fused"
        out[f"host{sfx}_us"], out[f"sync{sfx}_us"] = _stats(host), _stats(synced)
    out.update(_host_split(gpu, steps["fused"], repeats))
    progress(f"host timings ({repeats} calls each)")
    if gc_was:
        gc.enable()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(repeats):
        steps["step"]()
    e1.record()
    torch.cuda.synchronize()
    out["stream_us"] = e0.elapsed_time(e1) * 1e3 / repeats  # eager, launch gaps included
    replays = max(3, min(GRAPH_REPLAYS, int(0.1 / max(once, 1e-9))))
    out["graph_replays"] = replays
    for name, f in steps.items():
        try:
            out[f"graph_{name}_us"] = graph_us(f, replays)
        except Exception as e:  # noqa: BLE001 - keep the eager numbers
            out["graph_error"] = f"{type(e).__name__}: {e}"
            break
        progress(f"graph {name}: {out[f'graph_{name}_us']:.1f} us ({replays} replays)")
    try:  # the fused step 10 times in one graph: no graph launch gap between steps (as in a captured decode loop)
        out[f"graph{INNER}_fused_us"] = graph_us(steps["fused"], max(3, replays // INNER), INNER)
    except Exception as e:  # noqa: BLE001
        out["graph_error"] = f"{type(e).__name__}: {e}"
    out["dead_rows"] = gpu.dead_count
    out["blocks_per_row"] = gpu.blocks_per_row
    return out


INNER = 10  # steps per graph of the graph10_fused_us measurement
WARM_S = 0.03  # seconds of calls (or graph replays) before each timed loop: clocks up, caches warm


def _busy(f: Callable[[], Any], seconds: float = WARM_S) -> None:
    """Call ``f`` for about ``seconds`` (at least 5 times), then synchronise."""
    import torch

    t_end, k = time.perf_counter() + seconds, 0
    while k < 5 or time.perf_counter() < t_end:
        f()
        k += 1
    torch.cuda.synchronize()


def _host_split(gpu: Any, fused: Callable[[], Any], repeats: int) -> dict[str, Any]:
    """The host time of a fused call split in two: the stepper's own Python work (its launch replaced by a
    no-op: ``host_py_fused_us``) and cuda.core's launch of the same kernel arguments (``host_launch_us``)."""
    import torch

    real, calls, keep = gpu._launch_fn, [], []  # keep: the outputs the recorded launches write stay allocated
    gpu._launch_fn = lambda *a: calls.append(a)
    try:
        py = []
        for _ in range(max(repeats, 100)):
            t0 = time.perf_counter()
            r = fused()
            py.append((time.perf_counter() - t0) * 1e6)
            keep.append(r)
    finally:
        gpu._launch_fn = real
    args, launch = calls[-1], []
    for _ in range(max(repeats, 100)):
        t0 = time.perf_counter()
        real(*args)
        launch.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    del keep
    return {"host_py_fused_us": _stats(py), "host_launch_us": _stats(launch)}


GRAPH_REPLAYS = 200  # replays of a one-step graph per timed block (fewer where a step is long: about 0.1 s)
GRAPH_BLOCKS = 3  # timed blocks per measurement: the median is reported


def graph_us(f: Callable[[], Any], replays: int, inner: int = 1, blocks: int = GRAPH_BLOCKS) -> float:
    """Device µs per call of ``f``: CUDA events around ``replays`` back-to-back replays of a CUDA graph of
    ``inner`` calls of ``f`` (1: one call per graph, a graph launch between calls), after ``WARM_S`` of replays;
    the median of ``blocks`` such timings."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        f()
        with torch.cuda.graph(g, stream=side):
            for _ in range(inner):
                f()
    torch.cuda.synchronize()
    _busy(g.replay)
    times = []
    for _ in range(blocks):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(replays):
            g.replay()
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1) * 1e3 / (replays * inner))
    return statistics.median(times)


def numpy_step_metrics(cpu: TrieStepper, states: StepStates, tokens: np.ndarray, vocab: int, eos: int,
                       repeats: int) -> dict[str, Any]:
    logits = np.random.default_rng(0).normal(size=(len(states), vocab)).astype(np.float32)
    host = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        cpu.mask(states, vocab, eos, out=logits)
        cpu.advance(states, tokens, eos)
        host.append((time.perf_counter() - t0) * 1e6)
    return {"host_us": _stats(host), "sync_us": _stats(host)}


def nested_dict_trie(keywords: KeywordSet, eos: int) -> dict:
    root: dict = {}
    for kw in keywords.to_sequences():
        d = root
        for x in kw:
            d = d.setdefault(x, {})
        d[eos] = {}
    return root


def dict_prefix_fn(root: dict, prompt_length: int, eos: int) -> Callable[[int, Any], list[int]]:
    """GENRE-style callback over a nested dict: walk the generated suffix, list the children."""
    def fn(batch_id: int, sent: Any) -> list[int]:
        d = root
        for x in sent.tolist()[prompt_length:]:
            d = d.get(x)
            if d is None:
                return [eos]
        return list(d) or [eos]

    return fn


def hf_metrics(index: NarrowLoudsIndex, root: dict, prefixes: list[list[int]], beams: int, vocab: int, eos: int
               ) -> dict[str, Any]:
    """One processor call on the same input: transformers' dict-trie callback against ours (ms per call)."""
    import torch
    from transformers.generation.logits_process import PrefixConstrainedLogitsProcessor

    from flashtrie.hf import TrieLogitsProcessor

    depth = len(prefixes[0])
    prompt = 4
    ids = torch.tensor([[0] * prompt + p for p in prefixes], device=_dev())
    scores = torch.randn(len(prefixes), vocab + 1, device=_dev())
    theirs = PrefixConstrainedLogitsProcessor(dict_prefix_fn(root, prompt, eos), beams)
    ours = TrieLogitsProcessor(index, eos, prompt_length=prompt)
    out = {}
    # theirs masks a copy; ours writes into its scores in place (idempotent: every call gives the same tensor)
    for name, proc, sc, reps in (("hf_ms", theirs, scores, 3), ("ours_ms", ours, scores.clone(), 20)):
        proc(ids, sc)
        _sync()
        t = []
        for _ in range(reps):
            t0 = time.perf_counter()
            r = proc(ids, sc)
            _sync()
            t.append((time.perf_counter() - t0) * 1e3)
        out[name] = statistics.median(t)
        out[name.replace("_ms", "_out")] = r
        out[name.replace("_ms", "_ms_min")] = min(t)
    same = bool(torch.equal(out.pop("hf_out"), out.pop("ours_out")))
    return {**out, "speedup": out["hf_ms"] / out["ours_ms"], "same_scores": same, "depth": depth}


#: rounds of the generate() comparison (one unconstrained and one constrained call each)
GENERATE_ROUNDS = 15


def generate_metrics(index: NarrowLoudsIndex, root: dict, vocab: int, eos: int, batch: int, beams: int
                     ) -> dict[str, Any]:
    """generate() of a tiny random GPT-2: unconstrained, with our processor, with the dict-trie callback."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LogitsProcessorList

    from flashtrie.hf import TrieLogitsProcessor

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=vocab + 1, n_positions=64, n_embd=32, n_layer=2, n_head=2,
                                       eos_token_id=eos, bos_token_id=eos, pad_token_id=eos)).to(_dev()).eval()
    prompt = torch.randint(0, vocab, (batch, 4), device=_dev())
    kw = {"num_beams": beams, "do_sample": False, "max_new_tokens": index.max_keyword_length + 1,
          "eos_token_id": eos, "pad_token_id": eos}
    variants = {
        "unconstrained": {},
        "ours": {"logits_processor": LogitsProcessorList([TrieLogitsProcessor(index, eos, prompt_length=4)])},
        "hf_prefix_fn": {"prefix_allowed_tokens_fn": dict_prefix_fn(root, 4, eos)},
    }
    def once(extra: dict[str, Any]) -> tuple[float, int]:
        _sync()
        t0 = time.perf_counter()
        with torch.no_grad():
            seq = model.generate(prompt, **kw, **extra)
        _sync()
        return (time.perf_counter() - t0) * 1e3, int(seq.shape[1]) - prompt.shape[1]

    # unconstrained and ours alternate over GENERATE_ROUNDS rounds (the order flips every round), after two
    # warm-up calls each, with the collector off: the medians and the median of the rounds' ratios; the
    # callback, far slower, 3 calls
    times: dict[str, list[float]] = {name: [] for name in variants}
    steps: dict[str, int] = {}
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for name in ("unconstrained", "ours") * 2:
            once(variants[name])
        for r in range(GENERATE_ROUNDS):
            for name in ("unconstrained", "ours")[:: 1 if r % 2 == 0 else -1]:
                ms, steps[name] = once(variants[name])
                times[name].append(ms)
        for _ in range(3):
            ms, steps["hf_prefix_fn"] = once(variants["hf_prefix_fn"])
            times["hf_prefix_fn"].append(ms)
    finally:
        if gc_was:
            gc.enable()
    out: dict[str, Any] = {f"{name}_ms": statistics.median(t) for name, t in times.items()}
    out.update({f"{name}_new_tokens": n for name, n in steps.items()})
    out["rounds"] = GENERATE_ROUNDS
    ratios = [a / b for a, b in zip(times["ours"], times["unconstrained"], strict=True)]
    out["ours_over_unconstrained_rounds"] = {"median": statistics.median(ratios), "min": min(ratios),
                                             "max": max(ratios)}
    out["ours_over_unconstrained"] = out["ours_ms"] / out["unconstrained_ms"]
    out["hf_over_unconstrained"] = out["hf_prefix_fn_ms"] / out["unconstrained_ms"]
    return out


def _dev() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _shape(text: str) -> tuple[int, int]:
    """``BxK`` (batch x beams), both >= 1."""
    try:
        b, k = (int(v) for v in text.lower().split("x"))
    except ValueError:
        b = k = 0
    if b < 1 or k < 1:
        raise argparse.ArgumentTypeError(f"expected batch x beams such as 2x70, got {text!r}")
    return b, k


def _case(text: str) -> None:
    """Refuse a library name that ``library`` would not read: fixed:N:V or var:N."""
    kind, *rest = text.split(":")
    if (kind, len(rest)) not in (("fixed", 2), ("var", 1)):
        raise argparse.ArgumentTypeError(f"expected fixed:N:V or var:N (such as fixed:20M:32768), got {text!r}")
    for r in rest:
        count(r)


STATES = ("root", "mid")


def _check_args(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """Every list argument parsed before any work (a bad last case must not cost the run before it)."""
    lists: list[tuple[str, str, Callable[[str], object]]] = [
        ("--cases", a.cases, _case), ("--hf-cases", a.hf_cases, _case), ("--sweep-cases", a.sweep_cases, _case),
        ("--shapes", a.shapes, _shape), ("--hf-shapes", a.hf_shapes, _shape),
        ("--sweep-shapes", a.sweep_shapes, _shape)]
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
    from .env import snapshot

    env, run_id, t_start = snapshot(), new_run_id(), time.perf_counter()
    records: list[Record] = []

    def emit(rec: Record) -> None:
        rec.env, rec.run_id, rec.command = env, run_id, list(sys.argv)
        rec.timestamp = env["timestamp"]
        records.append(rec)
        append_record(args.out, rec)
        m = rec.metrics
        show = {k: round(v, 2) for k, v in m.items() if isinstance(v, float)}
        show.update({k: round(v["mean"], 1) for k, v in m.items() if isinstance(v, dict) and "mean" in v})
        print(f"  {rec.backend} {rec.status} {rec.config} {show} {rec.message or ''}"[:400], flush=True)

    shapes = [_shape(s) for s in args.shapes.split(",")]
    for case in args.cases.split(","):
        if time.perf_counter() - t_start > args.max_seconds:
            emit(Record("latency", f"{args.backend}-stepwise", "skipped", f"time budget spent before {case}",
                        "stepwise", {"case": case}))
            continue
        t0 = time.perf_counter()
        keywords, wl = library(case)
        t_gen = time.perf_counter() - t0
        index = NarrowLoudsIndex.build(keywords)
        t_build = time.perf_counter() - t0 - t_gen
        wl.update(case=case, index_bytes=int(sum(a.nbytes for a in index.arrays.values())),
                  generate_s=round(t_gen, 2), build_s=round(t_build, 2))
        v, eos = wl["vocab_size"], wl["vocab_size"]  # EOS: the id after the library's vocabulary
        vocab = v + 1
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
                                   searcher=SimpleNamespace(index=index, _index_ptr=gpu._view_ptr))
        print(f"# {case}: {len(keywords):,} keywords, {index.num_nodes:,} nodes, {wl['index_bytes'] / 2**20:.0f} MiB,"
              f" gen {t_gen:.1f} s, build {t_build:.1f} s", flush=True)
        for b, k in shapes:
            if time.perf_counter() - t_start > args.max_seconds:  # a long case stops between its shapes
                emit(Record("latency", f"{args.backend}-stepwise", "skipped", f"time budget spent before {case} "
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
        del gpu, notab, cpu, index, keywords
    return records


def _sweep(args: argparse.Namespace, gpu: Any, index: NarrowLoudsIndex, keywords: KeywordSet, cpu: TrieStepper,
           wl: dict[str, Any], emit: Callable[[Record], None]) -> None:
    """The fused step at other chunk sizes and blocks per row (steppers sharing ``gpu``'s device index)."""
    from types import SimpleNamespace

    from flashtrie.gpu_impl.stepwise import GpuTrieStepper

    shared = SimpleNamespace(index=index, _index_ptr=gpu._view_ptr)
    v, eos = wl["vocab_size"] + 1, wl["vocab_size"]
    for b, k in [_shape(x) for x in args.sweep_shapes.split(",")]:
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
        for b, k in [_shape(x) for x in args.hf_shapes.split(",")]:
            for depth in [int(x) for x in args.hf_depths.split(",")]:
                rng = np.random.default_rng(depth)
                prefixes = [keywords[int(i)][:depth].tolist() for i in rng.integers(0, len(keywords), b * k)]
                cfg = {"batch": b, "beams": k, "rows": b * k, "depth": depth}
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


_PARTS = ("graph_mask_us", "graph_advance_us", "graph_bool_fused_us", "graph_bool_step_us", "graph_fused_notable_us")
#: what the fifth part was before the write-only mask (records of commits before it)
_OLD_PART = "graph_mask_noprefetch_us"


def _f(m: dict[str, Any], key: str, stat: str = "mean") -> str:
    """A metric for a table: a number, or one statistic of a distribution (``stat``: mean or p50)."""
    v = m.get(key)
    return "-" if v is None else f"{v[stat] if isinstance(v, dict) else v:.1f}"


def commit_of(r: Record) -> str:
    """The commit a record was measured at (short), from its environment snapshot."""
    return str((r.env.get("git") or {}).get("commit") or "?")[:7]


def table(records: list[Record]) -> str:
    """Markdown tables of the step records, the chunk sweep, then the HF comparisons (each row with its commit)."""
    lines = ["| commit | library | N | V | rows | states | device µs: fused step (1 launch) | fused, 10 steps per "
             "graph | mask + advance (2) | "
             "mask / advance / bool fused / bool 2 launches / fused without child table (older records: mask without "
             "preload) µs | host µs fused (median) | "
             "host µs 2 launches (median) | host+sync µs fused (median) |",
             "| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
    for r in records:
        if r.sweep != "stepwise":
            continue
        w, c, m = r.workload, r.config, r.metrics
        if r.status != "ok":
            lines.append(f"| {commit_of(r)} | {w.get('case', '?')} | | | {c.get('rows', '')} | | {r.status}: "
                         f"{r.message} | | | | | | |")
            continue
        parts = " / ".join(f"{m[k]:.1f}" for k in (*_PARTS[:4], _PARTS[4] if _PARTS[4] in m else _OLD_PART)
                           if k in m) or m.get("graph_error", "-")
        lines.append(f"| {commit_of(r)} | {w['name']} | {w['num_keywords']:,} | {w['vocab_size']:,} | "
                     f"{c['batch']}x{c['beams']} | {c['states']} | {_f(m, 'graph_fused_us')} | "
                     f"{_f(m, f'graph{INNER}_fused_us')} | {_f(m, 'graph_step_us')} | {parts} | "
                     f"{_f(m, 'host_fused_us', 'p50')} | {_f(m, 'host_us', 'p50')} | "
                     f"{_f(m, 'sync_fused_us', 'p50')} |")
    sw = [r for r in records if r.sweep == "stepwise-chunk" and r.status == "ok"]
    if sw:
        lines += ["", "| commit | library | rows | states | chunk | blocks per row | child search | device µs fused | "
                  "mask + advance | host µs fused (median) |",
                  "| --- | --- | ---: | --- | ---: | ---: | --- | ---: | ---: | ---: |"]
        for r in sw:
            c, m = r.config, r.metrics
            lines.append(f"| {commit_of(r)} | {r.workload['case']} | {c['batch']}x{c['beams']} | {c['states']} | "
                         f"{c['chunk']} | "
                         f"{c['bpr']} | {c.get('child_search', '')} | {_f(m, 'graph_fused_us')} | "
                         f"{_f(m, 'graph_step_us')} | "
                         f"{_f(m, 'host_fused_us', 'p50')} |")
    hf = [r for r in records if r.sweep == "stepwise-hf" and r.status == "ok"]
    if hf:
        lines += ["", "| library | rows | depth | transformers dict-trie processor ms | ours ms | speed-up | same |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
        for r in hf:
            m = r.metrics
            lines.append(f"| {r.workload['case']} | {r.config['batch']}x{r.config['beams']} | {m['depth']} | "
                         f"{m['hf_ms']:.2f} | {m['ours_ms']:.3f} | {m['speedup']:.2f}x | {m['same_scores']} |")
    gen = [r for r in records if r.sweep == "stepwise-generate" and r.status == "ok"]
    if gen:
        lines += ["", "| commit | library | batch x beams | unconstrained ms | ours ms (x) | ours / unconstrained per "
                  "round: median [min, max] (rounds) | dict-trie callback ms (x) |",
                  "| --- | --- | ---: | ---: | ---: | --- | ---: |"]
        for r in gen:
            m = r.metrics
            rr = m.get("ours_over_unconstrained_rounds")  # (records before 2026-12-02: medians of 2 calls)
            per_round = (f"{rr['median']:.3f} [{rr['min']:.3f}, {rr['max']:.3f}] ({m['rounds']})" if rr
                         else "n/a (2 calls each)")
            lines.append(f"| {commit_of(r)} | {r.workload['case']} | {r.config['batch']}x{r.config['beams']} | "
                         f"{m['unconstrained_ms']:.1f} | {m['ours_ms']:.1f} ({m['ours_over_unconstrained']:.2f}x) | "
                         f"{per_round} | {m['hf_prefix_fn_ms']:.1f} ({m['hf_over_unconstrained']:.2f}x) |")
    bad = [r for r in records if r.status == "error" and r.sweep != "stepwise"]
    lines += [f"- {r.backend} {r.config}: {r.message}" for r in bad]
    return "\n".join(lines)


def brief(records: list[Record]) -> str:
    """One short line per measurement (device and host µs), for a terminal."""
    out = ["case rows states: device us fused / fused 10 per graph / 2 launches | host us (median) fused / "
           "2 launches | host+sync fused | host us fused = our Python + cuda.core launch"]
    for r in records:
        c, m = r.config, r.metrics
        head = f"{r.workload.get('case', '?')} {c.get('batch', '')}x{c.get('beams', '')}"
        if r.status != "ok":
            out.append(f"{head} {r.sweep} {r.status}: {(r.message or '')[:80]}")
        elif r.sweep in ("stepwise", "stepwise-chunk"):
            knobs = "" if r.sweep == "stepwise" else f" chunk={c['chunk']} bpr={c['bpr']} {c.get('child_search', '')}"
            out.append(f"{head} {c['states']}{knobs}: {_f(m, 'graph_fused_us')} / {_f(m, f'graph{INNER}_fused_us')}"
                       f" / {_f(m, 'graph_step_us')} | {_f(m, 'host_fused_us', 'p50')} / {_f(m, 'host_us', 'p50')} | "
                       f"{_f(m, 'sync_fused_us', 'p50')} | py {_f(m, 'host_py_fused_us', 'p50')} + launch "
                       f"{_f(m, 'host_launch_us', 'p50')}")
        elif r.sweep == "stepwise-hf":
            out.append(f"{head} hf depth {m['depth']}: {m['hf_ms']:.2f} ms vs {m['ours_ms'] * 1e3:.0f} us = "
                       f"{m['speedup']:.2f}x same={m['same_scores']}")
        elif r.sweep == "stepwise-generate":
            rr = m.get("ours_over_unconstrained_rounds")
            out.append(f"{head} generate: ours {m['ours_over_unconstrained']:.2f}x"
                       + (f" (per round {rr['median']:.3f}, {m['rounds']} rounds)" if rr else "") + ", dict "
                       f"{m['hf_over_unconstrained']:.2f}x of unconstrained {m['unconstrained_ms']:.1f} ms")
    return "\n".join(out)


def render(records: list[Record], out_dir: str | Path) -> Path:
    """reports/<dir>/stepwise.md with a figure of device µs per step by case, from the records only."""
    from .plots import _new, _save

    out = Path(out_dir)
    ok = [r for r in records if r.sweep == "stepwise" and r.status == "ok" and "graph_fused_us" in r.metrics]
    fig, (ax,) = _new("Per-step constraint cost (advance + mask, one launch), device time; newest run of each point",
                      "rows (batch x beams)", "µs per step", logx=True, logy=True)
    newest: dict[tuple[str, str, int], Record] = {}  # records come in the order given: later runs win
    for r in ok:
        newest[(r.workload["case"], r.config["states"], r.config["rows"])] = r
    cases = sorted({k[0] for k in newest})
    colours = {c: f"C{i % 10}" for i, c in enumerate(cases)}
    for case, states in sorted({k[:2] for k in newest}):
        pts = sorted((k[2], r.metrics["graph_fused_us"], commit_of(r)) for k, r in newest.items()
                     if k[:2] == (case, states))
        commits = ", ".join(sorted({c for _, _, c in pts}))
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=colours[case],
                linestyle="-" if states == "root" else "--", label=f"{case} ({states}; {commits})")
    if ok:
        ax.legend(fontsize=7)
    _save(fig, out, "stepwise_device_us")
    from .env import summary_line

    envs = {commit_of(r): r.env for r in records}  # one environment line per commit measured
    text = ["## Autoregressive decoding: per-step constraint cost", ""]
    text += [f"Environment: {summary_line(e)}." for e in envs.values()] + [""]
    text += ["![device µs per step](stepwise_device_us.png)", "", table(records), ""]
    path = out / "stepwise.md"
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(path, "\n".join(text).encode())
    return path


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "render":
        p = argparse.ArgumentParser(prog="stepwise_bench render")
        p.add_argument("records", nargs="+")
        p.add_argument("--out-dir", default="reports/h200-stepwise")
        p.add_argument("--brief", action="store_true", help="print one short line per record instead of the tables")
        a = p.parse_args(argv[1:])
        recs = read_records(*a.records)
        if a.brief:
            print(brief(recs))
            return 0
        print(render(recs, a.out_dir))
        print(table(recs))
        return 0
    p = argparse.ArgumentParser(prog="python -m flashtrie.harness.stepwise_bench", description=__doc__.split("\n")[0])
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
    a = p.parse_args(argv)
    _check_args(p, a)
    recs = run(a)
    print(table(recs))
    return 0 if all(r.status in ("ok", "skipped") for r in recs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
