"""kernels/score_mask.cu through `ScoreMasker` gives `flashtrie.hf.mask_and_force`'s bits: on the CPU through a
host build of the kernels (tests/kernel_emu/, one std::thread per CUDA thread), on the GPU through real launches;
and the kernels compile with NVRTC without spills.

Random bit patterns of every float type (NaN payloads of both signs, ±0, ±inf, the lowest finite value,
subnormals), every batch item size, rows already all masked (forced) or all masked but one entry, rows of more
than one block's part, rows of a stride wider than the vocabulary."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from flashtrie.gpu_impl.compile import KERNEL_DIR  # noqa: E402
from flashtrie.gpu_impl.layout import KERNEL_PARAMS  # noqa: E402
from flashtrie.gpu_impl.score_mask import PART, THREADS, ScoreMasker  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from flashtrie.hf import mask_and_force  # noqa: E402

HERE = Path(__file__).resolve().parent / "kernel_emu"
INT = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32, torch.float64: torch.int64}
NEG_INF = {f: int(torch.tensor(-float("inf"), dtype=f).view(i).item()) for f, i in INT.items()}
VOCABS = [1, 2, 24, PART, PART + 1, 2 * PART + 5]


def _patterns(dtype, rows: int, vocab: int, seed: int, masked_rows: list[int], almost: list[int],
              allow: torch.Tensor) -> torch.Tensor:
    """Random bits of ``dtype`` with special patterns mixed in; ``masked_rows``: every allowed entry -inf or the
    lowest value; ``almost``: the same but one allowed entry (a negative NaN, +0 or -0: patterns next to none of
    them as integers)."""
    g = np.random.default_rng(seed)
    ibits = INT[dtype]
    width = torch.iinfo(ibits).bits
    info = np.iinfo(f"int{width}")
    raw = g.integers(info.min, info.max, size=(rows, vocab), dtype=f"int{width}", endpoint=True)
    ninf = NEG_INF[dtype]
    exp = ninf & ((1 << (width - 1)) - 1)  # +inf's pattern
    sign = -(1 << (width - 1))
    specials = [exp | 1, exp | (exp >> 1), (exp | 3) + sign, exp + sign + 1, 0, sign, 1, 1 + sign, exp - 1,
                exp, ninf, ninf - 1, ninf + 1]
    pick = g.random((rows, vocab)) < 0.3
    raw[pick] = g.choice(np.array(specials, dtype=raw.dtype), size=int(pick.sum()))
    out = torch.from_numpy(raw)
    a = allow.cpu()
    for r in masked_rows + almost:
        cols = torch.nonzero(a[r]).flatten()
        out[r, cols] = torch.from_numpy(g.choice(np.array([ninf, ninf - 1], dtype=raw.dtype), size=len(cols)))
        if r in almost and len(cols):
            out[r, cols[int(g.integers(len(cols)))]] = int(g.choice([sign + (exp | 5), 0, sign]))
    return out.view(dtype)


@st.composite
def cases(draw):
    """(dtype, group, rows, vocab, lowest, seed, masked rows, almost masked rows, row stride padding)."""
    dtype = draw(st.sampled_from(list(INT)))
    group = draw(st.sampled_from([1, 2, 3, 8]))
    rows = group * draw(st.integers(1, 3))
    vocab = draw(st.sampled_from(VOCABS))
    masked = draw(st.lists(st.integers(0, rows - 1), max_size=rows, unique=True))
    almost = draw(st.lists(st.integers(0, rows - 1).filter(lambda r: r not in masked), max_size=2, unique=True))
    return (dtype, group, rows, vocab, draw(st.booleans()), draw(st.integers(0, 2**32)), masked, almost,
            draw(st.sampled_from([0, 3])))


def _check(masker: ScoreMasker, device: str, case) -> None:
    dtype, group, rows, vocab, lowest, seed, masked, almost, pad = case
    g = np.random.default_rng(seed + 1)
    allow = torch.from_numpy(g.random((rows, vocab)) < g.choice([0.0, 0.05, 0.5, 1.0])).to(device)
    wide = torch.full((rows, vocab + pad), 5, dtype=INT[dtype])
    wide[:, :vocab] = _patterns(dtype, rows, vocab, seed, masked, almost, allow).view(INT[dtype])
    want = wide[:, :vocab].clone().view(dtype)
    mask_and_force(want, allow.cpu(), group, lowest)
    dev = wide.clone().to(device)
    scores = dev.view(dtype)[:, :vocab]  # rows of stride vocab + pad
    masker(scores, allow, group, lowest, NEG_INF[dtype])
    got, ref = dev[:, :vocab].cpu(), want.view(INT[dtype])
    bad = torch.nonzero(got != ref)
    assert not len(bad), (case, [(int(r), int(c), int(got[r, c]), int(ref[r, c])) for r, c in bad[:5]])
    assert torch.equal(dev[:, vocab:].cpu(), wide[:, vocab:])  # the padding past each row untouched


# ---------------------------------------------------------------------------------------------- host emulation
@lru_cache(maxsize=1)
def _lib(tmp: str) -> ctypes.CDLL | None:
    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        return None
    out = Path(tmp) / "libscore_mask_emu.so"
    r = subprocess.run([cxx, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", f"-I{KERNEL_DIR}", f"-I{HERE}",
                        "-x", "c++", str(HERE / "score_mask_emu.cpp"), "-o", str(out)], capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(r.stderr)  # a compiler is here: a source that does not build is a failure
    return ctypes.CDLL(str(out))


class _HostArrays:
    """The array module a `ScoreMasker` asks for its flags and stream, on the host."""

    bool = torch.bool

    def empty(self, shape: tuple[int, ...], dtype) -> torch.Tensor:
        return torch.full(shape, 7, dtype=torch.uint8).view(dtype)  # not 0 or 1: every slot must be written

    def stream(self) -> int:
        return 0


@pytest.fixture(scope="module")
def emulated(tmp_path_factory) -> ScoreMasker:
    lib = _lib(str(tmp_path_factory.mktemp("emu")))
    if lib is None:
        pytest.skip("no C++20 compiler to build the host emulation of kernels/score_mask.cu")
    launches: list[tuple[str, int]] = []

    def launch(stream: int, name: str, grid: int, block: int, params: bytes, smem: int = 0) -> None:
        assert stream == 0 and block == THREADS and smem == 0 and len(params) == KERNEL_PARAMS[name].size
        launches.append((name, grid))
        getattr(lib, "emu_" + name.removeprefix("ft_"))(ctypes.c_uint32(grid), ctypes.c_char_p(params))

    masker = ScoreMasker(launch, _HostArrays())
    masker.launches = launches  # type: ignore[attr-defined]
    return masker


@settings(max_examples=60, deadline=None)
@given(case=cases())
def test_emulated_kernels_give_mask_and_force_bits(emulated: ScoreMasker, case) -> None:
    _check(emulated, "cpu", case)


def test_emulated_grid_and_refusals(emulated: ScoreMasker) -> None:
    """Blocks: ceil(V / PART) per row, one per batch item; nothing launched for no rows or columns; a group
    that does not divide the rows, an entry width of no float, a shape or column stride off: refused."""
    emulated.launches.clear()  # type: ignore[attr-defined]
    s = torch.zeros((6, PART + 1), dtype=torch.float32)
    emulated(s, torch.ones((6, PART + 1), dtype=torch.bool), 3, False, NEG_INF[torch.float32])
    assert emulated.launches == [("ft_score_mask", 12), ("ft_score_force", 2)]  # type: ignore[attr-defined]
    emulated(torch.zeros((0, 5)), torch.ones((0, 5), dtype=torch.bool), 1, False, 0)
    emulated(torch.zeros((4, 0)), torch.ones((4, 0), dtype=torch.bool), 2, False, 0)
    assert len(emulated.launches) == 2  # type: ignore[attr-defined]
    ok = torch.ones((6, 4), dtype=torch.bool)
    from flashtrie import InputError

    with pytest.raises(InputError, match="group: 4 does not divide the 6 rows"):
        emulated(torch.zeros((6, 4)), ok, 4, False, 0)
    with pytest.raises(InputError, match="expected 2-, 4- or 8-byte floats, got 1-byte"):
        emulated(torch.zeros((6, 4), dtype=torch.uint8), ok, 1, False, 0)
    with pytest.raises(InputError, match=r"allow: expected shape \[6, 5\], got \[6, 4\]"):
        emulated(torch.zeros((6, 5)), ok, 1, False, 0)
    with pytest.raises(InputError, match="contiguous columns"):
        emulated(torch.zeros((4, 6)).t(), ok, 1, False, 0)
    with pytest.raises(InputError, match="rows that do not overlap"):
        emulated(torch.zeros((1, 4)).expand(6, 4), ok, 1, False, 0)
    assert not ScoreMasker.takes(torch.zeros((1, 4)).expand(6, 4)) and ScoreMasker.takes(torch.zeros((6, 4)))


# ---------------------------------------------------------------------------------------------- NVRTC, the GPU
@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
def test_kernels_compile_without_spills(arch: str, tmp_path, monkeypatch) -> None:
    pytest.importorskip("cuda.core")
    from flashtrie.gpu_impl.compile import compile_kernel, nvrtc_version, spill_report

    try:
        nvrtc_version()
    except Exception:
        pytest.skip("NVRTC library not installed")
    monkeypatch.setenv("FLASHTRIE_KERNEL_CACHE", str(tmp_path))
    report = spill_report(compile_kernel("score_mask.cu", arch, verbose=True).log)
    for entry in ("ft_score_mask", "ft_score_force"):
        r = report[entry]
        assert r.get("spill_stores", 0) == 0 and r.get("stack", 0) == 0, (entry, r)
        assert 0 < r["registers"] <= 64, (entry, r)


@lru_cache(maxsize=1)
def _cuda_masker() -> ScoreMasker:
    from flashtrie.gpu_impl.stepwise import GpuTrieStepper

    from flashtrie import KeywordSet, NarrowLoudsIndex

    index = NarrowLoudsIndex.build(KeywordSet.from_sequences([[5, 6], [9]]))
    return ScoreMasker.for_stepper(GpuTrieStepper(index, array_module="torch"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@settings(max_examples=80, deadline=None)
@given(case=cases())
def test_cuda_kernels_give_mask_and_force_bits(case) -> None:
    _check(_cuda_masker(), "cuda", case)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", list(INT))
@pytest.mark.parametrize("group", [1, 2, 4])
def test_cuda_kernels_do_not_synchronise(dtype, group: int) -> None:
    masker = _cuda_masker()
    scores = torch.randn(8, 3000, device="cuda").to(dtype)
    allow = torch.rand(8, 3000, device="cuda") < 0.01
    scores[:group] = -float("inf")  # the first batch item forced
    want = scores.clone()
    mask_and_force(want, allow, group, True)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        masker(scores, allow, group, True, NEG_INF[dtype])
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.equal(scores.view(INT[dtype]), want.view(INT[dtype]))


# ---------------------------------------------------------------------------------------------- the processor
class _HostStepper:
    """`walk_mask` of a GPU stepper, on CPU tensors (the numpy stepper's walk and bool mask)."""

    def __init__(self, index) -> None:
        from flashtrie.stepwise import TrieStepper

        self.np = TrieStepper(index)

    def walk_mask(self, ids, vocab_size, eos_token_id, begin=None, end=None, out=None, additive=True):
        assert not additive and out is not None
        b = begin if isinstance(begin, int) else begin.numpy()
        states = self.np.walk(ids.numpy(), begin=b, eos_token_id=eos_token_id)
        out.copy_(torch.from_numpy(self.np.mask(states, vocab_size, eos_token_id, additive=False)))
        return out


@pytest.mark.parametrize("dtype", list(INT))
@pytest.mark.parametrize("beams", [1, 2])
@pytest.mark.parametrize("at_hook", [False, True])
def test_the_processor_masks_through_the_fused_kernels(emulated: ScoreMasker, dtype, beams: int,
                                                       at_hook: bool) -> None:
    """The processor's device path hands its scores, mask, batch item size and rule (``lowest`` outside the hook's
    slot) to the fused kernels: the numpy processor's bits, forced batch items included."""
    from flashtrie import KeywordSet, NarrowLoudsIndex
    from flashtrie.hf import TrieLogitsProcessor, _AtHook

    index = NarrowLoudsIndex.build(KeywordSet.from_sequences([[5, 6], [5, 7, 8], [9], [10, 11, 12], [20]]))
    ids = torch.tensor([[3, 5], [3, 9], [3, 10], [3, 40]])
    lowest = torch.finfo(dtype).min
    scores = torch.randn(4, 24).to(dtype)
    scores[0, 6], scores[0, 7] = lowest, -float("inf")  # row 0's allowed entries (6, 7) masked or lowest
    scores[2, 11] = -float("inf")  # row 2's only allowed entry (11) masked
    scores[3] = float("nan")  # off the trie: EOS only, a NaN kept
    emulated.launches.clear()  # type: ignore[attr-defined]
    outs = []
    for fused in (True, False):
        proc = TrieLogitsProcessor(index, 1, prompt_length=1, num_beams=beams, backend="numpy")
        if fused:
            proc._stepper = lambda device: _HostStepper(index)  # type: ignore[method-assign]
            proc._fused[None] = emulated
        call = _AtHook(proc, beams) if at_hook else proc
        outs.append(call(ids, scores.clone()).view(INT[dtype]))
    assert len(emulated.launches) == 2  # type: ignore[attr-defined]
    assert torch.equal(outs[0], outs[1])
