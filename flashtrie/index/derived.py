"""Per-node facts derived from the bit vectors: the GPU's flag nibbles, the largest degrees, trie heights.

The builder stores the largest degrees in the metadata (``max_degree``, ``max_degree_nonroot``); the node
flags are not stored (index format 3): `NarrowLoudsIndex.node_flags` derives them here on first use, and the
GPU derives its own copy at upload (``gpu_impl/kernels/node_flags.cu``, the same words).  ``load(verify=True)``
derives the degrees again and compares.  Everything works on ranges of nodes (multiples of 8) on threads;
numpy releases the GIL.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from ..cpus import in_parallel, usable_cpus
from .bits import BitVector

__all__ = ["flag_word_count", "degrees", "node_flags", "tree_height", "max_plain_depth", "NODE_LINKED", "NODE_TERMINAL",
           "NODE_HAS_CHILDREN"]

NODE_LINKED = 1  # the incoming edge has two tokens or more
NODE_TERMINAL = 2  # a keyword ends at the node
NODE_HAS_CHILDREN = 4
#: Nodes per thread task (a multiple of 8, so that tasks write whole flag words).
CHUNK_NODES = 1 << 22

# _SPREAD[b]: bit i of byte b moved to bit 4 i (eight nodes of one byte into the nibbles of one word)
_SPREAD = np.zeros(256, dtype=np.uint32)
for _i in range(8):
    _SPREAD |= ((np.arange(256, dtype=np.uint32) >> _i) & 1) << (4 * _i)


def flag_word_count(n: int) -> int:
    """Words of ``node_flags`` for ``n`` nodes: 8 nodes a word, padded with at least 8 zero nodes."""
    return (n + (-n) % 8 + 8) // 8


def _bits(bv: BitVector, start: int, stop: int) -> np.ndarray:
    """Bits ``[start, stop)`` of ``bv`` as bools."""
    if stop <= start:
        return np.zeros(0, dtype=bool)
    raw = bv.words.view(np.uint8)[start >> 3 : (stop + 7) >> 3]
    off = start & 7
    return np.unpackbits(raw, bitorder="little")[off : off + stop - start].view(bool)


def _bytes(bv: BitVector, a: int, b: int) -> np.ndarray:
    """The bytes holding the bits of nodes ``[a, b)`` (``a`` a multiple of 8)."""
    return bv.words.view(np.uint8)[a >> 3 : (b + 7) >> 3]


def _degrees(louds: BitVector, bit_start: int, bit_stop: int, count: int) -> np.ndarray:
    """Degrees of the ``count`` nodes whose unary codes fill LOUDS bits ``[bit_start, bit_stop)``."""
    zeros = np.flatnonzero(~_bits(louds, bit_start, bit_stop))
    if zeros.size != count:
        raise ValueError(f"LOUDS bits [{bit_start}, {bit_stop}) hold {zeros.size} node ends, expected {count}")
    deg = np.empty(count, dtype=np.int64)
    if count:
        deg[0] = zeros[0]
        np.subtract(zeros[1:], zeros[:-1], out=deg[1:])
        deg[1:] -= 1
    return deg


def _code_start(louds: BitVector, node: int) -> int:
    """First LOUDS bit of ``node``'s unary code (just after the zero that ends node - 1)."""
    return 0 if node == 0 else int(louds.select0(np.array([node - 1]))[0]) + 1


def degrees(louds: BitVector, n: int, workers: int | None = None) -> np.ndarray:
    """Number of children of every node (int32 below 2**31 nodes), from the LOUDS, on threads.

    Needs a LOUDS with ``2 n - 1`` bits, ``n`` zeros and a valid select0 directory.
    """
    out = np.empty(n, dtype=np.int32 if n < 2**31 else np.int64)
    cuts = list(range(0, n, CHUNK_NODES)) + [n]
    starts = [_code_start(louds, a) for a in cuts[:-1]] + [louds.nbits]

    def one(k: int) -> None:
        out[cuts[k] : cuts[k + 1]] = _degrees(louds, starts[k], starts[k + 1], cuts[k + 1] - cuts[k])

    in_parallel([partial(one, k) for k in range(len(cuts) - 1)], workers or usable_cpus())
    return out


def node_flags(louds: BitVector, linked: BitVector, terminal: BitVector, n: int,
               workers: int | None = None, deg: np.ndarray | None = None) -> tuple[np.ndarray, int, int]:
    """``(node_flags, max_degree, max_degree_nonroot)`` of a trie of ``n`` nodes (``deg``: its `degrees`,
    computed here when not given).

    ``node_flags`` is uint32, node j in bits ``4 (j % 8) ..`` of word ``j // 8``: bit 0 linked, bit 1 terminal,
    bit 2 has children; zero nodes pad it to `flag_word_count` words.  The flag vectors' bits past ``n``
    must be clear.
    """
    workers = workers or usable_cpus()
    deg = degrees(louds, n, workers) if deg is None else deg
    out = np.zeros(flag_word_count(n), dtype=np.uint32)
    cuts = list(range(0, n, CHUNK_NODES)) + [n]

    def one(k: int) -> tuple[int, int]:
        a, b = cuts[k], cuts[k + 1]
        d = deg[a:b]
        kids = np.packbits(d > 0, bitorder="little")
        w = out[a >> 3 : (a >> 3) + kids.size]
        np.bitwise_or(_SPREAD[_bytes(linked, a, b)], _SPREAD[_bytes(terminal, a, b)] << np.uint32(1), out=w)
        w |= _SPREAD[kids] << np.uint32(2)
        rest = d[1:] if a == 0 else d
        return int(d.max()), int(rest.max()) if rest.size else 0

    parts = in_parallel([partial(one, k) for k in range(len(cuts) - 1)], workers)
    return out, max(p[0] for p in parts), max(p[1] for p in parts)


def tree_height(louds: BitVector, n: int, limit: int) -> int:
    """Levels below the root (0 for a lone root), counted up to ``limit + 1`` (one select0 per level)."""
    b, height = 1, 0  # level `height` is nodes [a, b); its children are [b, end of node b - 1)
    while height <= limit:
        c = _code_start(louds, b) - b + 1  # ones before node b's code = children of nodes < b
        if c <= b or c > n:
            break
        b, height = c, height + 1
    return height


def max_plain_depth(louds: BitVector, linked: BitVector, starts: np.ndarray, limit: int,
                    workers: int | None = None, deg: np.ndarray | None = None) -> int:
    """Tokens on the longest root-to-node path (the longest keyword in a valid trie), level by level, each
    level in pieces of `CHUNK_NODES` parents on threads; stops early once it passes ``limit``.
    ``starts`` are the decoded ``link_starts``; ``deg`` the `degrees` (computed here when not given)."""
    workers = workers or usable_cpus()
    n = linked.nbits
    deg = degrees(louds, n, workers) if deg is None else deg
    # int32 where no depth can overflow it: each level adds at most 1 + the longest tail to a depth <= limit
    dt = np.int32 if limit < 2**30 and (starts.size == 0 or int(starts[-1]) < 2**30) else np.int64
    tails = np.diff(starts).astype(dt)

    def piece(pd: np.ndarray, d: np.ndarray, first: int) -> np.ndarray:
        """Plain depths of the children (ids from ``first``) of parents with depths ``pd``, degrees ``d``."""
        child = np.repeat(pd, d)
        child += 1
        lk = _bits(linked, first, first + child.size)
        r0 = int(linked.rank1(np.array([first]))[0])
        child[lk] += tails[r0 : r0 + int(np.count_nonzero(lk))]
        return child

    pd = np.zeros(1, dtype=dt)
    a, b, best = 0, 1, 0
    while best <= limit and b > a:
        cuts = list(range(a, b, CHUNK_NODES)) + [b]
        sums = [int(deg[cuts[k] : cuts[k + 1]].sum()) for k in range(len(cuts) - 1)]
        firsts = np.concatenate(([b], b + np.cumsum(sums)))
        if int(firsts[-1]) > n:
            raise ValueError(f"the children of nodes [{a}, {b}) run past the {n} nodes")
        tasks = [partial(piece, pd[cuts[k] - a : cuts[k + 1] - a], deg[cuts[k] : cuts[k + 1]], int(firsts[k]))
                 for k in range(len(cuts) - 1)]
        parts = in_parallel(tasks, workers)
        pd = np.concatenate(parts) if len(parts) > 1 else parts[0]
        a, b = b, b + pd.size
        if pd.size:
            best = max(best, int(pd.max()))
    return best
