"""Lightning glue every gradient-trained method uses: one ``fit`` with history capture.

The LightningModule of a method adds loss, metrics and optimiser to a plain ``nn.Module``;
``fit`` runs ``Trainer.fit`` with an in-memory logger so the learning curve comes back as
records the spine logs to MLflow, and stops on a non-finite loss.

Inside ``runtime.checkpointing(folder)`` (the train step opens it), every ``fit`` call saves
``last.ckpt`` each epoch under ``folder/<call index>-<variant>/`` together with its learning
curve, and resumes from it: a training process killed half-way picks up where it stopped.
"""

from __future__ import annotations

import logging
import math
import warnings
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities import rank_zero_only

from models.common.runtime import checkpoint_dir, set_threads, show_progress, trainer_settings  # noqa: F401


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


class HistoryState(Callback):
    """Stores the learning curve in each checkpoint, so a resumed fit returns all of it."""

    def __init__(self, history: HistoryLogger) -> None:
        self.history = history

    def state_dict(self) -> dict[str, Any]:
        return {"records": list(self.history.records)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history.records[:0] = state_dict["records"]


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
    """Train ``module`` on the hardware ``trainer_settings()`` names (one CPU by default); return its curve."""
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    logging.getLogger("lightning.fabric").setLevel(logging.WARNING)
    logging.getLogger("pytorch_lightning").setLevel(logging.WARNING)  # same messages, other namespace
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")  # torch 2.13 vs Lightning 2.6
    # Frozen sub-networks (pretrained encoders) are in eval mode on purpose.
    warnings.filterwarnings("ignore", message=r".*module\(s\) in eval mode.*")
    L.seed_everything(seed, workers=True, verbose=False)
    history = HistoryLogger()
    callbacks: list[Callback] = [StopOnNonFiniteLoss()]
    ckpt_dir, resume_from = checkpoint_dir(variant), None
    if ckpt_dir is not None:
        from lightning.pytorch.callbacks import ModelCheckpoint

        callbacks += [ModelCheckpoint(dirpath=ckpt_dir, save_last=True, save_top_k=0), HistoryState(history)]
        if (ckpt_dir / "last.ckpt").is_file():
            resume_from = str(ckpt_dir / "last.ckpt")
            print(f"  resuming {variant} from {resume_from}", flush=True)
    kwargs: dict[str, Any] = dict(
        max_epochs=max_epochs,
        **trainer_settings(),
        logger=history,
        callbacks=callbacks,
        enable_checkpointing=ckpt_dir is not None,
        enable_progress_bar=show_progress(),
        enable_model_summary=False,
        deterministic=True,
        num_sanity_val_steps=0,
        log_every_n_steps=1,
    )
    callbacks += trainer_kwargs.pop("callbacks", [])
    kwargs.update(trainer_kwargs)
    trainer = L.Trainer(**kwargs)
    if show_progress():
        print(f"  training {variant} ({max_epochs} epochs)", flush=True)
    trainer.fit(module, train_dataloaders=train_loader, val_dataloaders=val_loader, ckpt_path=resume_from)
    return history.records

