"""Hugging Face `generate()` integration: every generated token spells a keyword of the index, then EOS.

* `TrieLogitsProcessor(index, eos_token_id, prompt_length=None, backend="auto")`: a
  ``transformers.LogitsProcessor`` for ``model.generate(..., logits_processor=LogitsProcessorList([...]))``.
* `prefix_allowed_tokens_fn(index, eos_token_id, prompt_length)`: the same constraint as a callback for
  ``generate(prefix_allowed_tokens_fn=...)`` (one Python call per row per step: slow, for existing code).

**How each row's state is found.**  Beam search reorders rows between steps, so a row's state is derived
from its generated suffix (``input_ids[r, prompt_length:]``), of which it is a function: exact for greedy,
sampling and beam search whatever the reordering.  On the GPU every step re-walks each suffix from the root
(`walk_mask` of the stepwise API: one kernel launch that walks each row block-wide and writes its mask;
O(rows x generated tokens) device work, small next to a model step for identifier-length outputs).  On numpy a
row whose suffix less its last token was a row of the previous call takes that row's state and one
vectorised advance (beam search's reordering included: the suffixes are compared by value); the other rows
are walked from the root, one vectorised advance per generated column.  EOS is allowed exactly where a
keyword ends and is the only token after EOS or after a token that left the trie (see `flashtrie.stepwise`;
``dead_count`` of the processor counts such rows).

**The mask is written into ``scores`` in place** (``inplace=True``, the default; `LogitsProcessor` allows
it) and ``scores`` is returned: every disallowed entry becomes -inf and the allowed ones keep their bits (on
the GPU, at a node of at most 1,024 children, they are read and stored back), so a float32 CUDA call is one
kernel launch with no copy, no allocation and no synchronisation.  transformers'
`PrefixConstrainedLogitsProcessor` adds 0 / -inf to a copy: the same values (a -0.0 it turns into +0.0,
which compares equal) for finite logits, so generated sequences and scores agree; a +inf or NaN logit at a
disallowed token becomes -inf here where transformers gives NaN.  One visible difference: greedy search and
sampling hand the processors the very tensor they keep as ``output_logits``; with ``output_logits=True``
those then show the masked values.  Pass ``inplace=False`` to mask a copy instead (one clone per call).

**Prompt length.**  ``prompt_length=None`` takes the length of ``input_ids`` at the first call (the
prompt for decoder-only models, the decoder start token for encoder-decoder models) and keeps it while the
calls continue that prompt: a call one token longer than the one before, or (assisted and prompt-lookup
decoding, which go back to a shorter length after checking their candidates) a call with as many rows, at
least as long as the prompt and holding the same prompt tokens (compared on the device: one synchronisation,
only at such calls).  Any other call starts a new prompt.  A second ``generate()`` whose prompt is one token
longer than the first output, or begins with the first prompt, would be taken for a continuation: pass
``prompt_length`` or call `reset()` between calls.  ``prompt_length`` may also be a
sequence, one per row of ``input_ids`` (or one per batch item, repeated over its beams).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np

try:
    import torch
    from transformers import LogitsProcessor
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(f"flashtrie.hf needs torch and transformers: pip install 'flashtrie[hf]' ({e})") from e

from .errors import InputError
from .index import NarrowLoudsIndex
from .stepwise import StepStates, TrieStepper, eos_ids

__all__ = ["TrieLogitsProcessor", "prefix_allowed_tokens_fn"]

_BACKENDS = ("auto", "numpy", "gpu")


class TrieLogitsProcessor(LogitsProcessor):
    """Constrain every token generated after the prompt to spell a keyword of ``index``, then EOS."""

    def __init__(self, index: NarrowLoudsIndex, eos_token_id: int | Sequence[int], *,
                 prompt_length: int | Sequence[int] | None = None, backend: str = "auto", inplace: bool = True
                 ) -> None:
        if not isinstance(index, NarrowLoudsIndex):
            raise InputError(f"index: expected a flashtrie.NarrowLoudsIndex, got {type(index).__name__}")
        if backend not in _BACKENDS:
            raise InputError(f"backend: expected one of {_BACKENDS}, got {backend!r}")
        self.index = index
        self.eos = eos_ids(eos_token_id)
        if not self.eos:
            raise InputError("eos_token_id: the processor needs an EOS token id")
        if not isinstance(inplace, bool):
            raise InputError(f"inplace: expected a bool, got {inplace!r}")
        self.backend, self.inplace = backend, inplace
        self._fixed = _prompt_lengths(prompt_length)
        self._cpu = TrieStepper(index)
        self._cpu._eos(self.eos)  # refuse an EOS that is a trie token now, not at the first step
        self._gpu: dict[int, Any] = {}
        self._inferred: int | None = None
        self._prompt: torch.Tensor | None = None  # prompt_length=None: the inferred prompt's tokens
        self._last_len = -1
        self._begin_dev: tuple[np.ndarray, torch.Tensor] | None = None  # per-row prompt lengths on the device
        self._bool: torch.Tensor | None = None  # the bool mask buffer of scores that are not float32
        self._last_states: dict[bytes, tuple[int, int]] = {}  # numpy: the last call's suffixes and their states
        self._carried = 0  # numpy: rows that took a carried state, over all calls

    @property
    def dead_count(self) -> int:
        """Rows seen dead (a token left the trie) by every call so far, on every backend (syncs the GPU)."""
        return self._cpu.dead_count + sum(int(g.dead_count) for g in self._gpu.values() if g is not None)

    def reset(self) -> None:
        """Forget the inferred prompt length (before reusing the processor for another `generate()`)."""
        self._inferred, self._prompt, self._last_len = None, None, -1
        self._last_states = {}

    def _cpu_states(self, ids: np.ndarray, begin: Any) -> StepStates:
        """Each row's state after ``ids[r, begin[r]:]`` (numpy): from the previous call's state of the same
        suffix less its last token plus one advance where there is one, else walked from the root."""
        rows, width = ids.shape
        lo = np.broadcast_to(np.asarray(begin, dtype=np.int64), (rows,))
        keys = [ids[r, lo[r]:].tobytes() for r in range(rows)]
        node, off = np.zeros(rows, np.int64), np.zeros(rows, np.int64)
        hit = np.zeros(rows, dtype=bool)
        last, step = self._last_states, ids.itemsize
        for r, k in enumerate(keys):
            s = last.get(k[:-step]) if k else None
            if s is not None:
                node[r], off[r], hit[r] = s[0], s[1], True
        h, m = np.flatnonzero(hit), np.flatnonzero(~hit)
        self._carried += int(h.size)
        if h.size:
            nxt = self._cpu.advance(StepStates(node[h], off[h]), ids[h, width - 1], self.eos)
            node[h], off[h] = nxt.node, nxt.off
        if m.size:
            walked = self._cpu.walk(ids[m], begin=lo[m], eos_token_id=self.eos)
            node[m], off[m] = walked.node, walked.off
        self._last_states = {k: (int(node[r]), int(off[r])) for r, k in enumerate(keys)}
        return StepStates(node, off)

    def _begin(self, input_ids: torch.Tensor) -> Any:
        rows, length = input_ids.shape
        p: int | list[int]
        if self._fixed is not None:
            p = self._fixed
        else:
            if not self._continues(input_ids):
                self._inferred, self._prompt = length, input_ids.detach().clone()
            p = cast(int, self._inferred)  # (set here, or by the call this one continues)
        self._last_len = length
        if isinstance(p, int):
            if p > length:
                raise InputError(f"prompt_length: {p} is longer than input_ids ({length} tokens)")
            return p
        if rows % len(p):
            raise InputError(f"prompt_length: {len(p)} values do not divide the {rows} rows of input_ids")
        arr = np.repeat(np.asarray(p, dtype=np.int64), rows // len(p))
        if arr.max() > length:
            raise InputError(f"prompt_length: {int(arr.max())} is longer than input_ids ({length} tokens)")
        return arr

    def _continues(self, input_ids: torch.Tensor) -> bool:
        """Whether ``input_ids`` continues the inferred prompt (see the module docstring)."""
        rows, length = input_ids.shape
        pr = self._prompt
        if pr is None or self._inferred is None or rows != pr.shape[0]:
            return False
        if length == self._last_len + 1:
            return True
        p = self._inferred
        return length >= p and pr.device == input_ids.device and bool(torch.equal(input_ids[:, :p], pr[:, :p]))

    def _stepper(self, device: torch.device) -> Any:
        if device.type != "cuda" or self.backend == "numpy":
            return None
        idx = device.index if device.index is not None else torch.cuda.current_device()
        if idx not in self._gpu:
            try:
                from .gpu_impl.stepwise import GpuTrieStepper

                self._gpu[idx] = GpuTrieStepper(self.index, device=idx, array_module="torch")
            except Exception as e:
                if self.backend == "gpu":
                    raise
                warnings.warn(f"flashtrie.hf: the GPU stepper is not usable ({type(e).__name__}: {e}); masking on "
                              "the CPU with host copies", RuntimeWarning, stacklevel=3)
                self._gpu[idx] = None
        return self._gpu[idx]

    def _device_begin(self, begin: Any, device: torch.device) -> Any:
        """``begin`` for the GPU stepper: an int as it is, per-row lengths as a device tensor (uploaded
        again only when they change)."""
        if isinstance(begin, int):
            return begin
        hit = self._begin_dev
        if hit is None or hit[1].device != device or not np.array_equal(hit[0], begin):
            hit = self._begin_dev = (begin, torch.as_tensor(begin, device=device))
        return hit[1]

    def _bool_buffer(self, shape: torch.Size, device: torch.device) -> torch.Tensor:
        buf = self._bool
        if buf is None or buf.shape != shape or buf.device != device:
            buf = self._bool = torch.empty(shape, dtype=torch.bool, device=device)
        return buf

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if input_ids.ndim != 2 or scores.ndim != 2 or scores.shape[0] != input_ids.shape[0]:
            raise InputError(f"input_ids {list(input_ids.shape)} and scores {list(scores.shape)}: expected "
                             "[rows, length] and [rows, vocab]")
        if input_ids.dtype.is_floating_point or input_ids.dtype.is_complex or input_ids.dtype == torch.bool:
            raise InputError(f"input_ids: expected integer token ids, got {input_ids.dtype}")
        if not scores.dtype.is_floating_point:
            raise InputError(f"scores: expected floating-point logits, got {scores.dtype}")
        begin = self._begin(input_ids)
        vocab = int(scores.shape[1])
        out = scores if self.inplace and not scores.requires_grad else scores.detach().clone()
        gpu = self._stepper(scores.device)
        if gpu is not None:
            b = self._device_begin(begin, scores.device)
            ids = input_ids if input_ids.dtype == torch.int64 else input_ids.long()
            if out.dtype == torch.float32 and (out.shape[1] < 2 or out.stride(1) == 1):
                gpu.walk_mask(ids, vocab, self.eos, begin=b, out=out)
                return out
            allow = gpu.walk_mask(ids, vocab, self.eos, begin=b, additive=False,
                                  out=self._bool_buffer(out.shape, out.device))
            return out.masked_fill_(allow.logical_not_(), -float("inf"))
        ids = input_ids.detach().cpu().numpy().astype(np.int64, copy=False)  # one dtype: the carried states' keys
        states = self._cpu_states(ids, begin)
        if out.dtype == torch.float32 and out.device.type == "cpu":
            self._cpu.mask(states, vocab, self.eos, out=out.numpy())
            return out
        allow = torch.from_numpy(self._cpu.mask(states, vocab, self.eos, additive=False)).to(out.device)
        return out.masked_fill_(allow.logical_not_(), -float("inf"))


def prefix_allowed_tokens_fn(index: NarrowLoudsIndex, eos_token_id: int | Sequence[int], prompt_length: int
                             ) -> Callable[[int, torch.Tensor], list[int]]:
    """A callback for ``generate(prefix_allowed_tokens_fn=...)``: the allowed next tokens of one row (its
    tokens after ``prompt_length``), EOS where a keyword ends, only EOS after EOS or off the trie."""
    if isinstance(prompt_length, bool) or not isinstance(prompt_length, (int, np.integer)) or prompt_length < 0:
        raise InputError(f"prompt_length: expected a non-negative integer, got {prompt_length!r}")
    stepper = TrieStepper(index)
    eos = eos_ids(eos_token_id)
    stepper._eos(eos)

    def allowed(batch_id: int, sent: torch.Tensor) -> list[int]:
        ids = sent.detach().cpu().numpy().reshape(1, -1)
        st: StepStates = stepper.walk(ids, begin=min(int(prompt_length), ids.shape[1]), eos_token_id=eos)
        if int(st.node[0]) < 0:
            return list(eos)
        offsets, tokens = stepper.allowed(st)
        out = tokens.tolist()
        return out + list(eos) if bool(stepper.ends(st)[0]) else out

    return allowed


def _prompt_lengths(p: int | Sequence[int] | None) -> int | list[int] | None:
    if p is None:
        return None
    if isinstance(p, (int, np.integer)) and not isinstance(p, bool):
        if p < 0:
            raise InputError(f"prompt_length: expected a non-negative integer, got {p}")
        return int(p)
    try:
        vals = list(cast(Sequence[int], p))
    except TypeError:
        raise InputError(f"prompt_length: expected an int or a sequence of ints, got {p!r}") from None
    if not vals or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0 for v in vals):
        raise InputError(f"prompt_length: expected an int or a non-empty sequence of non-negative ints, got {p!r}")
    return [int(v) for v in vals]


def generated_keywords(index: NarrowLoudsIndex, sequences: Any, eos_token_id: int | Sequence[int],
                       prompt_length: int | Sequence[int]) -> np.ndarray:
    """The keyword id each row of ``generate()``'s output spells, -1 where it spells none (int64, one per row).

    Row r's continuation ``sequences[r, prompt_length:]`` must be a whole keyword followed by EOS (any of the
    ``eos_token_id`` ids); what follows the first EOS (``generate()``'s padding, equal to EOS or not) is not
    read.  -1 where no EOS follows the prompt (the row was cut by ``max_new_tokens``), where EOS comes before a
    keyword ends, or where a token leaves the trie.  ``sequences``: a ``[rows, L]`` torch tensor or numpy array
    of token ids (with beams or ``num_return_sequences``, rows = batch x sequences); ``prompt_length``: an int,
    one per row, or one per batch item (repeated over its rows), as for `TrieLogitsProcessor`; 1 for an
    encoder-decoder model's decoder start token.  Vectorised: one `TrieStepper.advance` per column.
    """
    from .stepwise import check_eos

    if not isinstance(index, NarrowLoudsIndex):
        raise InputError(f"index: expected a flashtrie.NarrowLoudsIndex, got {type(index).__name__}")
    eos = eos_ids(eos_token_id)
    if not eos:
        raise InputError("eos_token_id: expected the EOS token id (or ids) that ends each keyword")
    seq = sequences.detach().cpu().numpy() if isinstance(sequences, torch.Tensor) else np.asarray(sequences)
    if seq.ndim != 2 or (seq.size and (not np.issubdtype(seq.dtype, np.integer) or seq.dtype == np.bool_)):
        raise InputError(f"sequences: expected a 2-D integer array [rows, length], got {seq.dtype}{list(seq.shape)}")
    if prompt_length is None:
        raise InputError("prompt_length: expected the prompt's length (an int, or one per row or batch item)")
    rows, width = seq.shape
    p = _prompt_lengths(prompt_length)
    assert p is not None  # (prompt_length is not None)
    if isinstance(p, int):
        begin = np.full(rows, p, dtype=np.int64)
    else:
        if rows % len(p):
            raise InputError(f"prompt_length: {len(p)} values do not divide the {rows} rows of sequences")
        begin = np.repeat(np.asarray(p, dtype=np.int64), rows // len(p))
    if rows and int(begin.max()) > width:
        raise InputError(f"prompt_length: {int(begin.max())} is longer than the sequences ({width} tokens)")
    check_eos(index, eos)
    after = np.arange(width, dtype=np.int64)[None, :] >= begin[:, None]
    is_eos = np.isin(seq, np.asarray(eos, dtype=np.int64)) & after
    has_eos = is_eos.any(axis=1)
    end = np.where(has_eos, np.argmax(is_eos, axis=1), width)
    stepper = TrieStepper(index)
    states = stepper.walk(seq.astype(np.int64, copy=False), begin=begin, end=end)
    out = np.full(rows, -1, dtype=np.int64)
    whole = np.flatnonzero(has_eos & stepper.ends(states))
    if whole.size:
        out[whole] = index.keyword_ids_of(states.node[whole])
    return out
