"""What a search call gives back: results on the host or as `DeviceArray`s, the step counters as
`SearchStats`, and the kernel's error word as the exception it stands for."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np

from flashtrie.errors import DeviceError, InputError
from flashtrie.search_types import SearchResult, SearchStats

from .layout import CONSTANT, STAT_COLUMNS
from .workspace import Layout

if TYPE_CHECKING:
    from .context import GpuContext

__all__ = ["DeviceArray", "DeviceCall", "raise_for", "host_results", "device_results", "results_to_device",
           "step_stats", "STAT_NAMES", "ERR_BAD_LOGPROB", "ERR_DUPLICATE", "ERR_OVERFLOW", "ERR_BAD_TOKEN"]

#: the bits of the kernel's error word (`flashtrie.gpu_impl.layout.CONSTANTS`, kernels/constants.cuh)
ERR_BAD_LOGPROB, ERR_DUPLICATE, ERR_OVERFLOW, ERR_BAD_TOKEN = (
    CONSTANT[n] for n in ("ERR_BAD_LOGPROB", "ERR_DUPLICATE", "ERR_OVERFLOW", "ERR_BAD_TOKEN"))
#: the kernel's out_stats columns (`flashtrie.gpu_impl.layout.STAT_COLUMNS`) as `SearchStats` counters
STAT_NAMES = tuple(name for _, name, _ in STAT_COLUMNS)
_FIELDS = (("keyword_ids", "out_ids", np.int64), ("scores", "out_scores", np.float32),
           ("norm_scores", "out_norms", np.float32), ("lengths", "out_lens", np.int32))


class DeviceCall:
    """A search whose results were left on the device without a synchronisation: its result buffer (laid out
    as the workspace's output, the kernel's error word and step counters included) and the device arrays it
    read, kept alive until its results are read.  Reading the error word synchronises, once."""

    def __init__(self, buffer: Any, lo: Layout, ctx: GpuContext, keep: list[Any]) -> None:
        self.buffer, self.lo, self.ctx = buffer, lo, ctx
        self._keep: list[Any] | None = keep
        self._err: int | None = None

    def _read(self, name: str, dtype: Any) -> np.ndarray:
        out = np.empty(self.lo.sizes[name] // np.dtype(dtype).itemsize, dtype=dtype)
        self.ctx.make_current()
        self.ctx.download(out, int(self.buffer.handle) + self.lo.offsets[name])
        self.ctx.stream.sync()
        self._keep = None  # the search is done with its inputs
        return out

    def error(self) -> int:
        """The kernel's error word (0: none); the first read waits for the search."""
        if self._err is None:
            self._err = int(self._read("out_err", np.uint32)[0])
        return self._err

    def check(self) -> None:
        """Raise what the search's error word reports (`raise_for`): a refused input, checked on the device."""
        raise_for(self.error())

    def stats(self) -> np.ndarray:
        """The kernel's step counters ``[T, 4]`` (uint32) of this search."""
        return self._read("out_stats", np.uint32).reshape(-1, len(STAT_NAMES))


class DeviceArray:
    """A device array left on the GPU by ``search(..., device_out=True)``.

    Exposes ``__cuda_array_interface__`` (wrap it with ``cupy.asarray`` or ``torch.as_tensor``; its
    ``stream`` is the searcher's, so a consumer orders its reads after the search) and ``get()`` to copy
    it to a numpy array.  It keeps its memory alive.  The search that made it was not waited for: ``get()``
    and ``check()`` raise the `InputError` of device proposals the kernel refused (NaN / +inf logprobs,
    duplicate or negative tokens); a consumer that reads through ``__cuda_array_interface__`` calls
    ``check()`` first (results of a refused input are not defined).
    """

    def __init__(self, buffer: Any, offset: int, shape: tuple[int, ...], dtype: np.dtype, ctx: GpuContext,
                 call: DeviceCall | None = None):
        self._buffer = buffer
        self._ptr = int(buffer.handle) + offset
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self._ctx = ctx
        self._call = call

    def check(self) -> None:
        """Wait for the search that made this array and raise the error it found, if any."""
        if self._call is not None:
            self._call.check()

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self._ptr, False), "version": 3,
                "strides": None, "stream": int(self._ctx.stream.handle)}

    def get(self) -> np.ndarray:
        """Copy to a new numpy array (after `check`)."""
        self.check()
        out = np.empty(self.shape, dtype=self.dtype)
        if out.nbytes:
            self._ctx.make_current()
            self._ctx.download(out, self._ptr)
            self._ctx.stream.sync()
        return out

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype})"


def raise_for(err: int) -> None:
    """Raise what the kernel's error word reports (nothing when it is 0)."""
    # a bad int32 token first: it can also look like a duplicate (two -2s)
    if err & ERR_BAD_TOKEN:
        raise InputError("tokens: a negative int32 token other than -1 (checked on the device); int32 tokens "
                         "must be in [0, 2**31 - 1], or -1 for padding")
    if err & ERR_BAD_LOGPROB:
        raise InputError("logprobs: a non-padding entry is NaN or +inf (checked on the device); logprobs must "
                         "be finite or -inf")
    if err & ERR_DUPLICATE:
        raise InputError("tokens: a token appears more than once in one row (checked on the device); each "
                         "proposed token may appear once per row")
    if err & ERR_OVERFLOW:
        raise DeviceError("internal error: a candidate buffer overflowed (please report)")


def host_results(arrays: dict[str, np.ndarray]) -> SearchResult:
    """The results in the typed views ``arrays`` of the pinned result mirror (`Workspace.out_arrays`), copied
    out."""
    return _result([arrays[name].copy() for _, name, _ in _FIELDS] + [arrays["out_nres"].copy()])


def device_results(call: DeviceCall, q_n: int, r: int) -> SearchResult:
    """The results of ``call`` (in its device buffer), as `DeviceArray`s."""
    buf, lo, ctx = call.buffer, call.lo, call.ctx
    cols = [DeviceArray(buf, lo.offsets[name], (q_n, r), np.dtype(dt), ctx, call) for _, name, dt in _FIELDS]
    return _result([*cols, DeviceArray(buf, lo.offsets["out_nres"], (q_n,), np.dtype(np.int32), ctx, call)])


def results_to_device(res: SearchResult, ctx: GpuContext) -> SearchResult:
    """A host `SearchResult` copied into one device buffer, as `DeviceArray`s."""
    host = [np.ascontiguousarray(getattr(res, f)) for f, _, _ in _FIELDS] + [np.ascontiguousarray(res.num_results)]
    layout = Layout()
    for i, a in enumerate(host):
        layout.add(str(i), a.nbytes)
    buf = ctx.allocate(layout.total, "device results")
    for i, a in enumerate(host):
        ctx.upload(int(buf.handle) + layout.offsets[str(i)], a)
    ctx.stream.sync()
    return _result([DeviceArray(buf, layout.offsets[str(i)], a.shape, a.dtype, ctx) for i, a in enumerate(host)])


def _result(cols: list[np.ndarray] | list[DeviceArray]) -> SearchResult:
    """The `SearchResult` of the columns ids, scores, norm scores, lengths and counts; with ``device_out``
    they are `DeviceArray`s (the field types name the host case)."""
    ids, scores, norms, lengths, counts = (cast(np.ndarray, c) for c in cols)
    return SearchResult(ids, scores, norms, lengths, counts)


def step_stats(raw: np.ndarray, queries: int, beam_width: int) -> SearchStats:
    """The kernel's out_stats ``[T, 4]`` as `SearchStats` (steps run: those where some query expanded)."""
    counts = {name: raw[:, i].astype(np.int64) for i, name in enumerate(STAT_NAMES)}
    steps_run = int(np.count_nonzero(counts["live_queries"]))
    return SearchStats(backend="gpu", queries=queries, beam_width=beam_width, steps=int(raw.shape[0]),
                       steps_run=steps_run, counts=counts, early_stop=True)
