"""Synthetic query workloads: model proposals shaped like a generative-retrieval model's, with ground truth.

For each query a *topic* is picked (a prefix of ``topic_depth`` tokens shared by at least
``min_topic_size`` keywords; popular topics more often) and, among the keywords under it, a set of
*relevant* keywords (weighted by ``length ** length_bias``, so some are long).  Row t of the query then holds, in order:

1. the step-t tokens of the relevant keywords (highest logits);
2. *real continuations*, ``density`` of the slots left after 1: ``subtree_share`` of them are step-t
   tokens of other keywords under the topic (a sample of ``topic_sample`` of them), the rest step-t
   tokens of a *background* sample of ``background_sample`` keywords from the whole library (both
   weighted by ``length ** path_length_bias``; tokens are taken keyword by keyword in one order at
   every step, so whole paths are present and the beam can follow them to depth), topped up with
   tokens that occur at depth t anywhere in the library (drawn by frequency, without replacement,
   from the ``popular_pool * K`` most frequent ones);
3. random distractor tokens, uniform over the vocabulary, to fill the row to K.

Duplicates are removed at every stage (a token appears once per row); a row is padded with
``PAD_TOKEN`` only when the vocabulary cannot fill it.  Logprobs are a log-softmax (over the row plus
one ``tail_logit`` entry standing for the rest of the vocabulary) of per-class logit levels, falling
with rank inside a class, plus Gaussian noise: rows are sorted-ish, not sorted (``sort_rows`` sorts).

Presets: ``dense`` (256 relevant keywords, rows ~95 % real continuations: beams fill up as in
production) and ``sparse`` (8 relevant keywords, the rest random: few valid proposals, like the public
FlashTrie example generator).  Every argument left as ``None`` takes the preset's value.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np

from flashtrie.cpus import in_parallel, usable_cpus
from flashtrie.errors import InputError
from flashtrie.keywords import KeywordSet
from flashtrie.limits import MAX_PROPOSALS, MAX_STEPS, MAX_TOKEN, PAD_TOKEN
from flashtrie.proposals import Proposals

from ._hashing import ROOT_HASH as _ROOT
from ._hashing import canonical_ids, child_hash, full_keyword_hashes, mix64
from ._queries_v2 import VERSION, ScaledLibrary, check_device, max_token

__all__ = ["PRESETS", "QueryParams", "QueryWorkload", "generate_queries", "generate_queries_from",
           "library_fingerprint"]

#: Generator versions: 1 (kept so old seeds reproduce) and 2 (the default: same law, per-query work
#: independent of the library size; `datasets._queries_v2`).
GENERATORS = ("flashtrie.datasets.queries/1", VERSION)

#: Preset values of the tunable `QueryParams` fields.
PRESETS: dict[str, dict[str, Any]] = {
    "dense": {
        "num_relevant": 256, "density": 0.95, "subtree_share": 0.3, "min_topic_size": 4096,
        "topic_sample": 4096, "background_sample": 8192, "length_bias": 2.0, "path_length_bias": 8.0,
        "logit_levels": (10.0, 6.0, 4.0, 0.0),
    },
    "sparse": {
        "num_relevant": 8, "density": 0.0, "subtree_share": 0.5, "min_topic_size": 8,
        "topic_sample": 8, "background_sample": 0, "length_bias": 1.0, "path_length_bias": 1.0,
        "logit_levels": (6.0, 3.0, 2.0, 0.0),
    },
}

@dataclass(frozen=True)
class QueryParams:
    """Every parameter that generated a workload (saved with it)."""

    num_queries: int
    num_steps: int = 8
    proposals_per_step: int = 1000
    preset: str = "dense"
    seed: int = 0
    num_relevant: int = 256
    density: float = 0.95
    subtree_share: float = 0.3
    topic_depth: int = 1
    min_topic_size: int = 4096
    topic_size_power: float = 0.5
    topic_sample: int = 4096
    background_sample: int = 8192
    length_bias: float = 2.0
    path_length_bias: float = 8.0
    popularity_power: float = 1.0
    popular_pool: int = 4
    vocab_size: int = 0
    logit_levels: tuple[float, float, float, float] = (10.0, 6.0, 4.0, 0.0)
    logit_slope: float = 1.0
    logit_noise: float = 1.0
    tail_logit: float = 5.0
    sort_rows: bool = False
    library_size: int = 0
    library_fingerprint: str = ""
    generator: str = field(default=VERSION)

    def __post_init__(self) -> None:
        object.__setattr__(self, "logit_levels", tuple(float(x) for x in self.logit_levels))
        checks: list[tuple[str, bool, str]] = [
            ("num_queries", self.num_queries >= 0, ">= 0"),
            ("num_steps", 1 <= self.num_steps <= MAX_STEPS, f"in [1, {MAX_STEPS}]"),
            ("proposals_per_step", 1 <= self.proposals_per_step <= MAX_PROPOSALS, f"in [1, {MAX_PROPOSALS}]"),
            ("generator", self.generator in GENERATORS, f"one of {list(GENERATORS)}"),
            ("preset", self.preset in PRESETS or self.preset == "custom", f"one of {sorted(PRESETS)} or 'custom'"),
            ("num_relevant", self.num_relevant >= 1, ">= 1"),
            ("density", 0.0 <= self.density <= 1.0, "in [0, 1]"),
            ("subtree_share", 0.0 <= self.subtree_share <= 1.0, "in [0, 1]"),
            ("topic_depth", self.topic_depth >= 1, ">= 1"),
            ("min_topic_size", self.min_topic_size >= 1, ">= 1"),
            ("topic_size_power", math.isfinite(self.topic_size_power), "finite"),
            ("topic_sample", self.topic_sample >= 1, ">= 1"),
            ("background_sample", self.background_sample >= 0, ">= 0"),
            ("length_bias", math.isfinite(self.length_bias), "finite"),
            ("path_length_bias", math.isfinite(self.path_length_bias), "finite"),
            ("popularity_power", math.isfinite(self.popularity_power) and self.popularity_power >= 0, ">= 0"),
            ("popular_pool", self.popular_pool >= 1, ">= 1"),
            ("vocab_size", 0 <= self.vocab_size <= MAX_TOKEN + 1, f"in [0, {MAX_TOKEN + 1}] (0: from the library)"),
            ("logit_levels", len(self.logit_levels) == 4 and all(map(math.isfinite, self.logit_levels)),
             "4 finite values (relevant, topic, popular, random)"),
            ("logit_slope", math.isfinite(self.logit_slope) and self.logit_slope >= 0, ">= 0"),
            ("logit_noise", math.isfinite(self.logit_noise) and self.logit_noise >= 0, ">= 0"),
            ("tail_logit", math.isfinite(self.tail_logit) or self.tail_logit == -math.inf, "finite or -inf"),
        ]
        for name, ok, want in checks:
            if not ok:
                raise InputError(f"{name}: expected {want}, got {getattr(self, name)!r}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field."""
        d = asdict(self)
        d["logit_levels"] = list(d["logit_levels"])
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> QueryParams:
        """Inverse of `to_dict`."""
        try:
            return cls(**d)
        except TypeError as e:
            raise InputError(f"query parameters: {e}") from None


@dataclass(frozen=True, eq=False)
class QueryWorkload:
    """Generated queries: ``proposals`` ([Q, T, K]), ``relevant[q]`` (sorted keyword ids), the generating params.

    ``topics[q]`` is query q's topic prefix (``topic_depth`` tokens; every relevant keyword starts with it).
    Relevant ids are canonical: for a keyword given twice, the smaller id (the one a search returns).
    """

    proposals: Proposals
    relevant: list[np.ndarray]
    params: QueryParams
    topics: np.ndarray

    @property
    def num_queries(self) -> int:
        return self.proposals.num_queries


def library_fingerprint(keywords: KeywordSet) -> str:
    """A 64-bit hex fingerprint of the keyword list (tokens and order), to tie a workload to its library."""
    return _fingerprint(full_keyword_hashes(keywords))


def _fingerprint(full_hashes: np.ndarray) -> str:
    n = full_hashes.size
    step = max(1 << 20, -(-n // (4 * usable_cpus())))

    def part(s: int) -> int:  # xor is associative: ranges on threads give the same value
        full = np.arange(s, min(s + step, n), dtype=np.uint64)
        full *= np.uint64(0x9E3779B97F4A7C15)
        full ^= full_hashes[s : s + step]
        return int(np.bitwise_xor.reduce(mix64(full))) if full.size else 0

    acc = 0
    for x in in_parallel([partial(part, s) for s in range(0, n, step)], usable_cpus()):
        acc ^= x
    return f"{acc ^ n:016x}"


def generate_queries(
    keywords: KeywordSet,
    num_queries: int,
    *,
    num_steps: int = 8,
    proposals_per_step: int = 1000,
    preset: str = "dense",
    seed: int = 0,
    num_relevant: int | None = None,
    density: float | None = None,
    subtree_share: float | None = None,
    topic_depth: int | None = None,
    min_topic_size: int | None = None,
    topic_size_power: float | None = None,
    topic_sample: int | None = None,
    background_sample: int | None = None,
    length_bias: float | None = None,
    path_length_bias: float | None = None,
    popularity_power: float | None = None,
    popular_pool: int | None = None,
    vocab_size: int | None = None,
    logit_levels: tuple[float, float, float, float] | None = None,
    logit_slope: float | None = None,
    logit_noise: float | None = None,
    tail_logit: float | None = None,
    sort_rows: bool | None = None,
    generator: str = VERSION,
    threads: int | None = None,
    timings: dict[str, float] | None = None,
    device: str = "auto",
) -> QueryWorkload:
    """Generate ``num_queries`` queries of ``num_steps`` rows of ``proposals_per_step`` proposals.

    See the module docstring.  ``vocab_size`` (for random distractors) defaults to the library's
    largest token + 1.  Deterministic in ``seed`` for a given library (and ``generator`` version;
    ``threads`` changes the speed only).  ``timings`` (a dict, optional) receives the seconds of each
    step of version 2 (the one-off passes over the library, then the per-query draws; the library pass's
    key names where it ran).  ``device`` ("auto", "cpu" or "gpu") is where version 2's library pass runs:
    "auto" takes the GPU where cupy and a GPU are present; the output is the same bit for bit.
    """
    check_device(device)
    if not isinstance(keywords, KeywordSet):
        raise InputError(f"keywords: expected a KeywordSet, got {type(keywords).__name__}")
    if len(keywords) == 0:
        raise InputError("keywords: the library is empty; queries need at least one keyword")
    if preset not in PRESETS:
        raise InputError(f"preset: expected one of {sorted(PRESETS)}, got {preset!r}")
    given = {
        "num_relevant": num_relevant, "density": density, "subtree_share": subtree_share,
        "topic_depth": topic_depth, "min_topic_size": min_topic_size, "topic_size_power": topic_size_power,
        "topic_sample": topic_sample, "background_sample": background_sample, "length_bias": length_bias,
        "path_length_bias": path_length_bias, "popularity_power": popularity_power,
        "popular_pool": popular_pool, "logit_levels": logit_levels, "logit_slope": logit_slope,
        "logit_noise": logit_noise,
        "tail_logit": tail_logit, "sort_rows": sort_rows,
    }
    values = dict(PRESETS[preset])
    values.update({k: v for k, v in given.items() if v is not None})
    t0 = time.perf_counter()
    vocab = int(vocab_size) if vocab_size else max_token(keywords, threads) + 1
    if timings is not None:
        timings["largest token"] = time.perf_counter() - t0
    params = QueryParams(num_queries=num_queries, num_steps=num_steps, proposals_per_step=proposals_per_step,
                         preset=preset, seed=seed, vocab_size=vocab, library_size=len(keywords),
                         generator=generator, **values)
    return generate_queries_from(keywords, params, threads=threads, timings=timings, device=device)


def generate_queries_from(keywords: KeywordSet, params: QueryParams, *, threads: int | None = None,
                          timings: dict[str, float] | None = None, device: str = "auto") -> QueryWorkload:
    """Generate the workload described by ``params`` over ``keywords`` (``library_*`` fields are filled in).

    ``params.generator`` picks the version (2: per-query work independent of the library size; 1: kept so
    old seeds reproduce).  ``threads`` (version 2's one-off passes over the library) never changes the output;
    ``timings`` (a dict, optional) receives the seconds of each step of version 2; ``device`` ("auto",
    "cpu", "gpu") is where its library pass runs (the same output on each; version 1 refuses "gpu").
    """
    check_device(device)
    if len(keywords) == 0:
        raise InputError("keywords: the library is empty; queries need at least one keyword")
    if params.generator == VERSION:
        return _generate_v2(keywords, params, threads, {} if timings is None else timings, device)
    if device == "gpu":
        raise InputError(f"device: 'gpu' runs version {VERSION}'s library pass; generator {params.generator} "
                         f"has none (it runs on the CPU): use device='cpu' or 'auto', or generator {VERSION}")
    lib = _Library(keywords, params.num_steps, params.topic_depth, params.popularity_power,
                   params.popular_pool * params.proposals_per_step)
    params = replace(params, library_size=len(keywords), library_fingerprint=_fingerprint(lib.full))
    rng = np.random.default_rng(params.seed)
    out = _Output(params, keywords)
    eligible, topic_cdf = _topic_law(lib.group_sizes, params)
    for q in range(params.num_queries):
        g = _draw_topic(rng, eligible, topic_cdf)
        members = lib.group_members(g)
        out.topics[q] = lib.tokens_of(members[:1])[0, : params.topic_depth]
        # length-biased sample without replacement (Efraimidis-Spirakis keys); the first ones are relevant
        u = np.log(rng.random(members.size))
        mlen = lib.lengths[members].astype(np.float64)
        rel = members[_top_keys(u / mlen**params.length_bias, params.num_relevant)]
        sample = members[_top_keys(u / mlen**params.path_length_bias, params.topic_sample)]
        out.relevant.append(np.unique(lib.canon[rel]))
        bg = lib.background(rng, params.background_sample, params.path_length_bias)
        out.fill_rows(rng, q, lib.tokens_of(rel), lib.tokens_of(sample), lib.tokens_of(bg), lib)
    return out.workload()


def _generate_v2(keywords: KeywordSet, params: QueryParams, threads: int | None,
                 timings: dict[str, float], device: str) -> QueryWorkload:
    """Version 2 (`datasets._queries_v2`): topics drawn first, their members collected in one pass."""
    lib = ScaledLibrary(keywords, params.num_steps, params.topic_depth, params.popularity_power,
                        params.popular_pool * params.proposals_per_step, threads, timings, device)
    params = replace(params, library_size=len(keywords), library_fingerprint=lib.fingerprint)
    rng = np.random.default_rng(params.seed)
    out = _Output(params, keywords)
    eligible, topic_cdf = _topic_law(lib.group_sizes, params)
    groups = [_draw_topic(rng, eligible, topic_cdf) for _ in range(params.num_queries)]
    t0 = time.perf_counter()
    if groups:
        lib.prepare_topics(np.array(groups))
    t1 = time.perf_counter()
    timings["members of the chosen topics"] = t1 - t0
    chosen: list[np.ndarray] = []
    for q, g in enumerate(groups):
        out.topics[q] = lib.tokens_of(np.array([lib.topic_member(g)]))[0, : params.topic_depth]
        ids, logu, mlen = lib.top_members(rng, g, max(params.num_relevant, params.topic_sample))
        rel = ids[_top_keys(logu / mlen**params.length_bias, params.num_relevant)]
        sample = ids[_top_keys(logu / mlen**params.path_length_bias, params.topic_sample)]
        chosen.append(rel)
        bg = lib.background(rng, params.background_sample, params.path_length_bias)
        out.fill_rows(rng, q, lib.tokens_of(rel), lib.tokens_of(sample), lib.tokens_of(bg), lib)
    t2 = time.perf_counter()
    timings["per-query draws"] = t2 - t1
    if chosen:
        canon = lib.canonical(np.concatenate(chosen))
        at = np.cumsum([0] + [r.size for r in chosen])
        out.relevant.extend(np.unique(canon[at[i] : at[i + 1]]) for i in range(len(chosen)))
    timings["canonical ids"] = time.perf_counter() - t2
    return out.workload()


class _Output:
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
                  bg_cols: np.ndarray, lib: _Library | ScaledLibrary) -> None:
        p = self.params
        for t in range(p.num_steps):
            row_tok, row_cls, row_rank = _build_row(rng, rel_cols[:, t], sample_cols[:, t], bg_cols[:, t], lib, t,
                                                    self.vocab, p.proposals_per_step, p)
            lp = _row_logprobs(rng, row_cls, row_rank, p)
            if p.sort_rows:
                o = np.argsort(-lp, kind="stable")
                row_tok, lp = row_tok[o], lp[o]
            self.tokens[q, t, : row_tok.size] = row_tok
            self.logprobs[q, t, : row_tok.size] = lp

    def workload(self) -> QueryWorkload:
        return QueryWorkload(Proposals(self.tokens, self.logprobs), self.relevant, self.params, self.topics)


def _topic_law(sizes: np.ndarray, params: QueryParams) -> tuple[np.ndarray, np.ndarray]:
    """The groups a topic may be (at least ``min_topic_size`` members, else the largest) and their CDF."""
    eligible = np.flatnonzero(sizes >= params.min_topic_size)
    if eligible.size == 0:
        eligible = np.flatnonzero(sizes == sizes.max())
    w = sizes[eligible].astype(np.float64) ** params.topic_size_power
    return eligible, np.cumsum(w / w.sum())


def _draw_topic(rng: np.random.Generator, eligible: np.ndarray, topic_cdf: np.ndarray) -> int:
    return int(eligible[min(int(np.searchsorted(topic_cdf, rng.random(), side="right")), eligible.size - 1)])


# ------------------------------------------------------------------------------------------ helpers
class _Library:
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


def _top_keys(key: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest keys, largest first (all of them when there are fewer)."""
    if k < key.size:
        top = np.argpartition(-key, k - 1)[:k]
    else:
        top = np.arange(key.size)
    return top[np.argsort(-key[top], kind="stable")]


def _first_unique(x: np.ndarray) -> np.ndarray:
    """``x`` without repeats, keeping first occurrences in order."""
    if x.size == 0:
        return x
    _, first = np.unique(x, return_index=True)
    return x[np.sort(first)]


def _build_row(rng: np.random.Generator, rel_col: np.ndarray, sample_col: np.ndarray, bg_col: np.ndarray,
               lib: _Library | ScaledLibrary, t: int, vocab: int, k_n: int,
               p: QueryParams) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tokens of one row (distinct, at most K), with their class (0..3) and rank within the class."""
    parts: list[np.ndarray] = []
    rel = _first_unique(rel_col[rel_col != PAD_TOKEN])[:k_n]
    parts.append(rel)
    used = rel.size
    n_real = int(round(p.density * (k_n - used)))
    n_topic = int(round(p.subtree_share * n_real))
    topic = _first_unique(sample_col[sample_col != PAD_TOKEN])
    topic = topic[~np.isin(topic, rel)][:n_topic]
    parts.append(topic)
    used += topic.size
    n_pop = n_real - topic.size
    pop = _first_unique(bg_col[bg_col != PAD_TOKEN])
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
    rnd = _random_tokens(rng, vocab, need, np.concatenate(parts))
    parts.append(rnd)
    row = np.concatenate(parts).astype(np.uint32)
    cls = np.concatenate([np.full(x.size, c, dtype=np.int8) for c, x in enumerate(parts)])
    rank = np.concatenate([np.arange(x.size) for x in parts])
    return row, cls, rank


def _random_tokens(rng: np.random.Generator, vocab: int, need: int, exclude: np.ndarray) -> np.ndarray:
    """Up to ``need`` distinct tokens uniform in ``[0, vocab)``, none in ``exclude``."""
    if need <= 0:
        return np.zeros(0, dtype=np.uint32)
    if vocab - exclude.size <= 4 * need:  # small vocabulary: draw from the complement directly
        rest = np.setdiff1d(np.arange(vocab, dtype=np.uint32), exclude)
        return rng.permutation(rest)[:need]
    out = np.zeros(0, dtype=np.uint32)
    while out.size < need:
        draws = rng.integers(0, vocab, size=need + need // 4 + 16, dtype=np.uint32)
        cand = _first_unique(np.concatenate([out, draws]))
        out = cand[~np.isin(cand, exclude)][:need]
    return out


def _row_logprobs(rng: np.random.Generator, cls: np.ndarray, rank: np.ndarray, p: QueryParams) -> np.ndarray:
    """float32 log-softmax of noisy logits: class level, minus ``logit_slope * log1p(rank)``, plus noise."""
    levels = np.asarray(p.logit_levels, dtype=np.float64)
    logits = levels[cls] - p.logit_slope * np.log1p(rank) + p.logit_noise * rng.standard_normal(cls.size)
    m = max(float(logits.max()) if logits.size else -np.inf, p.tail_logit)
    z = np.exp(logits - m).sum() + (math.exp(p.tail_logit - m) if p.tail_logit > -math.inf else 0.0)
    return (logits - (m + math.log(z))).astype(np.float32)
