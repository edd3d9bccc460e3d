"""Retrieval tasks for measuring quality against beam width, built on the real libraries of
`flashtrie.datasets.real` (`load_library`; their GPT-2 tokens and query sets).

The setting is generative retrieval's: the library of identifiers is a closed set the model is trained
on, and it is evaluated on query strings it never saw.

* **Indexing.** Every identifier's own tokens -> the identifier is a training example (the model learns
  the library), in every split's training data; `Task.library` holds them.
* **Queries.** A real library's query set (a query text -> every correct identifier), restricted to the
  task's subset of identifiers (a query's relevant ids are its correct identifiers that are in the subset;
  a query left with none is dropped, as is a query whose text equals an identifier's text, which indexing
  already trains).  The distinct query texts are shuffled (seeded) and cut into ``train`` / ``validation``
  / ``test``, separately for queries with one relevant identifier and with several (their ``kinds``, so
  both are in every split).  A held-out query string never occurs in training; its relevant identifiers
  always do (through indexing, and often through other queries).

The two tasks (`TASKS`; sizes are the number of identifiers, the subset rule makes them reproducible):

* ``cities`` (from ``geonames-cities``): ambiguous city names (2 to `MAX_CITIES_PER_NAME` cities in the
  full library) in a seeded random order; each name's cities are taken whole while they fit in the size.
  Queries: every name and alternate name of those cities in Latin script with at least one letter
  (letters ASCII or named LATIN in Unicode; other scripts would ask a small model to transliterate from a
  handful of examples, and GeoNames lists codes such as ``"27"`` among alternate names) -> every chosen
  city that has it.  An ambiguous name is a query with many correct answers.
* ``wordnet`` (from ``wordnet-synsets``): the synsets of the most polysemous lemmas (most synsets, then the
  lemma's code points), each lemma's synsets taken whole while they fit.  Queries: every lemma of those
  synsets -> every chosen synset it belongs to (``"break"``: dozens of senses).

Relations the libraries do not hold (a region -> its cities, a hypernym -> its hyponyms) are left out:
their answers cannot be guessed from a new query string, which is what a held-out query tests.

Tokens: identifiers keep the library's GPT-2 tokens; queries are tokenized with the same encoding.  A task
then renumbers the tokens in use into a compact model vocabulary (`Task.vocab`: model token -> GPT-2
token) after three reserved ids (`PAD`, `SEP` before an identifier, `EOS` after it).  `save_task` /
`load_task` keep a task as one ``.npz`` (how tasks travel to a machine without the data packages).
"""

from __future__ import annotations

import io
import json
import os
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flashtrie.errors import InputError
from flashtrie.io_util import atomic_write
from flashtrie.keywords import KeywordSet

from .real import RealLibrary

__all__ = ["PAD", "SEP", "EOS", "FIRST_TOKEN", "TASK_FORMAT", "SPLITS", "TASKS", "MAX_CITIES_PER_NAME", "Split",
           "Task", "build_task", "compact_vocab", "check_distinct", "city_subset", "synset_subset", "task_from_library",
           "save_task", "load_task"]

PAD, SEP, EOS = 0, 1, 2
#: the first model token that stands for a source token
FIRST_TOKEN = 3
TASK_FORMAT = "flashtrie.quality-task/2"
SPLITS = ("train", "validation", "test")
#: task name -> the real library it is built from
TASKS = {"cities": "geonames-cities", "wordnet": "wordnet-synsets"}
#: the most cities a name of the ``cities`` task may have (names shared more widely are not chosen)
MAX_CITIES_PER_NAME = 100


@dataclass(frozen=True, eq=False)
class Split:
    """Queries (token sequences in the model vocabulary, and texts) with their relevant identifier ids."""

    queries: KeywordSet
    texts: list[str]
    relevant: list[np.ndarray]  # int64 ids into the task's library, sorted, one array per query
    kinds: list[str] = field(default_factory=list)  # "one" or "several" relevant identifiers

    def __len__(self) -> int:
        return len(self.texts)


@dataclass(frozen=True, eq=False)
class Task:
    """A library of identifiers and its query splits (see the module docstring)."""

    name: str
    library: KeywordSet
    texts: list[str]
    vocab: np.ndarray  # int64: model token -> source token (-1 for the reserved ids)
    splits: dict[str, Split]
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        return int(self.vocab.size)

    @property
    def max_query_length(self) -> int:
        """The longest model input: a query or an identifier (indexing)."""
        return max(self.library.max_length, *(s.queries.max_length for s in self.splits.values()))

    def sizes(self) -> dict[str, Any]:
        """Data sizes for records and reports."""
        rel = {k: np.array([r.size for r in s.relevant]) for k, s in self.splits.items()}
        out: dict[str, Any] = {"identifiers": len(self.library), "vocab": self.vocab_size,
                               "max_id_tokens": self.library.max_length, "max_query_tokens": self.max_query_length,
                               **{f"{k}_queries": len(s) for k, s in self.splits.items()},
                               "train_pairs": int(rel["train"].sum()) + len(self.library)}
        for k in ("train", "test"):
            r = rel[k]
            out.update({f"{k}_mean_relevant": float(r.mean()) if r.size else 0.0,
                        f"{k}_median_relevant": float(np.median(r)) if r.size else 0.0,
                        f"{k}_max_relevant": int(r.max()) if r.size else 0,
                        f"{k}_precision@100_ceiling": float(np.minimum(r, 100).mean() / 100) if r.size else 0.0})
        return out

    def known(self, split: str) -> list[np.ndarray]:
        """Per query of ``split``, the relevant ids the other splits give the same query text: the ids the
        filtered setting removes from its ranked list (none where splits hold different queries)."""
        other: dict[str, list[np.ndarray]] = {}
        for k, s in self.splits.items():
            if k != split:
                for t, r in zip(s.texts, s.relevant, strict=True):
                    other.setdefault(t, []).append(r)
        empty = np.zeros(0, np.int64)
        return [np.unique(np.concatenate(other[t])) if t in other else empty for t in self.splits[split].texts]


def _latin(text: str) -> bool:
    """Every letter is ASCII or named LATIN in Unicode."""
    return all(ord(c) < 128 or not c.isalpha() or "LATIN" in unicodedata.name(c, "") for c in text)


def _take_groups(groups: Sequence[np.ndarray], size: int) -> np.ndarray:
    """Whole groups of ids, in order, while they fit in ``size`` (a group that would overflow is passed over)."""
    chosen: dict[int, None] = {}
    for g in groups:
        new = [int(i) for i in g if int(i) not in chosen]
        if len(chosen) + len(new) <= size:
            chosen.update(dict.fromkeys(new))
        if len(chosen) == size:
            break
    return np.array(sorted(chosen), dtype=np.int64)


def city_subset(lib: RealLibrary, size: int, seed: int) -> np.ndarray:
    """The ``cities`` task's identifiers (module docstring): ids into ``lib``, sorted."""
    names = [j for j, (q, r) in enumerate(zip(lib.query_texts, lib.relevant, strict=True))
             if 2 <= r.size <= MAX_CITIES_PER_NAME and _latin(q)]
    order = np.random.default_rng(seed).permutation(len(names))
    return _take_groups([lib.relevant[names[i]] for i in order], size)


def synset_subset(lib: RealLibrary, size: int, seed: int = 0) -> np.ndarray:
    """The ``wordnet`` task's identifiers (module docstring): ids into ``lib``, sorted (``seed`` unused: the
    rule has no randomness)."""
    order = sorted(range(len(lib.query_texts)), key=lambda j: (-lib.relevant[j].size, lib.query_texts[j]))
    return _take_groups([lib.relevant[j] for j in order], size)


_SUBSETS: dict[str, Callable[[RealLibrary, int, int], np.ndarray]] = {"cities": city_subset,
                                                                        "wordnet": synset_subset}


def task_from_library(name: str, lib: RealLibrary, size: int, encoding: Any, *, seed: int,
                      fractions: tuple[float, float] = (0.1, 0.1)) -> Task:
    """The task ``name`` (one of `TASKS`) of ``size`` identifiers from its real library ``lib``; queries are
    tokenized with ``encoding`` (the library's: ``encode_ordinary_batch``)."""
    if name not in TASKS:
        raise InputError(f"name: {name!r} is not one of {', '.join(TASKS)}")
    if lib.name != TASKS[name]:
        raise InputError(f"lib: the {name} task is built from {TASKS[name]}, got {lib.name}")
    if size < 1:
        raise InputError(f"size: expected at least 1 identifier, got {size}")
    keep = _SUBSETS[name](lib, size, seed)
    new_id = np.full(len(lib), -1, dtype=np.int64)
    new_id[keep] = np.arange(keep.size)
    texts = [lib.texts[int(i)] for i in keep]
    latin = name == "cities"
    queries: dict[str, list[int]] = {}
    for q, r in zip(lib.query_texts, lib.relevant, strict=True):
        ids = new_id[r]
        ids = ids[ids >= 0]
        if ids.size and (not latin or (_latin(q) and any(c.isalpha() for c in q))):
            queries[q] = ids.tolist()
    info = {"library": lib.name, "library_params": lib.params, "size": int(keep.size), "subset": _subset_rule(name)}
    return build_task(name, texts, [lib.keywords[int(i)] for i in keep], queries,
                      lambda t: encoding.encode_ordinary_batch(list(t)), seed=seed, fractions=fractions, info=info)


def _subset_rule(name: str) -> str:
    if name == "cities":
        return (f"ambiguous names (2 to {MAX_CITIES_PER_NAME} cities) in a seeded order, each name's cities whole; "
                "queries: Latin-script names and alternate names with a letter")
    return "the synsets of the most polysemous lemmas, each lemma's synsets whole; queries: their lemmas"


def build_task(name: str, texts: Sequence[str], tokens: Sequence[Sequence[int] | np.ndarray],
               queries: Mapping[str, Sequence[int]], tokenize: Callable[[Sequence[str]], list[list[int]]], *, seed: int,
               fractions: tuple[float, float] = (0.1, 0.1), info: Mapping[str, Any] | None = None) -> Task:
    """A `Task` from identifier ``texts`` and their source ``tokens``, and ``queries`` (query text -> ids of
    its relevant identifiers; ``tokenize`` makes their source tokens).  Splits as in the module docstring."""
    if len(texts) != len(tokens):
        raise InputError(f"tokens: {len(tokens)} token sequences for {len(texts)} identifiers")
    if len(set(texts)) != len(texts):
        dup = next(t for i, t in enumerate(texts) if t in texts[:i])
        raise InputError(f"texts: {dup!r} is given twice; every identifier needs its own text")
    val_f, test_f = fractions
    if not (0 <= val_f and 0 <= test_f and val_f + test_f < 1):
        raise InputError(f"fractions: expected validation and test fractions >= 0 summing below 1, got {fractions}")
    n, names = len(texts), set(texts)
    qtexts = sorted(q for q, ids in queries.items() if len(ids) and q not in names)
    for q in qtexts:
        bad = [i for i in queries[q] if not 0 <= int(i) < n]
        if bad:
            raise InputError(f"queries[{q!r}]: identifier id {bad[0]} is out of range [0, {n})")
    src_q = tokenize(qtexts)
    vocab, to_model = compact_vocab([*tokens, *src_q])
    library = KeywordSet.from_sequences([to_model(s) for s in tokens])
    check_distinct(library, texts)
    rel = {q: np.unique(np.asarray(queries[q], dtype=np.int64)) for q in qtexts}
    kinds = {q: "one" if rel[q].size == 1 else "several" for q in qtexts}
    parts = _split(qtexts, seed, val_f, test_f, kinds)
    q_index = {q: i for i, q in enumerate(qtexts)}
    splits = {}
    for key in SPLITS:
        part = parts[key]
        seqs = [to_model(src_q[q_index[q]]) for q in part]
        if any(len(s) == 0 for s in seqs):
            raise InputError(f"queries: a query of the {key} split has no tokens")
        splits[key] = Split(KeywordSet.from_sequences(seqs) if seqs else _empty_set(), part, [rel[q] for q in part],
                            [kinds[q] for q in part])
    meta = {"seed": int(seed), "fractions": [val_f, test_f], **(dict(info) if info else {})}
    return Task(name, library, list(texts), vocab, splits, meta)


def _empty_set() -> KeywordSet:
    return KeywordSet(np.zeros(0, np.uint32), np.zeros(1, np.int64))


def compact_vocab(seqs: Sequence[Sequence[int] | np.ndarray]
                   ) -> tuple[np.ndarray, Callable[[Sequence[int] | np.ndarray], list[int]]]:
    """The source tokens in use, sorted, after the reserved ids; and the map of a sequence into it."""
    used = np.unique(np.fromiter((t for s in seqs for t in s), dtype=np.int64))
    vocab = np.concatenate([np.full(FIRST_TOKEN, -1, np.int64), used])
    lookup = {int(t): i + FIRST_TOKEN for i, t in enumerate(used.tolist())}
    return vocab, lambda s: [lookup[int(t)] for t in s]


def check_distinct(library: KeywordSet, texts: Sequence[str]) -> None:
    seen: dict[bytes, int] = {}
    for i in range(len(library)):
        key = library[i].tobytes()
        if key in seen:
            raise InputError(f"texts: {texts[seen[key]]!r} and {texts[i]!r} tokenize to the same tokens; "
                             "every identifier must be its own keyword")
        seen[key] = i


def _split(texts: Sequence[str], seed: int, val_f: float, test_f: float, kinds: Mapping[str, str]
           ) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for t in texts:
        groups.setdefault(kinds[t], []).append(t)
    rng = np.random.default_rng(seed)
    out: dict[str, list[str]] = {k: [] for k in SPLITS}
    for kind in sorted(groups):
        g = groups[kind]
        order = rng.permutation(len(g))
        n_val, n_test = int(round(val_f * len(g))), int(round(test_f * len(g)))
        out["validation"] += [g[i] for i in order[:n_val]]
        out["test"] += [g[i] for i in order[n_val:n_val + n_test]]
        out["train"] += [g[i] for i in order[n_val + n_test:]]
    return {k: sorted(v) for k, v in out.items()}


# ------------------------------------------------------------------------------------------------ files
def save_task(task: Task, path: str | os.PathLike[str]) -> None:
    """Write ``task`` as one ``.npz`` (atomically)."""
    arrays: dict[str, np.ndarray] = {"library_tokens": task.library.tokens, "library_offsets": task.library.offsets,
                                     "vocab": task.vocab}
    meta: dict[str, Any] = {"format": TASK_FORMAT, "name": task.name, "texts": task.texts, "info": task.info,
                            "splits": {}}
    for key, s in task.splits.items():
        arrays[f"{key}_tokens"], arrays[f"{key}_offsets"] = s.queries.tokens, s.queries.offsets
        lengths = np.array([r.size for r in s.relevant], dtype=np.int64)
        arrays[f"{key}_rel_offsets"] = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        arrays[f"{key}_rel"] = np.concatenate(s.relevant) if s.relevant else np.zeros(0, np.int64)
        meta["splits"][key] = {"texts": s.texts, "kinds": s.kinds}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)  # type: ignore[arg-type]  # (stubs: allow_pickle)
    atomic_write(path, buf.getvalue())


def load_task(path: str | os.PathLike[str]) -> Task:
    """Read a task written by `save_task`; a file of another kind raises `InputError`."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such task file (make one with 'flashtrie quality tasks')")
    try:
        with np.load(p, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        meta = json.loads(arrays["meta"].tobytes())
    except (OSError, ValueError, KeyError) as e:
        raise InputError(f"{p}: not a quality task file ({e})") from None
    if meta.get("format") != TASK_FORMAT:
        raise InputError(f"{p}: format {meta.get('format')!r} is not {TASK_FORMAT!r}; rebuild it with "
                         "'flashtrie quality tasks'")
    library = KeywordSet(arrays["library_tokens"], arrays["library_offsets"])
    splits = {}
    for key, part in meta["splits"].items():
        off = arrays[f"{key}_rel_offsets"]
        rel = [arrays[f"{key}_rel"][a:b] for a, b in zip(off[:-1], off[1:], strict=True)]
        splits[key] = Split(KeywordSet(arrays[f"{key}_tokens"], arrays[f"{key}_offsets"]), part["texts"], rel,
                            part["kinds"])
    return Task(meta["name"], library, meta["texts"], arrays["vocab"], splits, meta["info"])
