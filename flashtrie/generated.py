"""`generated_keywords`: the rows of a ``generate()`` output back to keyword ids (re-exported by `flashtrie.hf`).

A row's continuation (after its prompt) spells keyword k when it is k's tokens followed by an EOS id.  Token
values are read exactly, whatever the integer dtype: a value outside ``[0, MAX_TOKEN]`` (negative, or too
large for a token) is no token of any keyword and no EOS, so a row holding one before its first EOS spells
no keyword (-1).  torch tensors are read through ``detach().cpu()``, without importing torch here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from .errors import InputError
from .index import NarrowLoudsIndex
from .limits import MAX_TOKEN
from .stepwise import TrieStepper, check_eos, eos_ids

__all__ = ["generated_keywords", "prompt_lengths", "token_rows"]

#: A token value that no keyword holds and no EOS id equals (EOS ids are in [0, MAX_TOKEN]).
_NO_TOKEN = -1


def _torch_to_numpy(t: Any) -> np.ndarray:
    """A torch tensor's values as a numpy array, refusing non-integer dtypes by name first (bfloat16 has no
    numpy dtype)."""
    if t.is_floating_point() or t.is_complex() or str(t.dtype) == "torch.bool":
        if t.numel():
            raise InputError(f"sequences: expected integer token ids, got a tensor of {t.dtype}{list(t.shape)}")
        return np.zeros(tuple(t.shape), dtype=np.int64)
    return cast(np.ndarray, t.detach().cpu().numpy())


def token_rows(sequences: Any) -> np.ndarray:
    """``sequences`` (a 2-D torch tensor, numpy array or list of equal-length lists of ints) as int64 token
    rows, with every value outside ``[0, MAX_TOKEN]`` replaced by -1; an `InputError` naming ``sequences``
    for a ragged list, another rank, or a float, bool, complex or object dtype (an empty array of any
    numeric dtype is taken as it is: it holds no value)."""
    if hasattr(sequences, "detach") and hasattr(sequences, "is_floating_point"):
        seq = _torch_to_numpy(sequences)
    else:
        try:
            seq = np.asarray(sequences)
        except (ValueError, TypeError) as e:  # numpy: "inhomogeneous shape", or values that are not numbers
            raise InputError(f"sequences: expected a 2-D array of token ids [rows, length] (rows of one "
                             f"length), got a {type(sequences).__name__} numpy cannot read as one "
                             f"({str(e).splitlines()[0][:80]})") from None
    if seq.ndim != 2:
        raise InputError(f"sequences: expected a 2-D array of token ids [rows, length], got {seq.dtype}"
                         f"{list(seq.shape)}")
    if seq.size == 0 and seq.dtype.kind in "biufc":
        return np.zeros(seq.shape, dtype=np.int64)
    if seq.dtype.kind not in "iu":
        raise InputError(f"sequences: expected integer token ids, got dtype {seq.dtype} (shape "
                         f"{list(seq.shape)})")
    out = seq.astype(np.int64)  # a copy: values of uint64 past 2**63 wrap to negatives, refused just below
    bad = seq > MAX_TOKEN
    if seq.dtype.kind == "i":
        bad |= seq < 0
    out[bad] = _NO_TOKEN
    return out


def prompt_lengths(p: int | Sequence[int] | None) -> int | list[int] | None:
    """``prompt_length`` as given to the processor or `generated_keywords`: None, an int, or a non-empty list
    of non-negative ints (an `InputError` naming ``prompt_length`` otherwise)."""
    if p is None:
        return None
    if isinstance(p, (int, np.integer)) and not isinstance(p, (bool, np.bool_)):
        if p < 0:
            raise InputError(f"prompt_length: expected a non-negative integer, got {p}")
        return int(p)
    try:
        vals = list(cast(Sequence[int], p))
    except TypeError:
        raise InputError(f"prompt_length: expected an int or a sequence of ints, got {p!r}") from None
    if not vals or any(isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 0
                       for v in vals):
        raise InputError(f"prompt_length: expected an int or a non-empty sequence of non-negative ints, got {p!r}")
    return [int(v) for v in vals]


def _row_begins(prompt_length: int | Sequence[int] | None, rows: int, width: int) -> np.ndarray:
    """The first generated column of each row (one prompt length, one per row, or one per batch item)."""
    p = prompt_lengths(prompt_length)
    if p is None:
        raise InputError("prompt_length: expected the prompt's length (an int, or one per row or batch item)")
    if isinstance(p, int):
        begin = np.full(rows, p, dtype=np.int64)
    else:
        if rows % len(p):
            raise InputError(f"prompt_length: {len(p)} values do not divide the {rows} rows of sequences")
        begin = np.repeat(np.asarray(p, dtype=np.int64), rows // len(p))
    if rows and int(begin.max()) > width:
        raise InputError(f"prompt_length: {int(begin.max())} is longer than the sequences ({width} tokens)")
    return begin


def generated_keywords(index: NarrowLoudsIndex, sequences: Any, eos_token_id: int | Sequence[int],
                       prompt_length: int | Sequence[int]) -> np.ndarray:
    """The keyword id each row of ``generate()``'s output spells, -1 where it spells none (int64, one per row).

    Row r's continuation ``sequences[r, prompt_length:]`` must be a whole keyword followed by EOS (any of the
    ``eos_token_id`` ids); what follows the first EOS (``generate()``'s padding, equal to EOS or not) is not
    read.  -1 where no EOS follows the prompt (the row was cut by ``max_new_tokens``, or has no column after
    it), where EOS comes before a keyword ends, or where a token leaves the trie (a value outside
    ``[0, MAX_TOKEN]`` included).  ``sequences``: a ``[rows, L]`` torch tensor, numpy array or list of
    equal-length lists, of any integer dtype (with beams or ``num_return_sequences``, rows = batch x
    sequences); ``prompt_length``: an int, one per row, or one per batch item (repeated over its rows), as
    for `TrieLogitsProcessor`; 1 for an encoder-decoder model's decoder start token.  Vectorised: one
    `TrieStepper.advance` per column.
    """
    if not isinstance(index, NarrowLoudsIndex):
        raise InputError(f"index: expected a flashtrie.NarrowLoudsIndex, got {type(index).__name__}")
    eos = eos_ids(eos_token_id)
    if not eos:
        raise InputError("eos_token_id: expected the EOS token id (or ids) that ends each keyword")
    seq = token_rows(sequences)
    rows, width = seq.shape
    begin = _row_begins(prompt_length, rows, width)
    check_eos(index, eos)
    out = np.full(rows, -1, dtype=np.int64)
    if rows == 0 or width == 0:
        return out
    after = np.arange(width, dtype=np.int64)[None, :] >= begin[:, None]
    is_eos = np.isin(seq, np.asarray(eos, dtype=np.int64)) & after
    has_eos = is_eos.any(axis=1)
    end = np.where(has_eos, np.argmax(is_eos, axis=1), width)
    stepper = TrieStepper(index)
    states = stepper.walk(seq, begin=begin, end=end)
    whole = np.flatnonzero(has_eos & stepper.ends(states))
    if whole.size:
        out[whole] = index.keyword_ids_of(states.node[whole])
    return out
