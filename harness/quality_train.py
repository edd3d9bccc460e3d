"""Training the quality models from scratch with a fixed seed, and their checkpoints.

Training examples (`training_examples`): every identifier's own tokens -> itself (indexing: the library is
a closed set the model learns), and the train split's (query, relevant identifier) pairs: a query with
several relevant identifiers is one example per identifier, so a model learns to spread its probability
over all of them.  On CUDA the forward pass runs under bf16 autocast (weights and optimizer in float32).
Both models train with AdamW, a linear warm-up then a linear decay, for a fixed number of steps (the plan);
every ``eval_every`` steps the loss on the validation pairs (the same loss, without gradients, on a fixed
sample of them) is recorded, and the weights of the lowest validation loss are the model that is measured.
The stopping rule `stopping_step` (patience on the validation loss with a minimum improvement) says where
training could have stopped; the plan's steps are chosen to pass it, and the records carry both.  The
example order comes from a numpy generator seeded with ``seed``, the weights from ``torch.manual_seed(seed)``, and
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

__all__ = ["TrainConfig", "Trained", "seed_everything", "training_examples", "validation_examples", "pad_rows",
           "stopping_step", "STOPPING_RULE", "train_ar", "train_nar",
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
    eval_every: int = 50  # steps between validation losses
    val_pairs: int = 2048  # validation pairs in the loss sample


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
    val_curve: list[tuple[int, float]] = field(default_factory=list)  # (step, validation loss)

    def describe(self) -> dict[str, Any]:
        best = min(self.val_curve, key=lambda x: x[1]) if self.val_curve else (None, None)
        every = max(1, len(self.losses) // 200)
        return {"kind": self.kind, "parameters": self.parameters, "train_seconds": round(self.seconds, 3),
                "steps": self.config.steps, "steps_run": len(self.losses), "batch_size": self.config.batch_size,
                "lr": self.config.lr,
                **self.config.size.to_dict(), "final_loss": self.losses[-1] if self.losses else None,
                "train_curve": [[i + 1, round(float(np.mean(self.losses[i + 1 - every:i + 1])), 5)]
                                for i in range(every - 1, len(self.losses), every)],
                "val_curve": [[a, round(b, 5)] for a, b in self.val_curve], "best_step": best[0],
                "best_val_loss": best[1], "stopping_rule": STOPPING_RULE,
                "stopping_step": stopping_step(self.val_curve), "checkpoint_sha256": self.sha256}


#: the stopping rule's patience (validation losses) and minimum relative improvement
PATIENCE, MIN_DELTA = 5, 0.005
STOPPING_RULE = (f"stop when the validation loss has not improved on its best by more than {MIN_DELTA:.1%} for "
                 f"{PATIENCE} evaluations in a row; the model measured is the one of the best validation loss")


def stopping_step(curve: list[tuple[int, float]], patience: int = PATIENCE, min_delta: float = MIN_DELTA
                  ) -> int | None:
    """The step at which the rule (`STOPPING_RULE`) stops on ``curve`` [(step, validation loss)], or None
    when it would still be training at the curve's end."""
    best, since = float("inf"), 0
    for step, loss in curve:
        if loss < best * (1 - min_delta):
            best, since = loss, 0
        else:
            since += 1
            if since >= patience:
                return int(step)
    return None


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


def validation_examples(task: Task, limit: int, seed: int) -> tuple[list[np.ndarray], np.ndarray]:
    """(model inputs, identifier ids) of up to ``limit`` validation pairs (a seeded sample, fixed for the run)."""
    split = task.splits["validation"]
    q = np.repeat(np.arange(len(split), dtype=np.int64), [r.size for r in split.relevant])
    ids = np.concatenate(split.relevant) if len(split) else np.zeros(0, np.int64)
    if ids.size > limit:
        keep = np.sort(np.random.default_rng(seed + 2).choice(ids.size, size=limit, replace=False))
        q, ids = q[keep], ids[keep]
    return [split.queries[int(i)] for i in q], ids


@dataclass(frozen=True)
class _Examples:
    """The training examples, then the validation sample, on the device, and the host arrays that size each
    batch (read on the host, so that a training step never waits for the device)."""

    src: torch.Tensor  # padded model inputs
    ids: torch.Tensor  # identifier ids
    src_len: np.ndarray  # each input's length
    ids_host: np.ndarray  # identifier ids
    n_train: int
    val_rows: np.ndarray  # the validation rows' indices

    def batch(self, rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs trimmed to the batch's longest, identifier ids) of ``rows``."""
        b = _to_device(rows, self.src.device)
        return self.src[b, :max(1, int(self.src_len[rows].max()))], self.ids[b]


def _to_device(a: np.ndarray, device: torch.device) -> torch.Tensor:
    """``a`` on ``device``; through pinned memory without a wait on CUDA."""
    t = torch.from_numpy(a)
    return t.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else t.to(device)


def _examples(task: Task, cfg: TrainConfig, seed: int, device: str) -> _Examples:
    """The training examples and the validation sample of ``task`` (`_Examples`)."""
    inputs, ids = training_examples(task)
    v_in, v_ids = validation_examples(task, cfg.val_pairs, seed)
    all_ids = np.concatenate([ids, v_ids])
    return _Examples(pad_rows(inputs + v_in).to(device), torch.from_numpy(all_ids).to(device),
                     np.array([len(r) for r in inputs + v_in], dtype=np.int64), all_ids, int(ids.size),
                     np.arange(ids.size, ids.size + v_ids.size))


def _mean_loss(loss_of: Callable[[np.ndarray], Any], rows: np.ndarray, chunk: int) -> Callable[[], float] | None:
    """The validation loss: the mean of ``loss_of`` over chunks of ``rows`` (None without rows)."""
    if rows.size == 0:
        return None
    return lambda: float(np.mean([float(loss_of(rows[a:a + chunk])) for a in range(0, rows.size, chunk)]))


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
          progress: Callable[[str], None] | None, what: str, val_loss: Callable[[], float] | None = None
          ) -> tuple[list[float], float, list[tuple[int, float]]]:
    """The shared training loop: seeded batches of example indices, AdamW, the schedule, the validation
    loss every ``cfg.eval_every`` steps (the best weights are restored at the end) and the time guard
    (training stops after ``cfg.max_seconds``; the losses say how many steps ran); (losses, seconds,
    validation curve)."""
    if n_pairs == 0:
        raise ValueError("the task has no training examples")
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _schedule(cfg))
    rng = np.random.default_rng(seed)
    order = rng.permutation(n_pairs)
    pos, losses, pending = 0, [], []
    cuda = next(model.parameters()).is_cuda
    curve: list[tuple[int, float]] = []
    best: dict[str, torch.Tensor] | None = None
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
        if val_loss is not None and ((step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps):
            model.eval()
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
                v = float(val_loss())
            model.train()
            if not curve or v < min(c for _, c in curve):
                best = {k: t.detach().clone() for k, t in model.state_dict().items()}
            curve.append((step + 1, v))
        if (step + 1) % every == 0 or step + 1 == cfg.steps:
            losses += torch.stack(pending).float().cpu().tolist()  # one device sync per `every` steps
            pending = []
            secs = time.perf_counter() - t0
            if progress and (step + 1) % (every * 10 if cfg.steps > 500 else every) == 0:
                val = f", validation {curve[-1][1]:.3f}" if curve else ""
                progress(f"{what}: step {step + 1}/{cfg.steps} loss {np.mean(losses[-every:]):.3f}{val} ({secs:.0f} s)")
            if secs > cfg.max_seconds:
                if progress:
                    progress(f"{what}: stopped at step {step + 1} of {cfg.steps}: the {cfg.max_seconds:.0f} s "
                             "training budget is spent")
                break
    if cuda:
        torch.cuda.synchronize()
    if best is not None:
        model.load_state_dict(best)
    model.eval()
    return losses, time.perf_counter() - t0, curve


def train_ar(task: Task, cfg: TrainConfig, seed: int, device: str,
             progress: Callable[[str], None] | None = None) -> Trained:
    """Train the BART model on `training_examples` (teacher forcing; labels = identifier + `EOS`)."""
    seed_everything(seed)
    model = make_ar_model(task.vocab_size, task.max_query_length, task.library.max_length + 2, cfg.size).to(device)
    ex = _examples(task, cfg, seed, device)
    lib = [task.library[i] for i in range(len(task.library))]
    id_len = np.array([t.size for t in lib], dtype=np.int64) + 1  # the identifier and EOS
    labels_all = pad_rows([np.append(t, EOS) for t in lib], fill=-100).to(device)
    dec_all = pad_rows([np.concatenate([[SEP], t]) for t in lib]).to(device)

    def loss_of(batch: np.ndarray) -> Any:
        src, tgt = ex.batch(batch)
        width = max(1, int(id_len[ex.ids_host[batch]].max()))
        return model(input_ids=src, attention_mask=src != PAD, decoder_input_ids=dec_all[tgt, :width].contiguous(),
                     labels=labels_all[tgt, :width].contiguous()).loss

    losses, secs, curve = _loop(model, cfg, ex.n_train, seed, loss_of, progress, f"{task.name} AR",
                                _mean_loss(loss_of, ex.val_rows, cfg.batch_size))
    return Trained(model, "ar", secs, losses, count_parameters(model), cfg, val_curve=curve)


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
    ex = _examples(task, cfg, seed, device)
    tgt_all = torch.from_numpy(targets).to(device)

    def loss_of(batch: np.ndarray) -> Any:
        src, ids = ex.batch(batch)
        tgt = tgt_all[ids]
        keep = tgt != -100  # the vocabulary projection only where a target is (most of the cost)
        return torch.nn.functional.cross_entropy(model.logits(model.hidden(src)[keep]).float(), tgt[keep])

    losses, secs, curve = _loop(model, cfg, ex.n_train, seed, loss_of, progress, f"{task.name} NAR",
                                _mean_loss(loss_of, ex.val_rows, cfg.batch_size))
    return Trained(model, "nar", secs, losses, count_parameters(model), cfg, val_curve=curve)


def save_checkpoint(trained: Trained, folder: str | os.PathLike[str], name: str) -> None:
    """Save the weights under ``folder`` (written to a temporary name, then renamed) and record the sha256."""
    path = Path(folder) / f"{name}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(trained.model.state_dict(), tmp)
    os.replace(tmp, path)
    trained.sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
    trained.path = str(path)
