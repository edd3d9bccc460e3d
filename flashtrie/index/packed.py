"""`PackedInts`: unsigned integers of a fixed bit width, packed into uint64 words."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["PackedInts"]


@dataclass(frozen=True, eq=False)
class PackedInts:
    """Value i occupies bits [i*width, (i+1)*width) of the little-endian stream in ``words``.

    ``words`` ends with one zero word of padding, so reading words k and k + 1 never leaves the array.
    """

    words: np.ndarray
    width: int
    size: int

    @classmethod
    def from_values(cls, values: np.ndarray, width: int | None = None) -> PackedInts:
        v = np.asarray(values).astype(np.uint64)
        need = int(v.max()).bit_length() if v.size else 0
        w = need if width is None else int(width)
        if w < need or w > 32:
            raise ValueError(f"width {w} cannot hold values up to {int(v.max()) if v.size else 0} (max width 32)")
        n = int(v.size)
        nwords = (n * w + 63) // 64 + 1
        words = np.zeros(nwords, dtype=np.uint64)
        if n and w:
            pos = np.arange(n, dtype=np.int64) * w
            wi = pos >> 6
            sh = (pos & 63).astype(np.uint64)
            lo = v << sh
            starts = np.flatnonzero(np.concatenate(([True], wi[1:] != wi[:-1])))
            words[wi[starts]] = np.bitwise_or.reduceat(lo, starts)
            straddle = np.flatnonzero((pos & 63) + w > 64)
            if straddle.size:
                words[wi[straddle] + 1] |= v[straddle] >> (np.uint64(64) - sh[straddle])
        return cls(words, w, n)

    def get(self, i: np.ndarray) -> np.ndarray:
        """Values at indices ``i`` (int64 array)."""
        i = np.asarray(i, dtype=np.int64)
        if self.width == 0:
            return np.zeros(i.shape, dtype=np.int64)
        pos = i * self.width
        wi = pos >> 6
        sh = (pos & 63).astype(np.uint64)
        lo = self.words[wi] >> sh
        hi_shift = np.where(sh == 0, np.uint64(0), np.uint64(64) - sh)
        hi = np.where(sh == 0, np.uint64(0), self.words[wi + 1] << hi_shift)
        mask = np.uint64((1 << self.width) - 1)
        return ((lo | hi) & mask).astype(np.int64)

    def to_array(self) -> np.ndarray:
        return self.get(np.arange(self.size, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return int(self.words.nbytes)
