"""The search core: the checks and the start of a search that every backend shares.

* `check_request`: the argument checks every ``search`` starts with (returns the forced prefixes);
* `check_index`: the one refusal of something that is not a `NarrowLoudsIndex`;
* `start_states`: the one walk from forced prefixes to the start hypotheses (``StartStates``);
* `check_limits`: the one refusal of a request over a backend's caps (`BackendLimits`).

Results are assembled by `SearchResult.from_pool` / `SearchResult.concat` and compared by
`flashtrie.search_types.result_difference`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .errors import InputError
from .index import NarrowLoudsIndex
from .proposals import Proposals
from .search_types import SearchConfig
from .tokens import check_token_sequence

__all__ = ["check_request", "normalize_prefixes", "check_index", "StartStates", "start_states",
           "BackendLimits", "check_limits"]


def normalize_prefixes(prefixes: object, num_queries: int) -> list[np.ndarray] | None:
    """Validate forced prefixes (a sequence or array of one token sequence per query; empty or None = the
    root) and return them as ``uint32`` arrays."""
    if prefixes is None:
        return None
    if isinstance(prefixes, (str, bytes)) or not isinstance(prefixes, (Sequence, np.ndarray)):
        raise InputError(f"prefixes: expected None or a sequence of one token sequence per query, got "
                         f"{type(prefixes).__name__}")
    if isinstance(prefixes, np.ndarray) and prefixes.ndim == 0:
        raise InputError(f"prefixes: expected None or a sequence of one token sequence per query, got a 0-d array "
                         f"{prefixes!r}")
    if len(prefixes) != num_queries:
        raise InputError(f"prefixes: expected one prefix per query ({num_queries}), got {len(prefixes)}")
    return [check_token_sequence(p if p is not None else [], f"prefixes[{q}]") for q, p in enumerate(prefixes)]


def check_request(proposals: object, config: object, prefixes: object) -> list[np.ndarray] | None:
    """The checks every backend's ``search`` starts with; returns the normalised prefixes."""
    if not isinstance(proposals, Proposals):
        raise InputError(f"proposals: expected a flashtrie.Proposals, got {type(proposals).__name__}")
    if not isinstance(config, SearchConfig):
        raise InputError(f"config: expected a flashtrie.SearchConfig, got {type(config).__name__}")
    return normalize_prefixes(prefixes, proposals.num_queries)


def check_index(index: object) -> NarrowLoudsIndex:
    """``index`` itself when it is a `NarrowLoudsIndex`, else the `InputError` every backend gives."""
    if not isinstance(index, NarrowLoudsIndex):
        raise InputError(f"index: expected a flashtrie.NarrowLoudsIndex (NarrowLoudsIndex.build(keywords) or "
                         f".load(path)), got {type(index).__name__}")
    return index


@dataclass(frozen=True)
class StartStates:
    """The start hypothesis F₀ = [p] of every query whose forced prefix p is in the trie (int64 arrays).

    ``q``: the query; ``node``, ``off``: the trie state after p (``off`` tokens of the node's incoming edge
    consumed; ``off == edge length`` is "at the node"; the root is ``(0, 0)``); ``length`` = |p|.  A query
    whose prefix is absent has no entry (it has no results).
    """

    q: np.ndarray
    node: np.ndarray
    off: np.ndarray
    length: np.ndarray

    @property
    def size(self) -> int:
        return int(self.q.size)


def start_states(index: NarrowLoudsIndex, prefixes: list[np.ndarray] | None, num_queries: int) -> StartStates:
    """The start states of ``num_queries`` queries from their normalised forced prefixes (`check_request`)."""
    if prefixes is None:
        zero = np.zeros(num_queries, dtype=np.int64)
        return StartStates(np.arange(num_queries, dtype=np.int64), zero, zero.copy(), zero.copy())
    rows: list[tuple[int, int, int, int]] = []
    for q, p in enumerate(prefixes):
        if p.size == 0:
            rows.append((q, 0, 0, 0))
            continue
        w = index.walk(p)
        if w is None:
            continue
        node, off = int(w[0]), int(w[1])
        rows.append((q, node, 0 if node == 0 else off, int(p.size)))
    cols = np.array(rows, dtype=np.int64).reshape(-1, 4).T
    return StartStates(*(np.ascontiguousarray(c) for c in cols))


@dataclass(frozen=True)
class BackendLimits:
    """A backend's caps (None = no cap beyond the shared ones): beam width B, results R, proposals per row
    K, steps T, and ``rows``: the most Q · max(T, B, R) one call may hold (32-bit row indices)."""

    beam: int | None = None
    results: int | None = None
    proposals: int | None = None
    steps: int | None = None
    rows: int | None = None


def check_limits(backend: str, shape: tuple[int, int, int], config: SearchConfig, limits: BackendLimits) -> None:
    """Refuse a request of ``shape`` (Q, T, K) and ``config`` over ``limits`` with an `InputError` naming the
    argument, its value and the limit of ``backend`` (the name as it should read in the message)."""
    q_n, t_n, k_n = (int(v) for v in shape)
    b, r = int(config.beam_width), int(config.results)
    for name, v, lim in (("beam_width", b, limits.beam), ("max_results", r, limits.results),
                         ("K (proposals per row)", k_n, limits.proposals), ("T (steps)", t_n, limits.steps)):
        if lim is not None and v > lim:
            raise InputError(f"{name}: {v} is over the {backend} backend's limit {lim}")
    if limits.rows is not None:
        q_max = limits.rows // max(t_n, b, r, 1)
        if q_n > q_max:
            raise InputError(f"Q (queries): {q_n} queries with T={t_n}, B={b}, R={r} are over the {backend} "
                             f"backend's limit of {q_max} per call; split the batch")
