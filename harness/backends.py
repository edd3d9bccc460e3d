"""Backend registry: which searchers exist on this machine, and how to build each one.

Backends are imported lazily so the harness works while a backend is missing or its machine lacks a
GPU; a missing backend is reported with the reason, never silently dropped.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flashtrie.keywords import KeywordSet
from flashtrie.search_types import Searcher

if TYPE_CHECKING:
    from flashtrie.index import NarrowLoudsIndex

__all__ = ["BACKENDS", "ORDER", "BackendSpec", "find_class", "availability", "available", "available_backends",
           "make_searchers", "setup_text", "close_searchers", "parse_backends", "reference_first", "REFERENCE",
           "BASELINE"]

#: Display and timing order; marisa first because it is the speed-up baseline.
ORDER = ("marisa", "numpy", "gpu")
#: The speed-up baseline.
BASELINE = "marisa"
#: The backend every other one is compared with for parity (the readable reference), when present.
REFERENCE = "numpy"


def reference_first(names: Iterable[str]) -> list[str]:
    """``names`` with the parity reference (numpy) moved to the front, the rest in their order."""
    names = list(names)
    return sorted(names, key=lambda n: 0 if n == REFERENCE else 1)


@dataclass(frozen=True)
class BackendSpec:
    name: str
    package: str
    cls: str
    needs: str  # "keywords" or "index"
    description: str
    options: tuple[tuple[str, object], ...] = ()  # keyword arguments of the constructor


BACKENDS: dict[str, BackendSpec] = {
    "marisa": BackendSpec("marisa", "flashtrie.reference_cpu", "MarisaSearcher", "keywords",
                          "CPU baseline: marisa-trie BinaryTrie of token prefixes (4-byte big-endian keys) "
                          "+ children table (adaptive intersection)"),
    "marisa-lookup": BackendSpec("marisa-lookup", "flashtrie.reference_cpu", "MarisaSearcher", "keywords",
                                 "CPU baseline, lookups only: one marisa-trie get per (hypothesis, valid proposal), "
                                 "as a trie library without child iteration allows (not run unless named)",
                                 options=(("enum_ratio", 0.0),)),
    "oracle": BackendSpec("oracle", "flashtrie.reference_cpu", "OracleSearcher", "keywords",
                          "brute-force reading of docs/semantics.md over every keyword prefix; small inputs only "
                          "(not run unless named)"),
    "numpy": BackendSpec("numpy", "flashtrie.reference_cpu", "NumpySearcher", "index",
                         "CPU reference: vectorised numpy over the narrow-LOUDS index"),
    "gpu": BackendSpec("gpu", "flashtrie.gpu_impl", "GpuSearcher", "index",
                       "GPU: one-launch CUDA kernels compiled with NVRTC (needs a GPU and cuda-core)"),
}


def find_class(package: str, name: str) -> type:
    """``package.name`` (the backend packages export their searcher classes); raises ImportError."""
    obj = getattr(importlib.import_module(package), name, None)
    if not isinstance(obj, type):
        raise ImportError(f"{package} has no {name} (or it is not a class)")
    return obj


def availability(name: str) -> str | None:
    """None when backend ``name`` can run here, else a one-line reason."""
    spec = BACKENDS.get(name)
    if spec is None:
        return f"unknown backend {name!r}; known: {', '.join(BACKENDS)}"
    if name == "gpu":
        from .env import gpu_info

        try:
            importlib.import_module("cuda.core")
        except Exception as e:  # noqa: BLE001
            return f"cuda-core is not importable ({type(e).__name__}: {e}); install flashtrie[gpu]"
        if not gpu_info():
            return "no NVIDIA GPU visible"
    try:
        find_class(spec.package, spec.cls)
    except Exception as e:  # noqa: BLE001
        return f"{spec.package}.{spec.cls} is not available ({type(e).__name__}: {e})"
    return None


def available(names: Iterable[str] | None = None) -> list[str]:
    """The registered backends (all of `BACKENDS`, or ``names``) that can run here, in registry order."""
    wanted = set(BACKENDS if names is None else names)
    return [n for n in BACKENDS if n in wanted and availability(n) is None]


def available_backends(names: Iterable[str] | None = None) -> tuple[list[str], dict[str, str]]:
    """(available names in display order, {unavailable name: reason})."""
    wanted = list(names) if names is not None else list(ORDER)
    ok: list[str] = []
    missing: dict[str, str] = {}
    for n in sorted(wanted, key=lambda x: ORDER.index(x) if x in ORDER else len(ORDER)):
        why = availability(n)
        if why is None:
            ok.append(n)
        else:
            missing[n] = why
    return ok, missing


def parse_backends(text: str | None) -> list[str] | None:
    """``"marisa,numpy"`` → ["marisa", "numpy"]; None or "all" → None (every available backend)."""
    from flashtrie.errors import InputError

    if text is None or text.strip().lower() == "all":
        return None
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise InputError(f"--backends: expected a comma-separated list of {', '.join(BACKENDS)} (or 'all'), "
                         f"got {text!r}")
    for n in names:
        if n not in BACKENDS:
            raise InputError(f"--backends: unknown backend {n!r}; expected a comma-separated list of "
                             f"{', '.join(BACKENDS)} (or 'all')")
    return names


def setup_text(name: str) -> str:
    """What constructing backend ``name`` does, for progress lines (marisa builds its trie: seconds per
    million keywords)."""
    if BACKENDS[name].cls == "MarisaSearcher":
        return f"building the marisa trie for backend {name}"
    return f"setting up backend {name}"


def make_searchers(names: Iterable[str], keywords: KeywordSet | None, index: NarrowLoudsIndex | None,
                   progress: Callable[[str], None] | None = None) -> tuple[dict[str, Searcher], dict[str, str]]:
    """Construct each named searcher: ({name: searcher}, {name: error}).  Construction errors are kept."""
    made: dict[str, Searcher] = {}
    failed: dict[str, str] = {}
    for n in names:
        spec = BACKENDS[n]
        if progress is not None:
            progress(n)
        try:
            cls = find_class(spec.package, spec.cls)
            if spec.needs == "keywords":
                if keywords is None:
                    raise ValueError(f"backend {n} needs the keywords (pass --keywords)")
                made[n] = cls(keywords, **dict(spec.options))
            else:
                made[n] = cls(index, **dict(spec.options))
        except Exception as e:  # noqa: BLE001 - reported by the caller
            failed[n] = f"{type(e).__name__}: {e}"
    return made, failed


def close_searchers(searchers: dict[str, Searcher]) -> None:
    """Release worker pools / device memory of searchers that hold any."""
    for s in searchers.values():
        close = getattr(s, "close", None)
        if callable(close):
            try:
                close()
            except Exception:  # noqa: BLE001
                pass
