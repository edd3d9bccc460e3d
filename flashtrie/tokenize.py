"""Tokenizers as flashtrie sees them: strings in, token ids out, in batches.

`encoder(tokenizer)` recognises, by duck typing (none of these packages is imported here at module level):

* a ``tiktoken.Encoding`` (``encode_ordinary_batch``: special-token text is encoded as plain text),
* a ``tokenizers.Tokenizer`` (``encode_batch_fast`` / ``encode_batch``, ``add_special_tokens=False``),
* a ``transformers`` tokenizer (called on a list, ``add_special_tokens=False``),
* a ``sentencepiece.SentencePieceProcessor`` (``encode`` of a list, no BOS / EOS),
* any callable ``str -> Sequence[int]`` (called once per string; its output is checked token by token).

`load_tokenizer(spec)` opens one from a file or an offline name, for ``flashtrie build --tokenizer``.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import InputError
from .limits import MAX_TOKEN
from .tokens import check_token_sequence

__all__ = ["Encoder", "encoder", "encode_texts", "load_tokenizer", "TOKENIZER_SPEC_HELP", "BATCH"]

#: Strings per batch handed to the tokenizer (the library's own batch call runs each on its threads).
BATCH = 16_384

TOKENIZER_SPEC_HELP = ("a tokenizer.json file (tokenizers), a sentencepiece .model file, a .tiktoken BPE file "
                       "(read with tiktoken and GPT-2's split pattern), a folder holding a transformers tokenizer, "
                       "tiktoken:NAME (an encoding tiktoken has cached; nothing is downloaded) or hf:NAME (a "
                       "transformers tokenizer in the local Hugging Face cache)")


@dataclass(frozen=True)
class Encoder:
    """One tokenizer seen through one interface: ``batch(strings)`` gives one token sequence per string."""

    kind: str  # "tiktoken", "tokenizers", "transformers", "sentencepiece" or "callable"
    batch: Callable[[list[str]], Sequence[Sequence[int]]]
    vocab_size: int | None  # None where the tokenizer does not say
    checked: bool  # True: outputs are Python int lists from a known library; False: checked token by token


def encoder(tokenizer: Any) -> Encoder:
    """The `Encoder` of ``tokenizer`` (see the module docstring), or an `InputError` saying what is accepted."""
    t = tokenizer
    if hasattr(t, "encode_ordinary_batch") and hasattr(t, "n_vocab"):
        return Encoder("tiktoken", lambda xs: t.encode_ordinary_batch(xs, num_threads=_threads()), int(t.n_vocab), True)
    if hasattr(t, "encode_batch") and hasattr(t, "get_vocab_size"):
        fast = getattr(t, "encode_batch_fast", None) or t.encode_batch
        return Encoder("tokenizers", lambda xs: [e.ids for e in fast(xs, add_special_tokens=False)],
                       int(t.get_vocab_size(with_added_tokens=True)), True)
    if hasattr(t, "model_input_names") and callable(t):
        def call(xs: list[str]) -> Sequence[Sequence[int]]:
            return t(xs, add_special_tokens=False, return_attention_mask=False,
                     return_token_type_ids=False)["input_ids"]

        return Encoder("transformers", call, int(len(t)), True)
    if hasattr(t, "get_piece_size") and hasattr(t, "encode"):
        return Encoder("sentencepiece", lambda xs: t.encode(xs, out_type=int, add_bos=False, add_eos=False,
                                                            num_threads=_threads()), int(t.get_piece_size()), True)
    if callable(t):
        return Encoder("callable", lambda xs: [t(x) for x in xs], None, False)
    raise InputError(f"tokenizer: expected a callable str -> token ids, a tokenizers.Tokenizer, a transformers "
                     f"tokenizer, a tiktoken Encoding or a sentencepiece SentencePieceProcessor, got "
                     f"{type(t).__module__}.{type(t).__name__}")


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
                arrs = [check_token_sequence(s, f"tokenizer(texts[{a + i}])") for i, s in enumerate(seqs)]
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
