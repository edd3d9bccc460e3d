"""A fingerprint of a keyword set, kept in the index metadata so that a keyword file can be matched to an index.

BLAKE2b (16 bytes) over the keyword count and the per-piece BLAKE2b digests of the offsets (int64) and the
tokens (uint32), little-endian, in pieces of `PIECE_BYTES` hashed on threads (hashlib releases the GIL).
Equal for equal keyword sequences (ids included: the same keywords in another order differ).
"""

from __future__ import annotations

import hashlib
from functools import partial

import numpy as np

from ..cpus import in_parallel, usable_cpus
from ..keywords import KeywordSet

__all__ = ["FINGERPRINT_KEY", "PIECE_BYTES", "keywords_fingerprint", "is_fingerprint"]

#: The metadata field that holds it (absent in files written before it existed).
FINGERPRINT_KEY = "keywords_fingerprint"
PIECE_BYTES = 8 << 20
_NAME = "blake2b-128:"


def _digests(data: memoryview) -> list[bytes]:
    def digest(a: int) -> bytes:
        return hashlib.blake2b(data[a : a + PIECE_BYTES], digest_size=16).digest()

    return in_parallel([partial(digest, a) for a in range(0, len(data), PIECE_BYTES)], usable_cpus())


def keywords_fingerprint(keywords: KeywordSet) -> str:
    """``"blake2b-128:"`` and 32 hex digits for the keyword set (its count, offsets and tokens)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(len(keywords).to_bytes(8, "little"))
    for a in (keywords.offsets.astype("<i8", copy=False), keywords.tokens.astype("<u4", copy=False)):
        h.update(a.size.to_bytes(8, "little"))
        for d in _digests(np.ascontiguousarray(a).data.cast("B")):
            h.update(d)
    return _NAME + h.hexdigest()


def is_fingerprint(value: object) -> bool:
    """Whether ``value`` has the form of `keywords_fingerprint`'s result."""
    if not isinstance(value, str) or not value.startswith(_NAME) or len(value) != len(_NAME) + 32:
        return False
    return all(c in "0123456789abcdef" for c in value[len(_NAME):])
