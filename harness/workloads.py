"""Glue between `flashtrie.datasets` and the harness: loading inputs by kind, describing workloads.

`flashtrie.datasets` owns the generators and the file formats; this module only calls them (lazily) and
turns a workload into the few things the harness needs: proposals, ground truth and parameters.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flashtrie.errors import InputError
from flashtrie.keywords import KeywordSet
from flashtrie.limits import PAD_TOKEN
from flashtrie.proposals import Proposals
from flashtrie.search_types import SearchResult

__all__ = ["load_keywords", "describe_keywords", "load_workload", "load_index", "save_keywords",
           "workload_params", "relevant_sets", "truncate_proposals", "concat_results", "tile_proposals",
           "sniff_kind", "Loaded"]


# ----------------------------------------------------------------------------------------------- files
def sniff_kind(path: str | os.PathLike[str]) -> str:
    """Guess what a file holds: 'index', 'npz', 'jsonl', 'text', 'tsv' or 'unknown' (from its first bytes)."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{p}: is a folder; expected a file")
    if not p.is_file():
        raise InputError(f"{p}: no such file")
    with p.open("rb") as f:
        head = f.read(512)
    if head.startswith(b"FLTRIE"):
        return "index"
    if head.startswith(b"PK\x03\x04"):
        return "npz"
    if head.startswith(b"{") and b'"schema"' in head:
        return "jsonl"
    first = head.split(b"\n", 1)[0]
    if b"\t" in first and b"{" in first:
        return "tsv"
    if head and all(c in b"0123456789 \t\r\n" for c in head):
        return "text"
    return "unknown"


_KIND_WORDS = {"index": "a flashtrie index (from 'flashtrie build')", "npz": "a numpy .npz archive",
               "jsonl": "benchmark records (JSON Lines)", "text": "a keyword text file",
               "tsv": "a proposal TSV", "unknown": "an unrecognised file"}


def _wrong_kind(path: str | os.PathLike[str], expected: str, found: str) -> InputError:
    return InputError(f"{path}: expected {expected}, found {_KIND_WORDS.get(found, found)}")


def load_keywords(path: str | os.PathLike[str]) -> KeywordSet:
    """Keywords from a text file (one keyword per line) or a keyword .npz written by ``flashtrie gen-keywords``."""
    kind = sniff_kind(path)
    expected = "a keyword file (one keyword per line of token ids, or a keywords .npz from 'flashtrie gen-keywords')"
    if kind in ("text", "unknown"):  # the text parser names the line and character that are wrong
        return KeywordSet.from_text(path)
    if kind == "npz":
        from flashtrie.datasets import load_keywords as load_npz

        return load_npz(path).keywords

    raise _wrong_kind(path, expected, kind)


def describe_keywords(path: str | os.PathLike[str], keywords: KeywordSet) -> dict[str, Any]:
    """Where a loaded library came from, for records: the file, its counts, a CRC-32 of its arrays and, for a
    .npz from ``flashtrie gen-keywords``, the generator parameters (so the library can be made again)."""
    import zlib

    crc = zlib.crc32(memoryview(keywords.tokens).cast("B"))
    crc = zlib.crc32(memoryview(keywords.offsets).cast("B"), crc) & 0xFFFF_FFFF
    out: dict[str, Any] = {"source": str(path), "num_keywords": len(keywords), "num_tokens": int(keywords.tokens.size),
                           "crc32": f"{crc:08x}"}
    if sniff_kind(path) == "npz":
        import json

        with np.load(path, allow_pickle=False) as z:  # reads only the small 'meta' member
            meta = json.loads(str(z["meta"][()]))
        if meta.get("params"):
            out["generator"] = {"command": "flashtrie gen-keywords", **meta["params"]}
    return out


def save_keywords(keywords: KeywordSet, path: str | os.PathLike[str], params: Any = None) -> None:
    """Write keywords in the format ``path``'s suffix names: ``.npz`` via flashtrie.datasets, else text."""
    if str(path).endswith(".npz"):
        from flashtrie.datasets import save_keywords as save_npz

        save_npz(path, keywords, params)
    else:
        keywords.to_text(path)


def load_workload(path: str | os.PathLike[str]) -> Any:
    """A query workload (.npz from ``flashtrie gen-queries``) via flashtrie.datasets; a proposal TSV also works."""
    expected = "a query workload (.npz from 'flashtrie gen-queries' or a proposal TSV)"
    kind = sniff_kind(path)
    if kind == "tsv":
        props, names = Proposals.from_tsv(path)
        return Loaded(proposals=props, relevant=None, params={"source": str(path), "queries": names})
    if kind != "npz":
        raise _wrong_kind(path, expected, kind)
    from flashtrie.datasets import load_workload as load_npz

    return load_npz(path)



def load_index(path: str | os.PathLike[str]) -> Any:
    """A `NarrowLoudsIndex` from a file written by ``flashtrie build``."""
    kind = sniff_kind(path)
    if kind != "index":
        raise _wrong_kind(path, "a flashtrie index (from 'flashtrie build')", kind)
    from flashtrie.index import NarrowLoudsIndex

    return NarrowLoudsIndex.load(path)


@dataclasses.dataclass
class Loaded:
    """A minimal workload for inputs that carry no ground truth (a proposal TSV)."""

    proposals: Proposals
    relevant: Any
    params: dict[str, Any]


# ------------------------------------------------------------------------------------------- workloads
def _plain(x: Any) -> Any:
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {k: _plain(v) for k, v in dataclasses.asdict(x).items()}
    if hasattr(x, "to_dict"):
        return _plain(x.to_dict())
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return x.tolist() if x.size <= 64 else f"<array {x.shape} {x.dtype}>"
    if isinstance(x, np.generic):
        return x.item()
    return x


def workload_params(workload: Any) -> dict[str, Any]:
    """The workload's generator parameters as a JSON-ready dict, plus its shape (Q, T, K)."""
    params = getattr(workload, "params", None)
    out = _plain(params) if params is not None else {}
    if not isinstance(out, dict):
        out = {"params": out}
    q, t, k = workload.proposals.shape
    out.setdefault("num_queries", q)
    out["shape_QTK"] = [q, t, k]
    return out


def relevant_sets(workload: Any) -> list[np.ndarray] | None:
    """Ground truth: one int64 id array per query (``workload.relevant``), or None for a proposal TSV."""
    rel = workload.relevant
    return None if rel is None else [np.asarray(r, dtype=np.int64) for r in rel]


# ------------------------------------------------------------------------------------------- proposals
def truncate_proposals(p: Proposals, k: int) -> Proposals:
    """Keep the ``k`` highest-logprob proposals per row (ties: smaller token first), padding last.

    This is how the sweeps set K = beam width from a workload generated with a larger K.
    """
    q_n, t_n, k_n = p.shape
    if k >= k_n:
        return p
    lp = np.where(p.tokens == PAD_TOKEN, -np.inf, p.logprobs).astype(np.float32)
    pad_last = (p.tokens == PAD_TOKEN).astype(np.int8)
    order = np.lexsort((p.tokens, -lp.astype(np.float64), pad_last), axis=-1)[..., :k]
    tok = np.take_along_axis(p.tokens, order, axis=-1)
    lps = np.take_along_axis(p.logprobs, order, axis=-1)
    return Proposals(tok, lps)


def tile_proposals(p: Proposals, batch: int, start: int = 0) -> Proposals:
    """A batch of ``batch`` queries taken cyclically from ``p`` starting at query ``start``."""
    idx = (np.arange(batch) + start) % p.num_queries
    return Proposals(p.tokens[idx], p.logprobs[idx])


def concat_results(parts: Sequence[SearchResult]) -> SearchResult:
    """Deprecated: `SearchResult.concat` (kept for the callers not yet moved)."""
    return SearchResult.concat(parts)
