"""Query generator version 2: the workload model of `datasets.queries` with per-query work independent of N.

Version 1 draws one uniform per member of the query's topic (tens of millions at 800M keywords) and keeps
an N x T token matrix, a stable argsort of the library and per-depth `np.unique` sorts.  Version 2 draws
the same distributions with per-query work proportional to the samples:

* **relevant keywords and topic sample** (Efraimidis-Spirakis keys ``log(u) / length ** bias`` sharing one
  ``u`` per member, as in version 1): within one length class all members have the same weight, so the
  class's top keys belong to its largest ``u``; those are drawn as order statistics (the largest of m
  uniforms is ``v ** (1 / m)``, the next one is the largest of m - 1 below it, ...) and given to a
  uniformly random ordered subset of the class.  The top keys of the whole topic are among the classes'
  top ``max(num_relevant, topic_sample)``: the same joint law, with O(K) draws per length class;
* **background keywords** (with replacement, weight ``length ** bias``): uniform ids accepted with
  probability ``weight / max weight`` (exact; the expected number of draws per keyword is
  ``max weight / mean weight``, a property of the length distribution, not of N);
* **canonical ids** of the relevant keywords: one pass over the keyword hashes for all queries at once,
  instead of a stable argsort of the library.

One-off passes over the library run over ranges of keywords on threads, none repeated per query, their
results independent of the thread count: the largest token; one fused pass (`datasets._library_pass`:
lengths, keyword hashes, the library fingerprint, token counts per depth, from one read of each token; on
the GPU with ``device="gpu"``, or ``"auto"`` where cupy finds one: `datasets._library_pass_gpu`, the same
facts bit for bit);
the members of the chosen topics by length (first tokens looked up in a table of the chosen topics); the
canonical ids.  ``generate_queries(..., timings=dict)`` reports the seconds of each.
"""

from __future__ import annotations

import time
from functools import partial

import numpy as np

from flashtrie.cpus import in_parallel, usable_cpus
from flashtrie.errors import InputError
from flashtrie.keywords import KeywordSet
from flashtrie.limits import PAD_TOKEN

from ._hashing import ROOT_HASH, child_hash
from ._library_pass import PIECE, LibraryFacts, library_pass

__all__ = ["VERSION", "DEVICES", "ScaledLibrary", "max_token", "check_device", "run_library_pass"]

#: Where the library pass may run: the GPU where cupy and a GPU are present ("auto"), or always one of them.
DEVICES = ("auto", "cpu", "gpu")

VERSION = "flashtrie.datasets.queries/2"
_RANGE = 1 << 20  # keywords per task, at least
_TABLE_MAX = 1 << 26  # `prepare_topics` looks first tokens up in a table below this largest token
_CANON_BITS = 22  # the prefilter table of `canonical` (4M flags)


def max_token(keywords: KeywordSet, threads: int | None = None) -> int:
    """The largest token of a library (0 for none), over ranges of tokens on threads."""
    tok = keywords.tokens
    threads = usable_cpus() if threads is None else max(1, int(threads))
    step = max(1 << 22, -(-tok.size // (4 * threads)))
    def part(s: int) -> int:
        return int(tok[s : s + step].max())

    return max(in_parallel([partial(part, s) for s in range(0, tok.size, step)], threads), default=0)


def pass_key(device: str) -> str:
    """The `timings` key of the library pass that ran on ``device`` ("cpu" or "gpu")."""
    return f"library pass on the {device.upper()} (lengths, hashes, token counts per depth)"


def check_device(device: str) -> str:
    """``device`` itself, or an `InputError` naming it and the choices."""
    if device not in DEVICES:
        raise InputError(f"device: expected one of {list(DEVICES)}, got {device!r}")
    return device


def run_library_pass(keywords: KeywordSet, num_steps: int, top: int, threads: int,
                     device: str = "auto") -> tuple[LibraryFacts, str]:
    """`library_pass` on the GPU ("gpu", or "auto" where cupy finds one) or the CPU: the facts and "gpu"/"cpu".

    Both give the same facts bit for bit; "gpu" raises `flashtrie.errors.DeviceError` where there is none.
    """
    from flashtrie.errors import DeviceError

    if check_device(device) != "cpu":
        from ._library_pass_gpu import library_pass_gpu

        try:
            return library_pass_gpu(keywords, num_steps, top), "gpu"
        except DeviceError:
            if device == "gpu":
                raise
    return library_pass(keywords, num_steps, top, threads), "cpu"


class ScaledLibrary:
    """What the version-2 generator needs of a library: built once, then O(K) work per query."""

    def __init__(self, keywords: KeywordSet, num_steps: int, topic_depth: int, popularity_power: float,
                 popular_pool: int, threads: int | None = None, timings: dict[str, float] | None = None,
                 device: str = "auto") -> None:
        self.ks = keywords
        self.threads = usable_cpus() if threads is None else max(1, int(threads))
        n = len(keywords)
        self.n = n
        self.topic_depth = topic_depth
        self.cols = max(num_steps, topic_depth)
        step = max(_RANGE, -(-n // (4 * self.threads)))
        self.ranges = [(s, min(s + step, n)) for s in range(0, n, step)]
        timings = {} if timings is None else timings
        if device == "gpu":  # no GPU: say so before the passes over the library
            from ._library_pass_gpu import pass_cupy

            pass_cupy()
        t0 = time.perf_counter()
        self.max_token = max_token(keywords, self.threads)
        t1 = time.perf_counter()
        facts, self.device = run_library_pass(keywords, num_steps, self.max_token, self.threads, device)
        t2 = time.perf_counter()
        timings.update({"largest token": timings.get("largest token", 0.0) + t1 - t0,
                        pass_key(self.device): t2 - t1})
        self.lengths, self.full, self.fingerprint = facts.lengths, facts.full, facts.fingerprint
        self.present_lengths = np.flatnonzero(facts.length_counts)
        self.depth_tokens: list[np.ndarray] = []
        self.depth_weights: list[np.ndarray] = []
        first_counts = facts.depth_counts[0]
        for tok, cnt in facts.depth_counts:
            o = np.argsort(-cnt, kind="stable")[:popular_pool]
            self.depth_tokens.append(tok[o])
            self.depth_weights.append(cnt[o].astype(np.float64) ** popularity_power)
        if topic_depth == 1:
            self.group_keys, self.group_sizes = first_counts
        else:
            keys = np.concatenate([self._group_key(s, e)[1] for s, e in self.ranges])
            self.group_keys, self.group_sizes = np.unique(keys, return_counts=True)
        timings["topic sizes"] = time.perf_counter() - t2
        if self.group_sizes.size == 0:
            raise InputError(f"topic_depth: no keyword has {topic_depth} or more tokens")
        self._members: dict[int, list[tuple[int, np.ndarray]]] = {}

    # ------------------------------------------------------------------ one-off passes (threaded)
    def _map(self, fn) -> list:
        return in_parallel([partial(fn, s, e) for s, e in self.ranges], self.threads)

    def _column(self, s: int, e: int, d: int) -> tuple[np.ndarray, np.ndarray]:
        """Ids in [s, e) of the keywords longer than d, and their token at depth d."""
        ids = np.flatnonzero(self.lengths[s:e] > d) + s
        return ids, self.ks.tokens[self.ks.offsets[ids] + d]

    def _group_key(self, s: int, e: int) -> tuple[np.ndarray, np.ndarray]:
        """Ids in [s, e) of the keywords with a topic (``topic_depth`` tokens or more) and their group key."""
        if self.topic_depth == 1:
            ids, tok = self._column(s, e, 0)
            return ids, tok.astype(np.uint64)
        ids = np.flatnonzero(self.lengths[s:e] >= self.topic_depth) + s
        key = np.full(ids.size, ROOT_HASH, dtype=np.uint64)
        for d in range(self.topic_depth):
            key = child_hash(key, self.ks.tokens[self.ks.offsets[ids] + d])
        return ids, key

    def prepare_topics(self, groups: np.ndarray) -> None:
        """Collect, in one pass, the members of the given groups by length (ascending ids in each)."""
        groups = np.unique(np.asarray(groups, dtype=np.int64))
        keys = self.group_keys[groups].astype(np.uint64)  # ascending, like group_keys
        nlen = int(self.present_lengths.max()) + 1

        # topic_depth 1: the group slot of each first token from a table (-1: not a chosen group)
        slot_of = None
        if self.topic_depth == 1 and self.max_token < _TABLE_MAX:
            slot_of = np.full(self.max_token + 1, -1, dtype=np.int32)
            slot_of[keys.astype(np.int64)] = np.arange(keys.size, dtype=np.int32)

        def hits(s: int, e: int) -> tuple[np.ndarray, np.ndarray]:
            """Ids in [s, e) of the members of the chosen groups, and their group slot."""
            if slot_of is None:
                ids, key = self._group_key(s, e)
                at = np.minimum(np.searchsorted(keys, key), keys.size - 1)
                hit = keys[at] == key
                return ids[hit], at[hit]
            found = []
            for a in range(s, e, PIECE):
                slot = slot_of[self.ks.tokens[self.ks.offsets[a : min(a + PIECE, e)]]]
                hit = np.flatnonzero(slot >= 0)
                found.append((hit + a, slot[hit]))
            return np.concatenate([f[0] for f in found]), np.concatenate([f[1] for f in found]).astype(np.int64)

        def one(s: int, e: int) -> tuple[np.ndarray, np.ndarray]:
            ids, at = hits(s, e)
            cls = at * nlen + self.lengths[ids]
            small = np.uint16 if keys.size * nlen <= 1 << 16 else np.int64  # uint16: numpy's radix sort
            o = np.argsort(cls.astype(small), kind="stable")
            return ids[o], cls[o]

        parts = self._map(one)
        for gi, g in enumerate(groups.tolist()):
            by_len = []
            for length in self.present_lengths.tolist():
                c = gi * nlen + length
                pieces = [ids[np.searchsorted(cls, c):np.searchsorted(cls, c, side="right")] for ids, cls in parts]
                members = np.concatenate(pieces)
                if members.size:
                    by_len.append((length, members))
            self._members[g] = by_len

    # ------------------------------------------------------------------ per-query draws (O(K))
    def topic_member(self, g: int) -> int:
        """Some keyword of group g (they all share the topic's tokens)."""
        return int(self._members[g][0][1][0])

    def top_members(self, rng: np.random.Generator, g: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The members of group g with the k largest ``log(u)`` of each length class: (ids, log u, length).

        Per class of m members: the t = min(k, m) largest log-uniforms in decreasing order (order statistics)
        and a uniformly random ordered choice of t members to carry them.
        """
        ids, logu, lens = [], [], []
        for length, members in self._members[g]:
            m = members.size
            t = min(k, m)
            logu.append(np.cumsum(np.log(rng.random(t)) / (m - np.arange(t, dtype=np.float64))))
            ids.append(members[rng.choice(m, size=t, replace=False)])
            lens.append(np.full(t, length, dtype=np.float64))
        return np.concatenate(ids), np.concatenate(logu), np.concatenate(lens)

    def background(self, rng: np.random.Generator, size: int, length_bias: float) -> np.ndarray:
        """``size`` keyword ids from the whole library (with replacement), weighted by ``length ** length_bias``."""
        if size <= 0:
            return np.zeros(0, dtype=np.int64)
        w = self.present_lengths.astype(np.float64) ** length_bias
        weight = np.zeros(int(self.present_lengths.max()) + 1)
        weight[self.present_lengths] = w / w.max()
        out = np.zeros(0, dtype=np.int64)
        while out.size < size:
            draw = rng.integers(0, self.n, size=2 * (size - out.size) + 64)
            ok = rng.random(draw.size) < weight[self.lengths[draw]]
            out = np.concatenate([out, draw[ok]])
        return out[:size]

    def tokens_of(self, ids: np.ndarray) -> np.ndarray:
        """``mat[i, d]``: token d of keyword ``ids[i]``, PAD_TOKEN past its end."""
        ids = np.asarray(ids, dtype=np.int64)
        mat = np.full((ids.size, self.cols), PAD_TOKEN, dtype=np.uint32)
        lens = self.lengths[ids]
        starts = self.ks.offsets[ids]
        for d in range(self.cols):
            has = np.flatnonzero(lens > d)
            if has.size == 0:
                break
            mat[has, d] = self.ks.tokens[starts[has] + d]
        return mat

    def canonical(self, ids: np.ndarray) -> np.ndarray:
        """For each id, the smallest id of an identical keyword (equal full hashes), in one pass for all."""
        ids = np.asarray(ids, dtype=np.int64)
        targets = np.unique(self.full[ids])
        mask = np.uint64((1 << _CANON_BITS) - 1)
        table = np.zeros(1 << _CANON_BITS, dtype=bool)
        table[(targets & mask).astype(np.int64)] = True

        def one(s: int, e: int) -> np.ndarray:
            h = self.full[s:e]
            cand = np.flatnonzero(table[(h & mask).astype(np.int64)])
            at = np.minimum(np.searchsorted(targets, h[cand]), targets.size - 1)
            hit = targets[at] == h[cand]
            best = np.full(targets.size, self.n, dtype=np.int64)
            np.minimum.at(best, at[hit], cand[hit] + s)
            return best

        best = np.min(self._map(one), axis=0)
        return best[np.searchsorted(targets, self.full[ids])]
