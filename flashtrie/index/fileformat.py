"""The index file: magic, format version, a JSON table of named arrays with chunked CRC-32s, aligned data.

Layout: ``MAGIC`` (8 bytes) | version u32 | header CRC-32 u32 | header length u64 | header JSON |
zero padding to 64 bytes | arrays, each at a 64-byte aligned offset and zero-padded to 64 bytes.
Each array has one CRC-32 per `CHUNK_BYTES` of its bytes, so a load verifies them on threads.
Written to a temporary file and renamed; read memory-mapped (or copied), with every length, offset and
type checked before any array byte is read, and checksums verified on request (`IndexFile.verify`).
"""

from __future__ import annotations

import json
import math
import os
import stat
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ..cpus import in_parallel, usable_cpus
from ..errors import IndexFormatError, InputError
from ..io_util import atomic_write_with

__all__ = ["FORMAT_VERSION", "IndexFile", "read_index_file", "write_index_file", "CHUNK_BYTES"]

MAGIC = b"FLTRIE\x00\x01"
FORMAT_VERSION = 3
#: Older versions: refused with a message that says how to rebuild (3 drops the stored node flags)
OLD_VERSIONS = (1, 2)
FORMAT_NAME = "flashtrie.narrow-louds"
CHECKSUM = "crc32"
CHUNK_BYTES = 8 << 20  # one CRC-32 per 8 MiB of an array
MAX_HEADER_BYTES = 16 << 20
_PREFIX = struct.Struct("<8sIIQ")
_ALIGN = 64
_TOP_KEYS = {"format", "version", "meta", "arrays", "checksum"}
_ENTRY_KEYS = {"name", "dtype", "shape", "offset", "nbytes", "crc32s"}
_REBUILD = "rebuild it with `flashtrie build KEYWORDS -o FILE`"


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _chunks(buf: memoryview, chunk: int) -> list[memoryview]:
    return [buf[i : i + chunk] for i in range(0, len(buf), chunk)]


def _crc32(p: memoryview) -> int:
    return zlib.crc32(p) & 0xFFFF_FFFF


def _crc32s(parts: list[memoryview], workers: int) -> list[int]:
    """CRC-32 of each buffer, on up to ``workers`` threads (zlib releases the GIL on large buffers)."""
    return in_parallel([partial(_crc32, p) for p in parts], workers)


def _bytes_of(a: np.ndarray) -> memoryview:
    return np.ascontiguousarray(a).data.cast("B")


def write_index_file(path: str | os.PathLike[str], arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    """Write ``arrays`` (1-D) and ``meta`` (JSON values) to ``path`` atomically."""
    workers = usable_cpus()
    table, offset = [], 0
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        if a.ndim != 1:
            raise TypeError(f"array {name}: expected a 1-D array, got shape {a.shape}")
        table.append({"name": name, "dtype": a.dtype.name, "shape": [int(a.size)], "offset": offset,
                      "nbytes": int(a.nbytes), "crc32s": _crc32s(_chunks(_bytes_of(a), CHUNK_BYTES), workers)})
        offset += _aligned(a.nbytes)
    doc = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "meta": meta, "arrays": table,
           "checksum": {"algorithm": CHECKSUM, "chunk_bytes": CHUNK_BYTES}}
    header = json.dumps(doc, sort_keys=True, allow_nan=False).encode()
    head_len = _PREFIX.size + len(header)

    def write(f) -> None:
        f.write(_PREFIX.pack(MAGIC, FORMAT_VERSION, zlib.crc32(header) & 0xFFFF_FFFF, len(header)))
        f.write(header)
        f.write(b"\0" * (_aligned(head_len) - head_len))
        for a in arrays.values():
            data = _bytes_of(a)
            f.write(data)
            f.write(b"\0" * (_aligned(len(data)) - len(data)))

    atomic_write_with(path, write)


@dataclass
class IndexFile:
    """An opened index file: its arrays (views of the mapping, or of one in-memory copy) and metadata."""

    path: Path
    arrays: dict[str, np.ndarray]
    meta: dict[str, Any]
    table: list[dict[str, Any]] = field(repr=False)
    data: np.ndarray = field(repr=False)  # uint8 view of the array area (padding included)
    chunk_bytes: int = CHUNK_BYTES

    def verify(self, workers: int | None = None) -> None:
        """Check every array's CRC-32s (on threads) and that the alignment padding is zero."""
        tasks, verdict = self.checksum_work()
        verdict(in_parallel(tasks, workers or usable_cpus()))

    def checksum_work(self) -> tuple[list[Callable[[], int]], Callable[[list[int]], None]]:
        """`verify` as independent tasks (one CRC-32 of a chunk each, to queue with other work) and the verdict
        on their results, which raises `IndexFormatError` for the first mismatch or non-zero padding."""
        jobs: list[tuple[str, int, memoryview, int]] = []
        for e in self.table:
            raw = self.data[e["offset"] : e["offset"] + e["nbytes"]].data
            for k, part in enumerate(_chunks(raw, self.chunk_bytes)):
                jobs.append((e["name"], k, part, e["crc32s"][k]))

        def verdict(got: list[int]) -> None:
            for (name, k, _, want), crc in zip(jobs, got, strict=True):
                if crc != want:
                    raise IndexFormatError(f"{self.path}: array {name} is corrupt (checksum mismatch in bytes "
                                           f"from {k * self.chunk_bytes:,}); {_REBUILD}")
            for e in self.table:
                pad = self.data[e["offset"] + e["nbytes"] : e["offset"] + _aligned(e["nbytes"])]
                if pad.any():
                    raise IndexFormatError(f"{self.path}: corrupt padding after array {e['name']}; {_REBUILD}")

        return [partial(_crc32, j[2]) for j in jobs], verdict


def _open_checked(p: Path) -> int:
    """An fd of ``p`` opened for reading, refusing what is not a regular file with a precise message."""
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise IndexFormatError(f"{p}: no such index file") from None
    except IsADirectoryError:
        raise IndexFormatError(f"{p}: is a directory, not an index file") from None
    except PermissionError:
        raise IndexFormatError(f"{p}: cannot read the index file (permission denied)") from None
    except OSError as e:
        raise IndexFormatError(f"{p}: cannot open the index file ({e.strerror})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        what = "is a directory" if stat.S_ISDIR(mode) else "is not a regular file (a device, pipe or socket)"
        raise IndexFormatError(f"{p}: {what}, not an index file")
    return fd


class _Bad(ValueError):
    pass


def _parse_json(header: bytes) -> Any:
    """The header's JSON, refusing duplicate keys, NaN / Infinity, huge numbers and deep nesting."""
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in items:
            if k in out:
                raise _Bad(f"duplicate key {k!r}")
            out[k] = v
        return out

    def const(name: str) -> Any:
        raise _Bad(f"{name} is not allowed")

    def pint(s: str) -> int:
        if len(s) > 20 or not -(2**63) <= int(s) < 2**63:
            raise _Bad(f"integer {s[:30]} is out of range")
        return int(s)

    def pfloat(s: str) -> float:
        v = float(s)
        if not math.isfinite(v):
            raise _Bad(f"number {s[:30]} is out of range")
        return v

    try:
        return json.loads(header, object_pairs_hook=pairs, parse_constant=const, parse_int=pint, parse_float=pfloat)
    except RecursionError:
        raise _Bad("nested too deeply") from None


def _read_prefix(p: Path, fd: int, size: int) -> bytes:
    """The header bytes, after the magic, version, length and header-checksum checks."""
    if size < _PREFIX.size:
        raise IndexFormatError(f"{p}: not a flashtrie index (file of {size} bytes is too short); {_REBUILD}")
    magic, version, head_crc, head_len = _PREFIX.unpack(os.pread(fd, _PREFIX.size, 0))
    if magic[:6] != MAGIC[:6]:
        what = "a numpy .npz archive" if magic.startswith(b"PK\x03\x04") else f"bad magic {magic!r}"
        raise IndexFormatError(f"{p}: not a flashtrie index ({what}); build one with `flashtrie build`")
    if version > FORMAT_VERSION:
        raise IndexFormatError(f"{p}: index format version {version} is newer than this flashtrie reads "
                               f"({FORMAT_VERSION}); upgrade flashtrie or rebuild the index")
    if version in OLD_VERSIONS and magic == MAGIC:
        raise IndexFormatError(f"{p}: index format version {version} is no longer read (this flashtrie reads "
                               f"version {FORMAT_VERSION}); {_REBUILD}")
    if version != FORMAT_VERSION or magic != MAGIC:
        raise IndexFormatError(f"{p}: unsupported index format version {version}; {_REBUILD}")
    if head_len > MAX_HEADER_BYTES:
        raise IndexFormatError(f"{p}: corrupt header (length {head_len:,} is over the limit {MAX_HEADER_BYTES:,}); "
                               f"{_REBUILD}")
    if _PREFIX.size + head_len > size:
        raise IndexFormatError(f"{p}: truncated (header of {head_len} bytes does not fit in {size} bytes); {_REBUILD}")
    header = os.pread(fd, head_len, _PREFIX.size)
    if len(header) != head_len:
        raise IndexFormatError(f"{p}: truncated while reading the header; {_REBUILD}")
    if zlib.crc32(header) & 0xFFFF_FFFF != head_crc:
        raise IndexFormatError(f"{p}: corrupt header (checksum mismatch); {_REBUILD}")
    return header


def _nonneg(v: Any, limit: int = 2**62) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < limit


def _check_table(p: Path, doc: Any, expected: dict[str, str], optional: dict[str, str]
                 ) -> tuple[list[dict[str, Any]], int]:
    """The array table (checked entry by entry against the ``expected`` and ``optional`` names and dtypes) and
    the chunk size; every expected array must be there, the optional ones may be."""
    known = {**expected, **optional}
    def bad(what: str) -> IndexFormatError:
        return IndexFormatError(f"{p}: corrupt header ({what}); {_REBUILD}")

    if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME:
        fmt = doc.get("format") if isinstance(doc, dict) else None
        raise IndexFormatError(f"{p}: not a narrow-LOUDS index (format {str(fmt)[:80]!r})")
    if set(doc) != _TOP_KEYS:
        raise bad(f"fields {sorted(doc)[:10]}, expected {sorted(_TOP_KEYS)}")
    if doc["version"] != FORMAT_VERSION or type(doc["version"]) is not int:
        raise bad(f"version {str(doc['version'])[:40]}")
    ck, table = doc["checksum"], doc["arrays"]
    if not isinstance(ck, dict) or set(ck) != {"algorithm", "chunk_bytes"} or ck["algorithm"] != CHECKSUM \
            or not _nonneg(ck["chunk_bytes"], 2**31) or ck["chunk_bytes"] < 4096:
        raise bad(f"checksum {str(ck)[:80]}")
    if not isinstance(doc["meta"], dict) or not isinstance(table, list):
        raise bad("no metadata or no array table")
    chunk, offset, seen = ck["chunk_bytes"], 0, set()
    for e in table:
        if not isinstance(e, dict) or set(e) != _ENTRY_KEYS or not isinstance(e["name"], str):
            raise bad(f"bad array entry {str(e)[:200]}")
        name = e["name"]
        if name in seen:
            raise bad(f"array {name[:60]!r} appears twice")
        if name not in known:
            raise bad(f"unknown array {name[:60]!r}")
        seen.add(name)
        shape, nbytes = e["shape"], e["nbytes"]
        crcs = e["crc32s"]
        if e["dtype"] != known[name]:
            raise bad(f"array {name}: dtype {str(e['dtype'])[:20]}, expected {known[name]}")
        if not (isinstance(shape, list) and len(shape) == 1 and _nonneg(shape[0])):
            raise bad(f"bad array entry {name}: shape {str(shape)[:80]} is not one count")
        if not _nonneg(nbytes) or shape[0] * np.dtype(known[name]).itemsize != nbytes:
            raise bad(f"array {name}: shape {shape} does not match {str(nbytes)[:30]} bytes")
        if e["offset"] != offset or type(e["offset"]) is not int:
            raise bad(f"bad array entry {name}: offset {str(e['offset'])[:30]}, expected {offset}")
        if not (isinstance(crcs, list) and len(crcs) == -(-nbytes // chunk)
                and all(_nonneg(c, 2**32) for c in crcs)):
            raise bad(f"bad array entry {name}: checksums")
        offset += _aligned(nbytes)
    missing = sorted(set(expected) - seen)
    if missing:
        raise IndexFormatError(f"{p}: incomplete index: missing arrays {missing}; {_REBUILD}")
    return table, chunk


def read_index_file(path: str | os.PathLike[str], expected: dict[str, str], *, copy: bool = False,
                    optional: dict[str, str] | None = None) -> IndexFile:
    """Open ``path``: check the header and table (``expected``: array name -> dtype name; ``optional``: arrays
    a file may hold) and the file size, then map the arrays (``copy=True``: read them into memory).  Checksums
    are left to `IndexFile.verify`."""
    optional = optional or {}
    if not isinstance(path, str | bytes | os.PathLike):
        raise InputError(f"path: expected the path of an index file (str or os.PathLike), got {type(path).__name__}")
    if os.fspath(path) in ("", b""):
        raise IndexFormatError("empty path: give the path of an index file")
    p = Path(os.fsdecode(path))
    fd = _open_checked(p)
    try:
        size = os.fstat(fd).st_size
        header = _read_prefix(p, fd, size)
        try:
            doc = _parse_json(header)
        except ValueError as e:  # _Bad, JSON syntax, UTF-8
            raise IndexFormatError(f"{p}: corrupt header ({str(e)[:200]}); {_REBUILD}") from None
        table, chunk = _check_table(p, doc, expected, optional)
        data_start = _aligned(_PREFIX.size + len(header))
        end = data_start + (table[-1]["offset"] + _aligned(table[-1]["nbytes"]) if table else 0)
        if end > size:
            raise IndexFormatError(f"{p}: truncated: arrays need {end} bytes, the file has {size}; {_REBUILD}")
        if end < size:
            raise IndexFormatError(f"{p}: {size - end} unexpected bytes after the last array "
                                   f"(a damaged or foreign file); {_REBUILD}")
        if end == data_start:
            data = np.zeros(0, dtype=np.uint8)
        elif copy:
            data = _read_all(fd, data_start, end - data_start)
        else:
            with os.fdopen(os.dup(fd), "rb") as f:  # the mapping keeps its own reference to the file
                data = np.memmap(f, dtype=np.uint8, mode="r", offset=data_start, shape=(end - data_start,))
    finally:
        os.close(fd)
    known = {**expected, **optional}
    arrays = {e["name"]: data[e["offset"] : e["offset"] + e["nbytes"]].view(known[e["name"]]) for e in table}
    return IndexFile(p, arrays, doc["meta"], table, data, chunk)


def _read_all(fd: int, start: int, nbytes: int) -> np.ndarray:
    """``nbytes`` from ``start`` into one read-only array, read in 64 MiB pieces on threads."""
    buf = np.empty(nbytes, dtype=np.uint8)
    view = buf.data
    step = 64 << 20

    def piece(i: int) -> None:
        part = view[i : i + step]
        got = os.preadv(fd, [part], start + i)
        if got != len(part):
            raise IndexFormatError(f"the index file shrank while it was read ({got} of {len(part)} bytes)")

    in_parallel([partial(piece, i) for i in range(0, nbytes, step)], usable_cpus())
    buf.flags.writeable = False
    return buf
