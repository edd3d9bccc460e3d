"""`SearchConfig`, `SearchResult` and the `Searcher` protocol every backend implements."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from .errors import InputError
from .limits import MAX_BEAM_WIDTH, MAX_RESULTS
from .proposals import Proposals
from .tokens import check_token_sequence

__all__ = ["SearchConfig", "SearchResult", "Searcher", "normalize_prefixes", "check_request"]


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
    num_results: np.ndarray = field(default=None)  # int32 [Q]

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

    def first_difference(self, other: SearchResult) -> str | None:
        """None when both results are bit-identical, else a description of the first difference."""
        if self.shape != other.shape:
            return f"shapes differ: {self.shape} vs {other.shape}"
        fields = (("keyword_ids", np.int64), ("scores", np.uint32), ("norm_scores", np.uint32), ("lengths", np.int32))
        for q in range(self.shape[0]):
            if self.num_results[q] != other.num_results[q]:
                return f"query {q}: num_results {int(self.num_results[q])} vs {int(other.num_results[q])}"
            for name, view in fields:
                a = getattr(self, name)[q]
                b = getattr(other, name)[q]
                if view is np.uint32:
                    a, b = a.view(np.uint32), b.view(np.uint32)
                diff = np.flatnonzero(a != b)
                if diff.size:
                    r = int(diff[0])
                    return (f"query {q}, rank {r}: {name} differ; "
                            f"left (id, score, norm, len) = {self.query(q)[r] if r < self.num_results[q] else 'pad'}, "
                            f"right = {other.query(q)[r] if r < other.num_results[q] else 'pad'}")
        return None

    def equals(self, other: SearchResult) -> bool:
        """Bit-identical ids, order, float32 scores and lengths."""
        return self.first_difference(other) is None


@runtime_checkable
class Searcher(Protocol):
    """What every backend implements."""

    name: str

    def search(self, proposals: Proposals, config: SearchConfig,
               prefixes: Sequence[Sequence[int]] | None = None) -> SearchResult: ...


def normalize_prefixes(prefixes: Sequence[Sequence[int]] | None, num_queries: int) -> list[np.ndarray] | None:
    """Validate forced prefixes (one token sequence per query; empty = root) as ``uint32`` arrays."""
    if prefixes is None:
        return None
    if len(prefixes) != num_queries:
        raise InputError(f"prefixes: expected one prefix per query ({num_queries}), got {len(prefixes)}")
    return [check_token_sequence(p if p is not None else [], f"prefixes[{q}]") for q, p in enumerate(prefixes)]


def check_request(proposals: object, config: object, prefixes: Sequence[Sequence[int]] | None
                  ) -> list[np.ndarray] | None:
    """The checks every CPU backend's ``search`` starts with; returns the normalised prefixes."""
    if not isinstance(proposals, Proposals):
        raise InputError(f"proposals: expected a flashtrie.Proposals, got {type(proposals).__name__}")
    if not isinstance(config, SearchConfig):
        raise InputError(f"config: expected a flashtrie.SearchConfig, got {type(config).__name__}")
    return normalize_prefixes(prefixes, proposals.num_queries)
