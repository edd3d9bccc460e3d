"""`GpuTrieStepper` against the numpy `TrieStepper`: exactly the same states, tokens and masks.

Marked ``gpu`` and skipped where cuda.core, PyTorch with CUDA, or a CUDA device is missing.
"""

from __future__ import annotations

import random
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stepwise_oracle import DictTrie, pick_token
from strategies import keyword_lists

from flashtrie import InputError, KeywordSet, NarrowLoudsIndex
from flashtrie.stepwise import StepStates, TrieStepper

pytestmark = pytest.mark.gpu
EOS = 4294967290


@lru_cache(maxsize=1)
def _gpu_reason() -> str | None:
    try:
        import torch
        from cuda.core import Device

        if not torch.cuda.is_available():
            return "torch sees no CUDA device"
        Device(0).set_current()
    except Exception as e:  # no cuda.core, no torch, no driver, no device
        return f"no usable CUDA device: {type(e).__name__}: {e}"
    return None


@pytest.fixture(autouse=True)
def gpu_ok() -> None:
    reason = _gpu_reason()
    if reason is not None:
        pytest.skip(reason)


def make(kws: list[list[int]]):
    from flashtrie.gpu_impl.stepwise import GpuTrieStepper

    index = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    return TrieStepper(index), GpuTrieStepper(index)


def host(states: StepStates) -> StepStates:
    return StepStates(states.node.cpu().numpy(), states.off.cpu().numpy())


def dev(states: StepStates):
    import torch

    return StepStates(torch.as_tensor(states.node, device="cuda"), torch.as_tensor(states.off, device="cuda"))


def same_states(a: StepStates, g: StepStates) -> None:
    h = host(g)
    assert np.array_equal(a.node, h.node) and np.array_equal(a.off, h.off), (a, h)


def compare_queries(cpu: TrieStepper, gpu, s: StepStates, vocab: int | None, eos) -> None:
    import torch

    d = dev(s)
    offsets, tokens = cpu.allowed(s)
    go, gt = gpu.allowed(d)
    assert np.array_equal(go.cpu().numpy(), offsets) and np.array_equal(gt.cpu().numpy(), tokens.astype(np.int64))
    for cap in (0, 1, 3):
        c1, t1 = cpu.allowed_padded(s, cap)
        c2, t2 = gpu.allowed_padded(d, cap)
        assert np.array_equal(c2.cpu().numpy(), c1) and np.array_equal(t2.cpu().numpy(), t1)
    assert np.array_equal(gpu.ends(d).cpu().numpy(), cpu.ends(s))
    if vocab is None:
        return
    allow = cpu.mask(s, vocab, eos, additive=False)
    assert np.array_equal(gpu.mask(d, vocab, eos, additive=False).cpu().numpy(), allow)
    logits = np.random.default_rng(len(s)).normal(size=(len(s), vocab)).astype(np.float32)
    logits[:, ::7] = -0.0
    logits[:, 1::11] = np.inf
    logits[:, 2::13] = np.nan
    want = logits.copy()
    cpu.mask(s, vocab, eos, out=want)
    assert np.array_equal(want.view(np.uint32), np.where(allow, logits, np.float32(-np.inf)).view(np.uint32))
    got = torch.as_tensor(logits, device="cuda")
    assert gpu.mask(d, vocab, eos, out=got) is got  # in place: allowed entries keep their bits, the rest -inf
    assert np.array_equal(got.cpu().numpy().view(np.uint32), want.view(np.uint32))
    assert gpu.dead_count == cpu.dead_count


@settings(max_examples=30)
@given(keyword_lists(max_keywords=10, max_length=6), st.integers(0, 2**32 - 1), st.integers(1, 6))
def test_walks_match_numpy(kws, seed, n):
    """Random walks (valid children, EOS, wrong and far tokens; tokens near 2**32): every query agrees."""
    import torch

    rnd = random.Random(seed)
    trie = DictTrie(kws)
    cpu, gpu = make(kws)
    alphabet = sorted({x for kw in kws for x in kw})
    eos = (EOS,) if rnd.random() < 0.7 else (EOS, EOS + 2)
    s, hist, cols = cpu.start(n), [()] * n, []
    same_states(s, gpu.start(n))
    for _ in range(max(len(k) for k in kws) + 2):
        compare_queries(cpu, gpu, s, None, eos)
        x = np.array([pick_token(rnd, trie, h, alphabet, eos) for h in hist], dtype=np.int64)
        cols.append(x)
        nxt = cpu.advance(s, x, eos)
        same_states(nxt, gpu.advance(dev(s), torch.as_tensor(x, device="cuda"), eos))
        if (x < 2**31).all():
            same_states(nxt, gpu.advance(dev(s), torch.as_tensor(x.astype(np.int32), device="cuda"), eos))
        hist = [trie.advance(h, int(t), eos) for h, t in zip(hist, x, strict=True)]
        s = nxt
    ids = np.stack(cols, 1)
    begin = np.array([rnd.randrange(0, 3) for _ in range(n)], dtype=np.int64)
    t_ids = torch.as_tensor(ids, device="cuda")
    same_states(cpu.walk(ids, eos_token_id=eos), gpu.walk(t_ids, eos_token_id=eos))
    same_states(cpu.walk(ids, begin=begin, end=ids.shape[1] - 1, eos_token_id=eos),
                gpu.walk(t_ids, begin=torch.as_tensor(begin, device="cuda"), end=ids.shape[1] - 1, eos_token_id=eos))


@settings(max_examples=30)
@given(keyword_lists(max_keywords=10, max_length=6), st.integers(0, 2**32 - 1))
def test_masks_match_numpy(kws, seed):
    """Masks over vocabularies of one and of many kernel chunks (4096 entries each by default)."""
    import torch

    rnd = random.Random(seed)
    vocab = rnd.choice([60, 70_001, 100_003])
    small = [[x % (vocab - 5) for x in kw] for kw in kws]
    eos = (vocab - 2,)
    trie = DictTrie(small)
    cpu, gpu = make(small)
    from flashtrie.gpu_impl.stepwise import GpuTrieStepper

    # advance_mask on a stepper with a small child table and root table (or none: they change no result),
    # against its own numpy stepper (the dead counts of cpu and gpu stay comparable)
    tab = GpuTrieStepper(cpu.index, child_table=rnd.choice([0, 1, 2]), root_table=rnd.choice([0, 1, 7, 1 << 22]))
    ref = TrieStepper(cpu.index)
    alphabet = sorted({x for kw in small for x in kw})
    s, hist, cols = cpu.start(5), [()] * 5, []
    for _ in range(max(len(k) for k in small) + 1):
        compare_queries(cpu, gpu, s, vocab, eos)
        x = np.array([pick_token(rnd, trie, h, alphabet, eos) % vocab for h in hist], dtype=np.int64)
        nxt = cpu.advance(s, x, eos)
        same_states(nxt, gpu.advance(dev(s), torch.as_tensor(x, device="cuda"), eos))
        new, m = tab.advance_mask(dev(s), torch.as_tensor(x, device="cuda"), vocab, eos, additive=False)
        same_states(nxt, new)
        assert np.array_equal(m.cpu().numpy(), ref.advance_mask(s, x, vocab, eos, additive=False)[1])
        logits = np.random.default_rng(seed % 1000).normal(size=(len(s), vocab)).astype(np.float32)
        got = torch.as_tensor(logits, device="cuda")
        tab.advance_mask(dev(s), torch.as_tensor(x, device="cuda"), vocab, eos, out=got)
        ref.advance_mask(s, x, vocab, eos, out=logits)
        assert np.array_equal(got.cpu().numpy().view(np.uint32), logits.view(np.uint32))
        hist = [trie.advance(h, int(t), eos) for h, t in zip(hist, x, strict=True)]
        s = nxt
        cols.append(x)
    ids = np.stack(cols, 1)
    begin = np.array([rnd.randrange(0, 3) for _ in range(5)], dtype=np.int64)
    t_ids, t_begin = torch.as_tensor(ids, device="cuda"), torch.as_tensor(begin, device="cuda")
    want = cpu.walk_mask(ids, vocab, eos, begin=begin, additive=False)
    assert np.array_equal(gpu.walk_mask(t_ids, vocab, eos, begin=t_begin, additive=False).cpu().numpy(), want)
    logits = np.random.default_rng(seed % 999).normal(size=(5, vocab)).astype(np.float32)
    got = torch.as_tensor(logits, device="cuda")
    gpu.walk_mask(t_ids, vocab, eos, begin=1, end=ids.shape[1] - 1, out=got)
    cpu.walk_mask(ids, vocab, eos, begin=1, end=ids.shape[1] - 1, out=logits)
    assert np.array_equal(got.cpu().numpy().view(np.uint32), logits.view(np.uint32))


def test_huge_fanout_forced_prefixes_and_streams():
    """Thousands of siblings across chunk and 16-bit boundaries, forced prefixes, a side stream, CuPy."""
    import torch

    rng = np.random.default_rng(2)
    roots = np.unique(rng.integers(0, 200_000, size=5000)).tolist()
    under = np.unique(rng.integers(60_000, 140_000, size=3000)).tolist()
    kws = [[r] for r in roots] + [[5, 6, 7, u] for u in under] + [[5, 6, 7], [9, 8, 7, 6, 5, 4]]
    cpu, gpu = make(kws)
    prefixes = [[], [5], [5, 6], [5, 6, 7], [9, 8, 7], [5, 7], [9, 8, 7, 6, 5, 4], [123456789]]
    s = cpu.start_from_prefixes(prefixes)
    same_states(s, gpu.start_from_prefixes(prefixes))
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        compare_queries(cpu, gpu, s, 200_001, 200_000)
    torch.cuda.synchronize()
    st1 = cpu.start_from_prefixes([[5, 6, 7]] * len(under))
    x = np.array(under, dtype=np.int64)
    same_states(cpu.advance(st1, x), gpu.advance(dev(st1), torch.as_tensor(x, device="cuda")))
    cupy = pytest.importorskip("cupy")
    from flashtrie.gpu_impl.stepwise import GpuTrieStepper

    g2 = GpuTrieStepper(cpu.index, array_module="cupy")
    d = StepStates(cupy.asarray(s.node), cupy.asarray(s.off))
    m = g2.mask(d, 200_001, 200_000, additive=False)
    assert isinstance(m, cupy.ndarray)
    assert np.array_equal(cupy.asnumpy(m), cpu.mask(s, 200_001, 200_000, additive=False))


def test_shares_a_searchers_index_and_refuses_bad_input():
    import torch
    from flashtrie.gpu_impl import GpuSearcher
    from flashtrie.gpu_impl.stepwise import GpuTrieStepper

    index = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2, 3], [1, 4], [300]]))
    gpu = GpuTrieStepper.from_searcher(GpuSearcher(index))
    cpu = TrieStepper(index)
    s = cpu.start_from_prefixes([[1], [1, 2], [], [7]])
    compare_queries(cpu, gpu, s, 400, 399)
    d = dev(s)
    with pytest.raises(InputError, match="not below vocab_size"):
        gpu.mask(d, 300, 0)
    with pytest.raises(InputError, match="occurs in the trie"):
        gpu.mask(d, 400, 4)
    with pytest.raises(InputError, match="out"):
        gpu.mask(d, 400, 0, out=torch.zeros(4, 399, device="cuda"))
    with pytest.raises(InputError, match="dtype"):
        gpu.advance(d, torch.zeros(4, dtype=torch.float32, device="cuda"))
    with pytest.raises(InputError, match="CUDA tensor"):
        gpu.advance(d, torch.zeros(4, dtype=torch.int64))
    with pytest.raises(InputError, match="child_table"):
        GpuTrieStepper(index, child_table=-1)
    with pytest.raises(InputError, match="root_table"):
        GpuTrieStepper(index, root_table=True)


def test_cuda_graph_capture_of_a_step():
    """mask + advance need no host synchronisation: a CUDA graph captures and replays a step."""
    import torch

    cpu, gpu = make([[1, 2, 3], [1, 2], [4, 5], [6]])
    s0 = cpu.start_from_prefixes([[1], [], [4], [1, 2]])
    d = dev(s0)
    tok = torch.tensor([2, 6, 5, 3], device="cuda")
    logits = torch.zeros(4, 10, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on the capture stream (host checks and caches run once)
        gpu.mask(d, 10, 9, out=logits)
        gpu.advance(d, tok, 9)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side), torch.cuda.graph(graph, stream=side):
        logits.zero_()
        gpu.mask(d, 10, 9, out=logits)
        nxt = gpu.advance(d, tok, 9)
    graph.replay()
    torch.cuda.synchronize()
    want = np.zeros((4, 10), dtype=np.float32)
    cpu.mask(s0, 10, 9, out=want)
    assert np.array_equal(logits.cpu().numpy(), want)
    same_states(cpu.advance(s0, tok.cpu().numpy(), 9), nxt)


def test_masks_do_not_depend_on_chunk_blocks_per_row_or_alignment():
    """Chunk size, blocks per row, the child search and the output's offset and row stride change no bit."""
    import torch
    from flashtrie.gpu_impl.stepwise import GpuTrieStepper

    rng = np.random.default_rng(5)
    v, eos = 20_011, 20_010
    roots = np.unique(rng.integers(0, 20_000, size=6000)).tolist()
    kws = [[r] for r in roots] + [[roots[0], int(x)] for x in np.unique(rng.integers(0, 20_000, size=900))]
    kws += [[7, 7, 7, 7], list(range(3000, 19000, 1000))]
    cpu, gpu = make(kws)
    s = cpu.start_from_prefixes([[], [roots[0]], [7, 7], [7, 7, 7, 7], [3000, 4000], [123], [], [roots[1]]])
    x = np.array([roots[0], 5, 7, eos, 5000, 1, roots[2], eos], dtype=np.int64)
    logits = rng.normal(size=(len(s), v)).astype(np.float32)
    logits[:, ::5] = -0.0
    want = logits.copy()
    cpu.mask(s, v, eos, out=want)
    nxt, want_f = cpu.advance_mask(s, x, v, eos, out=logits.copy())
    want_b = cpu.mask(s, v, eos, additive=False)
    d, tok = dev(s), torch.as_tensor(x, device="cuda")
    for g in (gpu, GpuTrieStepper(cpu.index, chunk=1024), GpuTrieStepper(cpu.index, child_table=0, root_table=0)):
        for bpr, how in ((None, "block"), (1, "select"), (3, "block"), (10_000, "select")):
            g.blocks_per_row, g.child_search = bpr, how
            for off in (0, 1, 3):
                base = torch.zeros(len(s), v + 9, device="cuda")
                out = base[:, off:off + v]
                out.copy_(torch.as_tensor(logits, device="cuda"))
                g.mask(d, v, eos, out=out)
                assert np.array_equal(out.cpu().numpy().view(np.uint32), want.view(np.uint32)), (g.chunk, bpr, off)
                out.copy_(torch.as_tensor(logits, device="cuda"))
                new, _ = g.advance_mask(d, tok, v, eos, out=out)
                same_states(nxt, new)
                assert np.array_equal(out.cpu().numpy().view(np.uint32), want_f.view(np.uint32)), (g.chunk, bpr, off)
                assert not base[:, :off].any() and not base[:, off + v:].any()  # nothing outside `out`
                bb = torch.zeros(len(s), v + 21, dtype=torch.bool, device="cuda")
                g.mask(d, v, eos, out=bb[:, off:off + v], additive=False)
                assert np.array_equal(bb[:, off:off + v].cpu().numpy(), want_b), (g.chunk, bpr, off)
                assert not bb[:, :off].any() and not bb[:, off + v:].any()


def test_small_and_exact_child_windows():
    """Dense sibling labels (every token below the vocabulary: one-label windows), a few siblings, tokens at the
    window's ends: the one-thread search of a small window and the block-wide one give numpy's states."""

    v = 3001
    dense = [[x] for x in range(v - 1)] + [[x, y] for x in (0, 1, v - 2) for y in range(0, v - 1, 7)]
    few = [[2, y] for y in range(5)] + [[3, y, 1] for y in (0, 9, 10, 2999)]
    cpu, gpu = make(dense + few)
    eos = v - 1
    prefixes = [[], [], [], [], [0], [1], [v - 2], [2], [2], [3], [3], [3, 10], [], [2]]
    x = np.array([0, 1, v - 2, 17, 7, 14, 2996, 4, 5, 9, 11, 1, eos, eos], dtype=np.int64)
    same_steps(cpu, gpu, prefixes, x, v, eos, seed=3)


def same_steps(cpu: TrieStepper, gpu, prefixes: list[list[int]], x: np.ndarray, v: int, eos: int, seed: int) -> None:
    """From the states of ``prefixes`` (each at most one token), tokens ``x``: advance, advance_mask into random
    logits and walk_mask of [prefix token, x] give numpy's states, bits and bool mask."""
    import torch

    s = cpu.start_from_prefixes(prefixes)
    d, tok = dev(s), torch.as_tensor(x, device="cuda")
    same_states(cpu.advance(s, x, eos), gpu.advance(d, tok, eos))
    logits = np.random.default_rng(seed).normal(size=(len(s), v)).astype(np.float32)
    got = torch.as_tensor(logits, device="cuda")
    nxt, want = cpu.advance_mask(s, x, v, eos, out=logits.copy())
    new, _ = gpu.advance_mask(d, tok, v, eos, out=got)
    same_states(nxt, new)
    assert np.array_equal(got.cpu().numpy().view(np.uint32), want.view(np.uint32))
    ids = np.array([[p[0] if p else 0, t] for p, t in zip(prefixes, x, strict=True)], dtype=np.int64)
    begin = np.array([1 if not p else 0 for p in prefixes], dtype=np.int64)
    want_b = cpu.walk_mask(ids, v, eos, begin=begin, additive=False)
    got_b = gpu.walk_mask(torch.as_tensor(ids, device="cuda"), v, eos, begin=torch.as_tensor(begin, device="cuda"),
                          additive=False)
    assert np.array_equal(got_b.cpu().numpy(), want_b)


def test_dense_children_at_the_child_window_end():
    """Children with every label 0 .. k - 1, so that the token's child is its window's last candidate, in windows
    wider than one thread's and than one block round's: at the root without the root table and below it, by
    advance, advance_mask and walk_mask (tests/test_step_kernel_emulated.py has the same case on the CPU)."""
    from flashtrie.gpu_impl.stepwise import GpuTrieStepper

    v, eos = 32_000, 31_999
    kws = [[y] for y in range(20)] + [[5, y] for y in range(20)] + [[7, y] for y in range(600)]
    cpu, gpu = make(kws)
    prefixes = [[]] * 20 + [[5]] * 20 + [[7]] * 12
    x = np.array(list(range(20)) * 2 + [0, 8, 9, 255, 256, 257, 300, 511, 598, 599, 600, 31_998], dtype=np.int64)
    for g in (gpu, GpuTrieStepper(cpu.index, root_table=0), GpuTrieStepper(cpu.index, child_table=0, root_table=0)):
        same_steps(cpu, g, prefixes, x, v, eos, seed=5)


def test_root_table_holds_each_root_childs_decoded_state():
    """The root table (kernels/step.cu RootKid, 8 uint32 a label): per root label below its length, the child
    and its decode (at a node: children, wide-label start, rank, end of a keyword, and zeros for a node without
    children; inside an edge: the next token); zeros where the root has no child; its length is the cap or the
    largest root label + 1."""
    from flashtrie.gpu_impl.stepwise import GpuTrieStepper

    kws = [[3], [3, 4, 5], [9, 1, 2, 3], [70_000, 1], [70_000, 80_000], [70_000, 2], [12], [12, 13]]
    index = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    first, end = (int(a[0]) for a in index.child_range(np.zeros(1, np.int64)))
    kids = np.arange(first, end, dtype=np.int64)
    labels = index.labels(kids).astype(np.int64)
    for cap, n in ((1 << 22, 70_001), (10, 10), (0, 0)):
        g = GpuTrieStepper(index, root_table=cap)
        assert g.root_table == n
        rt = g._root_table.cpu().numpy().view(np.uint32)[:n]
        want = np.zeros((n, 8), np.uint32)
        for c, x in zip(kids, labels, strict=True):
            if x >= n:
                continue
            f, e = (int(a[0]) for a in index.child_range(np.array([c])))
            if index.edge_lengths(np.array([c]))[0] == 1:
                r0, re = index.hi_flag.rank1(np.array([f, e]))
                rng = [f, e - (re - r0), e, r0] if e > f else [0, 0, 0, 0]
                want[x] = [c, 0, *rng, 0, int(index.is_terminal(np.array([c]))[0])]
            else:
                want[x] = [c, 1, 0, 0, 0, 0, index.edge_tokens(np.array([c]), np.array([1]))[0], 0]
        assert np.array_equal(rt, want), cap


def test_mixed_vectors_in_every_lane():
    """Rows whose 16-byte vectors nearly all mix allowed and disallowed entries (up to 32 mixed vectors a warp;
    a node below SCAN_MAX children too, whose kept logits are stored back), at every row offset: numpy's bits,
    nothing written outside out."""
    import torch
    from flashtrie.gpu_impl.stepwise import GpuTrieStepper

    rng = np.random.default_rng(4)
    v, eos = 9001, 9000
    kws = [[x] for x in range(1, 8999, 4)] + [[2, y] for y in range(0, 8999, 3)]
    kws += [[7, int(z)] for z in np.flatnonzero(rng.random(8999) < 0.5)] + [[7, 1, 2]]
    # [3]: 1,000 children, one in every vector (the scan, whose logits are kept and stored back); [11]: a
    # keyword with 400 children (the scan where EOS is allowed, stored entry by entry)
    kws += [[3, y] for y in range(1, 4000, 4)] + [[11]] + [[11, y] for y in range(0, 800, 2)]
    cpu, gpu = make(kws)
    s = cpu.start_from_prefixes([[], [2], [7], [7, 1], [1], [], [3], [], [11]])
    x = np.array([5, 3, 1, 2, eos, 9, 1, 3, 0], dtype=np.int64)
    logits = rng.normal(size=(len(s), v)).astype(np.float32)
    want, want_f = logits.copy(), logits.copy()
    cpu.mask(s, v, eos, out=want)
    nxt, _ = cpu.advance_mask(s, x, v, eos, out=want_f)
    d, tok = dev(s), torch.as_tensor(x, device="cuda")
    for g in (gpu, GpuTrieStepper(cpu.index, chunk=1024, root_table=0)):
        for off in (0, 1, 2, 3):
            base = torch.zeros(len(s), v + 9, device="cuda")
            out = base[:, off:off + v]
            out.copy_(torch.as_tensor(logits, device="cuda"))
            g.mask(d, v, eos, out=out)
            assert np.array_equal(out.cpu().numpy().view(np.uint32), want.view(np.uint32)), (g.chunk, off)
            out.copy_(torch.as_tensor(logits, device="cuda"))
            new, _ = g.advance_mask(d, tok, v, eos, out=out)
            same_states(nxt, new)
            assert np.array_equal(out.cpu().numpy().view(np.uint32), want_f.view(np.uint32)), (g.chunk, off)
            assert not base[:, :off].any() and not base[:, off + v:].any()


def test_walk_bounds_outside_the_row_give_dead():
    """Device begin / end outside [0, L] (not checked on the host: that would need a synchronisation): DEAD rows
    from walk, and walk_mask masks them as numpy masks DEAD states; begin > end walks nothing."""
    import torch

    cpu, gpu = make([[1, 2, 3], [1, 4], [5]])
    ids = np.array([[1, 2, 3]] * 5, dtype=np.int64)
    begin = np.array([0, -1, 4, 2**62, 3], dtype=np.int64)
    end = np.array([2, 2, 3, 3, 1], dtype=np.int64)
    t = {k: torch.as_tensor(a, device="cuda") for k, a in (("ids", ids), ("b", begin), ("e", end))}
    ok = cpu.walk(ids[[0, 4]], begin=begin[[0, 4]], end=end[[0, 4]])
    want = StepStates(np.array([ok.node[0], -1, -1, -1, ok.node[1]]), np.array([ok.off[0], 0, 0, 0, ok.off[1]]))
    same_states(want, gpu.walk(t["ids"], begin=t["b"], end=t["e"]))
    m = gpu.walk_mask(t["ids"], 10, 9, begin=t["b"], end=t["e"], additive=False)
    assert np.array_equal(m.cpu().numpy(), cpu.mask(want, 10, 9, additive=False))


def test_kernels_take_the_view_and_the_layout_structs():
    """Every step kernel's parameters, as the driver reads them from the cubin: the view's address, then the
    structs of gpu_impl/layout.py back to back (what `step_launch` packs), the mask kernels' with StepMask."""
    from flashtrie.gpu_impl.layout import STEP_MASK, STEP_ROWS, STEP_TABLES

    _, g = make([[1, 2], [3]])
    head = [(0, 8), (8, STEP_TABLES.size), (8 + STEP_TABLES.size, STEP_ROWS.size)]
    for name, kernel in g._k.items():
        want = head + ([(head[-1][0] + STEP_ROWS.size, STEP_MASK.size)] if name.endswith("mask") else [])
        got = [(int(a.offset), int(a.size)) for a in kernel.arguments_info]
        assert got == want, name


def test_the_gpu_stepper_is_a_stepper_on_the_callers_stream() -> None:
    """The protocol, an index shared by its public address, and launches on a stream the caller names
    (``__cuda_stream__``) or makes current."""
    import torch
    from flashtrie.gpu_impl.stepwise import GpuTrieStepper

    from flashtrie.stepwise import Stepper

    cpu, gpu = make([[5, 6], [5, 7, 8], [9]])
    assert isinstance(gpu, Stepper) and gpu.checked_eos(1) == (1,)
    shared = GpuTrieStepper.from_searcher(type("Shared", (), {"index": cpu.index, "index_address": gpu.index_address,
                                                              "device": gpu.device})())
    assert shared.index_address == gpu.index_address
    ids = np.array([[5, 7], [9, 1], [5, 30]])
    want = cpu.mask(cpu.walk(ids, eos_token_id=1), 32, 1, additive=False)
    dev_ids = torch.as_tensor(ids, device="cuda")
    torch.cuda.synchronize()  # the ids are on the device before another stream reads them
    side = torch.cuda.Stream()
    shared.stream = side
    got = shared.walk_mask(dev_ids, 32, 1, additive=False)
    side.synchronize()
    assert np.array_equal(got.cpu().numpy(), want)
    shared.stream = None
    with torch.cuda.stream(side):
        got = shared.walk_mask(dev_ids, 32, 1, additive=False)
    side.synchronize()
    assert np.array_equal(got.cpu().numpy(), want)
