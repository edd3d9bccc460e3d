"""Measurements on real libraries (`flashtrie.datasets.real`): index size against marisa-trie, build
time, every identifier reachable, beam-search latency on a workload made from the real queries, and the
stepwise 2 x 70 step.  Records go through `flashtrie.harness.records` (``run_library`` emits them through a
`SweepContext`); `flashtrie.harness.real_report` renders them.

Sizes (kind ``build``, sweep ``real-size``): serialized bytes of each structure on the library's
identifiers, without and with a map from the structure's own key order to the identifier ids:

* ``narrow-louds``: the index file with ``ids="index"`` (no map) and ``ids="input"`` (its map);
* ``marisa-trie-strings``: ``marisa_trie.Trie`` of the identifier strings (UTF-8);
* ``marisa-trie-tokens``: ``marisa_trie.BinaryTrie`` of the token sequences (4-byte big-endian tokens);
  for both marisa tries the map is the key-id -> identifier-id array bit-packed at ceil(log2 N) bits per
  key, as ``benchmarks/index_sizes.py`` counts it.

The query workload (`real_workload`) is a synthetic model over real data.  ``Q`` queries are drawn
uniformly (seeded) from the library's query set.  ``T`` is the longest relevant identifier of the drawn
queries, in tokens, at most ``max_steps`` (longer identifiers cannot finish).  Row ``t`` of query ``q``
holds the distinct tokens at position ``t`` of the query's relevant identifiers (at most ``K``), with
logits N(3, 1), and fills the rest of its ``K`` proposals with distinct distractor tokens drawn without
replacement in proportion to each token's frequency in the library (Gumbel top-k), with logits N(0, 1);
the row's log-softmax (float64, stored float32) gives the log-probabilities, rows sorted best first.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from flashtrie.datasets.real import GPT2_EOT, RealLibrary

from flashtrie.index import NarrowLoudsIndex
from flashtrie.proposals import Proposals
from flashtrie.stepwise import TrieStepper

from .records import Record
from .sweep import SweepContext, marisa_binary_trie, sweep_beam_width
from .workloads import Loaded

__all__ = ["real_workload", "size_records", "reachability_record", "stepwise_records", "run_library",
           "STEP_SHAPE", "REACH_CHUNK", "MAX_STEPS"]

STEP_SHAPE = (2, 70)  # batch x beams of the stepwise step
REACH_CHUNK = 65_536  # identifiers walked at once by the reachability check
MAX_STEPS = 64  # decoding steps of the workload at most
_REL_MEAN, _DIS_MEAN = 3.0, 0.0


def real_workload(lib: RealLibrary, num_queries: int, k: int, seed: int = 0, max_steps: int = MAX_STEPS) -> Loaded:
    """Proposals [Q, T, K] for ``num_queries`` of the library's queries (the model of the module docstring)."""
    rng = np.random.default_rng(seed)
    q_n = min(num_queries, len(lib.query_texts))
    picks = np.sort(rng.choice(len(lib.query_texts), size=q_n, replace=False))
    rel = [lib.relevant[int(i)] for i in picks]
    lengths = lib.keywords.lengths
    t_n = min(max(int(lengths[r].max()) for r in rel), max_steps) if rel else 0
    freq = np.bincount(lib.keywords.tokens, minlength=1).astype(np.float64)
    vocab_nz = np.flatnonzero(freq)
    log_f = np.log(freq[vocab_nz])
    tokens = np.zeros((q_n, t_n, k), dtype=np.uint32)
    logits = np.zeros((q_n, t_n, k), dtype=np.float64)
    for qi, r in enumerate(rel):
        for t in range(t_n):
            live = r[lengths[r] > t]
            good = np.unique(lib.keywords.tokens[lib.keywords.offsets[live] + t])
            g_logit = rng.normal(_REL_MEAN, 1.0, size=good.size)
            if good.size > k:
                keep = np.argsort(-g_logit, kind="stable")[:k]
                good, g_logit = good[keep], g_logit[keep]
            need = k - good.size
            keys = log_f + rng.gumbel(size=log_f.size)
            cand = vocab_nz[np.argsort(-keys, kind="stable")[: need + good.size]]
            bad = cand[~np.isin(cand, good)][:need]
            row_tok = np.concatenate([good, bad])
            row_logit = np.concatenate([g_logit, rng.normal(_DIS_MEAN, 1.0, size=bad.size)])
            if row_tok.size < k:  # a library with fewer distinct tokens than K: pad the row
                row_tok = np.concatenate([row_tok, np.full(k - row_tok.size, 2**32 - 1, dtype=np.int64)])
                row_logit = np.concatenate([row_logit, np.full(k - row_logit.size, -np.inf)])
            order = np.argsort(-row_logit, kind="stable")
            tokens[qi, t], logits[qi, t] = row_tok[order], row_logit[order]
    finite = np.isfinite(logits)
    m = np.where(finite, logits, -np.inf).max(axis=-1, keepdims=True)
    lse = m + np.log(np.where(finite, np.exp(logits - m), 0.0).sum(axis=-1, keepdims=True))
    logprobs = np.where(finite, logits - lse, -np.inf).astype(np.float32)
    params = {"name": f"real:{lib.name}", "model": "relevant tokens + frequency-drawn distractors (see "
              "flashtrie.harness.real_libraries)", "seed": seed, "num_queries": q_n, "K": k, "T": t_n,
              "relevant_logit": [_REL_MEAN, 1.0], "distractor_logit": [_DIS_MEAN, 1.0],
              "mean_relevant": float(np.mean([r.size for r in rel])) if rel else 0.0,
              "queries_sample": [lib.query_texts[int(i)] for i in picks[:8]]}
    return Loaded(Proposals(tokens, logprobs), rel, params)


def _file_bytes(save: Callable[[str], None]) -> int:
    with tempfile.TemporaryDirectory(prefix="flashtrie-real-") as d:
        p = os.path.join(d, "f")
        save(p)
        return os.path.getsize(p)


def _map_bytes(n: int) -> int:
    """A key-id -> identifier-id array for ``n`` identifiers, bit-packed."""
    return math.ceil(n * max(1, (n - 1).bit_length()) / 8)


def _timed(f: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    obj = f()
    return obj, time.perf_counter() - t0


def size_records(ctx: SweepContext, lib: RealLibrary, workload: dict[str, Any]) -> tuple[list[Record], Any]:
    """One ``build`` record per structure (module docstring); returns them and the index (``ids="input"``)."""
    import marisa_trie

    n = len(lib)
    sizes: dict[str, tuple[int, int, float]] = {}  # structure -> (bytes without map, with map, build s)
    plain, _ = _timed(lambda: NarrowLoudsIndex.build(lib.keywords, ids="index"))
    index, build_s = _timed(lambda: NarrowLoudsIndex.build(lib.keywords, ids="input"))
    sizes["narrow-louds"] = (_file_bytes(plain.save), _file_bytes(index.save), build_s)
    del plain
    strings, s_build = _timed(lambda: marisa_trie.Trie(lib.texts))
    s_bytes = _file_bytes(strings.save)
    sizes["marisa-trie-strings"] = (s_bytes, s_bytes + _map_bytes(n), s_build)
    del strings
    tokens, _, t_build = marisa_binary_trie(lib.keywords)
    t_bytes = _file_bytes(tokens.save)
    sizes["marisa-trie-tokens"] = (t_bytes, t_bytes + _map_bytes(n), t_build)
    del tokens
    text_bytes = sum(len(t.encode("utf-8")) for t in lib.texts)
    base = sizes["marisa-trie-tokens"]
    out = []
    for name, (without, with_map, secs) in sizes.items():
        metrics = {"bytes": with_map, "bytes_without_id_map": without, "id_map_bytes": with_map - without,
                   "bytes_per_keyword": with_map / n, "bytes_per_keyword_without_id_map": without / n,
                   "build_s": secs, "unique_keywords": n, "text_bytes": text_bytes,
                   "token_count": int(lib.keywords.tokens.size),
                   "size_ratio_vs_marisa_tokens": with_map / base[1],
                   "size_ratio_vs_marisa_tokens_without_id_map": without / base[0]}
        if name == "narrow-louds":
            metrics["nodes"] = int(index.num_nodes)
        out.append(ctx.record(kind="build", backend=name, sweep="real-size", workload=workload,
                              config={"num_keywords": n}, metrics=metrics))
    ctx.emit(out)
    return out, index


def reachability_record(ctx: SweepContext, lib: RealLibrary, index: Any, workload: dict[str, Any]) -> Record:
    """Walk every identifier's tokens from the root (`TrieStepper.walk`, in chunks): each must end at a
    keyword whose id is the identifier's; plus `NarrowLoudsIndex.lookup` on 1,000 seeded identifiers."""
    ks, stepper = lib.keywords, TrieStepper(index)
    t0 = time.perf_counter()
    bad: list[int] = []
    for a in range(0, len(ks), REACH_CHUNK):
        ids = np.arange(a, min(a + REACH_CHUNK, len(ks)))
        lens = ks.lengths[ids]
        rows = np.zeros((ids.size, int(lens.max())), dtype=np.int64)
        cols = np.arange(rows.shape[1])
        inside = cols[None, :] < lens[:, None]
        rows[inside] = ks.tokens[(ks.offsets[ids][:, None] + cols[None, :])[inside]]
        st = stepper.walk(rows, end=lens)
        found = np.full(ids.size, -1, dtype=np.int64)
        at = stepper.ends(st)
        found[at] = index.keyword_ids_of(np.asarray(st.node)[at])
        bad += ids[found != ids].tolist()
    walk_s = time.perf_counter() - t0
    sample = np.random.default_rng(0).choice(len(ks), size=min(1000, len(ks)), replace=False)
    bad += [int(i) for i in sample if index.lookup(ks[int(i)]) != int(i)]
    msg = None
    if bad:
        i = bad[0]
        msg = f"{len(bad)} identifiers not reached; first: {i} {lib.texts[i]!r} tokens {ks[i].tolist()}"
    rec = ctx.record(kind="search", backend="numpy", status="mismatch" if bad else "ok", message=msg,
                     sweep="real-reachability", workload=workload, config={"num_keywords": len(ks)},
                     metrics={"identifiers": len(ks), "reached": len(ks) - len(set(bad)), "walk_s": walk_s,
                              "lookup_sample": int(sample.size)})
    ctx.emit([rec])
    return rec


def _eos_vocab(lib: RealLibrary) -> tuple[int, int]:
    """(EOS, vocabulary size): GPT-2's end-of-text and 50,257, or for another tokenizer the id after the
    library's largest token."""
    top = int(lib.keywords.tokens.max())
    eos = GPT2_EOT if lib.params.get("tokenizer") == "gpt2" and top < GPT2_EOT else top + 1
    return eos, eos + 1


def stepwise_records(ctx: SweepContext, lib: RealLibrary, index: Any, workload: dict[str, Any], backend: str,
                     repeats: int) -> list[Record]:
    """The 2 x 70 step: numpy `TrieStepper.advance_mask` (host wall time per call) or, for ``gpu``, the
    GPU stepper's timings of `flashtrie.harness.stepwise.measure.gpu_step_metrics`; rows at the root, and
    rows inside seeded identifiers whose next token is the identifier's."""
    from .stepwise.cases import sample_rows
    from .stepwise.measure import gpu_step_metrics
    from .timing import sample_stats

    b, k = STEP_SHAPE
    eos, vocab = _eos_vocab(lib)
    cpu = TrieStepper(index)
    gpu = None
    if backend == "gpu":
        from flashtrie.gpu_impl.stepwise import GpuTrieStepper

        gpu = GpuTrieStepper(index)
    out = []
    for root in (True, False):
        prefixes, nxt = sample_rows(lib.keywords, b * k, root, seed=b * k)
        states = cpu.start_from_prefixes(prefixes)
        cfg = {"batch": b, "beams": k, "rows": b * k, "states": "root" if root else "mid-keyword",
               "vocab_size": vocab, "eos": eos}
        try:
            if gpu is not None:
                m = gpu_step_metrics(gpu, states, nxt, vocab, eos, repeats, parts=False)
            else:
                logits = np.random.default_rng(0).normal(size=(b * k, vocab)).astype(np.float32)
                cpu.advance_mask(states, nxt, vocab, eos, out=logits.copy())  # warm-up
                host = []
                for _ in range(repeats):
                    buf = logits.copy()
                    t0 = time.perf_counter()
                    cpu.advance_mask(states, nxt, vocab, eos, out=buf)
                    host.append((time.perf_counter() - t0) * 1e6)
                m = {"host_fused_us": sample_stats(host), "repeats": repeats}
            out.append(ctx.record(kind="latency", backend=f"{backend}-stepwise", sweep="real-stepwise",
                                  workload=workload, config=cfg, metrics=m))
        except Exception as e:  # noqa: BLE001 - one failed case is recorded, the run goes on
            out.append(ctx.record(kind="latency", backend=f"{backend}-stepwise", status="error",
                                  message=f"{type(e).__name__}: {e}", sweep="real-stepwise", workload=workload,
                                  config=cfg))
    ctx.emit(out)
    return out


def library_params(lib: RealLibrary) -> dict[str, Any]:
    """What the records say about the library."""
    return {"name": lib.name, "num_keywords": len(lib), "num_queries": len(lib.query_texts),
            "max_length": lib.keywords.max_length, "tokens": int(lib.keywords.tokens.size),
            **{k: lib.params.get(k) for k in ("source", "version", "identifier", "queries", "tokenizer")}}


def run_library(ctx: SweepContext, lib: RealLibrary, backends: Sequence[str], beams: Sequence[int], num_queries: int,
                seed: int, step_repeats: int, sizes: bool = True) -> list[Record]:
    """Every measurement of the module on one library; records are emitted as they are made."""
    start = len(ctx.records)
    ctx.library = library_params(lib)
    wl = {"keywords": ctx.library, "num_keywords": len(lib)}
    if sizes:
        _, index = size_records(ctx, lib, wl)
    else:
        index = NarrowLoudsIndex.build(lib.keywords)
    reachability_record(ctx, lib, index, wl)
    workload = real_workload(lib, num_queries, max(beams), seed)
    sweep_beam_width(ctx, lib.keywords, index, workload, backends, beams=beams)
    for b in [b for b in ("numpy", "gpu") if b in backends]:
        stepwise_records(ctx, lib, index, wl, b, step_repeats)
    return ctx.records[start:]
