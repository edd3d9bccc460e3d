"""The "decode without the trie, then filter" baseline of the quality sweep (`harness.quality`).

`unconstrained_search` is beam search over the raw proposals; its whole sequences are then looked up
in a `KeywordTable`, an exact dict from a keyword's tokens (as bytes) to its smallest id.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flashtrie.keywords import KeywordSet
from flashtrie.limits import PAD_TOKEN
from flashtrie.proposals import Proposals
from flashtrie.scoring import SearchPlan, desc_key32
from flashtrie.search_types import SearchConfig, SearchResult

__all__ = ["KeywordTable", "unconstrained_search"]


class KeywordTable:
    """Whole keywords → the smallest id of an identical keyword (the id every search returns for it)."""

    def __init__(self, keywords: KeywordSet) -> None:
        self._buf = np.ascontiguousarray(keywords.tokens, dtype=np.uint32).tobytes()
        self._off = (keywords.offsets * 4).tolist()
        keys = [self._buf[a:b] for a, b in zip(self._off[:-1], self._off[1:], strict=True)]
        # inserted from the last id down: the smallest id of a duplicate is written last and wins
        self._ids: dict[bytes, int] = dict(zip(reversed(keys), range(len(keys) - 1, -1, -1), strict=True))

    def __len__(self) -> int:
        """Number of distinct keywords."""
        return len(self._ids)

    def canonical_ids(self, ids: np.ndarray) -> np.ndarray:
        """The id a search returns for each keyword id (the smallest id of an identical keyword)."""
        off = self._off
        return np.array([self._ids[self._buf[off[i]:off[i + 1]]] for i in np.asarray(ids, dtype=np.int64).tolist()],
                        dtype=np.int64)

    def ids_of(self, seqs: np.ndarray) -> np.ndarray:
        """Keyword id of each row of ``seqs`` (n, L) (tokens), or -1 where the row is not a whole keyword."""
        n, length = seqs.shape
        buf = np.ascontiguousarray(seqs, dtype=np.uint32).tobytes()
        w = 4 * length
        get = self._ids.get
        return np.array([get(buf[i * w:(i + 1) * w], -1) for i in range(n)], dtype=np.int64)


def _row(proposals: Proposals, tau: np.float32, q: int, t: int) -> tuple[np.ndarray, np.ndarray]:
    """Row (q, t) without padding and entries at or below τ, sorted by token."""
    x, lp = proposals.tokens[q, t], proposals.logprobs[q, t]
    keep = (x != np.uint32(PAD_TOKEN)) & (lp > tau)
    x, lp = x[keep], lp[keep]
    order = np.argsort(x)
    return x[order], lp[order]


def unconstrained_search(table: KeywordTable, proposals: Proposals, config: SearchConfig,
                         queries: Sequence[int] | None = None) -> SearchResult:
    """Unconstrained beam decoding over the raw proposals, then filtering against the library.

    Precisely: F₀ = [empty sequence], score 0.  At step t every hypothesis of F_t is extended by every
    proposal (x, ℓ) of row t that is not padding and has ℓ > τ, with s = fl32(s(h) + ℓ), dropping
    s ≤ σ; **no trie check**.  F_{t+1} = the B extensions with the smallest frontier key (−s, r, x), as in
    the constrained search.  This is what a decoder without constraints emits: its top-B sequences of each
    length t + 1.  Filtering: every member of F_{t+1} that is a whole keyword of the library is offered to
    the results pool with the same pool key (−n, t, r, x) and length normalisation as the constrained
    search; the pool keeps the best R.  Sequences that are not keywords are discarded, so beam slots spent
    on them are lost — the difference the quality sweep measures.  Forced prefixes are not supported.

    ``queries`` restricts the run to some query indices (the result then has one row per listed query).
    """
    qs = list(range(proposals.num_queries)) if queries is None else [int(q) for q in queries]
    t_n = proposals.shape[1]
    plan = SearchPlan.from_config(config, t_n)
    big_b, big_r, tau, sigma, ln_table = plan.beam, plan.results, plan.tau, plan.sigma, plan.ln_table
    res = SearchResult.empty(len(qs), big_r)
    for qi, q in enumerate(qs):
        seqs = np.zeros((1, 0), dtype=np.uint32)
        fs = np.zeros(1, dtype=np.float32)
        pool: list[tuple[np.ndarray, ...]] = []  # (n, s, t, r, xrank, id) per step
        for t in range(t_n):
            x, lp = _row(proposals, tau, q, t)
            if x.size == 0:
                break
            with np.errstate(over="ignore", under="ignore"):
                s = (fs[:, None] + lp[None, :]).ravel()
            surv = np.flatnonzero(s > sigma)
            r, k, s = surv // x.size, surv % x.size, s[surv]
            # frontier key (-s, r, x): x orders like its rank k in the sorted row; r, k < 2**16 (limits)
            key = (desc_key32(s).astype(np.uint64) << np.uint64(32)) | (r.astype(np.uint64) << np.uint64(16)) \
                | k.astype(np.uint64)
            if key.size > big_b:
                part = np.argpartition(key, big_b - 1)[:big_b]
                sel = part[np.argsort(key[part])]
            else:
                sel = np.argsort(key)
            r, k, fs = r[sel], k[sel], s[sel]
            if fs.size == 0:
                break
            seqs = np.concatenate([seqs[r], x[k][:, None]], axis=1)
            kid = table.ids_of(seqs)
            w = np.flatnonzero(kid >= 0)
            if w.size:
                with np.errstate(over="ignore", under="ignore"):
                    n = fs[w] * ln_table[t + 1]
                pool.append((n, fs[w], np.full(w.size, t), r[w], k[w], kid[w]))
        if pool:
            n, s, tt, r, k, kid = (np.concatenate(c) for c in zip(*pool, strict=True))
            o = np.lexsort((k, r, tt, desc_key32(n)))[:big_r]
            m = o.size
            res.keyword_ids[qi, :m] = kid[o]
            res.scores[qi, :m] = s[o]
            res.norm_scores[qi, :m] = n[o]
            res.lengths[qi, :m] = tt[o] + 1
            res.num_results[qi] = m
    return res
