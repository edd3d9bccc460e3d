"""Retrieval quality vs beam width: trie-constrained search vs unconstrained decoding then filtering.

Metrics, per query q with ground truth G_q (the workload's ``relevant`` ids, mapped to the id a search
returns for an identical keyword) and results ranked best first:

* Precision@k = |top-k ∩ G_q| / k  (missing results count as misses, so a short result list is penalised);
* Recall@k    = |top-k ∩ G_q| / |G_q|  (queries with empty G_q are left out of the mean).

Both are averaged over queries.  The unconstrained baseline is defined in
`flashtrie.harness.unconstrained.unconstrained_search`: beam search over the raw proposals without the
trie, keeping the top-B sequences of each length by summed logprob, then keeping those that are whole
keywords.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from flashtrie.errors import InputError
from flashtrie.keywords import KeywordSet
from flashtrie.progress import progress as progress_bar
from flashtrie.search_types import SearchConfig, SearchResult

from .records import Record
from .unconstrained import KeywordTable, unconstrained_search
from .workloads import relevant_sets, truncate_proposals, workload_params

__all__ = ["precision_recall_at_k", "quality_sweep"]


def precision_recall_at_k(result: SearchResult, relevant: Sequence[np.ndarray], k: int) -> tuple[float, float]:
    """Mean Precision@k and Recall@k of ``result`` against per-query relevant id sets."""
    if k < 1:
        raise ValueError(f"k: expected >= 1, got {k}")
    precisions, recalls = [], []
    for q in range(result.shape[0]):
        g = np.unique(np.asarray(relevant[q], dtype=np.int64))
        g = g[g >= 0]
        n = min(int(result.num_results[q]), k)
        hits = int(np.isin(result.keyword_ids[q, :n], g).sum()) if n else 0
        precisions.append(hits / k)
        if g.size:
            recalls.append(hits / g.size)
    p = float(np.mean(precisions)) if precisions else float("nan")
    r = float(np.mean(recalls)) if recalls else float("nan")
    return p, r


def quality_sweep(keywords: KeywordSet, workload: Any, searcher: Any, beams: Sequence[int], ks: Sequence[int],
                  *, make_record: Callable[..., Record], length_norm: float = 0.0,
                  progress: bool = True) -> list[Record]:
    """For each beam width B (K = B proposals per row, at most the workload's K), search with ``searcher``
    (constrained) and with the unconstrained baseline, and record Precision@k / Recall@k for every k.

    ``make_record(kind=..., backend=..., ...)`` fills in the run-wide fields (env, command, run id).
    """
    rel = relevant_sets(workload)
    if rel is None:
        raise InputError("the workload has no ground truth (relevant ids); quality needs a .npz from gen-queries")
    table = KeywordTable(keywords)
    canon = [table.canonical_ids(r[(r >= 0) & (r < len(keywords))]) if r.size else r for r in rel]
    records: list[Record] = []
    base_params = {**workload_params(workload), "num_keywords": len(keywords)}
    for b in progress_bar(list(beams), desc="quality vs beam width", disable=not progress, unit="beam"):
        props = truncate_proposals(workload.proposals, b)
        cfg = SearchConfig(beam_width=int(b), length_norm=length_norm)
        config = {"beam_width": int(b), "max_results": cfg.results, "K": props.shape[2], "length_norm": length_norm}
        wl = {**base_params, "K_used": props.shape[2]}
        runs: list[tuple[str, str, Callable[[], SearchResult]]] = [
            (str(getattr(searcher, "name", "constrained")), "constrained",
             partial(searcher.search, props, cfg)),
            ("unconstrained", "unconstrained+filter", partial(unconstrained_search, table, props, cfg)),
        ]
        for backend, mode, run in runs:
            try:
                res = run()
            except Exception as e:  # noqa: BLE001 - recorded as an error
                records.append(make_record(kind="quality", backend=backend, status="error",
                                           message=f"{type(e).__name__}: {e}", sweep="beam_width",
                                           workload=wl, config={**config, "mode": mode}))
                continue
            metrics: dict[str, Any] = {"mean_results": float(res.num_results.mean())}
            for k in ks:
                p, r = precision_recall_at_k(res, canon, int(k))
                metrics[f"precision@{k}"] = p
                metrics[f"recall@{k}"] = r
            records.append(make_record(kind="quality", backend=backend, sweep="beam_width", workload=wl,
                                       config={**config, "mode": mode}, metrics=metrics))
    return records
