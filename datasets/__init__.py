"""flashtrie.datasets: synthetic keyword libraries and query workloads, and their ``.npz`` files.

* `generate_keywords` / `KeywordParams`: a realistic keyword library (Zipf tokens, heavy-tailed
  fan-out, shared prefixes), vectorised (millions of keywords per second).
* `generate_queries` / `QueryParams` / `QueryWorkload`: model proposals [Q, T, K] with ground-truth
  relevant keywords, presets ``dense`` (full beams) and ``sparse`` (mostly random tokens).
* `save_keywords` / `load_keywords` / `save_workload` / `load_workload`: ``.npz`` files with the
  generating parameters inside; a wrong or damaged file raises `flashtrie.InputError`.
* `keyword_stats`: structure statistics of a library (fan-out, prefixes per depth, duplicates).
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
