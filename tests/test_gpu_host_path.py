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
    is_done = True

    def __sub__(self, other: object) -> float:
        return 0.25

    def sync(self) -> None:
        pass


class _Stream:
    handle = 1234

    def __init__(self) -> None:
        self.syncs = 0

    def record(self, event: object = None) -> object:
        return event if event is not None else _Event()

    def sync(self) -> None:
        self.syncs += 1


def _fake_searcher(index: NarrowLoudsIndex, keep: list, mp: pytest.MonkeyPatch) -> object:
    """A `GpuSearcher` whose device pieces are stand-ins (device addresses are never dereferenced)."""
    from cuda.core import Buffer
    from flashtrie.gpu_impl import searcher as S
    from flashtrie.gpu_impl.context import GpuContext
    from flashtrie.gpu_impl.inflight import Inflight

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
    s._static_smem, s._smem_optin, s._num_sms, s._blocks_per_sm = 8720, 232448, 2, None
    s._loaded = types.SimpleNamespace(shared_allowed={})
    s.stage_inputs, s.last_breakdown, s._ws = True, {}, None
    s._stats = s._stats_raw = None
    s._inflight = Inflight()
    s._plans, s._checked = {}, set()
    s._stream_handle = s._stream_int = 1234
    s.launches = []  # every launch as (stream, entry point, grid, block, parameters, shared bytes)
    s._launcher = types.SimpleNamespace(launch=lambda *a: s.launches.append(a))
    s._index = types.SimpleNamespace(view=allocate(64, "index"))
    s._index_ptr = int(s._index.view.handle)
    s.max_degree, s.max_degree_nonroot = 1 << 20, 1 << 20
    mp.setattr(S, "grid_size", lambda kernel, smem, num_sms, blocks_per_sm: 2 * num_sms)

    return s


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, bytes]]:
    """Every upload as (kind, device address, the host bytes at the time of the call)."""
    import cuda.bindings.driver as drv

    calls: list[tuple[str, int, bytes]] = []
    ok = (drv.CUresult.CUDA_SUCCESS,)

    def htod(dst: int, src: int, n: int, stream: object) -> tuple:
        calls.append(("up", int(dst), ctypes.string_at(int(src), int(n))))
        return ok

    monkeypatch.setattr(drv, "cuMemcpyHtoDAsync", htod)
    monkeypatch.setattr(drv, "cuMemcpyDtoHAsync", lambda dst, src, n, stream: ok)
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


def test_search_launches_the_kernel_with_the_view_and_its_parameters(recorder, monkeypatch) -> None:
    """One cooperative launch per call: the index view's address, then the address of the call's parameters
    in the uploaded workspace (`KERNEL_PARAMS['flashtrie_search']`), on the searcher's stream."""
    from flashtrie.gpu_impl.layout import KERNEL_PARAMS
    from flashtrie.gpu_impl.workspace import THREADS

    rng = np.random.default_rng(7)
    kws = [rng.integers(0, 20, size=int(rng.integers(1, 6))).tolist() for _ in range(100)]
    s = _fake_searcher(NarrowLoudsIndex.build(KeywordSet.from_sequences(kws)), [], monkeypatch)
    s.search(rows_from_keywords(rng, kws, q_n=2, steps=3, k=6), SearchConfig(beam_width=3))
    ((stream, name, grid, block, params, smem),) = s.launches
    up = s._ws.handles[0]
    want = KERNEL_PARAMS["flashtrie_search"].pack(index_ptr=s._index_ptr, params_ptr=up + s._ws.lu.offsets["params"])
    assert (stream, name, grid, block, smem) == (1234, "flashtrie_search", s._ws.grid, THREADS, s._ws.smem)
    assert params == want and struct.unpack("<QQ", params) == (s._index_ptr, up + s._ws.lu.offsets["params"])


def test_searchers_sharing_the_kernel_only_ever_raise_its_shared_memory(recorder, monkeypatch) -> None:
    """Searchers of one device share the loaded kernel: a smaller workspace never lowers the dynamic shared
    memory another searcher's launch was allowed."""
    from flashtrie.gpu_impl.workspace import Shape

    index = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2], [3]]))
    a, b = _fake_searcher(index, [], monkeypatch), _fake_searcher(index, [], monkeypatch)
    b._loaded = a._loaded
    allowed: list[int] = []
    for s in (a, b):
        s.ctx.set_max_dynamic_shared = lambda kernel, nbytes: allowed.append(nbytes)
    a._workspace(Shape(1, 2, 4096, 4096, 4096))  # 8 * 4096 * 2 = 64 KiB of sort buffer: over 48 KiB
    b._workspace(Shape(1, 2, 4096, 2048, 2048))  # 48 KiB: needs its own attribute, but a's allows it
    b._workspace(Shape(1, 2, 8192, 8192, 8192))  # more than a's: raised
    assert allowed == [65536, 131072] and a._loaded.shared_allowed == {"flashtrie_search": 131072}


def test_device_results_are_not_waited_for(recorder, monkeypatch) -> None:
    """``device_out=True`` enqueues the search and returns: no synchronisation until a result is read, and then
    the error word read from the call's own result buffer decides (here: a duplicate token found on the device)."""
    from flashtrie.gpu_impl.results import ERR_DUPLICATE

    from flashtrie import InputError

    rng = np.random.default_rng(7)
    kws = [rng.integers(0, 20, size=int(rng.integers(1, 6))).tolist() for _ in range(100)]
    s = _fake_searcher(NarrowLoudsIndex.build(KeywordSet.from_sequences(kws)), [], monkeypatch)
    copies: list[tuple[int, int, int]] = []
    reads: list[int] = []
    s.ctx.copy = lambda dst, src, n: copies.append((int(dst), int(src), int(n)))

    def download(host: np.ndarray, src: int) -> None:
        reads.append(int(src))
        host.fill(0)
        host.reshape(-1)[0] = ERR_DUPLICATE if host.dtype == np.uint32 and host.size == 1 else 0

    s.ctx.download = download
    p = rows_from_keywords(rng, kws, q_n=2, steps=3, k=6)
    res = s.search(p, SearchConfig(beam_width=3), device_out=True)
    assert s.stream.syncs == 0 and not reads
    (dst, src, n), = copies  # the whole output, error word and counters included, into the result's buffer
    assert n == s._ws.lo.total and s.last_breakdown["wait_ms"] == 0.0
    with pytest.raises(InputError, match="more than once in one row \\(checked on the device\\)"):
        res.keyword_ids.get()
    assert s.stream.syncs == 1 and reads == [dst + s._ws.lo.offsets["out_err"]]
    assert s.last_stats.steps == 3 and s.stream.syncs == 2  # the counters, read when asked for
