"""Where flashtrie keeps what it makes once and reuses: compiled kernels and prepared data sets.

Two environment variables, one per kind (each older name is still honoured where the new one is unset):

- ``$FLASHTRIE_KERNEL_CACHE`` (older: ``$FLASHTRIE_CACHE``): the cubins NVRTC compiled for this machine's GPU;
  default ``CACHE/kernels``;
- ``$FLASHTRIE_DATA_CACHE`` (older: ``$FLASHTRIE_CACHE_DIR``): the real libraries of `flashtrie.datasets.real`;
  default ``CACHE/real``;

``CACHE`` being ``$XDG_CACHE_HOME/flashtrie``, else ``~/.cache/flashtrie``.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["KERNEL_CACHE_VARS", "DATA_CACHE_VARS", "kernel_cache_dir", "data_cache_dir"]

#: The variables naming the kernel cache, the first set one wins.
KERNEL_CACHE_VARS = ("FLASHTRIE_KERNEL_CACHE", "FLASHTRIE_CACHE")
#: The variables naming the data cache, the first set one wins.
DATA_CACHE_VARS = ("FLASHTRIE_DATA_CACHE", "FLASHTRIE_CACHE_DIR")


def _root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "flashtrie"


def _from(names: tuple[str, ...], default: str) -> Path:
    for name in names:
        if os.environ.get(name):
            return Path(os.environ[name])
    return _root() / default


def kernel_cache_dir() -> Path:
    """The folder of compiled kernels (see the module docstring)."""
    return _from(KERNEL_CACHE_VARS, "kernels")


def data_cache_dir() -> Path:
    """The folder of prepared data sets (see the module docstring)."""
    return _from(DATA_CACHE_VARS, "real")
