"""`NarrowLoudsIndex`: the succinct, path-compressed trie of `docs/index-format.md`."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal, overload

import numpy as np

from ..errors import IndexFormatError, InputError
from ..keywords import KeywordSet
from ..texts import TextStore
from ..tokens import check_token_sequence
from .bits import BitVector
from .builder import BuiltArrays, build_arrays, check_build_request
from .checks import (
    BITVECTORS,
    PACKED,
    check_verify_device,
    layout_problem,
    meta_problem,
    verify_module,
)
from .derived import node_flags as derive_node_flags
from .fileformat import FORMAT_VERSION, read_index_file, write_index_file
from .fingerprint import FINGERPRINT_KEY, keywords_fingerprint
from .packed import PackedInts
from .text_arrays import (
    TEXT_ARRAY_DTYPES,
    load_text_store,
    text_arrays,
    text_content_problem,
    text_count,
    text_count_claim,
)
from .verify_run import content_problem

__all__ = ["NarrowLoudsIndex", "ARRAY_DTYPES"]

_BUILD_STAGES = ("sort+trie", "order", "arrays")  # as `build_arrays` reports them
#: Every array of a version-3 file and its dtype, in file order (the node flags are derived, not stored).
ARRAY_DTYPES: dict[str, str] = {
    **{f"{b}.{part}": ("uint32" if part == "select0" else "uint64") for b in BITVECTORS
       for part in (("words", "rank", "select0") if b == "louds" else ("words", "rank"))},
    "labels_lo": "uint16", **{f"{p}.words": "uint64" for p in PACKED},
}
IdOrder = Literal["input", "index"]
Progress = bool | Callable[[str], None] | None


class NarrowLoudsIndex:
    """Level-ordered, path-compressed trie with 16-bit labels; every array is plain and contiguous."""

    def __init__(self, louds: BitVector, labels_lo: np.ndarray, hi_flag: BitVector, labels_hi: PackedInts,
                 linked: BitVector, link_starts: PackedInts, suffix: PackedInts, terminal: BitVector,
                 keyword_ids: PackedInts, node_flags: np.ndarray | None, meta: dict[str, Any], *,
                 texts: TextStore | None = None) -> None:
        self.louds = louds
        self.labels_lo = labels_lo
        self.hi_flag = hi_flag
        self.labels_hi = labels_hi
        self.linked = linked
        self.link_starts = link_starts
        self.suffix = suffix
        self.terminal = terminal
        #: input id of the r-th keyword end; empty (width 0) when the ids are the ranks themselves
        self.keyword_ids = keyword_ids
        self._node_flags = node_flags  # derived on first use (`node_flags`) unless the builder gave them
        self._flags_lock = threading.Lock()
        self.meta = meta
        self.num_nodes: int = int(meta["num_nodes"])
        self.num_keywords: int = int(meta["num_keywords"])
        self.num_unique: int = int(meta["num_unique"])
        self.duplicates: int = self.num_keywords - self.num_unique
        self.max_keyword_length: int = int(meta["max_keyword_length"])
        self.max_token: int = int(meta["max_token"])
        self.max_degree: int = int(meta["max_degree"])
        self.max_degree_nonroot: int = int(meta["max_degree_nonroot"])
        #: "input": ids are input positions; "index": the r-th keyword end (level order) has id r
        self.id_order: str = str(meta["id_order"])
        #: lazily built inverse of keyword_ids (see `_rank_of_id`): dense, or sorted ids and their ranks
        self._node_of_id: np.ndarray | tuple[np.ndarray, np.ndarray] | None = None
        #: the string of each keyword id (`text`), or None
        self._texts = texts

    @property
    def node_flags(self) -> np.ndarray:
        """Per node, 4 bits at ``4 (j % 8)`` of uint32 word ``j // 8``: bit 0 linked, 1 terminal, 2 has children
        (`derived.node_flags`).  Not stored in the file (format 3): derived from the bit vectors on first use,
        once, on threads; the GPU derives its own copy at upload."""
        if self._node_flags is None:
            with self._flags_lock:
                if self._node_flags is None:
                    self._node_flags = derive_node_flags(self.louds, self.linked, self.terminal, self.num_nodes)[0]
        return self._node_flags

    # ------------------------------------------------------------------ build / save / load
    @overload
    @classmethod
    def build(cls, keywords: KeywordSet, progress: Progress = None, *, ids: IdOrder = "input",
              return_order: Literal[False] = False) -> NarrowLoudsIndex: ...

    @overload
    @classmethod
    def build(cls, keywords: KeywordSet, progress: Progress = None, *, ids: IdOrder = "input",
              return_order: Literal[True]) -> tuple[NarrowLoudsIndex, np.ndarray]: ...

    @classmethod
    def build(cls, keywords: KeywordSet, progress: Progress = None, *, ids: IdOrder = "input",
              return_order: bool = False) -> NarrowLoudsIndex | tuple[NarrowLoudsIndex, np.ndarray]:
        """Build from a `KeywordSet` (unsorted, duplicates allowed: the smaller id is kept).

        ``progress=True`` prints the build stages to stderr; a callable receives each stage name.
        ``ids="input"`` (default): results carry input positions, through a map stored in as few bits as
        they need, or no map at all when the input order already is the index order.  ``ids="index"``:
        the r-th keyword end in level order has id r and no map is stored.  ``return_order=True`` also
        returns ``order`` (int64): ``order[i]`` is the input position (the smallest of its duplicates) of
        the keyword at index rank i, so a caller of ``ids="index"`` keeps its own mapping.  Strings carried
        by ``keywords`` (`KeywordSet.from_texts`) are stored by keyword id (`text`).
        """
        check_build_request(keywords, ids)
        t0 = time.perf_counter()
        cb = _progress_printer(len(keywords)) if progress is True else (progress or None)
        built = build_arrays(keywords, cb, ids=ids)
        seconds = time.perf_counter() - t0
        if progress is True:
            print(f"  built {built.num_nodes:,} nodes in {seconds:.1f} s", file=sys.stderr)
        idx = cls._from_built(built, seconds, keywords)
        return (idx, built.order.astype(np.int64)) if return_order else idx

    @classmethod
    def _from_built(cls, b: BuiltArrays, seconds: float, keywords: KeywordSet | None = None) -> NarrowLoudsIndex:
        """The index of built arrays; with ``keywords``, their fingerprint goes into the metadata and their
        strings (in input order) are kept by keyword id (reordered for index-order ids, which needs ``b.order``)."""
        texts = keywords.texts if keywords is not None else None
        if texts is not None and b.id_order == "index":
            if b.order.size != b.num_unique:
                raise ValueError("strings with index-order ids need the build's order")
            texts = texts.take(b.order.astype(np.int64))
        meta = {
            "num_nodes": b.num_nodes, "num_keywords": b.num_keywords, "num_unique": b.num_unique,
            "max_keyword_length": b.max_keyword_length, "max_token": b.max_token,
            "max_degree": b.max_degree, "max_degree_nonroot": b.max_degree_nonroot, "id_order": b.id_order,
            "build_seconds": round(seconds, 3),
        }
        if keywords is not None:
            meta[FINGERPRINT_KEY] = keywords_fingerprint(keywords)
        idx = cls(b.louds, b.labels_lo, b.hi_flag, b.labels_hi, b.linked, b.link_starts, b.suffix, b.terminal,
                  b.keyword_ids, b.node_flags, meta, texts=texts)
        idx.meta.update(idx._layout_meta())
        return idx

    def _layout_meta(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in BITVECTORS:
            out[f"{name}.nbits"] = getattr(self, name).nbits
        for name in PACKED:
            p: PackedInts = getattr(self, name)
            out[f"{name}.width"] = p.width
            out[f"{name}.size"] = p.size
        return out

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        """Every array by name, as stored in the file and uploaded to the GPU (`ARRAY_DTYPES` order)."""
        out: dict[str, np.ndarray] = {}
        for name in BITVECTORS:
            bv: BitVector = getattr(self, name)
            out[f"{name}.words"] = bv.words
            out[f"{name}.rank"] = bv.rank
            if bv.select0_hints is not None:
                out[f"{name}.select0"] = bv.select0_hints
        out["labels_lo"] = self.labels_lo
        for name in PACKED:
            out[f"{name}.words"] = getattr(self, name).words
        return out

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the index file (to a temporary name, then renamed; see `flashtrie.io_util.atomic_write_with`)."""
        write_index_file(path, {**self.arrays, **text_arrays(self._texts)}, self.meta)

    @classmethod
    def load(cls, path: str | os.PathLike[str], verify: bool = True, copy: bool = False, *,
             timings: dict[str, float] | None = None, verify_device: str = "auto") -> NarrowLoudsIndex:
        """Open an index file; refuses corrupt, truncated, foreign, old or newer-version files.

        Header, table, sizes and the cheap cross-array checks come first; then, with ``verify=True``, the
        CRC-32s (on threads) and the full recomputation of every derived array.  ``verify=False`` is only
        for a file you trust: a damaged directory can then send a search outside an array.
        The arrays are memory-mapped: a file overwritten in place while mapped (``cp`` over it; `save`
        renames instead) can kill the process with SIGBUS.  ``copy=True`` reads them into memory instead.
        ``timings`` (a dict, optional) receives the seconds of each step.  ``verify_device`` says where the
        one pass over the LOUDS runs (the largest check): 'cpu' (threads), 'gpu' (cupy; a `DeviceError`
        without it, or when the GPU runs out of memory) or 'auto' (the GPU where cupy and a device are usable
        and the index has at least `checks.VERIFY_GPU_MIN_NODES` nodes, else the CPU); the answers are the
        same.
        """
        check_verify_device(verify_device)
        t0 = time.perf_counter()
        f = read_index_file(path, ARRAY_DTYPES, copy=copy, optional=TEXT_ARRAY_DTYPES)
        problem = meta_problem(f.meta)
        if problem:
            raise IndexFormatError(f"{path}: corrupt metadata ({problem}); rebuild the index")
        arrays, meta = f.arrays, dict(f.meta)
        bvs = {name: BitVector(arrays[f"{name}.words"], arrays[f"{name}.rank"], meta[f"{name}.nbits"],
                               arrays.get(f"{name}.select0")) for name in BITVECTORS}
        pks = {name: PackedInts(arrays[f"{name}.words"], meta[f"{name}.width"], meta[f"{name}.size"])
               for name in PACKED}
        idx = cls(bvs["louds"], arrays["labels_lo"], bvs["hi_flag"], pks["labels_hi"], bvs["linked"],
                  pks["link_starts"], pks["suffix"], bvs["terminal"], pks["keyword_ids"], None, meta)
        xp = verify_module(verify_device, idx.num_nodes) if verify else None
        try:  # the checks only read inside the arrays they have sized; a lying directory can still
            # send a select outside its word's bits: that is a damaged file too
            t1 = time.perf_counter()
            problem, layout = layout_problem(idx)
            if not problem:
                idx._texts, problem = load_text_store(arrays, text_count(idx.id_order, idx.num_keywords,
                                                                         idx.num_unique),
                                                      text_count_claim(idx.id_order, idx.num_keywords,
                                                                       idx.num_unique))
            t2 = time.perf_counter()
            if timings is not None:
                timings.update({"header and table": t1 - t0, "cheap checks": t2 - t1})
            if not problem and verify:
                assert layout is not None
                problem = content_problem(idx, layout, timings=timings, xp=xp, xp_required=verify_device == "gpu",
                                          checksums=f.checksum_work()) or text_content_problem(idx._texts)
        except (IndexError, ValueError, OverflowError) as e:
            problem = f"its directories do not match its bits ({type(e).__name__}: {str(e)[:120]})"
        if problem:
            raise IndexFormatError(f"{path}: inconsistent index: {problem}; rebuild the index")
        return idx

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
            r = self.terminal.rank1(j[term])
            out[term] = self.keyword_ids.get(r) if self.keyword_ids.size else r
        return out

    def keyword(self, i: int) -> np.ndarray:
        """Tokens (uint32) of the keyword with id ``i``, by a walk up from its node.

        The walk costs one select1 per level.  With an id map, the first call also builds its inverse
        (`_rank_of_id`), kept for later calls.  A duplicate collapsed at build time has no node of its
        own: its id is refused (look up the id it was a duplicate of).
        """
        limit = self.num_unique if self.id_order == "index" else self.num_keywords
        if isinstance(i, bool) or not isinstance(i, int | np.integer) or not 0 <= int(i) < limit:
            raise InputError(f"i: keyword id {i!r} is not in [0, {limit})")
        rank = self._rank_of_id(int(i)) if self.keyword_ids.size else int(i)
        if rank < 0 or rank >= self.num_unique:  # with no map, the kept ids of input order are 0 .. unique - 1
            raise InputError(f"i: keyword id {i} is not stored: it was a duplicate of an earlier keyword, "
                             "collapsed at build time")
        node = int(self.terminal.select1(np.array([rank]))[0])
        edges: list[np.ndarray] = []
        while node > 0:
            m = int(self.edge_lengths(np.array([node]))[0])
            edges.append(self.edge_tokens(np.full(m, node), np.arange(m)))
            node = int(self.louds.select1(np.array([node - 1]))[0]) - (node - 1)  # zeros before its bit
        return np.concatenate(edges[::-1]).astype(np.uint32)

    def _rank_of_id(self, i: int) -> int:
        """The terminal rank of keyword id ``i`` through the id map, -1 when no node has that id.

        The inverse is one int64 per id up to the largest stored one when that is at most 8 per stored id
        (plus 1M), else the sorted ids and their ranks: memory in proportion to the map, never to the
        header's keyword count (which a crafted file can set to 2**40)."""
        if self._node_of_id is None:
            ids = self.keyword_ids.to_array().astype(np.int64)
            top = int(ids.max()) + 1
            if top <= 8 * ids.size + (1 << 20):
                inv = np.full(top, -1, dtype=np.int64)
                inv[ids] = np.arange(ids.size, dtype=np.int64)
                self._node_of_id = inv
            else:
                order = np.argsort(ids, kind="stable")
                self._node_of_id = (ids[order], order)
        if isinstance(self._node_of_id, np.ndarray):
            return int(self._node_of_id[i]) if i < self._node_of_id.size else -1
        ids, ranks = self._node_of_id
        at = int(np.searchsorted(ids, i))
        return int(ranks[at]) if at < ids.size and ids[at] == i else -1

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
            c = self._child_with_label(first, end, x)
            if c < 0:
                return None
            node, off = c, 1
            m = int(self.edge_lengths(np.array([node]))[0])
        return node, off

    def _child_with_label(self, first: int, end: int, x: int) -> int:
        """The child in [first, end) with label x, or -1: the labels decoded at once for a few children, else a
        binary search that decodes one label a round (the root of a 2.2M-token library has millions)."""
        if end - first <= 64:
            labs = self.labels(np.arange(first, end, dtype=np.int64))
            k = int(np.searchsorted(labs, x))
            return first + k if k < labs.size and int(labs[k]) == x else -1
        lo, hi = first, end
        while lo < hi:
            mid = (lo + hi) // 2
            if int(self.labels(np.array([mid], dtype=np.int64))[0]) < x:
                lo = mid + 1
            else:
                hi = mid
        return lo if lo < end and int(self.labels(np.array([lo], dtype=np.int64))[0]) == x else -1

    def lookup(self, tokens: Sequence[int] | np.ndarray) -> int:
        """Keyword id of ``tokens``, or -1 when it is not a whole keyword."""
        st = self.walk(tokens)
        if st is None or st[0] == 0:
            return -1
        node, off = st
        if off != int(self.edge_lengths(np.array([node]))[0]):
            return -1
        return int(self.keyword_ids_of(np.array([node]))[0])

    # ------------------------------------------------------------------ strings
    @property
    def has_texts(self) -> bool:
        """Whether the index holds the string of every keyword id (built from `KeywordSet.from_texts`)."""
        return self._texts is not None

    def _text_store(self) -> TextStore:
        if self._texts is None:
            raise InputError("this index holds no strings; build it from KeywordSet.from_texts(texts, tokenizer) "
                             "or with `flashtrie build NAMES.txt --tokenizer SPEC`")
        return self._texts

    def text(self, i: int) -> str:
        """The string of keyword id ``i`` (an `InputError` when the index holds none)."""
        store = self._text_store()
        n = len(store)
        if isinstance(i, bool) or not isinstance(i, int | np.integer) or not 0 <= int(i) < n:
            raise InputError(f"i: keyword id {i!r} is not in [0, {n})")
        return store.get(int(i))

    def texts(self, ids: Any) -> Any:
        """The strings of ``ids`` (integer ids of any shape; -1, a search result's padding, gives None) as
        nested lists of that shape (a str for a single id)."""
        store = self._text_store()
        a = np.asarray(ids)
        if a.size and (not np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_):
            raise InputError(f"ids: expected integer keyword ids, got dtype {a.dtype}")
        flat = a.reshape(-1).astype(np.int64)
        bad = np.flatnonzero((flat < -1) | (flat >= len(store)))
        if bad.size:
            raise InputError(f"ids: keyword id {int(a.reshape(-1)[bad[0]])} is not in [0, {len(store)}) "
                             "(or -1 for padding)")
        out = np.empty(flat.size, dtype=object)
        out[:] = [None if k < 0 else store.get(k) for k in flat.tolist()]
        return out.reshape(a.shape).tolist()

    # ------------------------------------------------------------------ reporting
    def stats(self) -> dict[str, Any]:
        """Counts, bytes per array, total bytes and bytes per keyword, with and without the id map."""
        per_array = {name: int(a.nbytes) for name, a in self.arrays.items()}
        total = sum(per_array.values())
        id_map = per_array["keyword_ids.words"] if self.keyword_ids.size else 0
        u = max(self.num_unique, 1)
        return {
            "format_version": FORMAT_VERSION, "nodes": self.num_nodes, "keywords": self.num_keywords,
            "unique_keywords": self.num_unique, "duplicates": self.duplicates,
            "linked_nodes": self.linked.num_ones, "terminal_nodes": self.terminal.num_ones,
            "high_label_nodes": self.hi_flag.num_ones, "suffix_tokens": self.suffix.size,
            "max_keyword_length": self.max_keyword_length, "max_token": self.max_token,
            "max_degree": self.max_degree, "max_degree_nonroot": self.max_degree_nonroot,
            "id_order": self.id_order, "id_map": bool(self.keyword_ids.size),
            "id_map_bits": self.keyword_ids.width, "id_map_bytes": id_map,
            "bytes": total, "bytes_per_keyword": total / u,
            "bytes_without_id_map": total - id_map, "bytes_per_keyword_without_id_map": (total - id_map) / u,
            "arrays": per_array, "build_seconds": self.meta.get("build_seconds"),
            "texts": len(self._texts) if self._texts is not None else 0,
            "text_bytes": sum(int(a.nbytes) for a in text_arrays(self._texts).values()),
        }

    def describe(self) -> str:
        """A few human-readable lines about the index (what `flashtrie info` can print)."""
        s = self.stats()
        if s["id_map"]:
            ids = f"input order, map of {s['id_map_bits']} bits per keyword ({s['id_map_bytes']:,} bytes)"
        else:
            ids = ("input order, no map (the input order is the index order)" if self.id_order == "input"
                   else "index order (id = rank of the keyword end in level order), no map")
        return "\n".join([
            f"format version {s['format_version']}, {s['keywords']:,} keywords ({s['unique_keywords']:,} unique, "
            f"{s['duplicates']:,} duplicates), {s['nodes']:,} nodes",
            f"longest {s['max_keyword_length']} tokens, largest token {s['max_token']:,}, "
            f"most children {s['max_degree']:,} (any node), {s['max_degree_nonroot']:,} (below the root)",
            f"keyword ids: {ids}",
            f"{s['bytes']:,} bytes, {s['bytes_per_keyword']:.2f} B/keyword "
            f"({s['bytes_per_keyword_without_id_map']:.2f} without the id map)",
            f"strings: {s['texts']:,} stored, {s['text_bytes']:,} bytes" if s["texts"] else "strings: none",
        ])

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
