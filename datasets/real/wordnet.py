"""English WordNet 3.0 libraries from Debian's ``wordnet-base`` package (``/usr/share/wordnet``; the
WordNet licence, a permissive BSD-style licence of Princeton University).  Read from its text files:
``index.{noun,verb,adj,adv}`` (lemma -> synset offsets, in sense order) and ``data.*`` (synset -> member
lemmas).

* ``wordnet-lemmas``: every distinct lemma of the index files (147,306 in WordNet 3.0), underscores
  as spaces (``"hot dog"``), sorted by code point.  Queries: every lemma; its correct answers are its
  synonyms: every lemma that shares a synset with it, itself included (polysemous lemmas collect the
  synonyms of all their senses).
* ``wordnet-synsets``: one identifier per synset (117,659), ``LEMMA.POS.NN`` as NLTK names synsets: the
  synset's first member lemma (lower case, adjective markers such as ``(a)`` removed, underscores kept),
  its type (``n``, ``v``, ``a``, ``s`` for satellite adjectives, ``r``) and the two-digit sense number of
  the synset in that lemma's index entry (``bank.n.01``).  Numbered by (index file n, v, a, r; offset).
  Queries: every lemma (underscores as spaces); its correct answers are every synset it belongs to.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from flashtrie.errors import InputError

from .bpe import gpt2_encoding, gpt2_version
from .cache import SourceMissing, cached_library
from .library import RealLibrary, keywords_from_texts

__all__ = ["WORDNET_DIR", "read_wordnet", "WordNet", "load_wordnet_lemmas", "load_wordnet_synsets"]

WORDNET_DIR = Path("/usr/share/wordnet")
POS_FILES = ("noun", "verb", "adj", "adv")
LICENCE = "WordNet 3.0 (Princeton University) via Debian wordnet-base: WordNet licence (BSD-style)"
_MARKER = re.compile(r"\((?:a|p|ip)\)$")


class WordNet:
    """The parsed files: ``senses[(lemma, pos_file)]`` = synset keys in sense order; ``members[key]`` =
    member lemmas (lower case); ``types[key]`` = synset type.  A synset key is ``(pos_file, offset)``."""

    def __init__(self) -> None:
        self.senses: dict[tuple[str, str], list[tuple[str, int]]] = {}
        self.members: dict[tuple[str, int], list[str]] = {}
        self.types: dict[tuple[str, int], str] = {}


def _lines(path: Path) -> list[tuple[int, list[str]]]:
    """(line number, fields) of the data lines (the licence header lines start with a space)."""
    with path.open(encoding="utf-8") as f:
        return [(n, line.split()) for n, line in enumerate(f, 1) if line.strip() and not line.startswith(" ")]


def read_wordnet(folder: str | os.PathLike[str] = WORDNET_DIR) -> WordNet:
    """Parse the index and data files of every part of speech; a malformed line raises `InputError`
    naming the file and line."""
    root = Path(folder)
    wn = WordNet()
    for pos in POS_FILES:
        for kind in ("index", "data"):
            path = root / f"{kind}.{pos}"
            if not path.is_file():
                raise SourceMissing(f"{path}: no such WordNet file (apt-get install wordnet-base)")
            for n, f in _lines(path):
                try:
                    if kind == "index":  # lemma pos synset_cnt p_cnt [ptr]*p_cnt sense_cnt tagsense_cnt offsets
                        cnt = int(f[2])
                        wn.senses[(f[0], pos)] = [(pos, int(o)) for o in f[len(f) - cnt:]]
                        if cnt < 1 or len(f) != 6 + int(f[3]) + cnt:
                            raise ValueError("field counts do not add up")
                    else:  # offset lex_filenum ss_type w_cnt (hex) [word lex_id]*w_cnt ...
                        key, words = (pos, int(f[0])), int(f[3], 16)
                        wn.types[key] = f[2]
                        wn.members[key] = [_MARKER.sub("", w).lower() for w in f[4:4 + 2 * words:2]]
                        if not wn.members[key]:
                            raise ValueError("a synset without members")
                except (ValueError, IndexError) as e:
                    raise InputError(f"{path}: line {n}: not a WordNet {kind} line ({e})") from None
    missing = next((k for keys in wn.senses.values() for k in keys if k not in wn.members), None)
    if missing is not None:
        raise InputError(f"{root}: synset {missing[1]} of index.{missing[0]} is not in data.{missing[0]}")
    return wn


def _space(lemma: str) -> str:
    return lemma.replace("_", " ")


def _lemmas_library(wn: WordNet, version: str, enc: Any) -> RealLibrary:
    texts = sorted({_space(lemma) for lemma, _ in wn.senses})
    ids = {t: i for i, t in enumerate(texts)}
    synonyms: dict[int, set[int]] = defaultdict(set)
    for (lemma, _), keys in wn.senses.items():
        me = ids[_space(lemma)]
        for key in keys:
            synonyms[me].update(ids[_space(m)] for m in wn.members[key] if _space(m) in ids)
        synonyms[me].add(me)
    return RealLibrary("wordnet-lemmas", texts, keywords_from_texts(texts, enc), texts,
                       [np.asarray(sorted(synonyms[i]), dtype=np.int64) for i in range(len(texts))],
                       {"source": "wordnet-base", "version": version, "licence": LICENCE,
                        "identifier": "a lemma, underscores as spaces",
                        "queries": "a lemma -> every lemma sharing a synset with it", "tokenizer": enc.name})


def synset_names(wn: WordNet) -> dict[tuple[str, int], str]:
    """``LEMMA.POS.NN`` of every synset (module docstring), in identifier order."""
    names = {}
    for key in sorted(wn.members, key=lambda k: (POS_FILES.index(k[0]), k[1])):
        first = wn.members[key][0]
        senses = wn.senses.get((first, key[0]), [])
        if key not in senses:
            raise InputError(f"synset {key[1]} of data.{key[0]}: its first lemma {first!r} has no index entry for it")
        names[key] = f"{first}.{wn.types[key]}.{senses.index(key) + 1:02d}"
    if len(set(names.values())) != len(names):
        raise InputError("WordNet: two synsets got the same LEMMA.POS.NN name")
    return names


def _synsets_library(wn: WordNet, version: str, enc: Any) -> RealLibrary:
    names = synset_names(wn)
    ids = {key: i for i, key in enumerate(names)}
    texts = list(names.values())
    of_lemma: dict[str, set[int]] = defaultdict(set)
    for (lemma, _), keys in wn.senses.items():
        of_lemma[_space(lemma)].update(ids[k] for k in keys)
    queries = sorted(of_lemma)
    return RealLibrary("wordnet-synsets", texts, keywords_from_texts(texts, enc), queries,
                       [np.asarray(sorted(of_lemma[q]), dtype=np.int64) for q in queries],
                       {"source": "wordnet-base", "version": version, "licence": LICENCE,
                        "identifier": "LEMMA.POS.NN (NLTK-style synset name)",
                        "queries": "a lemma -> every synset it belongs to", "tokenizer": enc.name})


def _data_version(folder: Path) -> str:
    """A hash of the index and data files (raises `SourceMissing` where they are absent)."""
    h = hashlib.sha256()
    for pos in POS_FILES:
        for kind in ("index", "data"):
            path = folder / f"{kind}.{pos}"
            if not path.is_file():
                raise SourceMissing(f"{path}: no such WordNet file (apt-get install wordnet-base)")
            h.update(path.read_bytes())
    return f"wordnet-{h.hexdigest()[:12]}"


def _load(name: str, cache_dir: Any, refresh: bool, folder: Any, encoding: Any) -> RealLibrary:
    root = Path(folder)
    tokenizer = gpt2_version() if encoding is None else f"{encoding.name}-{encoding.n_vocab}"

    def version() -> str:
        return f"{_data_version(root)}-{tokenizer}"

    def build() -> RealLibrary:
        enc = gpt2_encoding() if encoding is None else encoding
        wn = read_wordnet(root)
        return (_lemmas_library if name == "wordnet-lemmas" else _synsets_library)(wn, version(), enc)

    return cached_library(name, cache_dir, version, build, refresh)


def load_wordnet_lemmas(cache_dir: Any = None, *, refresh: bool = False, folder: Any = WORDNET_DIR,
                        encoding: Any = None) -> RealLibrary:
    """The ``wordnet-lemmas`` library (module docstring), GPT-2 tokens unless ``encoding`` is given."""
    return _load("wordnet-lemmas", cache_dir, refresh, folder, encoding)


def load_wordnet_synsets(cache_dir: Any = None, *, refresh: bool = False, folder: Any = WORDNET_DIR,
                         encoding: Any = None) -> RealLibrary:
    """The ``wordnet-synsets`` library (module docstring)."""
    return _load("wordnet-synsets", cache_dir, refresh, folder, encoding)
