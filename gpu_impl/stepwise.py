"""`GpuTrieStepper`: the stepwise API of `flashtrie.stepwise` on the GPU (kernels in kernels/step.cu).

Same methods and the same results as `flashtrie.stepwise.TrieStepper` (numpy), on device arrays:
states (`StepStates` of two int64 device arrays), tokens, logits and masks are PyTorch tensors or CuPy
arrays (``array_module``; inputs may be anything DLPack / CUDA Array Interface can read).  Every kernel is
launched on the caller's current stream (torch: ``torch.cuda.current_stream()``; CuPy: its current
stream), and `advance`, `walk`, `ends`, `mask` and `allowed_padded` neither copy to the host nor
synchronise, so a decode loop (or a CUDA graph capture) can call them every step.  `allowed` (CSR) needs
its size: it synchronises once to read it.  `dead_count` reads a device counter (synchronises).

The additive mask stores -inf over the disallowed entries; the allowed ones keep their bits (numpy gives the
same bits): at a node of at most 1,024 children they are read, the whole row part is stored as -inf, and they
are stored back; elsewhere they are neither read nor written.  A mask (or an advance_mask) must not run while
another kernel writes the same logits.

Differences from numpy: tokens come back as int64 (numpy: uint32 for CSR), and a state that is not valid
for the index reads as DEAD here, where numpy refuses it with `InputError` (validating device input would
need a synchronisation).  The EOS and vocabulary checks run on the host once per (vocab_size, EOS).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from flashtrie.errors import DeviceError, InputError
from flashtrie.index import NarrowLoudsIndex
from flashtrie.stepwise import _MAX_EOS, StepStates, TrieStepper, check_vocab

from .compile import compile_kernel
from .context import GpuContext
from .index_upload import host_index, upload_host_index
from .intake import memory_view

__all__ = ["GpuTrieStepper"]

THREADS = 256
CHUNK = 4096  # default vocabulary entries per mask chunk (kernels/step.cu's FT_STEP_CHUNK)
#: nodes whose child ranges the default child table holds (8 bytes each: 16 MiB at most); in level order these
#: are the nodes nearest the root, where most decode rows are
CHILD_TABLE = 1 << 21
#: root labels whose child the default root table holds, with that child's decoded state (32 bytes a label: 128
#: MiB at most, 1 MiB at V = 32,768); a row at the root then finds its next state in one load
ROOT_TABLE = 1 << 22


class _Torch:
    name = "torch"

    def __init__(self, device: int) -> None:
        import torch

        self.t = torch
        self.device = torch.device("cuda", device)
        self.index = device
        #: the current stream's raw handle without a Stream object (what Triton calls); None: the public API
        self._raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        try:
            if self._raw_stream is not None and int(self._raw_stream(device)) != int(
                    torch.cuda.current_stream(self.device).cuda_stream):
                self._raw_stream = None
        except Exception:  # noqa: BLE001 - the public API then
            self._raw_stream = None
        self.int64, self.int32, self.float32, self.bool = torch.int64, torch.int32, torch.float32, torch.bool

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        return self.t.empty(shape, dtype=dtype, device=self.device)

    def full(self, shape: tuple[int, ...], value: Any, dtype: Any) -> Any:
        return self.t.full(shape, value, dtype=dtype, device=self.device)

    def asarray(self, a: np.ndarray) -> Any:
        return self.t.as_tensor(a, device=self.device)

    def sync(self) -> None:
        self.t.cuda.current_stream(self.device).synchronize()

    def stream(self) -> int:
        raw = self._raw_stream
        if raw is not None:
            return int(raw(self.index))
        return int(self.t.cuda.current_stream(self.device).cuda_stream)

    def states(self, n: int) -> tuple[Any, Any]:
        """Two int64 device arrays of n (one allocation)."""
        return self.t.empty((2, n), dtype=self.int64, device=self.device).unbind(0)

    def cumsum(self, a: Any) -> Any:
        return self.t.cumsum(a, 0)


class _Cupy:
    name = "cupy"

    def __init__(self, device: int) -> None:
        import cupy

        self.cp = cupy
        self.dev = cupy.cuda.Device(device)
        self.int64, self.int32, self.float32, self.bool = cupy.int64, cupy.int32, cupy.float32, cupy.bool_

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        with self.dev:
            return self.cp.empty(shape, dtype=dtype)

    def full(self, shape: tuple[int, ...], value: Any, dtype: Any) -> Any:
        with self.dev:
            return self.cp.full(shape, value, dtype=dtype)

    def asarray(self, a: np.ndarray) -> Any:
        with self.dev:
            return self.cp.asarray(a)

    def stream(self) -> int:
        return int(self.cp.cuda.get_current_stream().ptr)

    def sync(self) -> None:
        self.cp.cuda.get_current_stream().synchronize()

    def states(self, n: int) -> tuple[Any, Any]:
        with self.dev:
            return self.cp.empty((n,), dtype=self.int64), self.cp.empty((n,), dtype=self.int64)

    def cumsum(self, a: Any) -> Any:
        return self.cp.cumsum(a)


_I64, _I64_I32 = (np.dtype(np.int64),), (np.dtype(np.int64), np.dtype(np.int32))
_F32, _BOOL = (np.dtype(np.float32),), (np.dtype(np.bool_), np.dtype(np.uint8))


class _View:
    """Pointer, shape, strides (in items) and dtype of a device array."""

    __slots__ = ("ptr", "shape", "strides", "dtype", "obj")

    def __init__(self, ptr: int, shape: tuple[int, ...], strides: tuple[int, ...], dtype: np.dtype, obj: Any):
        self.ptr, self.shape, self.strides, self.dtype, self.obj = ptr, shape, strides, dtype, obj


_TORCH_DTYPE_CACHE: dict[Any, np.dtype | None] = {}


def _torch_dtype(dtype: Any) -> np.dtype | None:
    """The numpy dtype of a torch dtype (kept by dtype object: a decode loop asks every call)."""
    if dtype not in _TORCH_DTYPE_CACHE:
        _TORCH_DTYPE_CACHE[dtype] = _TORCH_DTYPES.get(str(dtype))
    return _TORCH_DTYPE_CACHE[dtype]


_TORCH_DTYPES: dict[str, np.dtype] = {"torch.int64": np.dtype(np.int64), "torch.int32": np.dtype(np.int32),
                                      "torch.float32": np.dtype(np.float32), "torch.bool": np.dtype(np.bool_),
                                      "torch.uint8": np.dtype(np.uint8)}


class GpuTrieStepper:
    """The stepwise API on an NVIDIA GPU (see the module docstring)."""

    backend = "gpu"

    def __init__(self, index: NarrowLoudsIndex, device: int = 0, *, array_module: str | None = None,
                 searcher: Any = None, chunk: int = CHUNK, child_table: int = CHILD_TABLE,
                 root_table: int = ROOT_TABLE, defines: dict[str, str] | None = None) -> None:
        """Compile (or load) kernels/step.cu and upload ``index`` once, or share the device index of
        ``searcher`` (a `GpuSearcher` of the same index).  ``array_module``: "torch" or "cupy" (default:
        torch when it is installed).  ``chunk``: vocabulary entries per mask chunk (a power of two in
        [1024, 65536]; results do not depend on it).  ``child_table``: the child ranges of the first
        ``min(child_table, num_nodes)`` nodes are tabulated on the device once (8 bytes a node; a kernel at
        construction), so a state at one of them finds its children in one load (0: none; results do not
        depend on it).  ``root_table``: the root's children with labels below ``min(root_table, largest root
        label + 1)`` are tabulated by label with their decoded states (32 bytes a label; a kernel at
        construction), so a row at the root takes one load to its next state (0: none; results do not depend on
        it).  ``defines``: kernels/step.cu's tuning macros (`DEFINES`: FT_STEP_THREADS, threads per
        block, a multiple of 32 in [64, 512]; FT_STEP_TRACE, for gpu_impl/scripts/step_probe.py only: its
        advance_mask takes a trace buffer, so this stepper refuses advance_mask); results do not depend on
        them.  `blocks_per_row` (attribute; None: 4 blocks per SM in all, rows in equal parts, some rows one part
        more: `_mask_grid`) sets how many blocks share each row, at most one per chunk."""
        if isinstance(chunk, bool) or not isinstance(chunk, int) or not 1024 <= chunk <= 65536 or chunk & (chunk - 1):
            raise InputError(f"chunk: expected a power of two in [1024, 65536], got {chunk!r}")
        for name, val in (("child_table", child_table), ("root_table", root_table)):
            if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 0:
                raise InputError(f"{name}: expected a non-negative integer, got {val!r}")
        defines = _check_defines(defines)
        #: compiled with FT_STEP_TRACE: advance_mask takes a trace buffer (gpu_impl/scripts/step_probe.py only)
        self._tracing = "FT_STEP_TRACE" in defines
        self.chunk = chunk
        try:
            from cuda.core import ObjectCode
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise DeviceError(f"the GPU backend needs cuda-core (pip install 'flashtrie[gpu]'): {e}") from e
        self._cpu = TrieStepper(index)  # host-side checks (EOS, vocabulary) and forced prefixes
        self.index = index
        if searcher is not None and getattr(searcher, "index", None) is not index:
            raise InputError("searcher: expected a GpuSearcher of the same index")
        self.xp = _array_module(array_module, device)
        #: the device, its arch, and the stream the index is uploaded on (the kernels run on the caller's)
        self.ctx = GpuContext(device)
        self.device, self.arch = self.ctx.device, self.ctx.arch
        macros = {"FT_STEP_THREADS": str(THREADS), "FT_STEP_CHUNK": str(chunk), **defines}
        self.threads = int(macros["FT_STEP_THREADS"])
        ck = compile_kernel("step.cu", self.arch, macros)
        self._obj = ObjectCode.from_cubin(ck.cubin)
        self._k = {name: self._obj.get_kernel(f"ft_step_{name}") for name in
                   ("advance", "walk", "mask", "advance_mask", "walk_mask", "count", "fill", "child_table",
                    "root_table")}
        #: blocks per row of a mask (None: ``_target_blocks`` (4 per SM) in all); results do not depend on it
        self.blocks_per_row: int | None = None
        self._target_blocks = 4 * _sm_count(self.device)
        #: how mask kernels find the children of a state's node past the child table: "select" (one thread:
        #: select0, then the next zero; the faster on the H200, 2026-12-01) or "block" (a block-wide search of
        #: its LOUDS zeros over rank1); same results
        self.child_search = "select"
        self._searcher = searcher
        if searcher is not None:
            self._view_ptr = int(searcher._index_ptr)
            self.upload_stats = None  # no upload of its own: the searcher's index is shared
        else:
            self._upload_index()
        self._dead = self.xp.full((1,), 0, self.xp.int64)
        self._eos_dev: dict[tuple[int, ...], Any] = {}
        self._eos_by_arg: dict[Any, tuple[tuple[int, ...], Any]] = {}
        self._vocab_ok: set[int] = set()
        self._streams: dict[int, Any] = {}
        self._configs: dict[tuple[int, int], Any] = {}
        self._view_arg = np.uint64(self._view_ptr)
        from cuda.core import launch

        self._launch_fn = launch
        self._mask_cache: dict[tuple, tuple[int, list]] = {}
        self._build_child_table(min(int(child_table), int(index.num_nodes)))
        self._build_root_table(int(root_table))

    @classmethod
    def from_searcher(cls, searcher: Any, *, array_module: str | None = None, chunk: int = CHUNK,
                      child_table: int = CHILD_TABLE, root_table: int = ROOT_TABLE) -> GpuTrieStepper:
        """A stepper that shares ``searcher``'s uploaded index (no second copy on the device)."""
        return cls(searcher.index, searcher.device.device_id, array_module=array_module, searcher=searcher,
                   chunk=chunk, child_table=child_table, root_table=root_table)

    # ------------------------------------------------------------------ index upload (index_upload.py's)
    def _upload_index(self) -> None:
        host = host_index(self.index)
        try:
            self._device_index = upload_host_index(self.ctx, host)
        except DeviceError:
            raise
        except Exception as e:
            raise DeviceError(f"cannot upload the index ({host.layout().total:,} bytes) to the device: {e}") from e
        self._view_ptr = int(self._device_index.view.handle)
        self.index_bytes = self._device_index.nbytes
        self.upload_stats = self._device_index.stats

    def _build_child_table(self, n: int) -> None:
        """``child_table`` entries 0..n on the device (kernels/step.cu ft_step_child_table), once, synchronised
        (the table must be complete before a kernel on another stream reads it)."""
        #: nodes whose child range the table holds (every node below it)
        self.child_table = n
        self._child_table = self.xp.full((n + 1,), 0, self.xp.int64)
        self._tab_args = (np.uint64(_ptr(self._child_table)), np.uint32(0), np.uint64(0), np.uint32(0))
        if n:
            self._launch("child_table", -(-(n + 1) // self.threads), np.uint32(n), np.uint64(_ptr(self._child_table)),
                         tab=False)
            self.xp.sync()
            self._tab_args = (np.uint64(_ptr(self._child_table)), np.uint32(n), np.uint64(0), np.uint32(0))

    def _build_root_table(self, cap: int) -> None:
        """The root table (kernels/step.cu RootKid, 8 uint32 a label) of root labels below ``cap`` and the
        largest root label + 1, on the device, once, synchronised; after the child table, which it reads."""
        first, end = (int(v[0]) for v in self.index.child_range(np.zeros(1, np.int64)))
        n = 0
        if cap and end > first:
            n = min(cap, int(self.index.labels(np.array([end - 1], np.int64))[0]) + 1)
        #: root labels the root table covers (0: none)
        self.root_table = n
        self._root_table = self.xp.full((max(n, 1), 8), 0, self.xp.int32)
        fc, fc_n = self._tab_args[:2]
        self._tab_args = (fc, fc_n, np.uint64(0), np.uint32(0))
        if n:
            self._launch("root_table", -(-(end - first) // self.threads), fc, fc_n, np.uint32(n),
                         np.uint64(_ptr(self._root_table)), tab=False)
            self.xp.sync()
            self._tab_args = (fc, fc_n, np.uint64(_ptr(self._root_table)), np.uint32(n))

    # ------------------------------------------------------------------ plumbing
    def _launch(self, name: str, blocks: int, *args: Any, tab: bool = True) -> None:
        """Launch ``ft_step_<name>`` on the caller's current stream: the view, the child table (``tab``), args."""
        h = self.xp.stream()
        s = self._streams.get(h)
        if s is None:
            s = self._streams[h] = _stream(h)
        cfg = self._configs.get(blocks)
        if cfg is None:
            from cuda.core import LaunchConfig

            cfg = self._configs[blocks] = LaunchConfig(grid=blocks, block=self.threads)
        if tab:
            self._launch_fn(s, cfg, self._k[name], self._view_arg, *self._tab_args, *args)
        else:
            self._launch_fn(s, cfg, self._k[name], self._view_arg, *args)

    def _view(self, obj: Any, name: str, ndim: int, dtypes: Sequence[Any]) -> _View:
        """A device array's pointer and layout (torch fast path; else DLPack / CUDA Array Interface)."""
        if type(obj).__module__.startswith("torch"):
            dt = _torch_dtype(obj.dtype)
            if not obj.is_cuda:
                raise InputError(f"{name}: expected a CUDA tensor, got one on {obj.device}")
            v = _View(obj.data_ptr(), tuple(obj.shape), obj.stride(), dt, obj)
        else:  # -1: no stream ordering to set up, the kernels run on the array library's current stream
            m = memory_view(name, obj, -1)
            shape = tuple(int(s) for s in m.shape)
            strides = tuple(int(s) for s in m.strides) if m.strides is not None else _c_strides(shape)
            v = _View(int(m.ptr), shape, strides, np.dtype(m.dtype), (obj, m))
        if len(v.shape) != ndim:
            raise InputError(f"{name}: expected {ndim} dimension(s), got shape {list(v.shape)}")
        if v.dtype not in dtypes:
            want = [np.dtype(d) for d in dtypes]
            raise InputError(f"{name}: expected dtype {' or '.join(d.name for d in want)}, got {v.dtype}")
        return v

    def _states(self, states: StepStates) -> tuple[_View, _View, int]:
        if not isinstance(states, StepStates):
            raise InputError(f"states: expected StepStates, got {type(states).__name__}")
        a = self._view(states.node, "states.node", 1, _I64)
        b = self._view(states.off, "states.off", 1, _I64)
        if a.shape != b.shape:
            raise InputError(f"states: node and off differ in length ({a.shape[0]}, {b.shape[0]})")
        for v, nm in ((a, "node"), (b, "off")):
            if v.shape[0] > 1 and v.strides[0] != 1:
                raise InputError(f"states.{nm}: expected a contiguous array")
        if a.shape[0] >= 2**31:
            raise InputError(f"states: {a.shape[0]} states is over the launch limit 2**31 - 1 (one block each)")
        return a, b, int(a.shape[0])

    def _eos(self, eos_token_id: Any) -> tuple[tuple[int, ...], Any]:
        key = eos_token_id if isinstance(eos_token_id, (int, tuple)) and not isinstance(eos_token_id, bool) else None
        hit = self._eos_by_arg.get(key) if key is not None else None
        if hit is not None:
            return hit
        eos = self._cpu._eos(eos_token_id)
        dev = self._eos_dev.get(eos)
        if dev is None:
            dev = self._eos_dev[eos] = self.xp.asarray(np.array(list(eos) + [0] * (_MAX_EOS - len(eos)),
                                                                dtype=np.int64))
        if key is not None:
            self._eos_by_arg[key] = (eos, dev)
        return eos, dev

    def _new_states(self, n: int) -> StepStates:
        return StepStates(*self.xp.states(n))

    # ------------------------------------------------------------------ the API
    def start(self, n: int) -> StepStates:
        """``n`` states at the root."""
        self._cpu.start(n)  # validates n
        return StepStates(self.xp.full((int(n),), 0, self.xp.int64), self.xp.full((int(n),), 0, self.xp.int64))

    def start_from_prefixes(self, prefixes: Sequence[Sequence[int]]) -> StepStates:
        """One state per forced prefix, walked on the host and uploaded (not a per-step call)."""
        st = self._cpu.start_from_prefixes(prefixes)
        return StepStates(self.xp.asarray(st.node), self.xp.asarray(st.off))

    def _walk_args(self, ids: Any, begin: Any, end: Any) -> tuple[_View, int, list]:
        """The ids view, the row count and the kernel arguments of the ids and their column bounds."""
        v = self._view(ids, "ids", 2, _I64)
        n, width = v.shape
        if width > 1 and v.strides[1] != 1:
            raise InputError("ids: expected contiguous rows (column stride 1)")
        bounds = []
        for val, default, nm in ((begin, 0, "begin"), (end, width, "end")):
            if val is None or isinstance(val, (int, np.integer)):
                x = default if val is None else int(val)
                if not 0 <= x <= width:
                    raise InputError(f"{nm}: {x} is outside [0, {width}]")
                bounds += [np.uint64(0), np.int64(x)]
            else:
                bv = self._view(val, nm, 1, _I64)
                if bv.shape != (n,) or (n > 1 and bv.strides[0] != 1):
                    raise InputError(f"{nm}: expected a contiguous int64 array of {n} values")
                bounds += [np.uint64(bv.ptr), np.int64(0)]
        return v, n, [np.uint64(v.ptr), np.uint64(v.strides[0] if n > 1 else width), np.uint64(width), np.uint32(n),
                      *bounds]

    def walk(self, ids: Any, begin: Any = None, end: Any = None, eos_token_id: Any = None) -> StepStates:
        """States after ``ids[r, begin[r]:end[r]]`` from the root (``ids``: int64 ``[n, L]``, rows may be
        strided; ``begin`` / ``end``: None, an int (checked), or an int64 device array ``[n]`` whose values must
        lie in [0, L]: device values are not checked on the host, which would need a synchronisation; a row with
        a bound outside [0, L] comes back DEAD, where numpy refuses it)."""
        _, n, args = self._walk_args(ids, begin, end)
        eos, eos_dev = self._eos(eos_token_id)
        out = self._new_states(n)
        if n:
            self._launch("walk", n, *args, np.uint64(_ptr(eos_dev)), np.uint32(len(eos)),
                         np.uint64(_ptr(out.node)), np.uint64(_ptr(out.off)))
        return out

    def walk_mask(self, ids: Any, vocab_size: int, eos_token_id: Any, begin: Any = None, end: Any = None,
                  out: Any = None, additive: bool = True) -> Any:
        """`mask` of the states `walk` gives, in one launch (each row walked block-wide; no states kept)."""
        _, n, wargs = self._walk_args(ids, begin, end)
        out, blocks, args = self._mask_args(n, vocab_size, eos_token_id, out, additive)
        if n:
            self._launch("walk_mask", blocks, *wargs, *args)
        return out

    def advance(self, states: StepStates, tokens: Any, eos_token_id: Any = None) -> StepStates:
        """Each state after its token (int64 or int32 ``[n]``, any stride), as `TrieStepper.advance`."""
        a, b, n = self._states(states)
        t = self._view(tokens, "tokens", 1, _I64_I32)
        if t.shape != (n,):
            raise InputError(f"tokens: expected {n} tokens, got shape {list(t.shape)}")
        eos, eos_dev = self._eos(eos_token_id)
        out = self._new_states(n)
        if n:
            self._launch("advance", n, np.uint64(a.ptr), np.uint64(b.ptr), np.uint64(t.ptr),
                         np.uint32(t.dtype == np.int64), np.uint64(t.strides[0]), np.uint32(n),
                         np.uint64(_ptr(eos_dev)), np.uint32(len(eos)), np.uint64(_ptr(out.node)),
                         np.uint64(_ptr(out.off)))
        return out

    def _count(self, states: StepStates, want_counts: bool, want_ends: bool) -> tuple[Any, Any]:
        a, b, n = self._states(states)
        counts = self.xp.empty((n,), self.xp.int64) if want_counts else None
        ends = self.xp.empty((n,), self.xp.bool) if want_ends else None
        if n:
            self._launch("count", -(-n // self.threads), np.uint64(a.ptr), np.uint64(b.ptr), np.uint32(n),
                         np.uint64(_ptr(counts) if counts is not None else 0),
                         np.uint64(_ptr(ends) if ends is not None else 0))
        return counts, ends

    def ends(self, states: StepStates) -> Any:
        """True where a keyword ends at the state (bool device array)."""
        return self._count(states, False, True)[1]

    def allowed_padded(self, states: StepStates, max_per_state: int) -> tuple[Any, Any]:
        """``counts`` int64[n] and ``tokens`` int64[n, max_per_state] (ascending, then -1), as numpy's."""
        if isinstance(max_per_state, bool) or not isinstance(max_per_state, (int, np.integer)) or max_per_state < 0:
            raise InputError(f"max_per_state: expected a non-negative integer, got {max_per_state!r}")
        a, b, n = self._states(states)
        counts, _ = self._count(states, True, False)
        tokens = self.xp.full((n, int(max_per_state)), -1, self.xp.int64)
        if n and max_per_state:
            self._launch("fill", n, np.uint64(a.ptr), np.uint64(b.ptr), np.uint32(n), np.uint64(0),
                         np.uint64(max_per_state), np.uint64(_ptr(tokens)))
        return counts, tokens

    def allowed(self, states: StepStates) -> tuple[Any, Any]:
        """CSR ``offsets`` int64[n + 1] and ``tokens`` int64 (ascending per state): counts, a device prefix
        sum, one synchronisation to read the total, then the fill."""
        a, b, n = self._states(states)
        counts, _ = self._count(states, True, False)
        offsets = self.xp.full((n + 1,), 0, self.xp.int64)
        if n:
            offsets[1:] = self.xp.cumsum(counts)
        total = int(offsets[n].item()) if n else 0
        tokens = self.xp.empty((total,), self.xp.int64)
        if total:
            self._launch("fill", n, np.uint64(a.ptr), np.uint64(b.ptr), np.uint32(n), np.uint64(_ptr(offsets)),
                         np.uint64(0), np.uint64(_ptr(tokens)))
        return offsets, tokens

    def _mask_args(self, n: int, vocab_size: int, eos_token_id: Any, out: Any, additive: bool) -> tuple[Any, int, list]:
        """Checks, the output array, the number of blocks and the kernel arguments after the states (kept
        per output array, EOS and settings: a decode loop reuses them)."""
        eos, eos_dev = self._eos(eos_token_id)
        if not eos:
            raise InputError("eos_token_id: a mask needs an EOS token id")
        if vocab_size not in self._vocab_ok:
            check_vocab(self.index, vocab_size)
            self._vocab_ok.add(int(vocab_size))
        if max(eos) >= vocab_size:
            raise InputError(f"eos_token_id: {max(eos)} is not below vocab_size {vocab_size}")
        v = int(vocab_size)
        if out is None:
            out = self.xp.full((n, v), 0, self.xp.float32) if additive else self.xp.empty((n, v), self.xp.bool)
        o = self._view(out, "out", 2, _F32 if additive else _BOOL)
        flags = 1 if self.child_search == "block" else 0
        key = (n, v, eos, o.ptr, o.shape, o.strides, o.dtype, additive, flags, self.blocks_per_row)
        hit = self._mask_cache.get(key)
        if hit is not None:
            return out, hit[0], hit[1]
        if o.shape != (n, v):
            raise InputError(f"out: expected shape {[n, v]}, got {list(o.shape)}")
        if v > 1 and o.strides[1] != 1:
            raise InputError("out: expected contiguous rows (column stride 1)")
        parts, extra = self._mask_grid(n, v, additive)
        blocks = n * parts + extra
        if blocks >= 2**31:
            raise InputError(f"states: {n} rows x {parts} blocks per row is over the launch limit 2**31")
        fp, bp = (o.ptr, 0) if additive else (0, o.ptr)
        args = [np.uint64(v), np.uint32(parts), np.uint32(extra), np.uint64(_ptr(eos_dev)), np.uint32(len(eos)),
                np.uint64(fp), np.uint64(bp), np.uint64(o.strides[0] if n > 1 else v), np.uint64(_ptr(self._dead)),
                np.uint32(flags)]
        if len(self._mask_cache) > 64:
            self._mask_cache.clear()
        self._mask_cache[key] = (blocks, args)
        return out, blocks, args

    def _mask_grid(self, n: int, v: int, additive: bool) -> tuple[int, int]:
        """Blocks per row of a mask launch: (parts, extra), the first ``extra`` rows in parts + 1 blocks and the
        others in ``parts`` (kernels/step.cu mask_row).  By default the grid is a multiple of ``_target_blocks``
        (4 per SM: every SM gets as many bytes to store; 420 blocks for 140 rows on 132 SMs stored 18.4 MB
        0.76 us slower than 396 or 528, H200 2026-12-02) with at least one block a row, and at most one block
        per CHUNK entries of a row (a row starts up to 3 float32 or 15 bool entries into its first chunk)."""
        chunks = -(-(v + (3 if additive else 15)) // self.chunk)
        if self.blocks_per_row:
            return min(int(self.blocks_per_row), chunks), 0
        t = self._target_blocks
        parts, extra = divmod(t * max(1, -(-n // t)), max(n, 1))
        if parts + (extra > 0) > chunks:
            return chunks, 0
        return parts, extra

    def mask(self, states: StepStates, vocab_size: int, eos_token_id: Any, out: Any = None,
             additive: bool = True) -> Any:
        """-inf stored in place over the disallowed entries of float32 logits ``out[n, vocab_size]`` (a new
        zero array when None; allowed entries keep their bits: at a node of at most 1,024 children they are read
        and stored back), or a bool mask (True: allowed)
        written to ``out``; as `TrieStepper.mask`.  Dead rows add to `dead_count` on the device."""
        a, b, n = self._states(states)
        out, blocks, args = self._mask_args(n, vocab_size, eos_token_id, out, additive)
        if n:
            self._launch("mask", blocks, np.uint64(a.ptr), np.uint64(b.ptr), np.uint32(n), *args)
        return out

    def advance_mask(self, states: StepStates, tokens: Any, vocab_size: int, eos_token_id: Any, out: Any = None,
                     additive: bool = True) -> tuple[StepStates, Any]:
        """`advance`, then `mask` of the new states, in one launch: ``(new_states, out)``."""
        if self._tracing:
            raise InputError("defines: a stepper compiled with FT_STEP_TRACE has no advance_mask (its kernel takes a "
                             "trace buffer: gpu_impl/scripts/step_probe.py launches it)")
        a, b, n = self._states(states)
        t = self._view(tokens, "tokens", 1, _I64_I32)
        if t.shape != (n,):
            raise InputError(f"tokens: expected {n} tokens, got shape {list(t.shape)}")
        out, blocks, args = self._mask_args(n, vocab_size, eos_token_id, out, additive)
        new = self._new_states(n)
        if n:
            self._launch("advance_mask", blocks, np.uint64(a.ptr), np.uint64(b.ptr), np.uint64(t.ptr),
                         np.uint32(t.dtype == np.int64), np.uint64(t.strides[0]), np.uint32(n), *args,
                         np.uint64(_ptr(new.node)), np.uint64(_ptr(new.off)))
        return new, out

    @property
    def dead_count(self) -> int:
        """Dead rows seen by `mask` so far (reads the device counter: synchronises)."""
        return int(self._dead[0].item())

    def reset_dead_count(self) -> None:
        self._dead[0] = 0


#: the macros of kernels/step.cu a caller may set (`GpuTrieStepper(defines=...)`); FT_STEP_CHUNK comes from `chunk`
DEFINES = ("FT_STEP_THREADS", "FT_STEP_TRACE")


def _check_defines(defines: dict[str, Any] | None) -> dict[str, str]:
    """``defines`` as macro strings, refused where the host's launches would not match the kernels."""
    if defines is None:
        return {}
    if not isinstance(defines, dict):
        raise InputError(f"defines: expected a dict of macro names to values, got {type(defines).__name__}")
    out = {str(k): str(v) for k, v in defines.items()}
    if "FT_STEP_CHUNK" in out:
        raise InputError("defines: FT_STEP_CHUNK is set through chunk=..., which the host's chunking follows")
    unknown = sorted(set(out) - set(DEFINES))
    if unknown:
        raise InputError(f"defines: unknown macro(s) {unknown}; kernels/step.cu reads {list(DEFINES)}")
    t = out.get("FT_STEP_THREADS")
    if t is not None and not (t.isdigit() and 64 <= int(t) <= 512 and int(t) % 32 == 0):
        raise InputError(f"defines: FT_STEP_THREADS must be a multiple of 32 in [64, 512], got {t!r}")
    return out


def _array_module(name: str | None, device: int) -> _Torch | _Cupy:
    if name not in (None, "torch", "cupy"):
        raise InputError(f"array_module: expected 'torch' or 'cupy', got {name!r}")
    if name in (None, "torch"):
        try:
            return _Torch(device)
        except ImportError:
            if name == "torch":
                raise DeviceError("array_module 'torch' needs PyTorch (pip install 'flashtrie[hf]')") from None
    try:
        return _Cupy(device)
    except ImportError:
        raise DeviceError("the GPU stepper needs PyTorch or CuPy for its arrays") from None


def _sm_count(device: Any) -> int:
    try:
        return int(device.properties.multiprocessor_count)
    except Exception:  # noqa: BLE001 - an older cuda.core: the H200's count
        return 132


def _stream(handle: int) -> Any:
    """A cuda.core stream for a raw handle (0 and 2: the legacy and per-thread default streams)."""
    import cuda.core as cc

    if handle == 0:
        return cc.LEGACY_DEFAULT_STREAM
    if handle == 2:
        return cc.PER_THREAD_DEFAULT_STREAM
    return cc.Stream.from_handle(handle)


def _ptr(a: Any) -> int:
    if hasattr(a, "data_ptr"):
        return int(a.data_ptr())
    return int(a.data.ptr)


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))
