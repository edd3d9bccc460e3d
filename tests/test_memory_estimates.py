"""Each component owns its memory estimate, next to the code that allocates, and the command line's checks
before any work add up those estimates (`flashtrie/cli/memory.py` holds no figure of its own)."""

from __future__ import annotations

import pytest
from flashtrie.datasets.keywords import generation_peak_bytes
from flashtrie.datasets.queries import queries_peak_bytes
from flashtrie.harness.workloads import tiled_batch_bytes
from flashtrie.reference_cpu import MarisaSearcher, NumpySearcher

from flashtrie.cli import memory
from flashtrie.index.builder import build_peak_bytes


def test_the_command_lines_parts_are_the_components_estimates() -> None:
    n = 12_345
    assert memory.generation_part("-n", n)[2] == generation_peak_bytes(n) > 0
    assert memory.build_part("KW", "", n)[2] == build_peak_bytes(n) > 0
    assert memory.marisa_part("KW", "", n)[2] == MarisaSearcher.setup_peak_bytes(n) > 0
    assert memory.workload_part("-n", "", 16, 4, 100, library=n)[2] == queries_peak_bytes(16, 4, 100, n) > 0
    assert memory.workload_part("-n", "", 16, None, 100)[2] == queries_peak_bytes(16, 8, 100)
    assert memory.search_part("--beam", "", 100, 4)[2] == NumpySearcher.search_peak_bytes(100, 4) > 0
    assert memory.batches_part("--batch-sizes", "", 8, 4, 100)[2] == tiled_batch_bytes(8, 4, 100) > 0
    assert [p[3] for p in memory.library_parts("--sizes", n, ["numpy", "marisa"])][-1] == "the marisa trie"


def test_a_components_estimate_moves_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    before = memory.search_part("--beam", "", 100, 1)[2]
    monkeypatch.setattr(NumpySearcher, "PEAK_BYTES_PER_BEAM_ENTRY", 2 * NumpySearcher.PEAK_BYTES_PER_BEAM_ENTRY)
    assert memory.search_part("--beam", "", 100, 1)[2] == 2 * before


def test_estimates_grow_with_their_arguments() -> None:
    assert queries_peak_bytes(2, 8, 100, 10) < queries_peak_bytes(4, 8, 100, 10) < queries_peak_bytes(4, 8, 100, 10**6)
    assert NumpySearcher.search_peak_bytes(10, 1) < NumpySearcher.search_peak_bytes(10, 2)
