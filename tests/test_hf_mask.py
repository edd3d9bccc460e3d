"""The processor's writes into the scores: allowed entries keep their bits (any pattern, NaN payloads included) on
every float type and device, rows to force are found on the device, and the CUDA path never synchronises."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from flashtrie import KeywordSet, NarrowLoudsIndex  # noqa: E402
from flashtrie.hf import TrieLogitsProcessor  # noqa: E402
from flashtrie.stepwise import StepStates, TrieStepper  # noqa: E402

V = 24
EOS = 1
KWS = [[5, 6], [5, 7, 8], [9], [10, 11, 12], [20]]
INDEX = NarrowLoudsIndex.build(KeywordSet.from_sequences(KWS))
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
# float type: (its integer type in torch and numpy, its width, its exponent field all ones: +inf's pattern)
TYPES = {torch.float16: (torch.int16, np.int16, 16, 0x7C00), torch.bfloat16: (torch.int16, np.int16, 16, 0x7F80),
         torch.float32: (torch.int32, np.int32, 32, 0x7F800000),
         torch.float64: (torch.int64, np.int64, 64, 0x7FF0000000000000)}
ROWS = [[3, 5], [3, 5, 7], [3, 9], [3, 40], [3, 10, 11]]  # prompt 3; the last but one is off the trie


def _signed(v: int, width: int) -> int:
    v &= (1 << width) - 1
    return v - (1 << width) if v >> (width - 1) else v


def _specials(width: int, exp: int) -> list[int]:
    """Patterns where a float conversion, a float compare or float arithmetic would show: NaNs of several
    payloads and both signs, ±0, ±inf, the lowest finite value, subnormals, the largest finite value."""
    sign = 1 << (width - 1)
    pats = [exp | 1, exp | 2, exp | (exp >> 1), exp | (exp >> 1) | 7, exp | ((exp >> 1) - 1),  # NaNs
            0, 1, 2, exp - 1, exp]
    return [_signed(p | s, width) for p in pats for s in (0, sign)]


def _expected(raw: np.ndarray, allow: np.ndarray, neg_inf: int) -> np.ndarray:
    """The hook's rule on bit patterns: -inf where not allowed; a row whose entries are then all -inf or the
    lowest finite value (the pattern below -inf) becomes 0 at its allowed entries."""
    out = np.where(allow, raw, neg_inf)
    forced = ((out == neg_inf) | (out == neg_inf - 1)).all(axis=1)
    return np.where(forced[:, None] & allow, 0, out)


def _allowed() -> np.ndarray:
    stepper = TrieStepper(INDEX)
    ids = np.array([r + [0] * (3 - len(r)) for r in ROWS], dtype=np.int64)
    lens = np.array([len(r) for r in ROWS], dtype=np.int64)
    states: StepStates = stepper.walk(ids, begin=1, end=lens)
    return stepper.mask(states, V, EOS, additive=False)


ALLOW = _allowed()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", list(TYPES))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_allowed_entries_keep_every_bit_pattern(device: str, dtype, data) -> None:
    ibits, npbits, width, exp = TYPES[dtype]
    neg_inf = _signed(exp | (1 << (width - 1)), width)
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    entry = st.one_of(st.integers(lo, hi), st.sampled_from(_specials(width, exp)), st.sampled_from([neg_inf]))
    raw = np.array(data.draw(st.lists(entry, min_size=len(ROWS) * V, max_size=len(ROWS) * V)),
                   dtype=npbits).reshape(len(ROWS), V)
    if data.draw(st.booleans()):  # a row whose allowed entries are all masked already: forced
        row = data.draw(st.integers(0, len(ROWS) - 1))
        raw[row, ALLOW[row]] = neg_inf
    want = _expected(raw, ALLOW, neg_inf)
    for inplace in (True, False):
        proc = TrieLogitsProcessor(INDEX, EOS, prompt_length=1, inplace=inplace)
        rows_out = []
        for r, toks in enumerate(ROWS):  # one call per row: each row has its own length
            scores = torch.from_numpy(raw[r:r + 1].copy()).view(dtype).to(device)
            out = proc(torch.tensor([toks], device=device), scores)
            rows_out.append(out.view(ibits).cpu().numpy()[0])
            proc.reset()
        got = np.stack(rows_out)
        bad = np.argwhere(got != want)
        assert bad.size == 0, (dtype, inplace, [(int(r), int(c), int(raw[r, c]), int(got[r, c]), int(want[r, c]))
                                                for r, c in bad[:5]])


class _MetaStepper:
    """A device stepper whose masks live on the meta device: any read of a value on the host (``.item()``,
    ``bool()``, ``.cpu()``, ``nonzero``) raises there, as a synchronisation would be needed on CUDA."""

    def __init__(self) -> None:
        self.calls = 0

    def walk_mask(self, ids, vocab_size, eos_token_id, begin=None, end=None, out=None, additive=True):
        assert not additive and out is not None and out.device.type == "meta"
        self.calls += 1
        return out


@pytest.mark.parametrize("dtype", list(TYPES))
@pytest.mark.parametrize("beams", [1, 2])
def test_the_device_path_reads_nothing_back_to_the_host(dtype, beams: int) -> None:
    """The device path (mask, rows to force, forcing) on meta tensors: it would raise at any host read."""
    proc = TrieLogitsProcessor(INDEX, EOS, num_beams=beams)
    fake = _MetaStepper()
    proc._stepper = lambda device: fake  # type: ignore[method-assign]
    for length in (3, 4, 5):  # the first call infers the prompt; the next ones continue it
        ids = torch.empty((2 * beams, length), dtype=torch.int64, device="meta")
        out = proc(ids, torch.empty((2 * beams, V), dtype=dtype, device="meta"))
        assert out.device.type == "meta" and out.shape == (2 * beams, V)
    assert fake.calls == 3


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", list(TYPES))
@pytest.mark.parametrize("beams", [1, 2])
def test_cuda_calls_do_not_synchronise(dtype, beams: int) -> None:
    """After the first call (the GPU stepper's construction, the upload of per-row prompt lengths), a call
    neither synchronises nor copies to the host, forced rows included; the fused kernels (gpu_impl.score_mask)
    mask and force."""
    proc = TrieLogitsProcessor(INDEX, EOS, backend="gpu", prompt_length=[1, 1, 2, 2], num_beams=beams)
    ids = torch.tensor([[3, 5], [3, 9], [3, 3], [3, 3]], device="cuda")
    scores = torch.randn(4, V, device="cuda").to(dtype)
    scores[1] = -float("inf")  # forced (with 2 beams: not, row 0 lives)
    scores[2:] = torch.finfo(dtype).min  # lowest: forced (__call__ counts it masked)
    proc(ids, scores.clone())
    torch.cuda.synchronize()
    assert proc._fused and None not in proc._fused.values()
    ids = torch.cat([ids, torch.tensor([[7], [EOS], [5], [9]], device="cuda")], 1)
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = proc(ids, scores.clone())
    finally:
        torch.cuda.set_sync_debug_mode("default")
    want = TrieLogitsProcessor(INDEX, EOS, backend="numpy", prompt_length=[1, 1, 2, 2], num_beams=beams)(
        ids.cpu(), scores.cpu())
    assert torch.equal(out.cpu().view(TYPES[dtype][0]), want.view(TYPES[dtype][0]))
