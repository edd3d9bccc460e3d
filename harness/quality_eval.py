"""Decoding the trained quality models at each beam width, constrained and unconstrained, and timing it.

* NAR (`nar_proposals`, `nar_sweep`): the head's per-step top-K (K = B) become `flashtrie.Proposals`; the
  searchers run them against the library with `EOS` appended to every identifier (so an identifier ends
  where the model puts `EOS`); the unconstrained baseline is `flashtrie.harness.unconstrained`'s beam search
  over the same proposals, then keeping whole identifiers.  Latency: the search alone, per query.
* AR (`ar_decode`): ``generate(num_beams=B, num_return_sequences=B, length_penalty=0)`` (results
  ranked by summed log-probability, like the searchers with ``length_norm`` 0), with
  `flashtrie.hf.TrieLogitsProcessor` (constrained) or without it (then non-identifiers are dropped).
  Latency: the whole ``generate`` call (model included) per query.

A beam of B returns B results per query (R = B), for both models.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from flashtrie.datasets.quality_tasks import EOS, PAD, SEP, Split, Task

from flashtrie.hf import generated_keywords
from flashtrie.index import NarrowLoudsIndex
from flashtrie.keywords import KeywordSet
from flashtrie.proposals import Proposals
from flashtrie.search_types import SearchResult

from .quality_train import pad_rows

__all__ = ["nar_library", "nar_proposals", "ranked_lists", "ar_decode", "eval_sample",
           "timed", "truncated"]



def eval_sample(split: Split, n: int, seed: int) -> np.ndarray:
    """Up to ``n`` query indices of ``split``, as many from each kind as it allows (seeded, sorted)."""
    kinds = split.kinds or [""] * len(split)
    groups: dict[str, list[int]] = {}
    for i, k in enumerate(kinds):
        groups.setdefault(k, []).append(i)
    rng = np.random.default_rng(seed)
    names = sorted(groups)
    chosen: list[int] = []
    left = n
    for j, k in enumerate(sorted(names, key=lambda k: len(groups[k]))):
        take = min(len(groups[k]), left // (len(names) - j))
        chosen += rng.choice(groups[k], size=take, replace=False).tolist()
        left -= take
    return np.array(sorted(chosen), dtype=np.int64)


def nar_library(task: Task) -> KeywordSet:
    """The identifiers with `EOS` appended: the NAR head scores where an identifier ends."""
    lib = task.library
    lengths = lib.lengths + 1
    off = np.zeros(len(lib) + 1, dtype=np.int64)
    np.cumsum(lengths, out=off[1:])
    tok = np.full(int(off[-1]), EOS, dtype=np.uint32)
    keep = np.ones(tok.size, dtype=bool)
    keep[off[1:] - 1] = False
    tok[keep] = lib.tokens
    return KeywordSet(tok, off)


@torch.no_grad()
def nar_proposals(model: torch.nn.Module, queries: list[np.ndarray], k_max: int, device: str,
                  batch: int = 256) -> tuple[np.ndarray, np.ndarray, float]:
    """Top-``k_max`` tokens (uint32) and log-probabilities (float32) per query and step, best first, never
    `PAD` or `SEP`; and the model's milliseconds per query."""
    toks, lps = [], []
    t0 = time.perf_counter()
    for a in range(0, len(queries), batch):
        logits = model(pad_rows(queries[a:a + batch]).to(device)).float()
        logits[..., PAD] = -torch.inf
        logits[..., SEP] = -torch.inf
        lp = torch.log_softmax(logits, dim=-1)
        v, i = torch.topk(lp, min(k_max, lp.shape[-1] - 2), dim=-1, sorted=True)
        toks.append(i.to(torch.int64).cpu().numpy().astype(np.uint32))
        lps.append(v.cpu().numpy().astype(np.float32))
    ms = (time.perf_counter() - t0) * 1e3 / max(1, len(queries))
    return np.concatenate(toks), np.concatenate(lps), ms


def truncated(tokens: np.ndarray, logprobs: np.ndarray, k: int) -> Proposals:
    """The top ``k`` proposals of each row (the arrays are sorted best first)."""
    return Proposals(np.ascontiguousarray(tokens[:, :, :k]), np.ascontiguousarray(logprobs[:, :, :k]))


def ranked_lists(result: SearchResult) -> list[np.ndarray]:
    """Each query's keyword ids, best first (padding dropped)."""
    return [result.keyword_ids[q, :int(result.num_results[q])] for q in range(result.shape[0])]


def timed(fn: Callable[..., Any], sync: bool) -> tuple[Any, float]:
    """``fn()`` and its wall seconds (CUDA synchronised before and after when ``sync``)."""
    if sync:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    if sync:
        torch.cuda.synchronize()
    return out, time.perf_counter() - t0



def _dedupe(ids: np.ndarray) -> np.ndarray:
    ids = ids[ids >= 0]
    _, first = np.unique(ids, return_index=True)
    return ids[np.sort(first)]


@torch.no_grad()
def ar_decode(model: Any, queries: Sequence[np.ndarray], index: NarrowLoudsIndex, beam: int, processor: Any | None,
              device: str, rows_per_call: int, max_new_tokens: int) -> tuple[list[np.ndarray], float]:
    """Beam search per query; (ranked identifier ids per query, wall seconds).  ``processor`` is a
    ``TrieLogitsProcessor`` (reset before each call) or None (unconstrained, then filtered)."""
    from transformers import LogitsProcessorList

    n_ret = beam
    per_call = max(1, rows_per_call // beam)
    out: list[np.ndarray] = []
    sync = device.startswith("cuda")
    total = 0.0
    beam_args = {"length_penalty": 0.0, "early_stopping": True} if beam > 1 else {}
    for a in range(0, len(queries), per_call):
        src = pad_rows(list(queries[a:a + per_call])).to(device)
        procs = LogitsProcessorList([processor]) if processor is not None else None
        if processor is not None:
            processor.reset()
        seqs, secs = timed(lambda src=src, procs=procs: model.generate(
            input_ids=src, attention_mask=src != PAD, num_beams=beam, num_return_sequences=n_ret,
            max_new_tokens=max_new_tokens, do_sample=False, logits_processor=procs, pad_token_id=PAD,
            eos_token_id=EOS, decoder_start_token_id=SEP, **beam_args), sync)
        total += secs
        ids = generated_keywords(index, seqs, EOS, 1).reshape(-1, n_ret)
        out += [_dedupe(row) for row in ids]
    return out, total
