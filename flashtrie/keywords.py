"""`KeywordSet`: the keyword library as a flat token array plus offsets."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .errors import InputError
from .io_util import atomic_write
from .limits import MAX_TOKEN
from .texts import TextStore
from .tokens import check_token_sequence, first_out_of_range

__all__ = ["KeywordSet"]


@dataclass(frozen=True, eq=False)
class KeywordSet:
    """N non-empty keywords; keyword ``i`` is ``tokens[offsets[i]:offsets[i + 1]]``.

    ``tokens`` is ``uint32`` (values in ``[0, 2**32 - 2]``), ``offsets`` is ``int64`` of length N + 1.
    A keyword's id is its index.  Use the ``from_*`` constructors: they convert and validate; the plain
    constructor takes those exact dtypes and checks the invariants (vectorised) so that no bad set
    reaches a builder.  ``texts`` (optional, a `TextStore` of N strings): keyword i's identifier, kept by
    an index built from the set (`from_texts`, `with_texts`).
    """

    tokens: np.ndarray
    offsets: np.ndarray
    texts: TextStore | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        tok, off = self.tokens, self.offsets
        if self.texts is not None and not isinstance(self.texts, TextStore):
            raise InputError(f"texts: expected a flashtrie.texts.TextStore or None, got {type(self.texts).__name__}; "
                             "use KeywordSet.with_texts to attach strings")
        if not (isinstance(tok, np.ndarray) and tok.dtype == np.uint32 and tok.ndim == 1):
            raise InputError(f"tokens: expected a 1-D uint32 array, got {_describe(tok)}; use "
                             "KeywordSet.from_arrays or from_sequences to convert")
        if not (isinstance(off, np.ndarray) and off.dtype == np.int64 and off.ndim == 1 and off.size >= 1):
            raise InputError(f"offsets: expected a 1-D int64 array of length N + 1 >= 1, got {_describe(off)}; "
                             "use KeywordSet.from_arrays to convert")
        _check_offsets(off, tok.size)
        if self.texts is not None and len(self.texts) != off.size - 1:
            raise InputError(f"texts: {len(self.texts):,} strings for {off.size - 1:,} keywords; give one per keyword")
        pad = np.flatnonzero(tok > MAX_TOKEN)
        if pad.size:
            j = int(pad[0])
            k = int(np.searchsorted(off, j, side="right") - 1)
            raise InputError(f"keyword {k} (tokens[{j}]): token {int(tok[j])} is out of range; tokens must be in "
                             f"[0, {MAX_TOKEN}] (2**32 - 1 is reserved for padding)")

    # ----------------------------------------------------------------------------- constructors
    @classmethod
    def from_arrays(cls, tokens: np.ndarray | Sequence[int], offsets: np.ndarray | Sequence[int]) -> KeywordSet:
        """Validate and wrap a flat token array and its offsets (``offsets[0] == 0``, strictly increasing)."""
        tok = np.asarray(tokens)
        off = np.asarray(offsets)
        if tok.ndim != 1:
            raise InputError(f"tokens: expected a 1-D array, got shape {tok.shape}")
        if off.ndim != 1 or off.size < 1:
            raise InputError(f"offsets: expected a 1-D array of length N + 1 >= 1, got shape {off.shape}")
        if tok.size and not (np.issubdtype(tok.dtype, np.integer)):
            raise InputError(f"tokens: expected an integer array, got dtype {tok.dtype}")
        if not np.issubdtype(off.dtype, np.integer):
            raise InputError(f"offsets: expected an integer array, got dtype {off.dtype}")
        if off.dtype.kind == "u" and off.size and int(off.max()) > np.iinfo(np.int64).max:
            j = int(np.argmax(off))
            raise InputError(f"offsets[{j}]: {int(off[j])} is over the limit {np.iinfo(np.int64).max}")
        off = off.astype(np.int64, copy=False)
        _check_offsets(off, tok.size)
        tok_u32 = _tokens_to_uint32(tok, off)
        return cls(np.ascontiguousarray(tok_u32), np.ascontiguousarray(off))

    @classmethod
    def from_sequences(cls, sequences: Iterable[Sequence[int]]) -> KeywordSet:
        """Build from an iterable of token sequences (lists, tuples or arrays)."""
        parts: list[np.ndarray] = []
        for i, seq in enumerate(sequences):
            arr = check_token_sequence(seq, f"keyword {i}", element=partial("keyword {} (position {})".format, i))
            if arr.size == 0:
                raise InputError(f"keyword {i}: empty keyword; every keyword needs at least one token")
            parts.append(arr)
        lengths = np.fromiter((p.size for p in parts), dtype=np.int64, count=len(parts))
        offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        tokens = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)
        return cls(tokens, offsets)

    @classmethod
    def from_padded(cls, array: np.ndarray | Sequence[Sequence[int]], pad: int = -1) -> KeywordSet:
        """Build from a padded ``[N, L]`` integer array: row i holds keyword i's tokens, then ``pad`` to the end
        (``-1``, or ``2**32 - 1`` in an unsigned array).  A token after padding and an all-padding row are
        refused by row and column."""
        a = np.asarray(array)
        if a.ndim != 2 or (a.size and not np.issubdtype(a.dtype, np.integer)):
            raise InputError(f"array: expected a 2-D integer array [N, L] padded with {pad}, got "
                             f"{a.dtype}{list(a.shape)}")
        if a.dtype.kind == "u" and pad == -1:
            pad = int(np.iinfo(a.dtype).max)
        real = a != pad
        after = real[:, 1:] & ~real[:, :-1]  # a token right after padding
        if after.any():
            r, c = (int(x) for x in np.argwhere(after)[0])
            raise InputError(f"array[{r}, {c + 1}]: token {int(a[r, c + 1])} after padding ({pad}); each row holds "
                             "its keyword's tokens first, then only padding")
        lengths = real.sum(axis=1, dtype=np.int64)
        offsets = np.zeros(a.shape[0] + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return cls.from_arrays(a[real], offsets)

    @classmethod
    def from_texts(cls, texts: Sequence[str], tokenizer: Any, *, duplicates: Literal["error", "keep"] = "error",
                   unknown: Literal["error", "keep"] = "error", vocab_size: int | None = None,
                   progress: bool = False) -> KeywordSet:
        """Tokenize ``texts`` (one identifier each) and keep them: keyword i is ``tokenizer(texts[i])`` and its
        string is ``texts[i]`` (`NarrowLoudsIndex.text` gives it back).

        ``tokenizer``: a callable ``str -> Sequence[int]``, a ``tokenizers.Tokenizer``, a ``transformers``
        tokenizer, a ``tiktoken`` Encoding or a ``sentencepiece`` processor (`flashtrie.tokenize`), or a bound
        ``encode`` of one.  Keyword i is the tokenizer's own deterministic encoding of ``texts[i]`` without
        special tokens: the tokenizer's padding, truncation, BPE dropout, sentencepiece sampling, reversing and
        BOS / EOS settings never apply (the caller's tokenizer is left unchanged), and the libraries tokenize
        in batches on their own threads.  Refused with an `InputError` before any index is built: an item that
        is not a ``str`` (before any tokenizing), a text that tokenizes to nothing, a token outside
        ``[0, vocab_size)`` (``vocab_size`` defaults to the tokenizer's own where it has one, else
        ``2**32 - 1``), with ``unknown="error"`` (the default) a text holding a character the tokenizer's
        vocabulary lacks (its unknown token, or a character a BPE without one drops; ``unknown="keep"`` keeps
        them), and, with ``duplicates="error"``
        (the default), two texts with the same tokens.  ``duplicates="keep"`` keeps them: ids stay the input
        positions, and the index returns the first of equal keywords (`NarrowLoudsIndex.duplicates` counts the
        others).  ``progress`` shows a progress bar on stderr.
        """
        from .tokenize import encode_texts, encoder, unknown_problem

        if duplicates not in ("error", "keep"):
            raise InputError(f"duplicates: expected 'error' or 'keep', got {duplicates!r}")
        if unknown not in ("error", "keep"):
            raise InputError(f"unknown: expected 'error' or 'keep', got {unknown!r}")
        if isinstance(texts, (str, bytes)):
            raise InputError("texts: expected a sequence of strings, got one string; wrap it in a list")
        items = texts if isinstance(texts, Sequence) else list(texts)
        store = TextStore.from_strings(items)  # refuses a non-string or a lone surrogate before any tokenizing
        if vocab_size is not None and (isinstance(vocab_size, bool) or not isinstance(vocab_size, int | np.integer)
                                       or vocab_size < 1):
            raise InputError(f"vocab_size: expected a positive integer, got {vocab_size!r}")
        enc = encoder(tokenizer)
        tokens, offsets = encode_texts(items, enc, vocab_size, progress)
        lengths = np.diff(offsets)
        empty = np.flatnonzero(lengths == 0)
        if empty.size:
            i = int(empty[0])
            rest = empty[1:6].tolist()
            more = (f" (and {empty.size - 1:,} more: texts {rest}{'...' if empty.size > 6 else ''})"
                    if empty.size > 1 else "")
            raise InputError(f"texts[{i}] = {items[i][:60]!r} tokenizes to no tokens{more}; every keyword needs at "
                             "least one token (drop or fix such texts)")
        problem = unknown_problem(items, tokens, offsets, enc) if unknown == "error" else None
        if problem:
            raise InputError(f"texts: {problem}; pass unknown='keep' to keep them, or drop or fix such texts")
        tok32 = tokens.astype(np.uint32)
        if duplicates == "error":
            _refuse_duplicates(items, tok32, offsets)
        return cls(tok32, offsets, store)

    def with_texts(self, texts: Sequence[str]) -> KeywordSet:
        """The same keywords with ``texts[i]`` as keyword i's string (one ``str`` per keyword)."""
        if isinstance(texts, (str, bytes)):
            raise InputError("texts: expected a sequence of strings, got one string; wrap it in a list")
        items = texts if isinstance(texts, Sequence) else list(texts)
        if len(items) != len(self):
            raise InputError(f"texts: {len(items):,} strings for {len(self):,} keywords; give one per keyword")
        return KeywordSet(self.tokens, self.offsets, TextStore.from_strings(items))

    @classmethod
    def from_token_file(cls, path: str | os.PathLike[str]) -> KeywordSet:
        """Read a file of token ids: one keyword per line, tokens as space-separated decimal ids
        (``marisa-build`` format; `to_token_file` writes it).  For strings and a tokenizer, see `from_texts`.

        Blank lines are errors, except trailing ones at the end of the file.
        """
        data = Path(path).read_bytes()
        return cls.from_token_bytes(data, source=str(path))

    @classmethod
    def from_text(cls, path: str | os.PathLike[str]) -> KeywordSet:
        """Deprecated name of `from_token_file` (a file of token ids, not of texts)."""
        _deprecated("KeywordSet.from_text", "KeywordSet.from_token_file")
        return cls.from_token_file(path)

    @classmethod
    def from_text_bytes(cls, data: bytes, source: str = "<bytes>") -> KeywordSet:
        """Deprecated name of `from_token_bytes`."""
        _deprecated("KeywordSet.from_text_bytes", "KeywordSet.from_token_bytes")
        return cls.from_token_bytes(data, source)

    @classmethod
    def from_token_bytes(cls, data: bytes, source: str = "<bytes>") -> KeywordSet:
        """Parse the token-file format from memory (vectorised: no per-token Python work).

        Parsed in pieces of whole lines (`TEXT_CHUNK_BYTES`), so the working memory stays bounded on a large
        file; trailing blank lines and whitespace at the end are ignored.
        """
        end = len(data)
        while end and data[end - 1] in b" \t\r\n":  # a final newline does not make an empty keyword
            end -= 1
        if end == 0:
            return cls(np.zeros(0, np.uint32), np.zeros(1, np.int64))
        view = memoryview(data)[:end]
        values: list[np.ndarray] = []
        counts: list[np.ndarray] = []
        pos, line0 = 0, 0
        while pos < end:
            cut = data.find(b"\n", min(pos + TEXT_CHUNK_BYTES, end) - 1, end)
            stop = end if cut < 0 else cut + 1  # the piece ends just after a newline, or at the end
            vals, per_line = _parse_text_lines(view[pos:stop], source, line0)
            values.append(vals)
            counts.append(per_line)
            line0 += per_line.size
            pos = stop
        per_line = np.concatenate(counts)
        offsets = np.zeros(per_line.size + 1, dtype=np.int64)
        np.cumsum(per_line, out=offsets[1:])
        return cls(np.concatenate(values), offsets)

    # ----------------------------------------------------------------------------- accessors
    def __len__(self) -> int:
        return int(self.offsets.size - 1)

    def __getitem__(self, i: int) -> np.ndarray:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"keyword index {i} out of range for {n} keywords")
        i %= n
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    @property
    def lengths(self) -> np.ndarray:
        """Length of each keyword (``int64``)."""
        return np.diff(self.offsets)

    @property
    def max_length(self) -> int:
        return int(self.lengths.max()) if len(self) else 0

    def to_sequences(self) -> list[list[int]]:
        """Keywords as Python lists (for tests and small sets)."""
        return [self[i].tolist() for i in range(len(self))]

    def to_text(self, path: str | os.PathLike[str]) -> None:
        """Deprecated name of `to_token_file`."""
        _deprecated("KeywordSet.to_text", "KeywordSet.to_token_file")
        self.to_token_file(path)

    def to_token_file(self, path: str | os.PathLike[str]) -> None:
        """Write the file of token ids `from_token_file` reads: one keyword per line (atomically)."""
        if not len(self):
            atomic_write(path, b"")
            return
        sep = np.full(self.tokens.size, " ", dtype="U1")
        sep[self.offsets[1:] - 1] = "\n"
        text = "".join(np.char.add(self.tokens.astype("U10"), sep).tolist())
        atomic_write(path, text.encode())

    def __repr__(self) -> str:
        return f"KeywordSet(n={len(self)}, tokens={self.tokens.size}, max_length={self.max_length})"


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"{old} is deprecated; use {new}", DeprecationWarning, stacklevel=3)


#: bytes of a token file parsed at once by `KeywordSet.from_token_bytes` (about 60 bytes of working memory per byte)
TEXT_CHUNK_BYTES = 1 << 20


def _parse_text_lines(chunk: memoryview, source: str, line0: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens (uint32) and tokens per line of whole lines of text; ``line0`` numbers the first line (0-based)."""
    buf = np.frombuffer(chunk, dtype=np.uint8)
    is_digit = (buf >= ord("0")) & (buf <= ord("9"))
    is_nl = buf == ord("\n")
    is_cr = buf == ord("\r")
    crlf = is_cr & np.concatenate((is_nl[1:], [False]))  # CR only as part of a CRLF line end
    is_space = (buf == ord(" ")) | (buf == ord("\t")) | crlf
    bad = np.flatnonzero(~(is_digit | is_nl | is_space))
    line_of = np.cumsum(is_nl) - is_nl  # line index (in the chunk) of each byte
    if bad.size:
        b = int(bad[0])
        ch = bytes([buf[b]]).decode("latin-1")
        what = "a carriage return that does not end the line" if ch == "\r" else f"unexpected character {ch!r}"
        raise InputError(f"{source}: line {line0 + int(line_of[b]) + 1}: {what}; expected "
                         "space-separated non-negative decimal token ids, one keyword per line")
    prev_digit = np.concatenate(([False], is_digit[:-1]))
    next_digit = np.concatenate((is_digit[1:], [False]))
    starts = np.flatnonzero(is_digit & ~prev_digit)
    ends = np.flatnonzero(is_digit & ~next_digit) + 1
    n_lines = int(line_of[-1]) + 1
    tok_line = line_of[starts]
    counts = np.bincount(tok_line, minlength=n_lines)
    empty = np.flatnonzero(counts == 0)
    if empty.size:
        raise InputError(f"{source}: line {line0 + int(empty[0]) + 1}: empty keyword; every line needs at least "
                         "one token")
    # value = sum(digit * 10**(position from the token's end)); leading zeros beyond 10 digits are fine
    digit_pos = np.flatnonzero(is_digit)
    tok_index = np.cumsum(is_digit & ~prev_digit)[digit_pos] - 1
    power = ends[tok_index] - 1 - digit_pos
    digits = buf[digit_pos].astype(np.int64) - ord("0")
    huge = np.flatnonzero((power >= 10) & (digits != 0))
    if huge.size:
        j = int(tok_index[huge[0]])
        raise InputError(f"{source}: line {line0 + int(tok_line[j]) + 1}: token "
                         f"{bytes(chunk[starts[j]:ends[j]]).decode()} is larger than the limit {MAX_TOKEN}")
    weights = np.where(power < 10, 10 ** np.minimum(power, 9), 0)
    values = np.zeros(starts.size, dtype=np.int64)
    np.add.at(values, tok_index, digits * weights)
    over = np.flatnonzero(values > MAX_TOKEN)
    if over.size:
        j = int(over[0])
        raise InputError(f"{source}: line {line0 + int(tok_line[j]) + 1}: token {int(values[j])} is larger than "
                         f"the limit {MAX_TOKEN} (2**32 - 1 is reserved for padding)")
    return values.astype(np.uint32), counts.astype(np.int64)


def _describe(a: object) -> str:
    if isinstance(a, np.ndarray):
        return f"a {a.ndim}-D {a.dtype} array"
    return type(a).__name__


def _check_offsets(off: np.ndarray, n_tokens: int) -> None:
    """``off`` (int64) starts at 0, ends at ``n_tokens`` and strictly increases (no empty keyword)."""
    if off[0] != 0:
        raise InputError(f"offsets[0]: must be 0, got {int(off[0])}")
    if off[-1] != n_tokens:
        raise InputError(f"offsets[-1]: must equal len(tokens) = {n_tokens}, got {int(off[-1])}")
    lengths = np.diff(off)
    bad = np.flatnonzero(lengths <= 0)
    if bad.size:
        i = int(bad[0])
        if lengths[i] == 0:
            raise InputError(f"keyword {i}: empty keyword (offsets[{i}] = offsets[{i + 1}] = {int(off[i])}); "
                             "every keyword needs at least one token")
        raise InputError(f"offsets[{i + 1}]: offsets must increase, got offsets[{i}] = {int(off[i])} > "
                         f"offsets[{i + 1}] = {int(off[i + 1])}")


def _tokens_to_uint32(tok: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Check every token of an integer array is in ``[0, MAX_TOKEN]`` and return them as ``uint32``."""
    j = first_out_of_range(tok)
    if j >= 0:
        k = int(np.searchsorted(offsets, j, side="right") - 1)
        raise InputError(f"keyword {k} (tokens[{j}]): token {int(tok[j])} is out of range; tokens must be in "
                         f"[0, {MAX_TOKEN}] (2**32 - 1 is reserved for padding)")
    return tok.astype(np.uint32)


def _refuse_duplicates(texts: Sequence[str], tokens: np.ndarray, offsets: np.ndarray) -> None:
    """`InputError` naming the first text whose tokens equal an earlier text's, and how many do."""
    blob = tokens.tobytes()
    off = (offsets * 4).tolist()
    first: dict[bytes, int] = {}
    dups: list[tuple[int, int]] = []
    for i in range(len(texts)):
        j = first.setdefault(blob[off[i] : off[i + 1]], i)
        if j != i:
            dups.append((i, j))
    if dups:
        i, j = dups[0]
        more = f"; {len(dups):,} texts repeat an earlier one's tokens" if len(dups) > 1 else ""
        raise InputError(f"texts[{i}] = {texts[i][:60]!r} has the same tokens as texts[{j}] = {texts[j][:60]!r} "
                         f"({tokens[offsets[i] : offsets[i + 1]][:12].tolist()}){more}; pass duplicates='keep' to "
                         "keep them (the index then returns the first one's id), or drop the repeats")
