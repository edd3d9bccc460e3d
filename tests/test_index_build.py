"""The builder's arrays pinned: digests of every array (and the metadata and order) of a few libraries.

The CPU builder (split across threads or not) and the GPU builder's path run with numpy (or with numpy
posing as another array module) must give them byte for byte: a change of any byte of any array fails here.
"""

from __future__ import annotations

import hashlib
import json
import types

import numpy as np
import pytest
from flashtrie.datasets import generate_keywords
from flashtrie.gpu_impl import build_gpu

from flashtrie import KeywordSet, NarrowLoudsIndex
from flashtrie.index import builder
from flashtrie.index.fingerprint import FINGERPRINT_KEY
from flashtrie.limits import MAX_TOKEN


class _NotNumpy(types.ModuleType):
    """numpy under another name: array-module code then takes the branches it takes for cupy (its sorts
    without ``kind``, its gathers without ``mode``, the packed sorts), so they run on every machine."""

    def __getattr__(self, name: str) -> object:
        return getattr(np, name)


NOT_NUMPY = _NotNumpy("not_numpy")

DIGESTS = {
    ("gen300k_dup", "input"): "4e54b0c8cd931d3663f2ccf7d9a9ae60",
    ("gen300k_dup", "index"): "7f38418ffd5706fb897b95c3d235d0a4",
    ("gen50k_small_vocab", "input"): "2194e63d6d9342c6e54fb805e9bfd3f9",
    ("gen50k_small_vocab", "index"): "1db2db4a8fa585e45381e2d55bfa3167",
    ("random20k", "input"): "414f3ab6f494e6d89786c5c5f1a47bae",
    ("random20k", "index"): "b6596ceedbf4c37102813278b7f3b559",
}


def digest(idx: NarrowLoudsIndex, order: np.ndarray) -> str:
    """sha256 (first 32 hex digits) of every array's name, dtype, shape and bytes, the metadata less the
    build time and the keyword-set fingerprint (a hash of the input, pinned by its own tests), and the order."""
    h = hashlib.sha256()
    for name in sorted(idx.arrays):
        a = np.ascontiguousarray(np.asarray(idx.arrays[name]))
        for part in (name, str(a.dtype), str(a.shape)):
            h.update(part.encode())
        h.update(a.tobytes())
    meta = {k: v for k, v in idx.meta.items() if k not in ("build_seconds", FINGERPRINT_KEY)}
    h.update(json.dumps(meta, sort_keys=True, default=str).encode())
    h.update(np.asarray(order, dtype=np.int64).tobytes())
    return h.hexdigest()[:32]


def random_library(seed: int) -> KeywordSet:
    """Long keywords over the whole token range, many extending earlier ones (long links, high labels),
    exact duplicates among them."""
    rng = np.random.default_rng(seed)
    kws: list[list[int]] = []
    for _ in range(20_000):
        if kws and rng.random() < 0.5:
            base = kws[int(rng.integers(len(kws)))]
            cut = int(rng.integers(0, len(base) + 1))
            k = base[:cut] + rng.integers(0, 70_000, size=int(rng.integers(0 if cut else 1, 30))).tolist()
        else:
            k = rng.integers(0, MAX_TOKEN + 1, size=int(rng.integers(1, 12)), dtype=np.int64).tolist()
        kws.append(k or [0])
    return KeywordSet.from_sequences(kws)


LIBRARIES = {
    "gen300k_dup": lambda: generate_keywords(300_000, seed=11, duplicate_fraction=0.05),
    "gen50k_small_vocab": lambda: generate_keywords(50_000, seed=2, vocab_size=300),
    "random20k": lambda: random_library(5),
}
_made: dict[str, KeywordSet] = {}


def library(name: str) -> KeywordSet:
    if name not in _made:
        _made[name] = LIBRARIES[name]()
    return _made[name]


@pytest.mark.parametrize("how", ["cpu", "cpu-split", "gpu-path-numpy", "gpu-path-not-numpy"])
@pytest.mark.parametrize(("name", "ids"), sorted(DIGESTS))
def test_arrays_match_the_stored_digests(monkeypatch: pytest.MonkeyPatch, name: str, ids: str, how: str) -> None:
    ks = library(name)
    if how.startswith("gpu-path"):
        xp = np if how == "gpu-path-numpy" else NOT_NUMPY
        idx, order = build_gpu.build_index(ks, ids=ids, xp=xp, return_order=True)
    else:
        if how == "cpu-split":  # parts by first token on threads, joined under one root
            monkeypatch.setattr(builder, "MIN_PART", 1000)
            monkeypatch.setattr(builder, "_cores", lambda: 4)
        idx, order = NarrowLoudsIndex.build(ks, ids=ids, return_order=True)
    assert digest(idx, order) == DIGESTS[(name, ids)]
