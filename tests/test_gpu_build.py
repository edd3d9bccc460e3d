"""The GPU builder (`flashtrie.gpu_impl.build_gpu`) against the CPU builder: identical arrays, array for array.

The GPU builder's steps take an array module: the tests marked ``gpu`` run them with cupy on a GPU
(skipped where cupy or a GPU is missing); the others run the very same code with numpy, so the logic is
checked on every machine.
"""

from __future__ import annotations

import ctypes
import sys
from functools import lru_cache
from types import SimpleNamespace

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


@pytest.mark.slow
@pytest.mark.parametrize("on_gpu", GPU)
@settings(max_examples=120, deadline=None)
@given(kws=keyword_lists, ids=st.sampled_from(["input", "index"]), shuffle=st.randoms(use_true_random=False))
def test_same_arrays_hypothesis(on_gpu: bool, kws: list[list[int]], ids: str, shuffle) -> None:
    if shuffle.random() < 0.3:  # also the sorted, duplicate-free order, where ids="input" stores no map
        kws = sorted(set(map(tuple, kws)))
    assert_same_index(KeywordSet.from_sequences(kws), _xp(on_gpu), ids)


@pytest.mark.slow
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


class _FakeCupy:
    """Just enough of cupy for `host_transfer.Stager`: "device" arrays in host memory, copies by memmove."""

    class _Pinned(bytearray):
        @property
        def ptr(self) -> int:
            return ctypes.addressof((ctypes.c_char * len(self)).from_buffer(self))

    class _Dev:
        def __init__(self, a: np.ndarray) -> None:
            self.a, self.shape, self.dtype, self.nbytes = a, a.shape, a.dtype, a.nbytes
            self.data = SimpleNamespace(ptr=a.ctypes.data)

        def get(self, out: np.ndarray | None = None) -> np.ndarray:
            if out is None:
                return self.a.copy()
            out[...] = self.a
            return out

    def __init__(self) -> None:
        self.copies: list[int] = []
        stream = SimpleNamespace(ptr=0, synchronize=lambda: None)

        def memcpy(dst: int, src: int, size: int, kind: int, s: int) -> None:
            self.copies.append(size)
            ctypes.memmove(dst, src, size)

        event = lambda **_: SimpleNamespace(record=lambda s: None, synchronize=lambda: None)  # noqa: E731
        self.cuda = SimpleNamespace(
            alloc_pinned_memory=lambda n: self._Pinned(n), Stream=lambda **_: stream, Event=event,
            get_current_stream=lambda: stream,
            runtime=SimpleNamespace(memcpyAsync=memcpy, memcpyHostToDevice=1, memcpyDeviceToHost=2))

    def empty(self, shape, dtype) -> _Dev:
        return self._Dev(np.full(shape, 0xAB, dtype=np.uint8).view(dtype) if np.dtype(dtype).itemsize == 1
                         else np.empty(shape, dtype=dtype))

    def asarray(self, a: np.ndarray) -> _Dev:
        return self._Dev(a.copy())

    def ascontiguousarray(self, d: _Dev) -> _Dev:
        return d


@pytest.mark.parametrize("nbytes", [0, 7, 4096, 4096 * 3 + 5, 4096 * 11])
def test_stager_round_trip_in_chunks(monkeypatch: pytest.MonkeyPatch, nbytes: int) -> None:
    from flashtrie.gpu_impl import host_transfer

    monkeypatch.setattr(host_transfer, "SMALL_BYTES", 64)
    cp = _FakeCupy()
    st = host_transfer.Stager(cp, chunk=4096, depth=3)  # more chunks than buffers: the ring wraps
    host = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    dev = st.upload(host)
    np.testing.assert_array_equal(dev.a, host)
    back = st.download(dev)
    np.testing.assert_array_equal(back, host)
    wide = st.download(st.upload(host.view(np.uint8)[: nbytes // 8 * 8].view(np.uint64)))
    assert wide.dtype == np.uint64 and wide.tobytes() == host[: nbytes // 8 * 8].tobytes()
    st.close()
    if nbytes > 64:
        assert max(cp.copies) <= 4096 and sum(cp.copies) >= 2 * nbytes


@settings(max_examples=40, deadline=None)
@given(nbits=st.integers(0, 5000), p=st.floats(0.0, 1.0), seed=st.integers(0, 2**31), workers=st.integers(1, 4))
def test_directory_on_threads_equals_one_pass(nbits: int, p: float, seed: int, workers: int) -> None:
    from flashtrie.index import bits

    b = np.random.default_rng(seed).random(nbits) < p
    one = bits.BitVector.from_bools(b, with_select0=True)
    old = bits.PIECE_WORDS
    bits.PIECE_WORDS = bits.BLOCK_WORDS + 3  # many pieces (rounded down to whole blocks; hypothesis and
    # monkeypatch fixtures do not mix)
    try:
        many = bits.BitVector.from_words(one.words.copy(), nbits, with_select0=True, workers=workers)
    finally:
        bits.PIECE_WORDS = old
    np.testing.assert_array_equal(many.rank, one.rank)
    np.testing.assert_array_equal(many.select0_hints, one.select0_hints)


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.integers(0, 2**32 - 1), max_size=300), extra=st.integers(0, 3))
def test_device_packing_equals_host_packing(values: list[int], extra: int) -> None:
    from flashtrie.index.bits import BitVector
    from flashtrie.index.build_assemble import pack_bits, pack_ints
    from flashtrie.index.packed import PackedInts

    v = np.array(values, dtype=np.uint64)
    width = min(32, (int(v.max()) if v.size else 0).bit_length() + extra)
    ref = PackedInts.from_values(v, width)
    words, w, n = pack_ints(np, v, width)
    assert (w, n) == (ref.width, ref.size)
    np.testing.assert_array_equal(words, ref.words)
    bools = (v & 1).astype(bool)
    np.testing.assert_array_equal(pack_bits(np, bools), BitVector.from_bools(bools).words)
    if v.size and int(v.max()):
        with pytest.raises(ValueError, match="cannot hold"):
            pack_ints(np, v, int(v.max()).bit_length() - 1)
