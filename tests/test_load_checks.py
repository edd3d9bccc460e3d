"""The verified load's level-by-level LOUDS pass and its helpers, against plain recomputations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashtrie import IndexFormatError, InputError, KeywordSet, NarrowLoudsIndex
from flashtrie.index import checks, louds_levels, louds_pass, structure, verify_run
from flashtrie.index.bits import BitVector, rank_entries
from flashtrie.index.packed import PackedInts
from flashtrie.limits import MAX_TOKEN

tokens = st.one_of(st.integers(0, 5), st.integers(65_530, 65_540), st.integers(MAX_TOKEN - 3, MAX_TOKEN))
keyword_lists = st.lists(st.lists(tokens, min_size=1, max_size=8), min_size=1, max_size=60)


def plain_facts(ix: NarrowLoudsIndex) -> tuple[np.ndarray, int]:
    """Degrees from the zero positions of the whole LOUDS, and the longest path by walking every keyword."""
    zeros = np.flatnonzero(~ix.louds.to_bools())
    deg = np.diff(np.concatenate(([-1], zeros))) - 1
    return deg, max(int(ix.edge_lengths(np.array([j]))[0]) + depth for j, depth in _depths(ix, deg))


def _depths(ix: NarrowLoudsIndex, deg: np.ndarray):
    """(node, tokens above its edge) for every node, parents first."""
    above = {0: 0}
    child = 1
    for parent in range(ix.num_nodes):
        for j in range(child, child + int(deg[parent])):
            above[j] = above[parent] + (int(ix.edge_lengths(np.array([parent]))[0]) if parent else 0)
        child += int(deg[parent])
    return above.items()


@settings(max_examples=120, deadline=None)
@given(keyword_lists, st.sampled_from([1, 2, 3, 1 << 18]), st.sampled_from([1, 5, 64, 1 << 16]),
       st.sampled_from([1, 3, 1 << 10]), st.sampled_from([0.0, 1 / 16, 1.0]), st.integers(1, 3))
def test_louds_pass_matches_plain_recomputation(kws, chunk, piece_bits, sample, sparse, workers):
    """Any cut of the levels into pieces (by parents, by bits, from any candidate spacing) and either way
    of finding the children's depths (one by one for the parents off the piece's least depth, or through
    every child's parent) give the plain recomputation's answers."""
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    problem, layout = checks.layout_problem(ix)
    assert problem is None and layout.levels[-1] == ix.num_nodes
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(louds_pass, "CHUNK_NODES", chunk)  # several pieces per level even on small tries
        mp.setattr(louds_pass, "PIECE_BITS", piece_bits)
        mp.setattr(louds_pass, "SAMPLE_NODES", sample)
        mp.setattr(louds_pass, "SPARSE_PARENTS", sparse)
        f = louds_pass.louds_facts(ix.louds, ix.linked, ix.terminal, layout.tails, layout.levels,
                                   ix.max_keyword_length, workers, has_children=True)
    deg, longest = plain_facts(ix)
    assert (f.max_degree, f.max_degree_nonroot) == (int(deg.max()), int(deg[1:].max(initial=0)))
    assert (f.max_degree, f.max_degree_nonroot) == (ix.max_degree, ix.max_degree_nonroot)
    assert f.longest == longest == max(map(len, kws)) == ix.max_keyword_length
    assert f.leaf_not_end == -1
    np.testing.assert_array_equal(f.has_children, deg > 0)


def test_louds_pass_stops_past_the_limit_and_finds_a_leaf_that_ends_nothing():
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2, 3, 4], [1, 5], [7]]))
    _, layout = checks.layout_problem(ix)
    f = louds_pass.louds_facts(ix.louds, ix.linked, ix.terminal, layout.tails, layout.levels, 1, 1)
    assert f.longest > 1  # stopped once past the limit
    leaf = int(np.flatnonzero(~plain_facts(ix)[0].astype(bool))[0])
    bits = ix.terminal.to_bools()
    bits[leaf] = False
    terminal = BitVector.from_bools(bits)
    f = louds_pass.louds_facts(ix.louds, ix.linked, terminal, layout.tails, layout.levels, 4, 1)
    assert f.leaf_not_end == leaf


def _rebuilt(ix: NarrowLoudsIndex, **parts) -> NarrowLoudsIndex:
    """``ix`` with some of its parts (constructor arguments) replaced."""
    args = {k: getattr(ix, k) for k in ("louds", "labels_lo", "hi_flag", "labels_hi", "linked", "link_starts",
                                         "suffix", "terminal", "keyword_ids", "node_flags")}
    args["meta"] = dict(ix.meta)
    args.update(parts)
    return NarrowLoudsIndex(**args)


def _flipped(ix: NarrowLoudsIndex, name: str, where: int, bit: int) -> NarrowLoudsIndex:
    """``ix`` with one bit of the array ``name`` ("part.field") flipped, rebuilt as a loaded index."""
    part, field = name.split(".")
    old = getattr(ix, part)
    arr = getattr(old, field).copy()
    arr[where % arr.size] ^= np.uint64(1 << bit)
    if isinstance(old, BitVector):
        new = BitVector(**{**{k: getattr(old, k) for k in ("words", "rank", "nbits", "select0_hints")}, field: arr})
    else:
        new = PackedInts(arr, old.width, old.size)
    return _rebuilt(ix, **{part: new})


def test_unreachable_nodes_are_refused_before_the_checksums(tmp_path):
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1], [2]]))  # LOUDS 11000: root with two leaves
    assert ix.louds.to_bools().tolist() == [True, True, False, False, False]
    # 10010: the root has one child, node 2 "has" one child (node 2 itself): n - 1 ones, n zeros, node 2
    # never reached from the root
    louds = BitVector.from_bools(np.array([1, 0, 0, 1, 0], dtype=bool), with_select0=True)
    bad = _rebuilt(ix, louds=louds, meta=dict(ix.meta, max_degree=1, max_degree_nonroot=1))
    bad.save(tmp_path / "bad.ftrie")
    for verify in (True, False):
        with pytest.raises(IndexFormatError, match=r"nodes \[2, 3\) cannot be reached from the root"):
            NarrowLoudsIndex.load(tmp_path / "bad.ftrie", verify=verify)


def test_a_leaf_that_ends_no_keyword_is_refused(tmp_path):
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2], [1, 3], [4]]), ids="index")
    bits = ix.terminal.to_bools()
    leaf = int(np.flatnonzero(bits)[-1])
    bits[leaf] = False
    meta = dict(ix.meta, num_unique=ix.num_unique - 1, num_keywords=ix.num_keywords - 1)
    bad = _rebuilt(ix, terminal=BitVector.from_bools(bits), meta=meta)
    bad.save(tmp_path / "bad.ftrie")
    with pytest.raises(IndexFormatError, match=f"node {leaf} is a leaf that ends no keyword"):
        NarrowLoudsIndex.load(tmp_path / "bad.ftrie")


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 32).flatmap(lambda w: st.tuples(st.just(w), st.lists(st.integers(0, (1 << w) - 1),
                                                                            max_size=300))),
       st.sampled_from([1, 7, 64, 1 << 22]), st.integers(1, 3))
def test_max_and_where(case, part, workers):
    width, values = case
    v = np.array(values, dtype=np.int64)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("flashtrie.index.packed.PART_VALUES", part)
        top, where = PackedInts.from_values(v, width if v.size else 0).max_and_where(workers)
    assert top == (int(v.max()) if v.size else 0)
    if v.size:
        np.testing.assert_array_equal(where, np.flatnonzero(v == top))


@pytest.mark.parametrize("chunk", [1 << 6, 1 << 20])
def test_label_and_rank_checks_in_pieces(monkeypatch, chunk):
    """The child checks' largest label and the rank-directory check give the same answers in small pieces as
    in one."""
    rng = np.random.default_rng(5)
    kws = [rng.integers(0, 3_000_000, size=int(rng.integers(1, 6))).tolist() for _ in range(3000)]
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    monkeypatch.setattr(structure, "CHILD_CHUNK_WORDS", chunk // 64)
    monkeypatch.setattr(checks, "RANK_CHUNK_WORDS", chunk // 8)
    _, layout = checks.layout_problem(ix)
    assert verify_run.content_problem(ix, layout, 2) is None
    found = [task() for task in structure.child_tasks(ix)]
    assert len(found) > 1 or chunk > 1 << 6
    assert structure.largest_label(found) == int(ix.labels(np.arange(1, ix.num_nodes)).max())
    rank = ix.terminal.rank.copy()
    rank[rank.size // 2] ^= np.uint64(1 << 40)  # a sub-block count in the middle of the directory
    bad = BitVector(ix.terminal.words, rank, ix.terminal.nbits, None)
    assert not checks._ranks_match(bad, 2)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=3000), st.integers(0, 10**6), st.integers(-2, 2),
       st.sampled_from([1, 2, 1 << 20]))
def test_select0_hint_check_agrees_with_recomputing_them(bools, which, delta, chunk):
    bv = BitVector.from_bools(np.array(bools), with_select0=True)
    hints = bv.select0_hints.astype(np.int64)
    k = which % hints.size
    hints[k] = min(max(hints[k] + delta, 0), bv.rank.size - 2)
    crafted = BitVector(bv.words, bv.rank, bv.nbits, hints.astype(np.uint32))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(checks, "HINT_CHUNK", chunk)
        assert checks._hints_match(crafted, 2) == np.array_equal(hints, bv.select0_hints)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 40), st.floats(0, 1), st.integers(0, 2**33), st.integers(0, 2**32))
def test_rank_entries_match_plain_counts(blocks, density, before, seed):
    """Each entry: the ones before its block (plus ``before``), and the ones in its words [0, 4k), k = 1..3."""
    rng = np.random.default_rng(seed)
    words = np.packbits(rng.random(blocks * 1024) < density, bitorder="little").view(np.uint64)
    entries, total = rank_entries(words, before)
    ones = np.bitwise_count(words).astype(np.int64).reshape(blocks, 16)
    assert total == before + int(ones.sum())
    ahead = before + np.concatenate(([0], np.cumsum(ones.sum(axis=1))[:-1]))
    np.testing.assert_array_equal(entries & np.uint64((1 << 34) - 1), ahead.astype(np.uint64))
    for k in (1, 2, 3):
        rel = (entries >> np.uint64(34 + 10 * (k - 1))) & np.uint64(1023)
        np.testing.assert_array_equal(rel, ones[:, : 4 * k].sum(axis=1).astype(np.uint64))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=300), st.sampled_from([1, 3, 64, 1 << 20]),
       st.integers(1, 3), st.integers(1, 300))
def test_tail_lengths_in_pieces(starts, part, workers, limit):
    """Differences, their least and largest, and the first and last start, whatever the piece cuts; the
    differences are stored exactly when they all lie in [0, limit]."""
    v = np.array(starts, dtype=np.int64)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("flashtrie.index.packed.PART_VALUES", part)
        out, lo, hi, first, last = louds_pass.tail_lengths(PackedInts.from_values(v), limit, workers)
    d = np.diff(v)
    assert (lo, hi) == ((int(d.min()), int(d.max())) if d.size else (0, 0))
    assert (first, last) == (starts[0], starts[-1]) and out.size == d.size
    if d.size and 0 <= lo and hi <= limit:
        np.testing.assert_array_equal(out, d)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=5000), st.integers(0, 10**6), st.integers(0, 63),
       st.sampled_from([16, 32, 1 << 18]))
def test_rank_check_in_pieces_finds_any_flipped_bit(bools, which, bit, chunk):
    """A directory recomputed piece by piece (each piece's entries from zero, then one offset per piece)
    accepts the true directory and refuses it with any one bit of any entry flipped."""
    bv = BitVector.from_bools(np.array(bools))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(checks, "RANK_CHUNK_WORDS", chunk)
        assert checks._ranks_match(bv, 2)
        rank = bv.rank.copy()
        rank[which % rank.size] ^= np.uint64(1 << bit)
        assert not checks._ranks_match(BitVector(bv.words, rank, bv.nbits, None), 2)


def _problems(ix: NarrowLoudsIndex, xp=None) -> str | None:
    """What the cheap and the full checks say about ``ix`` (an exception's type and text where one escapes),
    with the LOUDS pass level by level on ``xp`` where given (as on the GPU)."""
    try:
        problem, layout = checks.layout_problem(ix)
        return problem or verify_run.content_problem(ix, layout, 3, xp=xp)
    except Exception as e:  # noqa: BLE001 - compared, not hidden: both settings must raise the same
        return f"{type(e).__name__}: {e}"


_FUZZ_ARRAYS = ["louds.words", "louds.rank", "terminal.words", "terminal.rank", "linked.words", "hi_flag.words",
                "labels_hi.words", "suffix.words", "link_starts.words", "keyword_ids.words"]


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(st.sampled_from(_FUZZ_ARRAYS), st.integers(0, 10**6), st.integers(0, 63))
def test_tiny_pieces_find_the_same_problems(name, where, bit):
    """Any one bit of any array flipped: the checks in the smallest pieces (cut at every parent, every
    value, every block), and with the LOUDS pass level by level, say exactly what they say in the default
    pieces."""
    rng = np.random.default_rng(3)
    kws = [rng.integers(0, 70_000, size=int(rng.integers(1, 6))).tolist() for _ in range(400)]
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    bad = _flipped(ix, name, where, bit)
    default = _problems(bad)
    assert _problems(bad, np) == default  # the GPU path's code (whole levels, scans beside it) on numpy
    with pytest.MonkeyPatch.context() as mp:
        for module, const, value in [(louds_pass, "CHUNK_NODES", 1), (louds_pass, "PIECE_BITS", 1),
                                     (louds_pass, "SAMPLE_NODES", 1), (checks, "RANK_CHUNK_WORDS", 16),
                                     (checks, "HINT_CHUNK", 1),
                                     (structure, "CHILD_CHUNK_WORDS", 1), (structure, "ID_CHUNK", 1)]:
            mp.setattr(module, const, value)
        mp.setattr("flashtrie.index.packed.PART_VALUES", 1)
        assert _problems(bad) == default


def _both_passes(xp, kws, limit=None, terminal_off=None):
    """(threads' facts, whole-level facts on ``xp``) of the trie of ``kws`` (one leaf's keyword end cleared)."""
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    _, layout = checks.layout_problem(ix)
    terminal = ix.terminal
    if terminal_off is not None:
        bits = terminal.to_bools()
        bits[np.flatnonzero(bits)[terminal_off % int(bits.sum())]] = False
        terminal = BitVector.from_bools(bits)
    args = (ix.louds, ix.linked, terminal, layout.tails, layout.levels, limit or ix.max_keyword_length)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(louds_pass, "PIECE_BITS", 7)  # several pieces per level on the threads
        cpu = louds_pass.louds_facts(*args, 2, has_children=True)
    return cpu, louds_levels.louds_facts_levels(xp, *args, has_children=True)


def _same(a, b) -> None:
    assert (a.max_degree, a.max_degree_nonroot, a.longest, a.leaf_not_end) == \
        (b.max_degree, b.max_degree_nonroot, b.longest, b.leaf_not_end)
    np.testing.assert_array_equal(a.has_children, b.has_children)


@settings(max_examples=80, deadline=None)
@given(keyword_lists, st.one_of(st.none(), st.integers(1, 3)), st.one_of(st.none(), st.integers(0, 10**6)))
def test_whole_level_pass_matches_the_threads(kws, limit, terminal_off):
    """The GPU path's code on numpy: the same facts as the threads' pieces, also for a limit the trie
    passes and for a leaf that ends no keyword."""
    _same(*_both_passes(np, kws, limit, terminal_off))


@pytest.mark.gpu
@settings(max_examples=40, deadline=None)
@given(keyword_lists, st.one_of(st.none(), st.integers(1, 3)), st.one_of(st.none(), st.integers(0, 10**6)))
def test_whole_level_pass_on_the_gpu_matches_the_threads(kws, limit, terminal_off):
    cupy = pytest.importorskip("cupy")
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001 - no driver or no device
        pytest.skip("no usable CUDA device")
    _same(*_both_passes(cupy, kws, limit, terminal_off))


def test_verify_device_is_checked_and_cpu_and_auto_agree(tmp_path):
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2, 3], [1, 4], [5]]))
    ix.save(tmp_path / "a.ftrie")
    with pytest.raises(InputError, match="verify_device: expected one of"):
        NarrowLoudsIndex.load(tmp_path / "a.ftrie", verify_device="tpu")
    t_cpu: dict[str, float] = {}
    a = NarrowLoudsIndex.load(tmp_path / "a.ftrie", verify_device="cpu", timings=t_cpu)
    b = NarrowLoudsIndex.load(tmp_path / "a.ftrie", verify_device="auto")
    assert "LOUDS pass (degrees, leaves, longest keyword)" in t_cpu
    assert a.meta == b.meta


def test_verify_device_is_checked_even_without_verify(tmp_path):
    NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2], [3]])).save(tmp_path / "a.ftrie")
    with pytest.raises(InputError, match="verify_device: expected one of"):
        NarrowLoudsIndex.load(tmp_path / "a.ftrie", verify=False, verify_device="tpu")


def test_auto_keeps_small_indexes_on_the_cpu_and_gpu_names_its_argument(tmp_path, monkeypatch):
    """'auto' below `VERIFY_GPU_MIN_NODES` never starts cupy; 'gpu' without it is a `DeviceError` that names
    ``verify_device`` and the way out; at the threshold 'auto' asks for cupy and falls back without it."""
    from flashtrie import arrays
    from flashtrie.errors import DeviceError

    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2, 3], [1, 4], [5]]))
    ix.save(tmp_path / "a.ftrie")
    asked: list[int] = []

    def no_cupy():
        asked.append(1)
        raise DeviceError("the GPU passes need cupy (faked); install it")

    monkeypatch.setattr(arrays, "cupy_module", no_cupy)
    t: dict[str, float] = {}
    NarrowLoudsIndex.load(tmp_path / "a.ftrie", verify_device="auto", timings=t)
    assert asked == [] and "LOUDS pass (degrees, leaves, longest keyword)" in t
    with pytest.raises(DeviceError, match="verify_device 'gpu' needs cupy.*verify_device='cpu' or 'auto'"):
        NarrowLoudsIndex.load(tmp_path / "a.ftrie", verify_device="gpu")
    monkeypatch.setattr(checks, "VERIFY_GPU_MIN_NODES", ix.num_nodes)
    NarrowLoudsIndex.load(tmp_path / "a.ftrie", verify_device="auto")
    assert len(asked) == 2


def test_gpu_out_of_memory_falls_back_only_for_auto(monkeypatch):
    """A `MemoryError` of the GPU pass: 'auto' verifies on the CPU (same verdict), 'gpu' is a `DeviceError`."""
    from flashtrie.errors import DeviceError

    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2, 3], [1, 4], [5]]))

    def oom(*_args):
        raise MemoryError("out of memory (faked)")

    monkeypatch.setattr(verify_run, "louds_facts_levels", oom)
    _, layout = checks.layout_problem(ix)
    assert verify_run.content_problem(ix, layout, xp=np) is None
    with pytest.raises(DeviceError, match="ran out of memory"):
        verify_run.content_problem(ix, layout, xp=np, xp_required=True)


def test_a_bad_leaf_is_refused_on_every_verify_device(tmp_path):
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2], [1, 3], [4]]), ids="index")
    bits = ix.terminal.to_bools()
    leaf = int(np.flatnonzero(bits)[-1])
    bits[leaf] = False
    meta = dict(ix.meta, num_unique=ix.num_unique - 1, num_keywords=ix.num_keywords - 1)
    _rebuilt(ix, terminal=BitVector.from_bools(bits), meta=meta).save(tmp_path / "bad.ftrie")
    for device in ("cpu", "auto"):
        with pytest.raises(IndexFormatError, match=f"node {leaf} is a leaf that ends no keyword"):
            NarrowLoudsIndex.load(tmp_path / "bad.ftrie", verify_device=device)


@pytest.mark.gpu
@settings(max_examples=40, deadline=None)
@given(st.sampled_from(_FUZZ_ARRAYS), st.integers(0, 10**6), st.integers(0, 63))
def test_gpu_pass_finds_the_same_problems(name, where, bit):
    """One flipped bit anywhere: the verdict with the LOUDS pass on the GPU is the threads' verdict."""
    cupy = pytest.importorskip("cupy")
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001 - no driver or no device
        pytest.skip("no usable CUDA device")
    rng = np.random.default_rng(4)
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences(
        [rng.integers(0, 70_000, size=int(rng.integers(1, 6))).tolist() for _ in range(400)]))
    bad = _flipped(ix, name, where, bit)
    assert _problems(bad, cupy) == _problems(bad)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), max_size=300), st.integers(0, 32), st.data())
def test_packed_value_ranges_match_single_reads(values, extra, data):
    """`PackedInts.values` (a range decoded from its period, as the child checks read wide labels) gives what
    `get` reads one by one, for any start, length and width; a range past the end is refused."""
    width = min(32, max(1, max(values, default=0).bit_length()) + extra % 3)
    pk = PackedInts.from_values(np.array(values, dtype=np.int64), width=width)
    start = data.draw(st.integers(0, len(values)))
    count = data.draw(st.integers(0, len(values) - start))
    want = pk.get(np.arange(start, start + count, dtype=np.int64))
    np.testing.assert_array_equal(pk.values(start, count), want)
    with pytest.raises(IndexError):
        pk.values(start, len(values) - start + 1)
