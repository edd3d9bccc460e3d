"""`GpuSearcher`: the whole beam search of docs/semantics.md in one cooperative CUDA kernel per batch.

Per call: one host-to-device copy (parameters, start states, length-norm table and, for host input, the
proposals), one cooperative launch that runs every step, one device-to-host copy of the results.  The
index arrays are uploaded once, in the constructor; workspaces are sized from (Q, T, K, B, R) and reused
while the shape stays the same.

Limits (each refused with `InputError` before any work): beam width B <= 8192, max_results R <= 8192,
proposals per row K <= 16384, T <= 255, and an index whose keywords are at most 65535 tokens long.  A
request whose workspace does not fit in device memory is refused with `DeviceError`.

Proposals may be a `Proposals` (validated on the host when it was built), a ``(tokens, logprobs)`` pair of
numpy arrays (validated here, through `Proposals`), or a pair of device arrays (CuPy, PyTorch, anything
with DLPack or ``__cuda_array_interface__``: C-contiguous ``[Q, T, K]`` int32/uint32 and float32), read in
place with no host copy.  Device input is validated on the device: NaN / +inf logprobs and duplicate
tokens in a row raise `InputError` after the launch and no results are returned; int32 tokens must be in
[0, 2**31 - 1] or -1 (padding), and other negative values raise `InputError` the same way.
"""

from __future__ import annotations

import ctypes
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from flashtrie.errors import DeviceError, IndexFormatError, InputError
from flashtrie.index import NarrowLoudsIndex
from flashtrie.limits import MAX_STEPS
from flashtrie.proposals import Proposals
from flashtrie.scoring import length_norm_table, threshold32
from flashtrie.search_types import SearchConfig, SearchResult, normalize_prefixes

from .compile import compile_kernel

__all__ = ["GpuSearcher", "DeviceArray", "GPU_MAX_BEAM", "GPU_MAX_RESULTS", "GPU_MAX_PROPOSALS"]

GPU_MAX_BEAM = 8192
GPU_MAX_RESULTS = 8192
GPU_MAX_PROPOSALS = 16384
GPU_MAX_KEYWORD_LENGTH = 65535
_GPU_MAX_ROWS = 2**31 - 1  # Q * max(T, B, R): the kernel's 32-bit row and slot indices
THREADS = 512

_NO_NODE = 0xFFFF_FFFF
_KIND_LINKED_OFF = 2
_ALIGN = 256
_ERR_BAD_LOGPROB, _ERR_DUPLICATE, _ERR_OVERFLOW, _ERR_BAD_TOKEN = 1, 2, 4, 8
_PARAM_PTRS = (
    "tok_in", "lp_in", "starts", "ln", "row_tok", "row_lp", "row_nv", "row_max", "fr0", "fr1", "nf", "tasks", "chunks",
    "fkey", "fpay", "pkey", "ppay", "fcount", "pcount", "pool0", "pool1", "pool_n", "pool_sel", "pool_worst",
    "step_chunks", "step_alive", "err", "out_err", "out_ids", "out_scores", "out_norms", "out_lens", "out_nres",
    "out_stats",
)
_PARAMS_FMT = f"<{len(_PARAM_PTRS)}Q2Q8I4f2I"
_INDEX_FMT = "<15Q8I"


def _pow2(n: int) -> int:
    p = 1
    while p < n:
        p <<= 1
    return p


def _as_int(handle: Any) -> int:
    """A cuda.bindings handle (CUcontext, ...) as the integer address it wraps."""
    try:
        return int(handle)
    except TypeError:
        return int(handle.getPtr())


def _check(result: Any, what: str) -> Any:
    """Unpack a cuda.bindings ``(err, *values)`` tuple; raise `DeviceError` on failure."""
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != 0:
        raise DeviceError(f"{what} failed: {err}")
    if isinstance(result, tuple):
        return result[1] if len(result) == 2 else result[1:]
    return None


class _Layout:
    """Byte offsets of named arrays inside one allocation."""

    def __init__(self) -> None:
        self.offsets: dict[str, int] = {}
        self.sizes: dict[str, int] = {}
        self.total = 0

    def add(self, name: str, nbytes: int) -> None:
        self.total = -(-self.total // _ALIGN) * _ALIGN
        self.offsets[name] = self.total
        self.sizes[name] = int(nbytes)
        self.total += max(int(nbytes), 4)


@dataclass
class _Workspace:
    key: tuple[int, int, int, int, int]
    work: Any  # device Buffer
    up: Any  # device Buffer (per-call upload)
    out: Any  # device Buffer (results)
    up_host: Any  # pinned Buffer
    out_host: Any  # pinned Buffer
    up_view: np.ndarray
    out_view: np.ndarray
    lw: _Layout
    lu: _Layout
    lo: _Layout
    cand_cap: int
    chunk_cap: int
    sort_cap: int
    smem: int
    grid: int
    nbytes: int
    launch_config: Any = None


class DeviceArray:
    """A device array left on the GPU by ``search(..., device_out=True)``.

    Exposes ``__cuda_array_interface__`` (wrap it with ``cupy.asarray`` or ``torch.as_tensor``) and
    ``get()`` to copy it to a numpy array.  It owns its memory.
    """

    def __init__(self, buffer: Any, offset: int, shape: tuple[int, ...], dtype: np.dtype, searcher: GpuSearcher):
        self._buffer = buffer
        self._ptr = int(buffer.handle) + offset
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self._searcher = searcher

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self._ptr, False), "version": 3,
                "strides": None, "stream": None}

    def get(self) -> np.ndarray:
        """Copy to a new numpy array."""
        from cuda.bindings import driver

        out = np.empty(self.shape, dtype=self.dtype)
        if out.nbytes:
            self._searcher.make_current()
            _check(driver.cuMemcpyDtoH(out.ctypes.data, self._ptr, out.nbytes), "cuMemcpyDtoH")
        return out

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype})"


class GpuSearcher:
    """Exact trie-constrained beam search on an NVIDIA GPU (see the module docstring for limits).

    One searcher owns one CUDA stream and one workspace: it is not safe to call from several threads at once.
    It may be called from any thread, one call at a time, and beside searchers on other devices: each call
    makes its device's context current first.
    """

    name = "gpu"

    def __init__(self, index: Any, device: int = 0, *, blocks_per_sm: int | None = None,
                 stage_inputs: bool = True) -> None:
        """Compile (or load from the cache) the kernel for ``device`` and upload ``index`` once.

        ``stage_inputs``: copy host proposals into a pinned buffer and upload everything in one copy
        (default), or upload them straight from the caller's arrays (two more copies, no host memcpy).
        """
        try:
            from cuda.core import Device, EventOptions, LaunchConfig, ObjectCode  # noqa: F401
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise DeviceError(f"the GPU backend needs cuda-core (pip install 'flashtrie[gpu]'): {e}") from e
        if not isinstance(index, NarrowLoudsIndex):
            raise InputError(f"index: expected a flashtrie.NarrowLoudsIndex (NarrowLoudsIndex.build(keywords) or "
                             f".load(path)), got {type(index).__name__}")
        if int(index.max_keyword_length) > GPU_MAX_KEYWORD_LENGTH:
            raise InputError(f"index: max_keyword_length {index.max_keyword_length} is over the GPU limit "
                             f"{GPU_MAX_KEYWORD_LENGTH}")
        try:
            self.device = Device(device)
            self.device.set_current()
            from cuda.bindings import driver

            self._context = _as_int(_check(driver.cuCtxGetCurrent(), "cuCtxGetCurrent"))
        except Exception as e:
            raise DeviceError(f"no usable CUDA device {device}: {e}") from e
        self.index = index
        cc = _value(self.device.compute_capability)
        self.arch = f"sm_{cc.major}{cc.minor}"
        self.stream = self.device.create_stream()
        self._events = (self.device.create_event(EventOptions(timing_enabled=True)),
                        self.device.create_event(EventOptions(timing_enabled=True)))
        t0 = time.perf_counter()
        ck = compile_kernel("search.cu", self.arch, {"FT_THREADS": str(THREADS)})
        self.compile_seconds: float = ck.seconds
        self.compile_from_cache: bool = ck.from_cache
        self._obj = ObjectCode.from_cubin(ck.cubin)
        self.kernel = self._obj.get_kernel("flashtrie_search")
        self.load_seconds = time.perf_counter() - t0
        self._static_smem = int(_value(self.kernel.attributes.shared_size_bytes))
        self._num_sms = int(self.device.properties.multiprocessor_count)
        self._smem_optin = int(self.device.properties.max_shared_memory_per_block_optin)
        self._blocks_per_sm = blocks_per_sm
        self.stage_inputs = bool(stage_inputs)
        self._smem_attr_set = 0
        self.last_device_ms: float = float("nan")
        self.last_host_ms: float = float("nan")
        #: host time of the last call by part: preparing the upload, enqueueing copies and the launch,
        #: waiting for the stream, unpacking the results (ms)
        self.last_breakdown: dict[str, float] = {}
        #: per step of the last call: frontier candidates, pool candidates, work chunks, live queries
        self.last_stats: np.ndarray = np.zeros((0, 4), dtype=np.uint32)
        self._ws: _Workspace | None = None
        self._ln_cache: dict[float, np.ndarray] = {}
        t0 = time.perf_counter()
        self._upload_index()
        self.upload_seconds = time.perf_counter() - t0

    # ------------------------------------------------------------------------------------ index upload
    def _upload_index(self) -> None:
        ix = self.index
        n = int(ix.num_nodes)
        meta = ix.meta
        if int(meta["suffix.size"]) >= 1 << 30:
            raise InputError(f"index: suffix store of {meta['suffix.size']} tokens is over the GPU limit 2**30")
        arrays = ix.arrays
        louds_bits = ix.louds.to_bools()
        zpos = np.flatnonzero(~louds_bits)
        if zpos.size != n:
            raise IndexFormatError(f"index: LOUDS has {zpos.size} zeros, expected one per node ({n}); the index is "
                                   "damaged: rebuild it with `flashtrie build`")
        deg = np.diff(np.concatenate(([-1], zpos))) - 1
        del louds_bits, zpos
        self.max_degree = int(deg.max()) if n else 0
        self.max_degree_nonroot = int(deg[1:].max()) if n > 1 else 0
        linked = ix.linked.to_bools()[:n].astype(np.uint32)
        term = ix.terminal.to_bools()[:n].astype(np.uint32)
        vals = linked | (term << 1) | ((deg > 0).astype(np.uint32) << 2)
        vals = np.concatenate([vals, np.zeros((-n) % 8 + 8, dtype=np.uint32)])
        nflags = np.bitwise_or.reduce(vals.reshape(-1, 8) << (4 * np.arange(8, dtype=np.uint32)), axis=1)
        nflags = nflags.astype(np.uint32)
        names = ["louds.words", "louds.rank", "louds.select0", "labels_lo", "hi_flag.words", "hi_flag.rank",
                 "labels_hi.words", "linked.words", "linked.rank", "link_starts.words", "suffix.words",
                 "terminal.words", "terminal.rank", "keyword_ids.words"]
        host = [np.ascontiguousarray(arrays[k]) for k in names] + [nflags]
        layout = _Layout()
        for i, a in enumerate(host):
            layout.add(str(i), a.nbytes + 8)
        self._index_buf = self._alloc(layout.total, "index arrays")
        base = int(self._index_buf.handle)
        from cuda.bindings import driver

        sh = self.stream.handle  # the buffers were allocated on this stream: copy in its order
        for i, a in enumerate(host):
            if a.nbytes:
                _check(driver.cuMemcpyHtoDAsync(base + layout.offsets[str(i)], a.ctypes.data, a.nbytes, sh),
                       "cuMemcpyHtoDAsync")
        ptrs = [base + layout.offsets[str(i)] for i in range(len(host))]
        view = struct.pack(_INDEX_FMT, *ptrs, int(meta["labels_hi.width"]), int(meta["link_starts.width"]),
                           int(meta["suffix.width"]), int(meta["keyword_ids.width"]), n, 0, 0, 0)
        self._index_view = self._alloc(len(view), "index view")
        vb = np.frombuffer(view, dtype=np.uint8).copy()
        _check(driver.cuMemcpyHtoDAsync(int(self._index_view.handle), vb.ctypes.data, vb.nbytes, sh),
               "cuMemcpyHtoDAsync")
        self.stream.sync()  # the host arrays may go once this returns
        self.index_bytes = layout.total

    def _alloc(self, nbytes: int, what: str) -> Any:
        try:
            return self.device.allocate(max(int(nbytes), 8), stream=self.stream)
        except Exception as e:
            free, total = self.memory_info()
            raise DeviceError(f"cannot allocate {nbytes:,} bytes of device memory for {what} "
                              f"(free {free:,} of {total:,} bytes): {e}") from e

    def make_current(self) -> None:
        """Make this searcher's device context current on the calling thread (a no-op when it is)."""
        from cuda.bindings import driver

        if _as_int(_check(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")) != self._context:
            self.device.set_current()

    def _trim_pool(self) -> bool:
        """Release the memory pool's unused reservations (freed buffers stay reserved in cuda.core's pool and
        would not count as free).  True when the pool was trimmed."""
        from cuda.bindings import driver

        try:
            pool = self.device.memory_resource.handle
            return int(driver.cuMemPoolTrimTo(pool, 0)[0]) == 0
        except Exception:  # noqa: BLE001 - no pool to trim (another resource, older cuda.core): nothing to give back
            return False

    def memory_info(self) -> tuple[int, int]:
        """(free, total) device memory in bytes."""
        from cuda.bindings import driver

        free, total = _check(driver.cuMemGetInfo(), "cuMemGetInfo")
        return int(free), int(total)

    # ------------------------------------------------------------------------------------ workspaces
    def workspace_bytes(self, q: int, t: int, k: int, b: int, r: int, host_inputs: bool = True) -> int:
        """Device bytes a search of this shape needs beyond the index (``host_inputs``: proposals uploaded
        from the host, as opposed to device arrays)."""
        return sum(layout.total for layout in self._layouts(q, t, k, b, r, host_inputs))

    def _caps(self, k: int, b: int) -> tuple[int, int]:
        dmax = max(min(k, self.max_degree), 1)
        dnr = max(min(k, self.max_degree_nonroot), 1)
        cand_cap = max(dmax, b * dnr)
        chunk_cap = b * -(-dnr // 32) + -(-dmax // 32)
        return cand_cap, chunk_cap

    def _layouts(self, q: int, t: int, k: int, b: int, r: int, host_inputs: bool = True
                 ) -> tuple[_Layout, _Layout, _Layout]:
        cand_cap, chunk_cap = self._caps(k, b)
        lw = _Layout()
        rows = q * t
        for name, nbytes in (
            ("row_tok", rows * k * 4), ("row_lp", rows * k * 4), ("row_nv", rows * 4), ("row_max", rows * 4),
            ("fr0", q * b * 16), ("fr1", q * b * 16), ("nf", q * 4), ("tasks", q * b * 32),
            ("chunks", q * chunk_cap * 8), ("fkey", q * cand_cap * 8), ("fpay", q * cand_cap * 16),
            ("pkey", q * cand_cap * 8), ("ppay", q * cand_cap * 16), ("fcount", q * 4), ("pcount", q * 4),
            ("pool0", q * r * 16), ("pool1", q * r * 16), ("pool_n", q * 4), ("pool_sel", q * 4),
            ("pool_worst", 2 * q * 4), ("step_chunks", t * 4), ("step_alive", t * 4),
        ):
            lw.add(name, nbytes)
        lu = _Layout()
        lu.add("params", struct.calcsize(_PARAMS_FMT))
        lu.add("err", 4)
        lu.add("starts", q * 16)
        lu.add("ln", 4 * (int(self.index.max_keyword_length) + 2))
        if host_inputs:  # device-array proposals are read where they are
            lu.add("tok_in", rows * k * 4)
            lu.add("lp_in", rows * k * 4)
        lo = _Layout()
        for name, nbytes in (("out_ids", q * r * 8), ("out_scores", q * r * 4), ("out_norms", q * r * 4),
                             ("out_lens", q * r * 4), ("out_nres", q * 4), ("out_err", 4),
                             ("out_stats", 16 * t)):
            lo.add(name, nbytes)
        return lw, lu, lo

    def _shared_bytes(self, k: int, b: int, r: int) -> tuple[int, int]:
        """(sort_cap, dynamic shared bytes) of a search; `InputError` when over the device's limit."""
        sort_cap = _pow2(max(b, r, 32))
        smem = 8 * max(sort_cap, _pow2(k)) + 8 * sort_cap  # keys (8 B); indices and old pool keys (4 B each)
        if smem + self._static_smem > self._smem_optin:
            raise InputError(f"beam_width/max_results/K: shared sort buffer of {smem} bytes is over the device "
                             f"limit {self._smem_optin - self._static_smem}")
        return sort_cap, smem

    def _workspace(self, q: int, t: int, k: int, b: int, r: int, host_inputs: bool = True) -> _Workspace:
        key = (q, t, k, b, r, host_inputs)
        if self._ws is not None and self._ws.key == key:
            return self._ws
        from cuda.core import LegacyPinnedMemoryResource

        sort_cap, smem = self._shared_bytes(k, b, r)
        if self._ws is not None:  # free the old one first, and give its memory back to the device
            self._ws = None
            self.stream.sync()
            self._trim_pool()
        lw, lu, lo = self._layouts(q, t, k, b, r, host_inputs)
        need = lw.total + lu.total + lo.total
        free, total = self.memory_info()
        if need > free:
            raise DeviceError(f"a search of Q={q}, T={t}, K={k}, B={b}, R={r} needs {need:,} bytes of device "
                              f"memory; {free:,} of {total:,} bytes are free")
        work = self._alloc(lw.total, f"the workspace of Q={q}, T={t}, K={k}, B={b}, R={r}")
        up = self._alloc(lu.total, "the upload buffer")
        out = self._alloc(lo.total, "the result buffer")
        pinned = LegacyPinnedMemoryResource()
        try:
            up_host = pinned.allocate(lu.total)
            out_host = pinned.allocate(lo.total)
        except Exception as e:
            raise DeviceError(f"cannot allocate {lu.total + lo.total:,} bytes of pinned host memory for a search "
                              f"of Q={q}, T={t}, K={k}, B={b}, R={r}: {e}") from e
        up_view = np.ctypeslib.as_array((ctypes.c_uint8 * lu.total).from_address(int(up_host.handle)))
        out_view = np.ctypeslib.as_array((ctypes.c_uint8 * lo.total).from_address(int(out_host.handle)))
        cand_cap, chunk_cap = self._caps(k, b)
        self._set_smem(smem)
        occ = int(self.kernel.occupancy.max_active_blocks_per_multiprocessor(THREADS, smem))
        if occ < 1:
            raise DeviceError(f"the kernel cannot run with {THREADS} threads and {smem} bytes of shared memory")
        per_sm = min(occ, self._blocks_per_sm) if self._blocks_per_sm else occ
        grid = self._num_sms * per_sm
        self._ws = _Workspace(key, work, up, out, up_host, out_host, up_view, out_view, lw, lu, lo, cand_cap,
                              chunk_cap, sort_cap, smem, grid, need)
        return self._ws

    def _set_smem(self, smem: int) -> None:
        if smem + self._static_smem <= 48 * 1024 or smem <= self._smem_attr_set:
            return
        from cuda.bindings import driver

        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _check(driver.cuKernelSetAttribute(attr, smem, self.kernel.handle, self.device.device_id),
               "cuKernelSetAttribute")
        self._smem_attr_set = smem

    # ------------------------------------------------------------------------------------ search
    def search(self, proposals: Proposals | tuple[Any, Any], config: SearchConfig,
               prefixes: Sequence[Sequence[int]] | None = None, *, device_out: bool = False) -> SearchResult:
        """Run the search; results as numpy arrays, or as `DeviceArray`s with ``device_out=True``."""
        t_start = time.perf_counter()
        if not isinstance(config, SearchConfig):
            raise InputError(f"config: expected a SearchConfig, got {type(config).__name__}")
        dev_in = None
        if isinstance(proposals, Proposals):
            tokens, logprobs = proposals.tokens, proposals.logprobs
        elif isinstance(proposals, tuple) and len(proposals) == 2 and _is_device_array(proposals[0]):
            dev_in = self._device_inputs(*proposals)
            tokens = logprobs = None
        else:
            if not (isinstance(proposals, tuple) and len(proposals) == 2):
                raise InputError(f"proposals: expected a Proposals or a (tokens, logprobs) pair, got "
                                 f"{type(proposals).__name__}")
            p = Proposals(*proposals)
            tokens, logprobs = p.tokens, p.logprobs
        q_n, t_n, k_n = dev_in[2] if dev_in else tokens.shape
        b, r = int(config.beam_width), int(config.results)
        for name, v, lim in (("beam_width", b, GPU_MAX_BEAM), ("max_results", r, GPU_MAX_RESULTS),
                             ("K (proposals per row)", k_n, GPU_MAX_PROPOSALS), ("T (steps)", t_n, MAX_STEPS)):
            if v > lim:
                raise InputError(f"{name}: {v} is over the GPU backend's limit {lim}")
        q_max = _GPU_MAX_ROWS // max(t_n, b, r, 1)  # the kernel indexes rows q * T + t and q * B + i in 32 bits
        if q_n > q_max:
            raise InputError(f"Q (queries): {q_n} queries with T={t_n}, B={b}, R={r} are over the GPU backend's "
                             f"limit of {q_max} per call; split the batch")
        pref = normalize_prefixes(prefixes, q_n)
        if q_n == 0 or t_n == 0 or k_n == 0:
            self.last_device_ms = 0.0
            self.last_stats = np.zeros((t_n, 4), dtype=np.uint32)
            empty = SearchResult.empty(q_n, r)
            res = self._to_device(empty) if device_out else empty
            self.last_host_ms = (time.perf_counter() - t_start) * 1e3
            self.last_breakdown = {"prep_ms": self.last_host_ms, "enqueue_ms": 0.0, "wait_ms": 0.0, "post_ms": 0.0}
            return res
        self._shared_bytes(k_n, b, r)
        ln = self._ln_table(float(config.length_norm))  # may refuse length_norm: before any allocation
        starts = self._start_states(pref, q_n)
        self.make_current()
        ws = self._workspace(q_n, t_n, k_n, b, r, host_inputs=dev_in is None)
        lw, lu, lo = ws.lw, ws.lu, ws.lo
        wbase, ubase, obase = int(ws.work.handle), int(ws.up.handle), int(ws.out.handle)
        ptr = {name: wbase + off for name, off in lw.offsets.items()}
        ptr.update({name: ubase + off for name, off in lu.offsets.items()})
        ptr.update({name: obase + off for name, off in lo.offsets.items()})
        upload_end = lu.total if dev_in else lu.offsets["tok_in"]
        if dev_in:
            ptr["tok_in"], ptr["lp_in"] = dev_in[0], dev_in[1]
        params = struct.pack(
            _PARAMS_FMT, *(ptr[name] for name in _PARAM_PTRS), ws.cand_cap, q_n * ws.chunk_cap, q_n, t_n, k_n, b, r,
            _pow2(k_n), ws.sort_cap, ln.size, float(threshold32(config.token_threshold)),
            float(threshold32(config.score_threshold)), float(ln[1:].min()), float(ln[1:].max()),
            int(dev_in is not None and dev_in[3]), 0)
        uv = ws.up_view
        uv[lu.offsets["params"]: lu.offsets["params"] + len(params)] = np.frombuffer(params, dtype=np.uint8)
        uv[lu.offsets["err"]: lu.offsets["err"] + 4] = 0
        uv[lu.offsets["starts"]: lu.offsets["starts"] + starts.nbytes] = starts.view(np.uint8).reshape(-1)
        uv[lu.offsets["ln"]: lu.offsets["ln"] + ln.nbytes] = ln.view(np.uint8)
        direct = not dev_in and not self.stage_inputs
        if not dev_in and self.stage_inputs:
            n = tokens.nbytes
            uv[lu.offsets["tok_in"]: lu.offsets["tok_in"] + n] = tokens.reshape(-1).view(np.uint8)
            uv[lu.offsets["lp_in"]: lu.offsets["lp_in"] + n] = logprobs.reshape(-1).view(np.uint8)
            upload_end = lu.offsets["lp_in"] + n
        from cuda.bindings import driver
        from cuda.core import LaunchConfig, launch

        t_prep = time.perf_counter()
        sh = self.stream.handle
        _check(driver.cuMemcpyHtoDAsync(ubase, int(ws.up_host.handle), upload_end, sh), "cuMemcpyHtoDAsync")
        if direct:  # straight from the caller's (pageable) arrays: the driver stages them
            tk = np.ascontiguousarray(tokens)
            lp = np.ascontiguousarray(logprobs)
            _check(driver.cuMemcpyHtoDAsync(ptr["tok_in"], tk.ctypes.data, tk.nbytes, sh), "cuMemcpyHtoDAsync")
            _check(driver.cuMemcpyHtoDAsync(ptr["lp_in"], lp.ctypes.data, lp.nbytes, sh), "cuMemcpyHtoDAsync")
        cfg = ws.launch_config
        if cfg is None:
            cfg = ws.launch_config = LaunchConfig(grid=ws.grid, block=THREADS, shmem_size=ws.smem, is_cooperative=True)
        e0, e1 = self._events
        self.stream.record(e0)
        try:
            launch(self.stream, cfg, self.kernel, np.uint64(int(self._index_view.handle)),
                   np.uint64(ptr["params"]))
        except Exception as e:
            raise DeviceError(f"kernel launch failed (grid {ws.grid} x {THREADS}, {ws.smem} bytes shared): {e}") from e
        self.stream.record(e1)
        if device_out:
            out_buf = self._alloc(lo.total, "device results")
            _check(driver.cuMemcpyDtoDAsync(int(out_buf.handle), obase, lo.total, sh), "cuMemcpyDtoDAsync")
            for name in ("out_err", "out_stats"):  # the error word and the step statistics come to the host
                _check(driver.cuMemcpyDtoHAsync(int(ws.out_host.handle) + lo.offsets[name], obase + lo.offsets[name],
                                                lo.sizes[name], sh), "cuMemcpyDtoHAsync")
        else:
            _check(driver.cuMemcpyDtoHAsync(int(ws.out_host.handle), obase, lo.total, sh), "cuMemcpyDtoHAsync")
        t_enq = time.perf_counter()
        try:
            self.stream.sync()
        except Exception as e:
            raise DeviceError(f"the search kernel failed: {e}") from e
        t_wait = time.perf_counter()
        self.last_device_ms = float(e1 - e0)
        ov = ws.out_view
        err = int(ov[lo.offsets["out_err"]: lo.offsets["out_err"] + 4].view(np.uint32)[0])
        self._raise_for(err)
        qr = q_n * r
        if device_out:
            def arr(name: str, shape: tuple[int, ...], dt: Any) -> DeviceArray:
                return DeviceArray(out_buf, lo.offsets[name], shape, np.dtype(dt), self)

            res = SearchResult(arr("out_ids", (q_n, r), np.int64), arr("out_scores", (q_n, r), np.float32),
                               arr("out_norms", (q_n, r), np.float32), arr("out_lens", (q_n, r), np.int32),
                               arr("out_nres", (q_n,), np.int32))
        else:
            def take(name: str, dt: Any, count: int) -> np.ndarray:
                off = lo.offsets[name]
                return ov[off: off + count * np.dtype(dt).itemsize].view(dt).copy()

            res = SearchResult(take("out_ids", np.int64, qr).reshape(q_n, r),
                               take("out_scores", np.float32, qr).reshape(q_n, r),
                               take("out_norms", np.float32, qr).reshape(q_n, r),
                               take("out_lens", np.int32, qr).reshape(q_n, r),
                               take("out_nres", np.int32, q_n))
        off = lo.offsets["out_stats"]
        self.last_stats = ov[off: off + 16 * t_n].view(np.uint32).reshape(t_n, 4).copy()
        t_end = time.perf_counter()
        self.last_host_ms = (t_end - t_start) * 1e3
        self.last_breakdown = {"prep_ms": (t_prep - t_start) * 1e3, "enqueue_ms": (t_enq - t_prep) * 1e3,
                               "wait_ms": (t_wait - t_enq) * 1e3, "post_ms": (t_end - t_wait) * 1e3}
        return res

    def _to_device(self, res: SearchResult) -> SearchResult:
        """A host `SearchResult` copied into one device buffer, as `DeviceArray`s (for ``device_out=True``)."""
        from cuda.bindings import driver

        fields = (res.keyword_ids, res.scores, res.norm_scores, res.lengths, res.num_results)
        layout = _Layout()
        for i, a in enumerate(fields):
            layout.add(str(i), a.nbytes)
        buf = self._alloc(layout.total, "device results")
        host = [np.ascontiguousarray(a) for a in fields]
        for i, a in enumerate(host):
            if a.nbytes:
                _check(driver.cuMemcpyHtoDAsync(int(buf.handle) + layout.offsets[str(i)], a.ctypes.data, a.nbytes,
                                                self.stream.handle), "cuMemcpyHtoDAsync")
        self.stream.sync()
        return SearchResult(*(DeviceArray(buf, layout.offsets[str(i)], a.shape, a.dtype, self)
                              for i, a in enumerate(fields)))

    @staticmethod
    def _raise_for(err: int) -> None:
        # a bad int32 token first: it can also look like a duplicate (two -2s)
        if err & _ERR_BAD_TOKEN:
            raise InputError("tokens: a negative int32 token other than -1 (checked on the device); int32 tokens "
                             "must be in [0, 2**31 - 1], or -1 for padding")
        if err & _ERR_BAD_LOGPROB:
            raise InputError("logprobs: a non-padding entry is NaN or +inf (checked on the device); logprobs must "
                             "be finite or -inf")
        if err & _ERR_DUPLICATE:
            raise InputError("tokens: a token appears more than once in one row (checked on the device); each "
                             "proposed token may appear once per row")
        if err & _ERR_OVERFLOW:
            raise DeviceError("internal error: a candidate buffer overflowed (please report)")

    def _ln_table(self, alpha: float) -> np.ndarray:
        t = self._ln_cache.get(alpha)
        if t is None:
            t = length_norm_table(alpha, max(int(self.index.max_keyword_length), 1)).astype(np.float32)
            if len(self._ln_cache) > 16:
                self._ln_cache.clear()
            self._ln_cache[alpha] = t
        return t

    def _start_states(self, pref: list[np.ndarray] | None, q_n: int) -> np.ndarray:
        """One start hypothesis per query, as the kernel's 4-word payload (node = 2**32-1: no results)."""
        st = np.zeros((q_n, 4), dtype=np.uint32)
        if pref is None:
            return st
        ix = self.index
        for q, p in enumerate(pref):
            if p.size == 0:
                continue
            w = ix.walk(p)
            if w is None:
                st[q, 0] = _NO_NODE
                continue
            node, off = int(w[0]), int(w[1])
            elen = int(ix.edge_lengths(np.array([node]))[0])
            st[q, 0] = node
            st[q, 2] = p.size
            if node != 0 and off < elen:
                st[q, 3] = (_KIND_LINKED_OFF << 30) | off
        return st

    def _device_inputs(self, tokens: Any, logprobs: Any) -> tuple[int, int, tuple[int, int, int], bool]:
        """(tokens pointer, logprobs pointer, (Q, T, K), tokens are int32) of two device arrays."""
        from cuda.core.utils import StridedMemoryView

        views = []
        for name, obj, dts in (("tokens", tokens, (np.int32, np.uint32)), ("logprobs", logprobs, (np.float32,))):
            try:
                make = getattr(StridedMemoryView, "from_any_interface", StridedMemoryView)
                v = make(obj, stream_ptr=int(self.stream.handle))
            except Exception as e:
                raise InputError(f"{name}: not a device array readable through DLPack or CUDA Array Interface: "
                                 f"{e}") from e
            if not v.is_device_accessible:
                raise InputError(f"{name}: expected a device array")
            if len(v.shape) != 3:
                raise InputError(f"{name}: expected shape [Q, T, K], got {tuple(v.shape)}")
            if np.dtype(v.dtype) not in [np.dtype(d) for d in dts]:
                raise InputError(f"{name}: expected dtype {' or '.join(np.dtype(d).name for d in dts)}, "
                                 f"got {np.dtype(v.dtype)}")
            if v.strides is not None:
                item = np.dtype(v.dtype).itemsize
                c = (v.shape[1] * v.shape[2] * item, v.shape[2] * item, item)
                st = tuple(int(s) * item for s in v.strides)  # StridedMemoryView counts strides in items
                if any(n > 1 and a != e for n, a, e in zip(v.shape, st, c, strict=True)):
                    raise InputError(f"{name}: expected a C-contiguous array")
            if v.device_id != self.device.device_id:
                raise InputError(f"{name}: array is on device {v.device_id}, the searcher on {self.device.device_id}")
            views.append(v)
        if tuple(views[0].shape) != tuple(views[1].shape):
            raise InputError(f"logprobs: shape {tuple(views[1].shape)} differs from tokens' shape "
                             f"{tuple(views[0].shape)}")
        q_n, t_n, k_n = (int(s) for s in views[0].shape)
        self._dev_views = views  # keep alive until the launch is done
        signed = np.dtype(views[0].dtype) == np.dtype(np.int32)
        return int(views[0].ptr), int(views[1].ptr), (q_n, t_n, k_n), signed

    def __repr__(self) -> str:
        return (f"GpuSearcher(device={self.device.device_id} {self.device.name!r}, arch={self.arch}, "
                f"nodes={self.index.num_nodes:,}, compile_seconds={self.compile_seconds:.2f})")


def _value(x: Any) -> Any:
    """A cuda.core attribute that is a property in one version and a method in another."""
    return x() if callable(x) else x


def _is_device_array(obj: Any) -> bool:
    if isinstance(obj, np.ndarray):
        return False
    if hasattr(obj, "__cuda_array_interface__"):
        return True
    dl = getattr(obj, "__dlpack_device__", None)
    if dl is None:
        return False
    try:
        dev_type = int(dl()[0])
    except Exception:
        return False
    return dev_type in (2, 3, 13)  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged

