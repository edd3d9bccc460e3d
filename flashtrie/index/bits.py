"""`BitVector`: a plain bit array with a 1024-bit-block rank directory and sampled select0 hints.

The directory has one uint64 per block of 16 words: bits 0-33 the ones before the block (absolute), bits
34-43 / 44-53 / 54-63 the ones in the block's words [0, 4) / [0, 8) / [0, 12) (its 4-word sub-blocks).
``rank1(i)`` reads the entry and the 4-word sub-block holding bit i (one 32-byte sector on the GPU): the
same two dependent reads as a 256-bit directory, in a quarter of the bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from ..cpus import in_parallel
from ..errors import InputError

__all__ = ["BitVector", "popcount64", "rank_entries", "rank_directory", "select0_hints", "select_in_words",
           "num_words", "ABS_BITS", "BLOCK_WORDS", "HINT_STEP"]

ABS_BITS = 34  # the absolute count of an entry: at most 2**34 - 1 ones in a bit vector
_ABS_MASK = np.uint64((1 << ABS_BITS) - 1)
REL_BITS = 10  # each sub-block count (at most 768 ones)
BLOCK_WORDS = 16  # words per rank-directory entry
SUB_WORDS = 4  # words per sub-block (one 32-byte sector)
BLOCK_BITS = 64 * BLOCK_WORDS
SUB_BITS = 64 * SUB_WORDS
HINT_STEP = 256  # one select0 hint per 256 zeros
#: Words per thread task when a rank directory is built on threads (a multiple of a block's words).
PIECE_WORDS = 1 << 22


def popcount64(words: np.ndarray) -> np.ndarray:
    """Number of set bits of each uint64 (as int64)."""
    return np.bitwise_count(words).astype(np.int64)


def _byte_select_table() -> np.ndarray:
    """``table[b, k]`` = position of the k-th set bit of byte b (8 if absent)."""
    table = np.full((256, 8), 8, dtype=np.int64)
    for b in range(256):
        pos = [i for i in range(8) if b >> i & 1]
        table[b, : len(pos)] = pos
    return table


_SELECT_TABLE = _byte_select_table()
_BYTE_POP = np.array([bin(b).count("1") for b in range(256)], dtype=np.int64)


def select_in_words(words: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Position (0..63) of the k-th (0-based) set bit of each uint64 word; vectorised."""
    w = np.ascontiguousarray(words, dtype=np.uint64)
    k = np.asarray(k, dtype=np.int64)
    by = w.view(np.uint8).reshape(-1, 8)  # little-endian: byte 0 holds bits 0..7
    cum = np.cumsum(_BYTE_POP[by], axis=1)
    byte_idx = (cum <= k[:, None]).sum(axis=1)
    before = np.where(byte_idx > 0, cum[np.arange(len(k)), np.maximum(byte_idx - 1, 0)], 0)
    bval = by[np.arange(len(k)), np.minimum(byte_idx, 7)]
    return byte_idx * 8 + _SELECT_TABLE[bval, k - before]


def num_words(nbits: int) -> int:
    """Words of a bit vector of ``nbits`` bits: at least one zero word of padding, whole 16-word blocks."""
    nwords = (nbits + 63) // 64 + 1
    return nwords + (-nwords) % BLOCK_WORDS


def _sub_rel(entry: np.ndarray, sub: np.ndarray) -> np.ndarray:
    """Ones in the block before its sub-block ``sub`` (0..3), from the directory entries (int64)."""
    shift = (np.uint64(ABS_BITS - REL_BITS) + np.uint64(REL_BITS) * sub.astype(np.uint64))
    rel = (entry >> shift) & np.uint64((1 << REL_BITS) - 1)
    return np.where(sub == 0, 0, rel.astype(np.int64))


def rank_entries(words: np.ndarray, ones_before: int) -> tuple[np.ndarray, int]:
    """Rank-directory entries of the whole 16-word blocks in ``words``, counting ``ones_before`` ones before
    the first, and the ones counted after the last (so a directory can be built or checked in pieces).

    The sub-block counts come from the words' byte popcounts summed in place, two then four at a time
    (wider views of the same bytes), rather than through a reduction over a short axis."""
    pairs = np.bitwise_count(words).view(np.uint16)
    two = pairs >> np.uint16(8)
    two += pairs & np.uint16(0xFF)  # ones in words 2k, 2k + 1 (at most 128)
    quads = two.view(np.uint32)
    subs = quads >> np.uint32(16)
    subs += quads & np.uint32(0xFFFF)  # ones in each 4-word sub-block (at most 256)
    subs = subs.reshape(-1, BLOCK_WORDS // SUB_WORDS)
    rel1 = subs[:, 0].astype(np.uint64)
    rel2 = rel1 + subs[:, 1]
    rel3 = rel2 + subs[:, 2]
    abs_before = np.empty(subs.shape[0] + 1, dtype=np.uint64)
    abs_before[0] = ones_before
    np.cumsum(rel3 + subs[:, 3], out=abs_before[1:])
    abs_before[1:] += np.uint64(ones_before)
    entries = abs_before[:-1].copy()
    for k, rel in enumerate((rel1, rel2, rel3)):
        entries |= rel << np.uint64(ABS_BITS + REL_BITS * k)
    return entries, int(abs_before[-1])


def _ones(words: np.ndarray) -> int:
    return int(np.bitwise_count(words).sum(dtype=np.int64))


def rank_directory(words: np.ndarray, workers: int = 1) -> tuple[np.ndarray, int]:
    """`rank_entries` of all of ``words`` (whole blocks) and the ones in them, in pieces of `PIECE_WORDS`
    on up to ``workers`` threads: each piece's ones first, then each piece's entries from the ones before it."""
    if workers <= 1 or words.size <= PIECE_WORDS:
        return rank_entries(words, 0)
    step = max(BLOCK_WORDS, PIECE_WORDS - PIECE_WORDS % BLOCK_WORDS)  # whole blocks per piece
    pieces = [words[a : a + step] for a in range(0, words.size, step)]
    before = np.cumsum([0] + in_parallel([partial(_ones, p) for p in pieces], workers))
    parts = in_parallel([partial(rank_entries, p, int(before[k])) for k, p in enumerate(pieces)], workers)
    return np.concatenate([e for e, _ in parts]), int(before[-1])


def select0_hints(rank: np.ndarray, nbits: int) -> np.ndarray:
    """The select0 hints of a bit vector with directory ``rank``: the block of every 256th zero, then the last."""
    nblocks = rank.size - 1
    abs_before = (rank & _ABS_MASK).astype(np.int64)
    zeros_before = BLOCK_BITS * np.arange(nblocks + 1, dtype=np.int64) - abs_before
    nzeros = nbits - int(abs_before[-1])
    targets = np.arange(0, max(nzeros, 0), HINT_STEP, dtype=np.int64)
    blocks = np.searchsorted(zeros_before, targets, side="right") - 1
    return np.append(blocks, nblocks - 1).astype(np.uint32)


@dataclass(frozen=True, eq=False)
class BitVector:
    """``nbits`` bits in ``words`` (uint64, bit i in word i >> 6 at bit i & 63, plus a zero padding word).

    ``rank`` has one uint64 per 1024-bit block plus one: bits 0-33 hold the ones before the block,
    bits 34-43 / 44-53 / 54-63 the ones in the block's words [0, 4) / [0, 8) / [0, 12).
    ``select0`` (optional) holds, for every 256th zero, the block that contains it, and the last block.
    """

    words: np.ndarray
    rank: np.ndarray
    nbits: int
    select0_hints: np.ndarray | None = None

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_bools(cls, bools: np.ndarray, *, with_select0: bool = False) -> BitVector:
        bools = np.asarray(bools, dtype=bool)
        nbits = int(bools.size)
        nwords = num_words(nbits)
        packed = np.packbits(bools, bitorder="little")
        buf = np.zeros(nwords * 8, dtype=np.uint8)
        buf[: packed.size] = packed
        words = buf.view(np.uint64)
        return cls.from_words(words, nbits, with_select0=with_select0)

    @staticmethod
    def word_count(nbits: int) -> int:
        """Words of a vector of ``nbits`` bits as `from_bools` lays them out (`num_words`), so that other
        builders (the GPU's) can pack the same words themselves and hand them to `from_words`."""
        return num_words(nbits)

    @classmethod
    def from_words(cls, words: np.ndarray, nbits: int, *, with_select0: bool = False, workers: int = 1) -> BitVector:
        """The vector of ``words`` (`num_words` of them) with its directory, built on up to ``workers`` threads."""
        if words.size % BLOCK_WORDS:
            raise InputError(f"words: {words.size} words is not a whole number of {BLOCK_WORDS}-word blocks")
        entries, total = rank_directory(words, workers)
        if total >= 1 << ABS_BITS:
            raise InputError(f"bit vector: {total:,} ones in {nbits:,} bits is over the rank directory's limit "
                             f"of 2**{ABS_BITS} - 1 ones (34-bit counts)")
        rank = np.append(entries, np.uint64(total))
        hints = select0_hints(rank, nbits) if with_select0 else None
        return cls(words, rank, nbits, hints)

    # ------------------------------------------------------------------ queries (vectorised)
    @property
    def num_ones(self) -> int:
        return int(self.rank[-1] & _ABS_MASK)

    @property
    def num_zeros(self) -> int:
        return self.nbits - self.num_ones

    def get(self, i: np.ndarray) -> np.ndarray:
        i = np.asarray(i, dtype=np.int64)
        return ((self.words[i >> 6] >> (i & 63).astype(np.uint64)) & np.uint64(1)).astype(bool)

    def rank1(self, i: np.ndarray) -> np.ndarray:
        """Ones in bits [0, i), for 0 ≤ i ≤ nbits: two reads (the directory entry, and the 4-word sub-block
        that holds bit i: its words before bit i's, and the part of that word below bit i)."""
        i = np.asarray(i, dtype=np.int64)
        entry = self.rank[i >> 10]
        rel = _sub_rel(entry, (i >> 8) & 3)
        base = (i >> 6) & ~np.int64(3)
        k = (i >> 6) & 3
        low = (i & 63).astype(np.uint64)
        within = popcount64(self.words[i >> 6] & ((np.uint64(1) << low) - np.uint64(1)))
        for q in range(SUB_WORDS - 1):  # the whole words of the sub-block before bit i's
            within += np.where(q < k, popcount64(self.words[base + q]), 0)
        return (entry & _ABS_MASK).astype(np.int64) + rel + within

    def _zeros_before_block(self, b: np.ndarray) -> np.ndarray:
        return BLOCK_BITS * b - (self.rank[b] & _ABS_MASK).astype(np.int64)

    def _select_in_block(self, b: np.ndarray, r: np.ndarray, zeros: bool) -> np.ndarray:
        """Position of the r-th (0-based) zero (``zeros``) or one inside block ``b``: the sub-block from the
        entry's relative counts, then the word from the sub-block's popcounts, then the bit."""
        entry = self.rank[b]
        sub = np.zeros_like(r)
        before = np.zeros_like(r)  # zeros (or ones) in the block before sub-block `sub`
        for s in (1, 2, 3):
            ones = _sub_rel(entry, np.full_like(r, s))
            cnt = SUB_BITS * s - ones if zeros else ones
            take = cnt <= r
            sub = np.where(take, s, sub)
            before = np.where(take, cnt, before)
        r = r - before
        base = BLOCK_WORDS * b + SUB_WORDS * sub
        word_idx = base.copy()
        for q in range(1, SUB_WORDS):  # the sub-block's words before the one holding the bit
            cnt = popcount64(self.words[base + q - 1])
            cnt = 64 - cnt if zeros else cnt
            step = (word_idx == base + q - 1) & (cnt <= r)
            r = np.where(step, r - cnt, r)
            word_idx = np.where(step, base + q, word_idx)
        w = self.words[word_idx]
        return word_idx * 64 + select_in_words(~w if zeros else w, r)

    def select0(self, j: np.ndarray) -> np.ndarray:
        """Position of zero number j (0-based), through the hints and a binary search between them."""
        if self.select0_hints is None:
            raise ValueError("this bit vector was built without select0 hints")
        j = np.asarray(j, dtype=np.int64)
        h = j // HINT_STEP
        lo = self.select0_hints[h].astype(np.int64)
        hi = self.select0_hints[h + 1].astype(np.int64)
        # last block b in [lo, hi] with zeros_before(b) <= j
        while True:
            active = lo < hi
            if not active.any():
                break
            mid = (lo + hi + 1) >> 1
            ok = self._zeros_before_block(mid) <= j
            lo = np.where(active & ok, mid, lo)
            hi = np.where(active & ~ok, mid - 1, hi)
        return self._select_in_block(lo, j - self._zeros_before_block(lo), zeros=True)

    def select1(self, j: np.ndarray) -> np.ndarray:
        """Position of one number j (0-based, ``0 <= j < num_ones``): a binary search over the directory's
        absolute counts (one pass over the directory per call), then the sub-block, the word and the bit."""
        j = np.asarray(j, dtype=np.int64)
        abs_counts = (self.rank & _ABS_MASK).astype(np.int64)
        b = np.searchsorted(abs_counts, j, side="right") - 1  # last block with ones_before(b) <= j
        return self._select_in_block(b, j - abs_counts[b], zeros=False)

    def padding_is_clear(self) -> bool:
        """True when every bit at or past ``nbits`` is zero (reads only the last words)."""
        w0 = self.nbits >> 6
        tail = self.words[w0:]
        if tail.size == 0:
            return False
        first = int(tail[0]) >> (self.nbits & 63)
        return first == 0 and not bool(tail[1:].any())

    def to_bools(self) -> np.ndarray:
        return np.unpackbits(self.words.view(np.uint8), bitorder="little")[: self.nbits].astype(bool)

    @property
    def nbytes(self) -> int:
        hints = 0 if self.select0_hints is None else self.select0_hints.nbytes
        return int(self.words.nbytes + self.rank.nbytes + hints)
