"""`PackedInts`: unsigned integers of a fixed bit width, packed into uint64 words."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from types import ModuleType
from typing import Any

import numpy as np

from ..cpus import in_parallel

__all__ = ["PackedInts"]

#: Values per thread task when a packed array is decoded or scanned (a task reads its words once per class
#: of 8 values and allocates one eighth of its values at a time; tasks of a few milliseconds scale best).
PART_VALUES = 1 << 22


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
        return cls(*cls.pack(np, np.asarray(values), width))

    @classmethod
    def pack(cls, xp: ModuleType, values: Any, width: int | None = None) -> tuple[Any, int, int]:
        """``(words, width, size)`` of ``values`` (an ``xp`` array) packed on ``xp`` (numpy, or cupy for the
        GPU builder); ``width`` defaults to the bits of the largest value."""
        v = values.astype(xp.uint64)
        n = int(v.size)
        top = int(v.max()) if n else 0
        need = top.bit_length()
        w = need if width is None else int(width)
        if w < need or w > 32:
            raise ValueError(f"width {w} cannot hold values up to {top} (max width 32)")
        # Values i, i + P, i + 2P, ... (P = 64 / gcd(w, 64) values fill W = w / gcd words exactly) sit at
        # the same bit offset of their period, so each residue class is one strided, vectorised write.
        period, wpp = cls._period(w)
        words = xp.zeros(cls.num_words(n, w), dtype=xp.uint64)
        for c in range(period if n and w else 0):
            vals = v[c::period]
            bit = c * w
            wi, sh = bit >> 6, bit & 63
            words[wi : wi + wpp * vals.size : wpp] |= vals << xp.uint64(sh)
            if sh + w > 64:
                words[wi + 1 : wi + 1 + wpp * vals.size : wpp] |= vals >> xp.uint64(64 - sh)
        return words, w, n

    @staticmethod
    def _period(width: int) -> tuple[int, int]:
        """(values per period, words per period) of a width."""
        gcd = math.gcd(width, 64) if width else 64
        return 64 // gcd, width // gcd

    @classmethod
    def num_words(cls, size: int, width: int) -> int:
        """Words that `from_values` allocates for ``size`` values of ``width`` bits (the padding word included)."""
        period, wpp = cls._period(width)
        return max(-(-size // period) * wpp, (size * width + 63) // 64) + 1

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

    def _classes(self, masked: bool = True):
        """(c, values c, c + 8, c + 16, ... as uint64) for c < 8: every 8 values span exactly ``width`` bytes,
        so each class is one unaligned uint64 read per value at a fixed byte stride (the value within its
        first 39 bits), shifted down and masked; ``masked=False`` leaves them in place (and-masked, not
        shifted: they sort as the values do) and yields the shift as well."""
        n, w = self.size, self.width
        raw = self.words.view(np.uint8)  # the padding word keeps every 8-byte read inside
        for c in range(min(8, n) if w else 0):
            count = -(-(n - c) // 8)
            at, sh = (c * w) >> 3, (c * w) & 7
            view = np.ndarray((count,), dtype="<u8", buffer=raw, offset=at, strides=(w,))
            vals = np.bitwise_and(view, np.uint64(((1 << w) - 1) << sh))
            if masked:
                vals >>= np.uint64(sh)
                yield c, vals
            else:
                yield c, vals, sh

    def _parts(self) -> list[PackedInts]:
        """The values in pieces of about `PART_VALUES` (whole periods), each a PackedInts over the same words."""
        period, wpp = self._period(self.width)
        step = max(period, PART_VALUES - PART_VALUES % period)
        words = np.asarray(self.words)  # a plain array: a memmap's slices and views cost more
        return [PackedInts(words[i // period * wpp :], self.width, min(step, self.size - i))
                for i in range(0, self.size, step)] or [self]

    def values(self, start: int, count: int, dtype: Any = np.int64) -> np.ndarray:
        """Values ``[start, start + count)`` (as ``dtype``: int64, or an unsigned type that holds ``width``
        bits), decoded by class from the period that holds ``start`` (strided reads, no gathers); the range
        must lie inside ``[0, size]``."""
        if not 0 <= start <= start + count <= self.size:
            raise IndexError(f"values [{start}, {start + count}) outside [0, {self.size})")
        period, wpp = self._period(self.width)
        first = start - start % period
        out = np.zeros(start - first + count, dtype=dtype)
        PackedInts(np.asarray(self.words)[first // period * wpp :], self.width, out.size)._decode_into(out)
        return out[start - first :]

    def _decode_into(self, out: np.ndarray) -> None:
        """The values into ``out`` (int64, or an unsigned type that holds ``width`` bits)."""
        for c, vals in self._classes():
            out[c::8] = vals.view(np.int64) if out.dtype == np.int64 else vals

    def to_array(self, workers: int = 1) -> np.ndarray:
        """Every value (int64), decoded one class of `_classes` at a time (strided, no gathers), in pieces
        on up to ``workers`` threads."""
        out = np.zeros(self.size, dtype=np.int64)
        parts: list[Callable[[], None]] = []
        start = 0
        for part in self._parts():
            parts.append(partial(part._decode_into, out[start : start + part.size]))
            start += part.size
        in_parallel(parts, workers)
        return out

    def max_value(self, workers: int = 1) -> int:
        """The largest value (0 when empty), without materialising the values; in pieces on threads."""
        return max(in_parallel(self.max_tasks(), workers), default=0)

    def max_tasks(self) -> list[Callable[[], int]]:
        """Independent calls whose largest result is `max_value` (to run in a pool with other work)."""
        return [partial(PackedInts._part_max, p) for p in self._parts()]

    def _part_max(self) -> int:
        """The largest value, per class of `_classes` with no shift of every value (masked in place)."""
        return max((int(vals.max()) >> sh for _, vals, sh in self._classes(masked=False)), default=0)

    def max_and_where(self, workers: int = 1) -> tuple[int, np.ndarray]:
        """The largest value (0 when empty) and the indices (ascending) that hold it; in pieces on threads."""
        return self.where_combined(in_parallel(self.where_tasks(), workers))

    def where_tasks(self) -> list[Callable[[], tuple[int, np.ndarray]]]:
        """Independent calls whose results `where_combined` turns into `max_and_where`."""
        def one(part: PackedInts, start: int) -> tuple[int, np.ndarray]:
            best, where = 0, [np.zeros(0, dtype=np.int64)]
            for c, vals in part._classes():
                m = int(vals.max())
                if m > best:
                    best, where = m, []
                if m == best:
                    where.append(np.flatnonzero(vals == m) * 8 + (start + c))
            return best, np.concatenate(where)

        tasks: list[Callable[[], tuple[int, np.ndarray]]] = []
        start = 0
        for part in self._parts():
            tasks.append(partial(one, part, start))
            start += part.size
        return tasks

    @staticmethod
    def where_combined(found: list[tuple[int, np.ndarray]]) -> tuple[int, np.ndarray]:
        """The largest value and its indices (ascending) from the results of `where_tasks`."""
        top = max((m for m, _ in found), default=0)
        return top, np.sort(np.concatenate([w for m, w in found if m == top] or [np.zeros(0, dtype=np.int64)]))

    def padding_is_clear(self) -> bool:
        """True when every bit past the last value is zero (reads only the last words)."""
        end = self.size * self.width
        tail = self.words[end >> 6:]
        return bool(tail.size) and (int(tail[0]) >> (end & 63)) == 0 and not bool(tail[1:].any())

    @property
    def nbytes(self) -> int:
        return int(self.words.nbytes)
