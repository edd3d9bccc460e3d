"""CI (no GPU needed): the field tables of gpu_impl/layout.py, the compile-time checks they generate, and the
host-side packing of start states and node flags."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from flashtrie.gpu_impl import layout
from flashtrie.gpu_impl.layout import INDEX_VIEW, PARAMS, STEP_MASK, STEP_ROWS, STEP_TABLES, CStruct
from hypothesis import given, settings
from hypothesis import strategies as st

from flashtrie import KeywordSet, NarrowLoudsIndex

PAD = 2**32 - 1


def test_tables_give_the_struct_formats() -> None:
    assert PARAMS.size == struct.calcsize(PARAMS.format) == 344
    assert INDEX_VIEW.size == struct.calcsize(INDEX_VIEW.format) == 152
    assert (STEP_TABLES.size, STEP_ROWS.size, STEP_MASK.size) == (24, 176, 56)
    for s in layout.STRUCTS:
        offs = list(s.offsets.values())
        assert offs == sorted(offs) and offs[0] == 0
        values = {name: i + 1 for i, (name, _) in enumerate(s.fields)}
        raw = s.pack(values)
        assert len(raw) == s.size
        for i, (name, ctype) in enumerate(s.fields):  # every value lands at its field's offset
            fmt = {"ptr": "<Q", "u64": "<Q", "i64": "<q", "u32": "<I", "float": "<f"}[ctype]
            assert struct.unpack_from(fmt, raw, s.offsets[name])[0] == i + 1


def test_alignment_and_padding() -> None:
    s = CStruct("S", (("a", "u32"), ("b", "ptr"), ("c", "u32")))
    assert s.offsets == {"a": 0, "b": 8, "c": 16} and s.size == 24 and s.format == "<I4xQI4x"


@settings(max_examples=60)
@given(st.data())
def test_packer_places_its_fields_and_zeroes_the_rest(data: st.DataObject) -> None:
    """`CStruct.packer` (the step kernels' parameters): each named field at its offset, every other byte 0,
    whatever the order the names are given in."""
    s = data.draw(st.sampled_from(layout.STRUCTS))
    names = data.draw(st.permutations([n for n, _ in s.fields]).map(lambda p: p[: max(1, len(p) // 2)]))
    values = {n: i + 7 for i, n in enumerate(names)}
    raw = s.packer(*names)(**values)
    full = s.pack({n: values.get(n, 0) for n, _ in s.fields})
    assert raw == full and len(raw) == s.size


def test_packer_refuses_unknown_missing_or_extra_fields() -> None:
    with pytest.raises(ValueError, match="unknown fields \\['nope'\\]"):
        STEP_ROWS.packer("node_in", "nope")
    with pytest.raises(ValueError, match="named twice"):
        STEP_ROWS.packer("node_in", "node_in")
    pack = STEP_ROWS.packer("off_in", "node_in")  # any order: packed by name
    assert pack(node_in=1, off_in=2) == STEP_ROWS.packer("node_in", "off_in")(off_in=2, node_in=1)
    with pytest.raises(TypeError, match="StepRows\\(\\) missing 1 required keyword-only argument: 'off_in'"):
        pack(node_in=1)
    with pytest.raises(TypeError, match="StepRows\\(\\) got an unexpected keyword argument 'n'"):
        pack(node_in=1, off_in=2, n=3)
    with pytest.raises(TypeError):
        pack(1, 2)  # never positional


def test_pack_refuses_missing_or_unknown_fields() -> None:
    values = {name: 0 for name, _ in INDEX_VIEW.fields}
    with pytest.raises(ValueError, match="missing fields \\['pad2'\\]"):
        INDEX_VIEW.pack({k: v for k, v in values.items() if k != "pad2"})
    with pytest.raises(ValueError, match="unknown fields \\['nope'\\]"):
        INDEX_VIEW.pack({**values, "nope": 1})
    with pytest.raises(ValueError, match="unknown field types"):
        CStruct("S", (("a", "int"),))
    with pytest.raises(ValueError, match="duplicate"):
        CStruct("S", (("a", "u32"), ("a", "u32")))


def test_static_asserts_name_every_field() -> None:
    text = layout.static_asserts()
    for s in (PARAMS, INDEX_VIEW):
        assert f"sizeof({s.name}) == {s.size}" in text
        for name, off in s.offsets.items():
            assert f"FT_OFFSETOF({s.name}, {name}) == {off}" in text


# ------------------------------------------------------------------------------ compile-time checks (NVRTC)
def _compile(source: str) -> str:
    """'' when NVRTC compiles ``source`` for sm_90, else its log."""
    pytest.importorskip("cuda.core")
    from cuda.core import Program, ProgramOptions
    from flashtrie.gpu_impl import compile as c

    try:
        from cuda.bindings import nvrtc

        if int(nvrtc.nvrtcVersion()[0]) != 0:
            pytest.skip("NVRTC library not installed")
    except Exception:
        pytest.skip("NVRTC library not installed")
    opts = ProgramOptions(name="search", include_path=c._include_paths(), **c._options("sm_90", {}, False))
    try:
        Program(source, "c++", opts).compile("cubin")
    except Exception as e:  # NVRTC raises with the log in the message
        return str(e)
    return ""


@pytest.mark.slow
def test_kernel_source_carries_the_checks_and_compiles() -> None:
    from flashtrie.gpu_impl.compile import KERNELS, kernel_source

    for file in KERNELS:
        src = kernel_source(file)
        assert "static_assert(sizeof(Params) == 344" in src
        assert "static_assert(sizeof(StepRows) == 176" in src
        assert _compile(src) == ""


@pytest.mark.parametrize("change", ["insert", "retype", "drop", "swap"])
def test_a_table_that_drifts_from_the_struct_fails_to_compile(change: str) -> None:
    from flashtrie.gpu_impl.compile import KERNEL_DIR

    f = list(PARAMS.fields)
    i = [n for n, _ in f].index("Q")
    if change == "insert":
        f.insert(i, ("extra", "u32"))  # every later offset moves by 4
    elif change == "retype":
        f[i] = ("Q", "u64")
    elif change == "swap":  # same size, other order: only the offsets tell
        j = [n for n, _ in f].index("lp_in")
        f[j - 1], f[j] = f[j], f[j - 1]
    else:
        del f[[n for n, _ in f].index("cand_cap")]
    drifted = CStruct("Params", tuple(f), guard="FT_PARAMS_CUH")
    log = _compile((KERNEL_DIR / "search.cu").read_text() + layout.static_asserts((INDEX_VIEW, drifted)))
    assert "differs from gpu_impl/layout.py" in log, log[-2000:]


def test_a_step_table_that_drifts_from_its_struct_fails_to_compile() -> None:
    """The step kernels' structs are checked the same way (kernels/step_params.cuh)."""
    from flashtrie.gpu_impl.compile import KERNEL_DIR

    f = list(STEP_ROWS.fields)
    j = [n for n, _ in f].index("tok_is64")
    f[j - 1], f[j] = f[j], f[j - 1]  # n and tok_is64: same size, other order
    drifted = CStruct("StepRows", tuple(f), guard="FT_STEP_PARAMS_CUH")
    log = _compile((KERNEL_DIR / "step.cu").read_text() + layout.static_asserts((STEP_TABLES, drifted, STEP_MASK)))
    assert "StepRows.n: offset differs from gpu_impl/layout.py" in log, log[-2000:]


def test_checks_apply_only_where_the_header_is_included() -> None:
    src = '#include "index.cuh"\n' + layout.static_asserts()  # no params.cuh: only IndexView is checked
    assert _compile(src) == ""
    bad = CStruct("IndexView", INDEX_VIEW.fields[1:], guard="FT_INDEX_CUH")
    assert "IndexView: sizeof differs" in _compile('#include "index.cuh"\n' + layout.static_asserts((bad,)))


def test_kernel_params_pack_each_parameter_by_name_at_its_offset() -> None:
    from flashtrie.gpu_impl.step_launch import ROWS, TABLES, head

    k = layout.KERNEL_PARAMS["ft_step_advance_mask"]
    assert k.offsets == (0, 8, 8 + STEP_TABLES.size, 8 + STEP_TABLES.size + STEP_ROWS.size)
    assert k.size == 8 + STEP_TABLES.size + STEP_ROWS.size + STEP_MASK.size
    tab = TABLES(fc=1, rt=2, fc_n=3, rt_n=4)
    rows = ROWS["mask"](node_in=5, off_in=6, eos=7, n=8, n_eos=1)
    mask = STEP_MASK.pack({n: 9 for n, _ in STEP_MASK.fields})
    raw = k.pack(view=0xABC, T=tab, r=rows, m=mask)
    assert struct.unpack_from("<Q", raw)[0] == 0xABC and raw[8:32] == tab and raw[32:208] == rows
    assert raw[208:] == mask and head(0xABC, tab) == raw[:32]
    flags = layout.KERNEL_PARAMS["ft_node_flags"].pack(view=1, out=2, nwords=3)
    assert struct.unpack("<QQQ", flags) == (1, 2, 3)
    assert layout.KERNEL_PARAMS["ft_node_flags"].packer()(nwords=3, out=2, view=1) == flags  # by name, any order
    search = layout.KERNEL_PARAMS["flashtrie_search"].packer()
    assert search(index_ptr=5, params_ptr=6) == struct.pack("<QQ", 5, 6)
    with pytest.raises(TypeError, match="flashtrie_search\\(\\) missing 1 required keyword-only argument"):
        search(index_ptr=5)
    with pytest.raises(ValueError, match="scalars only"):
        k.packer()
    u32 = layout.KernelParams("k", "x.cu", (("a", "u32"), ("b", "u64")))
    assert u32.packer()(a=1, b=2) == u32.pack(a=1, b=2) == struct.pack("<I4xQ", 1, 2)
    with pytest.raises(ValueError, match="in that order"):
        k.pack(T=tab, view=1)  # the kernel's order
    with pytest.raises(ValueError, match="expected 24 bytes of Tab"):
        k.pack(view=1, T=rows)


def test_kernel_params_name_every_kernel_of_each_file() -> None:
    """Every entry point the host loads is in the table, with its file (the loader looks them up by it)."""
    from flashtrie.gpu_impl.compile import KERNEL_DIR, KERNELS
    from flashtrie.gpu_impl.stepwise import KERNELS as STEP_KERNELS

    for file, entry in KERNELS.items():
        assert layout.KERNEL_PARAMS[entry].file == file
        text = (KERNEL_DIR / file).read_text()
        for k in layout.KERNEL_PARAMS.values():
            assert (f"{k.name}(" in text) == (k.file == file), k.name  # defined in its file, and only there
    assert {f"ft_step_{n}" for n in STEP_KERNELS} == {k.name for k in layout.KERNEL_PARAMS.values()
                                                      if k.file == "step.cu"}


def test_constants_header_is_what_the_table_generates() -> None:
    """kernels/constants.cuh is generated from `CONSTANTS` (rewrite it with `write_constants_header`), and the
    host reads the same values."""
    from flashtrie.gpu_impl import intake, results
    from flashtrie.gpu_impl.compile import KERNEL_DIR

    assert (KERNEL_DIR / "constants.cuh").read_text() == layout.constants_header()
    text = layout.constants_header()
    for name, value, _ in layout.CONSTANTS:
        assert f"#define {name} {value:#x}u" in text
    assert (results.ERR_BAD_LOGPROB, results.ERR_DUPLICATE, results.ERR_OVERFLOW, results.ERR_BAD_TOKEN) == (
        1, 2, 4, 8)
    assert results.STAT_NAMES == ("frontier_candidates", "pool_candidates", "work_chunks", "live_queries")
    assert (intake._NO_NODE, intake._KIND_LINKED_OFF) == (layout.CONSTANT["NO_NODE"], 2)
    for header in ("params.cuh", "hypothesis.cuh", "index.cuh"):  # defined once: in the generated header
        assert "#define ERR_" not in (KERNEL_DIR / header).read_text()
        assert "#define KIND_" not in (KERNEL_DIR / header).read_text()


@pytest.mark.parametrize("change", ["swap", "retype", "drop"])
def test_a_kernel_whose_parameters_drift_from_the_table_fails_to_compile(change: str) -> None:
    from flashtrie.gpu_impl.compile import KERNEL_DIR

    k = layout.KERNEL_PARAMS["ft_node_flags"]
    p = list(k.params)
    if change == "swap":
        p[1], p[2] = p[2], p[1]
    elif change == "retype":
        p[2] = ("nwords", "u32")
    else:
        del p[2]
    drifted = layout.KernelParams(k.name, k.file, tuple(p))
    src = (KERNEL_DIR / "node_flags.cu").read_text() + layout.static_asserts()
    assert _compile(src + k.declaration()) == ""
    assert "ft_node_flags" in _compile(src + drifted.declaration())


# ------------------------------------------------------------------------------ host-side packing
def _old_start_states(index: NarrowLoudsIndex, prefixes: list[list[int]] | None, q_n: int) -> np.ndarray:
    """The per-query prefix walk `GpuSearcher` did before the search core (the reference for the packing)."""
    st = np.zeros((q_n, 4), dtype=np.uint32)
    if prefixes is None:
        return st
    for q, p in enumerate(prefixes):
        if len(p) == 0:
            continue
        w = index.walk(np.asarray(p, dtype=np.uint32))
        if w is None:
            st[q, 0] = PAD
            continue
        node, off = int(w[0]), int(w[1])
        st[q, 0], st[q, 2] = node, len(p)
        if node != 0 and off < int(index.edge_lengths(np.array([node]))[0]):
            st[q, 3] = (2 << 30) | off
    return st


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(0, 6), min_size=1, max_size=7), min_size=1, max_size=30),
       st.lists(st.lists(st.integers(0, 6), max_size=6), max_size=8), st.booleans())
def test_start_states_pack_like_the_old_walk(kws: list[list[int]], prefixes: list[list[int]], none: bool) -> None:
    from flashtrie.gpu_impl.intake import pack_start_states

    from flashtrie.search_core import normalize_prefixes, start_states

    index = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    pref = [p for p in prefixes] + [kw[: len(kw) // 2 + 1] for kw in kws[:4]]  # present ones too, mid-edge
    q_n = len(pref)
    use = None if none else pref
    got = pack_start_states(index, start_states(index, normalize_prefixes(use, q_n), q_n), q_n)
    np.testing.assert_array_equal(got, _old_start_states(index, use, q_n))


def test_upload_takes_no_flags_from_the_host_and_the_degrees_from_the_meta() -> None:
    """Index format 3 stores no node flags: what the upload sends holds none (the device derives them into
    the last slot of its layout), and the degree maxima are the index's metadata, equal to what the landed
    upload derived from the LOUDS."""
    from flashtrie.gpu_impl import index_upload as iu
    from flashtrie.gpu_impl.node_flags import flag_bytes

    rng = np.random.default_rng(3)
    kws = [rng.integers(0, 40, size=int(rng.integers(1, 8))).tolist() for _ in range(500)]
    index = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    n = int(index.num_nodes)
    host = iu.host_index(index)
    assert "nflags" not in host.arrays and "node_flags" not in index.arrays
    layout = host.layout()
    assert list(layout.offsets)[-1] == "nflags" and layout.sizes["nflags"] == flag_bytes(n) + 8
    bits = index.louds.to_bools()
    deg = np.diff(np.concatenate(([-1], np.flatnonzero(~bits)))) - 1
    assert (host.max_degree, host.max_degree_nonroot) == (int(deg.max()), int(deg[1:].max()))
