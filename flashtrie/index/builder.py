"""The CPU index builder: the steps of `build_sort`, `build_trie` and `build_assemble` over numpy, on threads.

Steps (no per-keyword Python work; the GPU builder, ``flashtrie.gpu_impl.build_gpu``, runs the same step
functions over cupy and gets the same arrays):

1-2. sort the keywords, their common prefixes with their predecessors, duplicates dropped (`build_sort`);
3. the compressed trie in preorder, straight from the common prefixes (`build_trie.preorder`);
4. level order, a stable sort of preorder by compressed depth (`build_trie.level_order`);
5. every array of `docs/index-format.md` (`build_assemble.assemble`), then the rank directories
   (`build_assemble.finish`).

Steps 1-3 run per part on threads: keywords with different first tokens share only the root, so ranges of
first token are independent subtries, joined under one root afterwards (`build_trie.join_parts`).  Steps 4
and 5 run their independent gathers and arrays on threads too.  numpy releases the GIL in sorts, gathers
and arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from ..cpus import in_parallel, usable_cpus
from ..errors import InputError
from ..keywords import KeywordSet
from ..limits import MAX_KEYWORDS
from .build_assemble import BuiltArrays, assemble, finish
from .build_sort import sorted_unique
from .build_trie import Preorder, join_parts, level_order, preorder

__all__ = ["MIN_PART", "BuiltArrays", "build_arrays", "check_build_request", "build_peak_bytes"]

#: Building, peak per keyword, the index included (126 to 128 measured with tracemalloc at 50k and 200k keywords).
PEAK_BYTES_PER_KEYWORD = 192


def build_peak_bytes(num_keywords: int) -> int:
    """Estimated peak memory of building the index of ``num_keywords`` keywords (`NarrowLoudsIndex.build`), for
    checks before the work."""
    return num_keywords * PEAK_BYTES_PER_KEYWORD


Progress = Callable[[str], None]

#: Keywords per part at least, when the build is split across threads.
MIN_PART = 500_000


def _cores() -> int:
    return usable_cpus()


def _split_by_first_token(tokens: np.ndarray, starts: np.ndarray, parts: int) -> list[np.ndarray]:
    """Keyword ids split into up to ``parts`` parts by ranges of first token (ascending ids in each).

    Keywords with different first tokens share no trie node but the root, so the parts are sorted and
    turned into subtries independently, on threads (numpy's sorts and gathers release the GIL).
    """
    n = starts.size
    if parts <= 1:
        return [np.arange(n, dtype=np.int64)]
    first_tok = tokens[starts]
    q = [n * i // parts for i in range(1, parts)]
    cuts = np.unique(np.partition(first_tok, q)[q])
    part_of = np.searchsorted(cuts, first_tok, side="right")  # equal first tokens share a part
    return [g for g in (np.flatnonzero(part_of == b) for b in range(cuts.size + 1)) if g.size]


def _sorted_preorder(tokens: np.ndarray, starts: np.ndarray, lens: np.ndarray,
                     max_len: int) -> tuple[np.ndarray, np.ndarray, Preorder]:
    """Steps 1-3: sorted unique keyword ids, their lengths, and the compressed trie in preorder (creators
    index the sorted ids), per part of first tokens on threads."""

    def one(ids: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, Preorder]:
        order, lcp, s_len = sorted_unique(np, tokens, starts, lens, max_len, ids=ids)
        return order, s_len, preorder(np, lcp, s_len)

    parts = min(_cores(), 8, max(1, lens.size // MIN_PART))
    if parts <= 1:
        return one(None)
    groups = _split_by_first_token(tokens, starts, parts)
    if len(groups) == 1:
        return one(None)
    done = in_parallel([partial(one, g) for g in groups], _cores())
    pre = join_parts(np, [p for _, _, p in done], [o.size for o, _, _ in done])
    return np.concatenate([o for o, _, _ in done]), np.concatenate([s for _, s, _ in done]), pre


def check_build_request(keywords: object, ids: str) -> None:
    """`InputError` unless ``keywords`` is a non-empty `KeywordSet` and ``ids`` is "input" or "index" (every
    builder checks this before any work)."""
    if not isinstance(keywords, KeywordSet):
        raise InputError(f"keywords: expected a flashtrie.KeywordSet, got {type(keywords).__name__}")
    if ids not in ("input", "index"):
        raise InputError(f"ids: expected 'input' or 'index', got {ids!r}")
    if len(keywords) == 0:
        raise InputError("keywords: the keyword set is empty; an index needs at least one keyword")
    if len(keywords) > MAX_KEYWORDS:
        raise InputError(f"keywords: {len(keywords):,} keywords are over the limit {MAX_KEYWORDS:,} (an id is "
                         "stored in at most 32 bits)")


def build_arrays(ks: KeywordSet, progress: Progress | None = None, ids: str = "input") -> BuiltArrays:
    """Build every index array from ``ks``; ``progress(stage)`` is called as stages start ("sort+trie",
    "order", "arrays").

    ``ids="input"``: results carry input ids, through the map ``keyword_ids`` unless the input order already
    is the index order (then no map is stored).  ``ids="index"``: the r-th terminal node has id r, no map.
    """
    check_build_request(ks, ids)
    say = progress or (lambda stage: None)
    tokens, offsets = ks.tokens, ks.offsets
    starts, lens = offsets[:-1], np.diff(offsets)
    max_len = int(lens.max())
    cores = _cores()
    say("sort+trie")
    order, s_len, pre = _sorted_preorder(tokens, starts, lens, max_len)
    say("order")
    lv = level_order(np, pre, max_len, cores)
    del pre
    say("arrays")
    max_tok = int(tokens.max())
    out = assemble(np, tokens, starts[order], s_len, order, lv.parent, lv.creator, lv.depth, lv.start,
                   max_tok=max_tok, ids=ids, want_order=True, workers=cores)
    del lv
    return finish(out, cores, ids=ids, num_keywords=len(ks), num_unique=int(order.size), max_len=max_len,
                  max_tok=max_tok)
