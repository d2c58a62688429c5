"""The adapters every fine-tuned arm gets (the paper's LoRA placement translated to the tiny GPT-2).

The paper puts LoRA on Q, K, V, the token embedding and the LM head of Llama/Mistral. Here: LoRA on every
projection of every block (``Config.lora_targets``; GPT-2 fuses Q, K, V into ``c_attn``), a LoRA update
of the embedding matrix (``EmbeddingLoRA``; the output layer is tied to it, so it adapts the head too),
and full rows for the tokens an arm introduces (the confidence tokens, or ';'), which start at the mean
embedding. Self-REF and both fine-tuned baselines get exactly this adapter.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn
from torch.nn.utils import parametrize

from models.common.tiny_lm import TinyLM, Tokenizer, add_lora, merge_lora

from .config import Config

EMBEDDING = "wte.parametrizations.weight.original"  # the frozen embedding under its LoRA parametrisation


class EmbeddingLoRA(nn.Module):
    """Parametrisation ``E + (alpha / r) A B`` of an (n_tokens, dim) embedding matrix; A starts at zero
    (as peft's embedding LoRA), so adding it leaves the model unchanged."""

    def __init__(
        self, n_tokens: int, dim: int, rank: int, alpha: float, generator: torch.Generator | None = None
    ) -> None:
        super().__init__()
        self.scale = alpha / rank
        self.lora_A = nn.Parameter(torch.zeros(n_tokens, rank))
        self.lora_B = nn.Parameter(torch.randn(rank, dim, generator=generator) / math.sqrt(dim))

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return weight + self.scale * self.lora_A @ self.lora_B


def with_adapters(
    base: TinyLM, tok: Tokenizer, new_tokens: tuple[str, ...], trainable_tokens: tuple[str, ...], cfg: Config, seed: int
) -> tuple[TinyLM, Tokenizer, list[nn.Parameter], dict[str, torch.Tensor]]:
    """A copy of ``base`` with ``new_tokens`` (single tokens at the mean embedding) and the adapters.

    Returns the model, its tokeniser, the trainable parameters and the gradient masks that leave only the
    embedding rows of ``trainable_tokens`` free in the (otherwise frozen) embedding matrix."""
    model = copy.deepcopy(base).train()
    tok = tok.with_tokens(new_tokens)
    if len(tok) > model.config.vocab_size:
        model.add_tokens(len(tok) - model.config.vocab_size)
    params = add_lora(model, cfg.lora_rank, cfg.lora_alpha, targets=cfg.lora_targets, seed=seed)
    masks: dict[str, torch.Tensor] = {}
    generator = torch.Generator().manual_seed(seed + 1)
    if cfg.embedding_lora:
        lora = EmbeddingLoRA(*model.wte.weight.shape, cfg.lora_rank, cfg.lora_alpha, generator)
        parametrize.register_parametrization(model.wte, "weight", lora)
        params += [lora.lora_A, lora.lora_B]
    if trainable_tokens:
        name = EMBEDDING if cfg.embedding_lora else "wte.weight"
        table = model.get_parameter(name)
        table.requires_grad_(True)
        rows = torch.zeros_like(table)
        rows[[tok.id(t) for t in trainable_tokens]] = 1.0
        params.append(table)
        masks[name] = rows
    return model, tok, params, masks


def merge_adapters(model: TinyLM) -> TinyLM:
    """Fold every adapter into its weights (in place): a plain TinyLM that saves as a GPT-2 folder."""
    if parametrize.is_parametrized(model.wte, "weight"):
        parametrize.remove_parametrizations(model.wte, "weight", leave_parametrized=True)
    return merge_lora(model)
