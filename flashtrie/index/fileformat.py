"""The index file: magic, format version, a JSON table of named arrays with CRC-32s, aligned array data.

Layout: ``MAGIC`` (8 bytes) | version u32 | header CRC-32 u32 | header length u64 | header JSON |
zero padding to 64 bytes | arrays, each at a 64-byte aligned offset.  Written to a temporary file and
renamed; read memory-mapped, with every length, offset and checksum checked.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import IndexFormatError
from ..io_util import atomic_write_with

MAGIC = b"FLTRIE\x00\x01"
FORMAT_VERSION = 1
FORMAT_NAME = "flashtrie.narrow-louds"
_PREFIX = struct.Struct("<8sIIQ")
_ALIGN = 64
_DTYPES = {"uint8", "uint16", "uint32", "uint64", "int64"}


def _crc(a: np.ndarray) -> int:
    return zlib.crc32(memoryview(np.ascontiguousarray(a)).cast("B")) & 0xFFFF_FFFF


def write_index_file(path: str | os.PathLike[str], arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    table = []
    offset = 0
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        if a.dtype.name not in _DTYPES:
            raise TypeError(f"array {name}: unsupported dtype {a.dtype}")
        table.append({"name": name, "dtype": a.dtype.name, "shape": list(a.shape), "offset": offset,
                      "nbytes": int(a.nbytes), "crc32": _crc(a)})
        offset += -(-a.nbytes // _ALIGN) * _ALIGN
    header = json.dumps({"format": FORMAT_NAME, "version": FORMAT_VERSION, "meta": meta, "arrays": table},
                        sort_keys=True).encode()
    head_len = _PREFIX.size + len(header)
    data_start = -(-head_len // _ALIGN) * _ALIGN

    def write(f) -> None:
        f.write(_PREFIX.pack(MAGIC, FORMAT_VERSION, zlib.crc32(header) & 0xFFFF_FFFF, len(header)))
        f.write(header)
        f.write(b"\0" * (data_start - head_len))
        pos = 0
        for entry, a in zip(table, arrays.values(), strict=False):
            assert pos == entry["offset"]
            f.write(memoryview(np.ascontiguousarray(a)).cast("B"))
            pad = -(-a.nbytes // _ALIGN) * _ALIGN - a.nbytes
            f.write(b"\0" * pad)
            pos += a.nbytes + pad

    atomic_write_with(path, write)


def read_index_file(path: str | os.PathLike[str], verify: bool = True) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Map ``path`` and return its arrays (read-only views of the mapping) and metadata."""
    p = Path(path)
    if not p.is_file():
        raise IndexFormatError(f"{p}: no such index file")
    size = p.stat().st_size
    if size < _PREFIX.size:
        raise IndexFormatError(f"{p}: not a flashtrie index (file of {size} bytes is too short)")
    with open(p, "rb") as f:
        magic, version, head_crc, head_len = _PREFIX.unpack(f.read(_PREFIX.size))
        if magic[:6] != MAGIC[:6]:
            raise IndexFormatError(f"{p}: not a flashtrie index (bad magic {magic!r}); "
                                   "build one with `flashtrie build`")
        if version > FORMAT_VERSION:
            raise IndexFormatError(f"{p}: index format version {version} is newer than this flashtrie reads "
                                   f"({FORMAT_VERSION}); upgrade flashtrie or rebuild the index")
        if version != FORMAT_VERSION or magic != MAGIC:
            raise IndexFormatError(f"{p}: unsupported index format version {version}; rebuild the index")
        if _PREFIX.size + head_len > size:
            raise IndexFormatError(f"{p}: truncated (header of {head_len} bytes does not fit in {size} bytes)")
        header = f.read(head_len)
    if zlib.crc32(header) & 0xFFFF_FFFF != head_crc:
        raise IndexFormatError(f"{p}: corrupt header (checksum mismatch)")
    try:
        doc = json.loads(header)
        table = doc["arrays"]
        meta = doc["meta"]
    except (ValueError, KeyError, TypeError) as e:
        raise IndexFormatError(f"{p}: corrupt header ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME:
        raise IndexFormatError(f"{p}: not a narrow-LOUDS index (format {doc.get('format')!r})")
    if doc.get("version") != FORMAT_VERSION or not isinstance(meta, dict) or not isinstance(table, list):
        raise IndexFormatError(f"{p}: corrupt header (version {doc.get('version')!r}, or no array table)")
    data_start = -(-(_PREFIX.size + head_len) // _ALIGN) * _ALIGN
    offset = 0
    for e in table:  # the arrays follow each other, each padded to the alignment, as written
        if not _valid_entry(e) or e["offset"] != offset:
            raise IndexFormatError(f"{p}: corrupt header (bad array entry {str(e)[:200]})")
        offset += -(-e["nbytes"] // _ALIGN) * _ALIGN
    if data_start + offset > size:
        raise IndexFormatError(f"{p}: truncated: arrays need {data_start + offset} bytes, the file has {size}")
    if data_start + offset < size:
        raise IndexFormatError(f"{p}: {size - data_start - offset} unexpected bytes after the last array "
                               "(a damaged or foreign file)")
    mm = np.memmap(p, dtype=np.uint8, mode="r")  # size >= _PREFIX.size > 0, checked above
    arrays: dict[str, np.ndarray] = {}
    for e in table:
        dt = np.dtype(e["dtype"])
        start = data_start + int(e["offset"])
        count = int(np.prod(e["shape"], dtype=np.int64))
        if count * dt.itemsize != e["nbytes"]:
            raise IndexFormatError(f"{p}: array {e['name']}: shape {e['shape']} does not match {e['nbytes']} bytes")
        a = mm[start : start + e["nbytes"]].view(dt).reshape(e["shape"])
        if verify and _crc(a) != e["crc32"]:
            raise IndexFormatError(f"{p}: array {e['name']} is corrupt (checksum mismatch); rebuild the index")
        arrays[e["name"]] = a
    return arrays, meta


def _valid_entry(e: Any) -> bool:
    """An array-table entry with the right fields and types."""
    def nonneg(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    return (isinstance(e, dict) and isinstance(e.get("name"), str) and e.get("dtype") in _DTYPES
            and isinstance(e.get("shape"), list) and all(nonneg(d) for d in e["shape"])
            and nonneg(e.get("offset")) and nonneg(e.get("nbytes")) and nonneg(e.get("crc32")))
