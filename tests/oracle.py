"""The brute-force oracle of docs/semantics.md, for the tests: a re-export of `flashtrie.reference_cpu.oracle`.

It shares no search code with the optimised backends, so the tests stay independent of them.
"""

from flashtrie.reference_cpu.oracle import OracleSearcher, OracleTrie, length_norm, oracle_search

__all__ = ["OracleSearcher", "OracleTrie", "oracle_search", "length_norm"]
