"""`Proposals`: the model's K proposed tokens and logprobs per query and decoding step."""

from __future__ import annotations

import json
import os
from dataclasses import InitVar, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import proposal_checks as checks
from .errors import InputError
from .io_util import atomic_write
from .limits import MAX_PROPOSALS, MAX_STEPS, PAD_TOKEN
from .tokens import check_token_sequence

__all__ = ["Proposals"]


@dataclass(frozen=True, eq=False)
class Proposals:
    """``tokens[Q, T, K]`` (``uint32``, padding ``2**32 - 1``) and ``logprobs[Q, T, K]`` (``float32``).

    Row ``(q, t)`` holds the K tokens proposed for query q at step t, in any order.  Construct with
    ``Proposals(tokens, logprobs)``: signed input with ``-1`` as padding is accepted, everything is
    validated (shapes, NaN / +inf logprobs, duplicate tokens in a row) before any search.  Values that
    look like probabilities (none below 0, some above 0) are refused, as the TSV reader refuses them:
    ``probabilities=True`` takes the natural logs of probabilities in [0, 1]; ``probabilities=False``
    states that the values are log-probabilities or model scores as given (non-negative ones included).
    """

    tokens: np.ndarray
    logprobs: np.ndarray
    probabilities: InitVar[bool | None] = None

    def __post_init__(self, probabilities: bool | None) -> None:
        if probabilities is not None and not isinstance(probabilities, (bool, np.bool_)):
            raise InputError(f"probabilities: expected True, False or None, got {probabilities!r}")
        tokens, logprobs = _validate(self.tokens, self.logprobs,
                                     None if probabilities is None else bool(probabilities))
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "logprobs", logprobs)

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(Q, T, K)``."""
        q, t, k = self.tokens.shape
        return int(q), int(t), int(k)

    @property
    def num_queries(self) -> int:
        return self.shape[0]

    def __getitem__(self, sl: slice | int | np.ndarray) -> Proposals:
        """Select queries (a slice, an index or an index array) as a new `Proposals`."""
        if isinstance(sl, (int, np.integer)) and not isinstance(sl, (bool, np.bool_)):
            i, n = int(sl), self.num_queries
            if not -n <= i < n:
                raise IndexError(f"query index {i} out of range for {n} queries")
            i %= n
            sl = slice(i, i + 1)
        return Proposals(self.tokens[sl], self.logprobs[sl], probabilities=False)  # already checked

    # ------------------------------------------------------------------ public FlashTrie TSV format
    def to_tsv(self, path: str | os.PathLike[str], queries: list[str] | None = None) -> None:
        """Write the public FlashTrie proposal TSV: ``query<TAB>{"indices": [[...]], "probs": [[...]]}``.

        ``indices[t][k]`` is the token, ``probs[t][k]`` its logprob; padding entries are left out
        (rows may then be shorter than K).  ``queries`` names the lines (default ``q0``, ``q1``, ...).
        """
        q_n, t_n, _ = self.shape
        names = queries if queries is not None else [f"q{i}" for i in range(q_n)]
        if len(names) != q_n:
            raise InputError(f"queries: expected {q_n} names, got {len(names)}")
        lines = []
        for q in range(q_n):
            if "\t" in names[q] or names[q].splitlines() != ([names[q]] if names[q] else []):
                raise InputError(f"queries[{q}]: a query name may not contain a tab or line break: {names[q]!r}")
            idx, probs = [], []
            for t in range(t_n):
                keep = self.tokens[q, t] != PAD_TOKEN
                idx.append(self.tokens[q, t][keep].tolist())
                # float32 -> float: repr round-trips the exact float32 value
                probs.append([float(x) for x in self.logprobs[q, t][keep]])
            lines.append(names[q] + "\t" + json.dumps({"indices": idx, "probs": probs}))
        atomic_write(path, ("\n".join(lines) + "\n").encode())

    @classmethod
    def from_tsv(cls, path: str | os.PathLike[str], probabilities: bool = False) -> tuple[Proposals, list[str]]:
        """Read the public FlashTrie proposal TSV; short rows are padded to the longest row (K).

        Returns the proposals and the query names.  Every query must have the same number of steps.
        ``"probs"`` are log-probabilities (model scores: any finite value or -inf).  A file whose values all
        lie in [0, 1], some above 0, holds probabilities, not log-probabilities, and is refused (ranking
        probabilities as logprobs puts them above every real logprob); with ``probabilities=True`` the
        values must be probabilities in [0, 1] and their natural logs are used (0 becomes -inf).
        """
        names: list[str] = []
        rows: list[tuple[list[np.ndarray], list[np.ndarray]]] = []
        linenos: list[int] = []
        try:
            text = Path(path).read_text(encoding="utf-8-sig")  # a leading BOM is not part of the first name
        except UnicodeDecodeError as e:
            raise InputError(f"{path}: not a UTF-8 text file ({e})") from None
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            where = f"{path}: line {lineno}"
            name, sep, payload = line.partition("\t")
            if not sep:
                raise InputError(f"{where}: expected 'query<TAB>{{\"indices\": ..., \"probs\": ...}}', found no tab")
            try:
                obj = json.loads(payload)
            except (ValueError, RecursionError) as e:
                raise InputError(f"{where}: not a proposal record with 'indices' and 'probs' ({e})") from None
            try:
                rows.append(_parse_record(obj, probabilities))
            except InputError as e:
                raise InputError(f"{where}: {e}") from None
            names.append(name)
            linenos.append(lineno)
        if not rows:
            raise InputError(f"{path}: no proposal records found")
        t_n = len(rows[0][0])
        for i, (idx, _) in enumerate(rows):
            if len(idx) != t_n:
                raise InputError(f"{path}: line {linenos[i]}: query {names[i]!r} has {len(idx)} steps, the first "
                                 f"query (line {linenos[0]}) has {t_n}; every query needs the same number of steps")
        k_n = max((r.size for idx, _ in rows for r in idx), default=0)
        q_n = len(rows)
        tokens = np.full((q_n, t_n, k_n), PAD_TOKEN, dtype=np.uint32)
        logprobs = np.full((q_n, t_n, k_n), -np.inf, dtype=np.float32)
        for q, (idx, probs) in enumerate(rows):
            for t in range(t_n):
                n = idx[t].size
                tokens[q, t, :n] = idx[t]
                logprobs[q, t, :n] = probs[t]
        if not probabilities:
            _refuse_probabilities(path, tokens, logprobs, linenos)
        try:
            return cls(tokens, logprobs, probabilities=False), names  # converted or checked above
        except InputError as e:  # only the T / K limits are left to check here
            raise InputError(f"{path}: {e}") from None


def _parse_record(obj: object, probabilities: bool = False) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Validate one TSV record ``{"indices": [[tok, ...], ...], "probs": [[lp, ...], ...]}``.

    Returns the token rows (``uint32``, padding ``2**32 - 1``) and logprob rows (``float32``).  Tokens
    must be JSON integers (``2.0`` and ``true`` are refused), logprobs JSON numbers; NaN and +inf
    logprobs and a token twice in one row are refused as in `Proposals`.
    """
    if not isinstance(obj, dict) or "indices" not in obj or "probs" not in obj:
        raise InputError("not a proposal record with 'indices' and 'probs'")
    idx, probs = obj["indices"], obj["probs"]
    for key, v in (("indices", idx), ("probs", probs)):
        if not isinstance(v, list):
            raise InputError(f"'{key}': expected a list of steps (one list per step), got {v!r}")
    if len(idx) != len(probs):
        raise InputError(f"'indices' and 'probs' differ in shape: {len(idx)} vs {len(probs)} steps")
    tok_rows, lp_rows = [], []
    for t, (row_i, row_p) in enumerate(zip(idx, probs, strict=True)):
        for key, v in (("indices", row_i), ("probs", row_p)):
            if not isinstance(v, list):
                raise InputError(f"{key}[{t}]: expected a list (the proposals of step {t}), got {v!r}")
        if len(row_i) != len(row_p):
            raise InputError(f"'indices' and 'probs' differ in shape: step {t} has {len(row_i)} tokens and "
                             f"{len(row_p)} logprobs")
        tok = check_token_sequence(row_i, f"indices[{t}]", allow_padding=True)
        for k, x in enumerate(row_p):
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise InputError(f"probs[{t}][{k}]: expected a number (a logprob), got {x!r}")
            if isinstance(x, int) and not -1e308 < x < 1e308:
                raise InputError(f"probs[{t}][{k}]: {x} is out of range; logprobs must be finite or -inf")
        with np.errstate(over="ignore"):  # beyond float32's range: +inf is refused below
            lp = np.array(row_p, dtype=np.float64).astype(np.float32)
        bad = np.flatnonzero((tok != PAD_TOKEN) & (np.isnan(lp) | (lp == np.inf)))
        if bad.size:
            k = int(bad[0])
            raise InputError(f"probs[{t}][{k}]: {row_p[k]!r} is not allowed; logprobs must be finite or -inf "
                             "(NaN and +inf are errors)")
        lp = _as_logprobs(lp, tok, t, row_p, probabilities)
        real = tok[tok != PAD_TOKEN]
        uniq, counts = np.unique(real, return_counts=True)
        if (counts > 1).any():
            raise InputError(f"indices[{t}]: token {int(uniq[counts > 1][0])} appears more than once in one row; "
                             "each proposed token may appear once per row")
        tok_rows.append(tok)
        lp_rows.append(lp)
    return tok_rows, lp_rows


def _from_torch(name: str, a: object) -> object:
    """A PyTorch CPU tensor as something numpy reads: detached from autograd; bfloat16 / float16 logprobs
    widened to float32 (exact: every such value is a float32).  Other objects pass unchanged."""
    if not type(a).__module__.startswith("torch") or not hasattr(a, "detach"):
        return a
    t = a.detach()
    device = str(getattr(t, "device", "cpu"))
    if device != "cpu":
        raise InputError(f"{name}: a torch tensor on {device}; Proposals takes host arrays (call .cpu(), or pass "
                         "device arrays to GpuSearcher.search)")
    dtype = str(t.dtype).removeprefix("torch.")
    if dtype in ("bfloat16", "float16", "half"):
        if name == "tokens":
            raise InputError(f"tokens: expected an integer array, got dtype {dtype}")
        t = t.float()
    return t


def _rectangular(name: str, a: object) -> np.ndarray:
    """``np.asarray(a)``, with a ragged nested list refused by name (torch tensors through `_from_torch`)."""
    a = _from_torch(name, a)
    try:
        return np.asarray(a)
    except ValueError as e:
        raise InputError(f"{name}: expected a rectangular [Q, T, K] array (every row of the same length): "
                         f"{str(e).splitlines()[0]}") from None


def _validate(tokens: object, logprobs: object, probabilities: bool | None) -> tuple[np.ndarray, np.ndarray]:
    """Checked copies of the inputs (read-only: a checked row cannot change afterwards); see `proposal_checks`."""
    tok = _rectangular("tokens", tokens)
    lp = _rectangular("logprobs", logprobs)
    if tok.ndim != 3:
        raise InputError(f"tokens: expected shape [Q, T, K], got {tok.shape}")
    if lp.shape != tok.shape:
        raise InputError(f"logprobs: shape {lp.shape} differs from tokens' shape {tok.shape}")
    q_n, t_n, k_n = tok.shape
    if t_n > MAX_STEPS:
        raise InputError(f"tokens: T = {t_n} steps is over the limit {MAX_STEPS}")
    if k_n > MAX_PROPOSALS:
        raise InputError(f"tokens: K = {k_n} proposals per row is over the limit {MAX_PROPOSALS}")
    scan = checks.tokens_u32(tok)
    tok32 = scan.tokens
    lp32 = checks.logprobs_f32(lp)
    hi = checks.check_logprobs(tok32, lp32)
    checks.check_duplicates(scan)
    if probabilities:
        lp32 = checks.probabilities_to_logprobs(tok32, lp)
    elif probabilities is None:
        at = checks.looks_like_probabilities(tok32, lp32, hi, scan.padded)
        if at is not None:
            q, t, k = at
            raise InputError(f"logprobs[{q}, {t}, {k}]: {float(lp32[q, t, k]):.6g}, and no value is below 0: these "
                             "look like probabilities; pass log-probabilities (log p), probabilities=True to take "
                             "their logs, or probabilities=False for model scores taken as given")
    out = np.ascontiguousarray(tok32), np.ascontiguousarray(lp32)  # both are new arrays
    for arr in out:
        arr.flags.writeable = False
    return out


def _refuse_probabilities(path: object, tokens: np.ndarray, logprobs: np.ndarray, linenos: list[int]) -> None:
    """Refuse a TSV whose "probs" are all in [0, 1] with some above 0: probabilities passed as logprobs."""
    real = tokens != PAD_TOKEN
    vals = logprobs[real]
    if vals.size == 0 or not (vals >= 0).all() or not (vals > 0).any():
        return
    q, t, k = (int(i[0]) for i in np.nonzero(real & (logprobs > 0)))
    raise InputError(f"{path}: line {linenos[q]}: probs[{t}][{k}]: {float(logprobs[q, t, k]):.6g} and every other "
                     "value lie in [0, 1]: these look like probabilities; pass log-probabilities (log p), or "
                     "--probabilities to take their logs")


def _as_logprobs(lp: np.ndarray, tok: np.ndarray, t: int, row: list[Any], probabilities: bool) -> np.ndarray:
    """Row ``t`` of a TSV's "probs" as parsed (``probabilities``: converted from probabilities in [0, 1])."""
    real = tok != PAD_TOKEN
    if not probabilities:
        return lp
    out = np.where(real & ~((lp >= 0) & (lp <= 1)), np.nan, lp)
    bad = np.flatnonzero(real & np.isnan(out))
    if bad.size:
        k = int(bad[0])
        raise InputError(f"probs[{t}][{k}]: {row[k]!r} is not a probability in [0, 1] (--probabilities)")
    with np.errstate(divide="ignore", invalid="ignore"):  # log(0) = -inf; padding entries are not used
        logs = np.log(np.asarray(row, dtype=np.float64)).astype(np.float32)
    return np.where(real, logs, np.float32(-np.inf)).astype(np.float32)
