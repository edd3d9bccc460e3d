"""The two retrieval models of the quality measurements, built from scratch (no weights are downloaded).

* **Autoregressive** (`make_ar_model`): a small BART encoder-decoder from a ``transformers`` config.  The
  encoder reads the query; the decoder starts from `SEP` and writes the identifier's tokens, then `EOS`.
  Decoded with ``generate()`` (beam search) and `flashtrie.hf.TrieLogitsProcessor`.
* **Non-autoregressive** (`NarHead`): the paper's setting, T distributions over the vocabulary from one
  query encoding, one per identifier position (T = the longest identifier + 1: position ``len`` holds
  `EOS`, so where an identifier ends is scored too).  A one-pass non-autoregressive decoder: a transformer
  encoder reads the query; T learned position queries attend to each other and cross-attend to the
  encoder's token states (position-aware access to the query: step t can copy query token t), without a
  causal mask and without feeding back any output token.  The output layer is tied to the input
  embedding.  Its per-step top-K feed the cooperative search.

Token ids are the task's model vocabulary (`flashtrie.datasets.quality_tasks`): 0 `PAD`, 1 `SEP`, 2 `EOS`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
from flashtrie.datasets.quality_tasks import EOS, PAD, SEP
from torch import nn

__all__ = ["ModelSize", "make_ar_model", "NarHead", "count_parameters"]


@dataclass(frozen=True)
class ModelSize:
    """Width, layers and heads of both models (the AR model has ``layers`` encoder and decoder layers)."""

    d_model: int = 256
    layers: int = 2
    heads: int = 4

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def make_ar_model(vocab_size: int, max_query: int, max_target: int, size: ModelSize) -> Any:
    """A freshly initialised ``BartForConditionalGeneration`` for the task's vocabulary and lengths."""
    from transformers import BartConfig, BartForConditionalGeneration

    cfg = BartConfig(vocab_size=vocab_size, d_model=size.d_model, encoder_layers=size.layers,
                     decoder_layers=size.layers, encoder_attention_heads=size.heads,
                     decoder_attention_heads=size.heads, encoder_ffn_dim=4 * size.d_model,
                     decoder_ffn_dim=4 * size.d_model, max_position_embeddings=max(max_query, max_target) + 2,
                     pad_token_id=PAD, bos_token_id=SEP, eos_token_id=EOS, decoder_start_token_id=SEP,
                     forced_bos_token_id=None, forced_eos_token_id=None, dropout=0.0, attention_dropout=0.0,
                     scale_embedding=True)
    model = BartForConditionalGeneration(cfg)
    gen = model.generation_config
    gen.forced_bos_token_id = gen.forced_eos_token_id = None
    gen.no_repeat_ngram_size = 0
    gen.max_length = None
    return model


class NarHead(nn.Module):
    """Query tokens -> logits ``[batch, T, vocab]`` in one pass (see the module docstring)."""

    def __init__(self, vocab_size: int, max_query: int, steps: int, size: ModelSize) -> None:
        super().__init__()
        d = size.d_model
        self.steps = steps
        self.embed = nn.Embedding(vocab_size, d, padding_idx=PAD)
        self.query_pos = nn.Embedding(max_query, d)
        enc = nn.TransformerEncoderLayer(d, size.heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(enc, size.layers, enable_nested_tensor=False)
        self.step_queries = nn.Parameter(torch.randn(steps, d) * 0.02)
        dec = nn.TransformerDecoderLayer(d, size.heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.decoder = nn.TransformerDecoder(dec, size.layers)
        self.norm = nn.LayerNorm(d)
        for table in (self.embed, self.query_pos):  # unit-norm rows: tied logits start near 0
            nn.init.normal_(table.weight, std=d ** -0.5)

    def hidden(self, query: torch.Tensor) -> torch.Tensor:
        """``query`` [batch, L] (right-padded with `PAD`) -> the T positions' states [batch, T, d]."""
        pad = query == PAD
        pos = torch.arange(query.shape[1], device=query.device)
        memory = self.encoder(self.embed(query) + self.query_pos(pos)[None], src_key_padding_mask=pad)
        steps = self.step_queries[None].expand(query.shape[0], -1, -1)
        return self.norm(self.decoder(steps, memory, memory_key_padding_mask=pad))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """States [..., d] -> logits [..., vocab]: the output is tied to the input embedding (copying a
        query token is easy)."""
        return hidden @ self.embed.weight.T

    def forward(self, query: torch.Tensor) -> torch.Tensor:
        """``query`` [batch, L] (right-padded with `PAD`) -> logits [batch, T, vocab]."""
        return self.logits(self.hidden(query))


def count_parameters(model: nn.Module) -> int:
    return int(sum(p.numel() for p in model.parameters()))
