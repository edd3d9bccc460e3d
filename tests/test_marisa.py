"""`MarisaSearcher`'s own paths: the adaptive intersection, worker processes (and their deaths), early stop,
refusals.  The shared adversarial cases are in test_conformance.py."""

from __future__ import annotations

import os

import numpy as np
import pytest
from flashtrie.reference_cpu import MarisaSearcher
from flashtrie.reference_cpu.marisa import ENUM_RATIO
from hypothesis import given, settings
from oracle import oracle_search
from strategies import search_cases

from flashtrie import InputError, KeywordSet, Proposals, SearchConfig, Searcher

PAD = 2**32 - 1


@pytest.mark.slow
@settings(max_examples=300)
@given(search_cases())
def test_children_table_only_matches_oracle(case) -> None:
    """The conformance suite runs the default crossover ("marisa") and lookups only ("marisa-lookup")."""
    keywords, proposals, config, prefixes = case
    expected = oracle_search(keywords, proposals, config, prefixes)
    got = MarisaSearcher(keywords, enum_ratio=np.inf).search(proposals, config, prefixes)
    assert expected.first_difference(got) is None, expected.first_difference(got)


@pytest.mark.slow
@settings(max_examples=300)
@given(search_cases())
def test_early_stop_changes_nothing(case) -> None:
    keywords, proposals, config, prefixes = case
    a = MarisaSearcher(keywords, early_stop=True).search(proposals, config, prefixes)
    b = MarisaSearcher(keywords, early_stop=False).search(proposals, config, prefixes)
    assert a.first_difference(b) is None, a.first_difference(b)


def _random_case(seed: int, n_kw: int = 400, q_n: int = 23, t_n: int = 6, k: int = 24
                 ) -> tuple[KeywordSet, Proposals, list[list[int]]]:
    rng = np.random.default_rng(seed)
    alphabet = np.array([0, 1, 2, 3, 5, 8, 65535, 65536, 4294967293, 4294967294], dtype=np.int64)
    kws = [rng.choice(alphabet, size=int(rng.integers(1, 7))).tolist() for _ in range(n_kw)]
    tokens = np.full((q_n, t_n, k), PAD, dtype=np.int64)
    for q in range(q_n):
        for t in range(t_n):
            m = int(rng.integers(0, k + 1))
            tokens[q, t, :m] = rng.permutation(np.unique(np.concatenate((alphabet, rng.integers(0, 1000, k)))))[:m]
    logprobs = (-rng.integers(0, 12, size=tokens.shape) / 4).astype(np.float32)
    prefixes = [kws[int(rng.integers(n_kw))][: int(rng.integers(0, 3))] for _ in range(q_n)]
    return KeywordSet.from_sequences(kws), Proposals(tokens, logprobs), prefixes


def _fan_out_case(seed: int, k: int, q_n: int = 6, t_n: int = 5) -> tuple[KeywordSet, Proposals]:
    """A root with ~1,500 children over a deep, narrow tail; rows mix library tokens with others."""
    rng = np.random.default_rng(seed)
    heads = rng.choice(4_000, size=1_500, replace=False)
    kws = [[int(rng.choice(heads))] + rng.integers(0, 6, size=int(rng.integers(0, 5))).tolist()
           for _ in range(2_000)]
    tokens = np.full((q_n, t_n, k), PAD, dtype=np.int64)
    for q in range(q_n):
        for t in range(t_n):
            row = np.concatenate((rng.choice(heads, k // 4, replace=False),
                                  rng.permutation(6), rng.integers(0, 5_000, 2 * k)))
            row = row[np.sort(np.unique(row, return_index=True)[1])][: int(rng.integers(k // 2, k + 1))]
            tokens[q, t, : row.size] = rng.permutation(row)
    logprobs = (-rng.integers(0, 16, size=tokens.shape) / 8).astype(np.float32)
    return KeywordSet.from_sequences(kws), Proposals(tokens, logprobs)


@pytest.mark.parametrize(("k", "root_path"), [(8, "lookup"), (200, "enum")])
def test_adaptive_paths_match_oracle(k: int, root_path: str) -> None:
    """Small K: the root's fan-out (~1,500 > ENUM_RATIO * K) goes to marisa, deep nodes to the children
    table; large K: everything is enumerated.  Both equal the oracle and the marisa-only run."""
    keywords, proposals = _fan_out_case(k, k)
    root_degree = len({int(keywords.tokens[o]) for o in keywords.offsets[:-1]})
    assert (root_degree > ENUM_RATIO * k) == (root_path == "lookup")
    searcher = MarisaSearcher(keywords)
    plain = MarisaSearcher(keywords, enum_ratio=0.0)
    for cfg in (SearchConfig(beam_width=16), SearchConfig(beam_width=k, max_results=40, length_norm=0.7),
                SearchConfig(beam_width=3, score_threshold=-3.0)):
        expected = oracle_search(keywords, proposals, cfg)
        got = searcher.search(proposals, cfg)
        assert expected.first_difference(got) is None, expected.first_difference(got)
        assert plain.search(proposals, cfg).first_difference(got) is None
        assert (got.num_results > 0).any()
    counts = searcher.path_counts
    assert counts["enum_hyps"] > 0 and counts["enum_children"] > 0  # the adaptive path is taken
    if root_path == "lookup":
        assert counts["lookup_hyps"] >= proposals.num_queries and counts["lookups"] > 0  # the root, per query
    else:
        assert counts["lookup_hyps"] == 0 and counts["lookups"] == 0
    assert plain.path_counts["enum_hyps"] == 0 and plain.path_counts["lookups"] > 0
    again = MarisaSearcher(keywords)
    again.search(proposals, cfg)
    assert again.path_counts == counts  # the last call's work, not a running total
    searcher.search(proposals[:0], cfg)
    assert set(searcher.path_counts.values()) == {0} and searcher.last_stats is None


def test_multiprocess_equals_single_and_oracle() -> None:
    keywords, proposals, prefixes = _random_case(7)
    single = MarisaSearcher(keywords)
    with MarisaSearcher(keywords, processes=2) as multi:
        assert multi._tmpdir is not None and os.path.exists(multi._tmpdir)
        tmpdir = multi._tmpdir
        for cfg, pf in [(SearchConfig(beam_width=4), None),
                        (SearchConfig(beam_width=3, max_results=7, length_norm=0.5, score_threshold=-4.0), prefixes),
                        (SearchConfig(beam_width=64, token_threshold=-2.0), prefixes)]:
            expected = oracle_search(keywords, proposals, cfg, pf)
            a = single.search(proposals, cfg, pf)
            b = multi.search(proposals, cfg, pf)  # the pool is reused across calls
            assert expected.first_difference(a) is None, expected.first_difference(a)
            assert a.first_difference(b) is None, a.first_difference(b)
            assert (a.num_results > 0).any()
        assert multi.path_counts == single.path_counts  # workers report their counters
    assert not os.path.exists(tmpdir)
    with pytest.raises(RuntimeError):
        multi.search(proposals, SearchConfig(beam_width=2))


@pytest.mark.parametrize("context", ["spawn"])
def test_multiprocess_spawn(context: str) -> None:
    keywords, proposals, prefixes = _random_case(3, n_kw=50, q_n=5, t_n=3, k=8)
    cfg = SearchConfig(beam_width=3)
    with MarisaSearcher(keywords, processes=2, mp_context=context) as multi:
        got = multi.search(proposals, cfg, prefixes)
    assert MarisaSearcher(keywords).search(proposals, cfg, prefixes).first_difference(got) is None


def test_attributes_and_protocol() -> None:
    keywords = KeywordSet.from_sequences([[1, 2], [1], [1, 2], [3]])
    s = MarisaSearcher(keywords)
    assert isinstance(s, Searcher)
    assert s.name == "marisa"
    assert s.build_seconds >= 0
    assert s.trie_bytes > 0
    assert s.table_bytes == 4 * (5 + 2 * 3)  # int32 indptr over 3 keys + root, 3 child tokens and ids
    assert s.duplicates == 1
    s.close()  # no pool: a no-op


def test_empty_keyword_set_is_refused_like_the_index() -> None:
    from flashtrie import NarrowLoudsIndex

    with pytest.raises(InputError, match="^keywords: the keyword set is empty; the marisa baseline needs at least"):
        MarisaSearcher(KeywordSet.from_sequences([]))
    with pytest.raises(InputError, match="^keywords: the keyword set is empty; an index needs at least"):
        NarrowLoudsIndex.build(KeywordSet.from_sequences([]))


def test_keywords_over_the_length_limit_are_refused_up_front() -> None:
    from flashtrie.reference_cpu.marisa import MARISA_MAX_KEYWORD_LENGTH

    ok = KeywordSet.from_sequences([[1], list(range(MARISA_MAX_KEYWORD_LENGTH))])
    assert MarisaSearcher(ok).num_keywords == 2
    long = KeywordSet.from_sequences([[1], list(range(MARISA_MAX_KEYWORD_LENGTH + 1))])
    with pytest.raises(InputError, match=f"keywords: keyword 1 has {MARISA_MAX_KEYWORD_LENGTH + 1} tokens, over the "
                                         f"marisa baseline's limit of {MARISA_MAX_KEYWORD_LENGTH}"):
        MarisaSearcher(long)


def test_bad_arguments() -> None:
    keywords = KeywordSet.from_sequences([[1]])
    with pytest.raises(InputError, match="processes"):
        MarisaSearcher(keywords, processes=0)
    with pytest.raises(InputError, match="enum_ratio"):
        MarisaSearcher(keywords, enum_ratio=-1.0)
    with pytest.raises(InputError, match="keywords"):
        MarisaSearcher([[1]])  # type: ignore[arg-type]
    with pytest.raises(InputError, match="enum_ratio: expected a number"):
        MarisaSearcher(keywords, enum_ratio="x")  # type: ignore[arg-type]


def test_mixed_enumeration_and_lookup_in_one_step_keep_the_order() -> None:
    """One hypothesis takes the marisa-lookup path (100 children), a tied one enumerates (1 child)."""
    keywords = KeywordSet.from_sequences([[1, c] for c in range(100)] + [[2, 5]])
    tok = np.array([[[1, 2], [5, 7]]], dtype=np.int64)
    lp = np.array([[[-1.0, -1.0], [0.0, 0.0]]], dtype=np.float32)
    p = Proposals(tok, lp)
    config = SearchConfig(beam_width=2, max_results=3)
    want = oracle_search(keywords, p, config)
    got = MarisaSearcher(keywords).search(p, config)
    assert got.first_difference(want) is None, got.first_difference(want)
    s = MarisaSearcher(keywords)
    s.search(p, config)
    assert s.path_counts["lookups"] > 0 and s.path_counts["enum_children"] > 0  # both paths in one step


# ------------------------------------------------------------------------------ worker processes dying
def _cpu_ticks(pid: int) -> int:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _children() -> set[int]:
    """Pids of this process's live children (from /proc, whatever made them)."""
    out: set[int] = set()
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as f:
            out.update(int(p) for p in f.read().split())
    return {p for p in out if not _gone(p)}


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return any(line.startswith("State:") and "Z" in line for line in f)
    except FileNotFoundError:
        return True


def _slow_case() -> tuple[KeywordSet, Proposals]:
    """Every pair [a, b] of 200 tokens; 200 queries whose rows propose all of them (marisa-only: ~40k
    lookups per query and step)."""
    kws = [[a, b] for a in range(200) for b in range(200)]
    tokens = np.broadcast_to(np.arange(200, dtype=np.int64), (200, 2, 200)).copy()
    return KeywordSet.from_sequences(kws), Proposals(tokens, np.full(tokens.shape, -1.0, dtype=np.float32))


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux /proc")
def test_a_worker_killed_mid_search_raises_and_the_next_search_recovers() -> None:
    import signal
    import threading
    import time

    from flashtrie.errors import WorkerError

    keywords, proposals = _slow_case()
    cfg = SearchConfig(beam_width=200, max_results=5)
    old = _children()
    with MarisaSearcher(keywords, processes=2, enum_ratio=0.0) as multi:
        pids = sorted(_children() - old)
        assert len(pids) == 2
        before = {pid: _cpu_ticks(pid) for pid in pids}
        outcome: dict[str, object] = {}

        def run() -> None:
            try:
                outcome["result"] = multi.search(proposals, cfg)
            except Exception as e:  # noqa: BLE001 - inspected below
                outcome["error"] = e

        th = threading.Thread(target=run, daemon=True)
        th.start()
        victim = None
        while victim is None and th.is_alive():  # kill a worker once it is busy with a chunk
            victim = next((pid for pid in pids if _cpu_ticks(pid) - before[pid] >= 3), None)
            time.sleep(0.005)
        assert victim is not None, "the search ended before a worker could be killed"
        os.kill(victim, signal.SIGKILL)
        th.join(60)
        assert not th.is_alive(), "search() still blocked 60 s after a worker died"
        err = outcome.get("error")
        assert isinstance(err, WorkerError) and f"pid {victim} (exit code -9)" in str(err), outcome
        assert all(f"pid {pid} " not in str(err) for pid in pids if pid != victim), err  # stopped, not died
        small = proposals[:3]
        assert multi.search(small, cfg).equals(MarisaSearcher(keywords).search(small, cfg))  # fresh workers
    with pytest.raises(WorkerError, match="search: this MarisaSearcher is closed"):
        multi.search(small, cfg)


_PARENT = """
import sys, time
import numpy as np
from flashtrie import KeywordSet
from flashtrie.reference_cpu import MarisaSearcher
s = MarisaSearcher(KeywordSet.from_sequences([[1, 2], [3]]), processes=2, mp_context=sys.argv[1])
print(s._tmpdir, *s._pool._processes, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux /proc")
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_killing_the_parent_leaves_no_workers_or_folders(context: str) -> None:
    import signal
    import subprocess
    import sys
    import time

    parent = subprocess.Popen([sys.executable, "-c", _PARENT, context], stdout=subprocess.PIPE, text=True)
    try:
        tmpdir, *pids = parent.stdout.readline().split()  # type: ignore[union-attr]
        assert os.path.isdir(tmpdir) and len(pids) == 2
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    for _ in range(300):  # the workers poll their parent every 0.2 s
        if all(_gone(int(p)) for p in pids) and not os.path.exists(tmpdir):
            break
        time.sleep(0.05)
    assert all(_gone(int(p)) for p in pids), "orphaned marisa workers"
    assert not os.path.exists(tmpdir), f"{tmpdir} left behind"
