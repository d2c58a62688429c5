"""Rectified-flow training of the video DiT (the one LightningModule of the method) and its fit helper.

Every fit, dense pre-training and each arm's fine-tune alike, scores a fixed validation loss (the
validation videos with fixed flow times and noise) every ``train.val_every`` steps, stops after
``train.patience`` validations without improvement and ends on the best validation weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from models.base import Scale
from models.common.lightning import fit
from models.common.selection import BestWeights, early_stopping_callbacks

from . import data as data_mod
from .networks import VideoDiT

MONITOR = "val/loss"


class FlowMatching(L.LightningModule):
    """Rectified flow x_t = (1 - t) x_0 + t eps; MSE on the DiT's output (x_0 or v = eps - x_0)."""

    def __init__(self, net: VideoDiT, lr: float, warmup: int, weight_decay: float) -> None:
        super().__init__()
        self.net, self.lr, self.warmup, self.weight_decay = net, lr, warmup, weight_decay

    def shared_step(self, batch, stage: str) -> torch.Tensor:
        x0 = batch[0]
        if stage == "train":
            t, noise = torch.rand(len(x0), device=x0.device), torch.randn_like(x0)
        else:  # fixed draws: every validation compares like with like, across steps and arms
            g = torch.Generator().manual_seed(10_000 + len(x0))
            t, noise = torch.rand(len(x0), generator=g).to(x0.device), torch.randn(x0.shape, generator=g).to(x0.device)
        loss = flow_loss(self.net, x0, t, noise)
        self.log(f"{stage}/loss", loss, on_step=stage == "train", on_epoch=stage != "train", batch_size=len(x0))
        return loss

    def training_step(self, batch, batch_idx):
        return self.shared_step(batch, "train")

    def validation_step(self, batch, batch_idx):
        self.shared_step(batch, "val")

    def configure_optimizers(self):
        optimiser = torch.optim.AdamW(self.net.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        warmup = max(self.warmup, 1)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, lambda step: min(1.0, (step + 1) / warmup))
        return {"optimizer": optimiser, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def flow_loss(net: VideoDiT, x0: torch.Tensor, t: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    tb = t[:, None, None, None, None]
    target = x0 if net.prediction == "x" else noise - x0
    return F.mse_loss(net((1 - tb) * x0 + tb * noise, t), target)


@dataclass
class FitResult:
    history: list[dict]
    best_val: float  # the validation loss of the weights the fit ended on
    best_step: int  # the step of that validation
    best: BestWeights  # the fit's early-stopping record (``best.record(arm, unit)`` makes it a compared fit)


def fit_flow(
    cfg,
    net: VideoDiT,
    videos: dict,
    steps: int,
    lr: float,
    warmup: int,
    seed: int,
    variant: str,
    arm: str = "",
    unit: str = "",
) -> FitResult:
    """Train ``net`` in place for at most ``steps`` steps with early stopping on the validation loss; ``seed``
    fixes the batch order and the noise draws, so fits with one seed are paired across arms. With ``arm``
    (and ``unit``) the fit is recorded for the verdict diagnostics."""
    train_set = TensorDataset(data_mod.to_float(videos["train"]))
    val_set = TensorDataset(data_mod.to_float(videos["val"]))
    loader = DataLoader(
        train_set,
        min(cfg.train.batch_size, len(train_set)),
        shuffle=True,
        drop_last=True,
        generator=torch.Generator().manual_seed(seed),
    )
    module = FlowMatching(net, lr, warmup, cfg.train.weight_decay)
    callbacks = early_stopping_callbacks(MONITOR, cfg.train.patience, arm=arm, unit=unit)
    # The paper scale is meant for a GPU; smoke and default train on the CPU unless PAPERLINE_ACCELERATOR
    # says otherwise (the environment's setting wins in fit).
    accelerator = "gpu" if cfg.scale == Scale.paper and torch.cuda.is_available() else "cpu"
    history = fit(
        module,
        loader,
        DataLoader(val_set, len(val_set)),
        max_epochs=10**6,
        seed=seed,
        variant=variant,
        max_steps=steps,
        val_check_interval=min(cfg.train.val_every, steps),
        check_val_every_n_epoch=None,
        accelerator=accelerator,
        callbacks=callbacks,
    )
    val = [(r[MONITOR], r["step"]) for r in history if MONITOR in r]
    best_val, best_step = min(val) if val else (math.nan, -1)
    return FitResult(history, float(best_val), int(best_step), callbacks[-1])
