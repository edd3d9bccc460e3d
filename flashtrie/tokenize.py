"""Tokenizers as flashtrie sees them: strings in, token ids out, in batches.

`encoder(tokenizer)` recognises, by duck typing (none of these packages is imported here at module level):

* a ``tiktoken.Encoding`` (``encode_ordinary_batch``: special-token text is encoded as plain text),
* a ``tokenizers.Tokenizer`` (``encode_batch_fast`` / ``encode_batch``, ``add_special_tokens=False``; a
  tokenizer with padding, truncation or BPE dropout on is encoded through a copy with them off),
* a ``transformers`` tokenizer (called on a list, ``add_special_tokens=False``, no padding or truncation, through
  a copy where its backend has padding, truncation or BPE dropout on; sentencepiece sampling in
  ``sp_model_kwargs`` is refused),
* a ``sentencepiece.SentencePieceProcessor`` (``encode`` of a list: no BOS / EOS, forward, no sampling,
  whatever the processor was constructed with),
* a bound ``encode`` / ``encode_ordinary`` / ``__call__`` of any of these (taken as the tokenizer itself),
* any callable ``str -> Sequence[int]`` (called once per string; its output is checked token by token).

A keyword's tokens are thus the tokenizer's own deterministic encoding of its text, without special tokens,
padding or truncation.  `Encoder.unknown` is the id of the tokenizer's unknown token where its kind exposes
one, `Encoder.dropped` finds the characters a BPE with neither an unknown token nor byte fallback drops, and
`unknown_problem` names the texts that hold either.

`load_tokenizer(spec)` opens one from a file or an offline name, for ``flashtrie build --tokenizer``.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import InputError
from .limits import MAX_TOKEN
from .tokens import check_token_sequence

__all__ = ["Encoder", "encoder", "encode_texts", "unknown_problem", "load_tokenizer", "TOKENIZER_SPEC_HELP", "BATCH"]

#: Strings per batch handed to the tokenizer (the library's own batch call runs each on its threads).
BATCH = 16_384

TOKENIZER_SPEC_HELP = ("a tokenizer.json file (tokenizers), a sentencepiece .model file, a .tiktoken BPE file "
                       "(read with tiktoken and GPT-2's split pattern), a folder holding a transformers tokenizer, "
                       "tiktoken:NAME (an encoding tiktoken has cached; nothing is downloaded) or hf:NAME (a "
                       "transformers tokenizer in the local Hugging Face cache)")


#: Names of a tokenizer's bound methods taken as the tokenizer itself (``tok.encode`` passed as a callable).
ENCODE_METHODS = ("encode", "encode_ordinary", "__call__", "Encode", "EncodeAsIds", "encode_as_ids")


@dataclass(frozen=True)
class Encoder:
    """One tokenizer seen through one interface: ``batch(strings)`` gives one token sequence per string."""

    kind: str  # "tiktoken", "tokenizers", "transformers", "sentencepiece" or "callable"
    batch: Callable[[list[str]], Sequence[Sequence[int]]]
    vocab_size: int | None  # None where the tokenizer does not say
    checked: bool  # True: outputs are Python int lists from a known library; False: checked token by token
    unknown: int | None = None  # the id of the tokenizer's unknown token, where its kind exposes one
    #: the characters of some texts that the tokenizer drops without a trace (a BPE model with neither an unknown
    #: token nor byte fallback), where that can happen
    dropped: Callable[[Sequence[str]], set[str]] | None = None


def encoder(tokenizer: Any) -> Encoder:
    """The `Encoder` of ``tokenizer`` (see the module docstring), or an `InputError` saying what is accepted."""
    owner = getattr(tokenizer, "__self__", None)
    if getattr(tokenizer, "__name__", None) in ENCODE_METHODS and owner is not None and _kind(owner) != "callable":
        tokenizer = owner  # a bound encode method of a known tokenizer: the tokenizer itself, special-token free
    t = tokenizer
    kind = _kind(t)
    if kind == "tiktoken":
        return Encoder(kind, lambda xs: t.encode_ordinary_batch(xs, num_threads=_threads()), int(t.n_vocab), True)
    if kind == "tokenizers":
        plain = _plain_tokenizers(t)
        fast = getattr(plain, "encode_batch_fast", None) or plain.encode_batch
        return Encoder(kind, lambda xs: [e.ids for e in fast(xs, add_special_tokens=False)],
                       int(plain.get_vocab_size(with_added_tokens=True)), True, _tokenizers_unknown(plain),
                       _bpe_drops(plain))
    if kind == "transformers":
        return _transformers_encoder(t)
    if kind == "sentencepiece":
        return Encoder(kind, lambda xs: t.encode(xs, out_type=int, add_bos=False, add_eos=False, reverse=False,
                                                 enable_sampling=False, num_threads=_threads()),
                       int(t.get_piece_size()), True, _nonnegative(t.unk_id()))
    if kind == "callable":
        return Encoder(kind, lambda xs: [t(x) for x in xs], None, False)
    raise InputError(f"tokenizer: expected a callable str -> token ids, a tokenizers.Tokenizer, a transformers "
                     f"tokenizer, a tiktoken Encoding or a sentencepiece SentencePieceProcessor, got "
                     f"{type(t).__module__}.{type(t).__name__}")


def _kind(t: Any) -> str | None:
    """Which kind of tokenizer ``t`` is (`Encoder.kind`), or None for none of them."""
    if hasattr(t, "encode_ordinary_batch") and hasattr(t, "n_vocab"):
        return "tiktoken"
    if hasattr(t, "encode_batch") and hasattr(t, "get_vocab_size"):
        return "tokenizers"
    if hasattr(t, "model_input_names") and callable(t):
        return "transformers"
    if hasattr(t, "get_piece_size") and hasattr(t, "encode"):
        return "sentencepiece"
    return "callable" if callable(t) else None


def _plain_tokenizers(t: Any) -> Any:
    """``t`` (a ``tokenizers.Tokenizer``), or a copy of it without padding, truncation or BPE dropout where
    any is on (the caller's object is left as it is).  Unigram sampling is not serialized, so a copy drops it."""
    model = t.model
    if not (t.padding or t.truncation or getattr(model, "dropout", None) or getattr(model, "alpha", None)
            or getattr(model, "nbest_size", None)):
        return t
    plain = type(t).from_str(t.to_str())
    plain.no_padding()
    plain.no_truncation()
    if getattr(plain.model, "dropout", None):
        plain.model.dropout = None
    return plain


def _tokenizers_unknown(t: Any) -> int | None:
    """The id of a ``tokenizers.Tokenizer``'s unknown token (its model's ``unk_token`` / ``unk_id``), or None."""
    try:
        state = json.loads(t.model.__getstate__())
    except (AttributeError, TypeError, ValueError):
        return None
    if isinstance(state.get("unk_id"), int):
        return _nonnegative(state["unk_id"])
    name = state.get("unk_token")
    return _nonnegative(t.token_to_id(name)) if isinstance(name, str) and name else None


#: Characters whose UTF-8 encodings hold every byte that UTF-8 text can hold (ASCII, every continuation byte,
#: every lead byte of 2, 3 and 4 byte characters).
_EVERY_BYTE = "".join(map(chr, [*range(0x800), 0x800, *range(0x1000, 0x10000, 0x1000), 0x10000, 0x40000, 0x80000,
                                0xC0000, 0x100000]))


def _bpe_drops(t: Any) -> Callable[[Sequence[str]], set[str]] | None:
    """For a ``tokenizers.Tokenizer`` whose BPE model has neither an unknown token nor byte fallback (it drops a
    character its vocabulary lacks), the function giving such characters of some texts (as the model sees
    them: normalized and pre-tokenized); None where nothing can be dropped so (a byte-level BPE with all 256
    byte characters, or another model)."""
    try:
        state = json.loads(t.model.__getstate__())
    except (AttributeError, TypeError, ValueError):
        return None
    if state.get("type") != "BPE" or state.get("byte_fallback") or _tokenizers_unknown(t) is not None:
        return None
    vocab = t.get_vocab(with_added_tokens=False)
    forms = ((state.get("continuing_subword_prefix") or "", ""), ("", ""), ("", state.get("end_of_word_suffix") or ""))

    def lacks(c: str) -> bool:
        return all(a + c + b not in vocab for a, b in forms)

    added = sorted((a.content for a in t.get_added_tokens_decoder().values()), key=len, reverse=True)

    def seen(text: str) -> set[str]:
        for a in added:  # an added token is matched as a whole, before the model
            text = text.replace(a, "\n")
        if t.normalizer is not None:
            text = t.normalizer.normalize_str(text)
        pieces = [p for p, _ in t.pre_tokenizer.pre_tokenize_str(text)] if t.pre_tokenizer is not None else [text]
        return set("".join(pieces))

    if not any(lacks(c) for c in seen(_EVERY_BYTE)):
        return None  # a byte-level BPE whose vocabulary holds every byte's character drops nothing

    def dropped(texts: Sequence[str]) -> set[str]:
        joiner = set() if any("\n" in x for x in texts) else seen("\n")
        out: set[str] = set()
        for a in range(0, len(texts), 512):  # pre-tokenizing a longer string costs more than linear time
            out |= {c for c in seen("\n".join(texts[a : a + 512])) - joiner if lacks(c)}
        return out

    return dropped


def _transformers_encoder(t: Any) -> Encoder:
    """The `Encoder` of a transformers tokenizer: no special tokens, padding or truncation; a copy without BPE
    dropout where it is on; sentencepiece sampling refused by name."""
    sampling = dict(getattr(t, "sp_model_kwargs", None) or {})
    if sampling.get("enable_sampling"):
        raise InputError(f"tokenizer: {type(t).__name__} samples its encodings (sp_model_kwargs={sampling}), so "
                         "a text's tokens would change from call to call; load it without enable_sampling")
    backend = getattr(t, "backend_tokenizer", None)
    if backend is not None and (backend.padding or backend.truncation or getattr(backend.model, "dropout", None)):
        t = copy.deepcopy(t)  # transformers' own call resets padding and truncation on the object it is given
        backend = t.backend_tokenizer
        if getattr(backend.model, "dropout", None):
            backend.model.dropout = None
    unknown = _tokenizers_unknown(backend) if backend is not None else getattr(t, "unk_token_id", None)

    def call(xs: list[str]) -> Sequence[Sequence[int]]:
        return t(xs, add_special_tokens=False, padding=False, truncation=False, return_attention_mask=False,
                 return_token_type_ids=False)["input_ids"]

    return Encoder("transformers", call, int(len(t)), True,
                   _nonnegative(unknown) if isinstance(unknown, int) else None,
                   _bpe_drops(backend) if backend is not None else None)


def _nonnegative(i: int | None) -> int | None:
    return int(i) if i is not None and int(i) >= 0 else None


def _threads() -> int:
    from .cpus import usable_cpus

    return max(1, usable_cpus())


def encode_texts(texts: Sequence[str], enc: Encoder, vocab_size: int | None = None, progress: bool = False
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``(tokens, offsets)`` of every string (tokens int64, checked to lie in ``[0, vocab)`` where the vocabulary
    size is known, else in ``[0, 2**32 - 2]``); ``progress`` shows a bar on stderr (`flashtrie.progress`)."""
    from .progress import progress as bar_of

    vocab = vocab_size if vocab_size is not None else enc.vocab_size
    parts: list[np.ndarray] = []
    lengths = np.zeros(len(texts), dtype=np.int64)
    with bar_of(total=len(texts), unit=" texts", unit_scale=True, disable=not progress, desc="tokenizing") as bar:
        for a in range(0, len(texts), BATCH):
            chunk = list(texts[a : a + BATCH])
            seqs = enc.batch(chunk)
            if len(seqs) != len(chunk):
                raise InputError(f"tokenizer: gave {len(seqs)} token sequences for {len(chunk)} texts")
            if enc.checked:
                lens = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
                flat = np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int64, count=int(lens.sum()))
            else:
                arrs = [_token_sequence(s, f"tokenizer(texts[{a + i}])") for i, s in enumerate(seqs)]
                lens = np.fromiter(map(len, arrs), dtype=np.int64, count=len(arrs))
                flat = np.concatenate(arrs).astype(np.int64) if arrs else np.zeros(0, np.int64)
            lengths[a : a + len(chunk)] = lens
            parts.append(flat)
            bar.update(len(chunk))
    tokens = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    top = MAX_TOKEN + 1 if vocab is None else min(int(vocab), MAX_TOKEN + 1)
    bad = np.flatnonzero((tokens < 0) | (tokens >= top))
    if bad.size:
        j = int(bad[0])
        i = int(np.searchsorted(offsets, j, side="right") - 1)
        limit = (f"the vocabulary of {vocab:,} tokens ({enc.kind})" if vocab is not None and vocab <= MAX_TOKEN
                 else f"[0, {MAX_TOKEN}] (2**32 - 1 is reserved for padding)")
        raise InputError(f"tokenizer(texts[{i}]) = token {int(tokens[j])} for {texts[i][:60]!r}: not in {limit}")
    return tokens, offsets


def _token_sequence(seq: Any, name: str) -> np.ndarray:
    """`check_token_sequence` of a callable's output, naming a tokenizer's own result type where one came back."""
    if hasattr(seq, "ids") and hasattr(seq, "offsets") and hasattr(seq, "attention_mask"):
        raise InputError(f"{name}: returned a tokenizers Encoding, not token ids; pass the tokenizers.Tokenizer "
                         "itself as the tokenizer (encoded without special tokens, padding or truncation), or "
                         "return the encoding's .ids")
    if isinstance(seq, Mapping) and "input_ids" in seq:
        raise InputError(f"{name}: returned a mapping with 'input_ids' (a transformers BatchEncoding?), not token "
                         "ids; pass the transformers tokenizer itself as the tokenizer (encoded without special "
                         "tokens, padding or truncation)")
    return check_token_sequence(seq, name)


def unknown_problem(texts: Sequence[str], tokens: np.ndarray, offsets: np.ndarray, enc: Encoder) -> str | None:
    """What is wrong when texts hold characters the tokenizer's vocabulary lacks (they tokenize to its unknown
    token, or are dropped), so that their tokens do not spell them, naming the first few; else None."""
    if enc.unknown is not None:
        at = np.flatnonzero(tokens == enc.unknown)
        if at.size:
            rows = np.unique(np.searchsorted(offsets, at, side="right") - 1).tolist()
            return _texts_that(texts, rows, f"the tokenizer's unknown token (id {enc.unknown}: a character its "
                                            "vocabulary lacks), so their tokens do not spell them")
    lost = enc.dropped(texts) if enc.dropped is not None else set()
    if lost:
        chars = "".join(sorted(lost))
        rows = [i for i, x in enumerate(texts) if not lost.isdisjoint(x)]
        what = (f"characters the tokenizer's vocabulary lacks ({chars[:20]!r}), which its BPE model (no unknown "
                "token, no byte fallback) drops without a trace")
        return _texts_that(texts, rows, what) if rows else f"texts hold {what} (after its normalizer)"
    return None


def _texts_that(texts: Sequence[str], rows: list[int], what: str) -> str:
    shown = ", ".join(f"texts[{i}] = {texts[i][:40]!r}" for i in rows[:3])
    more = f" and {len(rows) - 3:,} more" if len(rows) > 3 else ""
    return f"{len(rows):,} {'text holds' if len(rows) == 1 else 'texts hold'} {what}: {shown}{more}"


def load_tokenizer(spec: str) -> Any:
    """A tokenizer from ``spec``: a file, a folder or an offline name (`TOKENIZER_SPEC_HELP`)."""
    if spec.startswith("tiktoken:"):
        return _tiktoken_named(spec.partition(":")[2])
    if spec.startswith("hf:"):
        return _transformers(spec.partition(":")[2], spec)
    p = Path(spec)
    if p.is_dir():
        return _transformers(os.fspath(p), spec)
    if not p.is_file():
        raise InputError(f"--tokenizer: {spec}: no such file or folder; expected {TOKENIZER_SPEC_HELP}")
    suffix = p.suffix.lower()
    try:
        if suffix == ".json":
            from tokenizers import Tokenizer

            return Tokenizer.from_file(os.fspath(p))
        if suffix == ".model":
            import sentencepiece

            sp = sentencepiece.SentencePieceProcessor()
            sp.Load(os.fspath(p))
            return sp
        if suffix == ".tiktoken":
            return _tiktoken_file(p)
    except ImportError as e:
        raise InputError(f"--tokenizer: {spec}: reading it needs a package that is not installed ({e})") from None
    except InputError:
        raise
    except Exception as e:  # each library has its own exception types for a bad file
        raise InputError(f"--tokenizer: {spec}: cannot read the tokenizer ({type(e).__name__}: "
                         f"{str(e).splitlines()[0][:200] if str(e) else ''})") from None
    raise InputError(f"--tokenizer: {spec}: unknown kind of tokenizer file {suffix!r}; expected {TOKENIZER_SPEC_HELP}")


def _tiktoken_file(p: Path) -> Any:
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    from tiktoken_ext.openai_public import r50k_pat_str

    ranks = load_tiktoken_bpe(os.fspath(p))
    return tiktoken.Encoding(name=p.stem, pat_str=r50k_pat_str, mergeable_ranks=ranks, special_tokens={})


def _tiktoken_named(name: str) -> Any:
    try:
        import tiktoken
    except ImportError as e:
        raise InputError(f"--tokenizer: tiktoken:{name} needs tiktoken ({e})") from None
    if name not in tiktoken.list_encoding_names():
        raise InputError(f"--tokenizer: tiktoken:{name}: unknown encoding; tiktoken has "
                         f"{', '.join(tiktoken.list_encoding_names())}")
    try:
        return tiktoken.get_encoding(name)
    except Exception as e:  # not in tiktoken's cache, and no network
        raise InputError(f"--tokenizer: tiktoken:{name} is not available offline ({type(e).__name__}); pass its "
                         ".tiktoken file instead") from None


def _transformers(name: str, spec: str) -> Any:
    try:
        from transformers import AutoTokenizer
    except ImportError as e:
        raise InputError(f"--tokenizer: {spec}: a transformers tokenizer needs transformers ({e})") from None
    try:
        return AutoTokenizer.from_pretrained(name, local_files_only=True)
    except Exception as e:  # OSError for a missing model, ValueError for a folder without a tokenizer
        raise InputError(f"--tokenizer: {spec}: no transformers tokenizer there offline ({type(e).__name__}: "
                         f"{str(e).splitlines()[0][:200] if str(e) else ''})") from None
