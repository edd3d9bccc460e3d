"""Small file helpers: atomic writes, output paths."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from .errors import InputError

__all__ = ["atomic_write", "atomic_write_with", "check_output_file", "remove_stale_temporaries", "temp_names"]


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


#: A temporary file of a save older than this is taken for the leftover of a killed save and removed.
STALE_TEMP_SECONDS = 3600
_TEMP_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


#: The longest file name most file systems allow (bytes).
NAME_MAX = 255


def temp_names(target: Path) -> tuple[str, str]:
    """Prefix and suffix of the temporary files of ``target`` (``.NAME.`` and ``.tmp``, mkstemp adding 8
    characters); a name too long for that keeps its first bytes and a hash of the whole name, so a legal
    target name always has a legal temporary name, the same one each time."""
    name, suffix = target.name, ".tmp"
    if len(os.fsencode(f".{name}.XXXXXXXX{suffix}")) <= NAME_MAX:
        return f".{name}.", suffix
    import hashlib

    tag = hashlib.blake2b(os.fsencode(name), digest_size=4).hexdigest()
    head = os.fsencode(name)[: NAME_MAX - len(".~12345678.XXXXXXXX.tmp")].decode("utf-8", "ignore")
    return f".{head}~{tag}.", suffix


def remove_stale_temporaries(target: Path, older_than: float = STALE_TEMP_SECONDS,
                             folders: bool = False) -> list[Path]:
    """Remove the temporary files that killed saves of ``target`` left beside it (``.NAME.XXXXXXXX.tmp``,
    as `tempfile.mkstemp` names them), if older than ``older_than`` seconds; returns what was removed.

    With ``folders``, removes temporary folders of that name (as `tempfile.mkdtemp` makes them) instead.
    Younger ones may belong to a save still running in another process, so they stay.
    """
    prefix, suffix = temp_names(target)
    now = time.time()
    removed: list[Path] = []
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return removed
    for e in entries:
        mid = e.name[len(prefix) : -len(suffix)]
        if not (e.name.startswith(prefix) and e.name.endswith(suffix) and len(mid) == 8 and set(mid) <= _TEMP_CHARS):
            continue
        try:
            kind_ok = e.is_dir(follow_symlinks=False) if folders else e.is_file(follow_symlinks=False)
            if kind_ok and now - e.stat(follow_symlinks=False).st_mtime > older_than:
                if folders:
                    shutil.rmtree(e.path)
                else:
                    os.unlink(e.path)
                removed.append(Path(e.path))
        except OSError:
            pass  # gone already, or not ours to remove
    return removed


def atomic_write_with(path: str | os.PathLike[str], writer: Callable[[BinaryIO], object]) -> None:
    """Call ``writer(f)`` on a temporary file beside ``path``; fsync and rename it over ``path``.

    A crash leaves either the old file or the new one, never half of one.  A symbolic link at ``path``
    is followed (the file it points to is replaced, the link stays); the new file gets the old file's
    permission bits, or the usual ones for a new file (0666 less the umask), not mkstemp's 0600.
    Any failure removes the temporary file.  A killed process cannot: it leaves ``.NAME.XXXXXXXX.tmp``
    beside the target, which the next save of the same target removes once it is an hour old.
    """
    if str(path) == "":
        raise InputError("empty path: give the name of the file to write")
    target = Path(os.path.realpath(path))
    if target.is_dir():
        raise InputError(f"{path}: is a directory; give a file name inside it, such as {Path(path) / 'out'}")
    if target.exists() and not target.is_file():
        raise InputError(f"{path}: exists and is not a regular file; refusing to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(target)
    mode = target.stat().st_mode & 0o7777 if target.exists() else 0o666 & ~_umask()
    prefix, suffix = temp_names(target)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
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
