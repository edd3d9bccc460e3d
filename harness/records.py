"""Benchmark records: one JSON object per line, one line per (kind, backend, workload, config).

A record carries its status (``ok`` / ``mismatch`` / ``error`` with a message), the measured numbers,
the speed-up against the marisa-trie baseline measured in the same run, workload statistics (fraction of
valid proposals, mean beam fill per step), the dataset parameters, the environment snapshot and the
command line.  Reports are drawn from these files only.  JSON has no infinities, so a non-finite number
(a ``-inf`` threshold) is stored as the string ``"-inf"`` (``"inf"``, ``"nan"``) and read back as the
float in the workload, config, metrics and workload statistics.

Writing appends whole lines with a single ``write`` on a file opened for appending (and under an
advisory lock), starting on a fresh line, and undoes a short write.  A process killed in the middle of a
large write can still leave a partial line: the next append starts after a newline, so it never joins it,
and reading skips any line that is not JSON with a warning, so no crash makes another record unreadable.
Reading validates every whole line and names the file and line of the first bad record.
"""

from __future__ import annotations

import errno
import json
import math
import os
import uuid
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from flashtrie.errors import InputError

__all__ = ["SCHEMA", "KINDS", "STATUSES", "Record", "append_record", "append_records", "read_records",
           "iter_records", "validate_record", "new_run_id", "DamagedRecordWarning"]

SCHEMA = "flashtrie.record/1"
#: ``quality``: the model study (`flashtrie quality run`); ``synthetic-quality``: Precision@k against beam width on
#: generated workloads with ground truth (`flashtrie bench quality`); ``compile``: a kernel's compile and cached
#: load (`flashtrie bench compile`); ``launch``: host microseconds of a fused step's parts (`flashtrie bench launch`);
#: ``query-pass``: the query generator's library pass, CPU and GPU (`flashtrie bench query-passes`); ``numpy-lazy``:
#: the lazy numpy reference at scale (`flashtrie bench numpylazy`); ``gpu-build``: the GPU builder's stages, memory,
#: CPU == GPU and copy bandwidths (`flashtrie bench gpubuild`); ``step-probe``: where a fused step's device time goes
#: (`flashtrie bench step-probe`).
KINDS = ("latency", "throughput", "build", "quality", "synthetic-quality", "parity", "search", "serve", "compile",
         "launch", "query-pass", "numpy-lazy", "gpu-build", "step-probe")
STATUSES = ("ok", "mismatch", "error", "skipped")


def new_run_id() -> str:
    """A short id shared by every record of one benchmark run (the speed-up baseline comes from the same run)."""
    return uuid.uuid4().hex[:12]


@dataclass
class Record:
    """One measured case.  ``metrics`` holds the numbers (milliseconds, bytes, q/s, precision ...)."""

    kind: str
    backend: str
    status: str = "ok"
    message: str | None = None
    sweep: str | None = None  # e.g. "beam_width", "library_size", "batch_size"
    workload: dict[str, Any] = field(default_factory=dict)  # name, dataset params, Q, T, K, N
    config: dict[str, Any] = field(default_factory=dict)  # beam_width, max_results, thresholds, batch_size
    metrics: dict[str, Any] = field(default_factory=dict)
    workload_stats: dict[str, Any] = field(default_factory=dict)  # valid_fraction, beam_fill per step
    env: dict[str, Any] = field(default_factory=dict)
    command: list[str] = field(default_factory=list)
    run_id: str = ""
    timestamp: str = ""
    schema: str = SCHEMA

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Record:
        validate_record(d)
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: _restore_non_finite(v) if k in _NUMERIC_FIELDS else v
                      for k, v in _current_kind(d).items() if k in known})


def _current_kind(d: dict[str, Any]) -> dict[str, Any]:
    """``d`` with the kind its writer gives it today.  Records of the synthetic quality sweep written before it had
    a kind of its own say ``quality``; the model study's name a task and a model in their config, those never do."""
    config = d["config"]
    if d["kind"] == "quality" and not ("task" in config and "model" in config):
        return {**d, "kind": "synthetic-quality"}
    return d


_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "schema": str, "kind": str, "backend": str, "status": str, "message": (str, type(None)),
    "sweep": (str, type(None)), "workload": dict, "config": dict, "metrics": dict, "workload_stats": dict,
    "env": dict, "command": list, "run_id": str, "timestamp": str,
}


def validate_record(d: object) -> None:
    """Raise `InputError` unless ``d`` is a well-formed record dictionary."""
    if not isinstance(d, dict):
        raise InputError(f"expected a flashtrie benchmark record (a JSON object), got a JSON {type(d).__name__}")
    if d.get("schema") != SCHEMA:
        raise InputError(f"schema: expected {SCHEMA!r}, got {d.get('schema')!r}; "
                         "expected a flashtrie benchmark record (JSON Lines written by 'flashtrie bench')")
    for name, typ in _FIELD_TYPES.items():
        if name not in d:
            raise InputError(f"missing field {name!r}")
        if not isinstance(d[name], typ):
            raise InputError(f"field {name!r}: expected {typ}, got {type(d[name]).__name__}")
    if d["kind"] not in KINDS:
        raise InputError(f"kind: {d['kind']!r} is not one of {KINDS}")
    if d["status"] not in STATUSES:
        raise InputError(f"status: {d['status']!r} is not one of {STATUSES}")
    if d["status"] in ("mismatch", "error") and not d["message"]:
        raise InputError(f"status {d['status']!r} needs a message")


#: Non-finite floats are stored as these strings (strict JSON has no -inf); `Record.from_dict` turns them back.
_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}
#: The record fields whose values are data (numbers) and may hold a stored non-finite float.
_NUMERIC_FIELDS = ("workload", "config", "metrics", "workload_stats")


def _non_finite_text(v: float) -> str:
    return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")


def _restore_non_finite(x: Any) -> Any:
    """The inverse of the non-finite encoding of `_jsonable`: "inf" / "-inf" / "nan" back to floats."""
    if isinstance(x, dict):
        return {k: _restore_non_finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_restore_non_finite(v) for v in x]
    if isinstance(x, str) and x in _NON_FINITE:
        return _NON_FINITE[x]
    return x


def _jsonable(x: Any) -> Any:
    """Make numpy scalars/arrays and non-finite floats JSON-safe (NaN/inf become "nan" / "inf" / "-inf")."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "tolist") and not isinstance(x, (str, bytes)):
        return _jsonable(x.tolist())
    if isinstance(x, float):
        return x if math.isfinite(x) else _non_finite_text(x)
    if isinstance(x, (str, int, bool)) or x is None:
        return x
    if isinstance(x, Path):
        return str(x)
    return str(x)


def _to_line(rec: Record | dict[str, Any]) -> bytes:
    d = rec.to_dict() if isinstance(rec, Record) else dict(rec)
    d = _jsonable(d)
    validate_record(d)
    return (json.dumps(d, sort_keys=True, allow_nan=False, separators=(",", ":")) + "\n").encode()


def append_records(path: str | os.PathLike[str], records: Iterable[Record | dict[str, Any]]) -> int:
    """Append records to a JSON Lines file; returns the count.

    All the lines go out in one ``os.write`` on a descriptor opened with ``O_APPEND`` (under an advisory
    lock), after a newline when the file does not end with one (a line cut short by a killed writer).  A
    write that fails or comes back short (a full disk) is undone: the file is truncated back to its size
    before the call (a file the call created is removed), so it holds either every new record or none,
    never half a line, and an `OSError` naming the file is raised.
    """
    data = b"".join(_to_line(r) for r in records)
    count = data.count(b"\n")
    if not data:
        return 0
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, created = _open_locked(p)
    try:
        before = os.fstat(fd).st_size
        if before and os.pread(fd, 1, before - 1) != b"\n":  # a line cut short by a killed writer: end it
            data = b"\n" + data
        try:
            written = os.write(fd, data)
            if written != len(data):
                raise OSError(errno.ENOSPC, f"short write ({written} of {len(data)} bytes; is the disk full?); "
                                            "the records were not appended", str(p))
            os.fsync(fd)
        except OSError as e:
            _truncate(fd, before)
            if created and before == 0:  # a file this call made goes again (still under the lock)
                _unlink(p)
            if e.filename is None:
                e.filename = str(p)
            raise
    finally:
        os.close(fd)
    return count


def _open_locked(p: Path) -> tuple[int, bool]:
    """Open ``p`` for appending (``O_APPEND``; readable, for its last byte) under an exclusive advisory lock;
    True when this call created it.  A file that a failed append removed while this call waited for the lock
    is opened again."""
    while True:
        try:
            fd, created = os.open(p, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644), True
        except FileExistsError:
            try:
                fd, created = os.open(p, os.O_RDWR | os.O_APPEND), False
            except FileNotFoundError:  # removed meanwhile, or a dangling link (made as before)
                fd, created = os.open(p, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644), False
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)
        except (ImportError, OSError):
            pass
        if os.fstat(fd).st_nlink:
            return fd, created
        os.close(fd)


def _unlink(p: Path) -> None:
    try:
        os.unlink(p)
    except OSError:
        pass


def _truncate(fd: int, size: int) -> None:
    """Put the file back to ``size`` bytes after a failed append (best effort: the error that made it fail
    is what the caller sees)."""
    try:
        os.ftruncate(fd, size)
    except OSError:
        pass


def append_record(path: str | os.PathLike[str], record: Record | dict[str, Any]) -> None:
    """Append one record (see `append_records`)."""
    append_records(path, [record])


class DamagedRecordWarning(UserWarning):
    """A line of a records file is not a whole record (a write cut short); it was skipped."""


def iter_records(path: str | os.PathLike[str]) -> Iterator[Record]:
    """Yield validated records from a JSON Lines file; a bad record raises `InputError` naming file and line.

    A line that is not JSON (an append cut short by a killed process or a full disk) is skipped, wherever it
    is, with one `DamagedRecordWarning` naming the file and the lines, so every whole record stays
    readable.  A file with no JSON line at all is not a records file: an `InputError`.
    """
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such records file (expected a .jsonl file written by 'flashtrie bench')")
    with p.open("rb") as f:
        lines = [(n, raw) for n, raw in enumerate(f, 1) if raw.strip()]
    parsed: list[tuple[int, Any]] = []
    damaged: list[int] = []
    for lineno, raw in lines:
        try:
            parsed.append((lineno, json.loads(raw)))
        except (json.JSONDecodeError, UnicodeDecodeError):
            damaged.append(lineno)
    if damaged and not parsed:
        raise InputError(f"{p}: line {damaged[0]}: not JSON; expected a flashtrie benchmark record "
                         "(JSON Lines written by 'flashtrie bench')")
    if damaged:
        where = ", ".join(map(str, damaged[:10])) + (f" and {len(damaged) - 10} more" if len(damaged) > 10 else "")
        warnings.warn(f"{p}: line{'s' if len(damaged) > 1 else ''} {where}: not a whole record (a write cut "
                      f"short?); skipped, the {len(parsed)} other lines read", DamagedRecordWarning, stacklevel=2)
    for lineno, d in parsed:
        try:
            yield Record.from_dict(d)
        except InputError as e:
            raise InputError(f"{p}: line {lineno}: {e}") from None


def read_records(*paths: str | os.PathLike[str]) -> list[Record]:
    """All records of the given files, in file order."""
    out: list[Record] = []
    for p in paths:
        out.extend(iter_records(p))
    return out
