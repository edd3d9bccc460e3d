"""Save and load generated keyword libraries and query workloads as ``.npz`` files.

Each file holds its arrays plus a ``meta`` entry: a JSON string with the format tag, the format
version and the generating parameters.  Files are written atomically (temporary name + rename).
Loading a file of another kind, a foreign ``.npz``, a truncated or corrupt file raises `InputError`.
"""

from __future__ import annotations

import json
import os
import zipfile
import zlib
from typing import Any, NamedTuple

import numpy as np

from flashtrie.errors import InputError
from flashtrie.io_util import atomic_write_with
from flashtrie.keywords import KeywordSet
from flashtrie.proposals import Proposals

from .keywords import KeywordParams
from .queries import QueryParams, QueryWorkload

__all__ = ["KEYWORDS_FORMAT", "WORKLOAD_FORMAT", "FORMAT_VERSION", "LoadedKeywords", "OWN_ARRAYS_HELP",
           "save_keywords", "load_keywords", "load_keyword_array", "load_names", "save_workload", "load_workload"]

KEYWORDS_FORMAT = "flashtrie.datasets.keywords"
WORKLOAD_FORMAT = "flashtrie.datasets.workload"
FORMAT_VERSION = 1

_KINDS = {KEYWORDS_FORMAT: "a keyword library", WORKLOAD_FORMAT: "a query workload"}

#: How to write a keyword library from your own arrays (said where a file is not one).
OWN_ARRAYS_HELP = ("np.savez(PATH, tokens=TOKENS, offsets=OFFSETS) (keyword i = tokens[offsets[i]:offsets[i + 1]], "
                   "offsets[0] = 0, every keyword at least one token) or np.save(PATH, PADDED) (an [N, L] integer "
                   "array, each row a keyword's tokens then -1 padding; also accepted as the only array of an .npz)")


class LoadedKeywords(NamedTuple):
    """A keyword library read back: the keywords and the parameters saved with them (None if none)."""

    keywords: KeywordSet
    params: KeywordParams | None


def save_keywords(path: str | os.PathLike[str], keywords: KeywordSet, params: KeywordParams | None = None,
                  *, compress: bool = False) -> None:
    """Write ``keywords`` to ``path`` in the format its suffix names: ``.npz`` (with the parameters that generated
    them, if any), else text (one keyword a line, `KeywordSet.to_token_file`; no parameters)."""
    if not isinstance(keywords, KeywordSet):
        raise InputError(f"keywords: expected a KeywordSet, got {type(keywords).__name__}")
    if not str(path).endswith(".npz"):
        keywords.to_token_file(path)
        return
    meta = {"format": KEYWORDS_FORMAT, "version": FORMAT_VERSION, "num_keywords": len(keywords),
            "params": params.to_dict() if params is not None else None}
    _write(path, compress, meta=_meta_array(meta), tokens=keywords.tokens, offsets=keywords.offsets)


def load_keywords(path: str | os.PathLike[str]) -> LoadedKeywords:
    """Read a file written by `save_keywords`, or an .npz of your own arrays (`OWN_ARRAYS_HELP`: ``tokens`` and
    ``offsets``, or one padded [N, L] array) that has no flashtrie ``meta`` entry."""
    own = _own_arrays(path)
    if own is not None:
        return LoadedKeywords(own, None)
    meta, arrays = _read(path, KEYWORDS_FORMAT, ("tokens", "offsets"))
    try:
        keywords = KeywordSet.from_arrays(arrays["tokens"], arrays["offsets"])
    except InputError as e:
        raise InputError(f"{path}: corrupt keyword library: {e}") from None
    if meta.get("num_keywords", len(keywords)) != len(keywords):
        raise InputError(f"{path}: corrupt keyword library: header says {meta['num_keywords']} keywords, "
                         f"the arrays hold {len(keywords)}")
    p = meta.get("params")
    return LoadedKeywords(keywords, _params(path, KeywordParams, p) if p is not None else None)


def load_keyword_array(path: str | os.PathLike[str]) -> KeywordSet:
    """Keywords from an .npy file: a padded [N, L] integer array (each row a keyword's tokens, then -1)."""
    try:
        a = np.load(path, allow_pickle=False, mmap_mode="r")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OSError, ValueError, EOFError) as e:
        raise InputError(f"{path}: not a readable .npy array ({str(e).splitlines()[0] if str(e) else e}); expected "
                         f"a keyword library written with {OWN_ARRAYS_HELP}") from None
    return _from_padded(path, np.asarray(a), f"{path}: expected a keyword library; found an .npy")


def _from_padded(path: str | os.PathLike[str], a: np.ndarray, found: str) -> KeywordSet:
    if a.ndim != 2:
        raise InputError(f"{found} of one {a.ndim}-D {a.dtype} array {list(a.shape)}, not a padded [N, L] one; "
                         f"write one with {OWN_ARRAYS_HELP}")
    try:
        return KeywordSet.from_padded(a)
    except InputError as e:
        raise InputError(f"{path}: {e}") from None


def _own_arrays(path: str | os.PathLike[str]) -> KeywordSet | None:
    """The keywords of an .npz of the caller's own arrays (no 'meta' entry), or None when it has a 'meta' entry
    (or is not a readable .npz: `_read` says why)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            names = set(z.files)
            if "meta" in names:
                return None
            if {"tokens", "offsets"} <= names:
                tokens, offsets = _member(path, z, "tokens"), _member(path, z, "offsets")
            elif len(names) == 1:
                return _from_padded(path, _member(path, z, next(iter(names))), f"{path}: expected a keyword library; "
                                    "found an .npz without a flashtrie 'meta' entry")
            else:
                raise InputError(f"{path}: expected a keyword library; found an .npz without a flashtrie 'meta' entry "
                                 f"and with arrays {sorted(names)[:8]}; write one with {OWN_ARRAYS_HELP}")
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as e:
        if isinstance(e, InputError):
            raise
        return None
    try:
        return KeywordSet.from_arrays(tokens, offsets)
    except InputError as e:
        raise InputError(f"{path}: its 'tokens' and 'offsets' are not a keyword library: {e}") from None


def load_names(path: str | os.PathLike[str]) -> list[str]:
    """One identifier per line of a UTF-8 text file (a leading byte order mark is not part of the first; the
    line end, ``\n`` or ``\r\n``, is not part of it; blank lines at the end are ignored, other blank lines are
    refused by line number)."""
    try:
        raw = open(path, "rb").read()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    try:
        text = raw.decode("utf-8-sig")  # a BOM (Windows editors write one) is not part of the first name
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise InputError(f"{path}: line {line}: not UTF-8 text ({e.reason}); save the names as UTF-8") from None
    lines = text.split("\n")
    while lines and lines[-1].strip("\r") == "":
        lines.pop()
    names = [s[:-1] if s.endswith("\r") else s for s in lines]
    blank = next((i for i, s in enumerate(names) if s == ""), -1)
    if blank >= 0:
        raise InputError(f"{path}: line {blank + 1}: empty line; give one identifier per line")
    return names


def save_workload(path: str | os.PathLike[str], workload: QueryWorkload, *, compress: bool = False) -> None:
    """Write a query workload (proposals, relevant ids, topics, parameters) to ``path`` (.npz)."""
    if not isinstance(workload, QueryWorkload):
        raise InputError(f"workload: expected a QueryWorkload, got {type(workload).__name__}")
    rel = workload.relevant
    rel_offsets = np.zeros(len(rel) + 1, dtype=np.int64)
    np.cumsum([r.size for r in rel], out=rel_offsets[1:])
    rel_ids = np.concatenate(rel).astype(np.int64) if rel else np.zeros(0, np.int64)
    meta = {"format": WORKLOAD_FORMAT, "version": FORMAT_VERSION, "shape": list(workload.proposals.shape),
            "params": workload.params.to_dict()}
    _write(path, compress, meta=_meta_array(meta), tokens=workload.proposals.tokens,
           logprobs=workload.proposals.logprobs, relevant_ids=rel_ids, relevant_offsets=rel_offsets,
           topics=workload.topics)


def load_workload(path: str | os.PathLike[str]) -> QueryWorkload:
    """Read a file written by `save_workload`."""
    meta, a = _read(path, WORKLOAD_FORMAT, ("tokens", "logprobs", "relevant_ids", "relevant_offsets", "topics"))
    try:
        proposals = Proposals(a["tokens"], a["logprobs"])
    except InputError as e:
        raise InputError(f"{path}: corrupt workload: {e}") from None
    off, ids = a["relevant_offsets"], a["relevant_ids"]
    q_n = proposals.num_queries
    if (off.ndim != 1 or off.size != q_n + 1 or not np.issubdtype(off.dtype, np.integer) or off[0] != 0
            or off[-1] != ids.size or np.any(np.diff(off) < 0) or a["topics"].shape[:1] != (q_n,)):
        raise InputError(f"{path}: corrupt workload: relevant_offsets / topics do not match {q_n} queries")
    if list(meta.get("shape", proposals.shape)) != list(proposals.shape):
        raise InputError(f"{path}: corrupt workload: header shape {meta['shape']} differs from the arrays' "
                         f"{list(proposals.shape)}")
    relevant = [ids[off[i] : off[i + 1]].astype(np.int64) for i in range(q_n)]
    return QueryWorkload(proposals, relevant, _params(path, QueryParams, meta.get("params")), a["topics"])


# ------------------------------------------------------------------------------------------ helpers
def _params(path: str | os.PathLike[str], cls: Any, raw: Any) -> Any:
    """``cls.from_dict(raw)``, with the file named in the error when the stored parameters are bad."""
    try:
        if not isinstance(raw, dict):
            raise InputError(f"expected a dict of parameters, got {type(raw).__name__}")
        return cls.from_dict(raw)
    except (InputError, TypeError, ValueError, KeyError) as e:
        raise InputError(f"{path}: corrupt file: its generator parameters are invalid: {e}") from None


def _member(path: str | os.PathLike[str], z: Any, name: str) -> np.ndarray:
    """Array ``name`` of the open npz ``z``: a stored (uncompressed) member is read in one ``readinto`` from
    its offset in the file (numpy's reader copies in small pieces: 0.2-0.4 GB/s), its CRC-32 checked."""
    info = z.zip.getinfo(f"{name}.npy")
    if info.compress_type != zipfile.ZIP_STORED:
        return z[name]
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        local = f.read(30)
        if len(local) != 30 or local[:4] != b"PK\x03\x04":
            raise zipfile.BadZipFile(f"bad local header of {name}.npy")
        f.seek(info.header_offset + 30 + int.from_bytes(local[26:28], "little")
               + int.from_bytes(local[28:30], "little"))
        start = f.tell()
        version = np.lib.format.read_magic(f)
        if version not in ((1, 0), (2, 0)):
            return z[name]
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read_header(f)
        if dtype.hasobject:
            raise ValueError(f"{name}: object arrays are not allowed")
        head = f.tell() - start
        out = np.empty(shape, dtype=dtype, order="F" if fortran else "C")
        view = out.reshape(-1, order="A").view(np.uint8).data if out.size else memoryview(b"")
        if head + view.nbytes != info.file_size:
            raise ValueError(f"{name}: the zip entry holds {info.file_size} bytes, its array header needs "
                             f"{head + view.nbytes}")
        if f.readinto(view) != view.nbytes:
            raise EOFError(f"{name}: the file ends inside the array")
        f.seek(start)
        crc = zlib.crc32(f.read(head))
    if zlib.crc32(view, crc) != info.CRC:
        raise zipfile.BadZipFile(f"bad CRC-32 for {name}.npy")
    return out


def _meta_array(meta: dict[str, Any]) -> np.ndarray:
    return np.array(json.dumps(meta, sort_keys=True))


def _write(path: str | os.PathLike[str], compress: bool, **arrays: np.ndarray) -> None:
    save = np.savez_compressed if compress else np.savez
    atomic_write_with(path, lambda f: save(f, **arrays))  # type: ignore[arg-type]  # (stubs: allow_pickle)


def _read(path: str | os.PathLike[str], fmt: str, names: tuple[str, ...]) -> tuple[dict[str, Any], dict]:
    """Open ``path``, check the format tag and version, and return the meta dict and the named arrays."""
    want = f"{_KINDS[fmt]} (.npz with format {fmt!r}, version {FORMAT_VERSION})"
    try:
        with np.load(path, allow_pickle=False) as z:
            if "meta" not in z.files:
                raise InputError(f"{path}: expected {want}; found an .npz without a flashtrie 'meta' entry")
            raw = z["meta"]
            try:
                meta = json.loads(str(raw[()]))
            except (json.JSONDecodeError, TypeError, IndexError, ValueError):
                raise InputError(f"{path}: expected {want}; its 'meta' entry is not flashtrie JSON") from None
            if not isinstance(meta, dict) or meta.get("format") != fmt:
                found = meta.get("format") if isinstance(meta, dict) else None
                kind = _KINDS.get(found, f"format {found!r}") if isinstance(found, str) else "no format tag"
                raise InputError(f"{path}: expected {want}; found {kind}")
            if meta.get("version") != FORMAT_VERSION:
                raise InputError(f"{path}: expected {want}; found version {meta.get('version')!r}")
            missing = [n for n in names if n not in z.files]
            if missing:
                raise InputError(f"{path}: expected {want}; the file lacks {', '.join(missing)}")
            arrays = {n: _member(path, z, n) for n in names}
    except InputError:
        raise
    except FileNotFoundError:
        raise InputError(f"{path}: no such file; expected {want}") from None
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, UnicodeDecodeError, NotImplementedError,
            RuntimeError) as e:  # zipfile: unknown compression, 'encrypted' entries
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InputError(f"{path}: expected {want}; the file is not a readable .npz (truncated or corrupt?): "
                         f"{reason}") from None
    return meta, arrays
