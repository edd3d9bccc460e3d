"""Vectorised 64-bit hashing of token prefixes (private helpers shared by the generators)."""

from __future__ import annotations

from functools import partial

import numpy as np

from flashtrie.cpus import in_parallel, usable_cpus
from flashtrie.keywords import KeywordSet

_RANGE = 1 << 20  # keywords per task, at least, of the threaded passes

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)

#: Hash of the empty prefix (the trie root).
ROOT_HASH = np.uint64(0x243F6A8885A308D3)


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser, applied in place to a ``uint64`` array (which is returned)."""
    x ^= x >> _S30
    x *= _M1
    x ^= x >> _S27
    x *= _M2
    x ^= x >> _S31
    return x


def child_hash(parent: np.ndarray | np.uint64, tokens: np.ndarray) -> np.ndarray:
    """Hash of ``prefix + [token]`` from the prefix's hash: a pure function of the token sequence."""
    h = np.multiply(parent, _GOLDEN, dtype=np.uint64)
    h ^= tokens.astype(np.uint64)
    return mix64(h)


def depth_prefix_hashes(keywords: KeywordSet, max_depth: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """For each depth d, ``(ids, hashes)``: the keywords with length > d and the hash of their first d + 1 tokens.

    ``ids`` is ascending ``int64``; the hash of a prefix depends only on its tokens (equal prefixes, equal hashes).
    """
    lengths = keywords.lengths
    starts = keywords.offsets[:-1]
    depth_n = keywords.max_length if max_depth is None else min(max_depth, keywords.max_length)
    out: list[tuple[np.ndarray, np.ndarray]] = []
    ids = np.arange(len(keywords), dtype=np.int64)
    h = np.full(ids.size, ROOT_HASH, dtype=np.uint64)
    for d in range(depth_n):
        keep = lengths[ids] > d
        if not keep.all():
            ids = ids[keep]
            h = h[keep]
        h = child_hash(h, keywords.tokens[starts[ids] + d])
        out.append((ids, h))
    return out


def full_keyword_hashes(keywords: KeywordSet, threads: int | None = None) -> np.ndarray:
    """Hash of each whole keyword (its length is mixed in, so a prefix never equals a longer keyword).

    A pure function of each keyword, computed over ranges of keywords on ``threads`` threads (default:
    every usable core); the result does not depend on the split.
    """
    n = len(keywords)
    offsets = keywords.offsets
    full = np.empty(n, dtype=np.uint64)
    step = max(_RANGE, -(-n // (4 * usable_cpus())))

    def one(s: int) -> None:
        e = min(s + step, n)
        lens = np.diff(offsets[s : e + 1])
        pos = offsets[s:e]
        at = np.arange(s, e, dtype=np.int64)
        h = np.full(e - s, ROOT_HASH, dtype=np.uint64)
        for d in range(int(lens.max()) if e > s else 0):
            keep = lens > d
            if not keep.all():
                ends = ~keep
                full[at[ends]] = h[ends]
                at, lens, pos, h = at[keep], lens[keep], pos[keep], h[keep]
            h = child_hash(h, keywords.tokens[pos + d])
        full[at] = h
        full[s:e] = child_hash(full[s:e], np.diff(offsets[s : e + 1]).astype(np.uint64) + np.uint64(1 << 40))

    in_parallel([partial(one, s) for s in range(0, n, step)], usable_cpus() if threads is None else threads)
    return full


def canonical_ids(full: np.ndarray) -> np.ndarray:
    """From `full_keyword_hashes`: for every keyword the smallest id of an identical keyword (often itself)."""
    order = np.argsort(full, kind="stable")
    srt = full[order]
    run_start = np.ones(srt.size, dtype=bool)
    run_start[1:] = srt[1:] != srt[:-1]
    first = order[np.flatnonzero(run_start)]
    canon = np.empty(full.size, dtype=np.int64)
    canon[order] = first[np.cumsum(run_start) - 1]
    return canon


def fingerprint(full_hashes: np.ndarray) -> str:
    """A 64-bit hex fingerprint of a keyword list from its keywords' full hashes (order counts)."""
    n = full_hashes.size
    step = max(1 << 20, -(-n // (4 * usable_cpus())))

    def part(s: int) -> int:  # xor is associative: ranges on threads give the same value
        full = np.arange(s, min(s + step, n), dtype=np.uint64)
        full *= np.uint64(0x9E3779B97F4A7C15)
        full ^= full_hashes[s : s + step]
        return int(np.bitwise_xor.reduce(mix64(full))) if full.size else 0

    acc = 0
    for x in in_parallel([partial(part, s) for s in range(0, n, step)], usable_cpus()):
        acc ^= x
    return f"{acc ^ n:016x}"
