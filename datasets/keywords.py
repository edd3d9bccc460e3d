"""Synthetic keyword libraries with the shape of real ad-keyword libraries.

The library is grown top-down as a prefix tree, one depth at a time, for all keywords at once:

* every keyword draws its length from ``length_weights`` (lengths 1, 2, ...);
* at each depth a keyword that goes on past it picks a *child slot* of its current prefix from a
  Zipf-Mandelbrot law, ``P(slot >= k) = (1 + k / q_d) ** -alpha_d``: the more keywords pass through a
  prefix, the more distinct children it gets (roughly ``m ** (1 / (1 + alpha_d))`` for m keywords), so
  fan-out is heavy-tailed (a few huge nodes, most nodes small) and prefixes are shared;
* a keyword that ends at this depth takes a slot no other keyword ending under the same prefix takes:
  the r-th of them gets a slot in ``[r * leaf_gap, (r + 1) * leaf_gap)``, so the keywords under a prefix
  are its most popular continuations, and the library has no accidental duplicates (real libraries are
  sets) while slots stay below ``vocab_size`` (a vocabulary much smaller than the default 2.2M wraps
  slots around it, and then duplicates do occur; `flashtrie.NarrowLoudsIndex.build` collapses them and
  ``flashtrie gen-keywords`` reports how many); ``duplicate_fraction`` adds exact copies on purpose;
* at the root, slot k is token k (token id = popularity rank of first tokens); below, slot k of prefix h
  is mapped to a token by a bijection keyed on h (`_keyword_model.sibling_tokens`), so siblings always differ, equal
  prefixes always get the same children, and over the library token frequency falls as ``1 / id``.

Everything is vectorised numpy (a few passes and one sort per depth); nothing loops per keyword.
Version 2 (the default, `datasets._keywords_v2`) draws the same model over fixed chunks on threads;
version 1 (``generator="flashtrie.datasets.keywords/1"``, `datasets._keywords_v1`) is kept so that old seeds
reproduce; the model's shared pieces are `datasets._keyword_model`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flashtrie.keywords import KeywordSet

from ._hashing import depth_prefix_hashes, full_keyword_hashes
from ._keyword_model import DEFAULT_EXPONENTS, DEFAULT_OFFSETS, DEFAULT_WEIGHTS, GENERATORS, VERSION_2, KeywordParams
from ._keywords_v1 import generate_v1
from ._keywords_v2 import generate_v2

__all__ = ["GENERATORS", "KeywordParams", "generate_keywords", "generate_keywords_from", "keyword_stats",
           "generation_peak_bytes"]

#: Generating a library, peak per keyword (95 to 137 measured with tracemalloc at 50k to 800k keywords, with room
#: for the write).
PEAK_BYTES_PER_KEYWORD = 160


def generation_peak_bytes(n: int) -> int:
    """Estimated peak memory of generating ``n`` keywords (`generate_keywords`), for checks before the work."""
    return n * PEAK_BYTES_PER_KEYWORD







def generate_keywords(
    n: int,
    *,
    vocab_size: int = 2_200_000,
    seed: int = 0,
    length_weights: tuple[float, ...] = DEFAULT_WEIGHTS,
    fanout_exponents: tuple[float, ...] = DEFAULT_EXPONENTS,
    fanout_offsets: tuple[float, ...] = DEFAULT_OFFSETS,
    leaf_gap: float = 2.0,
    sibling_windows_log2: tuple[int, int] = (8, 20),
    duplicate_fraction: float = 0.0,
    generator: str = VERSION_2,
    threads: int | None = None,
) -> KeywordSet:
    """Generate ``n`` keywords (lengths 1..len(length_weights), weighted), deterministic in ``seed``.

    See the module docstring for the model and `KeywordParams` for the parameters.  ``threads`` (version 2;
    default: every usable core) changes the speed, never the output.
    """
    return generate_keywords_from(KeywordParams(
        n=n, vocab_size=vocab_size, seed=seed, length_weights=length_weights, fanout_exponents=fanout_exponents,
        fanout_offsets=fanout_offsets, leaf_gap=leaf_gap, sibling_windows_log2=sibling_windows_log2,
        duplicate_fraction=duplicate_fraction, generator=generator), threads=threads)


def generate_keywords_from(params: KeywordParams, *, threads: int | None = None) -> KeywordSet:
    """Generate the keyword library described by ``params`` (its ``generator`` version picks the code)."""
    if params.generator == VERSION_2:
        return generate_v2(params, threads)
    return generate_v1(params)










def keyword_stats(keywords: KeywordSet, *, max_depth: int | None = None) -> dict[str, Any]:
    """Structure statistics of a library: lengths, duplicates, distinct prefixes and fan-out per depth.

    ``fanout[d]`` describes the number of distinct children of the distinct prefixes of length d
    (d = 0 is the root), over prefixes that have at least one child.
    """
    n = len(keywords)
    lengths = keywords.lengths
    full = full_keyword_hashes(keywords)
    distinct = int(np.unique(full).size) if n else 0
    per_depth = depth_prefix_hashes(keywords, max_depth)
    prefixes: list[int] = []
    fanout: list[dict[str, float]] = []
    prev_unique: np.ndarray | None = None
    parent_of: np.ndarray | None = None
    for d, (ids, h) in enumerate(per_depth):
        uniq, first = np.unique(h, return_index=True)
        prefixes.append(int(uniq.size))
        if d == 0:
            counts = np.array([uniq.size])
        else:
            assert prev_unique is not None and parent_of is not None
            # parent hash of each distinct child: the depth-(d-1) hash of any keyword through it
            parents = parent_of[first]
            counts = np.unique(parents, return_counts=True)[1]
        fanout.append(_describe(counts))
        # for the next depth: map each keyword of depth d + 1 to its depth-d prefix hash
        if d + 1 < len(per_depth):
            nxt_ids = per_depth[d + 1][0]
            parent_of = h[np.searchsorted(ids, nxt_ids)]
        prev_unique = uniq
    return {
        "keywords": n,
        "tokens": int(keywords.tokens.size),
        "distinct_keywords": distinct,
        "duplicates": n - distinct,
        "length_histogram": np.bincount(lengths)[1:].tolist() if n else [],
        "distinct_tokens": int(np.unique(keywords.tokens).size),
        "distinct_prefixes_per_depth": prefixes,
        "root_fanout": prefixes[0] if prefixes else 0,
        "fanout_per_depth": fanout,
    }


def _describe(counts: np.ndarray) -> dict[str, float]:
    c = np.sort(counts)
    return {
        "nodes": int(c.size),
        "mean": float(c.mean()),
        "p50": float(c[c.size // 2]),
        "p90": float(c[min(c.size - 1, int(c.size * 0.9))]),
        "p99": float(c[min(c.size - 1, int(c.size * 0.99))]),
        "max": int(c[-1]),
        "frac_1": float(np.mean(c == 1)),
    }
