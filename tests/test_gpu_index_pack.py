"""The index bytes both GPU backends send to the device: byte-identical to what each uploaded before they
shared `index_upload.host_index` / `upload_host_index` (runs without a GPU: the device is a recorder).

``_old_search_upload`` and ``_old_step_upload`` are the two uploads as they were at de6b735 (integ), kept
verbatim apart from the recorder standing in for the device; every allocation the new code makes must hold
the same bytes (the unwritten slack too) at the same addresses.  Since index format 3 the node flags are
derived on the device at upload: the recorder runs that step with `derived.node_flags` at the address the
upload gives the kernel (tests/test_gpu_node_flags.py checks the real kernel against the same function),
and the host copies are checked to be the index's own arrays (no host-side copy or derivation).
"""

from __future__ import annotations

import struct
import tempfile
import types
from pathlib import Path

import numpy as np
import pytest
from flashtrie.gpu_impl import index_upload as iu
from flashtrie.gpu_impl import node_flags as fl
from flashtrie.gpu_impl.layout import INDEX_VIEW
from flashtrie.gpu_impl.stepwise import GpuTrieStepper
from flashtrie.gpu_impl.workspace import Layout
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import keyword_lists

from flashtrie import KeywordSet, NarrowLoudsIndex
from flashtrie.errors import IndexFormatError, InputError
from flashtrie.index import derived

_FILL = 0xA5  # what an allocation holds before the copies: bytes nobody writes stay this


class _Recorder:
    """A `GpuContext` stand-in: allocations are host bytearrays at fixed fake addresses, copies write into them."""

    def __init__(self) -> None:
        self.allocs: list[tuple[int, bytearray]] = []
        self.stream = types.SimpleNamespace(sync=lambda: None)
        self.sources: list[int] = []  # host address of every copy, in order

    def allocate(self, nbytes: int, what: str = "") -> types.SimpleNamespace:
        base = (len(self.allocs) + 1) << 40
        self.allocs.append((base, bytearray([_FILL]) * int(nbytes)))
        return types.SimpleNamespace(handle=base)

    def upload(self, dst: int, host: np.ndarray) -> None:
        for base, mem in self.allocs:
            if base <= dst < base + len(mem):
                self.sources.append(int(host.ctypes.data))
                raw = np.ascontiguousarray(host).view(np.uint8).tobytes()
                assert dst - base + len(raw) <= len(mem), "copy past the end of its allocation"
                mem[dst - base : dst - base + len(raw)] = raw
                return
        raise AssertionError(f"copy to an address outside every allocation: {dst:#x}")

    def image(self) -> list[tuple[int, bytes]]:
        return [(base, bytes(mem)) for base, mem in self.allocs]

    def read_view(self, view_ptr: int) -> dict[str, int]:
        """The IndexView fields the upload wrote at ``view_ptr``."""
        for base, mem in self.allocs:
            if base == view_ptr:
                return dict(zip([n for n, _ in INDEX_VIEW.fields],
                                struct.unpack(INDEX_VIEW.format, bytes(mem[: INDEX_VIEW.size])), strict=True))
        raise AssertionError(f"no allocation at {view_ptr:#x}")


_DERIVED: list[tuple[int, int, int]] = []  # (view, out, nodes) of every flag derivation the recorder ran


def _fake_derive(ctx: _Recorder, view_ptr: int, out_ptr: int, num_nodes: int) -> float:
    """The device's flag kernel on the recorder: derived.node_flags of the index the view describes."""
    view = ctx.read_view(view_ptr)
    assert view["nflags"] == out_ptr and view["num_nodes"] == num_nodes
    ix = _CURRENT[0]
    flags = derived.node_flags(ix.louds, ix.linked, ix.terminal, ix.num_nodes)[0]
    assert flags.nbytes == fl.flag_bytes(num_nodes)
    ctx.upload(out_ptr, flags)
    _DERIVED.append((view_ptr, out_ptr, num_nodes))
    return 0.0


_CURRENT: list[NarrowLoudsIndex] = []  # the index being uploaded (what _fake_derive reads the bits of)


@pytest.fixture(autouse=True)
def _device_derivation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fl, "derive_node_flags", _fake_derive)


# ---------------------------------------------------------------- the uploads as they were (de6b735)
def _old_search_upload(ctx: _Recorder, ix: NarrowLoudsIndex) -> tuple[int, int, int]:
    """index_upload.upload_index at de6b735 (its check and node facts are unchanged helpers)."""
    iu.check_index_for_gpu(ix)
    nflags = derived.node_flags(ix.louds, ix.linked, ix.terminal, ix.num_nodes)[0]  # format 2 stored these
    deg_max, deg_nonroot = int(ix.max_degree), int(ix.max_degree_nonroot)
    arrays = ix.arrays
    host = {field: np.ascontiguousarray(arrays[key]) for field, key in iu._ARRAYS}
    host["nflags"] = nflags
    layout = Layout()
    for field, a in host.items():
        layout.add(field, a.nbytes + 8)  # + 8: packed_get reads one word past the end
    buf = ctx.allocate(layout.total, "index arrays")
    base = int(buf.handle)
    for field, a in host.items():
        ctx.upload(base + layout.offsets[field], a)
    view = {field: base + layout.offsets[field] for field in host}
    view.update(hi_width=int(ix.labels_hi.width), ls_width=int(ix.link_starts.width),
                suffix_width=int(ix.suffix.width),
                kwid_width=int(ix.keyword_ids.width) if ix.keyword_ids.size else 0,  # 0: no map, id = rank
                num_nodes=int(ix.num_nodes), pad0=0, pad1=0, pad2=0)
    vb = np.frombuffer(INDEX_VIEW.pack(view), dtype=np.uint8).copy()
    ctx.allocate(vb.nbytes, "index view")
    ctx.upload(int(ctx.allocs[-1][0]), vb)
    return layout.total, deg_max, deg_nonroot


_INDEX_FMT = "<15Q8I"  # the IndexView packing of searcher.py
_INDEX_NAMES = ["louds.words", "louds.rank", "louds.select0", "labels_lo", "hi_flag.words", "hi_flag.rank",
                "labels_hi.words", "linked.words", "linked.rank", "link_starts.words", "suffix.words",
                "terminal.words", "terminal.rank", "keyword_ids.words"]


def _old_index_host_arrays(ix: NarrowLoudsIndex) -> tuple[list[np.ndarray], tuple[int, int, int, int]]:
    """gpu_impl/stepwise.py index_host_arrays at de6b735."""
    n = int(ix.num_nodes)
    louds = ix.louds.to_bools()
    zpos = np.flatnonzero(~louds)
    if zpos.size != n:
        raise IndexFormatError(f"index: LOUDS has {zpos.size} zeros, expected one per node ({n})")
    deg = np.diff(np.concatenate(([-1], zpos))) - 1
    del louds, zpos
    vals = (ix.linked.to_bools()[:n].astype(np.uint32) | (ix.terminal.to_bools()[:n].astype(np.uint32) << 1)
            | ((deg > 0).astype(np.uint32) << 2))
    vals = np.concatenate([vals, np.zeros((-n) % 8 + 8, dtype=np.uint32)])
    nflags = np.bitwise_or.reduce(vals.reshape(-1, 8) << (4 * np.arange(8, dtype=np.uint32)), axis=1)
    arrays = ix.arrays
    host = [np.ascontiguousarray(arrays[k]) for k in _INDEX_NAMES] + [nflags.astype(np.uint32)]
    meta = ix.meta
    widths = (int(meta["labels_hi.width"]), int(meta["link_starts.width"]), int(meta["suffix.width"]),
              int(meta["keyword_ids.width"]))
    return host, widths


def _old_step_upload(ctx: _Recorder, ix: NarrowLoudsIndex) -> int:
    """GpuTrieStepper._upload_index at de6b735 (driver copies into the recorder)."""
    host, widths = _old_index_host_arrays(ix)
    n = int(ix.num_nodes)
    offsets, total = [], 0
    for a in host:
        total = -(-total // 256) * 256
        offsets.append(total)
        total += max(a.nbytes + 8, 4)
    base = int(ctx.allocate(total).handle)
    for off, a in zip(offsets, host, strict=True):
        if a.nbytes:
            ctx.upload(base + off, a)
    view = np.frombuffer(struct.pack(_INDEX_FMT, *[base + o for o in offsets], *widths, n, 0, 0, 0),
                         dtype=np.uint8).copy()
    vbase = int(ctx.allocate(view.nbytes).handle)
    ctx.upload(vbase, view)
    return total


# ---------------------------------------------------------------- the comparisons
def _assert_same_bytes(ix: NarrowLoudsIndex) -> None:
    old_search, new_search, old_step, new_step = _Recorder(), _Recorder(), _Recorder(), _Recorder()
    _CURRENT[:] = [ix]
    _DERIVED.clear()
    total, dmax, dnr = _old_search_upload(old_search, ix)
    dev = iu.upload_index(new_search, ix)
    assert (dev.nbytes, dev.max_degree, dev.max_degree_nonroot) == (total, dmax, dnr)
    assert int(dev.view.handle) == old_search.allocs[1][0]
    assert new_search.image() == old_search.image()
    # the flags were derived "on the device", once, after the arrays and the view were there
    assert _DERIVED == [(int(dev.view.handle), new_search.read_view(int(dev.view.handle))["nflags"], ix.num_nodes)]
    # every array went straight from the index's own memory (the file mapping), nothing copied on the host
    arrays = ix.arrays
    own = [int(arrays[key].ctypes.data) for _, key in iu._ARRAYS if arrays[key].nbytes]
    assert new_search.sources[: len(own)] == own
    st = dev.stats
    assert st is not None and st.bytes == sum(arrays[k].nbytes for _, k in iu._ARRAYS) + INDEX_VIEW.size
    assert "nflags" not in iu.host_index(ix).arrays

    step_total = _old_step_upload(old_step, ix)
    stepper = types.SimpleNamespace(index=ix, ctx=new_step)
    GpuTrieStepper._upload_index(stepper)  # the real method, on the recorder
    assert stepper.index_bytes == step_total
    assert stepper._view_ptr == old_step.allocs[1][0]
    assert new_step.image() == old_step.image()
    # and the two backends now send one thing
    assert new_step.image() == new_search.image()


def _index(kws: list[list[int]], ids: str) -> NarrowLoudsIndex:
    return NarrowLoudsIndex.build(KeywordSet.from_sequences(kws), ids=ids)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(kws=keyword_lists(max_keywords=12, max_length=9), ids=st.sampled_from(["input", "index"]))
def test_generated_indexes_upload_the_same_bytes(kws: list[list[int]], ids: str) -> None:
    _assert_same_bytes(_index(kws, ids))


_CASES = {  # name: (keywords, ids, has an id map, has hi labels, has linked edges)
    "map_hi_linked": ([[70000, 1, 2, 3, 4, 5], [3, 2], [3, 2, 1], [9] * 20, [2**31 + 5, 4]], "input", True, True, True),
    "no_map_hi": ([[65536], [65535, 7], [65535, 70000]], "index", False, True, False),
    "map_lo_only": ([[2], [1], [1, 3], [1, 2]], "input", True, False, False),
    "no_map_linked": ([[1, 2, 3, 4, 5, 6, 7], [1, 2, 9, 9, 9, 9]], "index", False, False, True),
    "one_keyword": ([[7]], "input", False, False, False),
}


@pytest.mark.parametrize("name", sorted(_CASES))
def test_index_kinds_upload_the_same_bytes(name: str) -> None:
    kws, ids, has_map, has_hi, has_linked = _CASES[name]
    ix = _index(kws, ids)
    assert (ix.keyword_ids.size > 0, ix.labels_hi.size > 0, bool(ix.linked.to_bools().any())) == \
        (has_map, has_hi, has_linked)  # the case covers what its name says
    _assert_same_bytes(ix)
    with tempfile.TemporaryDirectory() as tmp:  # and the same index loaded from its file (mapped arrays)
        path = Path(tmp) / "ix.flt"
        ix.save(path)
        _assert_same_bytes(NarrowLoudsIndex.load(path))


def test_damaged_louds_is_refused_as_before() -> None:
    ix = _index([[1, 2], [1, 3], [4]], "input")
    ix.num_nodes += 1
    with pytest.raises(IndexFormatError, match="LOUDS has"):
        _old_index_host_arrays(ix)
    with pytest.raises(IndexFormatError, match="LOUDS has"):
        iu.host_index(ix)
    with pytest.raises(IndexFormatError, match="LOUDS has"):
        GpuTrieStepper._upload_index(types.SimpleNamespace(index=ix, ctx=_Recorder()))



def test_more_nodes_than_32_bit_ids_are_refused_before_any_copy() -> None:
    ix = _index([[1, 2], [1, 3], [4]], "input")
    ix.num_nodes = iu.GPU_MAX_NODES  # node ids and ranks are u32 on the device (0xFFFFFFFF: no node)
    for call in (iu.check_index_for_gpu, iu.host_index):
        with pytest.raises(InputError, match=r"4,294,967,295 nodes is over the GPU limit of 2\*\*32 - 2"):
            call(ix)

# ---------------------------------------------------------------- the stepper's wiring, device faked
@pytest.fixture
def fake_device(monkeypatch: pytest.MonkeyPatch) -> list[_Recorder]:
    """`GpuTrieStepper` built without a GPU: its `GpuContext` is a recorder, the kernels are not loaded."""
    pytest.importorskip("cuda.core")
    from flashtrie.gpu_impl import stepwise as S

    made: list[_Recorder] = []

    def context(device: int) -> _Recorder:
        ctx = _Recorder()
        ctx.device, ctx.arch = types.SimpleNamespace(device_id=device), "sm_90"
        made.append(ctx)
        return ctx

    xp = types.SimpleNamespace(int64="int64", full=lambda shape, value, dtype: np.full(shape, value))
    monkeypatch.setattr(S, "GpuContext", context)
    monkeypatch.setattr(S, "_array_module", lambda name, device: xp)
    monkeypatch.setattr(S, "load_kernels", lambda file, arch, macros, device: {f"ft_step_{n}": n for n in S.KERNELS})
    monkeypatch.setattr(S, "Launcher", lambda loaded: types.SimpleNamespace(launch=None))
    monkeypatch.setattr(S.GpuTrieStepper, "_build_child_table", lambda self, n: None)  # kernel launches
    monkeypatch.setattr(S.GpuTrieStepper, "_build_root_table", lambda self, n: None)
    return made


def test_stepper_uploads_through_its_context(fake_device: list[_Recorder]) -> None:
    ix = _index([[1, 2, 3], [1, 4], [70000]], "input")
    _CURRENT[:] = [ix]
    st = GpuTrieStepper(ix, 3)
    (ctx,) = fake_device
    assert st.ctx is ctx and st.device.device_id == 3 and st.arch == "sm_90"
    want = _Recorder()
    _old_step_upload(want, ix)
    assert ctx.image() == want.image() and st.index_address == ctx.allocs[1][0]


def test_stepper_from_searcher_shares_its_index(fake_device: list[_Recorder]) -> None:
    ix = _index([[1, 2, 3], [1, 4]], "index")
    searcher = types.SimpleNamespace(index=ix, device=types.SimpleNamespace(device_id=1), index_address=0xABC000)
    st = GpuTrieStepper.from_searcher(searcher)
    assert st.index_address == 0xABC000 and fake_device[0].allocs == []  # no second copy of the index


def test_device_array_intake_refuses_host_and_foreign_objects() -> None:
    pytest.importorskip("cuda.core")
    from flashtrie.gpu_impl.intake import memory_view
    from flashtrie.gpu_impl.step_arrays import device_view

    from flashtrie.errors import InputError

    for call in (lambda o: memory_view("tokens", o, 0), lambda o: device_view(o, "ids", 1, [np.int64])):
        with pytest.raises(InputError, match="expected a device array"):
            call(np.zeros(3, np.int64))
        with pytest.raises(InputError, match=r"not a device array readable .*\(object\)"):
            call(object())


def test_stepper_tables_are_built_through_either_array_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child and root table builders, with the real array-module classes (torch on the CPU here, a stand-in
    CuPy): every dtype they ask for exists, and the root table's launch covers the root's children and labels."""
    import sys

    torch = pytest.importorskip("torch")
    from flashtrie.gpu_impl import step_arrays as A
    from flashtrie.gpu_impl import stepwise as S

    fake_cupy = types.SimpleNamespace(int64="i8", int32="i4", float32="f4", bool_="b1",
                                      cuda=types.SimpleNamespace(Device=lambda d: d))
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    cp = A._Cupy(0)
    monkeypatch.setattr(torch, "device", lambda *a: torch.empty(0).device)  # _Torch's cuda device: the CPU here
    tx = A._Torch(0)
    for xp in (cp, tx):
        assert all(hasattr(xp, name) for name in ("int64", "int32", "float32", "bool")), type(xp).__name__
    ix = _index([[3], [3, 4, 5], [9, 1, 2], [70000, 1], [12]], "input")
    st = S.GpuTrieStepper.__new__(S.GpuTrieStepper)
    launches: list[tuple] = []
    st.index, st.xp, st.threads, st._view_ptr = ix, tx, 256, 0
    st._launch = lambda name, blocks, rows: launches.append((name, blocks, st._tables))
    tx.sync = lambda: None
    st._build_child_table(4)
    st._build_root_table(1 << 22)
    assert [(n, b, t[2:]) for n, b, t in launches] == [("child_table", 1, (0, 0)), ("root_table", 1, (4, 0))]
    assert st.root_table == 70001 and tuple(st._root_table.shape) == (70001, 8)
    assert st._root_table.dtype == torch.int32 and st._tables[3] == 70001
    st._build_root_table(0)
    assert st.root_table == 0 and st._tables[3] == 0
