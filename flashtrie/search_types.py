"""The public types of a search: `SearchConfig`, `SearchResult`, `SearchStats`, `ResultDifference` and the
`Searcher` protocol every backend implements.

The request checks every backend starts with (`check_request`, `normalize_prefixes`) are `flashtrie.search_core`'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, cast, runtime_checkable

import numpy as np

from .errors import InputError
from .limits import MAX_BEAM_WIDTH, MAX_RESULTS
from .proposals import Proposals

if TYPE_CHECKING:
    from .index import NarrowLoudsIndex

__all__ = ["SearchConfig", "SearchResult", "SearchStats", "ResultDifference", "result_difference", "Searcher"]


@dataclass(frozen=True)
class SearchConfig:
    """Beam width B, results R (default B), token threshold τ, score threshold σ, length norm α.

    See ``docs/semantics.md``: a proposal with logprob ≤ τ is skipped, a candidate with score ≤ σ is
    dropped, and results are ranked by ``score * (6 / (5 + length)) ** α``.
    """

    beam_width: int
    max_results: int | None = None
    token_threshold: float = -math.inf
    score_threshold: float = -math.inf
    length_norm: float = 0.0

    def __post_init__(self) -> None:
        _check_int("beam_width", self.beam_width, 1, MAX_BEAM_WIDTH)
        if self.max_results is not None:
            _check_int("max_results", self.max_results, 1, MAX_RESULTS)
        for name in ("token_threshold", "score_threshold"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) or math.isnan(_real(v)):
                raise InputError(f"{name}: expected a number (may be -inf), got {_short(v)}")
            if isinstance(v, int) and math.isinf(_real(v)):  # keep the meaning; every backend reads a float
                object.__setattr__(self, name, _real(v))
        a = self.length_norm
        if isinstance(a, bool) or not isinstance(a, (int, float, np.floating, np.integer)) \
                or not (0.0 <= _real(a) < math.inf):
            raise InputError(f"length_norm: expected a finite number >= 0, got {_short(a)}")

    @property
    def results(self) -> int:
        """R: ``max_results``, or ``beam_width`` when unset."""
        return int(self.max_results if self.max_results is not None else self.beam_width)

    def to_dict(self) -> dict[str, Any]:
        """The config as a record: B, the resolved R, τ, σ (±inf stay floats) and α."""
        return {"beam_width": int(self.beam_width), "max_results": self.results,
                "token_threshold": _real(self.token_threshold), "score_threshold": _real(self.score_threshold),
                "length_norm": float(self.length_norm)}


def _short(v: object) -> str:
    """``repr(v)``, or a description when it is too long for an error message (a 400-digit integer)."""
    r = repr(v)
    return r if len(r) <= 40 else f"{type(v).__name__} of {len(r)} characters ({r[:12]}...)"


def _real(v: float | int | np.number) -> float:
    """``float(v)``; an integer beyond float64's range becomes ±inf (it compares with every float32 the same
    way, so a threshold keeps its meaning)."""
    try:
        return float(v)
    except OverflowError:
        return math.inf if int(v) > 0 else -math.inf


def _check_int(name: str, v: object, lo: int, hi: int) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise InputError(f"{name}: expected an integer in [{lo}, {hi}], got {v!r}")
    if not lo <= int(v) <= hi:
        raise InputError(f"{name}: {int(v)} is out of range; the limit is [{lo}, {hi}]")


@dataclass(eq=False)
class SearchResult:
    """Per query, the pool sorted best first, padded to R columns (id -1, scores -inf, length 0)."""

    keyword_ids: np.ndarray  # int64 [Q, R]
    scores: np.ndarray  # float32 [Q, R]
    norm_scores: np.ndarray  # float32 [Q, R]
    lengths: np.ndarray  # int32 [Q, R]
    num_results: np.ndarray = field(default=cast(np.ndarray, None))  # int32 [Q]; None: counted from the ids

    def __post_init__(self) -> None:
        if self.num_results is None:
            self.num_results = (self.keyword_ids >= 0).sum(axis=1).astype(np.int32)

    @classmethod
    def empty(cls, num_queries: int, results: int) -> SearchResult:
        """All-padding result of shape [Q, R]."""
        return cls(
            keyword_ids=np.full((num_queries, results), -1, dtype=np.int64),
            scores=np.full((num_queries, results), -np.inf, dtype=np.float32),
            norm_scores=np.full((num_queries, results), -np.inf, dtype=np.float32),
            lengths=np.zeros((num_queries, results), dtype=np.int32),
            num_results=np.zeros(num_queries, dtype=np.int32),
        )

    @property
    def shape(self) -> tuple[int, int]:
        q, r = self.keyword_ids.shape
        return int(q), int(r)

    def query(self, q: int) -> list[tuple[int, float, float, int]]:
        """Query q's results as ``(keyword_id, score, norm_score, length)`` tuples."""
        n = int(self.num_results[q])
        return [(int(self.keyword_ids[q, i]), float(self.scores[q, i]), float(self.norm_scores[q, i]),
                 int(self.lengths[q, i])) for i in range(n)]

    def texts(self, index: NarrowLoudsIndex) -> list[list[str]]:
        """Each query's results as strings, best first (``index.texts`` of its ``num_results`` ids; the index
        must hold strings: `KeywordSet.from_texts`)."""
        return [index.texts(self.keyword_ids[q, : int(self.num_results[q])]) for q in range(self.shape[0])]

    @classmethod
    def concat(cls, parts: Sequence[SearchResult]) -> SearchResult:
        """The results of consecutive query ranges stacked in order; every part has the same R."""
        if len(parts) == 0:
            raise InputError("parts: expected at least one SearchResult to concatenate, got none")
        widths = {p.shape[1] for p in parts}
        if len(widths) != 1:
            raise InputError(f"parts: every result must have the same number of columns R, got {sorted(widths)}")
        if len(parts) == 1:
            return parts[0]
        return cls(*(np.concatenate([getattr(p, name) for p in parts]) for name in _ARRAYS))

    @classmethod
    def from_pool(cls, num_queries: int, results: int, q: np.ndarray, keyword_ids: np.ndarray,
                  scores: np.ndarray, norm_scores: np.ndarray, lengths: np.ndarray) -> SearchResult:
        """The [num_queries, results] result of a pool: entry i belongs to query ``q[i]``; entries are already
        sorted by (q, pool key), so an entry's column is its rank within its query.  More than ``results``
        entries for one query, or an unsorted / out-of-range ``q``, is an error (a backend bug)."""
        out = cls.empty(num_queries, results)
        q = np.asarray(q, dtype=np.int64)
        if q.size == 0:
            return out
        if int(q[0]) < 0 or int(q[-1]) >= num_queries:
            raise InputError(f"pool: query numbers must be in [0, {num_queries}), got {int(q[0])} .. {int(q[-1])}")
        counts = np.bincount(q, minlength=num_queries)
        col = np.arange(q.size, dtype=np.int64) - (np.cumsum(counts) - counts)[q]
        if int(col.min()) < 0:  # some entry sits before its query's first column: q is not sorted
            raise InputError("pool: query numbers must be sorted (entries grouped by query, in query order)")
        if int(counts.max()) > results:
            over = int(np.argmax(counts))
            raise InputError(f"pool: query {over} has {int(counts[over])} entries, over R = {results}")
        out.keyword_ids[q, col] = keyword_ids
        out.scores[q, col] = scores
        out.norm_scores[q, col] = norm_scores
        out.lengths[q, col] = lengths
        out.num_results[:] = counts
        return out

    def first_difference(self, other: SearchResult) -> str | None:
        """None when both results are bit-identical, else a one-line description of the first difference
        (`result_difference`)."""
        d = result_difference(self, other)
        return None if d is None else str(d)

    def equals(self, other: SearchResult) -> bool:
        """Bit-identical ids, order, float32 scores and lengths."""
        return self.first_difference(other) is None


_ARRAYS = ("keyword_ids", "scores", "norm_scores", "lengths", "num_results")
_FIELDS = ("keyword_ids", "scores", "norm_scores", "lengths")


@dataclass(frozen=True)
class ResultDifference:
    """The first difference between two results: where, which field, and both sides' entries.

    ``field`` is ``"shape"`` (query and rank None; left / right are the shapes), ``"num_results"`` (one side
    has no entry at ``rank``: that side is ``"pad"``), one of ``keyword_ids / scores / norm_scores /
    lengths`` (both entries as ``(id, score, norm, length)``), or ``"padding"`` (every entry agrees; a padding
    column differs: both columns' raw values).
    """

    query: int | None
    rank: int | None
    field: str
    left: Any
    right: Any

    @property
    def detail(self) -> str:
        """The one-line description (``str(self)``)."""
        return str(self)

    def __str__(self) -> str:
        if self.field == "shape":
            return f"shapes differ: {self.left} vs {self.right}"
        where = f"query {self.query}, rank {self.rank}"
        if self.field == "num_results":
            return f"{where}: num_results differ (an entry on one side only); left = {self.left}, right = {self.right}"
        if self.field == "padding":
            return f"{where}: padding columns differ; left = {self.left}, right = {self.right}"
        return f"{where}: {self.field} differ; left (id, score, norm, len) = {self.left}, right = {self.right}"


def _column(res: SearchResult, q: int, r: int) -> tuple[int, float, float, int]:
    return (int(res.keyword_ids[q, r]), float(res.scores[q, r]), float(res.norm_scores[q, r]),
            int(res.lengths[q, r]))


def _bit_views(res: SearchResult) -> tuple[np.ndarray, ...]:
    """The four [Q, R] arrays as compared: float32 scores as their bit patterns (so -0.0 != +0.0)."""
    return (res.keyword_ids, np.ascontiguousarray(res.scores, dtype=np.float32).view(np.uint32),
            np.ascontiguousarray(res.norm_scores, dtype=np.float32).view(np.uint32), res.lengths)


def result_difference(a: SearchResult, b: SearchResult) -> ResultDifference | None:
    """None when ``a`` and ``b`` are bit-identical (ids, order, float32 bits, lengths, padding), else the first
    difference: the first query that differs, and in it the first rank whose entry differs, the first
    missing entry, or else the first padding column that differs.  The one comparison of results."""
    if a.shape != b.shape:
        return ResultDifference(None, None, "shape", a.shape, b.shape)
    va, vb = _bit_views(a), _bit_views(b)
    neq = np.zeros(a.shape, dtype=bool)
    for x, y in zip(va, vb, strict=True):
        neq |= x != y
    na, nb = np.asarray(a.num_results, dtype=np.int64), np.asarray(b.num_results, dtype=np.int64)
    bad = np.flatnonzero(neq.any(axis=1) | (na != nb))
    if bad.size == 0:
        return None
    q = int(bad[0])
    common = min(int(na[q]), int(nb[q]))
    ranks = np.flatnonzero(neq[q, :common])
    if ranks.size:
        r = int(ranks[0])
        name = next(f for f, x, y in zip(_FIELDS, va, vb, strict=True) if x[q, r] != y[q, r])
        return ResultDifference(q, r, name, _column(a, q, r), _column(b, q, r))
    if na[q] != nb[q]:
        left = _column(a, q, common) if common < na[q] else "pad"
        right = _column(b, q, common) if common < nb[q] else "pad"
        return ResultDifference(q, common, "num_results", left, right)
    r = int(np.flatnonzero(neq[q])[0])
    return ResultDifference(q, r, "padding", _column(a, q, r), _column(b, q, r))


@dataclass(frozen=True, eq=False)
class SearchStats:
    """Per-step workload counters of one search call (summed over its queries), as a backend measured them.

    ``counts`` maps a counter name (a key of `FIELDS`) to an int64 array of length T; a backend fills only the
    counters it measures, and `column` refuses the others by name.  Steps after every frontier emptied
    count 0; so does a query whose forced prefix is absent.  With an early stop (numpy ``early_stop=True``)
    a dropped query counts 0 from then on: the counts describe the work done, not the contract's F_t.
    """

    backend: str
    queries: int
    beam_width: int
    steps: int
    steps_run: int
    counts: Mapping[str, np.ndarray]
    #: whether the backend's early stop was on (None when it has none)
    early_stop: bool | None = None

    FIELDS: ClassVar[dict[str, str]] = {
        "considered": "pairs (h, x) of a hypothesis h carried into step t and a usable proposal x of its "
                      "query's row t (not padding, logprob > τ)",
        "valid": "those pairs for which h + [x] is a trie prefix (step 2 of docs/semantics.md)",
        "kept": "valid candidates that also pass the score threshold (s(c) > σ, step 4)",
        "frontier": "hypotheses carried out of step t, sum over queries of |F_{t+1}| (the B best kept "
                    "candidates with a child; at t = T − 1 still counted, although no step follows)",
        "pool_offers": "whole keywords offered to the pool at step t",
        "work_chunks": "units of work the GPU scheduled at step t",
        "live_queries": "queries with a non-empty frontier at the start of step t",
        "frontier_candidates": "kept candidates with a child (or inside an edge) that F_{t+1} is selected from "
                               "(GPU; 0 at t = T − 1, where no frontier is selected)",
        "pool_candidates": "whole keywords offered to the pool at step t that beat its worst entry when it is "
                           "full (GPU: the others are dropped where they are made)",
    }
    #: numpy's four counters, the columns of `per_step`
    COLUMNS: ClassVar[tuple[str, ...]] = ("considered", "valid", "kept", "frontier")

    def __post_init__(self) -> None:
        for name, col in self.counts.items():
            if name not in self.FIELDS:
                raise InputError(f"counts: unknown counter {name!r}; known: {', '.join(self.FIELDS)}")
            if np.shape(col) != (self.steps,):
                raise InputError(f"counts[{name!r}]: expected shape ({self.steps},), got {np.shape(col)}")

    def has(self, name: str) -> bool:
        """Whether this backend measured counter ``name``."""
        return name in self.counts

    def column(self, name: str) -> np.ndarray:
        """Counter ``name`` per step (int64, shape (T,))."""
        if name not in self.counts:
            raise InputError(f"{name}: the {self.backend} backend does not count it; its counters: "
                             f"{', '.join(self.counts) or 'none'}")
        return np.asarray(self.counts[name], dtype=np.int64)

    @property
    def per_step(self) -> np.ndarray:
        """(T, 4) int64: the `COLUMNS` counters side by side (numpy's layout)."""
        return np.stack([self.column(c) for c in self.COLUMNS], axis=1) if self.steps else \
            np.zeros((0, len(self.COLUMNS)), dtype=np.int64)

    @property
    def valid_fraction(self) -> float | None:
        """sum(valid) / sum(considered) over all steps; None when nothing was considered or not counted."""
        if not (self.has("considered") and self.has("valid")):
            return None
        c = int(self.column("considered").sum())
        return int(self.column("valid").sum()) / c if c else None

    @property
    def beam_fill(self) -> np.ndarray | None:
        """Per step t: frontier[t] / (queries · B) (float64, shape (T,)); None when not counted."""
        if not self.has("frontier"):
            return None
        return self.column("frontier").astype(np.float64) / (max(self.queries, 1) * self.beam_width)

    def to_dict(self) -> dict[str, Any]:
        """The stats as a record (counters as lists)."""
        return {"backend": self.backend, "queries": int(self.queries), "beam_width": int(self.beam_width),
                "steps": int(self.steps), "steps_run": int(self.steps_run), "early_stop": self.early_stop,
                "counts": {k: self.column(k).tolist() for k in self.counts}}


@runtime_checkable
class Searcher(Protocol):
    """What every backend implements."""

    name: str

    def search(self, proposals: Proposals, config: SearchConfig,
               prefixes: Sequence[Sequence[int]] | None = None) -> SearchResult: ...
