"""Version 1 of the query generator: the library's views built whole, each query drawn over them (per-query work
grows with the library; kept so that old seeds reproduce)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from flashtrie.errors import InputError
from flashtrie.keywords import KeywordSet
from flashtrie.limits import PAD_TOKEN

from ._hashing import ROOT_HASH as _ROOT
from ._hashing import canonical_ids, child_hash, fingerprint, full_keyword_hashes
from ._query_model import QueryParams, QueryWorkload
from ._query_rows import WorkloadArrays, draw_topic, top_keys, topic_law

__all__ = ["Library", "generate_v1"]


def generate_v1(keywords: KeywordSet, params: QueryParams) -> QueryWorkload:
    """Version 1: the library's views (`Library`), then each query's topic, relevant keywords and rows."""
    lib = Library(keywords, params.num_steps, params.topic_depth, params.popularity_power,
                  params.popular_pool * params.proposals_per_step)
    params = replace(params, library_size=len(keywords), library_fingerprint=fingerprint(lib.full))
    rng = np.random.default_rng(params.seed)
    out = WorkloadArrays(params, keywords)
    eligible, topic_cdf = topic_law(lib.group_sizes, params)
    for q in range(params.num_queries):
        g = draw_topic(rng, eligible, topic_cdf)
        members = lib.group_members(g)
        out.topics[q] = lib.tokens_of(members[:1])[0, : params.topic_depth]
        # length-biased sample without replacement (Efraimidis-Spirakis keys); the first ones are relevant
        u = np.log(rng.random(members.size))
        mlen = lib.lengths[members].astype(np.float64)
        rel = members[top_keys(u / mlen**params.length_bias, params.num_relevant)]
        sample = members[top_keys(u / mlen**params.path_length_bias, params.topic_sample)]
        out.relevant.append(np.unique(lib.canon[rel]))
        bg = lib.background(rng, params.background_sample, params.path_length_bias)
        out.fill_rows(rng, q, lib.tokens_of(rel), lib.tokens_of(sample), lib.tokens_of(bg), lib)
    return out.workload()


class Library:
    """numpy views of a KeywordSet that the generator needs (no trie, no searcher)."""

    def __init__(self, keywords: KeywordSet, num_steps: int, topic_depth: int, popularity_power: float,
                 popular_pool: int) -> None:
        n = len(keywords)
        self.lengths = keywords.lengths
        self.full = full_keyword_hashes(keywords)
        self.canon = canonical_ids(self.full)
        cols = max(num_steps, topic_depth)
        # mat[i, d]: token d of keyword i, PAD_TOKEN past its end
        self.mat = np.full((n, cols), PAD_TOKEN, dtype=np.uint32)
        starts = keywords.offsets[:-1]
        for d in range(min(cols, keywords.max_length)):
            has = np.flatnonzero(self.lengths > d)
            self.mat[has, d] = keywords.tokens[starts[has] + d]
        # per depth: the most frequent tokens (most frequent first) and their weights count ** popularity_power
        self.depth_tokens: list[np.ndarray] = []
        self.depth_weights: list[np.ndarray] = []
        for d in range(num_steps):
            col = self.mat[:, d]
            tok, cnt = np.unique(col[col != PAD_TOKEN], return_counts=True)
            o = np.argsort(-cnt, kind="stable")[:popular_pool]
            self.depth_tokens.append(tok[o])
            self.depth_weights.append(cnt[o].astype(np.float64) ** popularity_power)
        # topics: keywords grouped by their first topic_depth tokens
        has = np.flatnonzero(self.lengths >= topic_depth)
        if topic_depth == 1:
            gkey = self.mat[has, 0].astype(np.uint64)
        else:
            gkey = np.full(has.size, _ROOT, dtype=np.uint64)
            for d in range(topic_depth):
                gkey = child_hash(gkey, self.mat[has, d])
        order = np.argsort(gkey, kind="stable")
        self.members = has[order]
        srt = gkey[order]
        new = np.ones(srt.size, dtype=bool)
        new[1:] = srt[1:] != srt[:-1]
        self.group_starts = np.flatnonzero(new)
        self._length_cdf: dict[float, np.ndarray] = {}
        self.group_sizes = np.diff(np.append(self.group_starts, srt.size))
        if self.group_sizes.size == 0:
            raise InputError(f"topic_depth: no keyword has {topic_depth} or more tokens")

    def background(self, rng: np.random.Generator, size: int, length_bias: float) -> np.ndarray:
        """``size`` keyword ids drawn from the whole library (with replacement), weighted by length ** bias."""
        cdf = self._length_cdf.get(length_bias)
        if cdf is None:
            cdf = np.cumsum(self.lengths.astype(np.float64) ** length_bias)
            cdf /= cdf[-1]
            self._length_cdf = {length_bias: cdf}
        return np.minimum(np.searchsorted(cdf, rng.random(size), side="right"), cdf.size - 1)

    def group_members(self, g: int) -> np.ndarray:
        s = int(self.group_starts[g])
        return self.members[s : s + int(self.group_sizes[g])]

    def tokens_of(self, ids: np.ndarray) -> np.ndarray:
        return self.mat[ids]
