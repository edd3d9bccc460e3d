"""The one check every token sequence from a caller goes through (keywords, forced prefixes, TSV rows).

A token is an ``int`` or a numpy integer (never a ``bool``, a float or a string, even one that holds an
integral value) in ``[0, MAX_TOKEN]``; ``2**32 - 1`` (``-1`` signed) is padding and only accepted where
the caller allows it.  Nothing is converted silently: a bad token is refused with an `InputError` that
names the element, its value and the limit.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .errors import InputError
from .limits import MAX_TOKEN, PAD_TOKEN

__all__ = ["check_token_sequence", "first_out_of_range", "is_integer_dtype"]


def _default_element(name: str) -> Callable[[int], str]:
    return lambda j: f"{name}[{j}]"


def _limit_text(allow_padding: bool) -> str:
    if allow_padding:
        return f"tokens must be integers in [0, {MAX_TOKEN}] or padding (-1 / {PAD_TOKEN})"
    return f"tokens must be integers in [0, {MAX_TOKEN}] (2**32 - 1 is reserved for padding)"


#: Types that pass an integer check but are not tokens (``np.timedelta64`` subclasses ``np.signedinteger``).
_NOT_TOKENS = (bool, np.bool_, np.timedelta64, np.datetime64)


def _is_token_type(x: object) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, _NOT_TOKENS)


def is_integer_dtype(dtype: np.dtype) -> bool:
    """True for signed / unsigned integer dtypes only (not bool, timedelta64, datetime64, object, ...)."""
    return dtype.kind in "iu"


def first_out_of_range(tok: np.ndarray, allow_padding: bool = False) -> int:
    """Index of the first token of an integer array outside the accepted range, or -1."""
    if tok.size == 0:
        return -1
    if np.issubdtype(tok.dtype, np.unsignedinteger):
        bad = tok > (PAD_TOKEN if allow_padding else MAX_TOKEN)
    else:
        t64 = tok.astype(np.int64, copy=False)
        lo = -1 if allow_padding else 0
        bad = (t64 < lo) | (t64 > (PAD_TOKEN if allow_padding else MAX_TOKEN))
    idx = np.flatnonzero(bad)
    return int(idx[0]) if idx.size else -1


def check_token_sequence(seq: object, name: str, *, element: Callable[[int], str] | None = None,
                         allow_padding: bool = False) -> np.ndarray:
    """Validate one 1-D token sequence and return it as a ``uint32`` array.

    ``seq`` is a list, tuple, range or numpy array.  Integer arrays are checked vectorised; lists and
    object arrays element by element (``int`` / ``np.integer`` only).  ``name`` names the sequence (e.g.
    ``prefixes[0]``, ``keyword 3``) and ``element(j)`` its j-th token (default ``name[j]``).  With
    ``allow_padding``, ``-1`` and ``2**32 - 1`` are accepted and returned as ``2**32 - 1``.
    """
    elem = element or _default_element(name)
    if isinstance(seq, np.ndarray) or hasattr(seq, "__array__"):
        arr = np.asarray(seq)
    elif isinstance(seq, (str, bytes)) or not hasattr(seq, "__len__"):
        raise InputError(f"{name}: expected a sequence of integer tokens, got {seq!r}")
    else:
        arr = np.asarray(seq, dtype=object)  # nested equal-length sequences give ndim > 1, refused below
    if arr.ndim != 1:
        raise InputError(f"{name}: expected a 1-D token sequence, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.uint32)
    if arr.dtype == object:
        items = arr.tolist()
        types = set(map(type, items))
        if not all(issubclass(t, (int, np.integer)) and not issubclass(t, _NOT_TOKENS) for t in types):
            j = next(j for j, x in enumerate(items) if not _is_token_type(x))
            raise InputError(f"{elem(j)}: {items[j]!r} ({type(items[j]).__name__}) is not an integer token; "
                             f"{_limit_text(allow_padding)}")
        lo_ok = -1 if allow_padding else 0
        hi_ok = PAD_TOKEN if allow_padding else MAX_TOKEN
        if not (lo_ok <= min(items) and max(items) <= hi_ok):
            j = next(j for j, x in enumerate(items) if not lo_ok <= x <= hi_ok)
            raise InputError(f"{elem(j)}: token {int(items[j])} is out of range; {_limit_text(allow_padding)}")
        arr = np.array(items, dtype=np.int64)  # every item is an integer in [-1, 2**32 - 1]: exact
    elif not is_integer_dtype(arr.dtype):  # floats, strings, bools, complex, datetimes, timedeltas ...
        raise InputError(f"{elem(0)}: {arr[0].item()!r} is not an integer token (the sequence has dtype "
                         f"{arr.dtype}); {_limit_text(allow_padding)}")
    else:
        j = first_out_of_range(arr, allow_padding)
        if j >= 0:
            raise InputError(f"{elem(j)}: token {int(arr[j])} is out of range; {_limit_text(allow_padding)}")
    if arr.dtype == np.uint32:
        return arr
    return (arr.astype(np.int64) & 0xFFFF_FFFF).astype(np.uint32)
