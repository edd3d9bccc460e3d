"""The node flags the device derives at upload (kernels/node_flags.cu) equal `derived.node_flags` word for word.

Index format 3 does not store them; every GPU kernel reads this derivation.  Marked ``gpu``: skipped where no
CUDA device is usable.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from strategies import keyword_lists

from flashtrie import KeywordSet, NarrowLoudsIndex
from flashtrie.index import derived

pytestmark = pytest.mark.gpu


@lru_cache(maxsize=1)
def _ctx():
    """One GpuContext for the module, or the reason there is none."""
    try:
        from flashtrie.gpu_impl.context import GpuContext

        return GpuContext(0)
    except Exception as e:  # no cuda.core, no driver, no device
        return f"no usable CUDA device: {type(e).__name__}: {e}"


@pytest.fixture
def ctx():
    c = _ctx()
    if isinstance(c, str):
        pytest.skip(c)
    return c


def device_flags(ctx, ix: NarrowLoudsIndex) -> np.ndarray:
    """Upload ``ix`` and download the flag words the device derived."""
    from flashtrie.gpu_impl.index_upload import host_index, upload_host_index

    host = host_index(ix)
    dev = upload_host_index(ctx, host)
    out = np.full(derived.flag_word_count(ix.num_nodes), 0xDEADBEEF, dtype=np.uint32)
    ctx.download(out, int(dev.arrays.handle) + host.layout().offsets["nflags"])
    ctx.stream.sync()
    assert dev.stats is not None and dev.stats.bytes > 0 and dev.stats.derive_seconds >= 0
    return out


def assert_flags_match(ctx, ix: NarrowLoudsIndex) -> None:
    want = derived.node_flags(ix.louds, ix.linked, ix.terminal, ix.num_nodes)[0]
    got = device_flags(ctx, ix)
    if not np.array_equal(got, want):
        bad = int(np.flatnonzero(got != want)[0])
        pytest.fail(f"flag word {bad} (nodes {8 * bad}..): device {got[bad]:#010x}, numpy {want[bad]:#010x}")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kws=keyword_lists(max_keywords=40, max_length=9))
def test_generated_indexes(ctx, kws: list[list[int]]) -> None:
    assert_flags_match(ctx, NarrowLoudsIndex.build(KeywordSet.from_sequences(kws)))


@pytest.mark.parametrize("n", [1, 7, 8, 9, 63, 64, 65, 257])
def test_node_counts_around_word_boundaries(ctx, n: int) -> None:
    kws = [[i] for i in range(n)] + [[0, 5, 6]]  # n + 2 nodes (a root of n children and a chain)
    assert_flags_match(ctx, NarrowLoudsIndex.build(KeywordSet.from_sequences(kws)))


def test_huge_fanouts_and_many_select_blocks(ctx, tmp_path) -> None:
    rng = np.random.default_rng(7)
    root = [[int(t)] for t in rng.choice(2**32 - 1, size=150_000, replace=False)]  # a 150,000-way root
    wide = [[3, int(t)] for t in range(70_000)]  # a 70,000-way node below it
    deep = [rng.integers(0, 50, size=int(rng.integers(1, 9))).tolist() for _ in range(200_000)]
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences(root + wide + deep))
    assert ix.max_degree >= 150_000 and ix.max_degree_nonroot >= 70_000
    assert_flags_match(ctx, ix)
    ix.save(tmp_path / "big.ftrie")  # and from the memory-mapped file
    assert_flags_match(ctx, NarrowLoudsIndex.load(tmp_path / "big.ftrie"))


def test_searcher_records_the_upload(ctx) -> None:
    from flashtrie.gpu_impl import GpuSearcher

    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2, 3], [1, 4], [70000, 2]]))
    st = GpuSearcher(ix).upload_stats
    assert st.bytes == sum(a.nbytes for a in ix.arrays.values()) + 152  # the arrays and the IndexView
    assert st.copy_seconds > 0 and st.seconds >= st.copy_seconds and st.gb_per_s > 0
