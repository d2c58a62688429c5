"""Lightning glue every gradient-trained method uses: one ``fit`` with history capture.

The LightningModule of a method adds loss, metrics and optimiser to a plain ``nn.Module``;
``fit`` runs ``Trainer.fit`` with an in-memory logger so the learning curve comes back as
records the spine logs to MLflow, and stops on a non-finite loss.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities import rank_zero_only

from models.common.runtime import set_threads, show_progress  # noqa: F401 (re-exported)


class NonFiniteLossError(FloatingPointError):
    """Training produced a NaN or infinite loss."""


class HistoryLogger(Logger):
    """Keeps every logged metric in memory as ``{"step": s, key: value}`` records."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[dict[str, float]] = []

    @property
    def name(self) -> str:
        return "history"

    @property
    def version(self) -> str:
        return "0"

    @rank_zero_only
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        record = {"step": int(step or 0)}
        record.update({k: float(v) for k, v in metrics.items() if k != "epoch"})
        if "epoch" in metrics:
            record["epoch"] = float(metrics["epoch"])
        self.records.append(record)


class StopOnNonFiniteLoss(Callback):
    """Raise as soon as a training step returns a NaN/inf loss (the run is then failed)."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if loss is not None and not math.isfinite(float(loss)):
            raise NonFiniteLossError(
                f"non-finite training loss {float(loss)} at epoch {trainer.current_epoch}, batch {batch_idx}"
            )


def fit(
    module: L.LightningModule,
    train_loader,
    val_loader=None,
    *,
    max_epochs: int,
    seed: int,
    variant: str = "method",
    **trainer_kwargs: Any,
) -> list[dict[str, float]]:
    """Train ``module`` on CPU (or what ``trainer_kwargs`` say) and return its learning curve."""
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    logging.getLogger("lightning.fabric").setLevel(logging.WARNING)
    L.seed_everything(seed, workers=True, verbose=False)
    history = HistoryLogger()
    kwargs: dict[str, Any] = dict(
        max_epochs=max_epochs,
        accelerator="cpu",
        devices=1,
        logger=history,
        callbacks=[StopOnNonFiniteLoss()],
        enable_checkpointing=False,
        enable_progress_bar=show_progress(),
        enable_model_summary=False,
        deterministic=True,
        num_sanity_val_steps=0,
        log_every_n_steps=1,
    )
    kwargs.update(trainer_kwargs)
    trainer = L.Trainer(**kwargs)
    if show_progress():
        print(f"  training {variant} ({max_epochs} epochs)", flush=True)
    trainer.fit(module, train_dataloaders=train_loader, val_dataloaders=val_loader)
    return history.records

