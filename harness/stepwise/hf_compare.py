"""The stepwise suite's comparisons with transformers: one processor call against the dict-trie callback of
`PrefixConstrainedLogitsProcessor`, and ``generate()`` of a tiny random GPT-2 with each."""

from __future__ import annotations

import gc
import statistics
import time
from typing import Any

from flashtrie import NarrowLoudsIndex

from .cases import dict_prefix_fn

__all__ = ["hf_metrics", "generate_metrics", "GENERATE_ROUNDS"]

def _dev() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


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
