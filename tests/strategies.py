"""Hypothesis strategies shared by every backend's tests.

`search_cases()` draws small ``(keywords, proposals, config, prefixes)`` cases built to hit the corners of
docs/semantics.md: keywords that are prefixes of others, duplicates, single-token keywords, tokens at the
edges of the uint32 / uint16 ranges; proposals mostly made of tokens that occur in the keywords at the
right depth (so many candidates are valid), plus distractors and both spellings of padding; quantised
logprobs (ties!), -inf, -0.0, subnormals, overflow to -inf and values that are not float32-representable
next to thresholds that are not either; forced prefixes that are valid, whole keywords, leaves or absent.
"""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
from hypothesis import strategies as st

from flashtrie import KeywordSet, Proposals, SearchConfig

__all__ = [
    "SPECIAL_TOKENS", "QUANTISED_LOGPROBS", "SPECIAL_LOGPROBS", "INEXACT_LOGPROBS", "THRESHOLDS",
    "keyword_lists", "keyword_sets", "search_configs", "search_cases", "proposals_for",
]

PAD = 2**32 - 1
#: Tokens at the edges of the ranges a backend might pack tokens into.
SPECIAL_TOKENS = [0, 1, 2, 3, 255, 256, 65534, 65535, 65536, 2**31 - 1, 2**31, 4294967293, 4294967294]
#: Multiples of 0.25: sums are exact, so ties are frequent.
QUANTISED_LOGPROBS = [0.0, -0.25, -0.5, -0.75, -1.0, -1.25, -1.5, -2.0, -3.0]
#: -inf, -0.0, positive, not float32-representable, subnormal, smallest normal, and sums that overflow.
SPECIAL_LOGPROBS = [-math.inf, -0.0, 0.5, -1e-45, -3e-45, -1.1754944e-38, -3e38, -2e38]
#: Not float32-representable: fl32 rounds -0.3 and -0.1 down, -0.7 and -0.9 up.
INEXACT_LOGPROBS = [-0.7, -0.3, -0.9, -0.1]
#: Thresholds: quantised, float64 values between two float32 values (fl32 rounds -0.3 down, -0.7 and -0.9
#: up; -1.4 lies just below fl32(-0.7) + fl32(-0.7)), and edge cases.
THRESHOLDS = [-2.0, -1.0, -0.75, -0.5, -0.25, 0.0, -0.3, -0.7, -0.9, -1.4, -1.25, -1e-45, -5e-46, 0.5, -3e38, -1e39]
#: Padding entries may carry any logprob, NaN and +inf included.
PAD_LOGPROBS = [-math.inf, 0.0, math.nan, math.inf, -1.0]


@st.composite
def _palette(draw: st.DrawFn) -> list[float]:
    """The logprobs one example draws from: a few quantised values (ties!) and sometimes special ones."""
    values = draw(st.lists(st.sampled_from(QUANTISED_LOGPROBS), min_size=1, max_size=3, unique=True))
    values += draw(st.lists(st.sampled_from(INEXACT_LOGPROBS), max_size=1))
    values += draw(st.lists(st.sampled_from(SPECIAL_LOGPROBS), max_size=2, unique=True))
    return values


_THRESHOLD_KINDS = ["config", "config", "config", "config", "f32", "f64"]


def _rngs() -> st.SearchStrategy[random.Random]:
    """A `random.Random` from a drawn seed: uniform content, replayable, the seed shrinks."""
    return st.integers(0, 2**32 - 1).map(random.Random)


@st.composite
def keyword_lists(draw: st.DrawFn, max_keywords: int = 12, max_length: int = 5) -> list[list[int]]:
    """Keywords over a tiny per-example alphabet: random ones, siblings (a shared stem, another branch),
    prefixes and duplicates of earlier ones, so the trie branches and keywords end inside it.

    Sizes are plain draws (they shrink well); the bulk content comes from a seeded `random.Random`,
    because hypothesis' own element draws (and ``st.randoms()``) cluster on the first choice too often to
    build branching tries.
    """
    # Hypothesis draws index 0 of sampled_from about a third of the time (and shrinks towards it): the
    # first entry of each size list below is a typical value, not the smallest.
    size = draw(st.sampled_from([3, 1, 2, 4, 5]))
    alphabet = draw(st.lists(st.one_of(st.integers(0, 12), st.sampled_from(SPECIAL_TOKENS)),
                             min_size=size, max_size=size, unique=True))
    n = draw(st.sampled_from([max(1, 2 * max_keywords // 3), *range(1, max_keywords + 1)]))
    rnd = draw(_rngs())
    kws: list[list[int]] = []
    for _ in range(n):
        u = rnd.random()
        if kws and u < 0.45:  # a sibling: shares a stem with an earlier keyword, then branches
            src = rnd.choice(kws)
            cut = rnd.randrange(len(src))
            kws.append(src[:cut] + [rnd.choice(alphabet) for _ in range(rnd.randint(1, max(1, max_length - cut)))])
        elif kws and u < 0.65:  # a prefix of an earlier keyword; the whole of it is a duplicate
            src = rnd.choice(kws)
            kws.append(src[: rnd.randint(1, len(src))])
        else:
            kws.append([rnd.choice(alphabet) for _ in range(rnd.randint(1, max_length))])
    return kws


def keyword_sets(max_keywords: int = 12, max_length: int = 5) -> st.SearchStrategy[KeywordSet]:
    """`KeywordSet` version of `keyword_lists`."""
    return keyword_lists(max_keywords, max_length).map(KeywordSet.from_sequences)


def _thresholds() -> st.SearchStrategy[float]:
    return st.sampled_from([-math.inf] * len(THRESHOLDS) + THRESHOLDS)  # index 0 is -inf


@st.composite
def search_configs(draw: st.DrawFn, max_beam: int = 8, max_results: int = 10) -> SearchConfig:
    """Beam 1..max_beam (sometimes far larger than the keyword set), R None or 1..max_results, τ, σ, α."""
    # sampled_from rather than integers(): hypothesis biases integers() hard towards the lower bound.
    beam = draw(st.sampled_from([2, 1, 3, *range(1, max_beam + 1), 16, 64]))
    return SearchConfig(
        beam_width=beam,
        max_results=draw(st.sampled_from([None, 2, *[None] * max_results, *range(1, max_results + 1)])),
        token_threshold=draw(_thresholds()),
        score_threshold=draw(_thresholds()),
        length_norm=draw(st.sampled_from([0.0, 0.0, 0.0, 0.5, 1.0, 2.0, 0.7])),
    )


def _prefix_for(rnd: random.Random, kind: str, kws: list[list[int]], alphabet: list[int]) -> list[int]:
    kw = rnd.choice(kws)
    if kind == "root":
        return []
    if kind == "inner":  # usually has children, may be a whole keyword too
        return kw[: rnd.randint(1, max(1, len(kw) - 1))]
    if kind == "whole":  # a whole keyword: may be a leaf, may have children
        return list(kw)
    if kind == "absent":  # usually not in the trie (a valid prefix plus a token)
        return kw[: rnd.randint(0, len(kw))] + [rnd.choice(alphabet + [4294967294])]
    return [rnd.choice(SPECIAL_TOKENS) for _ in range(rnd.randint(1, 3))]


def proposals_for(rnd: random.Random, kws: list[list[int]], prefix_lengths: list[int], steps: int, k: int,
                  palette: list[float]) -> Proposals:
    """Rows mostly made of tokens found in the keywords at the depth the row is searched at, plus
    distractors and both spellings of padding (whose logprobs may be anything, NaN and +inf included)."""
    alphabet = sorted({x for kw in kws for x in kw})
    q_n = len(prefix_lengths)
    tokens = np.full((q_n, steps, k), PAD, dtype=np.int64)
    logprobs = np.zeros((q_n, steps, k), dtype=np.float32)
    for q in range(q_n):
        for t in range(steps):
            depth = prefix_lengths[q] + t
            at_depth = sorted({kw[depth] for kw in kws if len(kw) > depth})
            rnd.shuffle(at_depth)
            row = at_depth if rnd.random() < 0.6 else at_depth[: rnd.randint(0, len(at_depth))]
            for _ in range(rnd.randint(0, max(0, k - len(row)))):
                u = rnd.random()
                row.append(rnd.choice(alphabet) if u < 0.5 else rnd.choice(SPECIAL_TOKENS) if u < 0.8
                           else rnd.randrange(PAD))
            row = list(dict.fromkeys(row))[:k]  # unique, in order
            entries = row + [rnd.choice([-1, PAD]) for _ in range(k - len(row))]
            rnd.shuffle(entries)
            for j, x in enumerate(entries):
                tokens[q, t, j] = x
                logprobs[q, t, j] = rnd.choice(PAD_LOGPROBS if x in (-1, PAD) else palette)
    return Proposals(tokens, logprobs, probabilities=False)  # a positive palette value is a model score


@st.composite
def search_cases(draw: st.DrawFn, max_queries: int = 3, max_steps: int = 5, max_k: int = 6,
                 max_keywords: int = 12, max_length: int = 5, max_beam: int = 8, prefixes: bool = True,
                 ) -> tuple[KeywordSet, Proposals, SearchConfig, list[list[int]] | None]:
    """A small ``(keywords, proposals, config, prefixes)`` case; ``prefixes`` is None or one list per query."""
    kws = draw(keyword_lists(max_keywords, max_length))
    keywords = KeywordSet.from_sequences(kws)
    alphabet = sorted({x for kw in kws for x in kw})
    q_n = draw(st.sampled_from([min(2, max_queries), *range(1, max_queries + 1)]))
    rnd = draw(_rngs())
    forced: list[list[int]] | None = None
    if prefixes and draw(st.booleans()):
        kinds = draw(st.lists(st.sampled_from(["root", "inner", "inner", "inner", "whole", "absent", "random"]),
                              min_size=q_n, max_size=q_n))
        forced = [_prefix_for(rnd, kind, kws, alphabet) for kind in kinds]
    steps = draw(st.sampled_from([min(4, max_steps), *range(1, max_steps + 1), *range(2, max_steps + 1), 0]))
    k = draw(st.sampled_from([max_k, *range(1, max_k + 1), *range(max(1, max_k // 2), max_k + 1), 0]))
    lengths = [len(p) for p in forced] if forced is not None else [0] * q_n
    palette = draw(_palette())
    proposals = proposals_for(rnd, kws, lengths, steps, k, palette)
    config = draw(search_configs(max_beam=max_beam))
    # Thresholds right at the values the search compares: a palette logprob (as float64, or exactly its
    # float32 value) for τ, a reachable score (a float32 sum of palette values, or the float64 sum) for σ.
    tau_kind, sigma_kind = draw(st.sampled_from(_THRESHOLD_KINDS)), draw(st.sampled_from(_THRESHOLD_KINDS))
    finite = [v for v in palette if math.isfinite(v)] or [0.0]
    if tau_kind != "config":
        v = rnd.choice(finite)
        config = dataclasses.replace(config, token_threshold=float(np.float32(v)) if tau_kind == "f32" else v)
    if sigma_kind != "config":
        terms = [rnd.choice(finite) for _ in range(rnd.randint(1, max(1, steps)))]
        with np.errstate(over="ignore"):
            s32 = np.float32(0.0)
            for v in terms:
                s32 = np.float32(s32 + np.float32(v))
        sigma = float(s32) if sigma_kind == "f32" else math.fsum(terms)
        if not math.isnan(sigma):
            config = dataclasses.replace(config, score_threshold=sigma)
    return keywords, proposals, config, forced


def rows_from_keywords(rng: np.random.Generator, kws: list[list[int]], q_n: int, steps: int, k: int,
                       prefix_len: int = 0, distractors: int = 2, quantised: bool = True) -> Proposals:
    """Rows of tokens found in the keywords at the searched depth, plus distractors, shuffled, padded."""
    tokens = np.full((q_n, steps, k), 2**32 - 1, dtype=np.int64)
    logprobs = np.full((q_n, steps, k), -np.inf, dtype=np.float32)
    for t in range(steps):
        depth = prefix_len + t
        pool = np.array(sorted({kw[depth] for kw in kws if len(kw) > depth}), dtype=np.int64)
        for q in range(q_n):
            row = rng.permutation(pool)[: max(k - distractors, 0)].tolist()
            extra = rng.integers(0, 2**32 - 2, size=distractors).tolist()
            row = list(dict.fromkeys(row + extra))[:k]
            tokens[q, t, : len(row)] = row
            tokens[q, t] = rng.permutation(tokens[q, t])
            if quantised:
                logprobs[q, t] = rng.integers(-8, 1, size=k) * 0.25
            else:
                logprobs[q, t] = np.log(rng.random(k))
    return Proposals(tokens, logprobs)
