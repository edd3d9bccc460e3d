"""Glue between `flashtrie.datasets` and the harness: loading inputs by kind, describing workloads.

`flashtrie.datasets` owns the generators and the file formats; this module only calls them (lazily) and
turns a workload into the few things the harness needs: proposals, ground truth and parameters.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flashtrie.errors import InputError
from flashtrie.keywords import KeywordSet
from flashtrie.limits import PAD_TOKEN
from flashtrie.proposals import Proposals

if TYPE_CHECKING:
    from flashtrie.index import NarrowLoudsIndex

__all__ = ["load_keywords", "describe_keywords", "load_workload", "load_index",
           "workload_params", "relevant_sets", "truncate_proposals", "tile_proposals", "tiled_batch_bytes",
           "sniff_kind", "Loaded", "limit_workload", "generate_workload", "save_workload_file", "duplicate_count"]


# ----------------------------------------------------------------------------------------------- files
def sniff_kind(path: str | os.PathLike[str]) -> str:
    """Guess what a file holds: 'index', 'npz', 'npy', 'jsonl', 'text', 'tsv' or 'unknown' (from its first bytes;
    blank lines before the first record are passed over)."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{p}: is a folder; expected a file")
    if not p.exists():
        raise InputError(f"{p}: no such file")
    if not p.is_file():
        raise InputError(f"{p}: is not a regular file (a device or a pipe); expected a file")
    with p.open("rb") as f:
        head = f.read(4096)
    if head.startswith(b"FLTRIE"):
        return "index"
    if head.startswith(b"PK\x03\x04"):
        return "npz"
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    body = head.lstrip(b" \t\r\n")
    if body.startswith(b"{") and b'"schema"' in body:
        return "jsonl"
    first = body.split(b"\n", 1)[0]
    if b"\t" in first and b"{" in first:
        return "tsv"
    if head and all(c in b"0123456789 \t\r\n" for c in head):
        return "text"
    if b'"indices"' in first or b'"probs"' in first:
        return "tsv"  # a proposal record without its query name: the TSV parser says what is wrong
    return "unknown"


_KIND_WORDS = {"index": "a flashtrie index (from 'flashtrie build')", "npz": "a numpy .npz archive",
               "npy": "a numpy .npy array",
               "jsonl": "benchmark records (JSON Lines)", "text": "a keyword text file",
               "tsv": "a proposal TSV", "unknown": "an unrecognised file"}


def _wrong_kind(path: str | os.PathLike[str], expected: str, found: str) -> InputError:
    return InputError(f"{path}: expected {expected}, found {_KIND_WORDS.get(found, found)}")


def load_keywords(path: str | os.PathLike[str]) -> KeywordSet:
    """Keywords from a text file (one keyword per line), a keyword .npz written by ``flashtrie gen-keywords``, or
    your own arrays (an .npz of ``tokens`` and ``offsets``, or a padded [N, L] array in an .npy / .npz)."""
    kind = sniff_kind(path)
    expected = "a keyword file (one keyword per line of token ids, or a keywords .npz from 'flashtrie gen-keywords')"
    if kind in ("text", "unknown"):  # the text parser names the line and character that are wrong
        return KeywordSet.from_token_file(path)
    if kind == "npz":
        from flashtrie.datasets import load_keywords as load_npz

        return load_npz(path).keywords
    if kind == "npy":
        from flashtrie.datasets.io import load_keyword_array

        return load_keyword_array(path)

    raise _wrong_kind(path, expected, kind)


def describe_keywords(path: str | os.PathLike[str], keywords: KeywordSet) -> dict[str, Any]:
    """Where a loaded library came from, for records: the file, its counts, a CRC-32 of its arrays and, for a
    .npz from ``flashtrie gen-keywords``, the generator parameters (so the library can be made again)."""
    import zlib

    crc = zlib.crc32(keywords.tokens.data.cast("B"))
    crc = zlib.crc32(keywords.offsets.data.cast("B"), crc) & 0xFFFF_FFFF
    out: dict[str, Any] = {"source": str(path), "num_keywords": len(keywords), "num_tokens": int(keywords.tokens.size),
                           "crc32": f"{crc:08x}"}
    if sniff_kind(path) == "npz":
        import json

        with np.load(path, allow_pickle=False) as z:  # reads only the small 'meta' member (none: your own arrays)
            meta = json.loads(str(z["meta"][()])) if "meta" in z.files else {}
        if meta.get("params"):
            out["generator"] = {"command": "flashtrie gen-keywords", **meta["params"]}
    return out


def load_workload(path: str | os.PathLike[str], probabilities: bool = False) -> Any:
    """A query workload (.npz from ``flashtrie gen-queries``) via flashtrie.datasets; a proposal TSV also works.

    ``probabilities``: the TSV's ``"probs"`` are probabilities, converted to log-probabilities (by default
    they must be log-probabilities; see `Proposals.from_tsv`).
    """
    expected = "a query workload (.npz from 'flashtrie gen-queries' or a proposal TSV)"
    kind = sniff_kind(path)
    if kind == "tsv":
        props, names = Proposals.from_tsv(path, probabilities=probabilities)
        return Loaded(proposals=props, relevant=None, params={"source": str(path), "queries": names})
    if kind != "npz":
        raise _wrong_kind(path, expected, kind)
    from flashtrie.datasets import load_workload as load_npz

    return load_npz(path)


def load_index(path: str | os.PathLike[str], verify: bool = True) -> NarrowLoudsIndex:
    """A `NarrowLoudsIndex` from a file written by ``flashtrie build``.

    A file of another known kind (a .npz, keywords, records) is refused by what it is; any other file goes
    to the index loader, whose `IndexFormatError` says what is wrong with it.
    """
    kind = sniff_kind(path)
    if kind not in ("index", "unknown"):
        raise _wrong_kind(path, "a flashtrie index (from 'flashtrie build')", kind)
    from flashtrie.errors import IndexFormatError
    from flashtrie.index import NarrowLoudsIndex

    try:
        return NarrowLoudsIndex.load(path, verify=verify)
    except (RecursionError, OverflowError, ValueError, TypeError, KeyError, IndexError) as e:
        if isinstance(e, InputError):
            raise
        raise IndexFormatError(f"{path}: not a valid flashtrie index ({type(e).__name__}: {e}); build it again "
                               "with 'flashtrie build'") from None


def limit_workload(workload: Any, q: int) -> Loaded:
    """The first ``q`` queries of a workload (proposals and ground truth), with ``limit`` in its parameters."""
    if q < 1:
        raise InputError(f"--limit: expected a positive number of queries, got {q}")
    rel = relevant_sets(workload)
    params = workload_params(workload)
    params["limit"] = q
    return Loaded(proposals=workload.proposals[:q], relevant=rel[:q] if rel is not None else None, params=params)


def generate_workload(keywords: KeywordSet, n: int, k: int, steps: int | None, preset: str, seed: int,
                      device: str = "auto", timings: dict[str, float] | None = None) -> Any:
    """``flashtrie.datasets.generate_queries`` with the command line's arguments (``steps`` None: its default)."""
    from flashtrie.datasets import generate_queries

    extra: dict[str, Any] = {} if steps is None else {"num_steps": steps}
    return generate_queries(keywords, n, proposals_per_step=k, preset=preset, seed=seed, device=device,
                            timings=timings, **extra)


def save_workload_file(workload: Any, path: str | os.PathLike[str]) -> None:
    """A .tsv path gets the public FlashTrie format (proposals only, no ground truth), anything else a .npz."""
    if str(path).endswith(".tsv"):
        workload.proposals.to_tsv(path)
    else:
        from flashtrie.datasets import save_workload

        save_workload(path, workload)


def duplicate_count(keywords: KeywordSet) -> int:
    """Number of keywords that repeat an earlier one (64-bit hashes: collisions are negligible)."""
    from flashtrie.datasets._hashing import full_keyword_hashes

    return len(keywords) - int(np.unique(full_keyword_hashes(keywords)).size)


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
    return Proposals(tok, lps, probabilities=False)  # a part of checked proposals, not a guess to make


#: bytes held per (query, step, proposal) of a tiled batch: the token, the logprob and the searchers' copies
TILED_PROPOSAL_BYTES = 32


def tiled_batch_bytes(batch: int, steps: int, k: int) -> int:
    """Estimated memory of the batches `tile_proposals` makes of ``batch`` queries (checks before work)."""
    return batch * steps * k * TILED_PROPOSAL_BYTES


def tile_proposals(p: Proposals, batch: int, start: int = 0) -> Proposals:
    """A batch of ``batch`` queries taken cyclically from ``p`` starting at query ``start``."""
    idx = (np.arange(batch) + start) % p.num_queries
    return Proposals(p.tokens[idx], p.logprobs[idx], probabilities=False)  # a part of checked proposals
