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
thresholds, top-B, pool) is vectorised with numpy.  `path_counts` counts the work done on each side.

With ``processes > 1`` the trie and the arrays are saved to a temporary directory that worker processes
memory-map; queries are split into contiguous chunks across a pool that lives until `close()`.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile
import time
import weakref
from collections.abc import Sequence
from typing import Any

import marisa_trie
import numpy as np

from flashtrie.errors import InputError
from flashtrie.keywords import KeywordSet
from flashtrie.proposals import Proposals
from flashtrie.scoring import desc_key32, length_norm_table, pool_closed, sort_rows, threshold32
from flashtrie.search_types import SearchConfig, SearchResult, check_request

__all__ = ["MarisaSearcher"]

_BE32 = np.dtype(">u4")


_ARRAYS = ("kw_of", "indptr", "child_tok", "child_id")
_COUNTS = ("enum_hyps", "enum_children", "lookup_hyps", "lookups")
# Enumerate a hypothesis's children when degree <= ENUM_RATIO x valid proposals, else ask marisa.  Measured
# (1M keywords, dense, K = B = 100 and 1000): ~0.36 us per marisa lookup vs a few ns per enumerated child;
# the per-query time is flat from 16 to inf and rises below 16, and 16 keeps the widest nodes on marisa.
ENUM_RATIO = 16.0


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
               prefixes: list[bytes] | None, early_stop: bool
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Search queries ``tokens[Q, T, K]``; returns (ids int64, s f32, n f32, lengths int32), each [Q, R]."""
        q_n, t_n, _ = tokens.shape
        r_n = config.results
        ids = np.full((q_n, r_n), -1, dtype=np.int64)
        ss = np.full((q_n, r_n), -np.inf, dtype=np.float32)
        ns = np.full((q_n, r_n), -np.inf, dtype=np.float32)
        lens = np.zeros((q_n, r_n), dtype=np.int32)
        if q_n == 0 or t_n == 0 or tokens.shape[2] == 0 or len(self.trie) == 0:
            return ids, ss, ns, lens
        tau = threshold32(config.token_threshold)
        sigma = threshold32(config.score_threshold)
        ln = length_norm_table(config.length_norm, self.max_length)
        ln_min = np.float32(ln[1:].min())
        # Rows sorted by token, so a candidate's position in its row's valid list orders like its token.
        rows = sort_rows(tokens, logprobs, tau, with_later_max=early_stop)
        tok_sorted, lp_sorted, valid, suffix_max = rows.tokens, rows.logprobs, rows.valid, rows.later_max
        with np.errstate(over="ignore", under="ignore"):
            for q in range(q_n):
                prefix = prefixes[q] if prefixes is not None else b""
                found = self._one(tok_sorted[q], lp_sorted[q], valid[q], prefix, config, sigma, ln, ln_min,
                                  suffix_max[q] if suffix_max is not None else None)
                if found is not None:
                    kw, s, n, length = found
                    m = kw.size
                    ids[q, :m] = kw
                    ss[q, :m] = s
                    ns[q, :m] = n
                    lens[q, :m] = length
        return ids, ss, ns, lens

    def _one(self, tok: np.ndarray, lp: np.ndarray, valid: np.ndarray, prefix: bytes, config: SearchConfig,
             sigma: np.float32, ln: np.ndarray, ln_min: np.float32, suffix_max: np.ndarray | None,
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        if prefix:
            start = self.trie.get(prefix)
            if start is None:
                return None
        else:
            start = self.root
        beam, r_n = config.beam_width, config.results
        t_n = tok.shape[0]
        plen = len(prefix) // 4
        hid = np.array([start], dtype=self.child_id.dtype)  # frontier: marisa ids and float32 scores, best first
        hs = np.zeros(1, dtype=np.float32)
        p_kw = np.zeros(0, dtype=np.int64)
        p_s = np.zeros(0, dtype=np.float32)
        p_n = np.zeros(0, dtype=np.float32)
        p_len = np.zeros(0, dtype=np.int32)
        for t in range(t_n):
            vt = tok[t][valid[t]]
            nv = vt.size
            if nv == 0:
                break
            vl = lp[t][valid[t]]
            r, j, cid = self._expand(hid, vt)
            if r.size == 0:
                break
            s = hs[r] + vl[j]  # one float32 addition
            keep = s > sigma  # drop s ≤ σ (σ = -inf still drops a sum that overflowed to -inf)
            if not keep.all():
                r, j, s, cid = r[keep], j[keep], s[keep], cid[keep]
            kw = self.kw_of[cid]
            length = plen + t + 1
            is_kw = kw >= 0
            if is_kw.any():
                # Offered in (r, x) order; a stable sort on the score key gives pool key (-n, t, r, x).
                n = s[is_kw] * ln[length]
                best = np.argsort(desc_key32(n), kind="stable")[:r_n]
                # Old entries come first, so on equal n the earlier step wins.
                p_kw = np.concatenate((p_kw, kw[is_kw][best]))
                p_s = np.concatenate((p_s, s[is_kw][best]))
                p_n = np.concatenate((p_n, n[best]))
                p_len = np.concatenate((p_len, np.full(best.size, length, dtype=np.int32)))
                if p_kw.size > best.size:
                    keep_pool = np.argsort(desc_key32(p_n), kind="stable")[:r_n]
                    p_kw, p_s, p_n, p_len = p_kw[keep_pool], p_s[keep_pool], p_n[keep_pool], p_len[keep_pool]
            grow = np.flatnonzero(self.degree[cid])
            if grow.size == 0:
                break
            # Frontier key (-s, r, x): survivors are in (r, x) order, so a stable sort on -s is exact.
            grow = grow[np.argsort(desc_key32(s[grow]), kind="stable")[:beam]]
            hs = s[grow]
            hid = cid[grow]
            if (suffix_max is not None and t + 1 < t_n and p_kw.size == r_n
                    and pool_closed(suffix_max[t + 1], hs[0], p_n[-1], ln_min)):
                break  # nothing a later step offers can enter the full pool (see pool_closed)
        if p_kw.size == 0:
            return None
        return p_kw, p_s, p_n, p_len

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


def _worker_init(tmpdir: str, max_length: int, enum_ratio: float) -> None:
    trie = marisa_trie.BinaryTrie()
    trie.mmap(os.path.join(tmpdir, "prefixes.marisa"))
    arrays = {a: np.load(os.path.join(tmpdir, f"{a}.npy"), mmap_mode="r") for a in _ARRAYS}
    _WORKER["engine"] = _Engine(trie, arrays, max_length, enum_ratio)


def _worker_search(args: tuple[Any, ...]) -> tuple[tuple[np.ndarray, ...], dict[str, int]]:
    tokens, logprobs, config, prefixes, early_stop = args
    engine = _WORKER["engine"]
    engine.counts = dict.fromkeys(_COUNTS, 0)
    return engine.search(tokens, logprobs, config, prefixes, early_stop), engine.counts


def _shutdown(pool: Any, tmpdir: str | None) -> None:
    if pool is not None:
        pool.terminate()
        pool.join()
    if tmpdir is not None:
        shutil.rmtree(tmpdir, ignore_errors=True)


class MarisaSearcher:
    """Exact trie-constrained beam search over a marisa-trie of keyword prefixes.

    ``processes > 1`` spreads queries over that many worker processes (each memory-maps the saved trie);
    call `close()` or use the searcher as a context manager to stop them.  ``early_stop`` enables the
    contract's allowed early stop (output identical either way).  ``enum_ratio`` sets the crossover of the
    adaptive intersection (a hypothesis enumerates its children when it has at most ``enum_ratio`` x valid
    proposals of them, else marisa is asked once per proposal; 0 = marisa only, inf = children table only).
    ``build_seconds`` is the time spent building the trie and its arrays; ``duplicates`` the number of
    repeated keywords collapsed; ``path_counts`` the hypotheses and children enumerated and the hypotheses
    and marisa lookups done, summed over all searches (workers included).
    """

    name = "marisa"

    def __init__(self, keywords: KeywordSet, processes: int = 1, *, early_stop: bool = True,
                 mp_context: str | None = None, enum_ratio: float = ENUM_RATIO) -> None:
        if not isinstance(keywords, KeywordSet):
            raise InputError(f"keywords: expected a flashtrie.KeywordSet, got {type(keywords).__name__}")
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
        self._trie_bytes: int | None = None
        self._pool: Any = None
        self._tmpdir: str | None = None
        self._finalizer: weakref.finalize | None = None
        if self.processes > 1:
            self._start_pool(mp_context)

    def _start_pool(self, mp_context: str | None) -> None:
        self._tmpdir = tempfile.mkdtemp(prefix="flashtrie-marisa-")
        engine = self._engine
        try:
            engine.trie.save(os.path.join(self._tmpdir, "prefixes.marisa"))
            for a in _ARRAYS:
                np.save(os.path.join(self._tmpdir, f"{a}.npy"), getattr(engine, a))
            if mp_context is None:
                mp_context = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
            ctx = multiprocessing.get_context(mp_context)
            self._pool = ctx.Pool(self.processes, initializer=_worker_init,
                                  initargs=(self._tmpdir, engine.max_length, engine.enum_ratio))
        except BaseException:
            _shutdown(None, self._tmpdir)  # no half-made temporary folder left behind
            raise
        self._finalizer = weakref.finalize(self, _shutdown, self._pool, self._tmpdir)

    @property
    def path_counts(self) -> dict[str, int]:
        """Work done per side of the adaptive intersection, summed over all searches so far."""
        return dict(self._engine.counts)

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
        q_n = proposals.num_queries
        pbytes = [p.astype(_BE32).tobytes() for p in norm] if norm is not None else None
        if self.processes > 1 and q_n > 1:
            if self._pool is None:
                raise RuntimeError("search: this MarisaSearcher is closed")
            chunks = np.array_split(np.arange(q_n), min(q_n, 4 * self.processes))
            jobs = [(proposals.tokens[c[0]:c[-1] + 1], proposals.logprobs[c[0]:c[-1] + 1], config,
                     pbytes[c[0]:c[-1] + 1] if pbytes is not None else None, self.early_stop)
                    for c in chunks if c.size]
            parts = self._pool.map(_worker_search, jobs, chunksize=1)
            ids, ss, ns, lens = (np.concatenate([p[0][i] for p in parts]) for i in range(4))
            for _, counts in parts:
                for key, value in counts.items():
                    self._engine.counts[key] += value
        else:
            ids, ss, ns, lens = self._engine.search(proposals.tokens, proposals.logprobs, config, pbytes,
                                                    self.early_stop)
        return SearchResult(keyword_ids=ids, scores=ss, norm_scores=ns, lengths=lens)

    def close(self) -> None:
        """Stop the worker processes (if any) and delete the temporary trie file."""
        if self._finalizer is not None:
            self._pool.close()
            self._pool.join()
            self._finalizer()
            self._pool = None
            self._finalizer = None

    def __enter__(self) -> MarisaSearcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"MarisaSearcher(keywords={self.num_keywords}, trie_keys={len(self._engine.trie)}, "
                f"processes={self.processes})")
