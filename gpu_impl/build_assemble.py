"""Step 5 of the GPU builder: the index arrays assembled where the level order is, generic over ``xp``.

The same assembly as `builder.build_arrays` (read them side by side), but every array is finished on the
device: the bit vectors' words in `BitVector.word_count` words, the packed integers in `PackedInts`'
own layout (`PackedInts.pack` on ``xp``: one strided write per residue class of the period, as
`PackedInts.from_values` does), ``labels_lo``, and the node flags.  Only these words go back to the host,
where `BitVector.from_words` adds the rank directories and select0 hints (their layout belongs to
`flashtrie/index/bits.py`).  With ``xp=numpy`` the same code runs on the CPU (the tests without a GPU).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from flashtrie.index.bits import BitVector
from flashtrie.index.derived import flag_word_count
from flashtrie.index.packed import PackedInts

__all__ = ["DeviceArrays", "assemble", "pack_bits", "pack_ints", "node_flags_device"]


@dataclass
class DeviceArrays:
    """The finished arrays on the device: bit vectors as ``(words, nbits)``, packed integers as
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


def _louds(xp: ModuleType, out: DeviceArrays, parent: Any, n: int) -> Any:
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


def _labels(xp: ModuleType, out: DeviceArrays, tokens: Any, kw_start: Any, start: Any, n: int) -> None:
    lab = xp.zeros(n, dtype=xp.uint32)
    lab[1:] = tokens[kw_start[1:] + start[1:] - 1]
    out.labels_lo = (lab & xp.uint32(0xFFFF)).astype(xp.uint16)
    lab >>= xp.uint32(16)
    hi_mask = lab > 0
    out.bits["hi_flag"] = (pack_bits(xp, hi_mask), n)
    out.packed["labels_hi"] = pack_ints(xp, lab[hi_mask])


def _links(xp: ModuleType, out: DeviceArrays, tokens: Any, kw_start: Any, start: Any, depth: Any,
           max_tok: int) -> Any:
    """Linked flags, link starts and the suffix store; returns the linked flags (bools)."""
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


def _terminals(xp: ModuleType, out: DeviceArrays, depth: Any, s_len: Any, creator: Any, order: Any, ids: str,
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


def node_flags_device(xp: ModuleType, linked: Any, terminal: Any, has_children: Any, n: int) -> Any:
    """`derived.node_flags`'s words from the three flags (bools): node j in bits ``4 (j % 8)..`` of word
    ``j // 8`` (linked, terminal, has children), padded to `flag_word_count` words.  A separate step, so
    that a format without stored flags drops just this call."""
    f = xp.zeros(flag_word_count(n) * 8, dtype=xp.uint32)
    f[:n] = linked
    f[:n] |= terminal.astype(xp.uint32) << xp.uint32(1)
    f[:n] |= has_children.astype(xp.uint32) << xp.uint32(2)
    f = f.reshape(-1, 8)
    f <<= (xp.arange(8, dtype=xp.uint32) * xp.uint32(4))[None, :]
    return f.sum(axis=1, dtype=xp.uint32)  # disjoint nibbles: the sum is their OR


def assemble(xp: ModuleType, tokens: Any, s_start: Any, s_len: Any, order: Any, parent: Any, creator: Any,
             depth: Any, start: Any, *, max_tok: int, ids: str, want_order: bool = False) -> DeviceArrays:
    """Every index array from the level order (`builder.build_arrays`' assembly) on ``xp``.

    ``s_start`` / ``s_len`` / ``order``: flat start, length and input id of each sorted unique keyword;
    ``parent`` (nodes 1..n-1), ``creator``, ``depth``, ``start``: the level order (``creator`` is changed).
    """
    n = int(creator.size)
    out = DeviceArrays()
    creator[0] = 0  # the root reads nothing below; any valid index keeps the gathers in range
    has_children = _louds(xp, out, parent, n)
    kw_start = s_start[creator]  # flat position of the creator's first token
    _labels(xp, out, tokens, kw_start, start, n)
    linked = _links(xp, out, tokens, kw_start, start, depth, max_tok)
    del kw_start
    term = _terminals(xp, out, depth, s_len, creator, order, ids, want_order)
    out.node_flags = node_flags_device(xp, linked, term, has_children, n)
    return out
