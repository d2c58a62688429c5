"""Maximum-likelihood training of the flow (Lightning), with an EMA of the weights and early stopping.

The EMA (``models.common.ema.EMA``) averages the trained network into a copy, ``ema``; validation
scores that copy (the averaged weights are the model, as in the paper's EMA 0.999), so early
stopping and the best-epoch weights (``selection.early_stopping_callbacks``) act on the model that
is kept. With ``ema_decay = 0`` the copy simply follows the trained weights.
"""

from __future__ import annotations

import copy

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

SELECTION_METRIC = "val/nll"


class FlowModule(L.LightningModule):
    """NLL per dimension of (augmented) training frames; AdamW with a OneCycle schedule."""

    def __init__(self, model: nn.Module, train_cfg, total_steps: int) -> None:
        super().__init__()
        self.model, self.t, self.total_steps = model, train_cfg, total_steps
        self.ema = copy.deepcopy(model)  # the averaged weights: what validation scores and training keeps
        self.lr = train_cfg.lr_grid[0]

    def configure_callbacks(self) -> list:
        from models.common.ema import EMA

        # decay 0 makes the copy the current weights after every step.
        return [EMA("model", self.t.ema_decay, into="ema")]

    def nll(self, net: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return -net.log_prob(net.augment(x)).mean() / x[0].numel()

    def training_step(self, batch, batch_idx):
        (x,) = batch
        nll = self.nll(self.model, x)
        self.log("train/nll", nll, on_step=False, on_epoch=True, batch_size=len(x))
        return nll

    def validation_step(self, batch, batch_idx):
        (x,) = batch
        self.log(SELECTION_METRIC, self.nll(self.ema, x), on_step=False, on_epoch=True, batch_size=len(x))

    def configure_optimizers(self):
        t = self.t
        opt = torch.optim.AdamW(self.model.parameters(), lr=self.lr, betas=t.betas, weight_decay=t.weight_decay)
        sched = torch.optim.lr_scheduler.OneCycleLR(
            opt,
            max_lr=self.lr,
            total_steps=self.total_steps,
            pct_start=t.warmup_fraction,
            anneal_strategy="cos",
            div_factor=t.div_factor,
        )
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def fit_flow(
    model: nn.Module,
    x_train: torch.Tensor,
    x_val: torch.Tensor,
    train_cfg,
    lr: float,
    seed: int,
    variant: str,
    accelerator: str,
):
    """Train ``model`` at learning rate ``lr`` until the validation NLL stops improving.

    Returns (the EMA network at its best validation epoch, learning curve, BestWeights callback).
    """
    from models.common.lightning import fit
    from models.common.selection import early_stopping_callbacks

    t = train_cfg
    generator = torch.Generator().manual_seed(seed)
    loader = DataLoader(TensorDataset(x_train.float()), batch_size=t.batch_size, shuffle=True, generator=generator)
    val_loader = DataLoader(TensorDataset(x_val.float()), batch_size=len(x_val))
    module = FlowModule(model, t, total_steps=t.epochs * len(loader))
    module.lr = lr
    callbacks = early_stopping_callbacks(SELECTION_METRIC, t.patience)
    history = fit(
        module,
        loader,
        val_loader,
        max_epochs=t.epochs,
        seed=seed,
        variant=variant,
        accelerator=accelerator,
        callbacks=callbacks,
    )
    return module.ema.cpu(), history, callbacks[-1]
