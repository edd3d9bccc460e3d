"""`MarisaSearcher`: the exact search of docs/semantics.md on top of marisa-trie (the CPU baseline).

One `marisa_trie.BinaryTrie` holds every token-boundary prefix of every keyword, each token written as 4
big-endian bytes (so byte order is token order).  Arrays indexed by marisa key id give the smallest keyword
id of a whole keyword (-1 otherwise) and a derived children table on top of marisa (CSR: for each key id,
and for the root at id ``len(trie)``, its children's tokens sorted ascending and their marisa key ids).

Per step the candidates ``h + [x]`` are found by adaptive intersection, as the numpy and GPU backends do:
a hypothesis with at most ``enum_ratio`` x (number of valid proposals) children enumerates them from the
children table and finds each child's token in the row's sorted valid tokens (one vectorised
``searchsorted`` for all such hypotheses); a hypothesis with more children (the root, shallow nodes with a
huge fan-out) asks marisa one ``trie.get(h + x)`` per valid proposal.  Everything else (scores,
thresholds, top-B, pool) is vectorised with numpy.  `path_counts` counts the work done on each side
by the last call.

With ``processes > 1`` the trie and the arrays are saved to a temporary directory that worker processes
memory-map; queries are split into contiguous chunks across a `ProcessPoolExecutor` that lives until
`close()`.  Results are assembled by `SearchResult.from_pool` and the workers' parts merged by
`SearchResult.concat`.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import tempfile
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing.process import BaseProcess

import marisa_trie
import numpy as np

from flashtrie.errors import InputError, WorkerError
from flashtrie.keywords import KeywordSet
from flashtrie.proposals import Proposals
from flashtrie.scoring import SearchPlan, desc_key32, pool_closed, sort_rows
from flashtrie.search_core import check_request
from flashtrie.search_types import SearchConfig, SearchResult, SearchStats

__all__ = ["MarisaSearcher", "MARISA_MAX_KEYWORD_LENGTH"]

_BE32 = np.dtype(">u4")


_ARRAYS = ("kw_of", "indptr", "child_tok", "child_id")
_COUNTS = ("enum_hyps", "enum_children", "lookup_hyps", "lookups")
# Enumerate a hypothesis's children when degree <= ENUM_RATIO x valid proposals, else ask marisa.  Measured
# (1M keywords, dense, K = B = 100 and 1000): ~0.36 us per marisa lookup vs a few ns per enumerated child;
# the per-query time is flat from 16 to inf and rises below 16, and 16 keeps the widest nodes on marisa.
ENUM_RATIO = 16.0
#: Longest keyword the baseline accepts, in tokens.  Its trie holds every token-boundary prefix, so one
#: keyword of L tokens costs 2 L^2 bytes of keys: measured (2-core box) 0.6 s and 96 MB peak for L = 4,096,
#: 2.7 s and 289 MB for 8,192, 69 s and 3.5 GB for 30,000; at 70,000 marisa aborts the process.
MARISA_MAX_KEYWORD_LENGTH = 4096


def _build(keywords: KeywordSet) -> tuple[marisa_trie.BinaryTrie, dict[str, np.ndarray], int]:
    """The prefix trie, its arrays (see `_ARRAYS`; the root is row ``len(trie)``) and the duplicate count."""
    buf = keywords.tokens.astype(_BE32).tobytes()
    bounds = (keywords.offsets * 4).tolist()
    whole = [buf[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    keys = sorted({w[:i] for w in whole for i in range(4, len(w) + 1, 4)})
    trie = marisa_trie.BinaryTrie(keys)
    n = len(keys)
    idt = np.int32 if n < 2**31 - 1 else np.int64
    key_id = trie.key_id
    kw_of = np.full(n, -1, dtype=np.int64)
    first: dict[bytes, int] = {}
    for i, w in enumerate(whole):
        first.setdefault(w, i)
    if first:
        ids = np.fromiter((key_id(w) for w in first), dtype=np.int64, count=len(first))
        kw_of[ids] = np.fromiter(first.values(), dtype=np.int64, count=len(first))
    # Children table.  `keys` is sorted, i.e. in depth-first preorder with siblings in token order, so a
    # key's parent is the last key one token shorter before it.
    child_id = np.fromiter(map(key_id, keys), dtype=idt, count=n)
    child_tok = np.frombuffer(b"".join([k[-4:] for k in keys]), dtype=_BE32).astype(np.uint32)
    depth = np.fromiter(map(len, keys), dtype=np.int64, count=n) // 4
    parent = np.full(n, n, dtype=idt)  # marisa id of the parent; n = the root
    pos = np.arange(n)
    above = pos[depth == 1]
    for d in range(2, int(depth.max(initial=0)) + 1):
        here = pos[depth == d]
        parent[here] = child_id[above[np.searchsorted(above, here) - 1]]
        above = here
    order = np.argsort(parent, kind="stable")  # by parent, then (stable) by token
    indptr = np.zeros(n + 2, dtype=idt)
    np.cumsum(np.bincount(parent, minlength=n + 1), out=indptr[1:])
    arrays = {"kw_of": kw_of, "indptr": indptr, "child_tok": child_tok[order], "child_id": child_id[order]}
    return trie, arrays, len(whole) - len(first)


@dataclass(slots=True)
class _QueryPool:
    """One query's results pool, sorted by pool key: keyword ids, s, n and lengths."""

    kw: np.ndarray
    s: np.ndarray
    n: np.ndarray
    length: np.ndarray

    @classmethod
    def empty(cls) -> _QueryPool:
        f32 = np.zeros(0, dtype=np.float32)
        return cls(np.zeros(0, dtype=np.int64), f32, f32.copy(), np.zeros(0, dtype=np.int32))

    @property
    def size(self) -> int:
        return int(self.kw.size)

    def offer(self, kw: np.ndarray, s: np.ndarray, n: np.ndarray, length: int, results: int) -> _QueryPool:
        """Offer one step's whole keywords, given in (r, x) order: a stable sort on the score key gives the
        pool key (-n, t, r, x); old entries come first, so on equal n the earlier step wins."""
        best = np.argsort(desc_key32(n), kind="stable")[:results]
        pool = _QueryPool(np.concatenate((self.kw, kw[best])), np.concatenate((self.s, s[best])),
                          np.concatenate((self.n, n[best])),
                          np.concatenate((self.length, np.full(best.size, length, dtype=np.int32))))
        if self.size == 0:
            return pool
        keep = np.argsort(desc_key32(pool.n), kind="stable")[:results]
        return _QueryPool(pool.kw[keep], pool.s[keep], pool.n[keep], pool.length[keep])


class _Engine:
    """The searchable state (trie + arrays) and the per-query search; lives in the parent and in workers."""

    def __init__(self, trie: marisa_trie.BinaryTrie, arrays: dict[str, np.ndarray], max_length: int,
                 enum_ratio: float) -> None:
        self.trie = trie
        self.kw_of = arrays["kw_of"]
        self.indptr = arrays["indptr"]
        self.child_tok = arrays["child_tok"]
        self.child_id = arrays["child_id"]
        self.degree = np.diff(self.indptr)
        self.root = len(self.kw_of)
        self.max_length = max_length
        self.enum_ratio = enum_ratio
        self.counts = dict.fromkeys(_COUNTS, 0)

    def search(self, tokens: np.ndarray, logprobs: np.ndarray, config: SearchConfig,
               prefixes: list[bytes] | None, early_stop: bool) -> SearchResult:
        """Search queries ``tokens[Q, T, K]`` (validated; prefixes as big-endian bytes)."""
        q_n, t_n, k_n = tokens.shape
        if q_n == 0 or t_n == 0 or k_n == 0 or len(self.trie) == 0:
            return SearchResult.empty(q_n, config.results)
        plan = SearchPlan.from_config(config, self.max_length)
        # Rows sorted by token, so a candidate's position in its row's valid list orders like its token.
        rows = sort_rows(tokens, logprobs, plan.tau, with_row_max=early_stop)
        pools = []
        with np.errstate(over="ignore", under="ignore"):
            for q in range(q_n):
                prefix = prefixes[q] if prefixes is not None else b""
                pools.append(self._one(rows.tokens[q], rows.logprobs[q], rows.valid[q], prefix, plan,
                                       rows.row_max[q] if rows.row_max is not None else None))
        qs = np.repeat(np.arange(q_n, dtype=np.int64), [p.size for p in pools])
        return SearchResult.from_pool(q_n, plan.results, qs, *(np.concatenate([getattr(p, f) for p in pools])
                                                               for f in ("kw", "s", "n", "length")))

    def _start(self, prefix: bytes) -> int | None:
        """The marisa id of the forced prefix (the root for none); None when it is not in the trie."""
        if not prefix:
            return self.root
        return self.trie.get(prefix)

    def _one(self, tok: np.ndarray, lp: np.ndarray, valid: np.ndarray, prefix: bytes, plan: SearchPlan,
             row_max: np.ndarray | None) -> _QueryPool:
        """One query's step loop (docs/semantics.md): expand, score and threshold, offer to the pool, next
        frontier, early stop."""
        pool = _QueryPool.empty()
        start = self._start(prefix)
        if start is None:
            return pool
        t_n, plen = tok.shape[0], len(prefix) // 4
        hid = np.array([start], dtype=self.child_id.dtype)  # frontier: marisa ids and float32 scores, best first
        hs = np.zeros(1, dtype=np.float32)
        for t in range(t_n):
            vt = tok[t][valid[t]]
            if vt.size == 0:
                break
            r, j, cid = self._expand(hid, vt)
            if r.size == 0:
                break
            s = hs[r] + lp[t][valid[t]][j]  # one float32 addition
            keep = s > plan.sigma  # drop s ≤ σ (σ = -inf still drops a sum that overflowed to -inf)
            if not keep.all():
                s, cid = s[keep], cid[keep]
            kw = self.kw_of[cid]
            is_kw = kw >= 0
            if is_kw.any():
                length = plen + t + 1
                pool = pool.offer(kw[is_kw], s[is_kw], s[is_kw] * plan.ln_table[length], length, plan.results)
            grow = np.flatnonzero(self.degree[cid])
            if grow.size == 0:
                break
            # Frontier key (-s, r, x): survivors are in (r, x) order, so a stable sort on -s is exact.
            grow = grow[np.argsort(desc_key32(s[grow]), kind="stable")[:plan.beam]]
            hs, hid = s[grow], cid[grow]
            if (row_max is not None and t + 1 < t_n and pool.size == plan.results
                    and pool_closed(hs[0], pool.n[-1], row_max[t + 1:], plan.ln_min, plan.ln_max)):
                break  # nothing a later step offers can enter the full pool (see pool_closed)
        return pool

    def _expand(self, hid: np.ndarray, vt: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All valid ``h + [x]``: (frontier rank r, index j into the sorted valid tokens ``vt``, marisa id),
        in (r, j) order."""
        nv = vt.size
        deg = self.degree[hid]
        small = deg <= self.enum_ratio * nv
        counts = self.counts
        parts = []
        rs = np.flatnonzero(small)
        if rs.size:  # enumerate the children table, find each child's token in the row
            cnt = deg[rs]
            total = int(cnt.sum())
            counts["enum_hyps"] += int(rs.size)
            counts["enum_children"] += total
            if total:
                ends = np.cumsum(cnt)
                idx = np.arange(total) + np.repeat(self.indptr[hid[rs]] - (ends - cnt), cnt)
                ct = self.child_tok[idx]
                j = np.searchsorted(vt, ct)
                np.minimum(j, nv - 1, out=j)
                hit = np.flatnonzero(vt[j] == ct)
                parts.append((np.repeat(rs, cnt)[hit], j[hit], self.child_id[idx[hit]]))
        rl = np.flatnonzero(~small)
        if rl.size:  # one marisa lookup per (hypothesis, valid proposal)
            get, restore = self.trie.get, self.trie.restore_key
            xb = vt.astype(_BE32).tobytes()
            xbs = [xb[i : i + 4] for i in range(0, 4 * nv, 4)]
            hbs = [b"" if h == self.root else restore(h) for h in hid[rl].tolist()]
            counts["lookup_hyps"] += int(rl.size)
            counts["lookups"] += int(rl.size) * nv
            found = np.fromiter([get(h + x, -1) for h in hbs for x in xbs], dtype=np.int64, count=len(hbs) * nv)
            flat = np.flatnonzero(found >= 0)
            a = flat // nv
            parts.append((rl[a], flat - a * nv, found[flat].astype(self.child_id.dtype)))
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return np.zeros(0, np.intp), np.zeros(0, np.intp), np.zeros(0, self.child_id.dtype)
        r, j, cid = (np.concatenate(x) for x in zip(*parts, strict=True))
        order = np.argsort(r * nv + j, kind="stable")
        return r[order], j[order], cid[order]


# ----------------------------------------------------------------------------------- worker processes
_WORKER: dict[str, _Engine] = {}
#: How often a worker checks that its parent is still alive (seconds).
_PARENT_POLL_S = 0.2


def _watch_parent(parent: int, tmpdir: str) -> None:
    """In a worker: once the parent is gone (killed), remove the trie folder and exit."""
    while True:
        time.sleep(_PARENT_POLL_S)
        if os.getppid() != parent:
            shutil.rmtree(tmpdir, ignore_errors=True)
            os._exit(1)


def _worker_init(tmpdir: str, max_length: int, enum_ratio: float, parent: int) -> None:
    threading.Thread(target=_watch_parent, args=(parent, tmpdir), daemon=True, name="flashtrie-watch").start()
    trie = marisa_trie.BinaryTrie()
    trie.mmap(os.path.join(tmpdir, "prefixes.marisa"))
    arrays = {a: np.load(os.path.join(tmpdir, f"{a}.npy"), mmap_mode="r") for a in _ARRAYS}
    _WORKER["engine"] = _Engine(trie, arrays, max_length, enum_ratio)


def _worker_ready() -> int:
    return os.getpid()


#: One worker job: tokens, logprobs, config, forced prefixes as bytes, early stop.
_Job = tuple[np.ndarray, np.ndarray, SearchConfig, "list[bytes] | None", bool]


def _worker_search(args: _Job) -> tuple[SearchResult, dict[str, int]]:
    tokens, logprobs, config, prefixes, early_stop = args
    engine = _WORKER["engine"]
    engine.counts = dict.fromkeys(_COUNTS, 0)
    return engine.search(tokens, logprobs, config, prefixes, early_stop), engine.counts


def _shutdown(pool: ProcessPoolExecutor | None, tmpdir: str | None) -> None:
    """Stop the workers (idle ones exit at once) and remove the trie folder."""
    if pool is not None:
        pool.shutdown(wait=True, cancel_futures=True)
    if tmpdir is not None:
        shutil.rmtree(tmpdir, ignore_errors=True)


def _died(processes: Mapping[int, BaseProcess]) -> str:
    """The workers that ended, as ``pid N (exit code C)``, for the error message.  Those ended by SIGTERM
    are left out when another one died: the executor terminates the others once one is gone."""
    ended = {pid: p.exitcode for pid, p in processes.items() if p.exitcode not in (None, 0)}
    died = {pid: c for pid, c in ended.items() if c != -signal.SIGTERM} or ended
    return ", ".join(f"pid {pid} (exit code {c})" for pid, c in died.items()) or "a worker"


class MarisaSearcher:
    """Exact trie-constrained beam search over a marisa-trie of keyword prefixes.

    ``processes > 1`` spreads queries over that many worker processes (each memory-maps the saved trie);
    call `close()` or use the searcher as a context manager to stop them (they are also stopped when the
    searcher is collected or the interpreter exits, and they exit by themselves, removing the trie folder,
    when the parent process is killed).  A worker that dies during a search (killed, out of memory) makes
    that search raise `WorkerError` at once; the next search starts fresh workers.  ``early_stop`` enables
    the contract's allowed early stop (output identical either way).  ``enum_ratio`` sets the crossover of
    the adaptive intersection (a hypothesis enumerates its children when it has at most ``enum_ratio`` x
    valid proposals of them, else marisa is asked once per proposal; 0 = marisa only, inf = children table
    only).  ``build_seconds`` is the time spent building the trie and its arrays; ``duplicates`` the number
    of repeated keywords collapsed; ``path_counts`` the hypotheses and children enumerated and the
    hypotheses and marisa lookups done by the last search (workers included).  ``last_stats`` is always
    None: this baseline does not measure the per-step counters of `SearchStats`.
    """

    name = "marisa"
    #: the trie and its key preparation, peak per keyword (277 measured as resident set at 200k keywords)
    PEAK_BYTES_PER_KEYWORD = 320

    @classmethod
    def setup_peak_bytes(cls, num_keywords: int) -> int:
        """Estimated peak memory of setting up a searcher over ``num_keywords`` keywords (checks before work)."""
        return num_keywords * cls.PEAK_BYTES_PER_KEYWORD

    def __init__(self, keywords: KeywordSet, processes: int = 1, *, early_stop: bool = True,
                 mp_context: str | None = None, enum_ratio: float = ENUM_RATIO) -> None:
        _check_keywords(keywords)
        if isinstance(processes, bool) or not isinstance(processes, (int, np.integer)) or processes < 1:
            raise InputError(f"processes: expected an integer >= 1, got {processes!r}")
        if isinstance(enum_ratio, bool) or not isinstance(enum_ratio, (int, float, np.integer, np.floating)) \
                or not enum_ratio >= 0:
            raise InputError(f"enum_ratio: expected a number >= 0 (inf allowed), got {enum_ratio!r}")
        start = time.perf_counter()
        trie, arrays, self.duplicates = _build(keywords)
        self._engine = _Engine(trie, arrays, keywords.max_length, float(enum_ratio))
        self.build_seconds = time.perf_counter() - start
        self.processes = int(processes)
        self.early_stop = bool(early_stop)
        self.num_keywords = len(keywords)
        #: the per-step counters of the last search: never measured by this baseline
        self.last_stats: SearchStats | None = None
        self._path_counts = dict.fromkeys(_COUNTS, 0)
        self._trie_bytes: int | None = None
        self._mp_context = mp_context
        self._pool: ProcessPoolExecutor | None = None
        self._tmpdir: str | None = None
        self._closed = False
        self._finalizer: weakref.finalize | None = None
        if self.processes > 1:
            self._start_pool()

    def _start_pool(self) -> None:
        """Save the trie and arrays to a fresh temporary folder and start the workers (all of them, now)."""
        self._tmpdir = tempfile.mkdtemp(prefix="flashtrie-marisa-")
        engine = self._engine
        try:
            engine.trie.save(os.path.join(self._tmpdir, "prefixes.marisa"))
            for a in _ARRAYS:
                np.save(os.path.join(self._tmpdir, f"{a}.npy"), getattr(engine, a))
            method = self._mp_context
            if method is None:
                method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
            self._pool = ProcessPoolExecutor(
                self.processes, mp_context=multiprocessing.get_context(method), initializer=_worker_init,
                initargs=(self._tmpdir, engine.max_length, engine.enum_ratio, os.getpid()))
            for f in [self._pool.submit(_worker_ready) for _ in range(self.processes)]:
                f.result()
        except BaseException:
            _shutdown(self._pool, self._tmpdir)  # no half-made pool or temporary folder left behind
            self._pool = self._tmpdir = None
            raise
        self._finalizer = weakref.finalize(self, _shutdown, self._pool, self._tmpdir)

    @property
    def path_counts(self) -> dict[str, int]:
        """Work done per side of the adaptive intersection by the last search."""
        return dict(self._path_counts)

    @property
    def table_bytes(self) -> int:
        """Size of the derived children table (indptr, child tokens, child ids) held next to the trie, in bytes."""
        e = self._engine
        return int(e.indptr.nbytes + e.child_tok.nbytes + e.child_id.nbytes)

    @property
    def trie_bytes(self) -> int:
        """Serialized size of the marisa trie, in bytes."""
        if self._trie_bytes is None:
            self._trie_bytes = len(self._engine.trie.tobytes())
        return self._trie_bytes

    def search(self, proposals: Proposals, config: SearchConfig,
               prefixes: Sequence[Sequence[int]] | None = None) -> SearchResult:
        """Run the search of docs/semantics.md for every query of ``proposals``."""
        norm = check_request(proposals, config, prefixes)
        if self._closed:
            raise WorkerError("search: this MarisaSearcher is closed; make a new one")
        pbytes = [p.astype(_BE32).tobytes() for p in norm] if norm is not None else None
        if self.processes > 1 and proposals.num_queries > 1:
            return self._search_workers(proposals, config, pbytes)
        engine = self._engine
        engine.counts = dict.fromkeys(_COUNTS, 0)
        result = engine.search(proposals.tokens, proposals.logprobs, config, pbytes, self.early_stop)
        self._path_counts = engine.counts
        return result

    def _search_workers(self, proposals: Proposals, config: SearchConfig, pbytes: list[bytes] | None
                        ) -> SearchResult:
        """The queries in contiguous chunks over the workers; a worker that dies raises `WorkerError`."""
        if self._pool is None:  # the last pool broke: start a fresh one
            self._start_pool()
        assert self._pool is not None
        chunks = [c for c in np.array_split(np.arange(proposals.num_queries), 4 * self.processes) if c.size]
        jobs: list[_Job] = [(proposals.tokens[c[0]:c[-1] + 1], proposals.logprobs[c[0]:c[-1] + 1], config,
                 pbytes[c[0]:c[-1] + 1] if pbytes is not None else None, self.early_stop) for c in chunks]
        workers = dict(getattr(self._pool, "_processes", None) or {})
        try:
            parts = [f.result() for f in [self._pool.submit(_worker_search, job) for job in jobs]]
        except BrokenProcessPool as e:
            self._drop_pool()
            raise WorkerError(f"search: a marisa worker process died during the search ({_died(workers)}; "
                              f"killed, or out of memory); no results. The next search starts new workers") from e
        self._path_counts = {k: sum(counts[k] for _, counts in parts) for k in _COUNTS}
        return SearchResult.concat([res for res, _ in parts])

    def _drop_pool(self) -> None:
        """Forget a broken pool: stop what is left of it and remove its folder."""
        if self._finalizer is not None:
            self._finalizer()
        self._pool = self._tmpdir = None
        self._finalizer = None

    def close(self) -> None:
        """Stop the worker processes (if any) and delete the temporary trie folder; later searches refuse."""
        self._drop_pool()
        self._closed = self.processes > 1

    def __enter__(self) -> MarisaSearcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"MarisaSearcher(keywords={self.num_keywords}, trie_keys={len(self._engine.trie)}, "
                f"processes={self.processes})")


def _check_keywords(keywords: object) -> None:
    """Refuse what the baseline cannot build: not a KeywordSet, no keywords, a keyword over the length limit."""
    if not isinstance(keywords, KeywordSet):
        raise InputError(f"keywords: expected a flashtrie.KeywordSet, got {type(keywords).__name__}")
    if len(keywords) == 0:
        raise InputError("keywords: the keyword set is empty; the marisa baseline needs at least one keyword")
    if keywords.max_length > MARISA_MAX_KEYWORD_LENGTH:
        longest = int(np.argmax(np.diff(keywords.offsets)))
        raise InputError(f"keywords: keyword {longest} has {keywords.max_length} tokens, over the marisa baseline's "
                         f"limit of {MARISA_MAX_KEYWORD_LENGTH} (its trie holds every prefix: memory grows with "
                         f"the square of the length)")
