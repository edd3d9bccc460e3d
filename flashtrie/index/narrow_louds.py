"""`NarrowLoudsIndex`: the succinct, path-compressed trie of `docs/index-format.md`."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import IndexFormatError, InputError
from ..keywords import KeywordSet
from .bits import BitVector
from .builder import BuiltArrays, build_arrays
from .fileformat import read_index_file, write_index_file
from .packed import PackedInts

__all__ = ["NarrowLoudsIndex"]

_BITVECTORS = ("louds", "hi_flag", "linked", "terminal")
_PACKED = ("labels_hi", "link_starts", "suffix", "keyword_ids")
_BUILD_STAGES = ("sort+trie", "order", "arrays")  # as `build_arrays` reports them


class NarrowLoudsIndex:
    """Level-ordered, path-compressed trie with 16-bit labels; every array is plain and contiguous."""

    def __init__(self, louds: BitVector, labels_lo: np.ndarray, hi_flag: BitVector, labels_hi: PackedInts,
                 linked: BitVector, link_starts: PackedInts, suffix: PackedInts, terminal: BitVector,
                 keyword_ids: PackedInts, meta: dict[str, Any]) -> None:
        self.louds = louds
        self.labels_lo = labels_lo
        self.hi_flag = hi_flag
        self.labels_hi = labels_hi
        self.linked = linked
        self.link_starts = link_starts
        self.suffix = suffix
        self.terminal = terminal
        self.keyword_ids = keyword_ids
        self.meta = meta
        self.num_nodes: int = int(meta["num_nodes"])
        self.num_keywords: int = int(meta["num_keywords"])
        self.num_unique: int = int(meta["num_unique"])
        self.duplicates: int = self.num_keywords - self.num_unique
        self.max_keyword_length: int = int(meta["max_keyword_length"])
        self.max_token: int = int(meta["max_token"])

    # ------------------------------------------------------------------ build / save / load
    @classmethod
    def build(cls, keywords: KeywordSet, progress: bool | Callable[[str], None] | None = None) -> NarrowLoudsIndex:
        """Build from a `KeywordSet` (unsorted, duplicates allowed: the smaller id is kept).

        ``progress=True`` prints the build stages to stderr; a callable receives each stage name.
        """
        if not isinstance(keywords, KeywordSet):
            raise InputError(f"keywords: expected a flashtrie.KeywordSet, got {type(keywords).__name__}")
        if len(keywords) == 0:
            raise InputError("keywords: the keyword set is empty; an index needs at least one keyword")
        t0 = time.perf_counter()
        cb = _progress_printer(len(keywords)) if progress is True else (progress or None)
        built = build_arrays(keywords, cb)
        seconds = time.perf_counter() - t0
        if progress is True:
            print(f"  built {built.num_nodes:,} nodes in {seconds:.1f} s", file=sys.stderr)
        return cls._from_built(built, seconds)

    @classmethod
    def _from_built(cls, b: BuiltArrays, seconds: float) -> NarrowLoudsIndex:
        meta = {
            "num_nodes": b.num_nodes, "num_keywords": b.num_keywords, "num_unique": b.num_unique,
            "max_keyword_length": b.max_keyword_length, "max_token": b.max_token,
            "build_seconds": round(seconds, 3),
        }
        idx = cls(b.louds, b.labels_lo, b.hi_flag, b.labels_hi, b.linked, b.link_starts, b.suffix, b.terminal,
                  b.keyword_ids, meta)
        idx.meta.update(idx._layout_meta())
        return idx

    def _layout_meta(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in _BITVECTORS:
            out[f"{name}.nbits"] = getattr(self, name).nbits
        for name in _PACKED:
            p: PackedInts = getattr(self, name)
            out[f"{name}.width"] = p.width
            out[f"{name}.size"] = p.size
        return out

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        """Every array by name, as stored in the file and uploaded to the GPU."""
        out: dict[str, np.ndarray] = {}
        for name in _BITVECTORS:
            bv: BitVector = getattr(self, name)
            out[f"{name}.words"] = bv.words
            out[f"{name}.rank"] = bv.rank
            if bv.select0_hints is not None:
                out[f"{name}.select0"] = bv.select0_hints
        out["labels_lo"] = self.labels_lo
        for name in _PACKED:
            out[f"{name}.words"] = getattr(self, name).words
        return out

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the index file (to a temporary name, then renamed)."""
        write_index_file(path, self.arrays, self.meta)

    @classmethod
    def load(cls, path: str | os.PathLike[str], verify: bool = True) -> NarrowLoudsIndex:
        """Memory-map an index file; refuses corrupt, truncated, foreign or newer-version files."""
        arrays, meta = read_index_file(path, verify=verify)
        try:
            bvs = {}
            for name in _BITVECTORS:
                bvs[name] = BitVector(arrays[f"{name}.words"], arrays[f"{name}.rank"], int(meta[f"{name}.nbits"]),
                                      arrays.get(f"{name}.select0"))
            pks = {name: PackedInts(arrays[f"{name}.words"], int(meta[f"{name}.width"]), int(meta[f"{name}.size"]))
                   for name in _PACKED}
            labels_lo = arrays["labels_lo"]
            if labels_lo.size != int(meta["num_nodes"]):
                raise IndexFormatError(f"{path}: labels_lo has {labels_lo.size} entries, expected {meta['num_nodes']}")
            return cls(bvs["louds"], labels_lo, bvs["hi_flag"], pks["labels_hi"], bvs["linked"], pks["link_starts"],
                       pks["suffix"], bvs["terminal"], pks["keyword_ids"], dict(meta))
        except KeyError as e:
            raise IndexFormatError(f"{path}: missing array or field {e}; the file is incomplete") from None

    # ------------------------------------------------------------------ vectorised decoders
    def child_range(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Children of each node: ids ``[first, end)``."""
        i = np.asarray(nodes, dtype=np.int64)
        prev = np.where(i > 0, self.louds.select0(np.maximum(i - 1, 0)) + 1, 0)
        first = prev - i + 1
        end = self.louds.select0(i) - i + 1
        return first, end

    def labels(self, nodes: np.ndarray) -> np.ndarray:
        """First token of each node's edge (uint32; 0 for the root)."""
        j = np.asarray(nodes, dtype=np.int64)
        lo = self.labels_lo[j].astype(np.int64)
        flag = self.hi_flag.get(j)
        hi = np.zeros_like(lo)
        if flag.any():
            hi[flag] = self.labels_hi.get(self.hi_flag.rank1(j[flag]))
        return (lo | (hi << 16)).astype(np.uint32)

    def edge_lengths(self, nodes: np.ndarray) -> np.ndarray:
        """Number of tokens on each node's incoming edge (0 for the root)."""
        j = np.asarray(nodes, dtype=np.int64)
        out = np.where(j > 0, 1, 0).astype(np.int64)
        lk = self.linked.get(j)
        if lk.any():
            r = self.linked.rank1(j[lk])
            out[lk] = 1 + self.link_starts.get(r + 1) - self.link_starts.get(r)
        return out

    def edge_tokens(self, nodes: np.ndarray, offs: np.ndarray) -> np.ndarray:
        """Token ``e_off`` of each node's edge (``0 <= off < edge length``)."""
        j = np.asarray(nodes, dtype=np.int64)
        o = np.broadcast_to(np.asarray(offs, dtype=np.int64), j.shape)
        out = self.labels(j).astype(np.int64)
        tail = o > 0
        if tail.any():
            r = self.linked.rank1(j[tail])
            out[tail] = self.suffix.get(self.link_starts.get(r) + o[tail] - 1)
        return out.astype(np.uint32)

    def is_terminal(self, nodes: np.ndarray) -> np.ndarray:
        return self.terminal.get(np.asarray(nodes, dtype=np.int64))

    def keyword_ids_of(self, nodes: np.ndarray) -> np.ndarray:
        """Keyword id of each node that ends a keyword, -1 elsewhere."""
        j = np.asarray(nodes, dtype=np.int64)
        term = self.terminal.get(j)
        out = np.full(j.shape, -1, dtype=np.int64)
        if term.any():
            out[term] = self.keyword_ids.get(self.terminal.rank1(j[term]))
        return out

    # ------------------------------------------------------------------ single-sequence helpers
    def walk(self, tokens: Sequence[int] | np.ndarray) -> tuple[int, int] | None:
        """State ``(node, off)`` after matching ``tokens`` from the root, or None if not a prefix."""
        node, off, m = 0, 0, 0
        for x in np.asarray(tokens, dtype=np.int64).tolist():
            if off < m:
                if int(self.edge_tokens(np.array([node]), np.array([off]))[0]) != x:
                    return None
                off += 1
                continue
            first, end = (int(v[0]) for v in self.child_range(np.array([node])))
            if first == end:
                return None
            kids = np.arange(first, end, dtype=np.int64)
            labs = self.labels(kids)
            k = int(np.searchsorted(labs, x))
            if k == labs.size or int(labs[k]) != x:
                return None
            node, off = first + k, 1
            m = int(self.edge_lengths(np.array([node]))[0])
        return node, off

    def lookup(self, tokens: Sequence[int] | np.ndarray) -> int:
        """Keyword id of ``tokens``, or -1 when it is not a whole keyword."""
        st = self.walk(tokens)
        if st is None or st[0] == 0:
            return -1
        node, off = st
        if off != int(self.edge_lengths(np.array([node]))[0]):
            return -1
        return int(self.keyword_ids_of(np.array([node]))[0])

    # ------------------------------------------------------------------ reporting
    def stats(self) -> dict[str, Any]:
        """Nodes, bytes per array, total bytes and bytes per keyword."""
        per_array = {name: int(a.nbytes) for name, a in self.arrays.items()}
        total = sum(per_array.values())
        return {
            "nodes": self.num_nodes, "keywords": self.num_keywords, "unique_keywords": self.num_unique,
            "duplicates": self.duplicates, "linked_nodes": self.linked.num_ones,
            "terminal_nodes": self.terminal.num_ones, "high_label_nodes": self.hi_flag.num_ones,
            "suffix_tokens": self.suffix.size, "bytes": total,
            "bytes_per_keyword": total / max(self.num_unique, 1), "arrays": per_array,
            "build_seconds": self.meta.get("build_seconds"),
        }

    def __repr__(self) -> str:
        return (f"NarrowLoudsIndex(keywords={self.num_keywords:,}, unique={self.num_unique:,}, "
                f"nodes={self.num_nodes:,}, bytes={sum(a.nbytes for a in self.arrays.values()):,})")


def _progress_printer(n: int) -> Callable[[str], None]:
    t0 = time.perf_counter()

    def say(stage: str) -> None:
        k = _BUILD_STAGES.index(stage) + 1 if stage in _BUILD_STAGES else 0
        print(f"  [{k}/{len(_BUILD_STAGES)}] {stage:<9} {n:,} keywords  {time.perf_counter() - t0:6.1f} s",
              file=sys.stderr)

    return say
