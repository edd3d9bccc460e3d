"""The brute-force oracle itself: its length-norm table, its limits and its place in the registry.

The hand-worked cases of docs/semantics.md run against every backend, the oracle included, in
test_conformance.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from oracle import OracleSearcher, OracleTrie, length_norm, oracle_search

from flashtrie import InputError, KeywordSet, Proposals, SearchConfig, Searcher


def test_length_norm_table_values() -> None:
    assert length_norm(0.0, 7) == np.float32(1.0)
    assert length_norm(1.0, 1) == np.float32(1.0)
    assert length_norm(0.5, 3) == np.float32(math.sqrt(0.75))
    assert length_norm(2.0, 4) == np.float32(36.0 / 81.0)


def test_oracle_trie_prefixes_and_children() -> None:
    trie = OracleTrie(KeywordSet.from_sequences([[1, 2], [1], [3], [1, 2]]))
    assert trie.whole == {(1, 2): 0, (1,): 1, (3,): 2}
    assert trie.is_prefix(()) and trie.is_prefix((1,)) and not trie.is_prefix((2,))
    assert trie.has_child((1,)) and not trie.has_child((1, 2)) and trie.has_child(())


def test_searcher_is_a_registered_backend_for_small_inputs() -> None:
    from flashtrie.harness.backends import BACKENDS, available, available_backends
    from flashtrie.reference_cpu import oracle

    ks = KeywordSet.from_sequences([[1, 2], [1]])
    s = OracleSearcher(ks)
    assert isinstance(s, Searcher) and s.name == "oracle" and s.last_stats is None
    assert BACKENDS["oracle"].cls == "OracleSearcher" and "oracle" in available()
    assert "oracle" not in available_backends()[0]  # never run unless named (small inputs only)
    p = Proposals(np.array([[[1], [2]]]), np.array([[[-1.0], [-0.5]]], dtype=np.float32))
    cfg = SearchConfig(beam_width=2)
    assert s.search(p, cfg).equals(oracle_search(ks, p, cfg))
    with pytest.raises(InputError, match=r"beam_width x K: 2 x 40000 = 80000 .* over the oracle's limit of 65536"):
        s.search(Proposals(np.zeros((1, 1, 40000), np.int64) - 1, np.zeros((1, 1, 40000), np.float32)), cfg)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(oracle, "ORACLE_MAX_KEYWORDS", 1)
        with pytest.raises(InputError, match="keywords: 2 keywords are over the oracle's limit of 1"):
            OracleSearcher(ks)
    with pytest.raises(InputError, match="keywords: expected a flashtrie.KeywordSet"):
        OracleSearcher([[1]])  # type: ignore[arg-type]


def test_shares_no_search_code_with_the_optimised_backends() -> None:
    import ast

    import flashtrie.reference_cpu.oracle as mod

    tree = ast.parse(open(mod.__file__).read())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert imported <= {"__future__", "math", "collections.abc", "numpy", "flashtrie.errors", "flashtrie.keywords",
                        "flashtrie.proposals", "flashtrie.search_core", "flashtrie.search_types"}, imported
