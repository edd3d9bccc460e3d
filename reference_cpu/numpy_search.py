"""`NumpySearcher`: the exact search of docs/semantics.md, vectorised over queries x beams x proposals.

This is the bit-for-bit reference for the GPU kernels and the fast CPU path.  The only Python loops are
over decoding steps and (for forced prefixes) over queries.

State of a hypothesis: ``(q, node, off, s, L, r)``; ``off`` tokens of ``E_node`` are consumed
(``off == edge_len``: exactly at the node; the root is ``(0, 0)``).  Per step, every hypothesis is
intersected with its row of proposals by one of three vectorised paths, all of which yield the same
candidates:

* mid-edge: the only possible next token is ``e_off``; look ``q << 32 | e_off`` up in the row keys;
* at a node of degree ``d <= nvalid`` (valid proposals in the row): enumerate its children and look
  ``q << 32 | label`` up in the row keys;
* at a node of degree ``d > nvalid``: pair it with each valid proposal and look ``node << 32 | token``
  up in the globally sorted child keys ``parent << 32 | label``.

The pair path first drops most absent probes with a one-hash Bloom filter over the child keys, then
binary-searches the survivors in sorted order.  Which path a hypothesis takes never changes the result.

Frontier and pool are kept with 64-bit integer sort keys built from ``desc_key32`` (see
``flashtrie.scoring``), so ties are broken exactly as the contract says: frontier key
``desc_key32(s) << 32 | r << 16 | xrank`` (xrank = the token's position in its sorted row, which orders
like the token; packed with q into one uint64 when the bits fit, else lexsorted), pool key
``(desc_key32(n), t, r, xrank)``, merged stably with older entries first.
The contract's early stop is applied per query (``early_stop=True``, output identical either way).

``collect_stats=True`` records per-step workload counts of the last call in ``last_stats`` (a
`SearchStats`; definitions there).  Off by default: the step loop then only tests one ``None``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

from flashtrie.cpus import in_parallel, usable_cpus
from flashtrie.errors import InputError
from flashtrie.index import NarrowLoudsIndex
from flashtrie.proposals import Proposals
from flashtrie.scoring import desc_key32, length_norm_table, pool_closed, sort_rows, threshold32
from flashtrie.search_core import check_request
from flashtrie.search_types import SearchConfig, SearchResult, SearchStats

__all__ = ["NumpySearcher", "SearchStats"]

_U64 = np.uint64
_SH32 = np.uint64(32)
_LO32 = np.uint64(0xFFFF_FFFF)
_BLOOM_MUL = np.uint64(0x9E37_79B9_7F4A_7C15)


def _excl_cumsum(counts: np.ndarray) -> np.ndarray:
    """Exclusive prefix sum (int64)."""
    out = np.zeros(counts.size, dtype=np.int64)
    if counts.size > 1:
        np.cumsum(counts[:-1], out=out[1:])
    return out


def _segment_iota(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For segments ``[starts[i], starts[i] + counts[i])``: (segment index of each item, item value)."""
    counts = counts.astype(np.int64, copy=False)
    total = int(counts.sum())
    seg = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
    val = np.arange(total, dtype=np.int64) + np.repeat(starts.astype(np.int64) - _excl_cumsum(counts), counts)
    return seg, val


def _lookup(sorted_keys: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of ``keys`` in ``sorted_keys`` (unique, uint64): (mask of found, their positions)."""
    if sorted_keys.size == 0 or keys.size == 0:
        return np.zeros(keys.size, dtype=bool), np.zeros(0, dtype=np.int64)
    pos = np.searchsorted(sorted_keys, keys)
    np.minimum(pos, sorted_keys.size - 1, out=pos)
    found = sorted_keys[pos] == keys
    return found, pos[found]


def _group_ranks(groups_sorted: np.ndarray) -> np.ndarray:
    """Rank of each item within its run of equal values in a sorted array."""
    n = groups_sorted.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    idx = np.arange(n, dtype=np.int64)
    start = np.zeros(n, dtype=np.int64)
    brk = np.flatnonzero(groups_sorted[1:] != groups_sorted[:-1]) + 1
    start[brk] = brk
    np.maximum.accumulate(start, out=start)
    return idx - start


#: A batch of more queries than this runs in parts of at most this many (1M keywords, beam 100, 2-core
#: box: 0.66 ms per query in batches of 256, 0.95 ms in one batch of 1024).
MAX_PART_QUERIES = 256
#: A thread gets at least this many queries (same box: 2 threads lose below 64 queries per call,
#: gain 1.36x at 128 and 1.7x at 512).
MIN_THREAD_QUERIES = 64


class NumpySearcher:
    """Exact trie-constrained beam search over a `NarrowLoudsIndex`, in vectorised numpy."""

    name = "numpy"

    def __init__(self, index: Any, *, early_stop: bool = True, collect_stats: bool = False,
                 threads: int | None = 1) -> None:
        """Decode the index once into flat helper arrays (per node: child range, label, edge, keyword).

        ``early_stop`` drops a query's frontier once no later candidate can enter its pool (the
        contract's allowed shortcut; the output is identical either way).  ``collect_stats`` fills
        ``last_stats`` (a `SearchStats`) on every search; it never changes results.  ``threads``: a batch
        of at least 2 x `MIN_THREAD_QUERIES` queries is split into up to this many parts searched on threads
        (numpy releases the GIL in its array work); None = one per core.  Queries are independent, so the
        results are identical.
        """
        if not isinstance(index, NarrowLoudsIndex):
            raise InputError(f"index: expected a flashtrie.NarrowLoudsIndex (NarrowLoudsIndex.build(keywords) or "
                             f".load(path)), got {type(index).__name__}")
        if threads is None:
            threads = usable_cpus()
        if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
            raise InputError(f"threads: expected an integer >= 1 or None, got {threads!r}")
        self.threads = int(threads)
        self.index = index
        self.early_stop = bool(early_stop)
        self.collect_stats = bool(collect_stats)
        #: counts of the last search when ``collect_stats`` is on, else None
        self.last_stats: SearchStats | None = None
        n = int(index.num_nodes)
        nodes = np.arange(n, dtype=np.int64)
        first, end = index.child_range(nodes)
        self._first = np.asarray(first, dtype=np.int64)
        self._deg = np.asarray(end, dtype=np.int64) - self._first
        self._label = np.asarray(index.labels(nodes), dtype=np.uint32)
        elen = np.array(index.edge_lengths(nodes), dtype=np.int64)
        if n:
            elen[0] = 0  # the root has no incoming edge; (0, 0) is "at the node"
        self._elen = elen
        self._term = np.asarray(index.is_terminal(nodes), dtype=bool)
        self._kwid = np.asarray(index.keyword_ids_of(nodes), dtype=np.int64)
        # Edge tails e_1 .. e_{m-1} of every node, concatenated: e_o of node j is tail[tail_start[j] + o - 1].
        tail_len = np.maximum(elen - 1, 0)
        self._tail_start = _excl_cumsum(tail_len)
        tnode, toff = _segment_iota(np.ones(n, dtype=np.int64), tail_len)
        self._tail = (np.asarray(index.edge_tokens(tnode, toff), dtype=np.uint32) if tnode.size
                      else np.zeros(0, dtype=np.uint32))
        # parent << 32 | label over nodes 1..n-1: globally sorted (level order, sorted children).
        parent = np.repeat(nodes, self._deg)
        if parent.size != max(n - 1, 0):
            raise ValueError(f"index: child ranges cover {parent.size} nodes, expected {max(n - 1, 0)}")
        self._ckeys = (parent.astype(_U64) << _SH32) | self._label[1:].astype(_U64)
        if self._ckeys.size > 1 and not bool(np.all(self._ckeys[1:] > self._ckeys[:-1])):
            raise ValueError("index: child keys (parent, label) are not strictly increasing in node order")
        # One-hash Bloom filter over the child keys (16 bits per key, ~6 % false positives): the pair path
        # drops most absent (node, token) probes with one gather from a cache-sized bit array.
        bloom_bits = max(10, (16 * max(self._ckeys.size, 1) - 1).bit_length())
        self._bloom_shift = np.uint64(64 - bloom_bits)
        self._bloom = np.zeros(1 << (bloom_bits - 6), dtype=np.uint64)
        h = self._bloom_hash(self._ckeys)
        np.bitwise_or.at(self._bloom, h >> np.uint64(6), np.uint64(1) << (h & np.uint64(63)))
        self._max_len = max(int(index.max_keyword_length), 1)
        #: how many candidates each intersection path produced in the last search (for tests/diagnostics)
        self.path_counts: dict[str, int] = {"mid": 0, "enum": 0, "pair": 0}

    def _bloom_hash(self, keys: np.ndarray) -> np.ndarray:
        return (keys * _BLOOM_MUL) >> self._bloom_shift

    # ------------------------------------------------------------------------------------------ search
    def search(self, proposals: Proposals, config: SearchConfig,
               prefixes: Sequence[Sequence[int]] | None = None) -> SearchResult:
        """Run the search of docs/semantics.md for every query at once."""
        pref = check_request(proposals, config, prefixes)
        q_n, t_n, k_n = proposals.shape
        result = SearchResult.empty(q_n, config.results)
        paths = {"mid": 0, "enum": 0, "pair": 0}
        counts = np.zeros((t_n, len(SearchStats.COLUMNS)), dtype=np.int64) if self.collect_stats else None
        steps_run = 0
        if q_n and t_n and k_n and self.index.num_nodes:
            # big batches run in parts (cache-sized work); threads only for parts big enough to pay for them
            parts = max(-(-q_n // MAX_PART_QUERIES), min(self.threads, q_n // MIN_THREAD_QUERIES), 1)
            if parts == 1:
                steps_run = self._run_part(proposals.tokens, proposals.logprobs, config, pref, result, counts, paths)
            else:
                steps_run = self._run_parts(proposals, config, pref, result, counts, paths, parts)
        self.path_counts = paths
        self.last_stats = (None if counts is None else
                           SearchStats(backend="numpy", queries=q_n, beam_width=config.beam_width, steps=t_n,
                                       steps_run=steps_run,
                                       counts=dict(zip(SearchStats.COLUMNS, counts.T, strict=True)),
                                       early_stop=self.early_stop))
        return result

    def _run_parts(self, proposals: Proposals, config: SearchConfig, pref: list[np.ndarray] | None,
                   result: SearchResult, counts: np.ndarray | None, paths: dict[str, int], parts: int) -> int:
        """`_run_part` over ``parts`` contiguous ranges of queries, on up to ``self.threads`` threads; merges
        the results and counts."""
        q_n = proposals.num_queries
        bounds = [q_n * i // parts for i in range(parts + 1)]

        def one(a: int, b: int) -> tuple[SearchResult, np.ndarray | None, dict[str, int], int]:
            res = SearchResult.empty(b - a, config.results)
            cnt = None if counts is None else np.zeros_like(counts)
            pc = dict.fromkeys(paths, 0)
            st = self._run_part(proposals.tokens[a:b], proposals.logprobs[a:b], config,
                                None if pref is None else pref[a:b], res, cnt, pc)
            return res, cnt, pc, st

        done = in_parallel([partial(one, a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)],
                           self.threads)
        steps_run = 0
        for a, b, (res, cnt, pc, st) in zip(bounds[:-1], bounds[1:], done, strict=True):
            for name in ("keyword_ids", "scores", "norm_scores", "lengths", "num_results"):
                getattr(result, name)[a:b] = getattr(res, name)
            if counts is not None and cnt is not None:
                counts += cnt
            for k, v in pc.items():
                paths[k] += v
            steps_run = max(steps_run, st)
        return steps_run

    def _run_part(self, tokens: np.ndarray, logprobs: np.ndarray, config: SearchConfig,
                  pref: list[np.ndarray] | None, result: SearchResult, counts: np.ndarray | None,
                  paths: dict[str, int]) -> int:
        # float32 overflow to -inf and subnormal results are part of the contract, not errors
        with np.errstate(over="ignore", under="ignore"):
            return self._run(tokens, logprobs, config, pref, result, counts, paths)

    def _run(self, tokens: np.ndarray, logprobs: np.ndarray, config: SearchConfig, pref: list[np.ndarray] | None,
             result: SearchResult, counts: np.ndarray | None, paths: dict[str, int]) -> int:
        """The step loop over queries ``tokens[Q, T, K]`` (validated); fills ``result`` (and ``counts``, see
        `SearchStats`, and the path counters ``paths``) in place; returns the steps run."""
        q_n, t_n, k_n = tokens.shape
        big_r, big_b = config.results, config.beam_width
        tau = threshold32(config.token_threshold)
        sigma = threshold32(config.score_threshold)
        ln_table = length_norm_table(config.length_norm, self._max_len)

        # ---- start states
        hq, hnode, hoff, hlen = self._start_states(pref, q_n)
        hs = np.zeros(hq.size, dtype=np.float32)
        hr = np.zeros(hq.size, dtype=np.int64)

        # ---- rows sorted by token: xrank = position in the sorted row (padding last)
        rows = sort_rows(tokens, logprobs, tau, with_later_max=self.early_stop)
        stok, slp, svalid, suffix_max = rows.tokens, rows.logprobs, rows.valid, rows.later_max
        ln_min = np.float32(ln_table[1:].min())

        # bits for compact (q, key) sort keys
        r_bits = max(int(big_b - 1).bit_length(), 1)
        x_bits = max(int(k_n - 1).bit_length(), 1)
        q_bits = max(int(q_n - 1).bit_length(), 1)

        # ---- results pool, sorted by (q, pool key); pdk = desc_key32(n)
        pq = np.zeros(0, dtype=np.int64)
        pdk = np.zeros(0, dtype=np.uint32)
        pkw = np.zeros(0, dtype=np.int64)
        ps = np.zeros(0, dtype=np.float32)
        pn = np.zeros(0, dtype=np.float32)
        plen = np.zeros(0, dtype=np.int64)

        steps_run = 0
        for t in range(t_n):
            if hq.size == 0:
                break
            steps_run += 1
            # valid proposals of row t of every query, as sorted keys q << 32 | token
            vq, vx = np.nonzero(svalid[:, t, :])
            rkeys = (vq.astype(_U64) << _SH32) | stok[vq, t, vx].astype(_U64)
            rlp = slp[vq, t, vx]
            nvalid = np.bincount(vq, minlength=q_n).astype(np.int64)
            rstart = _excl_cumsum(nvalid)

            ch, cpos, cnode, coff = self._expand(hq, hnode, hoff, rkeys, nvalid, rstart, paths)
            if counts is not None:
                counts[t, 0] = nvalid[hq].sum()
                counts[t, 1] = ch.size
            if ch.size == 0:
                hq = ch
                break
            s = hs[ch] + rlp[cpos]
            keep = s > sigma
            if not bool(keep.all()):
                ch, cpos, cnode, coff, s = ch[keep], cpos[keep], cnode[keep], coff[keep], s[keep]
            if counts is not None:
                counts[t, 2] = ch.size
            cq = hq[ch]
            cr = hr[ch]
            cx = vx[cpos].astype(np.int64)
            clen = hlen[ch] + 1
            celen = self._elen[cnode]
            at_node = coff == celen
            whole = at_node & self._term[cnode]
            has_child = ~at_node | (self._deg[cnode] > 0)

            # ---- pool: offer whole keywords, keep the R best per query (old entries first on equal n)
            w = np.flatnonzero(whole)
            if w.size:
                n_w = s[w] * ln_table[clen[w]]
                dk_w = desc_key32(n_w)
                o = self._group_order(cq[w], dk_w, cr[w], cx[w], q_bits, r_bits, x_bits)
                w = w[o]
                nq = np.concatenate([pq, cq[w]])
                ndk = np.concatenate([pdk, dk_w[o]])
                m = np.argsort((nq.astype(_U64) << _SH32) | ndk.astype(_U64), kind="stable")
                nq, ndk = nq[m], ndk[m]
                sel = np.flatnonzero(_group_ranks(nq) < big_r)
                m = m[sel]
                pq, pdk = nq[sel], ndk[sel]
                pkw = np.concatenate([pkw, self._kwid[cnode[w]]])[m]
                ps = np.concatenate([ps, s[w]])[m]
                pn = np.concatenate([pn, n_w[o]])[m]
                plen = np.concatenate([plen, clen[w]])[m]

            # ---- next frontier: the B best candidates with a child, per query
            f = np.flatnonzero(has_child)
            if f.size == 0 or t == t_n - 1:
                if counts is not None and f.size:  # |F_T|: B best with a child per query, not built
                    counts[t, 3] = np.minimum(np.bincount(cq[f]), big_b).sum()
                hq = f
                break
            o = self._group_order(cq[f], desc_key32(s[f]), cr[f], cx[f], q_bits, r_bits, x_bits)
            f = f[o]
            ranks = _group_ranks(cq[f])
            sel = ranks < big_b
            f = f[sel]
            hq, hnode, hoff, hs, hlen = cq[f], cnode[f], coff[f], s[f], clen[f]
            hr = ranks[sel]
            if suffix_max is not None and pq.size:
                live = ~self._finished(hq, hs, hr, pq, pn, suffix_max[:, t + 1], ln_min, q_n, big_r)
                if not bool(live.all()):
                    hq, hnode, hoff, hs, hlen, hr = hq[live], hnode[live], hoff[live], hs[live], hlen[live], hr[live]
            if counts is not None:
                counts[t, 3] = hq.size

        # ---- output
        if pq.size:
            col = _group_ranks(pq)
            result.keyword_ids[pq, col] = pkw
            result.scores[pq, col] = ps
            result.norm_scores[pq, col] = pn
            result.lengths[pq, col] = plen
            result.num_results[:] = np.bincount(pq, minlength=q_n).astype(np.int32)
        return steps_run

    # ------------------------------------------------------------------------------------- helpers
    def _start_states(self, pref: list[np.ndarray] | None,
                      q_n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(q, node, off, length) of every query's start hypothesis; queries whose prefix is absent get none."""
        if pref is None:
            z = np.zeros(q_n, dtype=np.int64)
            return np.arange(q_n, dtype=np.int64), z, z.copy(), z.copy()
        qs, nodes, offs, lens = [], [], [], []
        for q, p in enumerate(pref):
            if p.size == 0:
                node, off = 0, 0
            else:
                w = self.index.walk(p)
                if w is None:
                    continue
                node, off = int(w[0]), int(w[1])
                if node == 0:
                    off = 0
            qs.append(q)
            nodes.append(node)
            offs.append(off)
            lens.append(int(p.size))
        as64 = lambda v: np.array(v, dtype=np.int64)  # noqa: E731
        return as64(qs), as64(nodes), as64(offs), as64(lens)

    @staticmethod
    def _finished(hq: np.ndarray, hs: np.ndarray, hr: np.ndarray, pq: np.ndarray, pn: np.ndarray,
                  later_max: np.ndarray, ln_min: np.float32, q_n: int, big_r: int) -> np.ndarray:
        """Per query: True when no candidate of a later step can enter its pool (the allowed early stop).

        The pool must be full and `flashtrie.scoring.pool_closed` hold for the query's best frontier
        score (rank 0) and worst pool n.
        """
        count = np.bincount(pq, minlength=q_n)
        worst = np.full(q_n, np.float32(-np.inf), dtype=np.float32)
        has = count > 0
        worst[has] = pn[np.cumsum(count)[has] - 1]
        best = np.full(q_n, np.float32(np.inf), dtype=np.float32)
        top = hr == 0
        best[hq[top]] = hs[top]
        done = (count == big_r) & pool_closed(later_max, best, worst, ln_min)
        return done[hq]

    def _expand(self, hq: np.ndarray, hnode: np.ndarray, hoff: np.ndarray, rkeys: np.ndarray,
                nvalid: np.ndarray, rstart: np.ndarray,
                paths: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every (hypothesis, valid proposal) pair that extends a trie prefix.

        Returns (hypothesis index, position in the row keys, new node, new off).
        """
        elen = self._elen[hnode]
        mid = hoff < elen
        deg = self._deg[hnode]
        nv = nvalid[hq]
        enum = ~mid & (deg > 0) & (deg <= nv)
        pair = ~mid & (deg > nv) & (nv > 0)
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

        # mid-edge: the next token is e_off
        hm = np.flatnonzero(mid)
        if hm.size:
            tok = self._tail[self._tail_start[hnode[hm]] + hoff[hm] - 1]
            found, pos = _lookup(rkeys, (hq[hm].astype(_U64) << _SH32) | tok.astype(_U64))
            h = hm[found]
            parts.append((h, pos, hnode[h], hoff[h] + 1))
            paths["mid"] += int(h.size)

        # at a node, few children: enumerate them, look each label up in the row
        he = np.flatnonzero(enum)
        if he.size:
            seg, child = _segment_iota(self._first[hnode[he]], deg[he])
            hrep = he[seg]
            found, pos = _lookup(rkeys, (hq[hrep].astype(_U64) << _SH32) | self._label[child].astype(_U64))
            parts.append((hrep[found], pos, child[found], np.ones(pos.size, dtype=np.int64)))
            paths["enum"] += int(pos.size)

        # at a node, many children: pair it with every valid proposal, look (node, token) up globally
        hp = np.flatnonzero(pair)
        if hp.size:
            cnt = nv[hp]
            # Bloom hash of node << 32 | token, as (node << 32) * M + token * M (mod 2^64): the sum needs no
            # key array; keys are formed only for the probes that pass the filter.
            tok_hash = (rkeys & _LO32) * _BLOOM_MUL
            _, rpos = _segment_iota(rstart[hq[hp]], cnt)
            h = np.repeat((hnode[hp].astype(_U64) << _SH32) * _BLOOM_MUL, cnt)
            h += tok_hash[rpos]
            h >>= self._bloom_shift
            bit = self._bloom[h >> np.uint64(6)]
            bit >>= h & np.uint64(63)
            maybe = np.flatnonzero(bit & np.uint64(1))
            rpos = rpos[maybe]
            seg = np.searchsorted(np.cumsum(cnt), maybe, side="right")
            keys = (hnode[hp[seg]].astype(_U64) << _SH32) | (rkeys[rpos] & _LO32)
            srt = np.argsort(keys)  # sorted probes: the binary searches share their cache lines
            found, cidx = _lookup(self._ckeys, keys[srt])
            srt = srt[found]
            child = cidx + 1
            parts.append((hp[seg[srt]], rpos[srt], child, np.ones(child.size, dtype=np.int64)))
            paths["pair"] += int(child.size)

        if not parts:
            e = np.zeros(0, dtype=np.int64)
            return e, e, e, e
        if len(parts) == 1:
            return parts[0]
        return tuple(np.concatenate(c) for c in zip(*parts, strict=True))  # type: ignore[return-value]

    @staticmethod
    def _group_order(q: np.ndarray, dk: np.ndarray, r: np.ndarray, x: np.ndarray,
                     q_bits: int, r_bits: int, x_bits: int) -> np.ndarray:
        """Permutation sorting items by (q, dk, r, x); (q, r, x) is unique per item."""
        low = (r.astype(_U64) << np.uint64(x_bits)) | x.astype(_U64)
        if q_bits + 32 + r_bits + x_bits <= 64:
            key = ((q.astype(_U64) << np.uint64(32 + r_bits + x_bits))
                   | (dk.astype(_U64) << np.uint64(r_bits + x_bits)) | low)
            return np.argsort(key)
        key = (dk.astype(_U64) << np.uint64(r_bits + x_bits)) | low
        return np.lexsort((key, q))
