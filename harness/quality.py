"""Retrieval quality vs beam width on generated workloads with ground truth (records of kind
``synthetic-quality``): trie-constrained search vs unconstrained decoding then filtering.

Metrics, per query q with ground truth G_q (the workload's ``relevant`` ids, mapped to the id a search
returns for an identical keyword) and results ranked best first: Precision@k, Recall@k, nDCG@k and hit@1 as
`flashtrie.harness.quality_metrics` defines them (their one definition), averaged over queries.
The unconstrained baseline is defined in
`flashtrie.harness.unconstrained.unconstrained_search`: beam search over the raw proposals without the
trie, keeping the top-B sequences of each length by summed logprob, then keeping those that are whole
keywords.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from flashtrie.errors import InputError
from flashtrie.keywords import KeywordSet
from flashtrie.progress import progress as progress_bar
from flashtrie.search_types import SearchConfig, SearchResult

from .quality_metrics import mean_metrics
from .records import Record
from .unconstrained import KeywordTable, unconstrained_search
from .workloads import relevant_sets, truncate_proposals, workload_params

__all__ = ["quality_sweep"]


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
                records.append(make_record(kind="synthetic-quality", backend=backend, status="error",
                                           message=f"{type(e).__name__}: {e}", sweep="beam_width",
                                           workload=wl, config={**config, "mode": mode}))
                continue
            lists = [res.keyword_ids[q, :int(res.num_results[q])] for q in range(res.shape[0])]
            metrics: dict[str, Any] = {"mean_results": float(res.num_results.mean()),
                                       **mean_metrics(lists, canon, [int(k) for k in ks])}
            records.append(make_record(kind="synthetic-quality", backend=backend, sweep="beam_width", workload=wl,
                                       config={**config, "mode": mode}, metrics=metrics))
    return records
