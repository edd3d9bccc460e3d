"""Small file helpers: atomic writes, output paths."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from .errors import InputError

__all__ = ["atomic_write", "atomic_write_with", "check_output_file"]


def check_output_file(path: str | os.PathLike[str], arg: str,
                      inputs: tuple[str | os.PathLike[str] | None, ...] = ()) -> Path:
    """Check, before any work, that a file can be written at ``path`` (named ``arg`` in errors).

    Creates missing parent folders.  Refuses a folder, something that is not a regular file (a device,
    a pipe), a parent that cannot be created or written, and a path that is one of ``inputs``.
    """
    target = Path(path)
    if target.is_dir():
        raise InputError(f"{arg}: {path} is a folder; give a file name inside it, such as {target / 'out'}")
    if target.exists() and not target.resolve().is_file():
        raise InputError(f"{arg}: {path} exists and is not a regular file; choose another path")
    for src in inputs:
        if src is not None and Path(src).exists() and target.exists() and os.path.samefile(src, target):
            raise InputError(f"{arg}: {path} is also the input; write to another file")
    parent = target.resolve().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{arg}: cannot create the folder {parent} for {path}: {e.strerror}") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{arg}: cannot write into the folder {parent}; choose a writable path")
    return target


def _umask() -> int:
    """The process's umask, read without changing it where the OS allows (os.umask is process-wide)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def atomic_write(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder, then rename."""
    atomic_write_with(path, lambda f: f.write(data))


def atomic_write_with(path: str | os.PathLike[str], writer: Callable[[BinaryIO], object]) -> None:
    """Call ``writer(f)`` on a temporary file beside ``path``; fsync and rename it over ``path``.

    A crash leaves either the old file or the new one, never half of one.  A symbolic link at ``path``
    is followed (the file it points to is replaced, the link stays); the new file gets the old file's
    permission bits, or the usual ones for a new file (0666 less the umask), not mkstemp's 0600.
    """
    target = Path(os.path.realpath(path))
    if target.exists() and not target.is_file():
        raise InputError(f"{path}: exists and is not a regular file; refusing to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = target.stat().st_mode & 0o7777 if target.exists() else 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, mode)
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
