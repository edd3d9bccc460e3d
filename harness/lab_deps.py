"""The lab's own dependencies (the ``lab`` extra: scipy, matplotlib, tqdm), which the library never imports.

The lab's modules import them through `lab_module`, so a base install that reaches the lab is told, before
any work, which extra to install instead of getting a bare ImportError."""

from __future__ import annotations

import importlib
from types import ModuleType

from flashtrie.errors import MissingDependency

__all__ = ["LAB_MODULES", "lab_module", "require_lab"]

#: the top-level modules of the ``lab`` extra (pyproject.toml)
LAB_MODULES = ("scipy", "matplotlib", "tqdm")

_HINT = "pip install 'flashtrie[lab]'"


def lab_module(name: str) -> ModuleType:
    """``importlib.import_module(name)`` for a module of the lab extra, refused with `MissingDependency`."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise MissingDependency(f"the benchmark suites and reports need {name.split('.')[0]}, a dependency of the "
                                f"lab: {_HINT} ({e})") from e


def require_lab() -> None:
    """Refuse with `MissingDependency` unless every module of the lab extra imports."""
    for name in LAB_MODULES:
        lab_module(name)
