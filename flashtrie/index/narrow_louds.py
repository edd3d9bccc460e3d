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
from ..tokens import check_token_sequence
from .bits import HINT_STEP, BitVector
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
        """Memory-map an index file; refuses corrupt, truncated, foreign or newer-version files.

        ``verify=False`` skips the CRC-32s and the recomputation of the rank directories (faster on a large
        file): only for a file you trust, since a damaged directory can then send a search outside an array.
        """
        arrays, meta = read_index_file(path, verify=verify)
        try:
            bvs = {}
            for name in _BITVECTORS:
                bvs[name] = BitVector(arrays[f"{name}.words"], arrays[f"{name}.rank"], int(meta[f"{name}.nbits"]),
                                      arrays.get(f"{name}.select0"))
            pks = {name: PackedInts(arrays[f"{name}.words"], int(meta[f"{name}.width"]), int(meta[f"{name}.size"]))
                   for name in _PACKED}
            idx = cls(bvs["louds"], arrays["labels_lo"], bvs["hi_flag"], pks["labels_hi"], bvs["linked"],
                      pks["link_starts"], pks["suffix"], bvs["terminal"], pks["keyword_ids"], dict(meta))
        except KeyError as e:
            raise IndexFormatError(f"{path}: missing array or field {e}; the file is incomplete") from None
        except (TypeError, ValueError) as e:
            raise IndexFormatError(f"{path}: corrupt metadata ({e}); rebuild the index") from None
        problem = idx._layout_problem(verify)
        if problem:
            raise IndexFormatError(f"{path}: inconsistent index: {problem}; rebuild the index")
        return idx

    def _layout_problem(self, full: bool) -> str | None:
        """What is wrong with the arrays' sizes, widths and counts (so every read stays inside its array),
        or None.  ``full`` also recomputes every rank directory and select0 hint array from its bits."""
        n = self.num_nodes
        if n < 1 or self.num_unique < 1 or self.num_keywords < self.num_unique or self.max_keyword_length < 1:
            return (f"counts nodes={n}, keywords={self.num_keywords}, unique={self.num_unique}, "
                    f"max length={self.max_keyword_length}")
        if self.labels_lo.dtype != np.uint16 or self.labels_lo.shape != (n,):
            return f"labels_lo is {self.labels_lo.dtype}{list(self.labels_lo.shape)}, expected uint16[{n}]"
        want_bits = {"louds": 2 * n - 1, "hi_flag": n, "linked": n, "terminal": n}
        for name, nbits in want_bits.items():
            bv: BitVector = getattr(self, name)
            nwords = (nbits + 63) // 64 + 1
            nwords += (-nwords) % 4
            if bv.nbits != nbits or bv.words.dtype != np.uint64 or bv.words.shape != (nwords,) \
                    or bv.rank.dtype != np.uint64 or bv.rank.shape != (nwords // 4 + 1,):
                return f"bit vector {name}: {bv.nbits} bits in {bv.words.size} words, expected {nbits} in {nwords}"
            if (name == "louds") != (bv.select0_hints is not None):
                return f"bit vector {name}: select0 hints {'missing' if name == 'louds' else 'unexpected'}"
            if full:
                ref = BitVector.from_words(bv.words, nbits, with_select0=name == "louds")
                if not np.array_equal(ref.rank, bv.rank) or (
                        ref.select0_hints is not None and not np.array_equal(ref.select0_hints, bv.select0_hints)):
                    return f"bit vector {name}: its rank directory does not match its bits"
        if self.louds.num_ones != n - 1:
            return f"LOUDS has {self.louds.num_ones} child bits for {n} nodes"
        hints = self.louds.select0_hints  # one per 256 zeros, then the last block (BitVector.from_words)
        if hints is None or hints.shape != (-(-self.louds.num_zeros // HINT_STEP) + 1,) or (
                int(hints.max()) >= self.louds.rank.size - 1):
            return "bit vector louds: select0 hints out of range"
        want_size = {"labels_hi": self.hi_flag.num_ones, "link_starts": self.linked.num_ones + 1,
                     "keyword_ids": self.terminal.num_ones}
        for name in _PACKED:
            pk: PackedInts = getattr(self, name)
            if not 0 <= pk.width <= 32 or pk.size < 0 or pk.words.dtype != np.uint64 \
                    or pk.words.shape != (PackedInts.num_words(pk.size, pk.width),):
                return f"packed array {name}: {pk.size} values of {pk.width} bits in {pk.words.size} words"
            if name in want_size and pk.size != want_size[name]:
                return f"packed array {name}: {pk.size} values, expected {want_size[name]}"
        if self.terminal.num_ones != self.num_unique:
            return f"{self.terminal.num_ones} keyword ends for {self.num_unique} unique keywords"
        if self.labels_hi.width > 16:
            return f"labels_hi is {self.labels_hi.width} bits wide (at most 16)"
        starts = self.link_starts.to_array()  # always: a bad link would send the GPU outside the suffix store
        if starts[0] != 0 or starts[-1] != self.suffix.size or bool(np.any(np.diff(starts) < 1)):
            return "link_starts do not cover the suffix store"
        if full and self.keyword_ids.size and int(self.keyword_ids.to_array().max()) >= self.num_keywords:
            return f"a keyword id is not below the {self.num_keywords} keywords"
        return None

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
        for x in check_token_sequence(tokens, "tokens").tolist():
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
