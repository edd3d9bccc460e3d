"""The on-disk cache of real libraries: one ``.npz`` per library, named
``NAME-vLOADER-DATAVERSION.npz`` (the loader version and the version of the data and the tokenizer it
was built from), written to a temporary name and renamed.

Folder: the ``cache_dir`` argument, else ``$FLASHTRIE_DATA_CACHE`` (or the older ``$FLASHTRIE_CACHE_DIR``), else
``$XDG_CACHE_HOME/flashtrie/real`` (``~/.cache/flashtrie/real``): `flashtrie.caches`.  Where the data package is
not installed (a machine that only has a copied cache folder), the one cached file of that library and loader
version is used.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from flashtrie.errors import InputError
from flashtrie.io_util import atomic_write_with

from .library import RealLibrary

__all__ = ["LOADER_VERSION", "default_cache_dir", "cache_file", "cached_library", "SourceMissing"]

#: Bump when a loader's output changes for the same data (identifier rule, queries, tokenization).
LOADER_VERSION = 1


class SourceMissing(InputError):
    """The data package (or the tokenizer's file) a loader reads is not installed here."""


def default_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cache folder (see the module docstring)."""
    from flashtrie.caches import data_cache_dir

    return Path(cache_dir) if cache_dir is not None else data_cache_dir()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", text)


def cache_file(folder: Path, name: str, data_version: str) -> Path:
    return folder / f"{name}-v{LOADER_VERSION}-{_slug(data_version)}.npz"


def _only_cached(folder: Path, name: str, why: str) -> Path:
    found = sorted(folder.glob(f"{name}-v{LOADER_VERSION}-*.npz"))
    if len(found) != 1:
        what = "no cached copy" if not found else f"{len(found)} cached copies ({', '.join(p.name for p in found)})"
        raise SourceMissing(f"{name}: {why}, and {folder} holds {what} of loader version {LOADER_VERSION}; "
                            "install the data package or copy exactly one cache file there")
    return found[0]


def cached_library(name: str, cache_dir: str | os.PathLike[str] | None, version: Callable[[], str],
                   build: Callable[[], RealLibrary], refresh: bool = False) -> RealLibrary:
    """The library ``name`` from the cache, or built by ``build()`` and cached.

    ``version()`` names the data and tokenizer (raises `SourceMissing` where they are not installed:
    then the single cached file of this loader version is read)."""
    folder = default_cache_dir(cache_dir)
    try:
        path = cache_file(folder, name, version())
    except SourceMissing as e:
        return RealLibrary.load(_only_cached(folder, name, str(e)))
    if path.is_file() and not refresh:
        return RealLibrary.load(path)
    lib = build()
    atomic_write_with(path, lib.save)
    return lib
