"""`OracleSearcher`: the brute-force reading of docs/semantics.md, for small inputs ("oracle").

A literal, deliberately naive reading of the contract: a set of every keyword prefix (as tuples), a dict
from whole keyword to its smallest id, float32 arithmetic on numpy scalars, Python tuple sort keys and
float64 threshold comparisons.  It shares no search code with the optimised backends (no trie, no
``flashtrie.scoring``); only the argument checks (`flashtrie.search_core.check_request`) are common, so
every backend refuses the same inputs.  It is as slow as it is obvious: `OracleSearcher` refuses more
than `ORACLE_MAX_KEYWORDS` keywords and more than `ORACLE_MAX_PAIRS` (hypothesis, proposal) pairs per
step (B · K).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from flashtrie.errors import InputError
from flashtrie.keywords import KeywordSet
from flashtrie.proposals import Proposals
from flashtrie.search_core import check_request
from flashtrie.search_types import SearchConfig, SearchResult, SearchStats

__all__ = ["OracleSearcher", "OracleTrie", "oracle_search", "length_norm", "ORACLE_MAX_KEYWORDS",
           "ORACLE_MAX_PAIRS"]

PAD = 2**32 - 1
#: The most keywords `OracleSearcher` takes (it holds every prefix as a Python tuple).
ORACLE_MAX_KEYWORDS = 100_000
#: The most (hypothesis, proposal) pairs per step, B · K, `OracleSearcher` takes (a Python loop each).
ORACLE_MAX_PAIRS = 1 << 16

_Entry = tuple[int, np.float32, np.float32, int]


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


def _step(trie: OracleTrie, frontier: list[tuple[tuple[int, ...], np.float32]], tokens: np.ndarray,
          logprobs: np.ndarray, tau: float, sigma: float) -> list[tuple[tuple[int, ...], np.float32, int, int]]:
    """Steps 1-4 for every hypothesis at rank r and proposal (x, ℓ): the surviving (c, s(c), r, x)."""
    survivors = []
    for r, (h, s_h) in enumerate(frontier):
        for x_raw, ell_raw in zip(tokens.tolist(), logprobs, strict=True):
            x, ell = int(x_raw), np.float32(ell_raw)
            if x == PAD or float(ell) <= tau:  # 1. padding, ℓ ≤ τ
                continue
            c = h + (x,)
            if c not in trie.prefixes:  # 2. not a prefix of any keyword
                continue
            s = np.float32(s_h + ell)  # 3. one float32 addition
            if float(s) <= sigma:  # 4. s(c) ≤ σ
                continue
            survivors.append((c, s, r, x))
    return survivors


def _search_one(trie: OracleTrie, tokens: np.ndarray, logprobs: np.ndarray, config: SearchConfig,
                prefix: tuple[int, ...]) -> list[_Entry]:
    """One query: the pool as (keyword id, s, n, length), sorted by pool key."""
    if not trie.is_prefix(prefix):
        return []
    frontier: list[tuple[tuple[int, ...], np.float32]] = [(prefix, np.float32(0.0))]
    pool: list[tuple[tuple[float, int, int, int], int, np.float32, np.float32, int]] = []
    for t in range(tokens.shape[0]):
        survivors = _step(trie, frontier, tokens[t], logprobs[t], float(config.token_threshold),
                          float(config.score_threshold))
        for c, s, r, x in survivors:  # the pool: whole keywords, key (-n, t, r, x), the R smallest
            if c in trie.whole:
                n = np.float32(s * length_norm(config.length_norm, len(c)))
                pool.append(((-float(n), t, r, x), trie.whole[c], s, n, len(c)))
        pool.sort(key=lambda e: e[0])
        del pool[config.results:]
        # the next frontier: the B smallest frontier keys (-s, r, x) among candidates with a child
        growing = sorted(((-float(s), r, x), c, s) for c, s, r, x in survivors if trie.has_child(c))
        frontier = [(c, s) for _, c, s in growing[:config.beam_width]]
        if not frontier:
            break
    return [(kid, s, n, length) for _, kid, s, n, length in pool]


def oracle_search(keywords: KeywordSet | OracleTrie, proposals: Proposals, config: SearchConfig,
                  prefixes: Sequence[Sequence[int]] | None = None) -> SearchResult:
    """Run the contract literally on every query and return a padded `SearchResult` (no size limits)."""
    trie = keywords if isinstance(keywords, OracleTrie) else OracleTrie(keywords)
    pref = check_request(proposals, config, prefixes)
    q_n = proposals.num_queries
    found: list[_Entry] = []
    qs: list[int] = []
    for q in range(q_n):
        prefix = tuple(int(x) for x in pref[q]) if pref is not None else ()
        with np.errstate(over="ignore", under="ignore"):  # -inf from overflow and subnormals are legitimate
            entries = _search_one(trie, proposals.tokens[q], proposals.logprobs[q], config, prefix)
        found += entries
        qs += [q] * len(entries)
    cols = list(zip(*found, strict=True)) if found else [(), (), (), ()]
    return SearchResult.from_pool(q_n, config.results, np.array(qs, dtype=np.int64),
                                  np.array(cols[0], dtype=np.int64), np.array(cols[1], dtype=np.float32),
                                  np.array(cols[2], dtype=np.float32), np.array(cols[3], dtype=np.int32))


class OracleSearcher:
    """The brute-force oracle as a backend (``"oracle"``), for small inputs: the clearest statement of the
    contract, against which the optimised backends are tested."""

    name = "oracle"

    def __init__(self, keywords: KeywordSet) -> None:
        if not isinstance(keywords, KeywordSet):
            raise InputError(f"keywords: expected a flashtrie.KeywordSet, got {type(keywords).__name__}")
        if len(keywords) == 0:
            raise InputError("keywords: the keyword set is empty; the oracle needs at least one keyword")
        if len(keywords) > ORACLE_MAX_KEYWORDS:
            raise InputError(f"keywords: {len(keywords)} keywords are over the oracle's limit of "
                             f"{ORACLE_MAX_KEYWORDS} (it is for small inputs; use numpy or marisa)")
        self.trie = OracleTrie(keywords)
        self.num_keywords = len(keywords)
        #: the oracle measures no per-step counters
        self.last_stats: SearchStats | None = None

    def search(self, proposals: Proposals, config: SearchConfig,
               prefixes: Sequence[Sequence[int]] | None = None) -> SearchResult:
        """The contract, literally, for every query."""
        check_request(proposals, config, prefixes)
        pairs = config.beam_width * proposals.shape[2]
        if pairs > ORACLE_MAX_PAIRS:
            raise InputError(f"beam_width x K: {config.beam_width} x {proposals.shape[2]} = {pairs} (hypothesis, "
                             f"proposal) pairs per step are over the oracle's limit of {ORACLE_MAX_PAIRS}")
        return oracle_search(self.trie, proposals, config, prefixes)

    def __repr__(self) -> str:
        return f"OracleSearcher(keywords={self.num_keywords})"
