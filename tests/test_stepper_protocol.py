"""The `Stepper` protocol: both steppers declare it and define every member themselves with its parameters, and
the transformers adapter gets through a generation using nothing else (instances of the GPU stepper: in
test_gpu_stepwise.py)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from flashtrie import KeywordSet, NarrowLoudsIndex
from flashtrie.stepwise import Stepper, TrieStepper

KWS = [[5, 6], [5, 7, 8], [9], [10, 11, 12], [20]]
INDEX = NarrowLoudsIndex.build(KeywordSet.from_sequences(KWS))
MEMBERS = sorted(n for n in vars(Stepper) if not n.startswith("_") and n not in ("backend", "index"))


def _gpu_class() -> type:
    pytest.importorskip("cuda.core")
    from flashtrie.gpu_impl.stepwise import GpuTrieStepper

    return GpuTrieStepper


def _params(fn: object) -> list[tuple[str, object]]:
    sig = inspect.signature(fn)  # type: ignore[arg-type]
    return [(p.name, p.default) for p in sig.parameters.values()]


@pytest.mark.parametrize("which", ["numpy", "gpu"])
def test_both_steppers_define_every_member_of_the_protocol(which: str) -> None:
    cls = TrieStepper if which == "numpy" else _gpu_class()
    assert Stepper in cls.__mro__ and cls.backend == which  # declared, not only alike
    assert {"dead_count", "reset_dead_count", "checked_eos", "walk_mask", "mask", "advance"} <= set(MEMBERS)
    for name in MEMBERS:
        mine, declared = inspect.getattr_static(cls, name), inspect.getattr_static(Stepper, name)
        assert mine is not declared, f"{cls.__name__} does not define {name}"
        if isinstance(declared, property):
            assert isinstance(mine, property) and mine.fset is None, f"{name}: a read-only property"
        else:
            assert _params(mine) == _params(declared), name


def test_the_numpy_stepper_is_a_stepper_and_its_dead_count_is_read_only() -> None:
    s = TrieStepper(INDEX)
    assert isinstance(s, Stepper)
    assert s.checked_eos(1) == (1,) and s.checked_eos([1, 2]) == (1, 2)
    s.mask(s.walk(np.array([[5, 30]]), eos_token_id=1), 32, 1)
    assert s.dead_count == 1
    with pytest.raises(AttributeError):
        s.dead_count = 0  # type: ignore[misc]
    s.reset_dead_count()
    assert s.dead_count == 0


class _ProtocolOnly:
    """A stepper that lets its user reach only the members of `Stepper` (reads) and nothing else."""

    def __init__(self, inner: Stepper) -> None:
        object.__setattr__(self, "_inner", inner)

    def __getattr__(self, name: str) -> object:
        if name not in MEMBERS and name not in ("backend", "index"):
            raise AssertionError(f"the adapter reached {name}, which is not in the Stepper protocol")
        return getattr(object.__getattribute__(self, "_inner"), name)

    def __setattr__(self, name: str, value: object) -> None:
        raise AssertionError(f"the adapter set {name} on a stepper")


def test_the_processor_uses_only_the_protocol() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from flashtrie.hf import TrieLogitsProcessor

    proc, ref = TrieLogitsProcessor(INDEX, 1, num_beams=2), TrieLogitsProcessor(INDEX, 1, num_beams=2)
    proc._cpu = _ProtocolOnly(proc._cpu)  # type: ignore[assignment]
    ids = torch.tensor([[3, 5], [3, 9], [3, 30], [3, 10]])
    scores = torch.randn(4, 32)
    scores[2:, 10:12] = -float("inf")  # the second batch item is forced
    for col in ([6], [1], [0], [11]), ([0], [0], [0], [12]):
        assert torch.equal(proc(ids, scores.clone()), ref(ids, scores.clone()))
        ids = torch.cat([ids, torch.tensor(col)], 1)
    assert proc.dead_count == ref.dead_count > 0
