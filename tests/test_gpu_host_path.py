"""`GpuSearcher.search`'s host path with the device faked (runs without a GPU; needs cuda-core installed).

The driver's copies and the launch are replaced by recorders, so these tests see exactly the bytes each
call uploads: what a call reuses from the last one (parameters, LN table, all-root start states) must
leave the same bytes as staging from scratch.
"""

from __future__ import annotations

import ctypes
import struct
import types

import numpy as np
import pytest
from strategies import rows_from_keywords

from flashtrie import KeywordSet, NarrowLoudsIndex, SearchConfig
from flashtrie.scoring import threshold32

pytest.importorskip("cuda.core")


class _Event:
    def __sub__(self, other: object) -> float:
        return 0.25


class _Stream:
    handle = 1234

    def record(self, event: object) -> None:
        pass

    def sync(self) -> None:
        pass


def _fake_searcher(index: NarrowLoudsIndex, keep: list, mp: pytest.MonkeyPatch) -> object:
    """A `GpuSearcher` whose device pieces are stand-ins (device addresses are never dereferenced)."""
    from cuda.core import Buffer
    from flashtrie.gpu_impl import searcher as S
    from flashtrie.gpu_impl.context import GpuContext
    from flashtrie.gpu_impl.workspace import Workspace

    base = [1 << 40]

    def allocate(nbytes: int, what: str) -> object:
        base[0] += (int(nbytes) + 4095) // 4096 * 4096
        return Buffer.from_handle(base[0], max(int(nbytes), 8))

    def allocate_pinned(nbytes: int, what: str) -> tuple[object, np.ndarray]:
        a = np.zeros(max(int(nbytes), 8), dtype=np.uint8)
        keep.append(a)
        return Buffer.from_handle(a.ctypes.data, a.nbytes, owner=a), a[:nbytes]

    ctx = object.__new__(GpuContext)
    ctx.device, ctx.stream, ctx.events = types.SimpleNamespace(device_id=0), _Stream(), (_Event(), _Event())
    ctx.allocate, ctx.allocate_pinned = allocate, allocate_pinned
    ctx.memory_info = lambda: (1 << 40, 1 << 40)
    ctx.make_current = lambda: None
    s = object.__new__(S.GpuSearcher)
    s.index, s.ctx, s.device, s.stream, s.kernel = index, ctx, ctx.device, ctx.stream, None
    s._static_smem, s._smem_optin, s._num_sms, s._blocks_per_sm, s._smem_attr_set = 8720, 232448, 2, None, 0
    s.stage_inputs, s.last_breakdown, s._ws = True, {}, None
    s._stats = s._stats_raw = None
    s._plans, s._checked = {}, set()
    s._stream_handle = s._stream_int = 1234
    s._index = types.SimpleNamespace(view=allocate(64, "index"))
    s._index_ptr = int(s._index.view.handle)
    s.max_degree, s.max_degree_nonroot = 1 << 20, 1 << 20
    mp.setattr(S, "grid_size", lambda kernel, smem, num_sms, blocks_per_sm: 2 * num_sms)

    def workspace(shape: object) -> Workspace:
        ws = S.GpuSearcher._workspace(s, shape)
        ws.launch_config = object()
        return ws

    s._workspace = workspace
    return s


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, bytes]]:
    """Every upload as (kind, device address, the host bytes at the time of the call)."""
    import cuda.bindings.driver as drv
    import cuda.core

    calls: list[tuple[str, int, bytes]] = []
    ok = (drv.CUresult.CUDA_SUCCESS,)

    def htod(dst: int, src: int, n: int, stream: object) -> tuple:
        calls.append(("up", int(dst), ctypes.string_at(int(src), int(n))))
        return ok

    monkeypatch.setattr(drv, "cuMemcpyHtoDAsync", htod)
    monkeypatch.setattr(drv, "cuMemcpyDtoHAsync", lambda dst, src, n, stream: ok)
    monkeypatch.setattr(cuda.core, "launch", lambda *a, **k: None)
    return calls


def test_reused_staging_uploads_the_bytes_a_fresh_one_would(recorder, monkeypatch) -> None:
    from flashtrie.gpu_impl.layout import PARAMS

    rng = np.random.default_rng(5)
    kws = [rng.integers(0, 20, size=int(rng.integers(1, 6))).tolist() for _ in range(300)]
    index = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    keep: list = []
    reused = _fake_searcher(index, keep, monkeypatch)
    p = rows_from_keywords(rng, kws, q_n=3, steps=4, k=8)
    a, b = SearchConfig(beam_width=4, max_results=3), SearchConfig(beam_width=4, max_results=3, length_norm=0.7,
                                                                     token_threshold=-3.0)
    pref = [[kws[0][0]], [], [kws[5][0]]]
    calls = [(p, a, None), (p, a, pref), (p, a, None), (p, b, None), (p[:2], b, pref[:2]), (p, a, None)]
    for proposals, config, prefixes in calls:
        recorder.clear()
        reused.search(proposals, config, prefixes)
        got = recorder[0][2]
        recorder.clear()
        _fake_searcher(index, keep, monkeypatch).search(proposals, config, prefixes)
        want = recorder[0][2]
        n = PARAMS.size
        assert got[n:] == want[n:]  # err, starts, LN, proposals
        fields = dict(zip([f for f, _ in PARAMS.fields], struct.unpack(PARAMS.format, got[:n]), strict=True))
        assert fields["thr_tau"] == float(threshold32(config.token_threshold))
        assert fields["thr_sigma"] == float(threshold32(config.score_threshold))
        assert fields["ln_len"] == index.max_keyword_length + 1
        assert fields["Q"] == proposals.num_queries and fields["B"] == 4 and fields["R"] == 3


def test_stats_are_built_from_the_call_they_belong_to(recorder, monkeypatch) -> None:
    rng = np.random.default_rng(6)
    kws = [rng.integers(0, 20, size=int(rng.integers(1, 6))).tolist() for _ in range(100)]
    s = _fake_searcher(NarrowLoudsIndex.build(KeywordSet.from_sequences(kws)), [], monkeypatch)
    p = rows_from_keywords(rng, kws, q_n=2, steps=3, k=6)
    cfg = SearchConfig(beam_width=3)
    s.search(p, cfg)  # makes the workspace
    raw = s._ws.out_arrays["out_stats"]
    raw[:] = np.arange(12, dtype=np.uint32).reshape(3, 4)
    s.search(p, cfg)
    raw[:] = 0  # the mirror is overwritten by the next call's copy: the stats were taken already
    st = s.last_stats
    assert st.backend == "gpu" and st.queries == 2 and st.steps == 3
    assert st.column("live_queries").tolist() == [3, 7, 11] and st.steps_run == 3
    assert s.last_stats is st
