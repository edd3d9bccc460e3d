"""Consistency checks of a loaded index: metadata schema, cheap layout checks, full content checks.

`meta_problem` and `layout_problem` read only the metadata, the array shapes and a few words of each
array (last rank entries, padding words, the decoded links); they run before any checksum, so a crafted
file that declares huge arrays is refused before its data is read.  The pieces of the full checks
(``verify=True``: every rank directory and select0 hint) are here;
`verify_run.content_problem` schedules them with the LOUDS pass, the child checks (`structure`) and the
checksums.  Each returns what is wrong, or None.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import arrays
from ..cpus import in_parallel, usable_cpus
from ..errors import DeviceError, InputError
from ..limits import MAX_KEYWORDS, MAX_TOKEN
from .bits import ABS_BITS, BLOCK_BITS, BLOCK_WORDS, HINT_STEP, BitVector, num_words, rank_entries
from .fingerprint import FINGERPRINT_KEY, is_fingerprint
from .louds_pass import level_starts, tail_lengths
from .packed import PackedInts
from .structure import root_problem

if TYPE_CHECKING:
    from .narrow_louds import NarrowLoudsIndex

BITVECTORS = ("louds", "hi_flag", "linked", "terminal")
PACKED = ("labels_hi", "link_starts", "suffix", "keyword_ids")
COUNT_FIELDS = ("num_nodes", "num_keywords", "num_unique", "max_keyword_length", "max_token", "max_degree",
                "max_degree_nonroot") + tuple(f"{b}.nbits" for b in BITVECTORS) \
    + tuple(f"{p}.{k}" for p in PACKED for k in ("width", "size"))
ID_ORDERS = ("input", "index")
VERIFY_DEVICES = ("auto", "cpu", "gpu")
_COUNT_LIMIT = 2**48


def field_problem(name: str, stored: Any, says: str) -> str:
    """The message of a metadata field that disagrees with the arrays: the field, its stored value, and
    what the arrays say."""
    return f"metadata {name} = {stored}, but {says}"


def meta_problem(meta: dict[str, Any]) -> str | None:
    """What is wrong with the metadata's fields and types (before anything is built from them)."""
    want = set(COUNT_FIELDS) | {"build_seconds", "id_order"}
    if set(meta) - {FINGERPRINT_KEY} != want:  # the fingerprint is optional (files written before it)
        missing, extra = sorted(want - set(meta)), sorted(set(meta) - want - {FINGERPRINT_KEY})
        return f"metadata fields: missing {missing[:8]}, unknown {[str(k)[:40] for k in extra[:8]]}"
    for k in COUNT_FIELDS:
        v = meta[k]
        if not (type(v) is int and 0 <= v < _COUNT_LIMIT):
            return f"metadata {k} = {str(v)[:40]} is not a count in [0, 2**48)"
    if meta["id_order"] not in ID_ORDERS:
        return f"metadata id_order = {str(meta['id_order'])[:40]!r}, expected one of {ID_ORDERS}"
    if FINGERPRINT_KEY in meta and not is_fingerprint(meta[FINGERPRINT_KEY]):
        return f"metadata {FINGERPRINT_KEY} = {str(meta[FINGERPRINT_KEY])[:60]!r} is not a keyword-set fingerprint"
    b = meta["build_seconds"]
    if b is not None and not (type(b) in (int, float) and 0 <= b < 1e9):
        return f"metadata build_seconds = {str(b)[:40]} is not a duration"
    return None


def _bitvector_sizes(ix: NarrowLoudsIndex) -> str | None:
    n = ix.num_nodes
    for name, nbits in {"louds": 2 * n - 1, "hi_flag": n, "linked": n, "terminal": n}.items():
        bv: BitVector = getattr(ix, name)
        nwords = num_words(nbits)
        if bv.nbits != nbits:
            return field_problem(f"{name}.nbits", bv.nbits, f"{nbits} bits belong to "
                                 f"{n} nodes (num_nodes; labels_lo has {ix.labels_lo.size} entries)")
        if bv.words.shape != (nwords,) or bv.rank.shape != (nwords // BLOCK_WORDS + 1,):
            return f"bit vector {name}: {bv.nbits} bits in {bv.words.size} words, expected {nbits} in {nwords}"
        if not bv.padding_is_clear():
            return f"bit vector {name}: bits set past its end"
    hints = ix.louds.select0_hints
    if hints is None or hints.shape != (-(-ix.louds.num_zeros // HINT_STEP) + 1,):
        return "bit vector louds: select0 hints of the wrong size"
    if ix.louds.num_ones != n - 1 or ix.louds.num_zeros != n:
        return f"LOUDS has {ix.louds.num_ones} child bits for {n} nodes"
    if int(hints.max()) >= ix.louds.rank.size - 1 or bool(np.any(np.diff(hints.astype(np.int64)) < 0)):
        return "bit vector louds: select0 hints out of range"
    return None


def _packed_sizes(ix: NarrowLoudsIndex) -> str | None:
    want_size = {"labels_hi": ix.hi_flag.num_ones, "link_starts": ix.linked.num_ones + 1}
    for name in PACKED:
        pk: PackedInts = getattr(ix, name)
        if not 0 <= pk.width <= 32 or pk.words.shape != (PackedInts.num_words(pk.size, pk.width),):
            return (f"metadata {name}.width = {pk.width} and {name}.size = {pk.size}, but {name}.words holds "
                    f"{pk.words.size} words")
        if (pk.size == 0) != (pk.width == 0) and name in ("labels_hi", "keyword_ids"):
            return field_problem(f"{name}.width", pk.width, f"{name} holds {pk.size} values")
        if name in want_size and pk.size != want_size[name]:
            return field_problem(f"{name}.size", pk.size, f"the bits give {want_size[name]} values")
        if not pk.padding_is_clear():
            return field_problem(f"{name}.size", pk.size, f"{name}.words has bits set past {pk.size} values of "
                                 f"{pk.width} bits")
    kid = ix.keyword_ids
    if ix.id_order == "index" and kid.size:
        return field_problem("id_order", "'index'", "the file has an id map (index-order ids are the ranks)")
    if kid.size not in (0, ix.terminal.num_ones):
        return field_problem("keyword_ids.size", kid.size, f"the terminal bits hold {ix.terminal.num_ones} "
                             "keyword ends (one id each, or no map)")
    if kid.width > max(1, (ix.num_keywords - 1).bit_length()):
        return (f"metadata keyword_ids.width = {kid.width} and num_keywords = {ix.num_keywords} disagree: ids "
                f"below {ix.num_keywords} need at most {max(1, (ix.num_keywords - 1).bit_length())} bits")
    return None


def _counts(ix: NarrowLoudsIndex) -> str | None:
    n = ix.num_nodes
    if ix.labels_lo.shape != (n,):
        return field_problem("num_nodes", n, f"labels_lo has {ix.labels_lo.size} entries (one per node)")
    if n < 2:
        return field_problem("num_nodes", n, "a trie of one keyword or more has at least 2 nodes")
    if ix.num_unique < 1:
        return field_problem("num_unique", ix.num_unique, "an index holds at least one keyword")
    if ix.num_keywords > MAX_KEYWORDS:
        return field_problem("num_keywords", ix.num_keywords, f"an index holds at most {MAX_KEYWORDS} keywords "
                             "(ids are stored in at most 32 bits)")
    if ix.num_keywords < ix.num_unique:
        return field_problem("num_keywords", ix.num_keywords, f"it counts at least the num_unique = "
                             f"{ix.num_unique} distinct keywords")
    if ix.max_keyword_length < 1:
        return field_problem("max_keyword_length", ix.max_keyword_length, "every keyword has a token")
    return None


@dataclass(frozen=True)
class Layout:
    """What the cheap checks decoded, for `content_problem`: the tail lengths and the level boundaries."""

    tails: np.ndarray
    levels: list[int]


def _bounds(ix: NarrowLoudsIndex, tails: tuple[np.ndarray, int, int, int, int], levels: list[int]) -> str | None:
    """Degrees, token and length bounds that the cheap reads allow (exact values need `content_problem`)."""
    n, m = ix.num_nodes, ix.meta
    problem = root_problem(ix)
    if problem:
        return problem
    root = int(ix.louds.select0(np.array([0]))[0])  # ones before the first zero: the root's degree
    md, mdn = m["max_degree"], m["max_degree_nonroot"]
    if root < 1:
        return f"the root has {root} children"
    if md != max(root, mdn):
        return field_problem("max_degree", md, f"the root has {root} children and max_degree_nonroot is {mdn}")
    if mdn > n - 1 - root:
        return field_problem("max_degree_nonroot", mdn, f"{n} nodes leave at most {n - 1 - root} children "
                             "below the root's")
    mt = ix.max_token
    if mt > MAX_TOKEN:
        return field_problem("max_token", mt, f"a token is at most {MAX_TOKEN}")
    if ix.suffix.width != max(1, mt.bit_length()):
        return field_problem("suffix.width", ix.suffix.width, f"max_token = {mt} needs "
                             f"{max(1, mt.bit_length())} bits")
    if ix.labels_hi.width > max(0, mt.bit_length() - 16):
        return field_problem("labels_hi.width", ix.labels_hi.width, f"max_token = {mt} leaves at most "
                             f"{max(0, mt.bit_length() - 16)} bits above the low 16")
    if ix.terminal.num_ones != ix.num_unique:
        return field_problem("num_unique", ix.num_unique, f"the terminal bits hold {ix.terminal.num_ones} "
                             "keyword ends")
    if ix.labels_hi.width > 16:
        return f"labels_hi is {ix.labels_hi.width} bits wide (at most 16)"
    linked = ix.link_starts.size - 1
    if tails[3] != 0 or tails[4] != ix.suffix.size or (linked > 0 and tails[1] < 1):
        return (f"link_starts do not cover the suffix store (first {tails[3]}, last {tails[4]}, "
                f"suffix.size = {ix.suffix.size})")
    if ix.link_starts.width != ix.suffix.size.bit_length():
        return field_problem("link_starts.width", ix.link_starts.width, f"starts up to suffix.size = "
                             f"{ix.suffix.size} take {ix.suffix.size.bit_length()} bits")
    longest_edge = 1 + tails[2] if linked > 0 else 1
    L = ix.max_keyword_length
    height = len(levels) - 2  # level_starts stops past L + 1 levels
    if height > L or longest_edge > L:
        return field_problem("max_keyword_length", L, f"a path of the trie is longer (trie height "
                             f"{f'over {L}' if height > L else height}, longest edge {longest_edge})")
    if L > height + ix.suffix.size:
        return field_problem("max_keyword_length", L, f"the trie height {height} and its {ix.suffix.size} "
                             f"tail tokens allow at most {height + ix.suffix.size}")
    if levels[-1] != n:  # (when they all are, the last node's code ends at the last bit)
        return f"LOUDS: nodes [{levels[-1]}, {n}) cannot be reached from the root"
    return None


def layout_problem(ix: NarrowLoudsIndex) -> tuple[str | None, Layout | None]:
    """Cheap checks, and what they decoded (reused by `content_problem`)."""
    for check in (_counts, _bitvector_sizes, _packed_sizes):
        problem = check(ix)
        if problem:
            return problem, None
    workers = usable_cpus()
    # always: a bad link would send the GPU outside the suffix
    tails = tail_lengths(ix.link_starts, ix.max_keyword_length, workers)
    levels = level_starts(ix.louds, ix.num_nodes, ix.max_keyword_length)
    return _bounds(ix, tails, levels), Layout(tails[0], levels)


#: Words per thread task when a rank directory is checked (a whole number of directory blocks).
RANK_CHUNK_WORDS = 1 << 20
#: Hints per thread task of the select0-hint check (each hint costs a few dozen reads).
HINT_CHUNK = 1 << 18


def _rank_tasks(bv: BitVector) -> list[Callable[[], tuple[int, int]]]:
    """One call per piece of whole blocks: (ones in the piece, the one offset by which every stored entry of
    the piece exceeds the entries recomputed from zero, or -1 when they differ by more than one offset)."""
    per_block = BLOCK_BITS // 64
    step = max(per_block, RANK_CHUNK_WORDS - RANK_CHUNK_WORDS % per_block)

    words, rank = np.asarray(bv.words), np.asarray(bv.rank)  # plain arrays: a memmap's slices cost more

    def piece(a: int) -> tuple[int, int]:
        b = min(a + step, words.size)
        entries, ones = rank_entries(words[a:b], 0)
        diff = rank[a // per_block : b // per_block] - entries  # uint64: wraps where a stored one is less
        return ones, int(diff[0]) if bool((diff == diff[0]).all()) else -1

    return [partial(piece, a) for a in range(0, words.size, step)]


def _rank_results_match(bv: BitVector, parts: list[tuple[int, int]]) -> bool:
    """Whether the pieces' results of `_rank_tasks` make ``bv``'s directory: each piece's offset is the ones
    before it (no entry's count then reaches the relative fields, since the total is below 2**ABS_BITS)."""
    before = 0
    for ones, offset in parts:
        if offset != before:
            return False
        before += ones
    return before < 1 << ABS_BITS and int(bv.rank[-1]) == before


def _ranks_match(bv: BitVector, workers: int = 1) -> bool:
    """The rank directory (and select0 hints) recomputed from the bits, in pieces on threads."""
    if not _rank_results_match(bv, in_parallel(_rank_tasks(bv), workers)):
        return False
    return bv.select0_hints is None or _hints_match(bv, workers)


def _hints_match(bv: BitVector, workers: int) -> bool:
    """Every select0 hint names the block that holds its zero (`bits.select0_hints`: the last block whose
    zeros before it are at most the zero's number; then the last block), checked through the verified
    rank directory in pieces on threads."""
    return _hint_results_match(bv, in_parallel(_hint_tasks(bv), workers))


def _hint_results_match(bv: BitVector, parts: list[bool]) -> bool:
    """Whether the results of `_hint_tasks` and the last hint say every hint of ``bv`` is right."""
    assert bv.select0_hints is not None
    return int(bv.select0_hints[-1]) == bv.rank.size - 2 and all(parts)


def _hint_tasks(bv: BitVector) -> list[Callable[[], bool]]:
    """One call per piece of `HINT_CHUNK` hints: whether each names its zero's block (`_hints_match`).  They
    only read inside the rank directory (the cheap checks bound the hints), so they may run before its
    verdict; their results mean something once it is verified."""
    hints = np.asarray(bv.select0_hints)
    assert bv.select0_hints is not None
    last = bv.rank.size - 2  # blocks 0 .. last

    rank = np.asarray(bv.rank)

    def zeros_before(blocks: np.ndarray) -> np.ndarray:  # the verified entries: ones before each block
        ones = (rank[blocks] & np.uint64((1 << ABS_BITS) - 1)).astype(np.int64)
        return np.minimum(blocks * BLOCK_BITS, bv.nbits) - ones

    def piece(a: int) -> bool:
        h = hints[a : min(a + HINT_CHUNK, hints.size - 1)].astype(np.int64)
        target = (np.arange(a, a + h.size, dtype=np.int64)) * HINT_STEP
        ok = zeros_before(h) <= target
        nxt = np.minimum(h + 1, last)
        ok &= (h == last) | (zeros_before(nxt) > target)
        return bool(ok.all())

    return [partial(piece, a) for a in range(0, hints.size - 1, HINT_CHUNK)]


#: Nodes from which ``verify_device='auto'`` runs the LOUDS pass on the GPU: below, the CPU pass takes well under a
#: second, less than a fresh process's cupy start-up (import, CUDA context, first-use compilation: about 1 s).
VERIFY_GPU_MIN_NODES = 1 << 24


def check_verify_device(device: str) -> None:
    """An `InputError` unless ``device`` is one of `VERIFY_DEVICES`."""
    if device not in VERIFY_DEVICES:
        raise InputError(f"verify_device: expected one of {VERIFY_DEVICES}, got {str(device)[:40]!r}")


def verify_module(device: str, num_nodes: int) -> ModuleType | None:
    """The array module of the LOUDS pass for ``load(verify_device=...)``: None (CPU threads) for 'cpu', cupy
    for 'gpu' (a `DeviceError` where cupy or a GPU is missing), and for 'auto' cupy where it is usable and the
    index has at least `VERIFY_GPU_MIN_NODES` nodes."""
    check_verify_device(device)
    if device == "cpu" or (device == "auto" and num_nodes < VERIFY_GPU_MIN_NODES):
        return None
    try:
        return arrays.cupy_module()
    except DeviceError as e:
        if device == "gpu":
            raise DeviceError(f"verify_device 'gpu' needs cupy and a usable GPU ({str(e).split(';')[0]}); "
                              f"verify_device='cpu' or 'auto' verifies on the CPU") from e
        return None
