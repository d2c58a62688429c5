"""Training of the certified classifiers: Lightning, an lr grid chosen on validation NLL, early stopping."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import lightning as L
import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler

from models.common.lightning import fit
from models.common.selection import Selection, early_stopping_callbacks, grid, select_on_validation
from models.pag_cert.config import TrainConfig
from models.pag_cert.data import ImageBatches

VAL_BATCH = 5000


class ClassifierModule(L.LightningModule):
    """Cross-entropy with SGD (momentum, weight decay) and a cosine schedule over ``max_epochs``."""

    def __init__(self, net: nn.Module, lr: float, train_cfg: TrainConfig) -> None:
        super().__init__()
        self.net, self.lr, self.train_cfg = net, lr, train_cfg

    def _step(self, batch, stage: str) -> torch.Tensor:
        x, y = batch
        logits = self.net(x)
        loss = nn.functional.cross_entropy(logits, y)
        # epoch means only: a record per step would cost more than the step itself on these small models
        self.log(f"{stage}/loss", loss, on_step=False, on_epoch=True, prog_bar=stage == "val")
        self.log(f"{stage}/acc", (logits.argmax(dim=1) == y).float().mean(), on_step=False, on_epoch=True)
        return loss

    def training_step(self, batch, batch_idx):
        return self._step(batch, "train")

    def validation_step(self, batch, batch_idx):
        return self._step(batch, "val")

    def configure_optimizers(self):
        c = self.train_cfg
        opt = torch.optim.SGD(self.net.parameters(), lr=self.lr, momentum=c.momentum, weight_decay=c.weight_decay)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=c.max_epochs)}


def batch_loader(data: ImageBatches, batch_size: int, seed: int | None) -> DataLoader:
    """Whole batches indexed at once (``seed``: shuffled with its own generator; None: in order)."""
    order = RandomSampler(data, generator=torch.Generator().manual_seed(seed)) if seed is not None else None
    sampler = BatchSampler(order or SequentialSampler(data), batch_size, drop_last=False)
    return DataLoader(data, sampler=sampler, batch_size=None)


@dataclass
class TrainedClassifier:
    net: nn.Module
    selection: Selection
    best_epoch: int
    epochs_trained: int
    history: list[dict[str, float]]
    name: str = ""  # the fit's own name (classifier and split), the prefix of its summary

    def summary(self) -> dict[str, float]:
        name = self.name or self.selection.arm
        out = {f"select/{name}/{k.split('/', 2)[2]}": v for k, v in self.selection.summary().items()}
        out[f"select/{name}/best_epoch"] = float(self.best_epoch)
        out[f"select/{name}/epochs_trained"] = float(self.epochs_trained)
        return out


def train_classifier(
    name: str,
    make_net: Callable[[], nn.Module],
    train_set: ImageBatches,
    val_set: ImageBatches,
    cfg: TrainConfig,
    seed: int,
    arm: str = "",
    unit: str = "",
) -> TrainedClassifier:
    """Fit one network per lr of the grid (early stopping on validation NLL, best epoch's weights) and keep
    the lr with the lowest validation NLL: the confidence being certified is a softmax probability.

    With ``arm`` the grid search and the chosen fit are recorded for the verdict diagnostics (as ``arm`` on
    ``unit``): the certified classifier is what every certificate of that unit is about."""

    def fit_and_score(point: dict) -> tuple[float, tuple]:
        net = make_net()
        callbacks = early_stopping_callbacks("val/loss", cfg.patience, mode="min", min_delta=cfg.min_delta)
        history = fit(
            ClassifierModule(net, point["lr"], cfg),
            batch_loader(train_set, cfg.batch_size, seed),
            batch_loader(val_set, VAL_BATCH, None),
            max_epochs=cfg.max_epochs,
            seed=seed,
            variant=f"{name}_lr{point['lr']:g}",
            callbacks=callbacks,
        )
        best = callbacks[-1]
        score = best.best if best.best is not None else math.nan  # a diverged fit is ineligible
        return score, (net.eval(), best, history)

    selection, (net, best, history) = select_on_validation(
        arm or name, grid(lr=cfg.lr_grid), fit_and_score, metric="nll", higher_is_better=False, unit=unit
    )
    if arm:
        best.record(arm, unit)  # the chosen grid point's fit is the certified classifier
    return TrainedClassifier(net, selection, best.best_epoch, best.epochs_seen, history, name)
