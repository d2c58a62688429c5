"""Training of the LSSL / UnLSSL classifiers: one Lightning module, one fit with early stopping."""

from __future__ import annotations

import math
from dataclasses import dataclass

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from models.common.lightning import fit
from models.common.selection import BestWeights, early_stopping_callbacks

from .networks import SSMClassifier


class NoisySequenceClassification(L.LightningModule):
    """Cross-entropy on the time-mean of the per-step logits (official head); Adam at ``lr``."""

    def __init__(self, net: SSMClassifier, lr: float) -> None:
        super().__init__()
        self.net, self.lr = net, lr

    def shared_step(self, batch, stage: str) -> torch.Tensor:
        x, y = batch
        logits = self.net(x)
        loss = F.cross_entropy(logits, y)
        acc = (logits.argmax(1) == y).float().mean()
        # Epoch means: one learning-curve record per epoch, and val/acc is what early stopping watches.
        self.log_dict({f"{stage}/loss": loss, f"{stage}/acc": acc}, on_step=False, on_epoch=True, batch_size=len(y))
        return loss

    def training_step(self, batch, batch_idx):
        return self.shared_step(batch, "train")

    def validation_step(self, batch, batch_idx):
        self.shared_step(batch, "val")

    def configure_optimizers(self):
        return torch.optim.Adam(self.net.parameters(), lr=self.lr)


@dataclass
class FitResult:
    """One trained classifier: its best-validation weights, curve and early-stopping record."""

    net: SSMClassifier
    history: list[dict[str, float]]
    best_val_acc: float
    best_epoch: int  # 0-based epoch of the weights kept
    epochs: int  # epochs trained before the patience ran out (or max_epochs)
    stopping: BestWeights  # the fit's early-stopping record; ``stopping.record(arm, unit)`` once it is a compared fit


def fit_classifier(
    net: SSMClassifier,
    train_set: TensorDataset,
    val_set: TensorDataset,
    *,
    lr: float,
    batch_size: int,
    max_epochs: int,
    patience: int,
    grad_clip: float,
    seed: int,
    name: str,
    accelerator: str = "cpu",
) -> FitResult:
    """Adam with gradient clipping until validation accuracy stops improving for ``patience`` epochs;
    ends on the best epoch's weights. ``seed`` fixes the data order (and, with the caller's
    ``torch.manual_seed`` before building ``net``, the initial weights)."""
    order = torch.Generator().manual_seed(seed)
    loader = DataLoader(train_set, batch_size, shuffle=True, generator=order)
    callbacks = early_stopping_callbacks("val/acc", patience, mode="max")
    module = NoisySequenceClassification(net, lr)
    history = fit(
        module,
        loader,
        DataLoader(val_set, 300),
        max_epochs=max_epochs,
        seed=seed,
        variant=name,
        gradient_clip_val=grad_clip,
        accelerator=accelerator,
        callbacks=callbacks,
    )
    best = callbacks[-1]
    best_acc = float(best.best) if best.best is not None else math.nan
    return FitResult(net, history, best_acc, int(best.best_epoch), int(best.epochs_seen), best)
