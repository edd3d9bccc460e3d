"""`NumpySearcher`: the exact search of docs/semantics.md, vectorised over queries x beams x proposals.

This is the bit-for-bit reference for the GPU kernels and the fast CPU path.  The only Python loops are
over decoding steps and (for forced prefixes) over queries.  `_run` is the contract's step loop; each
step is a function named for it, over the named state types of `numpy_state` (`Frontier` F_t, `Row`,
`Candidates`, `Pool`):

* **expand** (steps 1-2, `NumpySearcher._expand`): every hypothesis is intersected with its row of
  proposals by one of three vectorised paths, all of which yield the same candidates:
  mid-edge (the only possible next token is ``e_off``; look ``q << 32 | e_off`` up in the row keys);
  at a node of degree ``d <= nvalid`` (enumerate its children, look ``q << 32 | label`` up in the row
  keys); at a node of degree ``d > nvalid`` (pair it with each valid proposal and look
  ``node << 32 | token`` up in the sorted child keys ``parent << 32 | label``: eager, all of them after a
  one-hash Bloom filter over them drops most absent probes; lazy, the wide nodes' cached ones, or a binary
  search of the children's labels at the widest nodes);
* the per-node facts come from `numpy_nodes`: decoded for every node up front (``decode="eager"``) or
  for the nodes a search reaches (``"lazy"``: set-up and memory grow with what searches touch);
* **score and threshold** (steps 3-4, `_score_and_threshold`);
* **offer to the pool** (`_offer_to_pool`, `Pool.merge`): pool key ``(desc_key32(n), t, r, xrank)``,
  merged stably with older entries first;
* **next frontier** (`_next_frontier`): frontier key ``desc_key32(s) << 32 | r << 16 | xrank``
  (xrank = the token's position in its sorted row, which orders like the token; packed with q into one
  uint64 when the bits fit, else lexsorted, `SortKeys`);
* **early stop** (`_early_stop`), per query (``early_stop=True``; the output is identical either way).

Keys are built from ``desc_key32`` (see ``flashtrie.scoring``), so ties are broken exactly as the contract
says.  Results are assembled by `SearchResult.from_pool`, parts of a big batch merged by
`SearchResult.concat`.  ``collect_stats=True`` records the last call's per-step counters in ``last_stats``
(a `SearchStats`, backend "numpy", counters `STAT_FIELDS`).  Off by default: the step loop then only
tests one ``None``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from flashtrie.cpus import in_parallel, usable_cpus
from flashtrie.errors import InputError
from flashtrie.index import NarrowLoudsIndex
from flashtrie.proposals import Proposals
from flashtrie.scoring import SearchPlan, desc_key32, pool_closed, sort_rows
from flashtrie.search_core import check_index, check_request, start_states
from flashtrie.search_types import SearchConfig, SearchResult, SearchStats

from .numpy_nodes import (
    EagerNodes,
    LazyNodes,
    _all_child_ranges,  # noqa: F401 - the tests check it here
    _all_keyword_ids,  # noqa: F401 - the tests check it here
)
from .numpy_state import (
    LO32,
    SH32,
    U64,
    Candidates,
    Frontier,
    Pool,
    Row,
    SortKeys,
    group_ranks,
    lookup,
    segment_iota,
)

__all__ = ["NumpySearcher", "SearchStats", "MAX_PART_QUERIES", "MIN_THREAD_QUERIES", "DECODE_MODES",
           "EAGER_MAX_NODES"]

#: The accepted values of ``decode`` (see `NumpySearcher`).
DECODE_MODES = ("auto", "eager", "lazy")
#: ``decode="auto"`` decodes every node up front up to this many nodes, and lazily above.
EAGER_MAX_NODES = 1 << 24
#: The counters `NumpySearcher` measures with ``collect_stats=True`` (`SearchStats.FIELDS` defines them).
STAT_FIELDS = ("considered", "valid", "kept", "frontier", "pool_offers", "live_queries")
_CONSIDERED, _VALID, _KEPT, _FRONTIER, _OFFERS, _LIVE = range(len(STAT_FIELDS))
#: A batch of more queries than this runs in parts of at most this many (1M keywords, beam 100, 2-core
#: box: 0.66 ms per query in batches of 256, 0.95 ms in one batch of 1024).
MAX_PART_QUERIES = 256
#: A thread gets at least this many queries (same box: 2 threads lose below 64 queries per call,
#: gain 1.36x at 128 and 1.7x at 512).
MIN_THREAD_QUERIES = 64
_PATHS = ("mid", "enum", "pair")


@dataclass(slots=True)
class _Plan:
    """The per-call constants of a search: the config's `SearchPlan` and the key widths."""

    search: SearchPlan
    keys: SortKeys


@dataclass(slots=True)
class _Expansion:
    """Step 2's survivors: (hypothesis h, valid proposal x) pairs with h + [x] a trie prefix, as the index of
    h in the frontier, x's position in the row, and the new trie state."""

    parent: np.ndarray
    pos: np.ndarray
    node: np.ndarray
    off: np.ndarray

    @property
    def size(self) -> int:
        return int(self.parent.size)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return self.parent, self.pos, self.node, self.off


_NO_EXPANSION = _Expansion(*(np.zeros(0, dtype=np.int64) for _ in range(4)))


class NumpySearcher:
    """Exact trie-constrained beam search over a `NarrowLoudsIndex`, in vectorised numpy."""

    name = "numpy"
    #: a call's working memory per beam entry and query (its frontier and candidate arrays: about 2 kB measured
    #: with tracemalloc at beams 100 to 2,000 with K = beam)
    PEAK_BYTES_PER_BEAM_ENTRY = 4096

    @classmethod
    def search_peak_bytes(cls, beam_width: int, num_queries: int) -> int:
        """Estimated working memory of one `search` call of ``num_queries`` queries (checks before work)."""
        return beam_width * num_queries * cls.PEAK_BYTES_PER_BEAM_ENTRY

    def __init__(self, index: NarrowLoudsIndex, *, early_stop: bool = True, collect_stats: bool = False,
                 threads: int | None = 1, decode: str = "auto") -> None:
        """Set up the per-node facts the search reads (`numpy_nodes`).

        ``decode``: "eager" decodes every node once into flat arrays (fastest per search; set-up time and
        about 60 bytes per node grow with the index), "lazy" decodes only the nodes each search reaches
        (set-up free, memory in proportion to what searches touch), "auto" (default) eager up to
        `EAGER_MAX_NODES` nodes, else lazy.  The results are identical in every mode.
        ``early_stop`` drops a query's frontier once no later candidate can enter its pool (the
        contract's allowed shortcut; the output is identical either way).  ``collect_stats`` fills
        ``last_stats`` (a `SearchStats`) on every search; it never changes results.  ``threads``: a batch
        of at least 2 x `MIN_THREAD_QUERIES` queries is split into up to this many parts searched on threads
        (numpy releases the GIL in its array work); None = one per core.  Queries are independent, so the
        results are identical.
        """
        self.index = check_index(index)
        if threads is None:
            threads = usable_cpus()
        if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
            raise InputError(f"threads: expected an integer >= 1 or None, got {threads!r}")
        if decode not in DECODE_MODES:
            raise InputError(f"decode: expected one of {', '.join(map(repr, DECODE_MODES))}, got {decode!r}")
        self.threads = int(threads)
        self.early_stop = bool(early_stop)
        self.collect_stats = bool(collect_stats)
        #: "eager" or "lazy": how the per-node facts are decoded ("auto" resolved by the index's size)
        self.decode = decode if decode != "auto" else (
            "eager" if self.index.num_nodes <= EAGER_MAX_NODES else "lazy")
        #: counters of the last search when ``collect_stats`` is on, else None
        self.last_stats: SearchStats | None = None
        #: how many candidates each intersection path produced in the last search (for tests/diagnostics)
        self.path_counts: dict[str, int] = dict.fromkeys(_PATHS, 0)
        self._nodes: EagerNodes | LazyNodes = (EagerNodes(self.index) if self.decode == "eager"
                                               else LazyNodes(self.index))
        self._max_len = max(int(self.index.max_keyword_length), 1)

    # ------------------------------------------------------------------------------------------ search
    def search(self, proposals: Proposals, config: SearchConfig,
               prefixes: Sequence[Sequence[int]] | None = None) -> SearchResult:
        """Run the search of docs/semantics.md for every query at once."""
        pref = check_request(proposals, config, prefixes)
        q_n, t_n, k_n = proposals.shape
        paths = dict.fromkeys(_PATHS, 0)
        counts = np.zeros((t_n, len(STAT_FIELDS)), dtype=np.int64) if self.collect_stats else None
        if q_n and t_n and k_n and self.index.num_nodes:
            # big batches run in parts (cache-sized work); threads only for parts big enough to pay for them
            parts = max(-(-q_n // MAX_PART_QUERIES), min(self.threads, q_n // MIN_THREAD_QUERIES), 1)
            result, steps_run = self._run_parts(proposals, config, pref, counts, paths, parts)
        else:
            result, steps_run = SearchResult.empty(q_n, config.results), 0
        self.path_counts = paths
        self.last_stats = (None if counts is None else
                           SearchStats(backend="numpy", queries=q_n, beam_width=config.beam_width, steps=t_n,
                                       steps_run=steps_run, counts=dict(zip(STAT_FIELDS, counts.T, strict=True)),
                                       early_stop=self.early_stop))
        return result

    def _run_parts(self, proposals: Proposals, config: SearchConfig, pref: list[np.ndarray] | None,
                   counts: np.ndarray | None, paths: dict[str, int], parts: int) -> tuple[SearchResult, int]:
        """`_run` over ``parts`` contiguous ranges of queries, on up to ``self.threads`` threads; the results
        concatenated, the counters summed, the steps run of the longest part."""
        if parts == 1:
            return self._run(proposals.tokens, proposals.logprobs, config, pref, counts, paths)
        q_n = proposals.num_queries
        bounds = [q_n * i // parts for i in range(parts + 1)]

        def one(a: int, b: int) -> tuple[SearchResult, int, np.ndarray | None, dict[str, int]]:
            cnt = None if counts is None else np.zeros_like(counts)
            pc = dict.fromkeys(_PATHS, 0)
            res, st = self._run(proposals.tokens[a:b], proposals.logprobs[a:b], config,
                                None if pref is None else pref[a:b], cnt, pc)
            return res, st, cnt, pc

        done = in_parallel([partial(one, a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)],
                           self.threads)
        for _, _, cnt, pc in done:
            if counts is not None and cnt is not None:
                counts += cnt
            for k, v in pc.items():
                paths[k] += v
        return SearchResult.concat([d[0] for d in done]), max(d[1] for d in done)

    def _plan(self, config: SearchConfig, shape: tuple[int, int, int]) -> _Plan:
        return _Plan(SearchPlan.from_config(config, self._max_len), SortKeys.of(shape[0], config.beam_width, shape[2]))

    def _run(self, tokens: np.ndarray, logprobs: np.ndarray, config: SearchConfig, pref: list[np.ndarray] | None,
             counts: np.ndarray | None, paths: dict[str, int]) -> tuple[SearchResult, int]:
        """The step loop of docs/semantics.md over queries ``tokens[Q, T, K]`` (validated): (the result, the
        steps run); adds to ``counts`` (``STAT_FIELDS`` columns) and the path counters ``paths``."""
        q_n, t_n, _ = tokens.shape
        plan = self._plan(config, tokens.shape)
        rows = sort_rows(tokens, logprobs, plan.search.tau, with_row_max=self.early_stop)  # xrank = sorted position
        frontier = Frontier.start(start_states(self.index, pref, q_n))
        pool = Pool.empty()
        steps_run = 0
        # float32 overflow to -inf and subnormal results are part of the contract, not errors
        with np.errstate(over="ignore", under="ignore"):
            for t in range(t_n):
                if frontier.size == 0:
                    break
                steps_run += 1
                row = Row.of(rows, t, q_n)
                found = self._expand(frontier, row, paths)
                cand = self._score_and_threshold(frontier, row, found, plan.search.sigma)
                if counts is not None:
                    _count_step(counts[t], frontier, row, found, cand)
                if cand.size == 0:
                    break
                at_node = cand.off == self._nodes.edge_len(cand.node)
                ends = np.flatnonzero(at_node)
                whole = ends[self._nodes.terminal(cand.node[ends])]
                pool = self._offer_to_pool(pool, cand, whole, plan)
                if counts is not None:
                    counts[t, _OFFERS] = whole.size
                grow = ~at_node  # mid-edge, or at a node with at least one child
                grow[ends] = self._nodes.has_children(cand.node[ends])
                growing = np.flatnonzero(grow)
                if growing.size == 0 or t == t_n - 1:
                    if counts is not None and growing.size:  # |F_T|: B best with a child per query, not built
                        counts[t, _FRONTIER] = np.minimum(np.bincount(cand.q[growing]), plan.search.beam).sum()
                    break
                frontier = _next_frontier(cand, growing, plan)
                if rows.row_max is not None and pool.size:
                    frontier = _early_stop(frontier, pool, rows.row_max[:, t + 1:], plan, q_n)
                if counts is not None:
                    counts[t, _FRONTIER] = frontier.size
        return pool.to_result(q_n, plan.search.results), steps_run

    # ----------------------------------------------------------------------------- the contract's steps
    def _expand(self, frontier: Frontier, row: Row, paths: dict[str, int]) -> _Expansion:
        """Steps 1-2: every (h, valid proposal x) pair whose h + [x] is a trie prefix, by one of three paths
        (mid-edge, enumerate the children, pair with the proposals); which path never changes the result."""
        mid = frontier.off < self._nodes.edge_len(frontier.node)
        first, deg = self._nodes.children(frontier.node)
        nv = row.nvalid[frontier.q]
        mid_ = self._expand_mid(frontier, row, np.flatnonzero(mid))
        enum = self._expand_enum(frontier, row, np.flatnonzero(~mid & (deg > 0) & (deg <= nv)), first, deg)
        pair = self._expand_pair(frontier, row, np.flatnonzero(~mid & (deg > nv) & (nv > 0)), nv)
        paths["mid"] += mid_.size
        paths["enum"] += enum.size
        paths["pair"] += pair.size
        parts = [p for p in (mid_, enum, pair) if p.size]
        if len(parts) <= 1:
            return parts[0] if parts else _NO_EXPANSION
        return _Expansion(*(np.concatenate(c) for c in zip(*(p.arrays() for p in parts), strict=True)))

    def _expand_mid(self, fr: Frontier, row: Row, hm: np.ndarray) -> _Expansion:
        """Mid-edge: the only possible next token is e_off; look ``q << 32 | e_off`` up in the row keys."""
        if hm.size == 0:
            return _NO_EXPANSION
        tok = self._nodes.tail_token(fr.node[hm], fr.off[hm])
        hit, pos = lookup(row.keys, (fr.q[hm].astype(U64) << SH32) | tok.astype(U64))
        h = hm[hit]
        return _Expansion(h, pos, fr.node[h], fr.off[h] + 1)

    def _expand_enum(self, fr: Frontier, row: Row, he: np.ndarray, first: np.ndarray, deg: np.ndarray
                     ) -> _Expansion:
        """At a node with at most as many children as valid proposals: enumerate the children, look
        ``q << 32 | label`` up in the row keys."""
        if he.size == 0:
            return _NO_EXPANSION
        seg, child = segment_iota(first[he], deg[he])
        hrep = he[seg]
        hit, pos = lookup(row.keys, (fr.q[hrep].astype(U64) << SH32) | self._nodes.label(child).astype(U64))
        return _Expansion(hrep[hit], pos, child[hit], np.ones(pos.size, dtype=np.int64))

    def _expand_pair(self, fr: Frontier, row: Row, hp: np.ndarray, nv: np.ndarray) -> _Expansion:
        """At a node with more children than valid proposals: pair it with every valid proposal, drop most
        absent ``node << 32 | token`` probes with the Bloom filter (eager), binary-search the rest in the
        child keys (all of them, eager; the wide nodes' met so far, lazy)."""
        if hp.size == 0:
            return _NO_EXPANSION
        cnt = nv[hp]
        _, rpos = segment_iota(row.start[fr.q[hp]], cnt)
        maybe = self._nodes.maybe_children(fr.node[hp], cnt, row.keys, rpos)
        if maybe is None:
            seg = np.repeat(np.arange(hp.size, dtype=np.int64), cnt)
        else:
            rpos = rpos[maybe]
            seg = np.searchsorted(np.cumsum(cnt), maybe, side="right")
        keys = (fr.node[hp[seg]].astype(U64) << SH32) | (row.keys[rpos] & LO32)
        srt = np.argsort(keys)  # sorted probes: the binary searches share their cache lines
        hit, child = self._nodes.find_children(keys[srt])
        srt = srt[hit]
        return _Expansion(hp[seg[srt]], rpos[srt], child, np.ones(child.size, dtype=np.int64))

    @staticmethod
    def _score_and_threshold(frontier: Frontier, row: Row, found: _Expansion, sigma: np.float32) -> Candidates:
        """Steps 3-4: s(c) = fl32(s(h) + ℓ), one float32 addition; drop c with s(c) ≤ σ."""
        s = frontier.s[found.parent] + row.logprobs[found.pos]
        keep = s > sigma
        if bool(keep.all()):
            ch, pos, node, off = found.parent, found.pos, found.node, found.off
        else:
            ch, pos, node, off, s = found.parent[keep], found.pos[keep], found.node[keep], found.off[keep], s[keep]
        return Candidates(frontier.q[ch], node, off, s, frontier.length[ch] + 1, frontier.rank[ch],
                          row.xrank[pos].astype(np.int64))

    def _offer_to_pool(self, pool: Pool, cand: Candidates, whole: np.ndarray, plan: _Plan) -> Pool:
        """Offer the whole keywords among the candidates with pool key (−n, t, r, x); keep the R best."""
        if whole.size == 0:
            return pool
        n = cand.s[whole] * plan.search.ln_table[cand.length[whole]]
        dk = desc_key32(n)
        o = plan.keys.order(cand.q[whole], dk, cand.rank[whole], cand.xrank[whole])
        w = whole[o]
        offered = Pool(cand.q[w], dk[o], self._nodes.keyword_id(cand.node[w]), cand.s[w], n[o], cand.length[w])
        return pool.merge(offered, plan.search.results)


def _next_frontier(cand: Candidates, growing: np.ndarray, plan: _Plan) -> Frontier:
    """F_{t+1}: per query, the B candidates with a child that have the smallest frontier keys (−s, r, x)."""
    o = plan.keys.order(cand.q[growing], desc_key32(cand.s[growing]), cand.rank[growing], cand.xrank[growing])
    f = growing[o]
    ranks = group_ranks(cand.q[f])
    sel = ranks < plan.search.beam
    f = f[sel]
    return Frontier(cand.q[f], cand.node[f], cand.off[f], cand.s[f], cand.length[f], ranks[sel])


def _early_stop(frontier: Frontier, pool: Pool, later_rows_max: np.ndarray, plan: _Plan, q_n: int) -> Frontier:
    """The allowed early stop, per query: drop the frontier of a query whose pool is full and for which
    `flashtrie.scoring.pool_closed` holds (best frontier score, rank 0, against the worst pool n, over the
    rows ``later_rows_max[Q, T']`` still to run)."""
    count, worst = pool.worst_n(q_n)
    full = count == plan.search.results
    if not full.any():
        return frontier
    best = np.full(q_n, np.float32(np.inf), dtype=np.float32)
    top = frontier.rank == 0
    best[frontier.q[top]] = frontier.s[top]
    done = full & pool_closed(best, worst, later_rows_max, plan.search.ln_min, plan.search.ln_max)
    live = ~done[frontier.q]
    return frontier if bool(live.all()) else frontier.take(live)


def _count_step(out: np.ndarray, frontier: Frontier, row: Row, found: _Expansion, cand: Candidates) -> None:
    """The considered / valid / kept / live-query counters of one step (`SearchStats.FIELDS`)."""
    out[_CONSIDERED] = row.nvalid[frontier.q].sum()
    out[_VALID] = found.size
    out[_KEPT] = cand.size
    q = frontier.q
    out[_LIVE] = 0 if q.size == 0 else 1 + int(np.count_nonzero(q[1:] != q[:-1]))
