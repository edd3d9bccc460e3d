"""Batched stepwise trie constraints for autoregressive decoders (numpy backend).

A decoder that emits one token per step asks, for a batch of beams at once: which tokens may come next,
does a keyword end here, and where does a token lead.  `TrieStepper` answers from a `NarrowLoudsIndex`
with vectorised numpy work over the whole batch (child ranges through select0, binary searches among
the sorted children): no Python loop per beam or per token, and no per-step cost that grows with the
library beyond the children the states actually have.  `flashtrie.gpu_impl.stepwise.GpuTrieStepper` has
the same API and results on device arrays; both declare the `Stepper` protocol, the one surface an adapter
uses.

**States** (`StepStates`): two ``int64`` arrays ``node`` and ``off``, the position of docs/index-format.md:
the tokens so far end ``off`` tokens into node ``node``'s incoming edge (``off`` equal to the edge length:
at the node; the root is ``(0, 0)``).  Two special values of ``node`` (``off`` is 0):

* ``DEAD`` (-1): a token left the trie (or a forced prefix was not in it).  ``allowed`` is empty,
  ``ends`` is False, and ``mask`` allows **only EOS**, so generation stops at once instead of running
  unconstrained; each call of ``mask`` adds the dead rows it saw to ``dead_count`` (check it to detect
  them).  A dead state stays dead.
* ``FINISHED`` (-2): EOS was taken where a keyword ends.  ``mask`` allows only EOS; ``advance`` keeps it
  FINISHED whatever the token (``generate()`` pads finished rows with ``pad_token_id``).

**EOS** (``eos_token_id``: an int or a sequence of ints) is allowed exactly where a keyword ends.  An EOS
id that is also a token of the trie would be ambiguous and is refused, and so is a trie token that is
not below ``vocab_size`` (a keyword with it could never be generated).

Built on the index's vectorised decoders (``child_range``, ``labels``, ``edge_lengths``, ``edge_tokens``,
``is_terminal``) and on `flashtrie.search_core` (``check_index``; forced prefixes through
``normalize_prefixes``, as every search backend checks them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .errors import InputError
from .index import NarrowLoudsIndex
from .limits import MAX_TOKEN
from .search_core import check_index, normalize_prefixes

__all__ = ["DEAD", "FINISHED", "StepStates", "Stepper", "TrieStepper", "eos_ids", "check_vocab", "check_eos"]

DEAD = -1
FINISHED = -2
_MAX_EOS = 8
_MASK_CHUNK = 1 << 18  # entries of the logits `mask` handles at a time


@dataclass(frozen=True)
class StepStates:
    """Cursor states of a batch: ``node`` and ``off``, int64 arrays of one length (numpy or device arrays)."""

    node: Any
    off: Any

    def __len__(self) -> int:
        return int(self.node.shape[0])

    def take(self, rows: Any) -> StepStates:
        """The states of ``rows`` (e.g. the parent beams chosen by a beam search step)."""
        return StepStates(self.node[rows], self.off[rows])


@runtime_checkable
class Stepper(Protocol):
    """The stepwise API every backend gives (`TrieStepper` on numpy arrays, ``GpuTrieStepper`` on device
    arrays), and all that a decoding adapter (`flashtrie.hf`) uses: states from the root, from forced prefixes or
    from generated tokens (`walk`), one token's step (`advance`), the allowed next tokens (`allowed`,
    `allowed_padded`, `ends`), the logits mask (`mask`, fused with a step in `advance_mask` and `walk_mask`),
    the EOS check (`checked_eos`) and the dead-row count (`dead_count`, `reset_dead_count`).  Arrays are the
    backend's (numpy, or the GPU's device arrays); results are equal."""

    backend: str
    index: NarrowLoudsIndex

    @property
    def dead_count(self) -> int: ...

    def reset_dead_count(self) -> None: ...
    def checked_eos(self, eos_token_id: Any) -> tuple[int, ...]: ...
    def start(self, n: int) -> StepStates: ...
    def start_from_prefixes(self, prefixes: Sequence[Sequence[int]]) -> StepStates: ...
    def walk(self, ids: Any, begin: Any = None, end: Any = None, eos_token_id: Any = None) -> StepStates: ...
    def advance(self, states: StepStates, tokens: Any, eos_token_id: Any = None) -> StepStates: ...
    def ends(self, states: StepStates) -> Any: ...
    def allowed(self, states: StepStates) -> tuple[Any, Any]: ...
    def allowed_padded(self, states: StepStates, max_per_state: int) -> tuple[Any, Any]: ...
    def mask(self, states: StepStates, vocab_size: int, eos_token_id: Any, out: Any = None,
             additive: bool = True) -> Any: ...
    def advance_mask(self, states: StepStates, tokens: Any, vocab_size: int, eos_token_id: Any, out: Any = None,
                     additive: bool = True) -> tuple[StepStates, Any]: ...
    def walk_mask(self, ids: Any, vocab_size: int, eos_token_id: Any, begin: Any = None, end: Any = None,
                  out: Any = None, additive: bool = True) -> Any: ...


def eos_ids(eos_token_id: int | Sequence[int] | None) -> tuple[int, ...]:
    """EOS ids as a tuple of ints (empty for None); refuses bools, negatives and more than 8 ids."""
    if eos_token_id is None:
        return ()
    if isinstance(eos_token_id, np.ndarray) and eos_token_id.ndim == 0:
        eos_token_id = eos_token_id[()]
    try:
        vals = [eos_token_id] if isinstance(eos_token_id, (int, np.integer)) else list(eos_token_id)
    except TypeError:
        raise InputError(f"eos_token_id: expected an int or a sequence of ints, got {eos_token_id!r}") from None
    if not 1 <= len(vals) <= _MAX_EOS:
        raise InputError(f"eos_token_id: expected 1 to {_MAX_EOS} ids, got {len(vals)}")
    for v in vals:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or not 0 <= int(v) < 2**32 - 1:
            raise InputError(f"eos_token_id: {v!r} is not a token id in [0, 2**32 - 2]")
    return tuple(int(v) for v in vals)


def check_vocab(index: NarrowLoudsIndex, vocab_size: int) -> None:
    """Refuse a vocabulary that does not hold every token of the trie."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or vocab_size < 1:
        raise InputError(f"vocab_size: expected a positive integer, got {vocab_size!r}")
    if vocab_size > MAX_TOKEN + 1:
        raise InputError(f"vocab_size: {vocab_size} is more than the {MAX_TOKEN + 1:,} token ids there are "
                         f"([0, {MAX_TOKEN}]; 2**32 - 1 is reserved for padding)")
    if index.max_token >= vocab_size:
        raise InputError(f"vocab_size: the index holds token {index.max_token}, not below vocab_size {vocab_size}; "
                         "a keyword with it could never be generated (build the index over this vocabulary)")


def check_eos(index: NarrowLoudsIndex, eos: tuple[int, ...]) -> None:
    """Refuse an EOS id that is also a token of the trie (one scan of the labels and the suffix store)."""
    if not eos:
        return
    e = np.asarray(eos, dtype=np.int64)
    cand = np.flatnonzero(np.isin(index.labels_lo, (e & 0xFFFF).astype(np.uint16)))
    cand = cand[cand > 0]
    hit = np.isin(index.labels(cand).astype(np.int64), e).any() if cand.size else False
    if not hit and index.suffix.size:
        hit = bool(np.isin(index.suffix.to_array(), e).any())
    if hit:
        raise InputError(f"eos_token_id: {list(eos)} holds a token that occurs in the trie; EOS must not be a "
                         "keyword token (a step could not tell the end from the keyword)")


class TrieStepper(Stepper):
    """The stepwise API over a `NarrowLoudsIndex` on numpy arrays (see the module docstring)."""

    backend = "numpy"

    def __init__(self, index: NarrowLoudsIndex) -> None:
        self.index = check_index(index)
        self._dead = 0
        self._eos_ok: set[tuple[int, ...]] = set()
        self._root: np.ndarray | None = None

    # ------------------------------------------------------------------ start states
    def start(self, n: int) -> StepStates:
        """``n`` states at the root."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise InputError(f"n: expected a non-negative integer, got {n!r}")
        return StepStates(np.zeros(int(n), dtype=np.int64), np.zeros(int(n), dtype=np.int64))

    def start_from_prefixes(self, prefixes: Sequence[Sequence[int]]) -> StepStates:
        """One state per forced prefix (the empty prefix is the root; a prefix not in the trie is DEAD);
        tokens are checked as every search checks them (`flashtrie.search_core.normalize_prefixes`)."""
        n = len(prefixes) if isinstance(prefixes, (Sequence, np.ndarray)) else -1
        pre = normalize_prefixes(prefixes, max(n, 0))
        assert pre is not None
        lens = np.fromiter((p.size for p in pre), dtype=np.int64, count=n)
        ids = np.zeros((n, int(lens.max()) if n else 0), dtype=np.int64)
        if n and ids.shape[1]:
            ids[np.arange(ids.shape[1]) < lens[:, None]] = np.concatenate(pre)
        return self.walk(ids, end=lens)  # one vectorised advance per column, as every row

    def walk(self, ids: Any, begin: Any = None, end: Any = None, eos_token_id: Any = None) -> StepStates:
        """States after feeding ``ids[r, begin[r]:end[r]]`` from the root, for each row of ``ids[n, L]``
        (``begin`` defaults to 0 and ``end`` to L; an int applies to every row).  Used to re-derive the
        state of every row from its generated suffix (`flashtrie.hf`)."""
        ids = np.asarray(ids)
        if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
            raise InputError(f"ids: expected a 2-D integer array [n, L], got {ids.dtype}{list(ids.shape)}")
        n, width = ids.shape
        lo = _cols(begin, 0, n, width, "begin")
        hi = _cols(end, width, n, width, "end")
        st = self.start(n)
        if n == 0:
            return st
        for c in range(int(lo.min()), int(hi.max())):
            go = (lo <= c) & (c < hi)
            if not go.any():
                continue
            nxt = self.advance(st, ids[:, c], eos_token_id)
            st = StepStates(np.where(go, nxt.node, st.node), np.where(go, nxt.off, st.off))
        return st

    # ------------------------------------------------------------------ queries
    def _decode(self, states: StepStates) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(node, off, at_node) with ``at_node`` True for states at a node; validates the states."""
        if not isinstance(states, StepStates):
            raise InputError(f"states: expected StepStates, got {type(states).__name__}")
        node = np.asarray(states.node)
        off = np.asarray(states.off)
        if node.ndim != 1 or off.shape != node.shape or not (np.issubdtype(node.dtype, np.integer)
                                                           and np.issubdtype(off.dtype, np.integer)):
            raise InputError(f"states: expected two 1-D integer arrays of one length, got {node.shape}, {off.shape}")
        if node.size and (int(node.min()) < FINISHED or int(node.max()) >= self.index.num_nodes):
            bad = int(node[(node < FINISHED) | (node >= self.index.num_nodes)][0])  # before a cast could wrap it
            raise InputError(f"states: node {bad} is out of range [-2, {self.index.num_nodes})")
        if off.size and int(off.max()) > 2**62:
            raise InputError(f"states: off {int(off.max())} is outside every edge")
        node = node.astype(np.int64, copy=False)
        off = off.astype(np.int64, copy=False)
        live = node >= 0
        m = np.zeros(node.shape, dtype=np.int64)
        if live.any():
            m[live] = self.index.edge_lengths(node[live])
        bad = (off < 0) | (off > m) | ((node > 0) & (off < 1)) | (~live & (off != 0))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(f"states: off {int(off[i])} of node {int(node[i])} is outside its edge of {int(m[i])}")
        return node, off, live & (off == m)

    def ends(self, states: StepStates) -> np.ndarray:
        """True where a keyword ends at the state."""
        node, _, at = self._decode(states)
        out = np.zeros(node.shape, dtype=bool)
        if at.any():
            out[at] = self.index.is_terminal(node[at])
        return out

    def _counts(self, node: np.ndarray, off: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        first = np.zeros(node.shape, dtype=np.int64)
        cnt = np.where((node >= 0) & ~at, 1, 0).astype(np.int64)
        if at.any():
            f, e = self.index.child_range(node[at])
            first[at] = f
            cnt[at] = e - f
        return first, cnt

    def allowed(self, states: StepStates) -> tuple[np.ndarray, np.ndarray]:
        """Allowed next trie tokens as CSR: ``offsets`` int64[n + 1], ``tokens`` uint32 (ascending per state).

        EOS is not among them: `ends` says where it is allowed."""
        return self._allowed(*self._decode(states))

    def _root_labels(self) -> np.ndarray:
        if self._root is None:
            f, e = (int(v[0]) for v in self.index.child_range(np.zeros(1, dtype=np.int64)))
            self._root = self.index.labels(np.arange(f, e, dtype=np.int64))
        return self._root

    def _allowed(self, node: np.ndarray, off: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        first, cnt = self._counts(node, off, at)
        offsets = np.zeros(node.size + 1, dtype=np.int64)
        np.cumsum(cnt, out=offsets[1:])
        tokens = np.zeros(int(offsets[-1]), dtype=np.uint32)
        root = at & (node == 0)  # the root's children are decoded once and reused
        if root.any():
            tokens[np.repeat(root, cnt)] = np.tile(self._root_labels(), int(np.count_nonzero(root)))
        kids = np.repeat(at & ~root, cnt)
        if kids.any():
            row_first = np.repeat(first - offsets[:-1], cnt)
            tokens[kids] = self.index.labels(row_first[kids] + np.flatnonzero(kids))
        mid = (node >= 0) & ~at
        if mid.any():
            tokens[offsets[:-1][mid]] = self.index.edge_tokens(node[mid], off[mid])
        return offsets, tokens

    def allowed_padded(self, states: StepStates, max_per_state: int) -> tuple[np.ndarray, np.ndarray]:
        """Fixed-capacity form: ``counts`` int64[n] (all allowed tokens, possibly > max_per_state) and
        ``tokens`` int64[n, max_per_state]: the first ``min(count, max_per_state)``, ascending, then -1.
        Only those tokens are decoded: memory in proportion to the output, whatever the fan-out."""
        if isinstance(max_per_state, bool) or not isinstance(max_per_state, (int, np.integer)) or max_per_state < 0:
            raise InputError(f"max_per_state: expected a non-negative integer, got {max_per_state!r}")
        node, off, at = self._decode(states)
        first, counts = self._counts(node, off, at)
        out = np.full((counts.size, int(max_per_state)), -1, dtype=np.int64)
        k = np.minimum(counts, max_per_state)
        rows = np.repeat(np.arange(counts.size), k)
        cols = np.arange(rows.size) - np.repeat(np.cumsum(k) - k, k)
        kids = at[rows]
        if kids.any():
            out[rows[kids], cols[kids]] = self.index.labels(first[rows[kids]] + cols[kids])
        mid = np.flatnonzero((node >= 0) & ~at & (k > 0))
        if mid.size:
            out[mid, 0] = self.index.edge_tokens(node[mid], off[mid])
        return counts, out

    # ------------------------------------------------------------------ advance
    def checked_eos(self, eos_token_id: Any) -> tuple[int, ...]:
        """The EOS ids as a tuple (`eos_ids`), refused where one is a token of the trie (checked once per set)."""
        eos = eos_ids(eos_token_id)
        if eos not in self._eos_ok:
            check_eos(self.index, eos)
            self._eos_ok.add(eos)
        return eos

    def _find_child(self, first: np.ndarray, end: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Child with label x in [first, end) (labels ascending), or -1: a vectorised lower bound."""
        lo = first.copy()
        n = end - first
        while True:
            act = np.flatnonzero(n > 0)
            if act.size == 0:
                break
            half = n[act] >> 1
            right = self.index.labels(lo[act] + half).astype(np.int64) < x[act]
            lo[act] = np.where(right, lo[act] + half + 1, lo[act])
            n[act] = np.where(right, n[act] - half - 1, half)
        out = np.full(first.shape, -1, dtype=np.int64)
        inside = np.flatnonzero(lo < end)
        if inside.size:
            hit = self.index.labels(lo[inside]).astype(np.int64) == x[inside]
            out[inside[hit]] = lo[inside[hit]]
        return out

    def advance(self, states: StepStates, tokens: np.ndarray, eos_token_id: Any = None) -> StepStates:
        """Each state after its token; a token that leaves the trie gives DEAD: any integer that is not the
        state's next label, negative ones and ones of 2**32 - 1 or more included, on every backend (the GPU's
        tokens are device arrays it reads without a synchronisation, so neither backend refuses a value).  With
        ``eos_token_id``, EOS where a keyword ends gives FINISHED (elsewhere DEAD); FINISHED stays FINISHED
        whatever the token."""
        node, off, at = self._decode(states)
        x = np.asarray(tokens)
        if x.shape != node.shape or not np.issubdtype(x.dtype, np.integer):
            raise InputError(f"tokens: expected {node.size} integer tokens, got {x.dtype}{list(x.shape)}")
        x = x.astype(np.int64)
        eos = self.checked_eos(eos_token_id)
        new_node = np.full(node.shape, DEAD, dtype=np.int64)
        new_off = np.zeros(node.shape, dtype=np.int64)
        mid = np.flatnonzero((node >= 0) & ~at)
        if mid.size:
            ok = self.index.edge_tokens(node[mid], off[mid]).astype(np.int64) == x[mid]
            new_node[mid[ok]] = node[mid[ok]]
            new_off[mid[ok]] = off[mid[ok]] + 1
        atn = np.flatnonzero(at)
        if atn.size:
            f, e = self.index.child_range(node[atn])
            child = self._find_child(f, e, x[atn])
            hit = child >= 0
            new_node[atn[hit]] = child[hit]
            new_off[atn[hit]] = 1
        if eos:
            is_eos = np.isin(x, np.asarray(eos, dtype=np.int64))
            term = np.zeros(node.shape, dtype=bool)
            if atn.size:
                term[atn] = self.index.is_terminal(node[atn])
            new_node[is_eos & term] = FINISHED
        new_node[node == FINISHED] = FINISHED
        new_off[new_node < 0] = 0
        return StepStates(new_node, new_off)

    # ------------------------------------------------------------------ logits mask
    def mask(self, states: StepStates, vocab_size: int, eos_token_id: Any, out: np.ndarray | None = None,
             additive: bool = True) -> np.ndarray:
        """The mask over a vocabulary of ``vocab_size`` for every state.

        ``additive``: applied in place to ``out`` (float logits ``[n, vocab_size]``; a new float32 array of
        zeros when None): every disallowed entry becomes -inf and every allowed entry keeps its value bit for
        bit (the same as adding 0 / -inf except that a -0.0 stays -0.0 and a NaN or +inf at a disallowed
        token becomes -inf too, so it can never be chosen).  Else a boolean mask (True: allowed), written to
        ``out`` (bool ``[n, vocab_size]``) or a new array.  EOS is allowed exactly where a keyword ends, and
        is the only token allowed for FINISHED and DEAD states; dead rows add to ``dead_count``."""
        check_vocab(self.index, vocab_size)
        eos = self.checked_eos(eos_token_id)
        if not eos:
            raise InputError("eos_token_id: a mask needs an EOS token id")
        if max(eos) >= vocab_size:
            raise InputError(f"eos_token_id: {max(eos)} is not below vocab_size {vocab_size}")
        node, off, at = self._decode(states)
        n, v = node.size, int(vocab_size)
        if out is not None:
            out = _check_out(out, (n, v), additive)
        elif not additive:
            out = np.empty((n, v), dtype=bool)
        else:
            out = np.zeros((n, v), dtype=np.float32)
        ends = np.zeros(n, dtype=bool)
        if at.any():
            ends[at] = self.index.is_terminal(node[at])
        eos_col = np.asarray(eos, dtype=np.int64)
        step = max(1, _MASK_CHUNK // max(v, 1))  # rows a chunk: its temporaries stay below _MASK_CHUNK entries
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            offsets, tokens = self._allowed(node[lo:hi], off[lo:hi], at[lo:hi])
            allow = np.zeros((hi - lo, v), dtype=bool)
            allow[np.repeat(np.arange(hi - lo), np.diff(offsets)), tokens] = True
            allow[np.ix_(np.flatnonzero(ends[lo:hi] | (node[lo:hi] < 0)), eos_col)] = True
            if additive:  # -inf stored only where disallowed: allowed entries are never read or converted
                np.copyto(out[lo:hi], out.dtype.type(-np.inf), where=~allow)
            else:
                out[lo:hi] = allow
        self._dead += int(np.count_nonzero(node == DEAD))
        return out

    def advance_mask(self, states: StepStates, tokens: np.ndarray, vocab_size: int, eos_token_id: Any,
                     out: np.ndarray | None = None, additive: bool = True) -> tuple[StepStates, np.ndarray]:
        """`advance`, then `mask` of the new states: ``(new_states, mask)`` (one launch on the GPU)."""
        new = self.advance(states, tokens, eos_token_id)
        return new, self.mask(new, vocab_size, eos_token_id, out=out, additive=additive)

    def walk_mask(self, ids: np.ndarray, vocab_size: int, eos_token_id: Any, begin: Any = None, end: Any = None,
                  out: np.ndarray | None = None, additive: bool = True) -> np.ndarray:
        """`mask` of the states `walk` gives (one launch on the GPU)."""
        states = self.walk(ids, begin=begin, end=end, eos_token_id=eos_token_id)
        return self.mask(states, vocab_size, eos_token_id, out=out, additive=additive)

    @property
    def dead_count(self) -> int:
        """Dead rows seen by `mask` since construction (or `reset_dead_count`)."""
        return self._dead

    def reset_dead_count(self) -> None:
        """Start counting dead rows from 0."""
        self._dead = 0


def _cols(v: Any, default: int, n: int, width: int, name: str) -> np.ndarray:
    """A per-row column bound (None: ``default``; an int for every row; or n ints, 1-D) in [0, width]."""
    if v is None:
        return np.full(n, default, dtype=np.int64)
    if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
        lo = hi = int(v)
        a = None
    else:
        arr = np.asarray(v)
        if arr.shape != (n,) or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
            raise InputError(f"{name}: expected an int or {n} ints (one a row of ids), got "
                             f"{arr.dtype}{list(arr.shape)}")
        lo, hi = (int(arr.min()), int(arr.max())) if n else (0, 0)  # before a cast could wrap them
        a = arr.astype(np.int64)
    if lo < 0 or hi > width:
        raise InputError(f"{name}: expected column bounds in [0, {width}], got {lo}..{hi}")
    return np.full(n, lo, dtype=np.int64) if a is None else a


def _check_out(out: Any, shape: tuple[int, int], additive: bool) -> np.ndarray:
    if not isinstance(out, np.ndarray):
        raise InputError(f"out: expected a numpy array, got {type(out).__name__}")
    if out.shape != shape:
        raise InputError(f"out: expected shape {list(shape)}, got {list(out.shape)}")
    if not out.flags.writeable:
        raise InputError("out: the array is read-only (the mask is written into it)")
    if additive and not np.issubdtype(out.dtype, np.floating):
        raise InputError(f"out: an additive mask needs a float array, got {out.dtype}")
    if not additive and out.dtype != np.bool_:
        raise InputError(f"out: a boolean mask needs a bool array, got {out.dtype}")
    return out
