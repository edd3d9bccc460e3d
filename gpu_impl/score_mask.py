"""`ScoreMasker`: the hook's mask and forcing written into a logits processor's scores on the GPU
(kernels/score_mask.cu), two launches on the caller's current stream, no synchronisation.

The same bits as `flashtrie.hf.mask_and_force` (the reference, PyTorch ops): -inf's bit pattern into every
entry the bool mask leaves out; then, in each batch item (``group`` consecutive rows) whose every entry is
-inf (``lowest``: or the pattern below it, the float's lowest finite value), 0 at the allowed entries.  Every
store is an integer store of the float's width (2, 4 or 8 bytes).  ``ft_score_mask`` records per part of a
row whether an allowed entry is left above the masked patterns; ``ft_score_force`` reads those of its batch
item and forces where none is.  The per-part flags are written by every launch, so nothing is cleared
between calls; their buffer and the grid are kept per shape.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flashtrie.errors import InputError

from .launch import Launcher, load_kernels
from .layout import KERNEL_PARAMS

__all__ = ["ScoreMasker", "PART", "THREADS"]

#: row entries per block of ft_score_mask (a row of V entries takes ceil(V / PART) blocks)
PART = 2048
#: threads per block of both kernels
THREADS = 256
_MASK = KERNEL_PARAMS["ft_score_mask"].packer()
_FORCE = KERNEL_PARAMS["ft_score_force"].packer()
_LAUNCHERS: dict[tuple[int, str], Launcher] = {}  # (device, arch) -> its launcher (one load per device)
_LIMIT = 2**31 - 1  # blocks of a launch (grid x)


def _launcher(device: int, arch: str) -> Launcher:
    launcher = _LAUNCHERS.get((device, arch))
    if launcher is None:
        launcher = _LAUNCHERS[(device, arch)] = Launcher(load_kernels("score_mask.cu", arch, device_id=device))
    return launcher


class ScoreMasker:
    """Masks and forces scores on one device (see the module docstring)."""

    def __init__(self, launch: Callable[..., None], xp: Any) -> None:
        """``launch``: `Launcher.launch` of kernels/score_mask.cu (`for_stepper` loads it); ``xp``: the array
        module of a `GpuTrieStepper` (``stepper.xp``): the flags' buffer and the caller's current stream come
        from it."""
        self._launch = launch
        self._xp = xp
        self._shapes: dict[tuple[int, int, int], tuple[int, Any, int]] = {}  # (rows, V, group) -> parts, flags

    @classmethod
    def for_stepper(cls, stepper: Any) -> ScoreMasker:
        """A masker on the device of ``stepper`` (a `GpuTrieStepper`), with its array module: compiles (or
        loads) kernels/score_mask.cu once per device."""
        return cls(_launcher(int(stepper.device.device_id), stepper.arch).launch, stepper.xp)

    def _grid(self, rows: int, vocab: int, group: int) -> tuple[int, Any, int]:
        """Blocks per row, the per-part flags (uint8 ``[rows * parts]``) and their address, kept per shape."""
        key = (rows, vocab, group)
        hit = self._shapes.get(key)
        if hit is None:
            if group < 1 or rows % group:
                raise InputError(f"group: {group} does not divide the {rows} rows of scores")
            parts = -(-vocab // PART)
            if rows * parts > _LIMIT or group > _LIMIT:
                raise InputError(f"scores: {rows} rows x {parts} blocks per row (or {group} rows per batch item) "
                                 f"is over the launch limit {_LIMIT}")
            flags = self._xp.empty((rows * parts,), self._xp.bool)
            if len(self._shapes) > 16:
                self._shapes.clear()
            addr = int(flags.data_ptr()) if hasattr(flags, "data_ptr") else int(flags.data.ptr)
            hit = self._shapes[key] = (parts, flags, addr)
        return hit

    @staticmethod
    def takes(scores: Any) -> bool:
        """Whether the kernels can write ``scores`` in place: contiguous columns and rows that do not overlap
        (others go to `flashtrie.hf.mask_and_force`)."""
        rows, vocab = scores.shape
        return (vocab < 2 or scores.stride(1) == 1) and (rows < 2 or scores.stride(0) >= vocab)

    def __call__(self, scores: Any, allow: Any, group: int, lowest: bool, neg_inf: int) -> None:
        """Mask and force ``scores`` in place: a CUDA tensor ``[rows, V]`` of 2-, 4- or 8-byte floats that it
        `takes`, on this masker's device; ``allow`` a bool tensor of the same shape that it takes (True:
        allowed); ``neg_inf``: -inf's bit pattern as a signed integer of the float's width.  Nothing is
        launched for no rows or no columns."""
        rows, vocab = (int(s) for s in scores.shape)
        width = int(scores.element_size())
        if width not in (2, 4, 8):
            raise InputError(f"scores: expected 2-, 4- or 8-byte floats, got {width}-byte entries")
        if (rows, vocab) != tuple(allow.shape):
            raise InputError(f"allow: expected shape {[rows, vocab]}, got {list(allow.shape)}")
        if not (self.takes(scores) and self.takes(allow)):
            raise InputError(f"scores {list(scores.stride())}, allow {list(allow.stride())}: expected contiguous "
                             "columns (stride 1) and rows that do not overlap")
        if not rows or not vocab:
            return
        parts, _, flags = self._grid(rows, vocab, int(group))
        s, a = int(scores.data_ptr()), int(allow.data_ptr())
        rs, ast = int(scores.stride(0)), int(allow.stride(0))
        stream = self._xp.stream()
        self._launch(stream, "ft_score_mask", rows * parts, THREADS,
                     _MASK(scores=s, allow=a, live=flags, V=vocab, row_stride=rs, allow_stride=ast, neg_inf=neg_inf,
                           parts=parts, width=width, lowest=1 if lowest else 0))
        self._launch(stream, "ft_score_force", rows // group, THREADS,
                     _FORCE(scores=s, allow=a, live=flags, V=vocab, row_stride=rs, allow_stride=ast, parts=parts,
                            group=group, width=width))
