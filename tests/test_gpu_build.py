"""The GPU builder (`flashtrie.gpu_impl.build_gpu`) against the CPU builder: identical arrays, array for array.

The GPU builder's steps take an array module: the tests marked ``gpu`` run them with cupy on a GPU
(skipped where cupy or a GPU is missing); the others run the very same code with numpy, so the logic is
checked on every machine.
"""

from __future__ import annotations

import sys
from functools import lru_cache

import numpy as np
import pytest
from flashtrie.datasets import generate_keywords
from flashtrie.gpu_impl import build_gpu
from hypothesis import given, settings
from hypothesis import strategies as st

from flashtrie import DeviceError, InputError, KeywordSet, NarrowLoudsIndex
from flashtrie.limits import MAX_TOKEN

tokens = st.one_of(st.integers(0, 5), st.integers(65_530, 65_540), st.integers(MAX_TOKEN - 3, MAX_TOKEN),
                   st.integers(0, MAX_TOKEN))
# duplicates and prefixes come from the small alphabets above and from repeating drawn keywords
keyword_lists = st.lists(st.lists(tokens, min_size=1, max_size=10), min_size=1, max_size=30).flatmap(
    lambda kws: st.lists(st.sampled_from(kws).flatmap(lambda k: st.integers(1, len(k)).map(lambda c: k[:c])),
                         max_size=10).map(lambda extra: kws + extra))


@lru_cache(maxsize=1)
def _cupy_reason() -> str | None:
    try:
        build_gpu.cupy_module()
    except DeviceError as e:
        return str(e)
    return None


def _xp(on_gpu: bool):
    if not on_gpu:
        return np
    reason = _cupy_reason()
    if reason is not None:
        pytest.skip(reason)
    return build_gpu.cupy_module()


def assert_same_index(ks: KeywordSet, xp, ids: str = "input") -> None:
    cpu, cpu_order = NarrowLoudsIndex.build(ks, ids=ids, return_order=True)
    other, order = build_gpu.build_index(ks, xp=xp, ids=ids, return_order=True)
    assert order.dtype == np.int64
    np.testing.assert_array_equal(order, cpu_order)
    a, b = cpu.arrays, other.arrays
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        np.testing.assert_array_equal(np.asarray(b[name]), np.asarray(a[name]), err_msg=name)
    drop = {"build_seconds"}
    assert {k: v for k, v in cpu.meta.items() if k not in drop} == {k: v for k, v in other.meta.items()
                                                                      if k not in drop}


GPU = [pytest.param(False, id="numpy"), pytest.param(True, id="cupy", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("on_gpu", GPU)
@settings(max_examples=120, deadline=None)
@given(kws=keyword_lists, ids=st.sampled_from(["input", "index"]), shuffle=st.randoms(use_true_random=False))
def test_same_arrays_hypothesis(on_gpu: bool, kws: list[list[int]], ids: str, shuffle) -> None:
    if shuffle.random() < 0.3:  # also the sorted, duplicate-free order, where ids="input" stores no map
        kws = sorted(set(map(tuple, kws)))
    assert_same_index(KeywordSet.from_sequences(kws), _xp(on_gpu), ids)


@pytest.mark.parametrize("on_gpu", GPU)
def test_same_arrays_adversarial(on_gpu: bool) -> None:
    xp = _xp(on_gpu)
    rng = np.random.default_rng(0)
    # huge fan-out at the root and below one node, labels on both sides of 2**16 and up to MAX_TOKEN
    wide = [[int(t)] for t in rng.choice(MAX_TOKEN + 1, 150_000, replace=False)]
    under = [[7, int(t)] for t in rng.choice(200_000, 70_000, replace=False)]
    chains = [[9] * k for k in range(1, 40)] + [[MAX_TOKEN] * 3, [MAX_TOKEN - 1, MAX_TOKEN], [0], [0], [0, 0]]
    kws = wide + under + chains + wide[:100] + under[:50]  # exact duplicates too
    order = rng.permutation(len(kws))
    assert_same_index(KeywordSet.from_sequences([kws[i] for i in order]), xp)


@pytest.mark.parametrize("on_gpu", GPU)
@pytest.mark.parametrize(("dup", "ids"), [(0.0, "input"), (0.05, "input"), (0.05, "index")])
def test_same_arrays_generated_library(on_gpu: bool, dup: float, ids: str) -> None:
    # large enough that the CPU builder splits it across threads (parts of 500k keywords)
    ks = generate_keywords(1_200_000, seed=3, duplicate_fraction=dup)
    assert_same_index(ks, _xp(on_gpu), ids)


def test_order_only_when_asked() -> None:
    ks = KeywordSet.from_sequences([[5, 1], [2], [5, 1], [2, 7]])
    built = build_gpu.build_arrays_gpu(ks, xp=np)
    assert built.order.size == 0 and built.keyword_ids.size == 3  # no download of the order by default
    assert build_gpu.build_arrays_gpu(ks, xp=np, return_order=True).order.tolist() == [1, 0, 3]


def test_progress_by_stage() -> None:
    seen: list[str] = []
    build_gpu.build_arrays_gpu(KeywordSet.from_sequences([[1, 2], [1, 3], [4]]), seen.append, xp=np)
    assert seen == ["upload", "sort", "lcp", "trie", "order", "assemble", "download", "directories"]


def test_bad_input_and_missing_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InputError, match="keywords: expected a flashtrie.KeywordSet"):
        build_gpu.build_index([[1, 2]], xp=np)
    with pytest.raises(InputError, match="ids: expected 'input' or 'index', got 'rank'"):
        build_gpu.build_index(KeywordSet.from_sequences([[1]]), ids="rank", xp=np)
    with pytest.raises(InputError, match="empty"):
        build_gpu.build_index(KeywordSet.from_arrays([], [0]), xp=np)
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy now raises ImportError
    with pytest.raises(DeviceError, match="gpu-build"):
        build_gpu.build_index(KeywordSet.from_sequences([[1]]))
