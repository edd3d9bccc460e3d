"""The ranked-retrieval metrics of the quality measurements, defined once: Precision@k, Recall@k,
nDCG@k and exact match (hit@1) of one query; their means with 95% bootstrap intervals over queries; and
the paired bootstrap of a difference between two runs on the same queries.

Conventions (each checked by a hand-computed test):

* **The ranked list** is taken in the order given (the search's order breaks ties; no re-sorting).  An id
  < 0 is padding and ends the list.  The list is **deduplicated explicitly**: a repeated id keeps its first
  rank and its repeats are removed (the list closes up).  Ids in ``exclude`` are removed the same way (the
  "filtered" setting: a query's known answers from other splits are neither hits nor misses).
* Precision@k = (relevant ids among the first k) / k, whatever the list's length: a list shorter than k
  counts its missing slots as misses.
* Recall@k = (relevant ids among the first k) / |relevant|.
* nDCG@k = DCG@k / ideal DCG@k with binary gains: DCG@k = sum over relevant ids at 1-based ranks r <= k of
  1 / log2(r + 1); the ideal ranks min(|relevant|, k) relevant ids first.
* A query with no relevant id has no recall and no nDCG (left out of those means); its precision is 0.
* Exact match = 1 when the first result is relevant (hit@1), else 0 (also for an empty list).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["KS", "METRIC_NAMES", "ranked", "query_metrics", "per_query", "mean_metrics", "bootstrap_ci",
           "paired_difference", "precision_ceiling", "BOOTSTRAP_SAMPLES"]

#: the cut-offs the quality measurements report
KS = (10, 100)
#: bootstrap resamples of the intervals
BOOTSTRAP_SAMPLES = 2000


def METRIC_NAMES(ks: Sequence[int] = KS) -> list[str]:  # noqa: N802 - a constant list per ks
    """The metric keys `query_metrics` returns, in report order."""
    return [f"{m}@{k}" for k in ks for m in ("precision", "recall", "ndcg")] + ["exact_match"]


def ranked(ids: Sequence[int] | np.ndarray, exclude: Iterable[int] = ()) -> list[int]:
    """The ranked list as the metrics read it: up to the first id < 0, repeats and ``exclude`` removed."""
    skip = set(int(x) for x in exclude)
    out: list[int] = []
    for x in np.asarray(ids, dtype=np.int64).tolist():
        if x < 0:
            break
        if x not in skip:
            out.append(x)
            skip.add(x)
    return out


def query_metrics(ids: Sequence[int] | np.ndarray, relevant: Sequence[int] | np.ndarray, ks: Sequence[int] = KS,
                  exclude: Iterable[int] = ()) -> dict[str, float | None]:
    """``precision@k``, ``recall@k`` and ``ndcg@k`` (None without relevant ids) per k, and ``exact_match``."""
    if any(k < 1 for k in ks):
        raise ValueError(f"ks: expected cut-offs >= 1, got {list(ks)}")
    rel = set(np.asarray(relevant, dtype=np.int64).tolist())
    hit = [x in rel for x in ranked(ids, exclude)]
    out: dict[str, float | None] = {}
    for k in ks:
        h = sum(hit[:k])
        out[f"precision@{k}"] = h / k
        out[f"recall@{k}"] = h / len(rel) if rel else None
        dcg = sum(1.0 / math.log2(r + 2) for r, x in enumerate(hit[:k]) if x)
        ideal = sum(1.0 / math.log2(r + 2) for r in range(min(len(rel), k)))
        out[f"ndcg@{k}"] = dcg / ideal if rel else None
    out["exact_match"] = float(bool(hit) and hit[0])
    return out


def per_query(results: Sequence[Sequence[int] | np.ndarray], relevant: Sequence[Sequence[int] | np.ndarray],
              ks: Sequence[int] = KS, exclude: Sequence[Iterable[int]] | None = None
              ) -> dict[str, list[float | None]]:
    """Each metric's value per query (None where a query does not define it)."""
    if len(results) != len(relevant):
        raise ValueError(f"results: {len(results)} ranked lists for {len(relevant)} relevant sets")
    if exclude is not None and len(exclude) != len(results):
        raise ValueError(f"exclude: {len(exclude)} sets for {len(results)} ranked lists")
    per = [query_metrics(r, g, ks, () if exclude is None else exclude[i])
           for i, (r, g) in enumerate(zip(results, relevant, strict=True))]
    return {key: [p[key] for p in per] for key in METRIC_NAMES(ks)}


def bootstrap_ci(values: Sequence[float | None], samples: int = BOOTSTRAP_SAMPLES, seed: int = 0,
                 level: float = 0.95) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean of ``values`` (None left out) over resampled queries;
    (nan, nan) when no value is defined."""
    x = np.array([v for v in values if v is not None], dtype=np.float64)
    if x.size == 0:
        return float("nan"), float("nan")
    idx = np.random.default_rng(seed).integers(0, x.size, size=(samples, x.size))
    means = x[idx].mean(axis=1)
    a = (1 - level) / 2
    return float(np.quantile(means, a)), float(np.quantile(means, 1 - a))


def paired_difference(a: Sequence[float | None], b: Sequence[float | None], samples: int = BOOTSTRAP_SAMPLES,
                      seed: int = 0, level: float = 0.95) -> tuple[float, float, float]:
    """Mean of b - a over the queries both define, and its paired percentile bootstrap interval
    (the same resampled queries for both runs)."""
    if len(a) != len(b):
        raise ValueError(f"b: {len(b)} per-query values against {len(a)}; a paired difference needs the same queries")
    d = [y - x for x, y in zip(a, b, strict=True) if x is not None and y is not None]
    lo, hi = bootstrap_ci(d, samples, seed, level)
    return (float(np.mean(d)) if d else float("nan")), lo, hi


def mean_metrics(results: Sequence[Sequence[int] | np.ndarray], relevant: Sequence[Sequence[int] | np.ndarray],
                 ks: Sequence[int] = KS, exclude: Sequence[Iterable[int]] | None = None, *,
                 intervals: bool = False) -> dict[str, float | list[float]]:
    """Each metric's mean over the queries that define it (NaN when none does), ``mean_results`` (after
    dedup and ``exclude``), and with ``intervals`` each metric's 95% bootstrap interval as ``KEY_ci``."""
    per = per_query(results, relevant, ks, exclude)
    out: dict[str, float | list[float]] = {}
    for key, vals in per.items():
        got = [v for v in vals if v is not None]
        out[key] = float(np.mean(got)) if got else float("nan")
        if intervals:
            out[f"{key}_ci"] = list(bootstrap_ci(vals))
    lists = [ranked(r, () if exclude is None else exclude[i]) for i, r in enumerate(results)]
    out["mean_results"] = float(np.mean([len(x) for x in lists])) if lists else float("nan")
    return out


def precision_ceiling(relevant: Sequence[Sequence[int] | np.ndarray], k: int) -> float:
    """The best mean Precision@k any ranking could reach: every relevant id first, min(|relevant|, k) / k
    per query (a query with 3 relevant ids has P@100 at most 0.03)."""
    if not len(relevant):
        return float("nan")
    return float(np.mean([min(len(set(np.asarray(r, dtype=np.int64).tolist())), k) / k for r in relevant]))
