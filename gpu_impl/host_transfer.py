"""Host <-> GPU copies of large numpy arrays through a ring of pinned staging buffers (cupy).

A copy from or to pageable memory goes through the driver's own small staging buffers, one thread; into
fresh host memory it also takes a page fault per page on that one thread.  Here the array moves in chunks:
threads copy each chunk between the numpy array and a pinned buffer (so page faults and memcpy spread over
cores) while the DMA engine moves the previous chunks over PCIe (``cudaMemcpyAsync`` on one stream; an
event per buffer says when it is free again).  `upload_plain` / `download_plain` are cupy's own copies, for
comparison (`flashtrie bench gpubuild transfer` times both).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from types import ModuleType
from typing import Any

import numpy as np

from flashtrie.cpus import usable_cpus

__all__ = ["Stager", "upload_plain", "download_plain"]

#: Bytes per staging buffer, and buffers in the ring.
CHUNK_BYTES = 32 << 20
DEPTH = 8
#: Arrays smaller than this go through cupy's own copy (one call, no pipeline to fill).
SMALL_BYTES = 4 << 20


def upload_plain(cp: ModuleType, host: np.ndarray) -> Any:
    return cp.asarray(host)


def download_plain(cp: ModuleType, dev: Any) -> np.ndarray:
    return dev.get()


class Stager:
    """Chunked, pipelined copies through ``depth`` pinned buffers of ``chunk`` bytes each."""

    def __init__(self, cp: ModuleType, chunk: int = CHUNK_BYTES, depth: int = DEPTH) -> None:
        self.cp, self.chunk, self.depth = cp, int(chunk), int(depth)
        self._mem: list[Any] = []  # the pinned buffers, allocated at the first large copy
        self.bufs: list[np.ndarray] = []
        self.events: list[Any] = []
        self.stream: Any = None
        self.pool: ThreadPoolExecutor | None = None

    def _ready(self) -> ThreadPoolExecutor:
        if self.pool is None:
            cp = self.cp
            self._mem = [cp.cuda.alloc_pinned_memory(self.chunk) for _ in range(self.depth)]
            self.bufs = [np.frombuffer(m, dtype=np.uint8, count=self.chunk) for m in self._mem]
            self.stream = cp.cuda.Stream(non_blocking=True)
            self.events = [cp.cuda.Event(block=False, disable_timing=True) for _ in range(self.depth)]
            self.pool = ThreadPoolExecutor(min(self.depth, usable_cpus()))
        return self.pool

    def close(self) -> None:
        """Release the threads and the pinned buffers (to cupy's pinned memory pool)."""
        if self.pool is not None:
            self.pool.shutdown()
        self.pool, self.bufs, self._mem, self.events, self.stream = None, [], [], [], None

    def _pieces(self, nbytes: int) -> list[tuple[int, int]]:
        return [(a, min(self.chunk, nbytes - a)) for a in range(0, nbytes, self.chunk)]

    def _copy(self, dst: int, src: int, size: int, kind: int, b: int) -> None:
        self.cp.cuda.runtime.memcpyAsync(dst, src, size, kind, self.stream.ptr)
        self.events[b].record(self.stream)

    def upload(self, host: np.ndarray) -> Any:
        """A cupy copy of ``host``."""
        cp = self.cp
        host = np.ascontiguousarray(host)
        if host.nbytes < SMALL_BYTES:
            return cp.asarray(host)
        pool = self._ready()
        dev = cp.empty(host.shape, dtype=host.dtype)
        cp.cuda.get_current_stream().synchronize()  # the allocation's earlier users are done
        src = host.reshape(-1).view(np.uint8)
        pieces, k = self._pieces(src.size), len(self.bufs)

        def fill(i: int) -> None:
            a, size = pieces[i]
            self.events[i % k].synchronize()  # chunk i - k has left this buffer
            np.copyto(self.bufs[i % k][:size], src[a : a + size])

        futs: dict[int, Future[None]] = {i: pool.submit(fill, i) for i in range(min(k, len(pieces)))}
        for i, (a, size) in enumerate(pieces):
            futs.pop(i).result()
            self._copy(dev.data.ptr + a, self._mem[i % k].ptr, size, cp.cuda.runtime.memcpyHostToDevice, i % k)
            if i + k < len(pieces):
                futs[i + k] = pool.submit(fill, i + k)
        self.stream.synchronize()
        return dev

    def download(self, dev: Any) -> np.ndarray:
        """``dev`` copied into a fresh host array."""
        cp = self.cp
        dev = cp.ascontiguousarray(dev)
        out = np.empty(dev.shape, dtype=dev.dtype)
        if dev.nbytes < SMALL_BYTES:
            dev.get(out=out)
            return out
        pool = self._ready()
        cp.cuda.get_current_stream().synchronize()  # the kernels writing ``dev`` are done
        dst = out.reshape(-1).view(np.uint8)
        pieces, k = self._pieces(dst.size), len(self.bufs)

        def drain(i: int) -> None:
            a, size = pieces[i]
            self.events[i % k].synchronize()
            np.copyto(dst[a : a + size], self.bufs[i % k][:size])

        futs: dict[int, Future[None]] = {}
        for i, (a, size) in enumerate(pieces):
            if i >= k:
                futs.pop(i - k).result()  # buffer i % k is free again
            self._copy(self._mem[i % k].ptr, dev.data.ptr + a, size, cp.cuda.runtime.memcpyDeviceToHost, i % k)
            futs[i] = pool.submit(drain, i)
        for f in futs.values():
            f.result()
        return out
