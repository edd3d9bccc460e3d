"""Per-node facts derived from the bit vectors: the GPU's flag nibbles and the largest degrees.

The builder stores the largest degrees in the metadata (``max_degree``, ``max_degree_nonroot``); the node
flags are not stored (index format 3): `NarrowLoudsIndex.node_flags` derives them here on first use, and the
GPU derives its own copy at upload (``gpu_impl/kernels/node_flags.cu``, the same words).  ``load(verify=True)``
recomputes the degrees in its own pass over the LOUDS (`louds_pass`).  Everything works on ranges of nodes
(multiples of 8) on threads; numpy releases the GIL.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from ..cpus import in_parallel, usable_cpus
from .bits import BitVector

__all__ = ["flag_word_count", "degrees", "node_flags", "NODE_LINKED", "NODE_TERMINAL", "NODE_HAS_CHILDREN"]

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
               workers: int | None = None) -> tuple[np.ndarray, int, int]:
    """``(node_flags, max_degree, max_degree_nonroot)`` of a trie of ``n`` nodes (its `degrees` on threads).

    ``node_flags`` is uint32, node j in bits ``4 (j % 8) ..`` of word ``j // 8``: bit 0 linked, bit 1 terminal,
    bit 2 has children; zero nodes pad it to `flag_word_count` words.  The flag vectors' bits past ``n``
    must be clear.
    """
    workers = workers or usable_cpus()
    deg = degrees(louds, n, workers)
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
