"""`GpuTrieStepper`: the stepwise API of `flashtrie.stepwise` on the GPU (kernels in kernels/step.cu).

Same methods and the same results as `flashtrie.stepwise.TrieStepper` (numpy), on device arrays:
states (`StepStates` of two int64 device arrays), tokens, logits and masks are PyTorch tensors or CuPy
arrays (``array_module``; inputs may be anything DLPack / CUDA Array Interface can read).  Every kernel is
launched on the caller's current stream (torch: ``torch.cuda.current_stream()``; CuPy: its current
stream) or on the `stream` attribute (any object of the ``__cuda_stream__`` protocol), and `advance`,
`walk`, `ends`, `mask` and `allowed_padded` neither copy to the host nor synchronise, so a decode loop (or
a CUDA graph capture) can call them every step.  `allowed` (CSR) needs its size: it synchronises once to
read it.  `dead_count` reads a device counter (synchronises).

The additive mask stores -inf over the disallowed entries; the allowed ones keep their bits (numpy gives the
same bits): at a node of at most 1,024 children they are read, the whole row part is stored as -inf, and they
are stored back; elsewhere they are neither read nor written.  A mask (or an advance_mask) must not run while
another kernel writes the same logits.

Differences from numpy: tokens come back as int64 (numpy: uint32 for CSR), and a state that is not valid
for the index reads as DEAD here, where numpy refuses it with `InputError` (validating device input would
need a synchronisation).  The EOS and vocabulary checks run on the host once per (vocab_size, EOS).

The parts: `step_options` (construction options), `step_arrays` (device arrays and their checks),
`step_launch` (kernel parameters, mask grid, launches).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from flashtrie.errors import DeviceError, InputError
from flashtrie.index import NarrowLoudsIndex
from flashtrie.stepwise import _MAX_EOS, Stepper, StepStates, TrieStepper, check_vocab

from .context import GpuContext
from .index_upload import UploadStats, host_index, upload_host_index
from .launch import Launcher, load_kernels
from .step_arrays import BOOL, F32, I64, I64_I32, DeviceView, device_view, ptr, state_views, stream_handle
from .step_arrays import array_module as _array_module
from .step_launch import MASK, ROWS, TABLES, head, mask_grid, sm_count
from .step_options import CHILD_TABLE, CHUNK, ROOT_TABLE, THREADS, check_defines, check_options

__all__ = ["GpuTrieStepper", "CHUNK", "CHILD_TABLE", "ROOT_TABLE"]

KERNELS = ("advance", "walk", "mask", "advance_mask", "walk_mask", "count", "fill", "child_table", "root_table")


class GpuTrieStepper(Stepper):
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
        it).  ``defines``: kernels/step.cu's tuning macros (`step_options.DEFINES`: FT_STEP_THREADS, threads
        per block, a multiple of 32 in [64, 512]); results do not depend on them.  `blocks_per_row`
        (attribute; None: 4 blocks per SM in all, rows in equal parts, some rows one part more: `mask_grid`)
        sets how many blocks share each row, at most one per chunk."""
        check_options(chunk, child_table, root_table)
        defines = check_defines(defines)
        if searcher is not None and getattr(searcher, "index", None) is not index:
            raise InputError("searcher: expected a GpuSearcher of the same index")
        self.index, self.chunk = index, chunk
        self._cpu = TrieStepper(index)  # host-side checks (EOS, vocabulary) and forced prefixes
        self.xp = _array_module(array_module, device)
        #: the device, its arch, and the stream the index is uploaded on (the kernels run on the caller's)
        self.ctx = GpuContext(device)
        self.device, self.arch = self.ctx.device, self.ctx.arch
        self._load_kernels({"FT_STEP_THREADS": str(THREADS), "FT_STEP_CHUNK": str(chunk), **defines})
        self._searcher = searcher
        if searcher is not None:
            self._view_ptr = int(searcher.index_address)
            self.upload_stats: UploadStats | None = None  # no upload of its own: the searcher's index is shared
        else:
            self._upload_index()
        self._init_calls()
        self._build_child_table(min(int(child_table), int(index.num_nodes)))
        self._build_root_table(int(root_table))

    @classmethod
    def from_searcher(cls, searcher: Any, *, array_module: str | None = None, chunk: int = CHUNK,
                      child_table: int = CHILD_TABLE, root_table: int = ROOT_TABLE) -> GpuTrieStepper:
        """A stepper that shares ``searcher``'s uploaded index (no second copy on the device)."""
        return cls(searcher.index, searcher.device.device_id, array_module=array_module, searcher=searcher,
                   chunk=chunk, child_table=child_table, root_table=root_table)

    # ------------------------------------------------------------------ construction
    def _load_kernels(self, macros: dict[str, str]) -> None:
        """Compile (or load from the cache) kernels/step.cu with ``macros`` and get its kernels."""
        self.threads = int(macros["FT_STEP_THREADS"])
        loaded = load_kernels("step.cu", self.arch, macros, self.device.device_id)
        self._k = {name: loaded[f"ft_step_{name}"] for name in KERNELS}
        #: the launch (`Launcher.launch`): stream handle, entry point, blocks, threads, parameters
        self._launch_fn = Launcher(loaded).launch

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

    def _init_calls(self) -> None:
        """What the calls keep between them: the dead-row counter, EOS arrays, checked vocabularies, masks."""
        #: blocks per row of a mask (None: ``_target_blocks`` (4 per SM) in all); results do not depend on it
        self.blocks_per_row: int | None = None
        self._target_blocks = 4 * sm_count(self.device)
        #: the stream every call launches on: None, the caller's current stream (``torch.cuda.current_stream()``
        #: or CuPy's); else a stream object of the CUDA stream protocol (``__cuda_stream__``)
        self.stream: Any = None
        #: how mask kernels find the children of a state's node past the child table: "select" (one thread:
        #: select0, then the next zero; the faster on the H200) or "block" (a block-wide search of its LOUDS
        #: zeros over rank1); same results
        self.child_search = "select"
        self._dead = self.xp.full((1,), 0, self.xp.int64)
        self._eos_dev: dict[tuple[int, ...], Any] = {}
        self._eos_by_arg: dict[Any, tuple[tuple[int, ...], Any]] = {}
        self._vocab_ok: set[int] = set()
        self._mask_cache: dict[tuple, tuple[int, bytes]] = {}

    def _set_tables(self, fc: int, rt: int, fc_n: int, rt_n: int) -> None:
        """The tables every launch passes after the view (kernels/step_params.cuh Tab)."""
        #: the child table's address, the root table's, the nodes and the root labels they cover
        self._tables = (fc, rt, fc_n, rt_n)
        self._head = head(self._view_ptr, TABLES(fc=fc, rt=rt, fc_n=fc_n, rt_n=rt_n))

    def _build_child_table(self, n: int) -> None:
        """``child_table`` entries 0..n on the device (kernels/step.cu ft_step_child_table), once, synchronised
        (the table must be complete before a kernel on another stream reads it)."""
        #: nodes whose child range the table holds (every node below it)
        self.child_table = n
        self._child_table = self.xp.full((n + 1,), 0, self.xp.int64)
        self._set_tables(ptr(self._child_table), 0, 0, 0)
        if n:
            self._launch("child_table", -(-(n + 1) // self.threads), ROWS["table"](table=ptr(self._child_table), n=n))
            self.xp.sync()
            self._set_tables(ptr(self._child_table), 0, n, 0)

    def _build_root_table(self, cap: int) -> None:
        """The root table (kernels/step_params.cuh RootKid, 8 uint32 a label) of root labels below ``cap`` and
        the largest root label + 1, on the device, once, synchronised; after the child table, which it reads."""
        first, end = (int(v[0]) for v in self.index.child_range(np.zeros(1, np.int64)))
        n = 0
        if cap and end > first:
            n = min(cap, int(self.index.labels(np.array([end - 1], np.int64))[0]) + 1)
        #: root labels the root table covers (0: none)
        self.root_table = n
        self._root_table = self.xp.full((max(n, 1), 8), 0, self.xp.int32)
        fc, _, fc_n, _ = self._tables
        self._set_tables(fc, 0, fc_n, 0)
        if n:
            self._launch("root_table", -(-(end - first) // self.threads),
                         ROWS["table"](table=ptr(self._root_table), n=n))
            self.xp.sync()
            self._set_tables(fc, ptr(self._root_table), fc_n, n)

    # ------------------------------------------------------------------ plumbing
    def _launch(self, name: str, blocks: int, rows: bytes, mask: bytes = b"") -> None:
        """Launch ``ft_step_<name>`` on the caller's current stream: the view and tables, ``rows``, ``mask``."""
        stream = self.xp.stream() if self.stream is None else stream_handle(self.stream)
        self._launch_fn(stream, "ft_step_" + name, blocks, self.threads, self._head + rows + mask)

    def _eos(self, eos_token_id: Any) -> tuple[tuple[int, ...], Any]:
        """The EOS ids (checked once per argument) and their device array (8 int64, zero-padded)."""
        key = eos_token_id if isinstance(eos_token_id, (int, tuple)) and not isinstance(eos_token_id, bool) else None
        hit = self._eos_by_arg.get(key) if key is not None else None
        if hit is not None:
            return hit
        eos = self._cpu.checked_eos(eos_token_id)
        dev = self._eos_dev.get(eos)
        if dev is None:
            dev = self._eos_dev[eos] = self.xp.asarray(np.array(list(eos) + [0] * (_MAX_EOS - len(eos)),
                                                                dtype=np.int64))
        if key is not None:
            self._eos_by_arg[key] = (eos, dev)
        return eos, dev

    def checked_eos(self, eos_token_id: Any) -> tuple[int, ...]:
        """The EOS ids as a tuple, refused where one is a token of the trie (as `TrieStepper.checked_eos`)."""
        return self._eos(eos_token_id)[0]

    @property
    def index_address(self) -> int:
        """The device address of the uploaded index (its view): another stepper can share it (``searcher=``)."""
        return self._view_ptr

    def _new_states(self, n: int) -> StepStates:
        return StepStates(*self.xp.states(n))

    def _tokens(self, tokens: Any, n: int) -> DeviceView:
        t = device_view(tokens, "tokens", 1, I64_I32)
        if t.shape != (n,):
            raise InputError(f"tokens: expected {n} tokens, got shape {list(t.shape)}")
        return t

    def _walk_rows(self, ids: Any, begin: Any, end: Any) -> tuple[int, dict[str, int]]:
        """The row count and the walk fields of the rows (ids, begin, end, ids_stride, width, begin_all,
        end_all)."""
        v = device_view(ids, "ids", 2, I64)
        n, width = v.shape
        if width > 1 and v.strides[1] != 1:
            raise InputError("ids: expected contiguous rows (column stride 1)")
        ptrs, alls = [], []
        for val, default, nm in ((begin, 0, "begin"), (end, width, "end")):
            if val is None or isinstance(val, (int, np.integer)):
                x = default if val is None else int(val)
                if not 0 <= x <= width:
                    raise InputError(f"{nm}: {x} is outside [0, {width}]")
                ptrs.append(0)
                alls.append(x)
            else:
                bv = device_view(val, nm, 1, I64)
                if bv.shape != (n,) or (n > 1 and bv.strides[0] != 1):
                    raise InputError(f"{nm}: expected a contiguous int64 array of {n} values")
                ptrs.append(bv.ptr)
                alls.append(0)
        return n, {"ids": v.ptr, "begin": ptrs[0], "end": ptrs[1], "ids_stride": v.strides[0] if n > 1 else width,
                   "width": width, "begin_all": alls[0], "end_all": alls[1]}

    def _mask_args(self, n: int, vocab_size: int, eos: tuple[int, ...], out: Any,
                   additive: bool) -> tuple[Any, int, bytes]:
        """Checks, the output array, the number of blocks and the packed mask (kept per output array, EOS and
        settings: a decode loop reuses them)."""
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
        o = device_view(out, "out", 2, F32 if additive else BOOL)
        flags = 1 if self.child_search == "block" else 0
        key = (n, v, eos, o.ptr, o.shape, o.strides, o.dtype, additive, flags, self.blocks_per_row)
        hit = self._mask_cache.get(key)
        if hit is not None:
            return out, hit[0], hit[1]
        if o.shape != (n, v):
            raise InputError(f"out: expected shape {[n, v]}, got {list(o.shape)}")
        if v > 1 and o.strides[1] != 1:
            raise InputError("out: expected contiguous rows (column stride 1)")
        parts, extra = mask_grid(n, v, additive, self.chunk, self.blocks_per_row, self._target_blocks)
        blocks = n * parts + extra
        if blocks >= 2**31:
            raise InputError(f"states: {n} rows x {parts} blocks per row is over the launch limit 2**31")
        fp, bp = (o.ptr, 0) if additive else (0, o.ptr)
        mask = MASK(outf=fp, outb=bp, dead_count=ptr(self._dead), V=v, row_stride=o.strides[0] if n > 1 else v,
                    parts=parts, extra=extra, flags=flags)
        if len(self._mask_cache) > 64:
            self._mask_cache.clear()
        self._mask_cache[key] = (blocks, mask)
        return out, blocks, mask

    # ------------------------------------------------------------------ the API
    def start(self, n: int) -> StepStates:
        """``n`` states at the root."""
        self._cpu.start(n)  # validates n
        return StepStates(self.xp.full((int(n),), 0, self.xp.int64), self.xp.full((int(n),), 0, self.xp.int64))

    def start_from_prefixes(self, prefixes: Sequence[Sequence[int]]) -> StepStates:
        """One state per forced prefix, walked on the host and uploaded (not a per-step call)."""
        st = self._cpu.start_from_prefixes(prefixes)
        return StepStates(self.xp.asarray(st.node), self.xp.asarray(st.off))

    def walk(self, ids: Any, begin: Any = None, end: Any = None, eos_token_id: Any = None) -> StepStates:
        """States after ``ids[r, begin[r]:end[r]]`` from the root (``ids``: int64 ``[n, L]``, rows may be
        strided; ``begin`` / ``end``: None, an int (checked), or an int64 device array ``[n]`` whose values must
        lie in [0, L]: device values are not checked on the host, which would need a synchronisation; a row with
        a bound outside [0, L] comes back DEAD, where numpy refuses it)."""
        n, walk = self._walk_rows(ids, begin, end)
        eos, eos_dev = self._eos(eos_token_id)
        out = self._new_states(n)
        if n:
            self._launch("walk", n, ROWS["walk"](node_out=ptr(out.node), off_out=ptr(out.off), eos=ptr(eos_dev), n=n,
                                                 n_eos=len(eos), **walk))
        return out

    def walk_mask(self, ids: Any, vocab_size: int, eos_token_id: Any, begin: Any = None, end: Any = None,
                  out: Any = None, additive: bool = True) -> Any:
        """`mask` of the states `walk` gives, in one launch (each row walked block-wide; no states kept)."""
        n, walk = self._walk_rows(ids, begin, end)
        eos, eos_dev = self._eos(eos_token_id)
        out, blocks, mask = self._mask_args(n, vocab_size, eos, out, additive)
        if n:
            rows = ROWS["walk_mask"](eos=ptr(eos_dev), n=n, n_eos=len(eos), **walk)
            self._launch("walk_mask", blocks, rows, mask)
        return out

    def advance(self, states: StepStates, tokens: Any, eos_token_id: Any = None) -> StepStates:
        """Each state after its token (int64 or int32 ``[n]``, any stride), as `TrieStepper.advance`."""
        a, b, n = state_views(states)
        t = self._tokens(tokens, n)
        eos, eos_dev = self._eos(eos_token_id)
        out = self._new_states(n)
        if n:
            self._launch("advance", n, ROWS["advance"](node_in=a.ptr, off_in=b.ptr, node_out=ptr(out.node),
                                                       off_out=ptr(out.off), tok=t.ptr, eos=ptr(eos_dev),
                                                       tok_stride=t.strides[0], n=n, tok_is64=t.dtype == np.int64,
                                                       n_eos=len(eos)))
        return out

    def _count(self, states: StepStates, want_counts: bool, want_ends: bool) -> tuple[Any, Any]:
        a, b, n = state_views(states)
        counts = self.xp.empty((n,), self.xp.int64) if want_counts else None
        ends = self.xp.empty((n,), self.xp.bool) if want_ends else None
        if n:
            self._launch("count", -(-n // self.threads),
                         ROWS["count"](node_in=a.ptr, off_in=b.ptr, counts=ptr(counts) if counts is not None else 0,
                                       ends=ptr(ends) if ends is not None else 0, n=n))
        return counts, ends

    def ends(self, states: StepStates) -> Any:
        """True where a keyword ends at the state (bool device array)."""
        return self._count(states, False, True)[1]

    def allowed_padded(self, states: StepStates, max_per_state: int) -> tuple[Any, Any]:
        """``counts`` int64[n] and ``tokens`` int64[n, max_per_state] (ascending, then -1), as numpy's."""
        if isinstance(max_per_state, bool) or not isinstance(max_per_state, (int, np.integer)) or max_per_state < 0:
            raise InputError(f"max_per_state: expected a non-negative integer, got {max_per_state!r}")
        a, b, n = state_views(states)
        counts, _ = self._count(states, True, False)
        tokens = self.xp.full((n, int(max_per_state)), -1, self.xp.int64)
        if n and max_per_state:
            self._launch("fill", n, ROWS["fill"](node_in=a.ptr, off_in=b.ptr, offsets=0, tokens=ptr(tokens),
                                                 cap=int(max_per_state), n=n))
        return counts, tokens

    def allowed(self, states: StepStates) -> tuple[Any, Any]:
        """CSR ``offsets`` int64[n + 1] and ``tokens`` int64 (ascending per state): counts, a device prefix
        sum, one synchronisation to read the total, then the fill."""
        a, b, n = state_views(states)
        counts, _ = self._count(states, True, False)
        offsets = self.xp.full((n + 1,), 0, self.xp.int64)
        if n:
            offsets[1:] = self.xp.cumsum(counts)
        total = int(offsets[n].item()) if n else 0
        tokens = self.xp.empty((total,), self.xp.int64)
        if total:
            self._launch("fill", n, ROWS["fill"](node_in=a.ptr, off_in=b.ptr, offsets=ptr(offsets), tokens=ptr(tokens),
                                                 cap=0, n=n))
        return offsets, tokens

    def mask(self, states: StepStates, vocab_size: int, eos_token_id: Any, out: Any = None,
             additive: bool = True) -> Any:
        """-inf stored in place over the disallowed entries of float32 logits ``out[n, vocab_size]`` (a new
        zero array when None; allowed entries keep their bits: at a node of at most 1,024 children they are read
        and stored back), or a bool mask (True: allowed)
        written to ``out``; as `TrieStepper.mask`.  Dead rows add to `dead_count` on the device."""
        a, b, n = state_views(states)
        eos, eos_dev = self._eos(eos_token_id)
        out, blocks, mask = self._mask_args(n, vocab_size, eos, out, additive)
        if n:
            rows = ROWS["mask"](node_in=a.ptr, off_in=b.ptr, eos=ptr(eos_dev), n=n, n_eos=len(eos))
            self._launch("mask", blocks, rows, mask)
        return out

    def advance_mask(self, states: StepStates, tokens: Any, vocab_size: int, eos_token_id: Any, out: Any = None,
                     additive: bool = True) -> tuple[StepStates, Any]:
        """`advance`, then `mask` of the new states, in one launch: ``(new_states, out)``."""
        a, b, n = state_views(states)
        t = self._tokens(tokens, n)
        eos, eos_dev = self._eos(eos_token_id)
        out, blocks, mask = self._mask_args(n, vocab_size, eos, out, additive)
        new = self._new_states(n)
        if n:
            rows = ROWS["advance_mask"](node_in=a.ptr, off_in=b.ptr, node_out=ptr(new.node), off_out=ptr(new.off),
                                        tok=t.ptr, eos=ptr(eos_dev), tok_stride=t.strides[0], n=n,
                                        tok_is64=t.dtype == np.int64, n_eos=len(eos))
            self._launch("advance_mask", blocks, rows, mask)
        return new, out

    @property
    def dead_count(self) -> int:
        """Dead rows seen by `mask` so far (reads the device counter: synchronises)."""
        return int(self._dead[0].item())

    def reset_dead_count(self) -> None:
        """Start counting dead rows from 0 (on the caller's stream)."""
        self._dead[0] = 0
