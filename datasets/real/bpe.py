"""GPT-2's byte-level BPE, read offline from the ``gpt2.tiktoken`` file that the pip package
``openai-whisper`` ships (``whisper/assets/gpt2.tiktoken``; MIT licence).  Only that file is read: whisper
itself (and its torch / numba dependencies) is never imported, so ``pip install --no-deps openai-whisper``
is enough.  The ranks are checked against the SHA-256 of GPT-2's published vocabulary, and the split
pattern is tiktoken's own GPT-2 pattern (``tiktoken_ext.openai_public.r50k_pat_str``), so the encoding
equals tiktoken's ``gpt2`` encoding without a download.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

from flashtrie.errors import InputError

from .cache import SourceMissing

__all__ = ["GPT2_SHA256", "GPT2_EOT", "gpt2_vocab_path", "gpt2_encoding", "gpt2_version"]

#: SHA-256 of GPT-2's 50,256 mergeable ranks in tiktoken's file format (the same bytes as r50k_base).
GPT2_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
#: GPT-2's end-of-text token id (not produced by ordinary encoding; the EOS of stepwise decoding).
GPT2_EOT = 50256
_DIST, _ASSET = "openai-whisper", "whisper/assets/gpt2.tiktoken"


def gpt2_vocab_path() -> Path:
    """Where the installed ``openai-whisper`` distribution keeps ``gpt2.tiktoken`` (found through its
    metadata, without importing whisper)."""
    try:
        dist = importlib.metadata.distribution(_DIST)
    except importlib.metadata.PackageNotFoundError:
        raise SourceMissing("the GPT-2 vocabulary comes from the pip package openai-whisper, which is not installed; "
                         "install it with: pip install --no-deps openai-whisper") from None
    path = Path(str(dist.locate_file(_ASSET)))
    if not path.is_file():
        raise InputError(f"{path}: openai-whisper {dist.version} has no {_ASSET}; install a release that ships it")
    return path


def gpt2_version() -> str:
    """The vocabulary's identity for cache keys: its distribution version and hash prefix."""
    return f"gpt2-{GPT2_SHA256[:12]}"


def gpt2_encoding() -> Any:
    """A ``tiktoken.Encoding`` equal to tiktoken's ``gpt2``, built from the local file."""
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    from tiktoken_ext.openai_public import r50k_pat_str

    try:
        ranks = load_tiktoken_bpe(str(gpt2_vocab_path()), expected_hash=GPT2_SHA256)
    except ValueError as e:  # a hash mismatch
        raise InputError(f"{gpt2_vocab_path()}: not GPT-2's vocabulary ({e})") from None
    return tiktoken.Encoding(name="gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": GPT2_EOT}, explicit_n_vocab=GPT2_EOT + 1)
