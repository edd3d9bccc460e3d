"""The harness's own instrumented beam searches over a hash set of keyword prefixes.

Two uses, both independent of the backends under test:

* `constrained_search` follows ``docs/semantics.md`` step by step and counts what happens: how many
  (hypothesis, proposal) pairs were considered, how many survived the trie check, how full the beam was
  after each step.  These are the workload statistics stored with every benchmark record.
* `unconstrained_search` is the "decode, then filter" baseline of the quality sweep (see its docstring).

The trie is replaced by a sorted array of 64-bit hashes of every keyword prefix.  A hash collision could
make a non-prefix look like a prefix; with n prefixes and m lookups the chance is about n·m / 2**64
(below 1e-6 for a billion lookups into ten million prefixes), which is ample for statistics.  It is not a
backend: the exact answers come from the searchers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flashtrie.keywords import KeywordSet
from flashtrie.limits import PAD_TOKEN
from flashtrie.proposals import Proposals
from flashtrie.scoring import desc_key32, length_norm_table, threshold32
from flashtrie.search_types import SearchConfig, SearchResult

__all__ = ["HashTrie", "BeamStats", "constrained_search", "unconstrained_search"]

_SEED = np.uint64(0x9E3779B97F4A7C15)
_P = np.uint64(0x100000001B3)
_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)


def _mix(h: np.ndarray, tok: np.ndarray) -> np.ndarray:
    """Hash of ``prefix + [tok]`` from the prefix's hash (splitmix64 finaliser over a multiply-add)."""
    with np.errstate(over="ignore"):
        x = h.astype(np.uint64) * _P + (tok.astype(np.uint64) + np.uint64(1))
        x ^= x >> np.uint64(30)
        x *= _C1
        x ^= x >> np.uint64(27)
        x *= _C2
        x ^= x >> np.uint64(31)
    return x


class HashTrie:
    """Sorted hashes of every prefix of every keyword, with "has a child" and the (smallest) keyword id."""

    def __init__(self, keywords: KeywordSet) -> None:
        lengths = keywords.lengths
        n = len(keywords)
        self.num_keywords = n
        self.max_length = int(lengths.max()) if n else 0
        ids = np.arange(n, dtype=np.int64)
        h = np.full(n, _SEED, dtype=np.uint64)
        hs, child, kid = [], [], []
        for depth in range(1, self.max_length + 1):
            alive = np.flatnonzero(lengths >= depth)
            h[alive] = _mix(h[alive], keywords.tokens[keywords.offsets[alive] + depth - 1])
            hs.append(h[alive].copy())
            child.append(lengths[alive] > depth)
            kid.append(np.where(lengths[alive] == depth, ids[alive], np.int64(n)))
        #: hash of each whole keyword (used to map a keyword id to the id a search returns for it)
        self.full_hash = h
        if hs:
            all_h = np.concatenate(hs)
            all_c = np.concatenate(child)
            all_k = np.concatenate(kid)
            order = np.argsort(all_h, kind="stable")
            all_h, all_c, all_k = all_h[order], all_c[order], all_k[order]
            self.keys, start = np.unique(all_h, return_index=True)
            self.has_child = np.logical_or.reduceat(all_c, start)
            k = np.minimum.reduceat(all_k, start)
            self.keyword_id = np.where(k == n, -1, k).astype(np.int64)
        else:
            self.keys = np.zeros(0, np.uint64)
            self.has_child = np.zeros(0, bool)
            self.keyword_id = np.zeros(0, np.int64)

    def canonical_ids(self, ids: np.ndarray) -> np.ndarray:
        """The id a search returns for each keyword id (the smallest id of an identical keyword)."""
        ids = np.asarray(ids, dtype=np.int64)
        return self.keyword_id[self.find(self.full_hash[ids])]

    @property
    def num_prefixes(self) -> int:
        return int(self.keys.size)

    def find(self, hashes: np.ndarray) -> np.ndarray:
        """Index of each hash in the table, or -1 when absent."""
        if self.keys.size == 0:
            return np.full(hashes.shape, -1, dtype=np.int64)
        idx = np.searchsorted(self.keys, hashes)
        idx = np.minimum(idx, self.keys.size - 1)
        return np.where(self.keys[idx] == hashes, idx, -1).astype(np.int64)

    def hash_of(self, tokens: Sequence[int] | np.ndarray) -> np.uint64:
        h = np.array([_SEED], dtype=np.uint64)
        for x in np.asarray(tokens, dtype=np.uint64).tolist():
            h = _mix(h, np.array([x], dtype=np.uint64))
        return h[0]


@dataclass
class BeamStats:
    """Counts from an instrumented constrained search over some queries.

    ``valid_fraction`` = pairs (hypothesis, proposal) that survive the trie check (step 2 of the
    semantics) / pairs considered (proposal not padding and above the token threshold), over every
    step actually run.  ``beam_fill[t]`` = mean over queries of ``|F_{t+1}| / B`` (0 after a query stopped).
    """

    queries: int = 0
    steps: int = 0
    beam_width: int = 0
    considered: int = 0
    valid: int = 0
    beam_fill: list[float] = field(default_factory=list)
    mean_results: float = 0.0

    @property
    def valid_fraction(self) -> float | None:
        return self.valid / self.considered if self.considered else None

    @property
    def mean_beam_fill(self) -> float | None:
        return float(np.mean(self.beam_fill)) if self.beam_fill else None

    def to_dict(self) -> dict[str, Any]:
        return {"stats_queries": self.queries, "valid_fraction": self.valid_fraction, "considered": self.considered,
                "valid": self.valid, "beam_fill_per_step": list(self.beam_fill),
                "mean_beam_fill": self.mean_beam_fill, "mean_results": self.mean_results,
                "source": "harness hash-trie replay"}


def _select(key32: np.ndarray, rank: np.ndarray, kidx: np.ndarray, limit: int) -> np.ndarray:
    """Indices of the ``limit`` smallest (key32, rank, kidx) keys, sorted; rank, kidx < 2**16."""
    comp = ((key32.astype(np.uint64) << np.uint64(32)) | (rank.astype(np.uint64) << np.uint64(16))
            | kidx.astype(np.uint64))
    if comp.size > limit:
        part = np.argpartition(comp, limit - 1)[:limit]
        return part[np.argsort(comp[part], kind="stable")]
    return np.argsort(comp, kind="stable")


def _prepare(proposals: Proposals, config: SearchConfig, q: int, t: int) -> tuple[np.ndarray, np.ndarray]:
    """Row (q, t) without padding and entries at or below the token threshold, sorted by token."""
    toks = proposals.tokens[q, t]
    lps = proposals.logprobs[q, t]
    keep = (toks != PAD_TOKEN) & (lps > threshold32(config.token_threshold))
    x, lp = toks[keep], lps[keep]
    order = np.argsort(x, kind="stable")
    return x[order], lp[order]


def _finish(pool: list[tuple[np.ndarray, ...]], results: int) -> tuple[np.ndarray, ...]:
    """Pool entries (n, s, t, r, x, id, len) sorted by the pool key (-n, t, r, x), best ``results``."""
    if not pool:
        dtypes = (np.float32, np.float32, np.int64, np.int64, np.uint32, np.int64, np.int32)
        return tuple(np.zeros(0, d) for d in dtypes)
    n, s, t, r, x, kid, ln = (np.concatenate(c) for c in zip(*pool, strict=True))
    order = np.lexsort((x, r, t, desc_key32(n)))[:results]
    return n[order], s[order], t[order], r[order], x[order], kid[order], ln[order]


def _write(res: SearchResult, q: int, entries: tuple[np.ndarray, ...]) -> None:
    n, s, _, _, _, kid, ln = entries
    m = n.size
    res.keyword_ids[q, :m] = kid
    res.scores[q, :m] = s
    res.norm_scores[q, :m] = n
    res.lengths[q, :m] = ln
    res.num_results[q] = m


def _start(trie: HashTrie, prefixes: Sequence[Sequence[int]] | None, q: int) -> tuple[np.uint64, int] | None:
    p = [] if prefixes is None or prefixes[q] is None else list(prefixes[q])
    h = trie.hash_of(p)
    if p:
        i = trie.find(np.array([h], dtype=np.uint64))[0]
        if i < 0 or not trie.has_child[i]:
            return None
    return h, len(p)


def constrained_search(trie: HashTrie, proposals: Proposals, config: SearchConfig,
                       prefixes: Sequence[Sequence[int]] | None = None,
                       queries: Sequence[int] | None = None) -> tuple[SearchResult, BeamStats]:
    """Trie-constrained beam search as in ``docs/semantics.md``, instrumented; returns results and stats.

    ``queries`` restricts the run to some query indices (the result then has one row per listed query).
    """
    qs = list(range(proposals.num_queries)) if queries is None else [int(q) for q in queries]
    B, R = config.beam_width, config.results
    sigma = threshold32(config.score_threshold)
    ln_table = length_norm_table(config.length_norm, max(trie.max_length, 1) + 1)
    T = proposals.shape[1]
    res = SearchResult.empty(len(qs), R)
    stats = BeamStats(queries=len(qs), steps=T, beam_width=B)
    fill = np.zeros(T, dtype=np.float64)
    for qi, q in enumerate(qs):
        start = _start(trie, prefixes, q)
        if start is None:
            continue
        fh = np.array([start[0]], dtype=np.uint64)
        fs = np.zeros(1, dtype=np.float32)
        base_len = start[1]
        pool: list[tuple[np.ndarray, ...]] = []
        for t in range(T):
            x, lp = _prepare(proposals, config, q, t)
            F, K = fh.size, x.size
            stats.considered += F * K
            if K == 0:
                break
            ch = _mix(fh[:, None], x[None, :]).ravel()
            idx = trie.find(ch)
            found = idx >= 0
            stats.valid += int(found.sum())
            s = (fs[:, None] + lp[None, :]).ravel()
            surv = np.flatnonzero(found & (s > sigma))
            r = (surv // K).astype(np.int64)
            k = (surv % K).astype(np.int64)
            s, hid, h = s[surv], idx[surv], ch[surv]
            length = base_len + t + 1
            kid = trie.keyword_id[hid]
            term = kid >= 0
            if term.any():
                n = (s[term] * ln_table[min(length, ln_table.size - 1)]).astype(np.float32)
                pool.append((n, s[term], np.full(n.size, t, np.int64), r[term], x[k[term]], kid[term],
                             np.full(n.size, length, np.int32)))
            grow = np.flatnonzero(trie.has_child[hid])
            sel = grow[_select(desc_key32(s[grow]), r[grow], k[grow], B)]
            fh, fs = h[sel], s[sel]
            fill[t] += fh.size / B
            if fh.size == 0:
                break
        entries = _finish(pool, R)
        _write(res, qi, entries)
    stats.beam_fill = (fill / max(len(qs), 1)).tolist()
    stats.mean_results = float(res.num_results.mean()) if len(qs) else 0.0
    return res, stats


def unconstrained_search(trie: HashTrie, proposals: Proposals, config: SearchConfig,
                         queries: Sequence[int] | None = None) -> SearchResult:
    """Unconstrained beam decoding over the raw proposals, then filtering against the library.

    Precisely: F₀ = [empty sequence], score 0.  At step t every hypothesis of F_t is extended by every
    proposal (x, ℓ) of row t that is not padding and has ℓ > τ, with s = fl32(s(h) + ℓ), dropping
    s ≤ σ; **no trie check**.  F_{t+1} = the B extensions with the smallest frontier key (−s, r, x), as in
    the constrained search.  This is what a decoder without constraints emits: its top-B sequences of each
    length t + 1.  Filtering: every member of F_{t+1} that is a whole keyword of the library is offered to
    the results pool with the same pool key (−n, t, r, x) and length normalisation as the constrained
    search; the pool keeps the best R.  Sequences that are not keywords are discarded, so beam slots spent
    on them are lost — the difference the quality sweep measures.
    """
    qs = list(range(proposals.num_queries)) if queries is None else [int(q) for q in queries]
    B, R = config.beam_width, config.results
    sigma = threshold32(config.score_threshold)
    T = proposals.shape[1]
    ln_table = length_norm_table(config.length_norm, T + 1)
    res = SearchResult.empty(len(qs), R)
    for qi, q in enumerate(qs):
        fh = np.array([_SEED], dtype=np.uint64)
        fs = np.zeros(1, dtype=np.float32)
        pool: list[tuple[np.ndarray, ...]] = []
        for t in range(T):
            x, lp = _prepare(proposals, config, q, t)
            K = x.size
            if K == 0:
                break
            s = (fs[:, None] + lp[None, :]).ravel()
            surv = np.flatnonzero(s > sigma)
            r = (surv // K).astype(np.int64)
            k = (surv % K).astype(np.int64)
            s = s[surv]
            sel = _select(desc_key32(s), r, k, B)
            r, k, s = r[sel], k[sel], s[sel]
            fh = _mix(fh[r], x[k])
            fs = s
            idx = trie.find(fh)
            kid = np.where(idx >= 0, trie.keyword_id[np.maximum(idx, 0)], -1)
            term = kid >= 0
            if term.any():
                n = (s[term] * ln_table[t + 1]).astype(np.float32)
                pool.append((n, s[term], np.full(n.size, t, np.int64), r[term], x[k[term]], kid[term],
                             np.full(n.size, t + 1, np.int32)))
            if fh.size == 0:
                break
        _write(res, qi, _finish(pool, R))
    return res
