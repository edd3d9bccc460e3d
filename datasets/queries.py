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

import time
from dataclasses import replace

import numpy as np

from flashtrie.errors import InputError
from flashtrie.keywords import KeywordSet

from ._hashing import fingerprint, full_keyword_hashes
from ._queries_v1 import generate_v1
from ._queries_v2 import VERSION, ScaledLibrary, check_device, max_token
from ._query_model import GENERATORS, PRESETS, QueryParams, QueryWorkload
from ._query_rows import WorkloadArrays, draw_topic, top_keys, topic_law

__all__ = ["GENERATORS", "PRESETS", "QueryParams", "QueryWorkload", "generate_queries", "generate_queries_from",
           "library_fingerprint", "queries_peak_bytes", "DEFAULT_STEPS"]

#: Decoding steps of a generated workload (`generate_queries`' default).
DEFAULT_STEPS = 8
#: The generator's fixed working set (66 to 81 MB measured) and its part per library keyword (about 40).
_BASE_BYTES = 96 << 20
_LIBRARY_BYTES = 64
#: Its peak per byte of the workload arrays it returns (2.4 to 2.9 measured at 2M to 16M proposals), and the
#: bytes of one proposal (a 4-byte token and a 4-byte logprob).
_ARRAY_FACTOR = 4
_PROPOSAL_BYTES = 8


def queries_peak_bytes(num_queries: int, num_steps: int, proposals_per_step: int, library: int = 0) -> int:
    """Estimated peak memory of `generate_queries` over a library of ``library`` keywords, for checks before
    the work."""
    arrays = num_queries * num_steps * proposals_per_step * _PROPOSAL_BYTES
    return _BASE_BYTES + library * _LIBRARY_BYTES + _ARRAY_FACTOR * arrays


def library_fingerprint(keywords: KeywordSet) -> str:
    """A 64-bit hex fingerprint of the keyword list (tokens and order), to tie a workload to its library."""
    return fingerprint(full_keyword_hashes(keywords))



def generate_queries(
    keywords: KeywordSet,
    num_queries: int,
    *,
    num_steps: int = DEFAULT_STEPS,
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
    return generate_v1(keywords, params)


def _generate_v2(keywords: KeywordSet, params: QueryParams, threads: int | None,
                 timings: dict[str, float], device: str) -> QueryWorkload:
    """Version 2 (`datasets._queries_v2`): topics drawn first, their members collected in one pass."""
    lib = ScaledLibrary(keywords, params.num_steps, params.topic_depth, params.popularity_power,
                        params.popular_pool * params.proposals_per_step, threads, timings, device)
    params = replace(params, library_size=len(keywords), library_fingerprint=lib.fingerprint)
    rng = np.random.default_rng(params.seed)
    out = WorkloadArrays(params, keywords)
    eligible, topic_cdf = topic_law(lib.group_sizes, params)
    groups = [draw_topic(rng, eligible, topic_cdf) for _ in range(params.num_queries)]
    t0 = time.perf_counter()
    if groups:
        lib.prepare_topics(np.array(groups))
    t1 = time.perf_counter()
    timings["members of the chosen topics"] = t1 - t0
    chosen: list[np.ndarray] = []
    for q, g in enumerate(groups):
        out.topics[q] = lib.tokens_of(np.array([lib.topic_member(g)]))[0, : params.topic_depth]
        ids, logu, mlen = lib.top_members(rng, g, max(params.num_relevant, params.topic_sample))
        rel = ids[top_keys(logu / mlen**params.length_bias, params.num_relevant)]
        sample = ids[top_keys(logu / mlen**params.path_length_bias, params.topic_sample)]
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
