"""Training of the small LM (pretraining on split A) and of every fine-tuned arm (Self-REF and baselines).

Both use ``models.common.tiny_lm.LanguageModelling`` (token-weighted next-token cross-entropy, optionally
plus distillation towards the frozen base model); this method adds no LightningModule of its own.
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

from models.common.lightning import fit
from models.common.selection import early_stopping_callbacks
from models.common.tiny_lm import LanguageModelling, LMConfig, TinyLM, Tokenizer

from .algorithm import lm_examples
from .config import Config
from .networks import merge_adapters, with_adapters

SELECTION_LOSS = "val/loss"  # early stopping of every fine-tuned arm: its own objective on split V


def pretrain_small_lm(cfg: Config, tok: Tokenizer, train: list[dict], val: list[dict]) -> tuple[TinyLM, list]:
    """Long MLE training on split A: the base model, deliberately overfit (overconfident)."""
    d = cfg.data
    torch.manual_seed(cfg.seed)
    model = TinyLM(
        LMConfig(vocab_size=len(tok), n_positions=24, n_embd=d.lm.n_embd, n_layer=d.lm.n_layer, n_head=d.lm.n_head)
    )
    ids, weights, _ = lm_examples(tok, train, reverse=d.reverse_answers)
    val_ids, val_weights, _ = lm_examples(tok, val, reverse=d.reverse_answers)
    loader = DataLoader(
        TensorDataset(ids, weights), d.pretrain_batch, shuffle=True, generator=torch.Generator().manual_seed(cfg.seed)
    )
    history = fit(
        LanguageModelling(model, d.pretrain_lr),
        loader,
        DataLoader(TensorDataset(val_ids, val_weights), 1024),
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


def finetune(
    base: TinyLM,
    tok: Tokenizer,
    new_tokens: tuple[str, ...],
    trainable_tokens: tuple[str, ...],
    data: tuple,
    val: tuple,
    cfg: Config,
    lr: float,
    seed: int,
    variant: str,
    distill: bool = False,
) -> tuple[TinyLM, Tokenizer, list, dict[str, float]]:
    """One arm's fine-tuning with the shared adapter (``networks.with_adapters``), early-stopped on its split-V
    loss with ``cfg.patience`` and ended on the best epoch's weights.

    With ``distill`` the answer positions are matched to the frozen base model's next-token distributions,
    which keeps the answers (and the new tokens' absence from them) as they were. Returns the merged model,
    its tokeniser, the learning curve and the best-epoch summary."""
    torch.manual_seed(seed)
    model, tok, params, grad_masks = with_adapters(base, tok, new_tokens, trainable_tokens, cfg, seed)

    def dataset(examples: tuple) -> TensorDataset:
        ids, weights, answer_mask = lm_examples(tok, *examples)  # answers are the model's own outputs, in its order
        if not distill:
            return TensorDataset(ids, weights)
        return TensorDataset(ids, weights, answer_mask, base_soft_targets(base, ids))

    train_set, val_set = dataset(data), dataset(val)
    loader = DataLoader(train_set, cfg.batch_size, shuffle=True, generator=torch.Generator().manual_seed(seed))
    module = LanguageModelling(model, lr, params=params, grad_masks=grad_masks)
    callbacks = early_stopping_callbacks(SELECTION_LOSS, cfg.patience)
    history = fit(
        module,
        loader,
        DataLoader(val_set, 1024),
        max_epochs=cfg.epochs,
        seed=seed,
        variant=variant,
        callbacks=callbacks,
    )
    best = callbacks[-1]
    summary = {"best_epoch": float(best.best_epoch), "epochs_trained": float(best.epochs_seen)}
    return merge_adapters(model).eval(), tok, history, summary
