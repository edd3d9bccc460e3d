"""CPU micro-benchmarks (pytest-benchmark): index build, child lookup, one beam step per backend.

Run with ``nox -s bench``; runs are saved under .benchmarks/ and compared with
``nox -s bench -- --benchmark-compare --benchmark-compare-fail=median:10%``.
These measure; they assert only that the work was done.
"""

from __future__ import annotations

import numpy as np
import pytest
from flashtrie.datasets import generate_keywords, generate_queries
from flashtrie.reference_cpu import MarisaSearcher, NumpySearcher

from flashtrie import NarrowLoudsIndex, SearchConfig

N_KEYWORDS = 200_000


@pytest.fixture(scope="module")
def keywords():
    return generate_keywords(N_KEYWORDS, seed=1)


@pytest.fixture(scope="module")
def index(keywords):
    return NarrowLoudsIndex.build(keywords)


@pytest.fixture(scope="module")
def one_step(keywords):
    return generate_queries(keywords, 8, num_steps=1, proposals_per_step=100, preset="dense", seed=2).proposals


def test_build_index(benchmark, keywords):
    idx = benchmark.pedantic(NarrowLoudsIndex.build, args=(keywords,), rounds=3, iterations=1)
    assert idx.num_unique > 0


def test_child_range_lookup(benchmark, index):
    nodes = np.random.default_rng(0).integers(0, index.num_nodes, size=100_000)
    first, end = benchmark(index.child_range, nodes)
    assert np.all(end >= first)


def test_label_decode(benchmark, index):
    nodes = np.random.default_rng(0).integers(1, index.num_nodes, size=100_000)
    labels = benchmark(index.labels, nodes)
    assert labels.size == nodes.size


@pytest.mark.parametrize("backend", ["numpy", "marisa"])
def test_one_beam_step(benchmark, backend, keywords, index, one_step):
    searcher = NumpySearcher(index) if backend == "numpy" else MarisaSearcher(keywords)
    config = SearchConfig(beam_width=100)
    result = benchmark(searcher.search, one_step, config)
    assert result.shape == (one_step.num_queries, 100)
