"""The stepwise suite's libraries and rows: ``fixed:N:V`` (N identifiers of 8 uniform tokens below V) and
``var:N`` (`flashtrie.datasets.generate_keywords`: lengths 1-8, a 2.2M vocabulary); rows at the root or inside
keywords; the nested-dict trie and callback of transformers' own constrained decoding, to compare with."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import numpy as np
from flashtrie.harness.argtypes import count

from flashtrie import KeywordSet

__all__ = ["DEFAULT_CASES", "STATES", "fixed_length_library", "library", "sample_rows", "parse_shape", "check_case",
           "nested_dict_trie", "dict_prefix_fn"]

DEFAULT_CASES = "fixed:1M:2048,fixed:1M:32768,var:10M,fixed:20M:32768,var:100M,fixed:20M:2048"
STATES = ("root", "mid")


def fixed_length_library(n: int, vocab: int, length: int = 8, seed: int = 0) -> KeywordSet:
    """n identifiers of ``length`` uniform tokens below ``vocab`` (STATIC's semantic IDs)."""
    tok = np.random.default_rng(seed).integers(0, vocab, size=n * length, dtype=np.uint32)
    return KeywordSet.from_arrays(tok, np.arange(0, n * length + 1, length, dtype=np.int64))


def library(case: str) -> tuple[KeywordSet, dict[str, Any]]:
    kind, *rest = case.split(":")
    if kind == "fixed":
        n, v = count(rest[0]), count(rest[1])
        return fixed_length_library(n, v), {"name": "fixed-8", "num_keywords": n, "vocab_size": v}
    if kind == "var":
        from flashtrie.datasets import generate_keywords

        n = count(rest[0])
        return generate_keywords(n, vocab_size=2_200_000), {"name": "var-1-8", "num_keywords": n,
                                                             "vocab_size": 2_200_000}
    raise ValueError(f"library {case!r} is not fixed:N:V or var:N")


def sample_rows(keywords: KeywordSet, rows: int, root: bool, seed: int) -> tuple[list[list[int]], np.ndarray]:
    """(prefixes, next tokens): random keywords cut at depth 0 (root) or at a random depth."""
    rng = np.random.default_rng(seed)
    prefixes, nxt = [], []
    for i in rng.integers(0, len(keywords), size=rows):
        kw = keywords[int(i)]
        d = 0 if root or kw.size < 2 else int(rng.integers(1, kw.size))
        prefixes.append(kw[:d].tolist())
        nxt.append(int(kw[d]))
    return prefixes, np.asarray(nxt, dtype=np.int64)


def parse_shape(text: str) -> tuple[int, int]:
    """``BxK`` (batch x beams), both >= 1."""
    try:
        b, k = (int(v) for v in text.lower().split("x"))
    except ValueError:
        b = k = 0
    if b < 1 or k < 1:
        raise argparse.ArgumentTypeError(f"expected batch x beams such as 2x70, got {text!r}")
    return b, k


def check_case(text: str) -> None:
    """Refuse a library name that ``library`` would not read: fixed:N:V or var:N."""
    kind, *rest = text.split(":")
    if (kind, len(rest)) not in (("fixed", 2), ("var", 1)):
        raise argparse.ArgumentTypeError(f"expected fixed:N:V or var:N (such as fixed:20M:32768), got {text!r}")
    for r in rest:
        count(r)


def nested_dict_trie(keywords: KeywordSet, eos: int) -> dict:
    root: dict = {}
    for kw in keywords.to_sequences():
        d = root
        for x in kw:
            d = d.setdefault(x, {})
        d[eos] = {}
    return root


def dict_prefix_fn(root: dict, prompt_length: int, eos: int) -> Callable[[int, Any], list[int]]:
    """GENRE-style callback over a nested dict: walk the generated suffix, list the children."""
    def fn(batch_id: int, sent: Any) -> list[int]:
        d = root
        for x in sent.tolist()[prompt_length:]:
            child = d.get(x)
            if child is None:
                return [eos]
            d = child
        return list(d) or [eos]

    return fn
