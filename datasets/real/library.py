"""`RealLibrary`: identifier strings, their token sequences and a query set (query text -> every correct id).

`keywords_from_texts` is the one place where strings become token sequences for these libraries.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np

from flashtrie.errors import InputError
from flashtrie.keywords import KeywordSet

__all__ = ["RealLibrary", "keywords_from_texts", "pack_strings", "unpack_strings", "pack_id_lists",
           "unpack_id_lists"]


def keywords_from_texts(texts: Sequence[str], encoding: Any) -> KeywordSet:
    """Tokenize every identifier with a tiktoken-style ``encoding`` (``encode_ordinary_batch``: no special
    tokens) and build the keyword set; keyword ``i`` is ``texts[i]``.  An empty text is refused (it has no
    tokens); a byte-level BPE maps distinct strings to distinct token sequences."""
    empty = next((i for i, t in enumerate(texts) if not t), None)
    if empty is not None:
        raise InputError(f"texts[{empty}]: empty identifier; every identifier needs at least one token")
    return KeywordSet.from_sequences(encoding.encode_ordinary_batch(list(texts)))


def pack_strings(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """UTF-8 bytes of all strings (uint8) and int64 byte offsets (len + 1)."""
    encoded = [t.encode("utf-8") for t in texts]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets


def unpack_strings(blob: np.ndarray, offsets: np.ndarray) -> list[str]:
    """The inverse of `pack_strings`."""
    data = blob.tobytes()
    bounds = offsets.tolist()
    return [data[a:b].decode("utf-8") for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def pack_id_lists(lists: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated int32 ids and int64 offsets (len + 1)."""
    offsets = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum(np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists)), out=offsets[1:])
    flat = np.concatenate([np.asarray(x, dtype=np.int32) for x in lists]) if lists else np.zeros(0, np.int32)
    return flat, offsets


def unpack_id_lists(flat: np.ndarray, offsets: np.ndarray) -> list[np.ndarray]:
    """The inverse of `pack_id_lists` (int64 arrays)."""
    return np.split(flat.astype(np.int64), offsets[1:-1])


@dataclass(frozen=True, eq=False)
class RealLibrary:
    """A library of real identifiers: ``texts[i]`` is identifier ``i``, ``keywords[i]`` its tokens;
    query ``j`` is ``query_texts[j]`` and every identifier in ``relevant[j]`` (sorted ids) is a correct answer.
    ``params`` says where the data came from (source, versions, identifier rule, licence, tokenizer)."""

    name: str
    texts: list[str]
    keywords: KeywordSet
    query_texts: list[str]
    relevant: list[np.ndarray]
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.texts) != len(self.keywords):
            raise InputError(f"texts: {len(self.texts)} strings for {len(self.keywords)} keywords")
        if len(self.query_texts) != len(self.relevant):
            raise InputError(f"relevant: {len(self.relevant)} id lists for {len(self.query_texts)} queries")

    def __len__(self) -> int:
        return len(self.texts)

    def save(self, f: BinaryIO) -> None:
        """Write the library as one compressed ``.npz`` to an open binary file."""
        blob, text_off = pack_strings(self.texts)
        qblob, q_off = pack_strings(self.query_texts)
        rel, rel_off = pack_id_lists(self.relevant)
        tok = self.keywords.tokens
        small = tok.size == 0 or int(tok.max()) < 2**16
        meta = json.dumps({"name": self.name, "params": self.params}, sort_keys=True).encode()
        np.savez_compressed(f, meta=np.frombuffer(meta, dtype=np.uint8), texts=blob, text_offsets=text_off,
                            tokens=tok.astype(np.uint16) if small else tok, offsets=self.keywords.offsets,
                            queries=qblob, query_offsets=q_off, relevant=rel, relevant_offsets=rel_off)

    @classmethod
    def load(cls, source: Any) -> RealLibrary:
        """Read what `save` wrote (a path or an open binary file)."""
        with np.load(source, allow_pickle=False) as z:
            meta = json.loads(z["meta"].tobytes())
            keywords = KeywordSet.from_arrays(z["tokens"].astype(np.uint32), z["offsets"])
            return cls(meta["name"], unpack_strings(z["texts"], z["text_offsets"]), keywords,
                       unpack_strings(z["queries"], z["query_offsets"]),
                       unpack_id_lists(z["relevant"], z["relevant_offsets"]), meta["params"])
