"""The library pass a chunk at a time over an array module (`datasets._library_pass_gpu`) against the CPU pass:
the same facts bit for bit.  The tests marked ``gpu`` run it with cupy (skipped where cupy or a GPU is missing);
the others run the very same code with numpy, so the logic is checked on every machine.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
from flashtrie.datasets import _library_pass as lp
from flashtrie.datasets import _library_pass_gpu as lg
from flashtrie.datasets import _queries_v2 as q2
from flashtrie.datasets import generate_keywords, generate_queries
from flashtrie.datasets._library_pass import library_pass
from flashtrie.datasets._queries_v2 import pass_key, run_library_pass
from hypothesis import given, settings
from hypothesis import strategies as st
from test_index_build import NOT_NUMPY
from test_query_passes import CASES, digest

from flashtrie import DeviceError, InputError, KeywordSet
from flashtrie.limits import MAX_TOKEN


@lru_cache(maxsize=1)
def _cupy_reason() -> str | None:
    from flashtrie.gpu_impl.build_gpu import cupy_module

    try:
        cupy_module()
    except DeviceError as e:
        return str(e)
    return None


def _xp(on_gpu: bool):
    if not on_gpu:
        return np, np.array, np.asarray  # put copies (the pass may write to what it was given)
    reason = _cupy_reason()
    if reason is not None:
        pytest.skip(reason)
    import cupy

    return cupy, cupy.asarray, cupy.asnumpy


def assert_same_facts(a, b) -> None:
    for name in ("lengths", "full", "length_counts"):
        x, y = getattr(a, name), getattr(b, name)
        assert isinstance(y, np.ndarray) and x.dtype == y.dtype, name
        np.testing.assert_array_equal(y, x, err_msg=name)
    assert a.fingerprint == b.fingerprint
    assert len(a.depth_counts) == len(b.depth_counts)
    for (t1, c1), (t2, c2) in zip(a.depth_counts, b.depth_counts, strict=True):
        assert (t1.dtype, c1.dtype) == (t2.dtype, c2.dtype) == (np.uint32, np.int64)
        np.testing.assert_array_equal(t2, t1)
        np.testing.assert_array_equal(c2, c1)


GPU = [pytest.param(False, id="numpy"), pytest.param(True, id="cupy", marks=pytest.mark.gpu)]
libraries = st.lists(st.lists(st.one_of(st.integers(0, 40), st.integers(MAX_TOKEN - 2, MAX_TOKEN)),
                              min_size=1, max_size=9), min_size=1, max_size=120)


@pytest.mark.parametrize("on_gpu", GPU)
@settings(max_examples=25, deadline=None)
@given(seqs=libraries, steps=st.integers(0, 4), chunk=st.sampled_from([1, 7, 1 << 20]), dense=st.booleans())
def test_array_module_pass_equals_the_cpu_pass(on_gpu, seqs, steps, chunk, dense):
    xp, put, get = _xp(on_gpu)
    ks = KeywordSet.from_sequences(seqs)
    top = int(ks.tokens.max())
    with pytest.MonkeyPatch.context() as mp:
        if not dense:
            mp.setattr(lp, "BINCOUNT_MAX", 0)
        got = lg.library_pass_xp(xp, ks, steps, top, put, get, chunk)
    assert_same_facts(library_pass(ks, steps, top, 2), got)


@settings(max_examples=25, deadline=None)
@given(seqs=libraries, steps=st.integers(0, 4), chunk=st.sampled_from([1, 7, 1 << 20]), dense=st.booleans())
def test_the_branches_for_cupy_equal_the_cpu_pass(seqs, steps, chunk, dense):
    # numpy posing as another array module: the gathers, sorts and count tables a GPU uses, on the CPU
    ks = KeywordSet.from_sequences(seqs)
    top = int(ks.tokens.max())
    with pytest.MonkeyPatch.context() as mp:
        if not dense:
            mp.setattr(lp, "BINCOUNT_MAX", 0)
        got = lg.library_pass_xp(NOT_NUMPY, ks, steps, top, np.array, np.asarray, chunk)
    assert_same_facts(library_pass(ks, steps, top, 2), got)


@pytest.mark.parametrize("on_gpu", GPU)
def test_array_module_pass_on_a_generated_library(on_gpu):
    xp, put, get = _xp(on_gpu)
    ks = generate_keywords(300_000, seed=2, duplicate_fraction=0.02)
    top = int(ks.tokens.max())
    assert_same_facts(library_pass(ks, 8, top, 2), lg.library_pass_xp(xp, ks, 8, top, put, get, 70_001))
    t: dict[str, float] = {}
    got = lg.library_pass_xp(xp, ks, 8, top, put, get, 70_001, timings=t)
    assert got.fingerprint == library_pass(ks, 8, top, 1).fingerprint  # twice: no state left behind
    assert set(t) == {"upload", "on the device", "download"} and min(t.values()) >= 0


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CASES))
def test_gpu_workloads_equal_the_recorded_digests(name, monkeypatch):
    if _cupy_reason() is not None:
        pytest.skip(_cupy_reason())
    lib_args, query_args, want = CASES[name]
    lib_args = dict(lib_args)
    kw = generate_keywords(lib_args.pop("n"), **lib_args)
    monkeypatch.setattr(lg, "CHUNK", 7_001)  # several chunks
    for device in ("gpu", "auto"):
        t: dict[str, float] = {}
        assert digest(generate_queries(kw, **query_args, timings=t, device=device)) == want
        assert pass_key("gpu") in t


def test_device_is_checked_before_any_work():
    ks = KeywordSet.from_sequences([[1, 2]])
    with pytest.raises(InputError, match=r"device: expected one of \['auto', 'cpu', 'gpu'\], got 'tpu'"):
        generate_queries(ks, 1, device="tpu")
    with pytest.raises(InputError, match="device"):
        run_library_pass(ks, 1, 2, 1, "GPU")


def test_auto_falls_back_to_the_cpu_and_gpu_does_not(monkeypatch):
    def no_gpu(*_a, **_k):
        raise DeviceError("no GPU here")

    monkeypatch.setattr(lg, "library_pass_gpu", no_gpu)
    ks = generate_keywords(5_000, seed=1)
    facts, ran = run_library_pass(ks, 3, int(ks.tokens.max()), 1, "auto")
    assert ran == "cpu"
    assert_same_facts(library_pass(ks, 3, int(ks.tokens.max()), 1), facts)
    with pytest.raises(DeviceError, match="no GPU here"):
        run_library_pass(ks, 3, int(ks.tokens.max()), 1, "gpu")
    t: dict[str, float] = {}
    generate_queries(ks, 1, proposals_per_step=50, min_topic_size=8, timings=t, device="auto")
    assert pass_key("cpu") in t and pass_key("gpu") not in t


def test_cpu_device_never_tries_the_gpu(monkeypatch):
    def boom(*_a, **_k):
        raise AssertionError("the GPU path ran")

    monkeypatch.setattr(lg, "library_pass_gpu", boom)
    ks = generate_keywords(2_000, seed=1)
    assert run_library_pass(ks, 2, int(ks.tokens.max()), 1, "cpu")[1] == "cpu"
    assert q2.DEVICES == ("auto", "cpu", "gpu")


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 8, 1000, 1001])
def test_xor_all_is_the_xor_of_every_element(n):
    x = np.random.default_rng(n).integers(0, 2**63, size=n, dtype=np.uint64) * np.uint64(3)
    want = int(np.bitwise_xor.reduce(x)) if n else 0
    assert lp.xor_all(np, x) == want
    assert x.size == n  # not consumed


def test_chunks_fit_in_free_device_memory(monkeypatch):
    n = 3 << 20
    ks = KeywordSet.from_arrays(np.zeros(2 * n, dtype=np.uint32), np.arange(0, 2 * n + 1, 2, dtype=np.int64))
    top = 1000
    per_keyword = 80 + 8 * 2
    assert lg.fitting_chunk(ks, 8, top, 1 << 40) == lg.CHUNK
    results = 9 * n + 16 * 8 * top
    assert lg.fitting_chunk(ks, 8, top, int((results + per_keyword * (2 << 20)) / 0.8) + 10) == 2 << 20
    with pytest.raises(DeviceError, match=r"GB of GPU memory, 0\.0 GB are free"):
        lg.fitting_chunk(ks, 8, top, 1000)
    with pytest.raises(DeviceError):
        lg.fitting_chunk(ks, 8, top, int((results + per_keyword * ((1 << 20) - 1)) / 0.8))
    monkeypatch.setattr(lg, "CHUNK", 7_001)  # a small CHUNK is a cap, not a shortage
    assert lg.fitting_chunk(ks, 8, top, 1 << 40) == 7_001
    # no dense tables for a vocabulary up to 2**32: they take no room
    assert not lg.device_dense(1 << 32, 8)
    assert lg.fitting_chunk(ks, 8, 1 << 32, 1 << 34) == 7_001


def test_gen_queries_device_flag(tmp_path, capsys):
    from flashtrie.cli import main

    kw = tmp_path / "kw.npz"
    assert main(["gen-keywords", "-n", "4000", "--seed", "2", "-o", str(kw), "--quiet"]) == 0
    outs = {}
    for device in ("cpu", "auto") + (("gpu",) if _cupy_reason() is None else ()):
        q = tmp_path / f"q_{device}.npz"
        assert main(["gen-queries", str(kw), "-n", "2", "-K", "16", "--device", device, "-o", str(q)]) == 0
        said = capsys.readouterr().err
        ran = "GPU" if device == "gpu" or (device == "auto" and _cupy_reason() is None) else "CPU"
        assert f"library pass on the {ran}:" in said, said
        with np.load(q) as z:
            outs[device] = {k: z[k].tobytes() for k in z.files if k != "meta"}
    assert all(o == outs["cpu"] for o in outs.values())
    if _cupy_reason() is not None:
        assert main(["gen-queries", str(kw), "--device", "gpu", "-o", str(tmp_path / "g.npz"), "--quiet"]) != 0
        assert "device 'gpu'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["gen-queries", str(kw), "--device", "tpu", "-o", str(tmp_path / "t.npz")])
