"""Where a serving call's proposals come from: a model head's top-K made on the GPU each call (PyTorch), or
host (numpy) arrays turned into a `Proposals` each call.

The head is synthetic but does a head's work: logits ``[B, T, V]`` hold a stored workload's proposals (each
row's K tokens at K of the V slots, the other slots far below), and every call runs ``log_softmax`` over V,
``topk`` K and a gather from slot to token id (a slot that holds no proposal maps to padding, -1).  The
workload's token ids need not be below V: the slot -> token table is the model's vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from flashtrie.errors import InputError
from flashtrie.limits import PAD_TOKEN
from flashtrie.proposals import Proposals

__all__ = ["HeadRows", "head_rows", "host_arrays", "HostSource", "DeviceSource", "FLOOR_BELOW"]

#: How far below a row's lowest finite logprob the slots without a proposal sit (in logits).
FLOOR_BELOW = 30.0
#: The most bytes the logits and slot tables of one case may take on the device.
MAX_HEAD_BYTES = 16 << 30


@dataclass(frozen=True)
class HeadRows:
    """Rows of a synthetic head: ``logits[N, T, V]`` (float32) and ``slot_token[N, T, V]`` (int32, -1: none)."""

    logits: np.ndarray
    slot_token: np.ndarray


def head_rows(p: Proposals, queries: int, vocab: int, seed: int = 0) -> HeadRows:
    """The head rows of ``queries`` queries taken cyclically from ``p``; row (q, t)'s proposals sit at K
    consecutive slots (mod V) from a seeded offset."""
    q_n, t_n, k_n = p.shape
    if k_n > vocab:
        raise InputError(f"--vocab: {vocab:,} is below the workload's K = {k_n:,} proposals per row; a head's "
                         "vocabulary holds at least K tokens")
    need = 8 * queries * t_n * vocab
    if need > MAX_HEAD_BYTES:
        raise InputError(f"--vocab: {queries:,} queries x {t_n} steps x V = {vocab:,} need {need / 2**30:.1f} GiB of "
                         f"logits and slot tables, over {MAX_HEAD_BYTES >> 30} GiB; use a smaller --vocab")
    idx = np.arange(queries) % q_n
    tok, lp = p.tokens[idx], p.logprobs[idx]
    real = tok != PAD_TOKEN
    finite = real & np.isfinite(lp)
    low = np.float32(lp[finite].min() - FLOOR_BELOW) if finite.any() else np.float32(-FLOOR_BELOW)
    logits = np.full((queries, t_n, vocab), low, dtype=np.float32)
    slot_token = np.full((queries, t_n, vocab), -1, dtype=np.int32)
    rng = np.random.default_rng(seed)
    off = rng.integers(0, vocab, size=(queries, t_n, 1))
    slots = (np.arange(k_n)[None, None, :] + off) % vocab
    np.put_along_axis(logits, slots, np.where(real, lp, low).astype(np.float32), axis=2)
    np.put_along_axis(slot_token, slots, np.where(real, tok.astype(np.int64), -1).astype(np.int32), axis=2)
    return HeadRows(logits, slot_token)


def host_arrays(p: Proposals, queries: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The top-``k`` of ``queries`` queries taken cyclically from ``p`` as a head would give them on the host:
    int64 token ids (-1: padding), float32 logprobs, best first (ties: smaller token first)."""
    from flashtrie.harness.workloads import tile_proposals, truncate_proposals

    top = truncate_proposals(tile_proposals(p, queries), k)
    tok = np.where(top.tokens == PAD_TOKEN, -1, top.tokens.astype(np.int64))
    return tok, np.array(top.logprobs)


class HostSource:
    """Host proposals: each call builds a `Proposals` (the checks included) from the same numpy arrays."""

    kind = "host"

    def __init__(self, tokens: np.ndarray, logprobs: np.ndarray) -> None:
        self.tokens, self.logprobs = tokens, logprobs
        self.batch = int(tokens.shape[0])

    def __call__(self) -> Proposals:
        return Proposals(self.tokens, self.logprobs)


class DeviceSource:
    """Device proposals: each call runs the head's ``log_softmax`` -> ``topk`` -> gather on ``stream`` (a
    ``torch.cuda`` stream; None: the current one), over the batches of ``rows`` in turn; returns (int32
    tokens, float32 logprobs) tensors on ``device``."""

    kind = "device"

    def __init__(self, rows: HeadRows, batch: int, k: int, stream: Any, device: str = "cuda") -> None:
        import torch

        n = rows.logits.shape[0] // batch
        if n < 1:
            raise InputError(f"head rows: {rows.logits.shape[0]} queries, fewer than one batch of {batch}")
        self.batch, self.k, self.stream = batch, k, stream
        with self.current():
            lg = torch.from_numpy(rows.logits[: n * batch]).to(device, non_blocking=False)
            st = torch.from_numpy(rows.slot_token[: n * batch]).to(device, non_blocking=False)
        self.logits = [lg[i * batch:(i + 1) * batch] for i in range(n)]
        self.slots = [st[i * batch:(i + 1) * batch] for i in range(n)]
        self.calls = 0

    def current(self) -> Any:
        """A context in which ``stream`` is torch's current stream (where the searcher reads the arrays)."""
        import torch

        return torch.cuda.stream(self.stream)

    def __call__(self) -> tuple[Any, Any]:
        i = self.calls % len(self.logits)
        self.calls += 1
        with self.current():
            lp = self.logits[i].log_softmax(dim=-1)
            vals, slot = lp.topk(self.k, dim=-1)
            tokens = self.slots[i].gather(-1, slot)
        return tokens, vals

    def host_copy(self) -> tuple[np.ndarray, np.ndarray]:
        """One call's proposals copied to the host: int64 tokens (-1: padding) and float32 logprobs."""
        tokens, vals = self()
        if self.stream is not None:
            self.stream.synchronize()
        return tokens.cpu().numpy().astype(np.int64), vals.cpu().numpy()
