"""`TextStore`: a list of strings as one UTF-8 byte blob and its offsets (the keywords' identifiers).

String ``i`` is ``data[offsets[i]:offsets[i + 1]].decode("utf-8")``.  A `KeywordSet` made from strings
carries one (`KeywordSet.from_texts`), and an index built from it keeps the strings of its keyword ids
(`NarrowLoudsIndex.text`); the file stores the blob and the offsets packed in as few bits as the blob needs
(docs/index-format.md, "Strings").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from .errors import InputError

__all__ = ["TextStore", "MAX_TEXT_BYTES"]

#: Largest blob (all strings' UTF-8 bytes together): the file packs the offsets in at most 32 bits.
MAX_TEXT_BYTES = 2**32 - 1


class TextStore:
    """``len(store)`` strings; ``data`` (uint8) holds their UTF-8 bytes back to back, ``offsets`` (int64,
    length n + 1) where each starts.  Built with `from_strings`; read with `get` and `take`."""

    __slots__ = ("data", "offsets")

    def __init__(self, data: np.ndarray, offsets: np.ndarray) -> None:
        if not (isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 1):
            raise InputError(f"data: expected a 1-D uint8 array, got {type(data).__name__}")
        if not (isinstance(offsets, np.ndarray) and offsets.dtype == np.int64 and offsets.ndim == 1
                and offsets.size >= 1):
            raise InputError("offsets: expected a 1-D int64 array of length n + 1 >= 1")
        problem = offsets_problem(offsets, data.size)
        if problem:
            raise InputError(f"offsets: {problem}")
        self.data = data
        self.offsets = offsets

    @classmethod
    def from_strings(cls, strings: Iterable[str], name: str = "texts") -> TextStore:
        """Encode ``strings`` (each a `str`; ``name`` names the argument in errors) as UTF-8."""
        items = strings if isinstance(strings, Sequence) else list(strings)
        check_strings(items, name)
        try:
            encoded = [s.encode("utf-8") for s in items]
        except UnicodeEncodeError:
            bad = next(i for i, s in enumerate(items) if _has_surrogates(s))
            raise InputError(f"{name}[{bad}]: {items[bad][:60]!r} holds a lone surrogate, which is not UTF-8 "
                             "text") from None
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if int(offsets[-1]) > MAX_TEXT_BYTES:
            raise InputError(f"{name}: {int(offsets[-1]):,} bytes of UTF-8 text is over the limit "
                             f"{MAX_TEXT_BYTES:,} of a string store")
        data = np.frombuffer(b"".join(encoded), dtype=np.uint8).copy() if encoded else np.zeros(0, np.uint8)
        return cls(data, offsets)

    def __len__(self) -> int:
        return int(self.offsets.size - 1)

    @property
    def nbytes(self) -> int:
        """Bytes of the UTF-8 blob (the offsets not included)."""
        return int(self.data.size)

    def get(self, i: int) -> str:
        """String ``i`` (``0 <= i < len(self)``; the caller checks the range)."""
        return bytes(self.data[self.offsets[i] : self.offsets[i + 1]]).decode("utf-8")

    def take(self, ids: np.ndarray) -> TextStore:
        """A new store of the strings at ``ids`` (int64, each in range), in that order."""
        ids = np.asarray(ids, dtype=np.int64)
        start, end = self.offsets[ids], self.offsets[ids + 1]
        lengths = end - start
        offsets = np.zeros(ids.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        # every byte's source position: its string's start plus its place inside the string
        owner = np.repeat(np.arange(ids.size, dtype=np.int64), lengths)
        pos = np.arange(int(offsets[-1]), dtype=np.int64) - offsets[owner] + start[owner]
        return TextStore(self.data[pos], offsets)

    def to_list(self) -> list[str]:
        """Every string, in order."""
        blob = self.data.tobytes()
        off = self.offsets.tolist()
        return [blob[a:b].decode("utf-8") for a, b in zip(off[:-1], off[1:], strict=True)]

    def __repr__(self) -> str:
        return f"TextStore(n={len(self):,}, bytes={self.nbytes:,})"


def _has_surrogates(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_strings(items: Sequence[object], name: str) -> None:
    """`InputError` naming the first item of ``items`` that is not a `str` (and how many are not)."""
    bad = [i for i, s in enumerate(items) if not isinstance(s, str)]
    if bad:
        i = bad[0]
        more = f" (and {len(bad) - 1:,} more)" if len(bad) > 1 else ""
        raise InputError(f"{name}[{i}]: expected a str, got {type(items[i]).__name__} {str(items[i])[:40]!r}{more}")


def offsets_problem(offsets: np.ndarray, nbytes: int) -> str | None:
    """What is wrong with string offsets over a blob of ``nbytes`` (start at 0, never decrease, end at
    ``nbytes``), or None."""
    if int(offsets[0]) != 0 or int(offsets[-1]) != nbytes:
        return f"they run from {int(offsets[0])} to {int(offsets[-1])}, expected 0 to {nbytes} (the blob's bytes)"
    down = np.flatnonzero(np.diff(offsets) < 0)
    if down.size:
        i = int(down[0])
        return f"offset {i + 1} ({int(offsets[i + 1])}) is below offset {i} ({int(offsets[i])})"
    return None


def utf8_problem(data: np.ndarray, offsets: np.ndarray) -> str | None:
    """What is wrong with the blob as UTF-8 strings: not UTF-8, or a string boundary inside a character."""
    try:
        data.tobytes().decode("utf-8")
    except UnicodeDecodeError as e:
        return f"the blob is not UTF-8 (byte {e.start:,}: {e.reason})"
    inner = offsets[1:-1]
    inner = inner[inner < data.size]
    cut = np.flatnonzero((data[inner] & 0xC0) == 0x80) if inner.size else np.zeros(0, np.int64)
    if cut.size:
        return f"string {int(cut[0])} ends inside a UTF-8 character (at byte {int(inner[cut[0]]):,})"
    return None
