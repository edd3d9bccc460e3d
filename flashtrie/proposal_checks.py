"""The checks a `Proposals` makes of its arrays, as few vectorised passes as the rules allow.

The common input (a full ``[Q, T, K]`` top-K, no padding, finite logprobs) costs: one reduction of the
tokens (the maximum of their unsigned view: no negative value, none out of range, no padding) and their
conversion, one copy and one maximum of the logprobs, and for the duplicate rule one row sort of the tokens
(16-bit where every token fits) in a buffer the thread keeps, and one compare of neighbours.  The row sort
is most of the cost; a reusable table written and read back at (row, token) instead, and a single sort of
row-tagged keys, both measured slower.  Each fast test is exact: when it cannot decide (padding present, a
NaN somewhere, equal neighbours across two rows), the check falls back to the masked pass that finds the
first offending entry, so refusals and their messages do not depend on the path taken.
"""

from __future__ import annotations

import math
import threading
from functools import partial
from typing import NamedTuple

import numpy as np

from .cpus import in_parallel, usable_cpus
from .errors import InputError
from .limits import PAD_TOKEN
from .tokens import is_integer_dtype

__all__ = ["TokenScan", "tokens_u32", "logprobs_f32", "check_logprobs", "check_duplicates", "looks_like_probabilities",
           "probabilities_to_logprobs"]

_U16_PAD = 0xFFFF
_UNSIGNED: dict[int, type[np.unsignedinteger]] = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
#: Entries per worker below which a thread costs more than it saves on the duplicates sort.
_PARALLEL_SORT_MIN = 1 << 17
#: The largest duplicates-sort buffer a thread keeps for its next call.
_SCRATCH_BYTES = 1 << 22
_local = threading.local()


class TokenScan(NamedTuple):
    """Checked tokens as a new ``uint32`` array, with what the range check learnt on the way: ``top``, the
    largest real token + 1 (0: none; None: not known), and whether any entry is padding."""

    tokens: np.ndarray
    top: int | None
    padded: bool


def tokens_u32(tok: np.ndarray) -> TokenScan:
    """``tok`` as a new ``uint32`` array (``-1`` becomes padding ``2**32 - 1``); out-of-range tokens refused."""
    if tok.size == 0:
        return TokenScan(np.zeros(tok.shape, dtype=np.uint32), 0, False)
    if not is_integer_dtype(tok.dtype):  # bool, timedelta64, datetime64, object, complex ...
        raise InputError(f"tokens: expected an integer array, got dtype {tok.dtype}")
    hi = _max_if_not_negative(tok)
    if hi is not None:  # every token >= 0: one reduction decides range and padding
        if hi > PAD_TOKEN:
            _raise_token_range(tok)
        padded = hi == PAD_TOKEN
        top = None if padded else hi + 1
    else:
        lo, hi = int(tok.min()), int(tok.max())
        if lo < -1 or hi > PAD_TOKEN:
            _raise_token_range(tok)
        padded = lo == -1 or hi == PAD_TOKEN
        top = None if hi == PAD_TOKEN else max(hi + 1, 0)
    if tok.dtype.itemsize == 4 and tok.dtype.isnative:  # int32 / uint32: the same bits, -1 as 2**32 - 1
        out = tok.view(np.uint32).copy()  # the caller's array may change after the checks; ours may not
    else:
        out = tok.astype(np.uint32)  # -1 wraps to 2**32 - 1 (integer casts are modular)
    return TokenScan(out, top, padded)


def _max_if_not_negative(tok: np.ndarray) -> int | None:
    """The largest token when none is negative, else None: the maximum of the unsigned view of signed input
    (a negative value is its largest, at or above ``2**(bits - 1)``), so one reduction serves both."""
    if tok.dtype.kind == "u":
        return int(tok.max())
    unsigned = _UNSIGNED.get(tok.dtype.itemsize)
    if unsigned is None or not tok.dtype.isnative:
        return None
    hi = int(tok.view(unsigned).max())
    return hi if hi < 1 << (8 * tok.dtype.itemsize - 1) else None


def _raise_token_range(tok: np.ndarray) -> None:
    if tok.dtype.kind == "u":
        bad = np.argwhere(tok > PAD_TOKEN)
    else:
        t64 = tok.astype(np.int64)
        bad = np.argwhere((t64 < -1) | (t64 > PAD_TOKEN))
    q, t, k = (int(x) for x in bad[0])
    raise InputError(f"tokens[{q}, {t}, {k}]: token {int(tok[q, t, k])} is out of range; expected "
                     f"[0, {PAD_TOKEN - 1}] or padding (-1 / {PAD_TOKEN})")


def logprobs_f32(lp: np.ndarray) -> np.ndarray:
    """A new ``float32`` array of ``lp`` (float input only; beyond float32's range becomes ±inf)."""
    if lp.size and lp.dtype.kind != "f":
        raise InputError(f"logprobs: expected a float array, got dtype {lp.dtype}")
    if lp.dtype.itemsize <= 4:
        return lp.astype(np.float32)
    # Rounding to float32 is the documented input precision; +inf is refused by `check_logprobs`.
    with np.errstate(over="ignore"):
        return lp.astype(np.float32)


def check_logprobs(tok32: np.ndarray, lp32: np.ndarray) -> float:
    """Refuse a NaN or +inf logprob at a non-padding entry (padding entries may hold anything); returns the
    largest value of ``lp32`` (-inf when empty; NaN or +inf when only padding holds them)."""
    if lp32.size == 0:
        return -np.inf
    hi = float(lp32.max())  # NaN when any entry is: one reduction decides the common case
    if hi < np.inf:
        return hi
    bad = np.argwhere((tok32 != PAD_TOKEN) & ~(lp32 < np.inf))
    if bad.size:
        q, t, k = (int(x) for x in bad[0])
        raise InputError(f"logprobs[{q}, {t}, {k}]: {lp32[q, t, k]} is not allowed; logprobs must be finite "
                         "or -inf (NaN and +inf are errors)")
    return hi


def check_duplicates(scan: TokenScan) -> None:
    """Refuse a token twice in one row.

    Each row is sorted (as ``uint16`` when every real token is below 65535, padding mapped to 65535) and
    equal neighbours other than padding are duplicates.  One compare over the rows laid end to end decides
    the common case (no two equal neighbours anywhere: no duplicate).
    """
    tok32 = scan.tokens
    if tok32.size == 0 or tok32.shape[2] == 1:
        return
    top = scan.top
    if top is None:
        top = int(np.max(tok32, where=tok32 != PAD_TOKEN, initial=0)) + 1
    q_n, t_n, k_n = tok32.shape
    if top <= _U16_PAD:  # padding becomes 0xFFFF, above every real token
        (srt, flat_same), pad = _sort_space((q_n, t_n, k_n), np.uint16), _U16_PAD
    else:
        (srt, flat_same), pad = _sort_space((q_n, t_n, k_n), np.uint32), PAD_TOKEN
    np.copyto(srt, tok32, casting="unsafe")  # modular: the low 16 bits where they hold every token
    _sort_rows(srt)
    flat = srt.reshape(-1)  # C-ordered: a view
    if not np.equal(flat[1:], flat[:-1], out=flat_same).any():  # no equal neighbours, row ends included
        return
    same = srt[:, :, 1:] == srt[:, :, :-1]
    bad = np.argwhere(same & (srt[:, :, 1:] != pad))
    if bad.size:
        q, t, k = (int(x) for x in bad[0])
        raise InputError(f"tokens[{q}, {t}, :]: token {int(srt[q, t, k + 1])} appears more than once in "
                         "one row; each proposed token may appear once per row")


def _sort_space(shape: tuple[int, int, int], dtype: type[np.unsignedinteger]) -> tuple[np.ndarray, np.ndarray]:
    """Uninitialised room for the rows to sort (C-ordered ``shape``, ``dtype``) and the flat neighbour compare
    (``bool``, one fewer): views of this thread's reusable buffer up to `_SCRATCH_BYTES` (no page faults of
    fresh allocations on every call; one buffer per thread, so concurrent calls are safe), new arrays beyond.
    The views of the last shape are kept: a serving loop asks for the same shape call after call."""
    key = (shape, dtype)
    last = getattr(_local, "views", None)
    if last is not None and last[0] == key:
        return last[1], last[2]
    n, itemsize = math.prod(shape), np.dtype(dtype).itemsize
    need = n * (itemsize + 1)
    if need > _SCRATCH_BYTES:
        return np.empty(shape, dtype), np.empty(n - 1, np.bool_)
    buf: np.ndarray | None = getattr(_local, "buf", None)
    if buf is None or buf.size < need:
        buf = np.empty(max(need, 1 << 16), np.uint8)
        _local.buf = buf
    rows = buf[:n * itemsize].view(dtype).reshape(shape)
    same = buf[n * itemsize:n * itemsize + n - 1].view(np.bool_)
    _local.views = (key, rows, same)
    return rows, same


def _sort_rows(a: np.ndarray) -> None:
    """Sort ``a[q, t, :]`` in place; a large batch on the usable CPUs (numpy's sort releases the GIL)."""
    workers = a.size // _PARALLEL_SORT_MIN
    if workers > 1:
        workers = min(usable_cpus(), workers)
    if workers <= 1:
        a.sort(axis=2)
        return
    bounds = np.linspace(0, a.shape[0], workers + 1).astype(int)
    parts = [a[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:], strict=True) if hi > lo]
    in_parallel([partial(part.sort, axis=2) for part in parts], workers)


def looks_like_probabilities(tok32: np.ndarray, lp32: np.ndarray, hi: float, padded: bool
                             ) -> tuple[int, int, int] | None:
    """Where values look like probabilities passed as logprobs: the first entry above 0 when no non-padding
    value is below 0 and some is above 0 (the proposal TSV reader's rule); None otherwise.  ``hi``: the
    largest value of ``lp32`` (`check_logprobs`): at most 0 decides at once."""
    if lp32.size == 0 or hi <= 0:
        return None
    if padded:
        real = tok32 != PAD_TOKEN
        lo = np.minimum.reduce(lp32, axis=None, where=real, initial=np.inf)
        hi = np.maximum.reduce(lp32, axis=None, where=real, initial=-np.inf)
    else:
        real, lo = None, lp32.min()
    if not (lo >= 0 and hi > 0):
        return None
    above = lp32 > 0 if real is None else real & (lp32 > 0)
    q, t, k = (int(i[0]) for i in np.nonzero(above))
    return q, t, k


def probabilities_to_logprobs(tok32: np.ndarray, p_in: np.ndarray) -> np.ndarray:
    """Natural logs of probabilities in [0, 1] at non-padding entries (0 becomes -inf; padding -inf).

    ``p_in`` is the caller's array: its values (float64 where they were) are the ones whose logs are taken.
    """
    real = tok32 != PAD_TOKEN
    bad = np.argwhere(real & ~((p_in >= 0) & (p_in <= 1)))
    if bad.size:
        q, t, k = (int(x) for x in bad[0])
        raise InputError(f"logprobs[{q}, {t}, {k}]: {p_in[q, t, k]} is not a probability in [0, 1] "
                         "(probabilities=True)")
    with np.errstate(divide="ignore", invalid="ignore"):  # log(0) = -inf; padding entries are not used
        logs = np.log(p_in.astype(np.float64)).astype(np.float32)
    return np.where(real, logs, np.float32(-np.inf)).astype(np.float32)
