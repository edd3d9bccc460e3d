"""flashtrie: exact trie-constrained beam search for generative retrieval, on CPU and GPU.

Public API: `KeywordSet`, `Proposals`, `SearchConfig`, `SearchResult`, `Searcher`, `NarrowLoudsIndex`;
backends live in `flashtrie.reference_cpu` (MarisaSearcher, NumpySearcher) and `flashtrie.gpu_impl`
(GpuSearcher).
"""

from __future__ import annotations

from .errors import DeviceError, FlashTrieError, IndexFormatError, InputError, WorkerError
from .keywords import KeywordSet
from .limits import MAX_BEAM_WIDTH, MAX_PROPOSALS, MAX_RESULTS, MAX_STEPS, MAX_TOKEN, PAD_TOKEN
from .proposals import Proposals
from .search_types import SearchConfig, Searcher, SearchResult

__version__ = "0.1.0"

__all__ = [
    "KeywordSet", "Proposals", "SearchConfig", "SearchResult", "Searcher", "NarrowLoudsIndex",
    "FlashTrieError", "InputError", "IndexFormatError", "DeviceError", "WorkerError",
    "PAD_TOKEN", "MAX_TOKEN", "MAX_BEAM_WIDTH", "MAX_PROPOSALS", "MAX_STEPS", "MAX_RESULTS",
]


def __getattr__(name: str):
    if name == "NarrowLoudsIndex":
        from .index import NarrowLoudsIndex

        return NarrowLoudsIndex
    raise AttributeError(f"module 'flashtrie' has no attribute {name!r}")
