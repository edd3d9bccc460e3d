"""The library pass of `datasets._library_pass` on the GPU: the same `LibraryFacts`, bit for bit.

The keywords go up in chunks of `CHUNK` keywords (tokens and offsets through the pinned staging ring of
`gpu_impl.host_transfer`); each chunk is one piece of the CPU pass's own walk (`_library_pass._Walk`) over
cupy: the keywords in order of length, so that the ones still going at depth d are a contiguous tail, one
gather, one hash step and, below ``num_steps``, one ``bincount`` per depth.  Hashes and lengths stay on the
device until the end; counts go to one dense table on the device (sorted unique counts per chunk when the
largest token is too large for one).  The hash is uint64 arithmetic (wrapping multiply, xor, shifts): the
same bits on both array modules.  What is the GPU's alone is here: the chunks, their size in the free
device memory, the copies and the errors that name the device.
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

from ._library_pass import WIDE_COUNTS, LibraryFacts, _Walk, combine, dense_tables, length_dtype, make_tally

__all__ = ["CHUNK", "device_dense", "fitting_chunk", "library_pass_xp", "library_pass_gpu", "pass_cupy"]

CHUNK = 1 << 26  # keywords per upload (about 1.5 GB of tokens and offsets for 4-token keywords)
_DENSE_BYTES = 16 << 30  # the most the device's count tables may take


def device_dense(top: int, num_steps: int) -> bool:
    """Whether the device counts tokens in a dense table (one row per depth): its uint32 counts and, in the
    budget, as much again for the temporaries of the ``bincount`` calls."""
    return dense_tables(top, num_steps, 1, _DENSE_BYTES // 2)


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
    """`library_pass` with array module ``xp``, a chunk at a time; ``put`` / ``get`` move a host array to it
    and back.

    ``timings`` (optional) receives the seconds of the uploads, the work on the device and the results'
    download (``sync`` waits for the device, so that each is timed apart).
    """
    n = len(ks)
    chunk = CHUNK if chunk is None else max(1, int(chunk))
    top = max_token + 1
    tally = make_tally(xp, top, num_steps, dense=device_dense(top, num_steps), wide=n >= WIDE_COUNTS, keys=0)
    walk = _Walk(xp, xp.empty(n, dtype=length_dtype(ks, usable_cpus())), xp.empty(n, dtype=np.uint64), tally,
                 num_steps, min(chunk, max(n, 1)), ks.tokens.dtype)
    off = ks.offsets
    for a in range(0, n, chunk):
        b = min(a + chunk, n)
        s, e = int(off[a]), int(off[b])
        with _timed(timings, "upload", sync):
            offs, toks = put(off[a : b + 1]) - s, put(ks.tokens[s:e])  # put may return a view: "- s" copies
        with _timed(timings, "on the device", sync):
            walk.piece(a, offs, toks)
        del offs, toks
    with _timed(timings, "on the device", sync):
        tally.flush()
    with _timed(timings, "download", sync):
        return combine([walk], n, get(walk.lengths), get(walk.full), num_steps, top, 1)


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
    from flashtrie.arrays import cupy_module

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
