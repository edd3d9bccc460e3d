"""flashtrie.datasets: synthetic keyword libraries and query workloads, and their ``.npz`` files.

* `generate_keywords` / `KeywordParams`: a realistic keyword library (Zipf tokens, heavy-tailed
  fan-out, shared prefixes), vectorised (millions of keywords per second).
* `generate_queries` / `QueryParams` / `QueryWorkload`: model proposals [Q, T, K] with ground-truth
  relevant keywords, presets ``dense`` (full beams) and ``sparse`` (mostly random tokens).
* `save_keywords` / `load_keywords` / `save_workload` / `load_workload`: ``.npz`` files with the
  generating parameters inside; a wrong or damaged file raises `flashtrie.InputError`.
* `keyword_stats`: structure statistics of a library (fan-out, prefixes per depth, duplicates).

Generator versions (the ``generator`` field of the stored parameters): version 2 is the default of both
generators: the same models and laws as version 1, other numbers for a
given seed.  Keywords: fixed chunks with streams of their own, on threads (the output does not depend on
the thread count).  Queries: per-query work proportional to K, not to the library (see
`datasets._queries_v2`).  Version 1 stays available (``generator="flashtrie.datasets.keywords/1"`` /
``"flashtrie.datasets.queries/1"``) and reproduces the files and numbers made before.
"""

from __future__ import annotations

from .io import (
    FORMAT_VERSION,
    KEYWORDS_FORMAT,
    WORKLOAD_FORMAT,
    LoadedKeywords,
    load_keywords,
    load_workload,
    save_keywords,
    save_workload,
)
from .keywords import KeywordParams, generate_keywords, generate_keywords_from, keyword_stats
from .queries import PRESETS, QueryParams, QueryWorkload, generate_queries, generate_queries_from, library_fingerprint

__all__ = [
    "KeywordParams", "generate_keywords", "generate_keywords_from", "keyword_stats",
    "PRESETS", "QueryParams", "QueryWorkload", "generate_queries", "generate_queries_from", "library_fingerprint",
    "LoadedKeywords", "save_keywords", "load_keywords", "save_workload", "load_workload",
    "KEYWORDS_FORMAT", "WORKLOAD_FORMAT", "FORMAT_VERSION",
]
