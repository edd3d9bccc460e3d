"""The library pass of `datasets._library_pass` on the GPU: the same `LibraryFacts`, bit for bit.

The keywords go up in chunks of `CHUNK` keywords (tokens and offsets through the pinned staging ring of
`gpu_impl.host_transfer`); per chunk, array code generic over ``xp`` (cupy; numpy runs the very same code,
which is how CI tests it) puts the keywords in order of length, so that the ones still going at depth d are
a contiguous tail, and takes one gather, one hash step and, below ``num_steps``, one ``bincount`` per depth.
Hashes and lengths stay on the device until the end; counts go to one dense table per depth on the device
(a sorted unique count per chunk when the largest token is too large for one).  The hash is uint64
arithmetic (wrapping multiply, xor, shifts): the same bits on both array modules.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import numpy as np

from flashtrie.cpus import usable_cpus
from flashtrie.errors import DeviceError
from flashtrie.keywords import KeywordSet

from ._hashing import ROOT_HASH
from ._library_pass import (
    _GOLDEN,
    _LENGTH_TAG,
    BINCOUNT_MAX,
    LibraryFacts,
    _child_hash_into,
    _mix_into,
    length_dtype,
    sum_sparse,
)

__all__ = ["CHUNK", "device_dense", "fitting_chunk", "library_pass_xp", "library_pass_gpu", "pass_cupy"]

CHUNK = 1 << 26  # keywords per upload (about 1.5 GB of tokens and offsets for 4-token keywords)
_DENSE_BYTES = 16 << 30  # the most the device's count tables may take


def xor_all(xp: ModuleType, x: Any) -> int:
    """The xor of every element of a uint64 array (halves folded onto each other: any array module)."""
    x = x.copy()
    while x.size > 1:
        half = x.size // 2
        x[:half] ^= x[x.size - half :]
        x = x[: x.size - half]
    return int(x[0]) if x.size else 0


def device_dense(top: int, num_steps: int) -> bool:
    """Whether the device counts tokens in dense tables (int64, one per depth)."""
    return top <= BINCOUNT_MAX and top * num_steps * 8 <= _DENSE_BYTES


class _DeviceFacts:
    """What the chunks add up to, on the device until `finish`."""

    def __init__(self, xp: ModuleType, n: int, len_dtype: type, num_steps: int, top: int) -> None:
        self.xp, self.num_steps, self.top = xp, num_steps, top
        self.lengths = xp.empty(n, dtype=len_dtype)
        self.full = xp.empty(n, dtype=np.uint64)
        self.dense = device_dense(top, num_steps)
        self.counts = xp.zeros((num_steps, top), dtype=np.int64) if self.dense else None
        self.pieces: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(num_steps)]
        self.length_counts = np.zeros(1, dtype=np.int64)
        self.fp = 0

    def count(self, d: int, tok: Any, get: Callable[[Any], np.ndarray]) -> None:
        xp = self.xp
        if self.counts is not None:
            self.counts[d] += xp.bincount(tok, minlength=self.top)
        elif tok.size:
            t, c = xp.unique(tok, return_counts=True)
            self.pieces[d].append((get(t).astype(np.uint32), get(c).astype(np.int64)))

    def chunk(self, a: int, offs: Any, toks: Any, get: Callable[[Any], np.ndarray]) -> None:
        """Keywords ``[a, a + offs.size - 1)``: ``offs`` their offsets (from 0) into their tokens ``toks``."""
        xp = self.xp
        m = offs.size - 1
        lens = (offs[1:] - offs[:-1]).astype(self.lengths.dtype)
        self.lengths[a : a + m] = lens
        order = xp.argsort(lens)  # any order of equal lengths: every result is per keyword or a sum
        slen = lens[order]
        spos = offs[:-1][order]
        by_len = get(xp.bincount(slen))
        if by_len.size > self.length_counts.size:
            self.length_counts = np.pad(self.length_counts, (0, by_len.size - self.length_counts.size))
        self.length_counts[: by_len.size] += by_len
        live = np.concatenate(([0], np.cumsum(by_len)))
        h = xp.full(m, ROOT_HASH, dtype=np.uint64)
        tmp = xp.empty_like(h)
        for d in range(by_len.size - 1):
            k = int(live[d + 1])
            tok = toks[spos[k:]]
            spos[k:] += 1
            if d < self.num_steps:
                self.count(d, tok, get)
            _child_hash_into(h[k:], tok.astype(np.uint64), tmp[k:], xp)
        _child_hash_into(h, slen.astype(np.uint64) + _LENGTH_TAG, tmp, xp)
        self.full[order + a] = h
        ids = order.astype(np.uint64) + np.uint64(a)
        ids *= _GOLDEN
        ids ^= h
        _mix_into(ids, tmp, xp)
        self.fp ^= xor_all(xp, ids)

    def finish(self, n: int, get: Callable[[Any], np.ndarray]) -> LibraryFacts:
        xp = self.xp
        if self.counts is not None:
            depth_counts = []
            for d in range(self.num_steps):
                tok = xp.flatnonzero(self.counts[d])
                depth_counts.append((get(tok).astype(np.uint32), get(self.counts[d][tok]).astype(np.int64)))
        else:
            depth_counts = [sum_sparse(p) for p in self.pieces]
        return LibraryFacts(get(self.lengths), get(self.full), f"{self.fp ^ n:016x}", self.length_counts,
                            depth_counts)


@contextmanager
def _timed(timings: dict[str, float] | None, key: str, sync: Callable[[], None]) -> Iterator[None]:
    """Adds the block's seconds (after ``sync``) to ``timings[key]`` when timings are asked for."""
    if timings is None:
        yield
        return
    t = time.perf_counter()
    yield
    sync()
    timings[key] = timings.get(key, 0.0) + time.perf_counter() - t


def library_pass_xp(xp: ModuleType, ks: KeywordSet, num_steps: int, max_token: int,
                    put: Callable[[np.ndarray], Any], get: Callable[[Any], np.ndarray],
                    chunk: int | None = None, timings: dict[str, float] | None = None,
                    sync: Callable[[], None] = lambda: None) -> LibraryFacts:
    """`library_pass` with array module ``xp``; ``put`` / ``get`` move a host array to it and back.

    ``timings`` (optional) receives the seconds of the uploads, the work on the device and the results'
    download (``sync`` waits for the device, so that each is timed apart).
    """
    n = len(ks)
    chunk = CHUNK if chunk is None else max(1, int(chunk))
    acc = _DeviceFacts(xp, n, length_dtype(ks, usable_cpus()), num_steps, max_token + 1)
    off = ks.offsets
    for a in range(0, n, chunk):
        b = min(a + chunk, n)
        s, e = int(off[a]), int(off[b])
        with _timed(timings, "upload", sync):
            offs, toks = put(off[a : b + 1]) - s, put(ks.tokens[s:e])  # put may return a view: "- s" copies
        with _timed(timings, "on the device", sync):
            acc.chunk(a, offs, toks, get)
        del offs, toks
    with _timed(timings, "download", sync):
        return acc.finish(n, get)


def fitting_chunk(ks: KeywordSet, num_steps: int, top: int, free: int) -> int:
    """Keywords per chunk (at most `CHUNK`) whose device arrays fit in ``free`` bytes beside the results
    (hashes and lengths of every keyword, the dense count tables); `DeviceError` when not even
    ``min(len(ks), 2**20)`` fit."""
    n = max(1, len(ks))
    per_keyword = 80 + 8 * -(-ks.tokens.size // n)  # the chunk's int64 and uint64 arrays, its tokens twice
    results = 9 * n + (16 * num_steps * top if device_dense(top, num_steps) else 0)
    fit = (int(0.8 * free) - results) // per_keyword
    if fit < min(n, 1 << 20):
        raise DeviceError(f"device 'gpu': the query generator's library pass needs about "
                          f"{(results + per_keyword * min(n, 1 << 20)) / 0.8e9:.1f} GB of GPU memory, "
                          f"{free / 1e9:.1f} GB are free; device 'cpu' runs it on the CPU")
    return max(1, min(CHUNK, fit))


def pass_cupy() -> ModuleType:
    """cupy for the GPU pass, or a `DeviceError` that names ``device`` and the way out."""
    from flashtrie.gpu_impl.build_gpu import cupy_module

    try:
        return cupy_module()
    except DeviceError as e:
        raise DeviceError(f"device 'gpu': the query generator's library pass needs cupy and a GPU ({e}); "
                          "device 'cpu' or 'auto' runs it on the CPU") from None


def library_pass_gpu(ks: KeywordSet, num_steps: int, max_token: int, chunk: int | None = None,
                     timings: dict[str, float] | None = None) -> LibraryFacts:
    """`library_pass` on the GPU (cupy; `flashtrie.errors.DeviceError` where it or a GPU is missing);
    ``timings`` as in `library_pass_xp`."""
    from flashtrie.gpu_impl.host_transfer import Stager

    cp = pass_cupy()
    if chunk is None:
        chunk = fitting_chunk(ks, num_steps, max_token + 1, cp.cuda.runtime.memGetInfo()[0])
    stager = Stager(cp)
    try:
        facts = library_pass_xp(cp, ks, num_steps, max_token, stager.upload, stager.download, chunk, timings,
                                cp.cuda.Device().synchronize)
    except cp.cuda.memory.OutOfMemoryError as e:
        raise DeviceError(f"device 'gpu': the query generator's library pass ran out of GPU memory ({e}); "
                          "device 'cpu' runs it on the CPU") from None
    finally:
        stager.close()
        cp.get_default_memory_pool().free_all_blocks()
    return facts
