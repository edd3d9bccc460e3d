"""kernels/step.cu's logic on the CPU (CI, no GPU): the kernels built for the host with a thread shim
(tests/kernel_emu/), one std::thread per CUDA thread, against the numpy `TrieStepper` on hypothesis cases.

Checks what the kernels compute (indexing, binary searches, chunk bounds, EOS rules), not CUDA itself: the
GPU tests (tests/test_gpu_stepwise.py) compare the real launches.  Skipped where no C++20 compiler is found.
"""

from __future__ import annotations

import ctypes
import random
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from flashtrie.gpu_impl.compile import KERNEL_DIR
from flashtrie.gpu_impl.index_upload import host_index
from flashtrie.gpu_impl.layout import static_asserts
from flashtrie.gpu_impl.step_launch import MASK, ROWS, TABLES, mask_grid
from flashtrie.gpu_impl.step_options import CHUNK
from hypothesis import given, settings
from hypothesis import strategies as st
from stepwise_oracle import DictTrie, pick_token
from strategies import keyword_lists

from flashtrie import InputError, KeywordSet, NarrowLoudsIndex
from flashtrie.index import derived
from flashtrie.stepwise import StepStates, TrieStepper

pytestmark = pytest.mark.slow  # kernels compiled or emulated: minutes on two cores

HERE = Path(__file__).resolve().parent / "kernel_emu"
TH = 64  # threads per emulated block (step_emu.cpp)
U32, U64 = ctypes.c_uint32, ctypes.c_uint64


@lru_cache(maxsize=2)
def _lib(tmp: str, chunk: int) -> ctypes.CDLL | None:
    """step_emu.cpp with the layout checks of gpu_impl/layout.py appended (as compile_kernel appends them)."""
    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        return None
    src = Path(tmp) / "step_emu_checked.cpp"
    src.write_text((HERE / "step_emu.cpp").read_text() + static_asserts())
    out = Path(tmp) / f"libstep_emu_{chunk}.so"
    r = subprocess.run([cxx, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", f"-DFT_STEP_CHUNK={chunk}",
                        f"-I{KERNEL_DIR}", f"-I{HERE}", "-x", "c++", str(src), "-o", str(out)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        if "static assertion failed" in r.stderr:  # the tables and the structs differ: a failure, not a skip
            raise AssertionError(r.stderr)
        return None
    lib = ctypes.CDLL(str(out))
    lib.chunk = chunk
    return lib


@pytest.fixture(scope="module", params=[CHUNK, 1024], ids=["chunk-default", "chunk1024"])
def lib(request, tmp_path_factory):
    lib = _lib(str(tmp_path_factory.mktemp("emu")), request.param)
    if lib is None:
        pytest.skip("no C++20 compiler to build the host emulation of kernels/step.cu")
    return lib


def _p(a: np.ndarray | None) -> int:
    return 0 if a is None else a.ctypes.data


def _vp(a: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(_p(a))


def _b(raw: bytes) -> ctypes.c_char_p:
    return ctypes.c_char_p(raw)


class Emu:
    """The kernels over host copies of the index arrays (each padded like the device upload), with a child
    table of the first ``table`` nodes (None: all of them) and a root table of the root labels below ``root``
    (None: 2**16; labels near 2**32 then take the search), each built by its kernel.  Every kernel gets its
    parameters as on the device: the view, then the structs packed by `flashtrie.gpu_impl.step_launch`."""

    def __init__(self, lib: ctypes.CDLL, ix: NarrowLoudsIndex, table: int | None = None,
                 root: int | None = None) -> None:
        host = host_index(ix)
        self.lib, self.keep, ptrs = lib, [], {}
        for field, a in host.arrays.items():
            b = np.zeros(a.nbytes + 16, dtype=np.uint8)
            b[: a.nbytes] = a.view(np.uint8).ravel()
            self.keep.append(b)
            ptrs[field] = b.ctypes.data
        nwords = derived.flag_word_count(ix.num_nodes)  # the upload's last step: kernels/node_flags.cu
        self.flags = np.full(nwords + 4, 0xDEADBEEF, dtype=np.uint32)
        ptrs["nflags"] = self.flags.ctypes.data
        self.view = host.view_bytes(ptrs)
        lib.emu_node_flags(U32(-(-nwords // TH)), _vp(self.view), _vp(self.flags), U64(nwords))
        self.flags = self.flags[:nwords]
        n = ix.num_nodes if table is None else min(table, ix.num_nodes)
        self.fc = np.zeros(n + 1, np.uint64)
        self.tab = TABLES(fc=0, rt=0, fc_n=0, rt_n=0)
        lib.emu_child_table(U32(-(-(n + 1) // TH)), _vp(self.view), _b(self.tab),
                            _b(ROWS["table"](table=_p(self.fc), n=n)))
        first, end = (int(a[0]) for a in ix.child_range(np.zeros(1, np.int64)))
        top = int(ix.labels(np.array([end - 1]))[0]) + 1 if end > first else 0
        rn = min(1 << 16 if root is None else root, top)
        self.rt = np.zeros((max(rn, 1), 8), np.uint32)  # kernels/step_params.cuh RootKid
        self.tab = TABLES(fc=_p(self.fc), rt=0, fc_n=n, rt_n=0)
        if rn:
            lib.emu_root_table(U32(-(-(end - first) // TH)), _vp(self.view), _b(self.tab),
                               _b(ROWS["table"](table=_p(self.rt), n=rn)))
        self.tab = TABLES(fc=_p(self.fc), rt=_p(self.rt), fc_n=n, rt_n=rn)
        self.rt = self.rt[:rn]

    def _eos(self, e: tuple[int, ...]) -> int:
        a = np.zeros(8, np.int64)
        a[: len(e)] = e
        self.keep.append(a)
        return _p(a)

    def run(self, kernel: str, grid: int, rows: bytes, mask: bytes | None = None) -> None:
        """``ft_step_<kernel>`` over ``grid`` blocks with these rows (and mask)."""
        extra = [] if mask is None else [_b(mask)]
        getattr(self.lib, f"emu_{kernel}")(U32(grid), _vp(self.view), _b(self.tab), _b(rows), *extra)

    def advance(self, s: StepStates, tok: np.ndarray, e: tuple[int, ...]) -> StepStates:
        n = len(s)
        no, oo, tok = np.empty(n, np.int64), np.empty(n, np.int64), np.ascontiguousarray(tok)
        self.run("advance", n, ROWS["advance"](node_in=_p(s.node), off_in=_p(s.off), node_out=_p(no), off_out=_p(oo),
                                               tok=_p(tok), eos=self._eos(e), tok_stride=1, n=n,
                                               tok_is64=tok.dtype == np.int64, n_eos=len(e)))
        return StepStates(no, oo)

    def walk_rows(self, ids: np.ndarray, begin: np.ndarray | None, end: np.ndarray | int,
                  e: tuple[int, ...], no: np.ndarray, oo: np.ndarray) -> bytes:
        """The walk kernel's rows: ``end`` a device array or one column for every row."""
        n, w = ids.shape
        ends = (_p(end), 0) if isinstance(end, np.ndarray) else (0, end)
        return ROWS["walk"](node_out=_p(no), off_out=_p(oo), ids=_p(ids), begin=_p(begin), end=ends[0],
                            eos=self._eos(e), ids_stride=w, width=w, begin_all=0, end_all=ends[1], n=n, n_eos=len(e))

    def walk(self, ids: np.ndarray, begin: np.ndarray, end: int, e: tuple[int, ...]) -> StepStates:
        n = ids.shape[0]
        no, oo = np.empty(n, np.int64), np.empty(n, np.int64)
        self.run("walk", n, self.walk_rows(ids, begin, end, e, no, oo))
        return StepStates(no, oo)

    def walk_mask(self, ids: np.ndarray, begin: np.ndarray, end: int, v: int, e: tuple[int, ...], per_block: int,
                  out: np.ndarray | None = None, extra: int = 0) -> np.ndarray:
        """The fused walk + mask kernel: additive into ``out``, else a bool mask (grid as `mask`)."""
        (n, w), chunks = ids.shape, -(-v // self.lib.chunk)
        bpr = -(-chunks // per_block)
        ob = None if out is not None else np.empty((n, v), np.uint8)
        rows = ROWS["walk_mask"](ids=_p(ids), begin=_p(begin), end=0, eos=self._eos(e), ids_stride=w, width=w,
                                 begin_all=0, end_all=end, n=n, n_eos=len(e))
        mask = MASK(outf=_p(out), outb=_p(ob), dead_count=_p(np.zeros(1, np.uint64)), V=v, row_stride=v, parts=bpr,
                    extra=extra, flags=per_block & 1)
        self.run("walk_mask", n * bpr + extra, rows, mask)
        return out if out is not None else ob.astype(bool)

    def count(self, s: StepStates) -> tuple[np.ndarray, np.ndarray]:
        n = len(s)
        c, en = np.empty(n, np.int64), np.empty(n, np.uint8)
        self.run("count", -(-n // TH), ROWS["count"](node_in=_p(s.node), off_in=_p(s.off), counts=_p(c),
                                                     ends=_p(en), n=n))
        return c, en.astype(bool)

    def padded(self, s: StepStates, cap: int) -> tuple[np.ndarray, np.ndarray]:
        n = len(s)
        c, _ = self.count(s)
        t = np.full((n, cap), -1, np.int64)
        if cap:
            self.run("fill", n, ROWS["fill"](node_in=_p(s.node), off_in=_p(s.off), offsets=0, tokens=_p(t),
                                             cap=cap, n=n))
        return c, t

    def csr(self, s: StepStates) -> tuple[np.ndarray, np.ndarray]:
        n = len(s)
        c, _ = self.count(s)
        offs = np.zeros(n + 1, np.int64)
        offs[1:] = np.cumsum(c)
        t = np.empty(int(offs[-1]), np.int64)
        if t.size:
            self.run("fill", n, ROWS["fill"](node_in=_p(s.node), off_in=_p(s.off), offsets=_p(offs),
                                             tokens=_p(t), cap=0, n=n))
        return offs, t

    def mask(self, s: StepStates, v: int, e: tuple[int, ...], out: np.ndarray | None = None,
             tok: np.ndarray | None = None, per_block: int = 1, flags: int = 1, extra: int = 0,
             parts: int | None = None) -> tuple[np.ndarray, int, StepStates | None]:
        """The mask kernel (tok None) or the fused advance+mask kernel; additive into ``out``, else bool;
        each row in about v / (per_block chunks) equal parts, one a block, the first ``extra`` rows in one part
        more (flags bit 0: child ranges past the table by the block-wide search of the LOUDS zeros, else two
        select0); ``parts`` sets the blocks per row directly."""
        n, chunks = len(s), -(-v // self.lib.chunk)
        bpr = parts or -(-chunks // per_block)
        dc = np.zeros(1, np.uint64)
        ob = None if out is not None else np.empty((n, v), np.uint8)
        mask = MASK(outf=_p(out), outb=_p(ob), dead_count=_p(dc), V=v, row_stride=v, parts=bpr, extra=extra,
                    flags=flags)
        grid = n * bpr + extra
        if tok is None:
            self.run("mask", grid, ROWS["mask"](node_in=_p(s.node), off_in=_p(s.off), eos=self._eos(e), n=n,
                                                n_eos=len(e)), mask)
            new = None
        else:
            no, oo = np.empty(n, np.int64), np.empty(n, np.int64)
            rows = ROWS["advance_mask"](node_in=_p(s.node), off_in=_p(s.off), node_out=_p(no), off_out=_p(oo),
                                        tok=_p(tok), eos=self._eos(e), tok_stride=1, n=n, tok_is64=True,
                                        n_eos=len(e))
            self.run("advance_mask", grid, rows, mask)
            new = StepStates(no, oo)
        return (out if out is not None else ob.astype(bool)), int(dc[0]), new


def _same(a: StepStates, b: StepStates) -> None:
    assert np.array_equal(a.node, b.node) and np.array_equal(a.off, b.off), (a, b)


def _compare(cpu: TrieStepper, emu: Emu, s: StepStates, v: int | None, e: tuple[int, ...], per_block: int = 1,
             extra: int = 0) -> None:
    o1, t1 = cpu.allowed(s)
    o2, t2 = emu.csr(s)
    assert np.array_equal(o1, o2) and np.array_equal(t1.astype(np.int64), t2)
    for cap in (0, 1, 3):
        a, b = cpu.allowed_padded(s, cap), emu.padded(s, cap)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert np.array_equal(cpu.ends(s), emu.count(s)[1])
    if v is None:
        return
    d0 = cpu.dead_count
    m, dead, _ = emu.mask(s, v, e, per_block=per_block, flags=0, extra=extra)  # two select0 for the child range
    assert np.array_equal(cpu.mask(s, v, e, additive=False), m) and dead == cpu.dead_count - d0
    logits = np.random.default_rng(0).normal(size=(len(s), v)).astype(np.float32)
    logits[:, ::7] = -0.0
    logits[:, 3::11] = np.inf
    logits[:, 5::13] = np.nan
    want, got = logits.copy(), logits.copy()
    cpu.mask(s, v, e, out=want)
    emu.mask(s, v, e, out=got, per_block=per_block, flags=1, extra=extra)
    assert np.array_equal(want.view(np.uint32), got.view(np.uint32))


@settings(max_examples=15)
@given(keyword_lists(max_keywords=10, max_length=6), st.integers(0, 2**32 - 1), st.integers(1, 5), st.booleans())
def test_kernels_match_numpy(lib, kws, seed, n, with_mask):
    rnd = random.Random(seed)
    v = None
    if with_mask:  # one or three vocabulary chunks
        v = rnd.choice([60, 70_001])
        kws = [[x % (v - 5) for x in kw] for kw in kws]
        e: tuple[int, ...] = (v - 2,)
    else:  # tokens near 2**32
        e = (4294967290,) if rnd.random() < 0.7 else (4294967290, 4294967292)
    trie = DictTrie(kws)
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    # child table and root table: all, none, some nodes / root labels
    cpu, emu = TrieStepper(ix), Emu(lib, ix, rnd.choice([None, 0, 1, 3]), rnd.choice([None, None, 0, 2]))
    alphabet = sorted({x for kw in kws for x in kw})
    s, hist, cols = cpu.start(n), [()] * n, []
    for _ in range(max(len(k) for k in kws) + 2):
        per_block = rnd.choice([1, 2, 5])
        extra = rnd.randrange(n + 1) if rnd.random() < 0.5 else 0  # rows [0, extra) in one part more
        _compare(cpu, emu, s, v, e, per_block, extra)
        x = np.array([pick_token(rnd, trie, h, alphabet, e) for h in hist], dtype=np.int64)
        if v:
            x %= v
            d0 = cpu.dead_count
            ns, want = cpu.advance_mask(s, x, v, e, additive=False)
            got, dead, gs = emu.mask(s, v, e, tok=x, per_block=per_block, extra=extra)
            _same(ns, gs)
            assert np.array_equal(want, got) and dead == cpu.dead_count - d0
            logits = np.random.default_rng(seed % 97).normal(size=(n, v)).astype(np.float32)
            lw, lg = logits.copy(), logits.copy()
            cpu.advance_mask(s, x, v, e, out=lw)
            emu.mask(s, v, e, out=lg, tok=x, per_block=per_block, flags=1 - (per_block & 1), extra=extra)
            assert np.array_equal(lw.view(np.uint32), lg.view(np.uint32))
        cols.append(x)
        nxt = cpu.advance(s, x, e)
        _same(nxt, emu.advance(s, x, e))
        if (x < 2**31).all():
            _same(nxt, emu.advance(s, x.astype(np.int32), e))
        hist = [trie.advance(h, int(t), e) for h, t in zip(hist, x, strict=True)]
        s = nxt
    ids = np.ascontiguousarray(np.stack(cols, 1))
    begin = np.array([rnd.randrange(0, 3) for _ in range(n)], dtype=np.int64)
    walked = cpu.walk(ids, begin=begin, end=ids.shape[1] - 1, eos_token_id=e)
    _same(walked, emu.walk(ids, begin, ids.shape[1] - 1, e))
    if v:
        per_block = rnd.choice([1, 3])
        extra = rnd.randrange(n + 1)
        got = emu.walk_mask(ids, begin, ids.shape[1] - 1, v, e, per_block, extra=extra)
        assert np.array_equal(got, cpu.mask(walked, v, e, additive=False))
        logits = np.random.default_rng(seed % 89).normal(size=(n, v)).astype(np.float32)
        want, got = logits.copy(), logits.copy()
        cpu.mask(walked, v, e, out=want)
        emu.walk_mask(ids, begin, ids.shape[1] - 1, v, e, per_block, out=got, extra=extra)
        assert np.array_equal(want.view(np.uint32), got.view(np.uint32))


def test_huge_fanout_over_several_chunks(lib):
    """Thousands of siblings spread over 7 vocabulary chunks (binary searches at chunk bounds), wide labels."""
    rng = np.random.default_rng(2)
    roots = np.unique(rng.integers(0, 200_000, size=5000)).tolist()
    under = np.unique(rng.integers(60_000, 140_000, size=3000)).tolist()
    kws = [[r] for r in roots] + [[5, 6, 7, u] for u in under] + [[5, 6, 7], [9, 8, 7, 6, 5, 4],
                                                                   [32767, 32768, 65535, 65536, 131071]]
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    cpu, emu = TrieStepper(ix), Emu(lib, ix)
    s = cpu.start_from_prefixes([[], [5], [5, 6], [5, 6, 7], [9, 8, 7], [5, 7], [9, 8, 7, 6, 5, 4], [123456789],
                                 [32767], [32767, 32768, 65535]])
    _compare(cpu, emu, s, 200_001, (200_000,))
    st1 = cpu.start_from_prefixes([[5, 6, 7]] * len(under))
    x = np.array(under, dtype=np.int64)
    _same(cpu.advance(st1, x), emu.advance(st1, x, ()))


def _flags_match(lib, ix: NarrowLoudsIndex) -> None:
    want = derived.node_flags(ix.louds, ix.linked, ix.terminal, ix.num_nodes)[0]
    got = Emu(lib, ix).flags
    assert np.array_equal(got, want), int(np.flatnonzero(got != want)[0])


@settings(max_examples=25)
@given(keyword_lists(max_keywords=30, max_length=8))
def test_node_flags_kernel_matches_numpy(lib, kws):
    """kernels/node_flags.cu (what the upload runs) gives derived.node_flags' words."""
    _flags_match(lib, NarrowLoudsIndex.build(KeywordSet.from_sequences(kws)))


def test_node_flags_kernel_on_many_blocks_and_a_huge_fanout(lib):
    rng = np.random.default_rng(5)
    kws = [[int(r)] for r in np.unique(rng.integers(0, 2**32 - 1, size=9000))]  # a 9000-way root
    kws += [rng.integers(0, 20, size=int(rng.integers(1, 7))).tolist() for _ in range(6000)]
    kws += [[3, 3, 3, int(u)] for u in range(2000)]  # a 2000-way node under a chain
    _flags_match(lib, NarrowLoudsIndex.build(KeywordSet.from_sequences(kws)))


def test_block_searches_on_huge_fanout(lib):
    """Thousands of siblings (several rounds of the block-wide searches), across chunks and 16-bit labels."""
    rng = np.random.default_rng(3)
    v, e = 150_001, (150_000,)
    roots = np.unique(rng.integers(0, 150_000, size=4000)).tolist()
    under = np.unique(rng.integers(60_000, 140_000, size=2500)).tolist()
    kws = [[r] for r in roots] + [[5, 6, 7, u] for u in under] + [[5, 6, 7], [9, 8, 7, 6, 5, 4]]
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    cpu = TrieStepper(ix)
    s = cpu.start_from_prefixes([[], [5, 6, 7], [5, 6], [9, 8, 7]])
    x = np.array([roots[-1], under[len(under) // 2], 7, 6], dtype=np.int64)
    for per_block, emu in ((7, Emu(lib, ix)), (40, Emu(lib, ix, 0))):  # with and without the child table
        m, _, _ = emu.mask(s, v, e, per_block=per_block, flags=0)
        assert np.array_equal(m, cpu.mask(s, v, e, additive=False))
        ns, want = cpu.advance_mask(s, x, v, e, additive=False)
        got, _, gs = emu.mask(s, v, e, tok=x, per_block=per_block, flags=1)
        _same(ns, gs)
        assert np.array_equal(want, got)
    ids = np.array([[5, 6, 7, under[3]], [5, 6, 7, 1], [0, 0, 5, 6], [0, 9, 8, 7]], dtype=np.int64)
    begin = np.array([0, 0, 2, 1], dtype=np.int64)
    walked = cpu.walk(ids, begin=begin, eos_token_id=e)
    assert np.array_equal(emu.walk_mask(ids, begin, 4, v, e, 9), cpu.mask(walked, v, e, additive=False))


@settings(max_examples=200)
@given(st.integers(0, 5000), st.integers(2, 3_000_000), st.sampled_from([264, 528, 1056]),
       st.sampled_from([1024, 4096, 65536]), st.booleans(), st.sampled_from([None, None, 1, 3, 1000]))
def test_mask_grid_fills_every_sm_alike(n, v, target, chunk, additive, bpr):
    """The host's mask grid (`step_launch.mask_grid`, kernels/step_mask.cuh mask_row): (parts, extra) with the
    first ``extra`` rows in parts + 1 blocks; at least one block a row, at most one per chunk of a row, and by
    default a multiple of the target (4 blocks per SM) wherever the chunks allow."""
    parts, extra = mask_grid(n, v, additive, chunk, bpr, target)
    chunks = -(-(v + (3 if additive else 15)) // chunk)
    assert parts >= 1 and 0 <= extra < max(n, 1) and parts + (extra > 0) <= chunks
    if bpr:
        assert (parts, extra) == (min(bpr, chunks), 0)
    elif n:
        blocks = n * parts + extra
        assert blocks >= n
        assert blocks == target * -(-n // target) or (parts, extra) == (chunks, 0)


def test_more_parts_than_vectors_leave_blocks_without_entries(lib):
    """A row in more parts than it has 16-entry vectors (blocks with empty spans, some rows one part more): the
    states and every entry as numpy's, dead rows counted once."""
    kws = [[1, 2], [1, 3, 4], [5], [6, 7, 8, 9]]
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    cpu, emu = TrieStepper(ix), Emu(lib, ix)
    v, e = 21, (20,)
    s = cpu.start_from_prefixes([[], [1], [1, 3], [6, 7], [5], [6]])
    x = np.array([1, 3, 4, 8, 20, 9], dtype=np.int64)
    for parts, extra in ((3, 0), (5, 2), (9, 6)):
        d0 = cpu.dead_count
        m, dead, _ = emu.mask(s, v, e, parts=parts, extra=extra)
        assert np.array_equal(m, cpu.mask(s, v, e, additive=False)) and dead == cpu.dead_count - d0
        ns, want = cpu.advance_mask(s, x, v, e, additive=False)
        got, _, gs = emu.mask(s, v, e, tok=x, parts=parts, extra=extra)
        _same(ns, gs)
        assert np.array_equal(want, got)
        logits = np.random.default_rng(parts).normal(size=(len(s), v)).astype(np.float32)
        lw, lg = logits.copy(), logits.copy()
        cpu.advance_mask(s, x, v, e, out=lw)
        emu.mask(s, v, e, out=lg, tok=x, parts=parts, extra=extra)
        assert np.array_equal(lw.view(np.uint32), lg.view(np.uint32))


def test_dense_children_at_the_child_window_end(lib):
    """Children with every label 0 .. k - 1 (a window's last candidate, first + x, is the token's child), wider
    than the one-thread window and than a block's one round of candidates: every token's child, at the root
    without a root table and below it, by advance, advance_mask and walk_mask (a search that leaves out the
    window's end gives DEAD)."""
    v, e = 32_000, (31_999,)
    kws = [[y] for y in range(20)] + [[5, y] for y in range(20)] + [[7, y] for y in range(600)]
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    cpu = TrieStepper(ix)
    prefixes = [[]] * 20 + [[5]] * 20 + [[7]] * 12
    x = np.array(list(range(20)) * 2 + [0, 8, 9, 255, 256, 257, 300, 511, 598, 599, 600, 31_998], dtype=np.int64)
    s = cpu.start_from_prefixes(prefixes)
    for emu in (Emu(lib, ix, root=0), Emu(lib, ix, 0, 0), Emu(lib, ix)):
        _same(cpu.advance(s, x, e), emu.advance(s, x, e))
        ns, want = cpu.advance_mask(s, x, v, e, additive=False)
        got, _, gs = emu.mask(s, v, e, tok=x, per_block=2)
        _same(ns, gs)
        assert np.array_equal(want, got)
        ids = np.array([[p[0] if p else 0, t] for p, t in zip(prefixes, x, strict=True)], dtype=np.int64)
        begin = np.array([0 if p else 1 for p in prefixes], dtype=np.int64)
        walked = cpu.walk(ids, begin=begin, eos_token_id=e)
        assert np.array_equal(emu.walk_mask(ids, begin, 2, v, e, 3), cpu.mask(walked, v, e, additive=False))


@settings(max_examples=20)
@given(keyword_lists(max_keywords=30, max_length=8), st.integers(0, 40))
def test_child_table_kernel_matches_numpy(lib, kws, n):
    """ft_step_child_table: first child of nodes 0..n and rank1(hi_flag, it), from the numpy index."""
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    n = min(n, ix.num_nodes)
    first, end = ix.child_range(np.arange(max(n, 1), dtype=np.int64))
    want = np.append(first[:n], end[n - 1] if n else first[0]).astype(np.uint64)
    fc = Emu(lib, ix, n).fc
    assert np.array_equal(fc & np.uint64(0xFFFFFFFF), want)
    assert np.array_equal(fc >> np.uint64(32), ix.hi_flag.rank1(want.astype(np.int64)).astype(np.uint64))


@settings(max_examples=25)
@given(keyword_lists(max_keywords=30, max_length=8), st.sampled_from([None, 0, 1, 3]), st.integers(0, 50))
def test_root_table_kernel_matches_numpy(lib, kws, table, cap):
    """ft_step_root_table: per root label below the cap, the root's child and its decoded state (decode(c, 1):
    at a node, its children (zeros for none) and whether a keyword ends; inside an edge, the edge's next token),
    from numpy."""
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    rt = Emu(lib, ix, table, cap).rt
    first, end = (int(a[0]) for a in ix.child_range(np.zeros(1, np.int64)))
    kids = np.arange(first, end, dtype=np.int64)
    labels = ix.labels(kids).astype(np.int64)
    assert len(rt) == (min(cap, int(labels[-1]) + 1) if len(kids) else 0)
    want = np.zeros((len(rt), 8), np.uint32)
    keep = labels < len(rt)
    kids, labels = kids[keep], labels[keep]
    if len(kids):
        at = ix.edge_lengths(kids) == 1
        f, e = ix.child_range(kids)
        nwide = ix.hi_flag.rank1(e) - ix.hi_flag.rank1(f)
        kid = at & (e > f)  # at a node with children (a node without has the empty range [0, 0))
        want[labels, 0] = kids
        want[labels, 1] = np.where(at, 0, 1)  # K_AT, K_MID
        want[labels, 2] = np.where(kid, f, 0)
        want[labels, 3] = np.where(kid, e - nwide, 0)
        want[labels, 4] = np.where(kid, e, 0)
        want[labels, 5] = np.where(kid, ix.hi_flag.rank1(f), 0)
        want[labels, 6] = np.where(at, 0, ix.edge_tokens(kids, np.where(at, 0, 1)))
        want[labels, 7] = at & ix.is_terminal(kids)
    assert np.array_equal(rt, want)


def test_mixed_vectors_in_every_lane(lib):
    """Rows whose 16-byte vectors nearly all mix allowed and disallowed entries (up to 32 mixed vectors a
    warp), at odd row strides (every vector boundary moves): nodes past the scan's SCAN_MAX children, and
    one below it where a mixed vector is stored whole and its allowed logits stored back."""
    rng = np.random.default_rng(4)
    v, e = 9001, (9000,)
    kws = [[x] for x in range(1, 8999, 4)] + [[2, y] for y in range(0, 8999, 3)]
    kws += [[7, int(z)] for z in np.flatnonzero(rng.random(8999) < 0.5)] + [[7, 1, 2]]
    # [3]: 1,000 children, one in every vector (the scan, whose logits are kept and stored back); [11]: a
    # keyword with 400 children (the scan where EOS is allowed, stored entry by entry)
    kws += [[3, y] for y in range(1, 4000, 4)] + [[11]] + [[11, y] for y in range(0, 800, 2)]
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    cpu = TrieStepper(ix)
    s = cpu.start_from_prefixes([[], [2], [7], [7, 1], [1], [3], [], [11]])
    for per_block, emu in ((1, Emu(lib, ix)), (2, Emu(lib, ix, 0, 0))):
        _compare(cpu, emu, s, v, e, per_block)
        x = np.array([5, 3, 1, 2, 9000, 1, 3, 0], dtype=np.int64)
        logits = np.random.default_rng(1).normal(size=(len(s), v)).astype(np.float32)
        want, got = logits.copy(), logits.copy()
        ns, _ = cpu.advance_mask(s, x, v, e, out=want)
        _, _, gs = emu.mask(s, v, e, out=got, tok=x, per_block=per_block)
        _same(ns, gs)
        assert np.array_equal(want.view(np.uint32), got.view(np.uint32))


def test_walk_bounds_outside_the_row_give_dead(lib):
    """Device begin / end outside [0, L] (numpy refuses them; the host cannot read device values without a
    synchronisation): the row comes back DEAD and nothing past the row is read; begin > end walks nothing."""
    ix = NarrowLoudsIndex.build(KeywordSet.from_sequences([[1, 2, 3], [1, 4], [5]]))
    cpu, emu = TrieStepper(ix), Emu(lib, ix)
    ids = np.array([[1, 2, 3]] * 6, dtype=np.int64)
    begin = np.array([0, -1, 4, 2**62, 0, 3], dtype=np.int64)
    end = np.array([2, 2, 3, 3, 3, 1], dtype=np.int64)
    no, oo = np.empty(6, np.int64), np.empty(6, np.int64)
    emu.run("walk", 6, emu.walk_rows(ids, begin, end, (), no, oo))
    ok = cpu.walk(ids[[0, 4, 5]], begin=begin[[0, 4, 5]], end=end[[0, 4, 5]])
    assert no.tolist() == [ok.node[0], -1, -1, -1, ok.node[1], 0] and oo[[1, 2, 3]].tolist() == [0, 0, 0]
    assert oo[[0, 4, 5]].tolist() == ok.off.tolist()
    end2 = np.array([2, 4, 2**40, -3, 3, 3], dtype=np.int64)
    emu.run("walk", 6, emu.walk_rows(ids, None, end2, (), no, oo))
    assert no[1:4].tolist() == [-1, -1, -1] and no[0] == cpu.walk(ids[:1], end=2).node[0]
    with pytest.raises(InputError, match="begin"):
        cpu.walk(ids, begin=begin)
