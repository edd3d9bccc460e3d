"""How a query's rows are made, shared by the generator's versions: the topic law, the row of one step (relevant,
topic, popular and random tokens, distinct) and its noisy log-softmax logprobs; see `datasets.queries`."""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from flashtrie.keywords import KeywordSet
from flashtrie.limits import PAD_TOKEN
from flashtrie.proposals import Proposals

from ._queries_v2 import max_token
from ._query_model import QueryParams, QueryWorkload

__all__ = ["RowSource", "WorkloadArrays", "draw_topic", "top_keys", "topic_law"]


class RowSource(Protocol):
    """What a row needs of the library: per depth, its most frequent tokens and their weights."""

    depth_tokens: list[np.ndarray]
    depth_weights: list[np.ndarray]


class WorkloadArrays:
    """The arrays of a workload being generated, and the row filling both versions share."""

    def __init__(self, params: QueryParams, keywords: KeywordSet) -> None:
        q_n, t_n, k_n = params.num_queries, params.num_steps, params.proposals_per_step
        self.params = params
        self.vocab = params.vocab_size or max_token(keywords) + 1
        self.tokens = np.full((q_n, t_n, k_n), PAD_TOKEN, dtype=np.uint32)
        self.logprobs = np.full((q_n, t_n, k_n), -np.inf, dtype=np.float32)
        self.relevant: list[np.ndarray] = []
        self.topics = np.zeros((q_n, params.topic_depth), dtype=np.uint32)

    def fill_rows(self, rng: np.random.Generator, q: int, rel_cols: np.ndarray, sample_cols: np.ndarray,
                  bg_cols: np.ndarray, lib: RowSource) -> None:
        p = self.params
        for t in range(p.num_steps):
            row_tok, row_cls, row_rank = build_row(rng, rel_cols[:, t], sample_cols[:, t], bg_cols[:, t], lib, t,
                                                   self.vocab, p.proposals_per_step, p)
            lp = row_logprobs(rng, row_cls, row_rank, p)
            if p.sort_rows:
                o = np.argsort(-lp, kind="stable")
                row_tok, lp = row_tok[o], lp[o]
            self.tokens[q, t, : row_tok.size] = row_tok
            self.logprobs[q, t, : row_tok.size] = lp

    def workload(self) -> QueryWorkload:
        return QueryWorkload(Proposals(self.tokens, self.logprobs), self.relevant, self.params, self.topics)


def topic_law(sizes: np.ndarray, params: QueryParams) -> tuple[np.ndarray, np.ndarray]:
    """The groups a topic may be (at least ``min_topic_size`` members, else the largest) and their CDF."""
    eligible = np.flatnonzero(sizes >= params.min_topic_size)
    if eligible.size == 0:
        eligible = np.flatnonzero(sizes == sizes.max())
    w = sizes[eligible].astype(np.float64) ** params.topic_size_power
    return eligible, np.cumsum(w / w.sum())


def draw_topic(rng: np.random.Generator, eligible: np.ndarray, topic_cdf: np.ndarray) -> int:
    return int(eligible[min(int(np.searchsorted(topic_cdf, rng.random(), side="right")), eligible.size - 1)])


def top_keys(key: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest keys, largest first (all of them when there are fewer)."""
    if k < key.size:
        top = np.argpartition(-key, k - 1)[:k]
    else:
        top = np.arange(key.size)
    return top[np.argsort(-key[top], kind="stable")]


def first_unique(x: np.ndarray) -> np.ndarray:
    """``x`` without repeats, keeping first occurrences in order."""
    if x.size == 0:
        return x
    _, first = np.unique(x, return_index=True)
    return x[np.sort(first)]


def build_row(rng: np.random.Generator, rel_col: np.ndarray, sample_col: np.ndarray, bg_col: np.ndarray,
               lib: RowSource, t: int, vocab: int, k_n: int,
               p: QueryParams) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tokens of one row (distinct, at most K), with their class (0..3) and rank within the class."""
    parts: list[np.ndarray] = []
    rel = first_unique(rel_col[rel_col != PAD_TOKEN])[:k_n]
    parts.append(rel)
    used = rel.size
    n_real = int(round(p.density * (k_n - used)))
    n_topic = int(round(p.subtree_share * n_real))
    topic = first_unique(sample_col[sample_col != PAD_TOKEN])
    topic = topic[~np.isin(topic, rel)][:n_topic]
    parts.append(topic)
    used += topic.size
    n_pop = n_real - topic.size
    pop = first_unique(bg_col[bg_col != PAD_TOKEN])
    pop = pop[~np.isin(pop, np.concatenate(parts))][:n_pop]
    cand, weight = lib.depth_tokens[t], lib.depth_weights[t]
    if n_pop > pop.size and cand.size:
        # weighted sample without replacement from the depth's most frequent tokens (Efraimidis-Spirakis)
        key = np.log(rng.random(cand.size)) / weight
        m = min(cand.size, n_pop + used)  # enough even if every token already in the row is drawn
        best = np.argpartition(-key, m - 1)[:m] if m < cand.size else np.arange(cand.size)
        more = cand[best[np.argsort(-key[best], kind="stable")]]
        more = more[~np.isin(more, np.concatenate([*parts, pop]))]
        pop = np.concatenate([pop, more[: n_pop - pop.size]])
    parts.append(pop)
    used += pop.size
    need = k_n - used
    rnd = random_tokens(rng, vocab, need, np.concatenate(parts))
    parts.append(rnd)
    row = np.concatenate(parts).astype(np.uint32)
    cls = np.concatenate([np.full(x.size, c, dtype=np.int8) for c, x in enumerate(parts)])
    rank = np.concatenate([np.arange(x.size) for x in parts])
    return row, cls, rank


def random_tokens(rng: np.random.Generator, vocab: int, need: int, exclude: np.ndarray) -> np.ndarray:
    """Up to ``need`` distinct tokens uniform in ``[0, vocab)``, none in ``exclude``."""
    if need <= 0:
        return np.zeros(0, dtype=np.uint32)
    if vocab - exclude.size <= 4 * need:  # small vocabulary: draw from the complement directly
        rest = np.setdiff1d(np.arange(vocab, dtype=np.uint32), exclude)
        return rng.permutation(rest)[:need]
    out = np.zeros(0, dtype=np.uint32)
    while out.size < need:
        draws = rng.integers(0, vocab, size=need + need // 4 + 16, dtype=np.uint32)
        cand = first_unique(np.concatenate([out, draws]))
        out = cand[~np.isin(cand, exclude)][:need]
    return out


def row_logprobs(rng: np.random.Generator, cls: np.ndarray, rank: np.ndarray, p: QueryParams) -> np.ndarray:
    """float32 log-softmax of noisy logits: class level, minus ``logit_slope * log1p(rank)``, plus noise."""
    levels = np.asarray(p.logit_levels, dtype=np.float64)
    logits = levels[cls] - p.logit_slope * np.log1p(rank) + p.logit_noise * rng.standard_normal(cls.size)
    m = max(float(logits.max()) if logits.size else -np.inf, p.tail_logit)
    z = np.exp(logits - m).sum() + (math.exp(p.tail_logit - m) if p.tail_logit > -math.inf else 0.0)
    return (logits - (m + math.log(z))).astype(np.float32)
