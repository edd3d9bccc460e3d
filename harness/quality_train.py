"""Training the quality models from scratch with a fixed seed, and their checkpoints.

Training examples are the train split's (query, relevant identifier) pairs: a query with several relevant
identifiers is one example per identifier, so a model learns to spread its probability over all of them.
Both models train with AdamW, a linear warm-up then a linear decay, for a fixed number of steps; the example
order comes from a numpy generator seeded with ``seed``, the weights from ``torch.manual_seed(seed)``, and
deterministic algorithms are asked for (`seed_everything`), so a run on one machine repeats its losses.
Checkpoints go to a cache folder (never into the repository); their sha256 goes into the records.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flashtrie.datasets.quality_tasks import EOS, PAD, SEP, Split, Task

from .quality_models import ModelSize, NarHead, count_parameters, make_ar_model

__all__ = ["TrainConfig", "Trained", "seed_everything", "train_pairs", "pad_rows", "train_ar", "train_nar",
           "save_checkpoint"]


@dataclass(frozen=True)
class TrainConfig:
    """Steps, batch size and learning rate of one model's training."""

    steps: int
    batch_size: int
    lr: float
    warmup: int = 100
    size: ModelSize = field(default_factory=ModelSize)


@dataclass
class Trained:
    """A trained model and what the records say about it."""

    model: Any
    kind: str  # "ar" or "nar"
    seconds: float
    losses: list[float]
    parameters: int
    config: TrainConfig
    sha256: str = ""
    path: str = ""

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "parameters": self.parameters, "train_seconds": round(self.seconds, 3),
                "steps": self.config.steps, "batch_size": self.config.batch_size, "lr": self.config.lr,
                **self.config.size.to_dict(), "final_loss": self.losses[-1] if self.losses else None,
                "checkpoint_sha256": self.sha256}


def seed_everything(seed: int) -> None:
    """Seed torch and ask for deterministic kernels (cuBLAS needs its workspace setting before first use)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    if torch.backends.cudnn.is_available():
        torch.backends.cudnn.benchmark = False


def train_pairs(split: Split) -> tuple[np.ndarray, np.ndarray]:
    """(query index, identifier id) for every relevant identifier of every query of ``split``."""
    q = np.repeat(np.arange(len(split), dtype=np.int64), [r.size for r in split.relevant])
    ids = np.concatenate(split.relevant) if len(split) else np.zeros(0, np.int64)
    return q, ids


def pad_rows(rows: list[np.ndarray], width: int | None = None, fill: int = PAD) -> torch.Tensor:
    """Right-padded int64 tensor of ``rows``."""
    w = width if width is not None else max(len(r) for r in rows)
    out = np.full((len(rows), w), fill, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return torch.from_numpy(out)


def _schedule(cfg: TrainConfig) -> Callable[[int], float]:
    def f(step: int) -> float:
        if step < cfg.warmup:
            return (step + 1) / cfg.warmup
        return max(0.05, 1.0 - (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))

    return f


def _loop(model: torch.nn.Module, cfg: TrainConfig, n_pairs: int, seed: int, loss_of: Callable[[np.ndarray], Any],
          progress: Callable[[str], None] | None, what: str) -> tuple[list[float], float]:
    """The shared training loop: seeded batches of pair indices, AdamW, the schedule; (losses, seconds)."""
    if n_pairs == 0:
        raise ValueError("the train split has no (query, identifier) pairs")
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _schedule(cfg))
    rng = np.random.default_rng(seed)
    order = rng.permutation(n_pairs)
    pos, losses = 0, []
    model.train()
    t0 = time.perf_counter()
    every = max(1, cfg.steps // 10)
    for step in range(cfg.steps):
        if pos + cfg.batch_size > n_pairs:
            order, pos = rng.permutation(n_pairs), 0
        batch = order[pos:pos + cfg.batch_size]
        pos += cfg.batch_size
        loss = loss_of(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if progress and (step + 1) % every == 0:
            progress(f"{what}: step {step + 1}/{cfg.steps} loss {np.mean(losses[-every:]):.3f} "
                     f"({time.perf_counter() - t0:.0f} s)")
    if next(model.parameters()).is_cuda:
        torch.cuda.synchronize()
    model.eval()
    return losses, time.perf_counter() - t0


def train_ar(task: Task, cfg: TrainConfig, seed: int, device: str,
             progress: Callable[[str], None] | None = None) -> Trained:
    """Train the BART model on the train split (teacher forcing; labels = identifier + `EOS`)."""
    seed_everything(seed)
    split = task.splits["train"]
    model = make_ar_model(task.vocab_size, split.queries.max_length, task.library.max_length + 2, cfg.size).to(device)
    q_idx, ids = train_pairs(split)
    queries = [split.queries[i] for i in range(len(split))]
    targets = [np.append(task.library[i], EOS) for i in range(len(task.library))]

    def loss_of(batch: np.ndarray) -> Any:
        src = pad_rows([queries[i] for i in q_idx[batch]]).to(device)
        tgt = [targets[i] for i in ids[batch]]
        labels = pad_rows(tgt, fill=-100).to(device)
        dec = pad_rows([np.concatenate([[SEP], t[:-1]]) for t in tgt]).to(device)
        return model(input_ids=src, attention_mask=src != PAD, decoder_input_ids=dec, labels=labels).loss

    losses, secs = _loop(model, cfg, ids.size, seed, loss_of, progress, f"{task.name} AR")
    return Trained(model, "ar", secs, losses, count_parameters(model), cfg)


def nar_targets(task: Task) -> tuple[np.ndarray, int]:
    """Per identifier, its T position targets (tokens, `EOS` at its length, -100 after); and T."""
    steps = task.library.max_length + 1
    out = np.full((len(task.library), steps), -100, dtype=np.int64)
    for i in range(len(task.library)):
        kw = task.library[i]
        out[i, :kw.size] = kw
        out[i, kw.size] = EOS
    return out, steps


def train_nar(task: Task, cfg: TrainConfig, seed: int, device: str,
              progress: Callable[[str], None] | None = None) -> Trained:
    """Train the NAR head with cross-entropy per position against each relevant identifier."""
    seed_everything(seed)
    split = task.splits["train"]
    targets, steps = nar_targets(task)
    model = NarHead(task.vocab_size, task.max_query_length, steps, cfg.size).to(device)
    q_idx, ids = train_pairs(split)
    queries = [split.queries[i] for i in range(len(split))]
    tgt_all = torch.from_numpy(targets)

    def loss_of(batch: np.ndarray) -> Any:
        src = pad_rows([queries[i] for i in q_idx[batch]]).to(device)
        logits = model(src)
        tgt = tgt_all[ids[batch]].to(device)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1),
                                                 ignore_index=-100)

    losses, secs = _loop(model, cfg, ids.size, seed, loss_of, progress, f"{task.name} NAR")
    return Trained(model, "nar", secs, losses, count_parameters(model), cfg)


def save_checkpoint(trained: Trained, folder: str | os.PathLike[str], name: str) -> None:
    """Save the weights under ``folder`` (written to a temporary name, then renamed) and record the sha256."""
    path = Path(folder) / f"{name}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(trained.model.state_dict(), tmp)
    os.replace(tmp, path)
    trained.sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
    trained.path = str(path)
