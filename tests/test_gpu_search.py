"""`GpuSearcher` against `NumpySearcher`: bit-for-bit, on hypothesis cases and adversarial ones.

Every test here is marked ``gpu`` and skipped (by the ``gpu_ok`` fixture below) where cuda.core is missing
or no CUDA device is present.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings
from strategies import rows_from_keywords, search_cases

from flashtrie import DeviceError, InputError, KeywordSet, NarrowLoudsIndex, Proposals, SearchConfig, SearchResult

pytestmark = pytest.mark.gpu
PAD = 2**32 - 1


@lru_cache(maxsize=1)
def _gpu_reason() -> str | None:
    """None when a CUDA device is usable, else why not."""
    try:
        from cuda.core import Device

        Device(0).set_current()
    except Exception as e:  # no cuda.core, no driver, no device
        return f"no usable CUDA device: {type(e).__name__}: {e}"
    return None


@pytest.fixture(autouse=True)
def gpu_ok() -> None:
    """Skip every test of this file where no GPU is present."""
    reason = _gpu_reason()
    if reason is not None:
        pytest.skip(reason)


def make(keywords: KeywordSet | list[list[int]]):
    from flashtrie.gpu_impl import GpuSearcher
    from flashtrie.reference_cpu.numpy_search import NumpySearcher

    ks = keywords if isinstance(keywords, KeywordSet) else KeywordSet.from_sequences(keywords)
    index = NarrowLoudsIndex.build(ks)
    return NumpySearcher(index), GpuSearcher(index)


def assert_same(a: SearchResult, b: SearchResult) -> None:
    diff = a.first_difference(b)
    assert diff is None, diff


def check(ref, gpu, proposals: Proposals, config: SearchConfig, prefixes=None) -> SearchResult:
    want = ref.search(proposals, config, prefixes)
    got = gpu.search(proposals, config, prefixes)
    assert_same(got, want)
    return got




# ---------------------------------------------------------------------------------------- random parity
@settings(max_examples=40)
@given(search_cases())
def test_matches_numpy(case) -> None:
    keywords, proposals, config, prefixes = case
    ref, gpu = make(keywords)
    check(ref, gpu, proposals, config, prefixes)


@settings(max_examples=25)
@given(search_cases(max_queries=6, max_steps=8, max_k=10, max_keywords=40, max_length=8, max_beam=6))
def test_matches_numpy_bigger(case) -> None:
    keywords, proposals, config, prefixes = case
    ref, gpu = make(keywords)
    check(ref, gpu, proposals, config, prefixes)


@settings(max_examples=30)
@given(search_cases(max_queries=4, max_steps=7, max_beam=4))
def test_early_stop_on_equals_numpy_without_it(case) -> None:
    """The kernel's early stop (scoring.pool_closed, in scoring.cuh) changes no result, bit for bit."""
    keywords, proposals, config, prefixes = case
    ref, gpu = make(keywords)
    ref.early_stop = False
    check(ref, gpu, proposals, config, prefixes)


# ------------------------------------------------------------------------------------------ adversarial
def test_huge_root_fanout_and_dense_level_two() -> None:
    """100k root children (row search among them), a level of 2-token keywords dense enough that the
    candidates outnumber the shared sort buffer (radix select path), wide labels near 2**32."""
    rng = np.random.default_rng(7)
    roots = (np.arange(100_000, dtype=np.int64) * 42_949 + 3)
    kws = [[int(x)] for x in roots]
    alpha = rng.choice(roots, size=300, replace=False)
    second = rng.choice(2**32 - 2, size=600, replace=False)
    for a in alpha:
        for b in rng.choice(second, size=200, replace=False):
            kws.append([int(a), int(b)])
    kws += [[int(alpha[0]), int(second[0]), 5, 6, 7], [int(alpha[0]), int(second[0]), 5, 8]]
    ref, gpu = make(kws)
    q_n, t_n, k = 3, 4, 400
    tok = np.full((q_n, t_n, k), PAD, dtype=np.int64)
    lp = (rng.integers(-12, 1, size=(q_n, t_n, k)) * 0.25).astype(np.float32)
    for q in range(q_n):
        tok[q, 0, :300] = rng.permutation(alpha)
        tok[q, 0, 300:] = rng.choice(roots, size=100, replace=False) + 1  # mostly absent
        tok[q, 1, :] = rng.permutation(second)[:k]
        tok[q, 2, :3] = [5, 6, 8]
        tok[q, 3, :2] = [7, 8]
    p = Proposals(tok, lp)
    for b, r in ((4, 10), (64, 64), (300, 1000), (1000, 300)):
        check(ref, gpu, p, SearchConfig(beam_width=b, max_results=r))
    check(ref, gpu, p, SearchConfig(beam_width=50, max_results=80, length_norm=0.7, token_threshold=-2.5))


def test_long_keywords_up_to_64_and_prefixes() -> None:
    rng = np.random.default_rng(11)
    base = rng.integers(0, 3, size=64).tolist()
    kws = [base[:n] for n in (1, 2, 5, 17, 32, 63, 64)]
    kws += [base[:n] + [int(x) for x in rng.integers(0, 3, size=int(rng.integers(1, 64 - n + 1)))]
            for n in rng.integers(0, 60, size=40)]
    kws = [kw[:64] for kw in kws]
    kws += [[9] + list(range(100, 160)), [9] + list(range(100, 130)) + [7]]  # long compressed edges
    ref, gpu = make(kws)
    for alpha in (0.0, 1.0, 2.5):
        p = rows_from_keywords(rng, kws, q_n=2, steps=66, k=4, distractors=1)
        check(ref, gpu, p, SearchConfig(beam_width=3, max_results=12, length_norm=alpha))
    # forced prefixes: mid-edge, at a node, a whole keyword, absent, empty
    prefixes = [[9, 100, 101], [9] + list(range(100, 130)), base[:17], [9, 101], [], base[:5]]
    steps = 40
    tok = np.full((len(prefixes), steps, 6), PAD, dtype=np.int64)
    lp = np.zeros(tok.shape, dtype=np.float32)
    for q, pre in enumerate(prefixes):
        for t in range(steps):
            depth = len(pre) + t
            at = sorted({kw[depth] for kw in kws if len(kw) > depth and kw[:len(pre)] == pre})[:5]
            tok[q, t, : len(at)] = at
            lp[q, t, : len(at)] = -0.25 * (1 + np.arange(len(at)))
    got = check(ref, gpu, Proposals(tok, lp), SearchConfig(beam_width=4, max_results=20, length_norm=0.5),
                prefixes)
    assert got.num_results[3] == 0 and got.num_results[0] > 0


def test_ties_thresholds_and_signed_zero() -> None:
    rng = np.random.default_rng(5)
    kws = [rng.integers(0, 5, size=int(rng.integers(1, 6))).tolist() for _ in range(120)]
    ref, gpu = make(kws)
    p = rows_from_keywords(rng, kws, q_n=3, steps=6, k=7, distractors=1)
    for value in (0.0, -0.0, -1.0):
        check(ref, gpu, Proposals(p.tokens, np.full(p.shape, value, dtype=np.float32)),
              SearchConfig(beam_width=3, max_results=7))
    lp = np.where(rng.random(p.shape) < 0.5, np.float32(-0.0), np.float32(0.0)).astype(np.float32)
    check(ref, gpu, Proposals(p.tokens, lp), SearchConfig(beam_width=2, max_results=5))
    q = rows_from_keywords(rng, kws, q_n=3, steps=6, k=7, quantised=False)
    for tau, sigma in ((-1.0, -math.inf), (-math.inf, -2.0), (-0.3, -1.1), (0.0, -math.inf), (-5e-46, -1e39)):
        for alpha in (0.0, 0.7):
            check(ref, gpu, q, SearchConfig(beam_width=4, max_results=9, token_threshold=tau,
                                            score_threshold=sigma, length_norm=alpha))


def test_subnormals_and_overflow() -> None:
    kws = [[1, 2, 3], [1, 2], [1, 4], [5]]
    ref, gpu = make(kws)
    tok = np.array([[[1, 5, PAD], [2, 4, PAD], [3, PAD, PAD]]], dtype=np.int64)
    for vals in ([-1e-45, -3e-45, -1.1754944e-38], [-3e38, -2.5e38, -3e38], [-1e-45, 0.0, -0.0]):
        lp = np.array([[vals, vals[::-1], vals]], dtype=np.float32)
        for alpha in (0.0, 3.0):
            check(ref, gpu, Proposals(tok, lp), SearchConfig(beam_width=2, max_results=4, length_norm=alpha))


@pytest.mark.parametrize("seed", range(6))
def test_early_stop_is_exact(seed: int) -> None:
    """Small pools fill early; later rows mix large negative and positive logprobs (bounds must hold)."""
    from flashtrie.reference_cpu.numpy_search import NumpySearcher

    rng = np.random.default_rng(100 + seed)
    kws = [rng.integers(0, 12, size=int(rng.integers(1, 9))).tolist() for _ in range(3000)]
    ref, gpu = make(kws)
    plain = NumpySearcher(ref.index, early_stop=False)
    p = rows_from_keywords(rng, kws, q_n=5, steps=8, k=12, distractors=2, quantised=False)
    lp = p.logprobs.copy()
    lp[:, 3:] -= np.float32(rng.choice([0.0, 5.0, 40.0]))
    lp[:, 5, :2] = np.float32(rng.choice([0.0, 0.5, 3.0]))
    p = Proposals(p.tokens, lp)
    for b, r, alpha in ((8, 2, 0.0), (16, 5, 1.0), (4, 1, 3.0), (32, 8, 0.3)):
        cfg = SearchConfig(beam_width=b, max_results=r, length_norm=alpha)
        want = plain.search(p, cfg)
        assert_same(ref.search(p, cfg), want)
        assert_same(gpu.search(p, cfg), want)


def test_tokens_near_uint32_max() -> None:
    top = PAD - 1
    kws = [[top], [top, top - 1], [top - 1, top, top], [2**31, top], [65535, 65536, top], [0, top - 2]]
    ref, gpu = make(kws)
    tok = np.array([[[top, top - 1, 2**31, 65535, 0, PAD],
                     [top - 1, top, 65536, top - 2, PAD, 5],
                     [top, top - 1, PAD, PAD, PAD, PAD]]], dtype=np.int64)
    lp = np.array([[[-1, -0.5, -0.25, -2, -3, 0], [-1, -1, -0.5, -0.25, 0, -1], [-0.5, -0.5, 0, 0, 0, 0]]],
                  dtype=np.float32)
    got = check(ref, gpu, Proposals(tok, lp), SearchConfig(beam_width=6))
    assert got.num_results[0] == 6


@pytest.mark.parametrize("q_n", [1, 2, 7, 33, 300])
def test_batch_sizes_equal_per_query(q_n: int) -> None:
    rng = np.random.default_rng(q_n)
    kws = [rng.integers(0, 40, size=int(rng.integers(1, 7))).tolist() for _ in range(3000)]
    ref, gpu = make(kws)
    p = rows_from_keywords(rng, kws, q_n=q_n, steps=6, k=24, distractors=3, quantised=q_n % 2 == 1)
    cfg = SearchConfig(beam_width=16, max_results=40, length_norm=0.5)
    batch = check(ref, gpu, p, cfg)
    for q in sorted({0, q_n // 2, q_n - 1}):
        assert_same(gpu.search(p[q], cfg), SearchResult(*(getattr(batch, n)[q:q + 1] for n in (
            "keyword_ids", "scores", "norm_scores", "lengths", "num_results"))))


def test_all_padding_and_empty_shapes() -> None:
    ref, gpu = make([[1, 2], [3]])
    tok = np.full((2, 3, 4), PAD, dtype=np.int64)
    check(ref, gpu, Proposals(tok, np.zeros(tok.shape, np.float32)), SearchConfig(beam_width=2))
    for shape in ((0, 3, 4), (2, 0, 4), (2, 3, 0)):
        tok = np.full(shape, PAD, dtype=np.int64)
        got = gpu.search(Proposals(tok, np.zeros(shape, np.float32)), SearchConfig(beam_width=2, max_results=3))
        assert got.shape == (shape[0], 3) and int(got.num_results.sum()) == 0


def test_limits_refused() -> None:
    _, gpu = make([[1, 2], [3]])
    tok = np.full((1, 1, 2), PAD, dtype=np.int64)
    p = Proposals(tok, np.zeros(tok.shape, np.float32))
    with pytest.raises(InputError, match="beam_width"):
        gpu.search(p, SearchConfig(beam_width=9000))
    with pytest.raises(InputError, match="max_results"):
        gpu.search(p, SearchConfig(beam_width=2, max_results=9000))
    with pytest.raises(InputError, match="K"):
        big = np.full((1, 1, 20_000), PAD, dtype=np.int64)
        gpu.search(Proposals(big, np.zeros(big.shape, np.float32)), SearchConfig(beam_width=2))
    assert gpu.workspace_bytes(1, 1, 2, 2, 2) > 0
    with pytest.raises(InputError, match="index: expected a flashtrie.NarrowLoudsIndex"):
        type(gpu)(KeywordSet.from_sequences([[1]]))
    gpu.memory_info = lambda: (1000, 10_000)  # pretend the device is full
    with pytest.raises(DeviceError, match="needs .* bytes of device memory"):
        gpu.search(Proposals(np.full((3, 2, 5), PAD, np.uint32), np.zeros((3, 2, 5), np.float32)),
                   SearchConfig(beam_width=7))


def test_largest_shapes_match_numpy() -> None:
    """B = R = 8192 and K = 16384 (dynamic shared memory far over 48 KB), and T = 255."""
    from flashtrie.gpu_impl import GPU_MAX_BEAM, GPU_MAX_PROPOSALS, GPU_MAX_RESULTS

    rng = np.random.default_rng(11)
    kws = [rng.integers(0, 4000, size=int(rng.integers(1, 5))).tolist() for _ in range(3000)]
    ref, gpu = make(kws)
    k = GPU_MAX_PROPOSALS
    tok = np.stack([[rng.permutation(k) for _ in range(3)] for _ in range(2)]).astype(np.uint32)
    lp = np.log(rng.random(tok.shape)).astype(np.float32)
    check(ref, gpu, Proposals(tok, lp), SearchConfig(beam_width=GPU_MAX_BEAM, max_results=GPU_MAX_RESULTS))
    tok = np.full((2, 255, 8), PAD, np.uint32)
    tok[:, :4, :] = np.stack([[rng.permutation(4000)[:8] for _ in range(4)] for _ in range(2)])
    lp = np.log(rng.random(tok.shape)).astype(np.float32)
    check(ref, gpu, Proposals(tok, lp), SearchConfig(beam_width=16, max_results=32, length_norm=0.7))


def test_too_many_queries_refused_before_any_allocation() -> None:
    _, gpu = make([[1, 2], [3]])
    q = (2**31 - 1) // 8192 + 1
    p = Proposals(np.full((q, 1, 1), PAD, np.uint32), np.zeros((q, 1, 1), np.float32))
    gpu._ws = None
    with pytest.raises(InputError, match="Q \\(queries\\): .* over the GPU backend's limit of 262143"):
        gpu.search(p, SearchConfig(beam_width=8192))
    assert gpu._ws is None


def test_other_thread_and_workspace_release() -> None:
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(5)
    kws = [rng.integers(0, 30, size=int(rng.integers(1, 6))).tolist() for _ in range(500)]
    ref, gpu = make(kws)
    cfg = SearchConfig(beam_width=8)
    p1 = rows_from_keywords(rng, kws, q_n=3, steps=4, k=20)
    p2 = rows_from_keywords(rng, kws, q_n=5, steps=4, k=20)
    with ThreadPoolExecutor(1) as ex:  # a thread where no CUDA context is current
        assert_same(ex.submit(gpu.search, p1, cfg).result(), ref.search(p1, cfg))
        assert_same(ex.submit(gpu.search, p2, cfg).result(), ref.search(p2, cfg))  # a new workspace
    assert gpu._trim_pool() is True
    assert_same(gpu.search(p1, cfg), ref.search(p1, cfg))


def test_device_out_and_repeat_calls() -> None:
    rng = np.random.default_rng(2)
    kws = [rng.integers(0, 30, size=int(rng.integers(1, 6))).tolist() for _ in range(2000)]
    ref, gpu = make(kws)
    p = rows_from_keywords(rng, kws, q_n=4, steps=5, k=20)
    cfg = SearchConfig(beam_width=8, max_results=16)
    want = ref.search(p, cfg)
    for _ in range(3):
        assert_same(gpu.search(p, cfg), want)
        assert gpu.last_device_ms > 0
    gpu.stage_inputs = False  # proposals straight from the numpy arrays
    assert_same(gpu.search(p, cfg), want)
    gpu.stage_inputs = True
    assert set(gpu.last_breakdown) == {"prep_ms", "enqueue_ms", "wait_ms", "post_ms"}
    dev = gpu.search(p, cfg, device_out=True)
    host = SearchResult(*(getattr(dev, n).get() for n in ("keyword_ids", "scores", "norm_scores", "lengths",
                                                          "num_results")))
    assert_same(host, want)


def _to_host(res: SearchResult) -> SearchResult:
    return SearchResult(*(getattr(res, n).get() for n in ("keyword_ids", "scores", "norm_scores", "lengths",
                                                          "num_results")))


def test_device_out_stats_and_empty_batches() -> None:
    from flashtrie.gpu_impl import DeviceArray

    rng = np.random.default_rng(4)
    kws = [rng.integers(0, 30, size=int(rng.integers(1, 6))).tolist() for _ in range(500)]
    ref, gpu = make(kws)
    cfg = SearchConfig(beam_width=8, max_results=16)
    p1 = rows_from_keywords(rng, kws, q_n=2, steps=4, k=20)
    p2 = rows_from_keywords(rng, kws, q_n=3, steps=5, k=20)
    gpu.search(p1, cfg)
    gpu.search(p2, cfg)
    host_stats = gpu.last_stats.to_dict()
    gpu.search(p1, cfg)
    dev = gpu.search(p2, cfg, device_out=True)  # the statistics are this call's, not the previous one's
    assert gpu.last_stats.to_dict() == host_stats
    assert_same(_to_host(dev), ref.search(p2, cfg))
    for shape in ((0, 3, 5), (2, 0, 5), (2, 3, 0)):
        empty = Proposals(np.full(shape, PAD, np.uint32), np.zeros(shape, np.float32))
        want = ref.search(empty, cfg)
        res = gpu.search(empty, cfg, device_out=True)
        assert isinstance(res.keyword_ids, DeviceArray) and isinstance(res.num_results, DeviceArray)
        assert res.keyword_ids.shape == (shape[0], cfg.results)
        assert_same(_to_host(res), want)
        assert gpu.last_stats.steps == shape[1] and gpu.last_device_ms == 0.0


def test_shared_memory_limit_refused_before_any_allocation() -> None:
    rng = np.random.default_rng(5)
    kws = [rng.integers(0, 30, size=int(rng.integers(1, 6))).tolist() for _ in range(200)]
    _, gpu = make(kws)
    p = rows_from_keywords(rng, kws, q_n=2, steps=3, k=20)
    gpu.search(p, SearchConfig(beam_width=8))
    ws = gpu._ws
    gpu._smem_optin = gpu._static_smem + 1024  # pretend a device with little shared memory
    with pytest.raises(InputError, match="shared sort buffer"):
        gpu.search(p, SearchConfig(beam_width=512))
    assert gpu._ws is ws  # the old workspace was neither freed nor replaced


def test_damaged_index_refused_as_format_error() -> None:
    from flashtrie.gpu_impl import GpuSearcher

    from flashtrie import IndexFormatError
    from flashtrie.index import BitVector

    index = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2], [1, 3], [4]]))
    bits = index.louds.to_bools()
    bits[np.flatnonzero(~bits)[1]] = True  # one node loses its terminating zero
    index.louds = BitVector.from_bools(bits, with_select0=True)
    with pytest.raises(IndexFormatError, match="LOUDS"):
        GpuSearcher(index)


def _device_cases():
    rng = np.random.default_rng(9)
    kws = [rng.integers(0, 30, size=int(rng.integers(1, 6))).tolist() for _ in range(2000)]
    p = rows_from_keywords(rng, kws, q_n=3, steps=5, k=20)
    return kws, p, SearchConfig(beam_width=8, max_results=16, length_norm=0.5)


def _below_2_31(p: Proposals) -> Proposals:
    """``p`` with tokens of 2**31 and over replaced by padding, so that it fits an int32 array."""
    return Proposals(np.where(p.tokens >= 2**31, PAD, p.tokens).astype(np.uint32), p.logprobs)


def test_dlpack_cupy() -> None:
    cp = pytest.importorskip("cupy")
    kws, p, cfg = _device_cases()
    ref, gpu = make(kws)
    want = ref.search(p, cfg)
    got = gpu.search((cp.asarray(p.tokens), cp.asarray(p.logprobs)), cfg)
    assert_same(got, want)
    small = _below_2_31(p)  # int32 holds tokens below 2**31, and -1 for padding
    got = gpu.search((cp.asarray(small.tokens.view(np.int32)), cp.asarray(small.logprobs)), cfg)
    assert_same(got, ref.search(small, cfg))
    if np.any((p.tokens >= 2**31) & (p.tokens != PAD)):
        with pytest.raises(InputError, match="negative int32 token"):  # uint32 bits in an int32 array
            gpu.search((cp.asarray(p.tokens.view(np.int32)), cp.asarray(p.logprobs)), cfg)
    bad = p.logprobs.copy()
    bad[0, 0, int(np.flatnonzero(p.tokens[0, 0] != PAD)[0])] = np.nan
    with pytest.raises(InputError, match="NaN"):
        gpu.search((cp.asarray(p.tokens), cp.asarray(bad)), cfg)
    dup = p.tokens.copy()
    valid = np.flatnonzero(dup[1, 2] != PAD)
    dup[1, 2, valid[1]] = dup[1, 2, valid[0]]
    with pytest.raises(InputError, match="more than once"):
        gpu.search((cp.asarray(dup), cp.asarray(p.logprobs)), cfg)
    neg = p.tokens.view(np.int32).copy()
    neg[2, 4, int(np.flatnonzero(p.tokens[2, 4] != PAD)[0])] = -2
    with pytest.raises(InputError, match="negative int32 token"):
        gpu.search((cp.asarray(neg), cp.asarray(p.logprobs)), cfg)
    neg[2, 4, int(np.flatnonzero(p.tokens[2, 4] != PAD)[1])] = -2  # twice in a row: still the real cause
    with pytest.raises(InputError, match="negative int32 token"):
        gpu.search((cp.asarray(neg), cp.asarray(p.logprobs)), cfg)
    big = p.tokens.copy()  # as uint32, 2**32 - 2 is a valid token, not an error
    big[2, 4, int(np.flatnonzero(p.tokens[2, 4] != PAD)[0])] = 2**32 - 2
    gpu.search((cp.asarray(big), cp.asarray(p.logprobs)), cfg)
    assert_same(gpu.search(p, cfg), want)  # the searcher still works after a refused call


def test_dlpack_torch() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    kws, p, cfg = _device_cases()
    ref, gpu = make(kws)
    p = _below_2_31(p)
    tok = torch.from_numpy(p.tokens.view(np.int32).copy()).cuda()
    lp = torch.from_numpy(p.logprobs.copy()).cuda()
    assert_same(gpu.search((tok, lp), cfg), ref.search(p, cfg))


def test_stats_are_named_and_live_queries_match_numpy() -> None:
    """The GPU's counters are `SearchStats` under their own names; its early stop is numpy's (pool_closed), so
    the queries live at each step are numpy's too."""
    from flashtrie.reference_cpu.numpy_search import NumpySearcher

    rng = np.random.default_rng(11)
    kws = [rng.integers(0, 12, size=int(rng.integers(1, 5))).tolist() for _ in range(300)]
    ref, gpu = make(kws)
    ref = NumpySearcher(ref.index, collect_stats=True)
    p = rows_from_keywords(rng, kws, q_n=6, steps=7, k=12)
    for cfg in (SearchConfig(beam_width=4, max_results=3), SearchConfig(beam_width=16, length_norm=0.6)):
        check(ref, gpu, p, cfg)
        st = gpu.last_stats
        assert st.backend == "gpu" and st.steps == 7 and st.queries == 6 and st.beam_width == cfg.beam_width
        assert set(st.counts) == {"frontier_candidates", "pool_candidates", "work_chunks", "live_queries"}
        np.testing.assert_array_equal(st.column("live_queries"), ref.last_stats.column("live_queries"))
        assert st.steps_run == int(np.count_nonzero(ref.last_stats.column("live_queries")))
        assert int(st.column("pool_candidates").sum()) <= int(ref.last_stats.column("pool_offers").sum())


def test_device_array_reports_the_searcher_stream() -> None:
    rng = np.random.default_rng(12)
    kws = [rng.integers(0, 30, size=int(rng.integers(1, 6))).tolist() for _ in range(200)]
    _, gpu = make(kws)
    res = gpu.search(rows_from_keywords(rng, kws, q_n=2, steps=3, k=10), SearchConfig(beam_width=4),
                     device_out=True)
    cai = res.keyword_ids.__cuda_array_interface__
    assert cai["stream"] == int(gpu.stream.handle) and cai["stream"] not in (None, 0)


def test_no_map_keyword_ids_use_terminal_rank() -> None:
    """An index without a keyword-id map (``ids="index"``: keyword_ids of width 0 and length 0) means
    id = rank1(terminal, node): the kernel emits those ids, as numpy does."""
    from flashtrie.gpu_impl import GpuSearcher
    from flashtrie.reference_cpu.numpy_search import NumpySearcher

    rng = np.random.default_rng(13)
    kws = [rng.integers(0, 20, size=int(rng.integers(1, 6))).tolist() for _ in range(400)]
    p = rows_from_keywords(rng, kws, q_n=4, steps=5, k=16)
    cfg = SearchConfig(beam_width=8, max_results=12)
    index = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws), ids="index")
    assert index.keyword_ids.size == 0 and index.keyword_ids.width == 0
    want = NumpySearcher(index).search(p, cfg)
    assert int(want.num_results.sum()) > 0
    assert_same(GpuSearcher(index).search(p, cfg), want)
    mapped = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))  # the same keywords with the input-order map
    assert mapped.keyword_ids.size > 0
    assert_same(GpuSearcher(mapped).search(p, cfg), NumpySearcher(mapped).search(p, cfg))
