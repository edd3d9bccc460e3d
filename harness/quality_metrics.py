"""Ranked-retrieval metrics of one query and their means: Precision@k, Recall@k, exact match (hit@1).

Conventions (each checked by a hand-computed test):

* The ranked list is taken as given: ties in score are already broken by the search's order (its keys
  are total), so the metric never re-sorts; ids < 0 are padding and end the list.
* A repeated id counts once, at its first rank; the repeat still takes its slot among the top k.
* Precision@k = (relevant ids among the first k) / k, whatever the list's length: a list shorter than k
  counts its missing slots as misses.
* Recall@k = (relevant ids among the first k) / |relevant|; a query with no relevant id has no recall and
  is left out of the recall mean (its precision is 0).
* Exact match = 1 when the first result is relevant (hit@1), else 0 (also for an empty list).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["hits_at_k", "query_metrics", "mean_metrics", "precision_ceiling", "KS"]

#: the cut-offs the quality measurements report
KS = (10, 100)


def _ranked(ids: Sequence[int] | np.ndarray) -> list[int]:
    out: list[int] = []
    for x in np.asarray(ids, dtype=np.int64).tolist():
        if x < 0:
            break
        out.append(x)
    return out


def hits_at_k(ids: Sequence[int] | np.ndarray, relevant: Sequence[int] | np.ndarray, k: int) -> int:
    """Distinct relevant ids among the first ``k`` entries of the ranked list ``ids``."""
    if k < 1:
        raise ValueError(f"k: expected >= 1, got {k}")
    rel = set(np.asarray(relevant, dtype=np.int64).tolist())
    top = _ranked(ids)[:k]
    return len(rel.intersection(top))


def query_metrics(ids: Sequence[int] | np.ndarray, relevant: Sequence[int] | np.ndarray,
                  ks: Sequence[int] = KS) -> dict[str, float | None]:
    """``precision@k``, ``recall@k`` (None without relevant ids) for each k, and ``exact_match``."""
    n_rel = len(set(np.asarray(relevant, dtype=np.int64).tolist()))
    out: dict[str, float | None] = {}
    for k in ks:
        h = hits_at_k(ids, relevant, k)
        out[f"precision@{k}"] = h / k
        out[f"recall@{k}"] = h / n_rel if n_rel else None
    out["exact_match"] = float(hits_at_k(ids, relevant, 1))
    return out


def mean_metrics(results: Sequence[Sequence[int] | np.ndarray], relevant: Sequence[Sequence[int] | np.ndarray],
                 ks: Sequence[int] = KS) -> dict[str, float]:
    """Each metric's mean over the queries that define it (NaN when none does), and ``mean_results``."""
    if len(results) != len(relevant):
        raise ValueError(f"results: {len(results)} ranked lists for {len(relevant)} relevant sets")
    per = [query_metrics(r, g, ks) for r, g in zip(results, relevant, strict=True)]
    keys = [f"{m}@{k}" for k in ks for m in ("precision", "recall")] + ["exact_match"]
    out = {}
    for key in keys:
        vals = [v for p in per if (v := p[key]) is not None]
        out[key] = float(np.mean(vals)) if vals else float("nan")
    out["mean_results"] = float(np.mean([len(_ranked(r)) for r in results])) if results else float("nan")
    return out


def precision_ceiling(relevant: Sequence[Sequence[int] | np.ndarray], k: int) -> float:
    """The best mean Precision@k any ranking could reach: every relevant id first, min(|relevant|, k) / k
    per query (a query with 3 relevant ids has P@100 at most 0.03)."""
    if not len(relevant):
        return float("nan")
    return float(np.mean([min(len(set(np.asarray(r, dtype=np.int64).tolist())), k) / k for r in relevant]))
