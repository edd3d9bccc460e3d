"""Training the quality models from scratch with a fixed seed, and their checkpoints.

Training examples (`training_examples`): every identifier's own tokens -> itself (indexing: the library is
a closed set the model learns), and the train split's (query, relevant identifier) pairs: a query with
several relevant identifiers is one example per identifier, so a model learns to spread its probability
over all of them.  On CUDA the forward pass runs under bf16 autocast (weights and optimizer in float32).
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
from flashtrie.datasets.quality_tasks import EOS, PAD, SEP, Task

from .quality_models import ModelSize, NarHead, count_parameters, make_ar_model

__all__ = ["TrainConfig", "Trained", "seed_everything", "training_examples", "pad_rows", "train_ar", "train_nar",
           "save_checkpoint"]


@dataclass(frozen=True)
class TrainConfig:
    """Steps, batch size and learning rate of one model's training."""

    steps: int
    batch_size: int
    lr: float
    warmup: int = 100
    size: ModelSize = field(default_factory=ModelSize)
    max_seconds: float = float("inf")  # the time guard: training stops after this many seconds


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
                "steps": self.config.steps, "steps_run": len(self.losses), "batch_size": self.config.batch_size,
                "lr": self.config.lr,
                **self.config.size.to_dict(), "final_loss": self.losses[-1] if self.losses else None,
                "checkpoint_sha256": self.sha256}


def seed_everything(seed: int) -> None:
    """Seed torch and ask for deterministic kernels (cuBLAS needs its workspace setting before first use)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    if torch.backends.cudnn.is_available():
        torch.backends.cudnn.benchmark = False


def training_examples(task: Task) -> tuple[list[np.ndarray], np.ndarray]:
    """(model inputs, identifier ids): every identifier's own tokens -> itself (indexing), then every
    (train query, relevant identifier) pair."""
    split = task.splits["train"]
    lib = [task.library[i] for i in range(len(task.library))]
    q = np.repeat(np.arange(len(split), dtype=np.int64), [r.size for r in split.relevant])
    ids = np.concatenate(split.relevant) if len(split) else np.zeros(0, np.int64)
    inputs = lib + [split.queries[int(i)] for i in q]
    return inputs, np.concatenate([np.arange(len(lib), dtype=np.int64), ids])


def pad_rows(rows: list[np.ndarray], width: int | None = None, fill: int = PAD) -> torch.Tensor:
    """Right-padded int64 tensor of ``rows``."""
    w = width if width is not None else max(len(r) for r in rows)
    out = np.full((len(rows), w), fill, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return torch.from_numpy(out)


def _trim(src: torch.Tensor) -> torch.Tensor:
    """``src`` without the columns that are padding in every row."""
    return src[:, :max(1, int((src != PAD).sum(1).max()))]


def _schedule(cfg: TrainConfig) -> Callable[[int], float]:
    def f(step: int) -> float:
        if step < cfg.warmup:
            return (step + 1) / cfg.warmup
        return max(0.05, 1.0 - (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))

    return f


def _loop(model: torch.nn.Module, cfg: TrainConfig, n_pairs: int, seed: int, loss_of: Callable[[np.ndarray], Any],
          progress: Callable[[str], None] | None, what: str) -> tuple[list[float], float]:
    """The shared training loop: seeded batches of example indices, AdamW, the schedule, and the time guard
    (training stops after ``cfg.max_seconds``; the losses say how many steps ran); (losses, seconds)."""
    if n_pairs == 0:
        raise ValueError("the task has no training examples")
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _schedule(cfg))
    rng = np.random.default_rng(seed)
    order = rng.permutation(n_pairs)
    pos, losses, pending = 0, [], []
    cuda = next(model.parameters()).is_cuda
    model.train()
    t0 = time.perf_counter()
    every = max(1, min(50, cfg.steps // 10))
    for step in range(cfg.steps):
        if pos + cfg.batch_size > n_pairs:
            order, pos = rng.permutation(n_pairs), 0
        batch = order[pos:pos + cfg.batch_size]
        pos += cfg.batch_size
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
            loss = loss_of(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        pending.append(loss.detach())
        if (step + 1) % every == 0 or step + 1 == cfg.steps:
            losses += torch.stack(pending).float().cpu().tolist()  # one device sync per `every` steps
            pending = []
            secs = time.perf_counter() - t0
            if progress and (step + 1) % (every * 10 if cfg.steps > 500 else every) == 0:
                progress(f"{what}: step {step + 1}/{cfg.steps} loss {np.mean(losses[-every:]):.3f} ({secs:.0f} s)")
            if secs > cfg.max_seconds:
                if progress:
                    progress(f"{what}: stopped at step {step + 1} of {cfg.steps}: the {cfg.max_seconds:.0f} s "
                             "training budget is spent")
                break
    if cuda:
        torch.cuda.synchronize()
    model.eval()
    return losses, time.perf_counter() - t0


def train_ar(task: Task, cfg: TrainConfig, seed: int, device: str,
             progress: Callable[[str], None] | None = None) -> Trained:
    """Train the BART model on `training_examples` (teacher forcing; labels = identifier + `EOS`)."""
    seed_everything(seed)
    model = make_ar_model(task.vocab_size, task.max_query_length, task.library.max_length + 2, cfg.size).to(device)
    inputs, ids = training_examples(task)
    src_all = pad_rows(inputs).to(device)
    lib = [task.library[i] for i in range(len(task.library))]
    labels_all = pad_rows([np.append(t, EOS) for t in lib], fill=-100).to(device)
    dec_all = pad_rows([np.concatenate([[SEP], t]) for t in lib]).to(device)
    ids_t = torch.from_numpy(ids).to(device)

    def loss_of(batch: np.ndarray) -> Any:
        b = torch.from_numpy(batch).to(device)
        src, tgt = _trim(src_all[b]), ids_t[b]
        labels = labels_all[tgt]
        width = max(1, int((labels != -100).sum(1).max()))
        return model(input_ids=src, attention_mask=src != PAD, decoder_input_ids=dec_all[tgt, :width].contiguous(),
                     labels=labels[:, :width].contiguous()).loss

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
    """Train the NAR head with cross-entropy per position against each example's identifier."""
    seed_everything(seed)
    targets, steps = nar_targets(task)
    model = NarHead(task.vocab_size, task.max_query_length, steps, cfg.size).to(device)
    inputs, ids = training_examples(task)
    src_all = pad_rows(inputs).to(device)
    tgt_all = torch.from_numpy(targets).to(device)
    ids_t = torch.from_numpy(ids).to(device)

    def loss_of(batch: np.ndarray) -> Any:
        b = torch.from_numpy(batch).to(device)
        tgt = tgt_all[ids_t[b]]
        keep = tgt != -100  # the vocabulary projection only where a target is (most of the cost)
        return torch.nn.functional.cross_entropy(model.logits(model.hidden(_trim(src_all[b]))[keep]).float(),
                                                 tgt[keep])

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
