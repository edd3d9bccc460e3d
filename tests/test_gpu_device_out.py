"""Results left on the device (``GpuSearcher.search(..., device_out=True)``): the call does not wait; device
proposals the kernel refuses raise their `InputError` when the results are read, with the messages host
results give; the device arrays a running search reads stay alive until it is done.

The bookkeeping (`DeviceCall`, `Inflight`) is tested here on the CPU with stand-ins for the device's
events and copies; the tests marked ``gpu`` run the searcher itself and skip where no GPU is present.
"""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest
from flashtrie.gpu_impl.inflight import MAX_CALLS, Inflight
from flashtrie.gpu_impl.results import ERR_BAD_LOGPROB, ERR_DUPLICATE, DeviceArray, DeviceCall, raise_for
from flashtrie.gpu_impl.workspace import Layout
from strategies import rows_from_keywords
from test_gpu_search import _below_2_31, _gpu_reason, assert_same, make

from flashtrie import InputError, SearchConfig, SearchResult

PAD = 2**32 - 1


class _Event:
    def __init__(self, done: bool = False) -> None:
        self.is_done, self.synced = done, 0

    def sync(self) -> None:
        self.synced += 1
        self.is_done = True


class _Stream:
    def __init__(self) -> None:
        self.syncs = 0

    def sync(self) -> None:
        self.syncs += 1


class _Ctx:
    """A device of host memory: a buffer's ``handle`` is an offset into ``memory``."""

    def __init__(self, memory: np.ndarray) -> None:
        self.memory, self.stream = memory, _Stream()

    def make_current(self) -> None:
        pass

    def download(self, host: np.ndarray, src: int) -> None:
        host.view(np.uint8)[:] = self.memory[src: src + host.nbytes]


def _call(err: int) -> tuple[DeviceCall, _Ctx]:
    lo = Layout()
    lo.add("out_ids", 16)
    lo.add("out_err", 4)
    lo.add("out_stats", 16 * 2)
    mem = np.zeros(lo.total, dtype=np.uint8)
    mem[lo.offsets["out_err"]:][:4] = np.array([err], dtype=np.uint32).view(np.uint8)
    mem[lo.offsets["out_stats"]:][:32] = np.arange(8, dtype=np.uint32).view(np.uint8)
    ctx = _Ctx(mem)
    buf = type("Buf", (), {"handle": 0})()
    return DeviceCall(buf, lo, ctx, keep=["inputs"]), ctx  # type: ignore[arg-type]


@pytest.mark.parametrize("err", [ERR_BAD_LOGPROB, ERR_DUPLICATE])
def test_a_refused_call_raises_when_its_results_are_read(err: int) -> None:
    call, ctx = _call(err)
    arr = DeviceArray(call.buffer, call.lo.offsets["out_ids"], (2, 2), np.dtype(np.int32), ctx, call)  # type: ignore[arg-type]
    assert ctx.stream.syncs == 0  # nothing read yet: nothing waited for
    with pytest.raises(InputError) as got:
        arr.get()
    with pytest.raises(InputError) as want:
        raise_for(err)
    assert str(got.value) == str(want.value) and "checked on the device" in str(got.value)
    assert ctx.stream.syncs == 1
    with pytest.raises(InputError):
        arr.check()
    assert ctx.stream.syncs == 1  # the error word is read once


def test_a_clean_call_reads_its_counters_from_its_own_buffer() -> None:
    call, ctx = _call(0)
    call.check()
    assert call.stats().tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    arr = DeviceArray(call.buffer, call.lo.offsets["out_ids"], (4,), np.dtype(np.int32), ctx, call)  # type: ignore[arg-type]
    assert arr.get().tolist() == [0, 0, 0, 0]


def test_inflight_keeps_inputs_until_done_and_waits_before_staging() -> None:
    fl = Inflight()
    fl.before_staging()  # nothing left running: no wait
    up, done = _Event(), _Event()
    fl.add(up, done, ["a"])
    assert up.synced == 0 and len(fl._calls) == 1
    fl.before_staging()
    assert up.synced == 1
    fl.before_staging()
    assert up.synced == 1  # once per call
    done.is_done = True
    fl.add(_Event(), _Event(), ["b"])
    assert [k for _, k in fl._calls] == [["b"]]  # the finished call let go of its inputs
    for i in range(MAX_CALLS + 5):
        fl.add(_Event(), _Event(), [i])
    assert len(fl._calls) == MAX_CALLS


# ------------------------------------------------------------------------------------------------ on a GPU
gpu = pytest.mark.skipif(_gpu_reason() is not None, reason=str(_gpu_reason()))


def _torch_cuda() -> Any:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    return torch


def _host(res: SearchResult) -> SearchResult:
    return SearchResult(*(getattr(res, n).get() for n in ("keyword_ids", "scores", "norm_scores", "lengths",
                                                          "num_results")))


@gpu
@pytest.mark.gpu
def test_device_proposals_refused_on_read_with_the_same_messages() -> None:
    torch = _torch_cuda()
    rng = np.random.default_rng(21)
    kws = [rng.integers(0, 30, size=int(rng.integers(1, 6))).tolist() for _ in range(1000)]
    ref, searcher = make(kws)
    p = _below_2_31(rows_from_keywords(rng, kws, q_n=3, steps=4, k=16))  # int32 tokens: below 2**31, or -1
    cfg = SearchConfig(beam_width=8, max_results=12)
    tok = torch.from_numpy(p.tokens.view(np.int32).copy()).cuda()
    lp = torch.from_numpy(p.logprobs.copy()).cuda()
    assert_same(_host(searcher.search((tok, lp), cfg, device_out=True)), ref.search(p, cfg))
    bad = lp.clone()
    q, t = next((q, t) for q in range(3) for t in range(4) if np.count_nonzero(p.tokens[q, t] != PAD) >= 2)
    k = int(np.flatnonzero(p.tokens[q, t] != PAD)[0])
    bad[q, t, k] = float("nan")
    with pytest.raises(InputError) as host_err:
        searcher.search((tok, bad), cfg)
    res = searcher.search((tok, bad), cfg, device_out=True)  # enqueued: no error yet
    with pytest.raises(InputError) as dev_err:
        res.scores.get()
    assert str(dev_err.value) == str(host_err.value)
    dup = tok.clone()
    real = np.flatnonzero(p.tokens[q, t] != PAD)
    dup[q, t, int(real[1])] = dup[q, t, int(real[0])]
    res = searcher.search((dup, lp), cfg, device_out=True)
    with pytest.raises(InputError, match="more than once"):
        res.num_results.check()
    assert_same(_host(searcher.search((tok, lp), cfg, device_out=True)), ref.search(p, cfg))  # still works


@gpu
@pytest.mark.gpu
def test_calls_left_running_in_a_row_keep_their_inputs_and_results() -> None:
    torch = _torch_cuda()
    rng = np.random.default_rng(22)
    kws = [rng.integers(0, 40, size=int(rng.integers(1, 7))).tolist() for _ in range(3000)]
    ref, searcher = make(kws)
    cfg = SearchConfig(beam_width=16, max_results=16)
    cases = [_below_2_31(rows_from_keywords(rng, kws, q_n=4, steps=5, k=24)) for _ in range(6)]
    outs = []
    for p in cases:  # the caller drops its device arrays at once; the searcher keeps them alive
        tok = torch.from_numpy(p.tokens.view(np.int32).copy()).cuda()
        lp = torch.from_numpy(p.logprobs.copy()).cuda()
        outs.append(searcher.search((tok, lp), cfg, device_out=True))
        del tok, lp
    gc.collect()
    for p, res in zip(cases, outs, strict=True):
        assert_same(_host(res), ref.search(p, cfg))
    stats = searcher.last_stats
    assert stats is not None and stats.steps == 5 and searcher.last_device_ms > 0
    assert_same(searcher.search(cases[0], cfg), ref.search(cases[0], cfg))  # host results after running ones
