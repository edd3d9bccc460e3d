"""Brute-force oracle of docs/semantics.md, for tests only.

A literal, deliberately naive reading of the contract: a set of every keyword prefix (as tuples), a dict
from whole keyword to its smallest id, float32 arithmetic on numpy scalars, Python tuple sort keys and
float64 threshold comparisons.  It shares no code with any backend (no ``flashtrie.scoring``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from flashtrie import KeywordSet, Proposals, SearchConfig, SearchResult

__all__ = ["OracleTrie", "oracle_search", "length_norm"]

PAD = 2**32 - 1


class OracleTrie:
    """Every keyword prefix as a tuple, which prefixes have a child, and whole keyword -> smallest id."""

    def __init__(self, keywords: KeywordSet) -> None:
        self.prefixes: set[tuple[int, ...]] = set()
        self.whole: dict[tuple[int, ...], int] = {}
        for i, kw in enumerate(keywords.to_sequences()):
            key = tuple(int(x) for x in kw)
            if key not in self.whole:
                self.whole[key] = i
            for length in range(1, len(key) + 1):
                self.prefixes.add(key[:length])
        self.parents: set[tuple[int, ...]] = {p[:-1] for p in self.prefixes}

    def is_prefix(self, h: tuple[int, ...]) -> bool:
        """True when ``h`` is a prefix of at least one keyword (the empty tuple is, if any keyword exists)."""
        return h in self.prefixes or (h == () and bool(self.prefixes))

    def has_child(self, h: tuple[int, ...]) -> bool:
        return h in self.parents


def length_norm(alpha: float, length: int) -> np.float32:
    """LN[L] = fl32((6 / (5 + L)) ** alpha), computed in float64 and rounded once; alpha = 0 gives 1."""
    if float(alpha) == 0.0:
        return np.float32(1.0)
    return np.float32(math.pow(6.0 / (5.0 + length), float(alpha)))


def _search_one(trie: OracleTrie, tokens: np.ndarray, logprobs: np.ndarray, config: SearchConfig,
                prefix: tuple[int, ...]) -> list[tuple[int, np.float32, np.float32, int]]:
    """One query: the pool as (keyword id, s, n, length), sorted by pool key."""
    if not trie.is_prefix(prefix):
        return []
    tau = float(config.token_threshold)
    sigma = float(config.score_threshold)
    beam, results = config.beam_width, config.results
    steps, k_n = tokens.shape
    frontier: list[tuple[tuple[int, ...], np.float32]] = [(prefix, np.float32(0.0))]
    pool: list[tuple[tuple[float, int, int, int], int, np.float32, np.float32, int]] = []
    for t in range(steps):
        survivors: list[tuple[tuple[int, ...], np.float32, int, int]] = []
        for r, (h, s_h) in enumerate(frontier):
            for k in range(k_n):
                x = int(tokens[t, k])
                ell = np.float32(logprobs[t, k])
                if x == PAD:
                    continue
                if float(ell) <= tau:
                    continue
                c = h + (x,)
                if c not in trie.prefixes:
                    continue
                s = np.float32(s_h + ell)  # one float32 addition
                assert isinstance(s, np.float32)
                if float(s) <= sigma:
                    continue
                survivors.append((c, s, r, x))
        for c, s, r, x in survivors:
            if c in trie.whole:
                n = np.float32(s * length_norm(config.length_norm, len(c)))
                assert isinstance(n, np.float32)
                pool.append(((-float(n), t, r, x), trie.whole[c], s, n, len(c)))
        pool.sort(key=lambda e: e[0])
        del pool[results:]
        growing = [(((-float(s)), r, x), c, s) for c, s, r, x in survivors if trie.has_child(c)]
        growing.sort(key=lambda e: e[0])
        frontier = [(c, s) for _, c, s in growing[:beam]]
        if not frontier:
            break
    return [(kid, s, n, length) for _, kid, s, n, length in pool]


def oracle_search(keywords: KeywordSet | OracleTrie, proposals: Proposals, config: SearchConfig,
                  prefixes: Sequence[Sequence[int]] | None = None) -> SearchResult:
    """Run the contract literally on every query and return a padded `SearchResult`."""
    trie = keywords if isinstance(keywords, OracleTrie) else OracleTrie(keywords)
    q_n = proposals.num_queries
    if prefixes is not None and len(prefixes) != q_n:
        raise ValueError(f"prefixes: expected {q_n}, got {len(prefixes)}")
    out = SearchResult.empty(q_n, config.results)
    for q in range(q_n):
        prefix = tuple(int(x) for x in prefixes[q]) if prefixes is not None else ()
        with np.errstate(over="ignore", under="ignore"):  # -inf from overflow and subnormals are legitimate
            found = _search_one(trie, proposals.tokens[q], proposals.logprobs[q], config, prefix)
        for i, (kid, s, n, length) in enumerate(found):
            out.keyword_ids[q, i] = kid
            out.scores[q, i] = s
            out.norm_scores[q, i] = n
            out.lengths[q, i] = length
        out.num_results[q] = len(found)
    return out
