"""Training of the small LM (pretraining on split A) and of every fine-tuned arm (Self-REF and baselines).

Both optimise ``models.common.tiny_lm.LanguageModelling``'s objective (token-weighted next-token cross-entropy,
optionally plus distillation towards the frozen base model). The fine-tuned arms use ``ScoredLanguageModelling``:
the same loss, with the last block's position-wise half and the output layer run only where a loss is taken
(``networks.scored_logits``), and AdamW as one fused kernel. Pretraining keeps the plain module: the deliberately
overfit base model is one draw that float rounding moves (600 steps of memorisation; the re-ordered sums of
the scored forward gave a base model 1.3 pts less accurate on C, which every arm and the baseline inherit), so
it stays bit for bit the model of the results reported before the speed-up.
Mini-batches are sliced from the example tensors (``TensorBatches``) in the order a shuffling DataLoader
gives, and an arm's tensors are built once per seed (``arm_examples``) for all its learning rates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from models.common.lightning import fit
from models.common.selection import BestWeights, early_stopping_callbacks
from models.common.tiny_lm import LanguageModelling, LMConfig, TinyLM, Tokenizer

from .algorithm import lm_examples
from .config import Config
from .networks import grouped_logits, merge_adapters, scored_logits, with_adapters

SELECTION_LOSS = "val/loss"  # early stopping of every fine-tuned arm: its own objective on split V
VAL_BATCH = 1024


class TensorBatches:
    """Mini-batches sliced straight from equal-length tensors: the batches ``DataLoader(TensorDataset(*tensors),
    batch_size, shuffle=generator is not None, generator=generator)`` yields, without its per-row indexing and
    collation (a sizeable share of a step of these tiny models).

    Shuffled, each epoch makes the draws that DataLoader makes from its generator (its base seed, the
    permutation, and the sampler's trailing empty permutation), so the order matches it batch for batch
    (``test_tensor_batches_match_the_dataloader``) and a resumed fit continues the same stream: the
    ``generator`` attribute is where ``models.common.lightning`` finds it for checkpoints.
    """

    def __init__(self, tensors: tuple[torch.Tensor, ...], batch_size: int, generator: torch.Generator | None = None):
        self.tensors, self.batch_size, self.generator = tensors, batch_size, generator
        self.n = len(tensors[0])

    def __len__(self) -> int:
        return math.ceil(self.n / self.batch_size)

    def __iter__(self):
        if self.generator is None:
            order = None
        else:
            torch.empty((), dtype=torch.int64).random_(generator=self.generator)
            order = torch.randperm(self.n, generator=self.generator)
            torch.randperm(self.n, generator=self.generator)
        for start in range(0, self.n, self.batch_size):
            if order is None:
                yield tuple(t[start : start + self.batch_size] for t in self.tensors)
            else:
                rows = order[start : start + self.batch_size]
                yield tuple(t[rows] for t in self.tensors)


class ScoredLanguageModelling(LanguageModelling):
    """``LanguageModelling`` with the same loss, computed from the logits of the positions that carry a weight.

    A training row's prompt and padding have weight 0 and contribute exactly nothing to the loss or its
    gradient; skipping their position-wise work in the last block and the output layer (``networks.scored_logits``)
    saves that work and nothing else (``test_scored_loss_equals_the_full_loss``: equal to float rounding). The
    loss is normalised by the same total weight."""

    def shared_step(self, batch, stage: str) -> torch.Tensor:
        ids, weights = batch[0], batch[1][:, 1:]
        soft_w = batch[2][:, 1:] if len(batch) > 2 else None
        scored = weights > 0 if soft_w is None else (weights > 0) | (soft_w > 0)
        logp_all = torch.log_softmax(scored_logits(self.model, ids[:, :-1], scored).float(), -1)
        logp = logp_all.gather(-1, ids[:, 1:][scored][:, None])[:, 0]
        denominator = weights.sum().clamp(min=1e-8)
        loss = -(logp * weights[scored].to(logp.dtype)).sum() / denominator
        logs = {}
        if soft_w is not None:
            soft = batch[3][:, 1:][scored].to(logp.dtype)
            distill = -((soft * logp_all[:, : soft.shape[-1]]).sum(-1) * soft_w[scored].to(logp.dtype)).sum()
            loss = loss + distill / denominator
            logs[f"{stage}/distill"] = distill / denominator
        self.log_dict({f"{stage}/loss": loss, **logs}, on_step=False, on_epoch=True, batch_size=len(ids))
        return loss

    def configure_optimizers(self):
        # The same AdamW as LanguageModelling, as one fused kernel rather than a loop over the ~20 adapter tensors.
        params = (
            self.trainable if self.trainable is not None else [p for p in self.model.parameters() if p.requires_grad]
        )
        return torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay, fused=True)

    def on_after_backward(self) -> None:
        # The masked gradients (the frozen rows of a grown embedding), looked up once rather than every step.
        if not hasattr(self, "_masked"):
            named = dict(self.model.named_parameters())
            self._masked = [(named[name], mask) for name, mask in self.grad_masks.items() if name in named]
        for p, mask in self._masked:
            if p.grad is not None:
                p.grad.mul_(mask)


def pretrain_small_lm(cfg: Config, tok: Tokenizer, train: list[dict], val: list[dict]) -> tuple[TinyLM, list]:
    """Long MLE training on split A: the base model, deliberately overfit (overconfident)."""
    d = cfg.data
    torch.manual_seed(cfg.seed)
    model = TinyLM(
        LMConfig(vocab_size=len(tok), n_positions=24, n_embd=d.lm.n_embd, n_layer=d.lm.n_layer, n_head=d.lm.n_head)
    )
    ids, weights, _ = lm_examples(tok, train, reverse=d.reverse_answers)
    val_ids, val_weights, _ = lm_examples(tok, val, reverse=d.reverse_answers)
    loader = TensorBatches((ids, weights), d.pretrain_batch, torch.Generator().manual_seed(cfg.seed))
    history = fit(
        LanguageModelling(model, d.pretrain_lr),
        loader,
        TensorBatches((val_ids, val_weights), VAL_BATCH),
        max_epochs=d.pretrain_epochs,
        seed=cfg.seed,
        variant="small LM pretraining",
        check_val_every_n_epoch=max(1, d.pretrain_epochs // 15),
    )
    return model.eval(), history


@torch.no_grad()
def base_soft_targets(base: TinyLM, ids: torch.Tensor, batch: int = 1024) -> torch.Tensor:
    """The frozen base model's next-token distributions, aligned with ``ids`` (row t predicts ids[:, t])."""
    base.eval()
    vocab = base.config.vocab_size
    clipped = ids.clamp(max=vocab - 1)  # new tokens only ever appear after the answer, where nothing is distilled
    out = torch.zeros(*ids.shape, vocab)
    for i in range(0, len(ids), batch):
        out[i : i + batch, 1:] = torch.softmax(base(clipped[i : i + batch, :-1]).float(), -1)
    return out


@dataclass(frozen=True)
class ArmExamples:
    """One arm's training and split-V tensors for one seed: ``(ids, weights)``, plus ``(answer_mask,
    base soft targets)`` when the answers are distilled. Built once and shared by every learning rate."""

    train: tuple[torch.Tensor, ...]
    val: tuple[torch.Tensor, ...]


def arm_examples(base: TinyLM, tok: Tokenizer, data: tuple, val: tuple, distill: bool) -> ArmExamples:
    """The tensors of ``data`` and ``val`` (records, answers, suffixes, answer weights) for the arm's
    tokeniser ``tok``; with ``distill`` the frozen base model's next-token distributions come along."""

    def tensors(examples: tuple) -> tuple[torch.Tensor, ...]:
        ids, weights, answer_mask = lm_examples(tok, *examples)  # answers are the model's own outputs, in its order
        return (ids, weights, answer_mask, base_soft_targets(base, ids)) if distill else (ids, weights)

    return ArmExamples(tensors(data), tensors(val))


def finetune(
    base: TinyLM,
    tok: Tokenizer,
    new_tokens: tuple[str, ...],
    trainable_tokens: tuple[str, ...],
    examples: ArmExamples,
    cfg: Config,
    lr: float,
    seed: int,
    variant: str,
) -> tuple[TinyLM, Tokenizer, list, BestWeights]:
    """One arm's fine-tuning with the shared adapter (``networks.with_adapters``), early-stopped on its split-V
    loss with ``cfg.patience`` and ended on the best epoch's weights.

    When ``examples`` carry the base model's soft targets, the answer positions are matched to them, which
    keeps the answers (and the new tokens' absence from them) as they were. Returns the merged model,
    its tokeniser, the learning curve and the fit's ``BestWeights`` (best epoch, epochs run; ``record`` it when
    the fit is a compared one)."""
    torch.manual_seed(seed)
    model, tok, params, grad_masks = with_adapters(base, tok, new_tokens, trainable_tokens, cfg, seed)
    loader = TensorBatches(examples.train, cfg.batch_size, torch.Generator().manual_seed(seed))
    module = ScoredLanguageModelling(model, lr, params=params, grad_masks=grad_masks)
    callbacks = early_stopping_callbacks(SELECTION_LOSS, cfg.patience)
    history = fit(
        module,
        loader,
        TensorBatches(examples.val, VAL_BATCH),
        max_epochs=cfg.epochs,
        seed=seed,
        variant=variant,
        callbacks=callbacks,
    )
    return merge_adapters(model).eval(), tok, history, callbacks[-1]


# ----------------------------------------------------------------------------- batched pretraining (issue 36)


def _token_losses(params: dict, ids: torch.Tensor, weights: torch.Tensor, config: LMConfig) -> torch.Tensor:
    """``LanguageModelling``'s loss (token-weighted next-token cross-entropy) of each of S stacked models on its
    own batch (``ids``, ``weights``: (S, B, T)); an (S,) tensor."""
    logits = grouped_logits(params, ids[:, :, :-1], config)
    logp = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, :, 1:, None])[..., 0]
    w = weights[:, :, 1:].to(logp.dtype)
    return -(logp * w).sum((1, 2)) / w.sum((1, 2)).clamp(min=1e-8)


def pretrain_small_lms(
    cfg: Config, tok: Tokenizer, train: list[dict], val: list[dict], seeds: list[int]
) -> tuple[list[TinyLM], list[list[dict]]]:
    """``pretrain_small_lm`` for every seed in ``seeds`` at once, the seeds a batch dimension.

    Each seed keeps what it has alone: its initial weights (``torch.manual_seed(seed)`` before the model is
    built), its batch order (a ``TensorBatches`` with its own generator) and its AdamW state (AdamW acts
    elementwise and the summed loss gives each seed's weights their own gradient, so one optimiser over the
    stacked weights is one per seed). The forward pass is ``networks.grouped_logits``: batched matmuls over the
    stacked weights and the seeds' batches. A fixed schedule (no early stopping), as in ``pretrain_small_lm``; the result equals it to
    float tolerance (``test_batched_pretraining_equals_one_at_a_time``). Returns the models and their curves."""
    from torch.func import stack_module_state

    from models.common.runtime import dry_run

    d = cfg.data
    lm_config = LMConfig(
        vocab_size=len(tok), n_positions=24, n_embd=d.lm.n_embd, n_layer=d.lm.n_layer, n_head=d.lm.n_head
    )
    models = []
    for seed in seeds:
        torch.manual_seed(seed)
        models.append(TinyLM(lm_config))
    params, _ = stack_module_state(models)
    optimiser = torch.optim.AdamW(list(params.values()), lr=d.pretrain_lr, weight_decay=0.0)
    ids, weights, _ = lm_examples(tok, train, reverse=d.reverse_answers)
    val_ids, val_weights, _ = lm_examples(tok, val, reverse=d.reverse_answers)
    loaders = [TensorBatches((ids, weights), d.pretrain_batch, torch.Generator().manual_seed(s)) for s in seeds]
    every = max(1, d.pretrain_epochs // 15)  # pretrain_small_lm's validation interval
    epochs, steps = (1, 2) if dry_run() else (d.pretrain_epochs, None)
    curves: list[list[dict]] = [[] for _ in seeds]
    step = 0
    for epoch in range(epochs):
        total, count = torch.zeros(len(seeds)), 0
        for batches in zip(*loaders):  # the same number of batches (and batch sizes) for every seed
            b_ids, b_weights = torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches])
            losses = _token_losses(params, b_ids, b_weights, lm_config)
            optimiser.zero_grad(set_to_none=True)
            losses.sum().backward()
            optimiser.step()
            total += losses.detach() * len(b_ids[0])
            count += len(b_ids[0])
            step += 1
            if steps is not None and step >= steps:
                break
        record_val = (epoch + 1) % every == 0 or epoch == epochs - 1
        if record_val:
            with torch.no_grad():
                S = len(seeds)
                val_loss = _token_losses(
                    params, val_ids.expand(S, *val_ids.shape), val_weights.expand(S, *val_weights.shape), lm_config
                )
        for k in range(len(seeds)):
            record = {"epoch": float(epoch), "train/loss": float(total[k] / max(count, 1))}
            if record_val:
                record["val/loss"] = float(val_loss[k])
            curves[k].append(record)
    with torch.no_grad():
        for k, model in enumerate(models):
            model.load_state_dict({name: p[k].detach().clone() for name, p in params.items()}, strict=False)
    return [m.eval() for m in models], curves
