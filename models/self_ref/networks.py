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
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

from models.common.tiny_lm import LoRALinear, TinyLM, Tokenizer, add_lora, merge_lora

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


class WeightSpaceLoRA(LoRALinear):
    """``LoRALinear`` (same parameters, initialisation and ``merged``) computed as ``x (W + s B A)^T + b``.

    With rows of 64-256 features and rank 8, adding the rank-r update to the weight and running one linear
    layer is cheaper forward and backward than the base layer plus two thin products (``test_weight_space_lora``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.base.weight + self.scale * (self.lora_B @ self.lora_A), self.base.bias)


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
    for module in model.modules():
        if type(module) is LoRALinear:
            module.__class__ = WeightSpaceLoRA  # a subclass without state of its own: only the forward differs
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


def attend(block: nn.Module, x: torch.Tensor, cache: tuple | None = None) -> tuple[torch.Tensor, tuple]:
    """The attention of a GPT-2 block (``tiny_lm.Block``) for the positions ``x`` (B, T, C), before its output
    projection, and the keys and values so far. Without ``cache`` it is plain causal attention over ``x``;
    with the earlier positions' ``cache`` each new query sees every earlier key (one new position at a time)."""
    attn = block.attn
    B, T, C = x.shape
    q, k, v = attn.c_attn(block.ln_1(x)).split(C, dim=2)
    q, k, v = (t.view(B, T, attn.n_head, C // attn.n_head).transpose(1, 2) for t in (q, k, v))
    if cache is not None:
        k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None)
    return y.transpose(1, 2).reshape(B, T, C), (k, v)


def scored_logits(model: TinyLM, ids: torch.Tensor, scored: torch.Tensor) -> torch.Tensor:
    """``model(ids)[scored]``: the logits (N, V) at the positions of the boolean mask ``scored`` (B, T) only.

    Every position is still an attention key, so all blocks but the last run on all of them; the last block's
    output projection and feed-forward half, the final LayerNorm and the output layer act position by position
    and run on the scored ones alone (the answer and suffix tokens, about a third of a training row: ~12 % of
    a training step here). Right padding only: positions count from 0 in every row (no attention mask)."""
    B, T = ids.shape
    x = model.wte(ids) + model.wpe(torch.arange(T, device=ids.device))
    for block in model.h[:-1]:
        x = block(x, None)
    last = model.h[-1]
    y, _ = attend(last, x)
    x = x[scored] + last.attn.c_proj(y[scored])
    x = x + last.mlp(last.ln_2(x))
    return model.logits(model.ln_f(x))


# ----------------------------------------------------------------------------- several base models at once


def grouped_logits(params: dict[str, torch.Tensor], ids: torch.Tensor, config) -> torch.Tensor:
    """``TinyLM(config)``'s forward pass for S models at once: ``params`` are their weights stacked on a leading
    seed dimension (``torch.func.stack_module_state``), ``ids`` (S, B, T) each model's own batch; returns
    (S, B, T, vocab) logits. The linear layers are batched matmuls over the seeds and attention runs on the
    seeds x batch rows together, so S small models cost about one pass of S x B rows (vmap has no batching
    rule for CPU attention and would loop)."""
    S, B, T = ids.shape
    C, H = config.n_embd, config.n_head

    def linear(x: torch.Tensor, name: str) -> torch.Tensor:  # x (S, N, in) -> (S, N, out)
        return torch.baddbmm(params[f"{name}.bias"][:, None, :], x, params[f"{name}.weight"].transpose(1, 2))

    def layer_norm(x: torch.Tensor, name: str) -> torch.Tensor:
        x = F.layer_norm(x, (C,), eps=config.layer_norm_epsilon)
        return x * params[f"{name}.weight"][:, None, :] + params[f"{name}.bias"][:, None, :]

    act = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu": "none"}[config.activation_function]
    seed_rows = torch.arange(S)[:, None, None]
    x = params["wte.weight"][seed_rows, ids] + params["wpe.weight"][:, None, :T, :]  # (S, B, T, C)
    x = x.reshape(S, B * T, C)
    for i in range(config.n_layer):
        h = f"h.{i}"
        q, k, v = linear(layer_norm(x, f"{h}.ln_1"), f"{h}.attn.c_attn").split(C, dim=2)
        q, k, v = (t.reshape(S * B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(S, B * T, C)
        x = x + linear(y, f"{h}.attn.c_proj")
        x = x + linear(F.gelu(linear(layer_norm(x, f"{h}.ln_2"), f"{h}.mlp.c_fc"), approximate=act), f"{h}.mlp.c_proj")
    x = layer_norm(x, "ln_f")
    return torch.bmm(x, params["wte.weight"].transpose(1, 2)).reshape(S, B, T, -1)
