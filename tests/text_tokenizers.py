"""Small tokenizers of every kind `KeywordSet.from_texts` takes, built in the tests (nothing downloaded)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

NAMES = ["red shoes", "red shirt", "blue shoes", "running shoes", "red running shoes", "green hat", "paris",
         "Paris, France", "São Paulo", "東京", "new york", "york", "new", "red"]
EOS_TEXT = "<eos>"


def bpe(names: list[str] = NAMES, vocab_size: int = 300) -> Any:
    """A byte-level BPE (`tokenizers`) trained on ``names``, whose post-processor appends <eos> (so a tokenizer
    that added special tokens would be caught)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[EOS_TEXT], show_progress=False)
    tok.train_from_iterator(names * 3, trainer)
    eos = tok.token_to_id(EOS_TEXT)
    tok.post_processor = processors.TemplateProcessing(single=f"$A {EOS_TEXT}", special_tokens=[(EOS_TEXT, eos)])
    return tok


def unigram(names: list[str] = NAMES) -> Any:
    """A Unigram model (`tokenizers`) trained on ``names`` with <unk> (id 0) for characters it lacks."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=60, special_tokens=["<unk>"], unk_token="<unk>",
                                      show_progress=False)
    tok.train_from_iterator(names * 5, trainer)
    return tok


def char_bpe(names: list[str] = NAMES) -> Any:
    """A BPE over characters (`tokenizers`, split on whitespace) with neither an unknown token nor byte fallback:
    it drops a character its vocabulary lacks."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(names * 3, trainers.BpeTrainer(vocab_size=80, show_progress=False))
    return tok


def transformers_fast(names: list[str] = NAMES) -> Any:
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=bpe(names), eos_token=EOS_TEXT)


def tiktoken_ranks() -> dict[bytes, int]:
    """The 256 bytes and a few merges, by rank."""
    ranks = {bytes([i]): i for i in range(256)}
    for piece in (b"re", b"red", b" s", b"ho", b" sho", b"es", b" shoes", b"ne", b"new", b" y", b"or", b" york"):
        ranks[piece] = len(ranks)
    return ranks


def save_tiktoken_ranks(path: Path) -> None:
    """`tiktoken_ranks` as a .tiktoken BPE file (base64 token, rank: one a line)."""
    import base64

    lines = [f"{base64.b64encode(t).decode()} {r}\n" for t, r in tiktoken_ranks().items()]
    path.write_text("".join(lines), encoding="ascii")


def tiktoken_encoding() -> Any:
    """A tiktoken Encoding over `tiktoken_ranks` (GPT-2's split pattern)."""
    import tiktoken
    from tiktoken_ext.openai_public import r50k_pat_str

    ranks = tiktoken_ranks()
    return tiktoken.Encoding(name="tiny", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": len(ranks)})


def sentencepiece_model(tmp: Path, names: list[str] = NAMES) -> Any:
    """A sentencepiece BPE model trained on ``names`` in ``tmp``."""
    import sentencepiece as spm

    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(names * 20) + "\n", encoding="utf-8")
    prefix = os.fspath(tmp / "sp")
    spm.SentencePieceTrainer.train(input=os.fspath(corpus), model_prefix=prefix, vocab_size=60, model_type="bpe",
                                   character_coverage=1.0, hard_vocab_limit=False, minloglevel=2)
    return spm.SentencePieceProcessor(model_file=prefix + ".model")


def transformers_slow(model_file: Path) -> Any:
    """A transformers tokenizer on sentencepiece (no tokenizers backend) over ``model_file``."""
    from transformers import BertGenerationTokenizer

    return BertGenerationTokenizer(vocab_file=os.fspath(model_file))


def transformers_python(tmp: Path) -> Any:
    """A transformers WordPiece tokenizer written in Python (no tokenizers backend), [UNK] for what it lacks."""
    from transformers import BertTokenizerLegacy

    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "red", "shoes", "paris", "new", "york", *letters,
             *(f"##{c}" for c in letters)]
    (tmp / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    return BertTokenizerLegacy(vocab_file=os.fspath(tmp / "vocab.txt"))


def encode_one(kind: str, tok: Any, text: str) -> list[int]:
    """The library's own single-string encoding, without special tokens."""
    if kind == "tokenizers":
        return tok.encode(text, add_special_tokens=False).ids
    if kind == "transformers":
        return tok.encode(text, add_special_tokens=False)
    if kind == "tiktoken":
        return tok.encode_ordinary(text)
    if kind == "sentencepiece":
        return tok.encode(text, out_type=int, add_bos=False, add_eos=False, reverse=False, enable_sampling=False)
    return list(tok(text))
