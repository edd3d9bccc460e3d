"""Retrieval tasks for measuring quality against beam width: a library of identifiers and queries whose
relevant identifiers come from a data set's own relations.

A `Task` holds, in one compact model vocabulary:

* ``library``: the identifiers' token sequences (a `KeywordSet`; identifier ``i`` is keyword ``i``) and
  their texts;
* ``splits``: ``train`` / ``validation`` / ``test`` queries (token sequences and texts) with the ids of
  every relevant identifier per query;
* ``vocab``: model token -> source tokenizer token (the library and queries use a few thousand of a BPE's
  50k tokens; the models are sized to the tokens in use).  Ids 0, 1, 2 are reserved (`PAD`, `SEP`, `EOS`:
  padding, the separator between a query and its identifier, the end of an identifier) and map to -1.

`build_task` makes one from texts and relations: it tokenizes, compacts the vocabulary, refuses duplicate
identifiers (each identifier must be one keyword with one id), and splits the distinct queries at random
(seeded) into held-out parts.  `save_task` / `load_task` keep a task as one ``.npz`` file (the form in
which tasks travel to a machine without the sources).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flashtrie.errors import InputError
from flashtrie.io_util import atomic_write
from flashtrie.keywords import KeywordSet

__all__ = ["PAD", "SEP", "EOS", "FIRST_TOKEN", "TASK_FORMAT", "Split", "Task", "build_task", "save_task",
           "load_task", "byte_tokenizer", "SPLITS"]

PAD, SEP, EOS = 0, 1, 2
#: the first model token that stands for a source token
FIRST_TOKEN = 3
TASK_FORMAT = "flashtrie.quality-task/1"
SPLITS = ("train", "validation", "test")

Tokenizer = Callable[[Sequence[str]], list[list[int]]]


@dataclass(frozen=True, eq=False)
class Split:
    """Queries (token sequences in the model vocabulary, and texts) with their relevant identifier ids."""

    queries: KeywordSet
    texts: list[str]
    relevant: list[np.ndarray]  # int64 ids into the task's library, sorted, one array per query
    kinds: list[str] = field(default_factory=list)  # the relation each query comes from ('' when one)

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
        return max(s.queries.max_length for s in self.splits.values())

    def sizes(self) -> dict[str, Any]:
        """Data sizes for records and reports."""
        rel = {k: np.array([r.size for r in s.relevant]) for k, s in self.splits.items()}
        return {"identifiers": len(self.library), "vocab": self.vocab_size, "max_id_tokens": self.library.max_length,
                "max_query_tokens": self.max_query_length, **{f"{k}_queries": len(s) for k, s in self.splits.items()},
                "test_mean_relevant": float(rel["test"].mean()) if rel["test"].size else 0.0,
                "test_max_relevant": int(rel["test"].max()) if rel["test"].size else 0,
                "train_pairs": int(rel["train"].sum())}


def byte_tokenizer(texts: Sequence[str]) -> list[list[int]]:
    """UTF-8 bytes as tokens (a tokenizer with no files; tests and fixtures)."""
    return [list(t.encode()) for t in texts]


def build_task(name: str, identifiers: Sequence[str], queries: Mapping[str, Sequence[int]], tokenize: Tokenizer,
               *, seed: int, fractions: tuple[float, float] = (0.1, 0.1), info: Mapping[str, Any] | None = None,
               strata: Mapping[str, str] | None = None) -> Task:
    """A `Task` from identifier texts and ``queries`` (query text -> ids of its relevant identifiers).

    The distinct query texts are shuffled with ``seed`` and cut into validation / test parts of
    ``fractions`` (the rest trains); ``strata`` (query text -> a kind) cuts each kind on its own, so every
    kind is in every split.  Identifier texts must be distinct, and so must their token sequences.
    """
    if len(set(identifiers)) != len(identifiers):
        dup = next(t for i, t in enumerate(identifiers) if t in identifiers[:i])
        raise InputError(f"identifiers: {dup!r} is given twice; every identifier needs its own text")
    val_f, test_f = fractions
    if not (0 <= val_f and 0 <= test_f and val_f + test_f < 1):
        raise InputError(f"fractions: expected validation and test fractions >= 0 summing below 1, got {fractions}")
    n = len(identifiers)
    qtexts = sorted(q for q, ids in queries.items() if len(ids))
    for q in qtexts:
        bad = [i for i in queries[q] if not 0 <= int(i) < n]
        if bad:
            raise InputError(f"queries[{q!r}]: identifier id {bad[0]} is out of range [0, {n})")
    src_ids = tokenize(list(identifiers))
    src_q = tokenize(qtexts)
    vocab, to_model = _compact_vocab(src_ids + src_q)
    library = KeywordSet.from_sequences([to_model(s) for s in src_ids])
    _check_distinct(library, identifiers)
    parts = _split(qtexts, seed, val_f, test_f, strata)
    q_index = {q: i for i, q in enumerate(qtexts)}
    splits = {}
    for key in SPLITS:
        texts = parts[key]
        seqs = [to_model(src_q[q_index[q]]) for q in texts]
        if any(len(s) == 0 for s in seqs):
            raise InputError(f"queries: a query of the {key} split has no tokens")
        rel = [np.unique(np.asarray(queries[q], dtype=np.int64)) for q in texts]
        kinds = [strata.get(q, "") if strata else "" for q in texts]
        splits[key] = Split(KeywordSet.from_sequences(seqs) if seqs else _empty_set(), texts, rel, kinds)
    meta = {"seed": int(seed), "fractions": [val_f, test_f], **(dict(info) if info else {})}
    return Task(name, library, list(identifiers), vocab, splits, meta)


def _empty_set() -> KeywordSet:
    return KeywordSet(np.zeros(0, np.uint32), np.zeros(1, np.int64))


def _compact_vocab(seqs: Sequence[Sequence[int]]) -> tuple[np.ndarray, Callable[[Sequence[int]], list[int]]]:
    """The source tokens in use, sorted, after the reserved ids; and the map of a sequence into it."""
    used = np.unique(np.fromiter((t for s in seqs for t in s), dtype=np.int64))
    vocab = np.concatenate([np.full(FIRST_TOKEN, -1, np.int64), used])
    lookup = {int(t): i + FIRST_TOKEN for i, t in enumerate(used.tolist())}
    return vocab, lambda s: [lookup[int(t)] for t in s]


def _check_distinct(library: KeywordSet, texts: Sequence[str]) -> None:
    seen: dict[bytes, int] = {}
    for i in range(len(library)):
        key = library[i].tobytes()
        if key in seen:
            raise InputError(f"identifiers: {texts[seen[key]]!r} and {texts[i]!r} tokenize to the same tokens; "
                             "every identifier must be its own keyword")
        seen[key] = i


def _split(texts: Sequence[str], seed: int, val_f: float, test_f: float,
           strata: Mapping[str, str] | None) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for t in texts:
        groups.setdefault(strata.get(t, "") if strata else "", []).append(t)
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
        raise InputError(f"{p}: no such task file (make one with 'flashtrie quality-tasks')")
    try:
        with np.load(p, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        meta = json.loads(arrays["meta"].tobytes())
    except (OSError, ValueError, KeyError) as e:
        raise InputError(f"{p}: not a quality task file ({e})") from None
    if meta.get("format") != TASK_FORMAT:
        raise InputError(f"{p}: format {meta.get('format')!r} is not {TASK_FORMAT!r}")
    library = KeywordSet(arrays["library_tokens"], arrays["library_offsets"])
    splits = {}
    for key, part in meta["splits"].items():
        texts = part["texts"]
        off = arrays[f"{key}_rel_offsets"]
        rel = [arrays[f"{key}_rel"][a:b] for a, b in zip(off[:-1], off[1:], strict=True)]
        splits[key] = Split(KeywordSet(arrays[f"{key}_tokens"], arrays[f"{key}_offsets"]), texts, rel, part["kinds"])
    return Task(meta["name"], library, meta["texts"], arrays["vocab"], splits, meta["info"])
