"""Small file helpers: atomic writes."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def atomic_write(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder, then rename."""
    atomic_write_with(path, lambda f: f.write(data))


def atomic_write_with(path: str | os.PathLike[str], writer: Callable[[BinaryIO], object]) -> None:
    """Call ``writer(f)`` on a temporary file beside ``path``; fsync and rename it over ``path``.

    A crash leaves either the old file or the new one, never half of one.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            writer(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
