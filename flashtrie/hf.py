"""Hugging Face `generate()` integration: every generated token spells a keyword of the index, then EOS.

* `TrieLogitsProcessor(index, eos_token_id, prompt_length=None, backend="auto")`: a
  ``transformers.LogitsProcessor``.  Use it inside ``with in_hook_position(model, processor):`` around
  ``model.generate(...)`` (exactly transformers' ``prefix_allowed_tokens_fn`` hook, under every setting), or
  in ``generate(logits_processor=LogitsProcessorList([...]))`` (see **Where it runs**).
* `prefix_allowed_tokens_fn(index, eos_token_id, prompt_length)`: the same constraint as a callback for
  ``generate(prefix_allowed_tokens_fn=...)`` (one Python call per row per step: slow, for existing code).
* `generated_keywords(index, sequences, eos_token_id, prompt_length)`: the keyword id each row of
  ``generate()``'s output spells (-1 where it spells none: cut by ``max_new_tokens``, say).

**The hook's rules.**  Like transformers' `PrefixConstrainedLogitsProcessor`, the processor sets every
disallowed entry to -inf, and where every allowed entry of every row of a batch item (``num_beams`` rows;
``max(num_beams, num_return_sequences)`` as transformers counts them) is already -inf, because a processor
before it masked them (``no_repeat_ngram_size``, ``bad_words_ids``, ``min_new_tokens``, ...), it forces the
allowed tokens: those rows become 0 at the allowed tokens and -inf elsewhere.  transformers releases before
this rule leave such rows -inf, dropping the constraint there; the processor keeps it, so it differs from such a
hook exactly where that hook leaves the trie.

**Where it runs.**  transformers runs its hook after ``sequence_bias``, the repetition penalties,
``no_repeat_ngram_size``, ``bad_words_ids``, ``min_length`` and ``min_new_tokens``, and before
``forced_bos_token_id``, ``forced_eos_token_id``, ``remove_invalid_values``,
``exponential_decay_length_penalty``, ``suppress_tokens`` and ``begin_suppress_tokens``; a
``logits_processor=`` entry runs after all of these (and before the sampling warpers, as the hook).
`in_hook_position` puts the processor in the hook's own slot (it has transformers build the hook from a
placeholder and swaps the processor in), takes the batch item size from the hook transformers builds, starts a
new prompt at every ``generate()`` and warns once when ``max_length`` leaves no room for the longest keyword and
EOS: the sequences and scores are then the hook's under every setting (values: a -0.0 the hook turns into +0.0
stays -0.0, and a NaN or +inf logit at a disallowed token becomes -inf where the hook gives NaN).  In
``logits_processor=`` the result is the same whenever none of the six settings that follow the hook is active
and ``num_beams`` is given. With them, the processor cannot see what they overrode, so it keeps the trie: a
forced BOS or EOS that is not allowed gives way to the allowed tokens (forced), ``remove_invalid_values``
leaves -inf at disallowed tokens where the hook leaves the float's lowest value (and allowed entries at that
lowest value count as masked), and suppressed allowed tokens are forced back. There, with ``num_beams=1`` (the
default: rows are forced one by one), no row is all -inf, no sampling step fails, and greedy and sampled rows
(beam search: hypotheses of a finite score) spell the trie; with ``num_beams`` > 1 a beam whose allowed tokens
were all masked stays -inf while another beam of its batch item lives, as with the hook. In the hook slot the
processor does what the hook does, a row left all -inf by a later setting included (``suppress_tokens`` of the
only allowed token: the hook fails sampling there too).

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
it) and ``scores`` is returned: every disallowed entry becomes -inf and the allowed ones keep their bits,
NaN payloads included, for float16, bfloat16, float32 and float64 (the stepper gives a boolean mask; every
store into ``scores`` is an integer store of a bit pattern: `mask_and_force`).  The rows to force are found
on the scores' device, with no synchronisation: on the GPU two kernel launches after `walk_mask` write the
mask, find the rows to force and force them (`flashtrie.gpu_impl.score_mask`, the same bits as
`mask_and_force`, which does it with PyTorch ops elsewhere: one integer minimum and maximum per row).  One visible
difference from the hook: greedy search and sampling hand the processors the very tensor they keep as
``output_logits``; with ``output_logits=True`` those then show the masked values.  Pass ``inplace=False`` to
mask a copy instead (one clone per call).

**Prompt length.**  ``prompt_length=None`` takes the length of ``input_ids`` at the first call (the
prompt for decoder-only models, the decoder start token for encoder-decoder models) and keeps it while a
call has as many rows as that first call and either is exactly one token longer than the call before it, or
(assisted and prompt-lookup decoding, which go back to a shorter length after checking their candidates) is
at least as long as the prompt and holds the same prompt tokens (compared on the device: one synchronisation,
only at such calls).  Any other call starts a new prompt.  So a second ``generate()`` through the same
processor in ``logits_processor=`` is taken for a continuation when its first call is one token longer than
the last call of the first (a prompt as long as a greedy output of the first), or when its prompt begins with
the first prompt: pass ``prompt_length``, call `reset()` between calls, or use `in_hook_position` (which
resets at every ``generate()``).  ``prompt_length`` may also be a sequence, one per row of ``input_ids`` (or
one per batch item, repeated over its beams).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast

import numpy as np

try:
    import torch
    from transformers import LogitsProcessor
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(f"flashtrie.hf needs torch and transformers: pip install 'flashtrie[hf]' ({e})") from e

from .errors import InputError
from .generated import generated_keywords
from .generated import prompt_lengths as _prompt_lengths
from .index import NarrowLoudsIndex
from .stepwise import Stepper, StepStates, TrieStepper, eos_ids

__all__ = ["TrieLogitsProcessor", "in_hook_position", "prefix_allowed_tokens_fn", "generated_keywords"]

_BACKENDS = ("auto", "numpy", "gpu")


class TrieLogitsProcessor(LogitsProcessor):
    """Constrain every token generated after the prompt to spell a keyword of ``index``, then EOS."""

    def __init__(self, index: NarrowLoudsIndex, eos_token_id: int | Sequence[int], *,
                 prompt_length: int | Sequence[int] | None = None, backend: str = "auto", inplace: bool = True,
                 num_beams: int = 1, max_new_tokens: int | None = None) -> None:
        """``num_beams``: rows per batch item for the hook's forcing rule (`in_hook_position` sets it);
        ``max_new_tokens``: where given, a warning now if it cannot fit the longest keyword and EOS."""
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
        self.num_beams = _count(num_beams, "num_beams", 1)
        self._warned = False
        if max_new_tokens is not None:
            self._check_room(_count(max_new_tokens, "max_new_tokens", 0), f"max_new_tokens={max_new_tokens}")
        self._fixed = _prompt_lengths(prompt_length)
        self._cpu = TrieStepper(index)
        self._cpu.checked_eos(self.eos)  # refuse an EOS that is a trie token now, not at the first step
        self._gpu: dict[int, Stepper | None] = {}  # CUDA device -> its stepper (None: not usable there)
        self._fused: dict[int, Any] = {}  # CUDA device -> its `ScoreMasker` (where its stepper is usable)
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
        gpu = sum(int(g.dead_count) for g in self._gpu.values() if g is not None)
        return self._cpu.dead_count + gpu

    def _check_room(self, room: int, what: str) -> None:
        """Warn once when ``room`` generated tokens cannot hold the longest keyword and its EOS."""
        need = int(self.index.max_keyword_length) + 1
        if room < need and not self._warned:
            self._warned = True
            warnings.warn(f"flashtrie.hf: {what} leaves room for {room} generated tokens, but the longest keyword "
                          f"has {need - 1} tokens ({need} with EOS): rows on a longer keyword end cut, without EOS",
                          UserWarning, stacklevel=3)

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

    def _stepper(self, device: torch.device) -> Stepper:
        """The stepper for scores on ``device``: the GPU's (one per CUDA device) or numpy's."""
        if device.type != "cuda" or self.backend == "numpy":
            return self._cpu
        idx = device.index if device.index is not None else torch.cuda.current_device()
        if idx not in self._gpu:
            try:
                from .gpu_impl.score_mask import ScoreMasker
                from .gpu_impl.stepwise import GpuTrieStepper

                made = GpuTrieStepper(self.index, device=idx, array_module="torch")
                self._fused[idx] = ScoreMasker.for_stepper(made)
                self._gpu[idx] = made
            except Exception as e:
                if self.backend == "gpu":
                    raise
                warnings.warn(f"flashtrie.hf: the GPU stepper is not usable ({type(e).__name__}: {e}); masking on "
                              "the CPU with host copies", RuntimeWarning, stacklevel=3)
                self._gpu[idx] = None
        gpu = self._gpu[idx]
        return gpu if gpu is not None else self._cpu

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
        return self._process(input_ids, scores, self.num_beams, lowest=True)

    def _process(self, input_ids: torch.Tensor, scores: torch.Tensor, group: int, lowest: bool = False
                 ) -> torch.Tensor:
        """``lowest``: a row whose allowed entries are at most the float's lowest value counts as masked too
        (``remove_invalid_values`` before the processor turns -inf into it)."""
        if input_ids.ndim != 2 or scores.ndim != 2 or scores.shape[0] != input_ids.shape[0]:
            raise InputError(f"input_ids {list(input_ids.shape)} and scores {list(scores.shape)}: expected "
                             "[rows, length] and [rows, vocab]")
        if input_ids.dtype.is_floating_point or input_ids.dtype.is_complex or input_ids.dtype == torch.bool:
            raise InputError(f"input_ids: expected integer token ids, got {input_ids.dtype}")
        if scores.dtype not in _BITS:
            raise InputError(f"scores: expected float16, bfloat16, float32 or float64 logits, got {scores.dtype}")
        if scores.shape[0] % group:
            raise InputError(f"num_beams: {group} does not divide the {scores.shape[0]} rows of scores")
        begin = self._begin(input_ids)
        out = scores if self.inplace and not scores.requires_grad else scores.detach().clone()
        stepper = self._stepper(scores.device)
        allow = self._allowed(stepper, input_ids, begin, out)
        fused = self._fused.get(out.device.index) if stepper is not self._cpu else None
        if fused is not None and fused.takes(out):
            fused(out, allow, group, lowest, _NEG_INF[out.dtype])  # the same bits in two launches
        else:
            mask_and_force(out, allow, group, lowest)
        return out

    def _allowed(self, stepper: Stepper, input_ids: torch.Tensor, begin: Any, out: torch.Tensor) -> torch.Tensor:
        """The allowed entries of ``out`` (bool, True: allowed, on its device) at each row's state: on numpy from
        the states carried between calls, on the GPU by one `walk_mask` of every generated suffix (no copy to the
        host, no synchronisation)."""
        vocab = int(out.shape[1])
        if stepper is self._cpu:
            ids = input_ids.detach().cpu().numpy().astype(np.int64, copy=False)  # one dtype: the carried keys
            allow = stepper.mask(self._cpu_states(ids, begin), vocab, self.eos, additive=False)
            return torch.from_numpy(allow).to(out.device)
        ids = input_ids if input_ids.dtype == torch.int64 else input_ids.long()
        if ids.shape[1] > 1 and ids.stride(1) != 1:
            ids = ids.contiguous()  # the kernel reads rows of stride 1
        return cast(torch.Tensor, stepper.walk_mask(ids, vocab, self.eos, begin=self._device_begin(begin, out.device),
                                                    additive=False, out=self._bool_buffer(out.shape, out.device)))


class _AtHook(LogitsProcessor):
    """A `TrieLogitsProcessor` in the slot of transformers' hook, with the hook's batch item size."""

    def __init__(self, processor: TrieLogitsProcessor, group: int) -> None:
        self.processor, self.group = processor, group

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return self.processor._process(input_ids, scores, self.group)


def _placeholder(batch_id: int, sent: torch.Tensor) -> list[int]:  # pragma: no cover - swapped out, never called
    raise AssertionError("flashtrie.hf: the hook's placeholder was called")


@contextmanager
def in_hook_position(model: Any, processor: TrieLogitsProcessor) -> Iterator[TrieLogitsProcessor]:
    """Within the block, ``model.generate(...)`` runs ``processor`` where transformers runs its
    ``prefix_allowed_tokens_fn`` hook (see the module docstring): the hook's sequences and scores under every
    setting.  Each ``generate()`` starts a new prompt and sets the processor's batch item size."""
    if not isinstance(processor, TrieLogitsProcessor):
        raise InputError(f"processor: expected a TrieLogitsProcessor, got {type(processor).__name__}")
    build = getattr(model, "_get_logits_processor", None)
    if build is None or not callable(getattr(model, "generate", None)):
        raise InputError(f"model: expected a transformers model with generate(), got {type(model).__name__}")
    if "_get_logits_processor" in vars(model):
        raise InputError("model: already inside in_hook_position")

    def placed(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("prefix_allowed_tokens_fn") is not None:
            raise InputError("prefix_allowed_tokens_fn: not with in_hook_position (the processor takes its slot)")
        kwargs["prefix_allowed_tokens_fn"] = _placeholder
        procs = build(*args, **kwargs)
        slots = [i for i, p in enumerate(procs) if getattr(p, "_prefix_allowed_tokens_fn", None) is _placeholder]
        if len(slots) != 1:
            raise InputError("in_hook_position: transformers did not build its prefix_allowed_tokens_fn hook where "
                             "expected (a custom PrefixConstrainedLogitsProcessor in logits_processor replaces it)")
        cfg = kwargs["generation_config"] if "generation_config" in kwargs else args[0]
        # the hook's own batch item size (each release counts it its way), else as current releases count it
        group = int(getattr(procs[slots[0]], "_num_beams", 0) or 0) or max(int(cfg.num_beams or 1),
                                                                           int(cfg.num_return_sequences or 1))
        processor.reset()
        if cfg.max_length is not None:
            seq = int(kwargs.get("input_ids_seq_length") or 0)
            processor._check_room(int(cfg.max_length) - seq, f"max_length={cfg.max_length} after {seq} input tokens")
        procs[slots[0]] = _AtHook(processor, group)
        return procs

    model._get_logits_processor = placed
    try:
        yield processor
    finally:
        del model._get_logits_processor


def prefix_allowed_tokens_fn(index: NarrowLoudsIndex, eos_token_id: int | Sequence[int], prompt_length: int
                             ) -> Callable[[int, torch.Tensor], list[int]]:
    """A callback for ``generate(prefix_allowed_tokens_fn=...)``: the allowed next tokens of one row (its
    tokens after ``prompt_length``), EOS where a keyword ends, only EOS after EOS or off the trie."""
    if isinstance(prompt_length, bool) or not isinstance(prompt_length, (int, np.integer)) or prompt_length < 0:
        raise InputError(f"prompt_length: expected a non-negative integer, got {prompt_length!r}")
    stepper = TrieStepper(index)
    eos = eos_ids(eos_token_id)
    stepper.checked_eos(eos)

    def allowed(batch_id: int, sent: torch.Tensor) -> list[int]:
        ids = sent.detach().cpu().numpy().reshape(1, -1)
        st: StepStates = stepper.walk(ids, begin=min(int(prompt_length), ids.shape[1]), eos_token_id=eos)
        if int(st.node[0]) < 0:
            return list(eos)
        offsets, tokens = stepper.allowed(st)
        out = tokens.tolist()
        return out + list(eos) if bool(stepper.ends(st)[0]) else out

    return allowed


def _count(v: Any, name: str, low: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
        raise InputError(f"{name}: expected an integer of at least {low}, got {v!r}")
    return int(v)


#: The integer type of each float type's bits: every store of the mask is an integer store.
_BITS = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
         torch.float64: torch.int64}
#: -inf's bit pattern as that integer; the float's lowest finite value is the pattern one below it.
_NEG_INF = {f: int(torch.tensor(-float("inf"), dtype=f).view(b).item()) for f, b in _BITS.items()}


def mask_and_force(out: torch.Tensor, allow: torch.Tensor, group: int, lowest: bool) -> None:
    """The hook's mask, written into ``out`` in place on its device: -inf at every entry ``allow`` (bool, same
    shape) leaves out; then, in each batch item (``group`` consecutive rows) whose every entry is -inf (``lowest``:
    or the float's lowest finite value; a NaN is neither), 0 at the allowed entries.

    Every store is an integer store of a bit pattern into masked entries (or forced rows), so no allowed entry
    of a row that is not forced is read as a float, converted or written: its bits, NaN payloads included,
    stay.  All-masked rows are found on the device (integer minimum and maximum of each row's bits: -inf and
    the lowest value are adjacent patterns), with no synchronisation and no branch on device values.  The
    processor's path off the GPU stepper, and the reference of its fused kernels (`gpu_impl.score_mask`)."""
    if not out.shape[1]:
        return  # nothing to mask (a row of no entries has nothing to force either)
    bits = out.view(_BITS[out.dtype])
    neg_inf = _NEG_INF[out.dtype]
    bits.masked_fill_(allow.logical_not(), neg_inf)
    low, high = torch.aminmax(bits, dim=1)
    masked = (high <= neg_inf) & (low >= (neg_inf - 1 if lowest else neg_inf))
    force = masked.view(-1, group).all(dim=1, keepdim=True).expand(-1, group).reshape(-1, 1)
    bits.masked_fill_(force & allow, 0)

