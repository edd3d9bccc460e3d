"""`GpuSearcher`: the whole beam search of docs/semantics.md in one cooperative CUDA kernel per batch.

Per call: one host-to-device copy (parameters, start states, length-norm table and, for host input, the
proposals), one cooperative launch that runs every step, one device-to-host copy of the results.  The
index arrays are uploaded once, in the constructor; workspaces are sized from (Q, T, K, B, R) and reused
while the shape stays the same.  The parts: `context` (device, stream, memory, copies), `index_upload`,
`workspace` (layouts, capacities, grid), `intake` (proposals, start states), `results` (output, errors,
statistics), `layout` (the structs shared with the kernel), `compile` (NVRTC).

Limits (each refused with `InputError` before any work): beam width B <= 8192, max_results R <= 8192,
proposals per row K <= 16384, T <= 255, and an index whose keywords are at most 65535 tokens long.  A
request whose workspace does not fit in device memory is refused with `DeviceError`.

Proposals may be a `Proposals`, a ``(tokens, logprobs)`` pair of numpy arrays, or a pair of device arrays
(see `intake`).  Device input is validated on the device, with no copy to the host: NaN / +inf logprobs and
duplicate tokens in a row raise `InputError` when the results are read (host results: when the call waits
for them; ``device_out=True``: when a `DeviceArray` is read, the call itself returns without waiting), and
no results are given; int32 tokens must be in [0, 2**31 - 1] or -1 (padding), and other negative values
raise `InputError` the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from flashtrie.errors import DeviceError, InputError
from flashtrie.index import NarrowLoudsIndex
from flashtrie.limits import MAX_STEPS
from flashtrie.proposals import Proposals
from flashtrie.scoring import SearchPlan
from flashtrie.search_core import (
    BackendLimits,
    check_index,
    check_limits,
    check_request,
    normalize_prefixes,
    start_states,
)
from flashtrie.search_types import SearchConfig, SearchResult, SearchStats

from .context import GpuContext, check, value
from .index_upload import GPU_MAX_KEYWORD_LENGTH, upload_index
from .inflight import Inflight
from .intake import Intake, pack_start_states, take_proposals
from .launch import Launcher, load_kernels
from .layout import KERNEL_PARAMS, PARAMS
from .results import DeviceArray, DeviceCall, device_results, host_results, raise_for, results_to_device, step_stats
from .workspace import THREADS, Shape, Workspace, build_workspace, caps, grid_size, layouts, pow2, shared_bytes

__all__ = ["GpuSearcher", "DeviceArray", "GPU_MAX_BEAM", "GPU_MAX_RESULTS", "GPU_MAX_PROPOSALS",
           "GPU_MAX_KEYWORD_LENGTH"]

GPU_MAX_BEAM = 8192
GPU_MAX_RESULTS = 8192
GPU_MAX_PROPOSALS = 16384
_SEARCH = KERNEL_PARAMS["flashtrie_search"].packer()
_GPU_MAX_ROWS = 2**31 - 1  # Q * max(T, B, R): the kernel's 32-bit row and slot indices
LIMITS = BackendLimits(beam=GPU_MAX_BEAM, results=GPU_MAX_RESULTS, proposals=GPU_MAX_PROPOSALS, steps=MAX_STEPS,
                       rows=_GPU_MAX_ROWS)


class GpuSearcher:
    """Exact trie-constrained beam search on an NVIDIA GPU (see the module docstring for limits).

    One searcher owns one CUDA stream and one workspace: it is not safe to call from several threads at once.
    It may be called from any thread, one call at a time, and beside searchers on other devices: each call
    makes its device's context current first.
    """

    name = "gpu"

    def __init__(self, index: NarrowLoudsIndex, device: int = 0, *, blocks_per_sm: int | None = None,
                 stage_inputs: bool = True) -> None:
        """Compile (or load from the cache) the kernel for ``device`` and upload ``index`` once.

        ``stage_inputs``: copy host proposals into a pinned buffer and upload everything in one copy
        (default), or upload them straight from the caller's arrays (two more copies, no host memcpy).
        """
        self.index = check_index(index)
        if int(index.max_keyword_length) > GPU_MAX_KEYWORD_LENGTH:
            raise InputError(f"index: max_keyword_length {index.max_keyword_length} is over the GPU limit "
                             f"{GPU_MAX_KEYWORD_LENGTH}")
        self.ctx = GpuContext(device)
        self.device, self.stream, self.arch = self.ctx.device, self.ctx.stream, self.ctx.arch
        loaded = load_kernels("search.cu", self.arch, {"FT_THREADS": str(THREADS)}, self.device.device_id)
        self.compile_seconds: float = loaded.compiled.seconds
        self.compile_from_cache: bool = loaded.compiled.from_cache
        self.kernel = loaded["flashtrie_search"]
        self._loaded = loaded
        self._launcher = Launcher(loaded, cooperative=True)
        self.load_seconds = loaded.seconds
        self._static_smem = int(value(self.kernel.attributes.shared_size_bytes))
        self._num_sms = self.ctx.num_sms
        self._smem_optin = self.ctx.smem_optin
        self._blocks_per_sm = blocks_per_sm
        self.stage_inputs = bool(stage_inputs)
        self._device_ms: float | None = float("nan")  # None: the last call's events are not read yet
        self._inflight = Inflight()
        self.last_host_ms: float = float("nan")
        #: host time of the last call by part: preparing the upload, enqueueing copies and the launch,
        #: waiting for the stream, unpacking the results (ms)
        self.last_breakdown: dict[str, float] = {}
        self._stats: SearchStats | None = None
        #: (out_stats [T, 4] or what reads it, Q, B), built lazily
        self._stats_raw: tuple[np.ndarray | Callable[[], np.ndarray], int, int] | None = None
        self._ws: Workspace | None = None
        self._plans: dict[tuple[int, int, float, float, float], SearchPlan] = {}
        self._checked: set[tuple[int, int, int, int, int]] = set()  # (Q, T, K, B, R) within every limit
        self._stream_handle = self.stream.handle  # for the per-call driver copies
        self._stream_int = int(self._stream_handle)
        t0 = time.perf_counter()
        self._index = upload_index(self.ctx, self.index)
        self._index_ptr = int(self._index.view.handle)
        self.upload_seconds = time.perf_counter() - t0
        #: the index upload: bytes copied, copy seconds, GB/s, the device flag derivation (`UploadStats`)
        self.upload_stats = self._index.stats
        self.index_bytes = self._index.nbytes
        self.max_degree = self._index.max_degree
        self.max_degree_nonroot = self._index.max_degree_nonroot

    @property
    def last_device_ms(self) -> float:
        """Device time of the last call (CUDA events around the kernel), ms; waits for a call left running."""
        if self._device_ms is None:
            e0, e1 = self.ctx.events
            e1.sync()
            self._device_ms = float(e1 - e0)
        return self._device_ms

    @last_device_ms.setter
    def last_device_ms(self, ms: float) -> None:
        self._device_ms = ms

    @property
    def index_address(self) -> int:
        """The device address of the uploaded index (its view), for a stepper that shares it
        (`flashtrie.gpu_impl.stepwise.GpuTrieStepper.from_searcher`)."""
        return self._index_ptr

    @property
    def last_stats(self) -> SearchStats | None:
        """The kernel's per-step counters of the last call (`results.STAT_NAMES`), built on first access (for
        a call left running on the device, read then)."""
        if self._stats is None and self._stats_raw is not None:
            raw, q_n, b = self._stats_raw
            self._stats = step_stats(raw() if callable(raw) else raw, q_n, b)
        return self._stats

    def _set_stats(self, raw: np.ndarray, q_n: int, b: int) -> None:
        self._stats, self._stats_raw = None, (raw, q_n, b)

    # ------------------------------------------------------------------------------------ device
    def make_current(self) -> None:
        """Make this searcher's device context current on the calling thread (a no-op when it is)."""
        self.ctx.make_current()

    def memory_info(self) -> tuple[int, int]:
        """(free, total) device memory in bytes."""
        return self.ctx.memory_info()

    def _trim_pool(self) -> bool:
        return self.ctx.trim_pool()

    # ------------------------------------------------------------------------------------ workspaces
    def workspace_bytes(self, q: int, t: int, k: int, b: int, r: int, host_inputs: bool = True) -> int:
        """Device bytes a search of this shape needs beyond the index (``host_inputs``: proposals uploaded
        from the host, as opposed to device arrays)."""
        return sum(lay.total for lay in self._layouts(Shape(q, t, k, b, r, host_inputs)))

    def _caps(self, k: int, b: int) -> tuple[int, int]:
        return caps(k, b, self.max_degree, self.max_degree_nonroot)

    def _layouts(self, s: Shape) -> tuple[Any, Any, Any]:
        return layouts(s, *self._caps(s.k, s.b), int(self.index.max_keyword_length) + 2)

    def _workspace(self, s: Shape) -> Workspace:
        if self._ws is not None and self._ws.shape == s:
            return self._ws
        sort_cap, smem = shared_bytes(s.k, s.b, s.r, self._static_smem, self._smem_optin)
        if self._ws is not None:  # free the old one first, and give its memory back to the device
            self._ws = None
            self.stream.sync()
            self.ctx.trim_pool()
        lw, lu, lo = self._layouts(s)
        allowed = self._loaded.shared_allowed
        if smem + self._static_smem > 48 * 1024 and smem > allowed.get("flashtrie_search", 0):
            self.ctx.set_max_dynamic_shared(self.kernel, smem)  # the kernel is shared: only ever raised
            allowed["flashtrie_search"] = smem
        grid = grid_size(self.kernel, smem, self._num_sms, self._blocks_per_sm)
        self._ws = build_workspace(self.ctx, s, lw, lu, lo, *self._caps(s.k, s.b), sort_cap, smem, grid,
                                   self.memory_info())
        return self._ws

    def _derive(self, config: SearchConfig) -> SearchPlan:
        """The config's `SearchPlan` (cached per B, R, thresholds and α; may refuse ``length_norm``)."""
        key = (int(config.beam_width), int(config.results), float(config.token_threshold),
               float(config.score_threshold), float(config.length_norm))
        plan = self._plans.get(key)
        if plan is None:
            plan = SearchPlan.from_config(config, int(self.index.max_keyword_length))
            if len(self._plans) > 16:
                self._plans.clear()
            self._plans[key] = plan
        return plan

    # ------------------------------------------------------------------------------------ search
    def search(self, proposals: Proposals | tuple[Any, Any], config: SearchConfig,
               prefixes: Sequence[Sequence[int]] | None = None, *, device_out: bool = False) -> SearchResult:
        """Run the search; results as numpy arrays, or as `DeviceArray`s with ``device_out=True``.

        With ``device_out`` the call returns once the search is enqueued on the searcher's stream, without a
        synchronisation: device proposals the kernel refuses raise their `InputError` when the results are
        read (``DeviceArray.get`` / ``check``); ``last_device_ms`` and ``last_stats`` wait for the search when
        read.  Device proposals must stay unchanged until the results are read (they are kept alive).
        """
        t_start = time.perf_counter()
        if not isinstance(config, SearchConfig):
            raise InputError(f"config: expected a SearchConfig, got {type(config).__name__}")
        intake = take_proposals(proposals, self._stream_int, self.device.device_id)
        q_n, t_n, k_n = intake.shape
        b, r = int(config.beam_width), int(config.results)
        shape_key = (q_n, t_n, k_n, b, r)
        known = shape_key in self._checked  # the limits depend on the shape only: checked once per shape
        if not known:
            check_limits("GPU", intake.shape, config, LIMITS)
        # host proposals take the shared request check; device arrays are checked by intake and the kernel
        pref = (normalize_prefixes(prefixes, q_n) if intake.proposals is None
                else check_request(intake.proposals, config, prefixes))
        if q_n == 0 or t_n == 0 or k_n == 0:
            return self._empty(q_n, t_n, b, r, device_out, t_start)
        if not known:
            shared_bytes(k_n, b, r, self._static_smem, self._smem_optin)  # refused before any allocation
            if len(self._checked) > 64:
                self._checked.clear()
            self._checked.add(shape_key)
        derived = self._derive(config)  # may refuse length_norm: before any allocation
        starts = None if pref is None else pack_start_states(self.index, start_states(self.index, pref, q_n), q_n)
        self.make_current()
        ws = self._ws
        if ws is None or ws.key != (*shape_key, not intake.on_device):
            ws = self._workspace(Shape(q_n, t_n, k_n, b, r, not intake.on_device))
        self._inflight.before_staging()
        upload_end = self._stage(ws, intake, derived, starts)
        t_prep = time.perf_counter()
        out_buf = self._enqueue(ws, intake, upload_end, device_out)
        t_enq = time.perf_counter()
        if device_out:
            res, t_wait = self._left_running(ws, intake, out_buf, q_n, b), t_enq
        else:
            res, t_wait = self._host_results(ws, q_n, b)
        t_end = time.perf_counter()
        self.last_host_ms = (t_end - t_start) * 1e3
        self.last_breakdown = {"prep_ms": (t_prep - t_start) * 1e3, "enqueue_ms": (t_enq - t_prep) * 1e3,
                               "wait_ms": (t_wait - t_enq) * 1e3, "post_ms": (t_end - t_wait) * 1e3}
        return res

    def _host_results(self, ws: Workspace, q_n: int, b: int) -> tuple[SearchResult, float]:
        """Wait for the call, raise what its error word reports, and copy its results out of the pinned mirror;
        also returns when the wait ended (``perf_counter``)."""
        try:
            self.stream.sync()
        except Exception as e:
            raise DeviceError(f"the search kernel failed: {e}") from e
        t_waited = time.perf_counter()
        e0, e1 = self.ctx.events
        self.last_device_ms = float(e1 - e0)
        arrays = ws.out_arrays
        raise_for(int(arrays["out_err"][0]))
        self._set_stats(arrays["out_stats"].copy(), q_n, b)
        return host_results(arrays), t_waited

    def _left_running(self, ws: Workspace, intake: Intake, out_buf: Any, q_n: int, b: int) -> SearchResult:
        """The results of a call not waited for, as `DeviceArray`s: its error word, counters and device time
        are read when asked for; the device arrays it reads are kept alive until it is done."""
        call = DeviceCall(out_buf, ws.lo, self.ctx, intake.keep)
        self._inflight.add(self.ctx.events[0], self.stream.record(), intake.keep)
        self._device_ms = None
        self._stats, self._stats_raw = None, (call.stats, q_n, b)
        return device_results(call, q_n, ws.shape.r)

    def _empty(self, q_n: int, t_n: int, b: int, r: int, device_out: bool, t_start: float) -> SearchResult:
        """The result of a call with no work (Q, T or K is 0)."""
        self.last_device_ms = 0.0
        self._set_stats(np.zeros((t_n, 4), dtype=np.uint32), q_n, b)
        empty = SearchResult.empty(q_n, r)
        res = results_to_device(empty, self.ctx) if device_out else empty
        self.last_host_ms = (time.perf_counter() - t_start) * 1e3
        self.last_breakdown = {"prep_ms": self.last_host_ms, "enqueue_ms": 0.0, "wait_ms": 0.0, "post_ms": 0.0}
        return res

    def _params(self, ws: Workspace, intake: Intake, d: SearchPlan) -> bytes:
        """The kernel's `Params` (layout.PARAMS) for a call on ``ws``."""
        q_n, t_n, k_n = intake.shape
        s, ptr = ws.shape, ws.pointers()
        if intake.on_device:
            ptr["tok_in"], ptr["lp_in"] = intake.tokens_ptr, intake.logprobs_ptr
        values: dict[str, int | float] = {name: ptr[name] for name, ctype in PARAMS.fields if ctype == "ptr"}
        values.update(cand_cap=ws.cand_cap, chunk_cap=q_n * ws.chunk_cap, Q=q_n, T=t_n, K=k_n, B=s.b, R=s.r,
                      kpad=pow2(k_n), sort_cap=ws.sort_cap, ln_len=d.ln_table.size, thr_tau=float(d.tau),
                      thr_sigma=float(d.sigma), ln_min=float(d.ln_min), ln_max=float(d.ln_max),
                      signed_tokens=int(intake.signed_tokens), pad0=0)
        return PARAMS.pack(values)

    def _stage(self, ws: Workspace, intake: Intake, d: SearchPlan, starts: np.ndarray | None) -> int:
        """Write parameters, start states (None: all at the root), the LN table and (staged) host proposals
        into the pinned upload buffer; returns the bytes to upload.  What the last call on ``ws`` wrote
        there and still holds (same parameters, all-root starts) is not written again."""
        # the plan compares by identity (one object per cached config), so the key costs no copy per call
        key = (d, intake.tokens_ptr, intake.logprobs_ptr, intake.signed_tokens)
        if ws.staged != key:
            ws.staged = None  # until all three are written
            ws.up_bytes("params")[:PARAMS.size] = np.frombuffer(self._params(ws, intake, d), dtype=np.uint8)
            ws.up_bytes("err")[:] = 0  # the kernel's error word, zeroed on the device by every upload
            ws.up_bytes("ln")[:d.ln_table.nbytes] = d.ln_table.view(np.uint8)
            ws.staged = key
        if starts is None:  # every query starts at the root, (node 0, off 0, L 0): all-zero hypotheses
            if not ws.root_starts:
                ws.up_bytes("starts")[:] = 0
                ws.root_starts = True
        else:
            ws.root_starts = False
            ws.up_bytes("starts")[:] = starts.reshape(-1).view(np.uint8)
        lu = ws.lu
        if intake.on_device:
            return lu.total
        if not self.stage_inputs:
            return lu.offsets["tok_in"]
        assert intake.proposals is not None
        ws.up_bytes("tok_in")[:] = intake.proposals.tokens.reshape(-1).view(np.uint8)
        ws.up_bytes("lp_in")[:] = intake.proposals.logprobs.reshape(-1).view(np.uint8)
        return lu.offsets["lp_in"] + intake.proposals.logprobs.nbytes

    def _enqueue(self, ws: Workspace, intake: Intake, upload_end: int, device_out: bool) -> Any:
        """Upload, launch, and copy the results back (all on the stream); the device result buffer when
        ``device_out``.

        The two copies of every call (pinned upload -> device, device results -> pinned mirror) are the
        driver's async memcpy on the workspace's addresses, not `Buffer.copy_from`: the buffers stay
        cuda.core `Buffer`s (they own the memory), but cuda.core's copy costs more host time per call than
        the raw driver call, and on a batch-1 search that is latency the GPU backend exists to avoid.
        """
        from cuda.bindings import driver

        ctx, lo, sh = self.ctx, ws.lo, self._stream_handle
        up, up_host, out, out_host = ws.handles
        check(driver.cuMemcpyHtoDAsync(up, up_host, upload_end, sh), "cuMemcpyHtoDAsync")
        if not intake.on_device and not self.stage_inputs:  # straight from the caller's (pageable) arrays
            assert intake.proposals is not None
            ctx.upload(up + ws.lu.offsets["tok_in"], np.ascontiguousarray(intake.proposals.tokens))
            ctx.upload(up + ws.lu.offsets["lp_in"], np.ascontiguousarray(intake.proposals.logprobs))
        e0, e1 = ctx.events
        self.stream.record(e0)
        self._launcher.launch(self._stream_int, "flashtrie_search", ws.grid, THREADS,
                              _SEARCH(index_ptr=self._index_ptr, params_ptr=up + ws.lu.offsets["params"]),
                              ws.smem)
        self.stream.record(e1)
        if not device_out:
            check(driver.cuMemcpyDtoHAsync(out_host, out, lo.total, sh), "cuMemcpyDtoHAsync")
            return None
        out_buf = ctx.allocate(lo.total, "device results")  # the error word and step counters with them
        ctx.copy(int(out_buf.handle), out, lo.total)
        return out_buf

    def __repr__(self) -> str:
        return (f"GpuSearcher(device={self.device.device_id} {self.device.name!r}, arch={self.arch}, "
                f"nodes={self.index.num_nodes:,}, compile_seconds={self.compile_seconds:.2f})")
