"""Builder step 5: every index array from the level order, written once over the array module ``xp``.

`assemble` finishes each array where the level order is (numpy on the CPU, cupy on a GPU): the bit
vectors' words in `BitVector.word_count` words, the packed integers in `PackedInts`' own layout
(`PackedInts.pack` on ``xp``: one strided write per residue class of the period), ``labels_lo``, and the node
flags.  Its independent parts run on up to ``workers`` threads (numpy releases the GIL; a GPU passes 1 and
its work stays in order, which keeps its peak memory low).  `finish` takes those words on the host and adds
the rank directories and select0 hints (`BitVector.from_words`, on threads), giving `BuiltArrays`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from types import ModuleType
from typing import Any

import numpy as np

from ..cpus import in_parallel
from .bits import BitVector
from .derived import flag_word_count
from .packed import PackedInts

__all__ = ["Assembled", "BuiltArrays", "assemble", "finish", "node_flag_words", "pack_bits", "pack_ints"]


@dataclass
class BuiltArrays:
    """What the builder hands to `NarrowLoudsIndex`."""

    louds: BitVector
    labels_lo: np.ndarray
    hi_flag: BitVector
    labels_hi: PackedInts
    linked: BitVector
    link_starts: PackedInts
    suffix: PackedInts
    terminal: BitVector
    keyword_ids: PackedInts  # empty (width 0) when the ids are the terminals' ranks
    node_flags: np.ndarray
    max_degree: int
    max_degree_nonroot: int
    order: np.ndarray  # input id (the smallest of its duplicates) of the r-th terminal node in level order
    id_order: str  # "input" or "index"
    num_nodes: int
    num_keywords: int
    num_unique: int
    max_keyword_length: int
    max_token: int


@dataclass
class Assembled:
    """The finished arrays on ``xp``: bit vectors as ``(words, nbits)``, packed integers as
    ``(words, width, size)``; ``order`` (input id of each terminal in level order) only when asked for."""

    bits: dict[str, tuple[Any, int]] = field(default_factory=dict)
    packed: dict[str, tuple[Any, int, int]] = field(default_factory=dict)
    labels_lo: Any = None
    node_flags: Any = None
    max_degree: int = 0
    max_degree_nonroot: int = 0
    order: Any = None


def pack_bits(xp: ModuleType, bools: Any) -> Any:
    """The words of `BitVector.from_bools(bools)` (uint64, padding words zero)."""
    nbits = int(bools.size)
    buf = xp.zeros(BitVector.word_count(nbits) * 8, dtype=xp.uint8)
    if nbits:
        buf[: (nbits + 7) // 8] = xp.packbits(bools, bitorder="little")
    return buf.view(xp.uint64)


def pack_ints(xp: ModuleType, values: Any, width: int | None = None) -> tuple[Any, int, int]:
    """``(words, width, size)`` of `PackedInts.from_values(values, width)`, packed on ``xp``."""
    return PackedInts.pack(xp, values, width)


def _louds(xp: ModuleType, out: Assembled, parent: Any, n: int) -> Any:
    """LOUDS words (each node's children: ones, then a zero) and the two largest degrees; returns which
    nodes have children (the degrees themselves are dropped here: 8 bytes a node)."""
    deg = xp.bincount(parent, minlength=n)
    nbits = int(deg.sum()) + n
    out.max_degree, out.max_degree_nonroot = int(deg.max()), int(deg[1:].max()) if n > 1 else 0
    has_children = deg > 0
    deg += 1
    ends = xp.cumsum(deg)
    del deg
    ends -= 1
    bools = xp.ones(nbits, dtype=bool)
    bools[ends] = False
    del ends
    out.bits["louds"] = (pack_bits(xp, bools), nbits)
    return has_children


def _labels(xp: ModuleType, out: Assembled, tokens: Any, kw_start: Any, start: Any, n: int) -> None:
    """``labels_lo`` (each edge's first token, low 16 bits), ``hi_flag`` and ``labels_hi`` (the high bits where
    they are not zero)."""
    lab = xp.zeros(n, dtype=xp.uint32)
    lab[1:] = tokens[kw_start[1:] + start[1:] - 1]
    out.labels_lo = (lab & xp.uint32(0xFFFF)).astype(xp.uint16)
    lab >>= xp.uint32(16)
    hi_mask = lab > 0
    out.bits["hi_flag"] = (pack_bits(xp, hi_mask), n)
    out.packed["labels_hi"] = pack_ints(xp, lab[hi_mask])


def _links(xp: ModuleType, out: Assembled, tokens: Any, kw_start: Any, start: Any, depth: Any,
           max_tok: int) -> Any:
    """Linked flags, link starts and the suffix store (the tokens after each edge's first); returns the
    linked flags (bools)."""
    edge_len = depth - start
    edge_len += 1
    edge_len[0] = 0
    link_mask = edge_len >= 2
    tail_len = (edge_len[link_mask] - 1).astype(xp.int64)
    del edge_len
    m = int(tail_len.size)
    link_off = xp.zeros(m + 1, dtype=xp.int64)
    link_off[1:] = xp.cumsum(tail_len)
    del tail_len
    total = int(link_off[-1])
    # tail token k of link s sits at first_tail[s] + (k - link_off[s]); s from a cumulative count of link ends
    seg = xp.zeros(total, dtype=xp.int64)
    if m > 1:
        seg[link_off[1:-1]] = 1
    seg = xp.cumsum(seg)
    base = kw_start[link_mask] + start[link_mask]
    base -= link_off[:-1]
    pos = base[seg]
    del seg, base
    pos += xp.arange(total, dtype=xp.int64)
    out.bits["linked"] = (pack_bits(xp, link_mask), int(link_mask.size))
    out.packed["link_starts"] = pack_ints(xp, link_off)
    out.packed["suffix"] = pack_ints(xp, tokens[pos], max(1, max_tok.bit_length()))
    return link_mask


def _edges(xp: ModuleType, out: Assembled, tokens: Any, s_start: Any, creator: Any, start: Any, depth: Any,
           max_tok: int, workers: int) -> Any:
    """`_labels` and `_links`, which read each node's first token position in the flat tokens; returns the
    linked flags."""
    kw_start = s_start[creator]  # flat position of the creator's first token
    return in_parallel([partial(_labels, xp, out, tokens, kw_start, start, int(creator.size)),
                 partial(_links, xp, out, tokens, kw_start, start, depth, max_tok)], workers)[1]


def _terminals(xp: ModuleType, out: Assembled, depth: Any, s_len: Any, creator: Any, order: Any, ids: str,
               want_order: bool) -> Any:
    """Terminal flags and the keyword-id map (none when the ids are the terminals' ranks); returns the flags."""
    term = depth == s_len[creator]
    term[0] = False
    kid = order[creator[term]]
    identity = ids == "index" or bool((kid == xp.arange(kid.size, dtype=kid.dtype)).all())
    out.bits["terminal"] = (pack_bits(xp, term), int(term.size))
    out.packed["keyword_ids"] = pack_ints(xp, kid[:0] if identity else kid)
    out.order = kid if want_order else None
    return term


def node_flag_words(xp: ModuleType, linked: Any, terminal: Any, has_children: Any, n: int) -> Any:
    """`derived.node_flags`'s words from the three flags (bools): node j in bits ``4 (j % 8)..`` of word
    ``j // 8`` (linked, terminal, has children), padded to `flag_word_count` words."""
    f = xp.zeros(flag_word_count(n) * 8, dtype=xp.uint32)
    f[:n] = linked
    f[:n] |= terminal.astype(xp.uint32) << xp.uint32(1)
    f[:n] |= has_children.astype(xp.uint32) << xp.uint32(2)
    f = f.reshape(-1, 8)
    f <<= (xp.arange(8, dtype=xp.uint32) * xp.uint32(4))[None, :]
    return f.sum(axis=1, dtype=xp.uint32)  # disjoint nibbles: the sum is their OR


def assemble(xp: ModuleType, tokens: Any, s_start: Any, s_len: Any, order: Any, parent: Any, creator: Any,
             depth: Any, start: Any, *, max_tok: int, ids: str, want_order: bool = False,
             workers: int = 1) -> Assembled:
    """Every index array from the level order, on ``xp`` (its parts on up to ``workers`` threads).

    ``s_start`` / ``s_len`` / ``order``: flat start, length and input id of each sorted unique keyword;
    ``parent`` (nodes 1..n-1), ``creator``, ``depth``, ``start``: the level order (``creator`` is changed).
    """
    n = int(creator.size)
    out = Assembled()
    creator[0] = 0  # the root reads nothing below; any valid index keeps the gathers in range
    has_children, term, linked = in_parallel([
        partial(_louds, xp, out, parent, n),
        partial(_terminals, xp, out, depth, s_len, creator, order, ids, want_order),
        partial(_edges, xp, out, tokens, s_start, creator, start, depth, max_tok, workers)], workers)
    out.node_flags = node_flag_words(xp, linked, term, has_children, n)
    return out


def finish(host: Assembled, workers: int, *, ids: str, num_keywords: int, num_unique: int, max_len: int,
           max_tok: int) -> BuiltArrays:
    """`BuiltArrays` from the assembled words on the host: the bit vectors get their rank directories (and
    the LOUDS its select0 hints), built on up to ``workers`` threads."""
    names = list(host.bits)
    per = max(1, workers // len(names))  # the LOUDS is half the bits: its pieces on the threads of all four
    done = in_parallel([partial(BitVector.from_words, *host.bits[k], with_select0=k == "louds",
                                workers=workers if k == "louds" else per) for k in names], workers)
    bv = dict(zip(names, done, strict=True))
    p = {k: PackedInts(*v) for k, v in host.packed.items()}
    order = np.zeros(0, dtype=np.int64) if host.order is None else host.order.astype(np.int64, copy=False)
    return BuiltArrays(
        louds=bv["louds"], labels_lo=host.labels_lo, hi_flag=bv["hi_flag"], labels_hi=p["labels_hi"],
        linked=bv["linked"], link_starts=p["link_starts"], suffix=p["suffix"], terminal=bv["terminal"],
        keyword_ids=p["keyword_ids"], node_flags=host.node_flags, max_degree=host.max_degree,
        max_degree_nonroot=host.max_degree_nonroot, order=order, id_order=ids,
        num_nodes=int(host.labels_lo.size), num_keywords=num_keywords, num_unique=num_unique,
        max_keyword_length=max_len, max_token=max_tok)
