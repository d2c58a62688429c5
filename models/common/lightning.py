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
import os
import pickle
import random
import time
import warnings
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities import rank_zero_only

from models.common.runtime import (  # noqa: F401 (re-exported)
    checkpoint_dir, checkpoint_seconds, set_threads, show_progress, trainer_settings,
)


class NonFiniteLossError(FloatingPointError):
    """Training produced a NaN or infinite loss."""


class HistoryLogger(Logger):
    """Keeps every logged metric in memory as ``{"step": s, key: value}`` records."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[dict[str, float]] = []
        self.on_epoch_logged = None  # set by fit when checkpointing: EpochCheckpoint.save

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
        record.update({k: float(v) for k, v in metrics.items() if k not in ("epoch", EPOCH_MARK)})
        if "epoch" in metrics:
            record["epoch"] = float(metrics["epoch"])
        if len(record) > 1 + ("epoch" in record):
            self.records.append(record)
        if EPOCH_MARK in metrics and self.on_epoch_logged is not None:
            self.on_epoch_logged()


class HistoryState(Callback):
    """Stores the learning curve in each checkpoint, so a resumed fit returns all of it."""

    def __init__(self, history: HistoryLogger) -> None:
        self.history = history

    def state_dict(self) -> dict[str, Any]:
        return {"records": list(self.history.records)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history.records[:0] = state_dict["records"]


EPOCH_MARK = "paperline_epoch_end"


class EpochCheckpoint(Callback):
    """Writes ``path`` once per epoch, after the epoch's metrics have reached the history.

    Lightning's ``ModelCheckpoint`` saves before the epoch-end metrics are logged (a resumed curve
    would miss that epoch) and, from 2.6, writes ``save_last`` only after a top-k save. Here each
    epoch logs a mark; when the logger receives it (the epoch's own log call, loop state as
    ``ModelCheckpoint`` would save it) the checkpoint is written under a temporary name and renamed,
    so a kill during the save leaves the previous file intact.
    """

    def __init__(self, path, every_seconds: float) -> None:
        self.path = path
        self.every_seconds = every_seconds  # at most one save per this many seconds (0: every epoch)
        self.trainer = None
        self.last_save = time.monotonic()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.trainer = trainer
        pl_module.log(EPOCH_MARK, 1.0, on_step=False, on_epoch=True, logger=True, prog_bar=False)

    # Random streams travel with the checkpoint, so that a resumed fit draws the same shuffles, noise and
    # dropout masks as an uninterrupted one: the global torch / NumPy / Python states and every
    # torch.Generator the LightningModule holds (probe or rollout streams). Tensors and ints only: resume
    # loads with weights_only=True.
    def state_dict(self) -> dict[str, Any]:
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        return {"torch": torch.get_rng_state(), "numpy_keys": torch.from_numpy(keys.astype("int64")),
                "numpy": [kind, int(pos), int(has_gauss), float(cached)], "python": random.getstate()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not state:  # a checkpoint written before RNG states were saved
            return
        torch.set_rng_state(state["torch"])
        kind, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((kind, state["numpy_keys"].numpy().astype("uint32"), pos, has_gauss, cached))
        random.setstate(state["python"])

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        checkpoint["module_generators"] = {name: g.get_state() for name, g in vars(pl_module).items()
                                           if isinstance(g, torch.Generator)}

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        for name, state in checkpoint.get("module_generators", {}).items():
            getattr(pl_module, name).set_state(state)

    def save(self) -> None:
        if self.trainer is None or self.trainer.sanity_checking:
            return
        if time.monotonic() - self.last_save < self.every_seconds:
            return
        partial = self.path.with_name(self.path.name + ".partial")
        self.trainer.save_checkpoint(partial)
        os.replace(partial, self.path)
        self.last_save = time.monotonic()


class LoaderEpoch(Callback):
    """Tells a training loader with ``set_epoch`` (DistributedSampler's convention) which epoch starts, so
    loaders whose batches depend on the epoch continue correctly after a resume."""

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        set_epoch = getattr(trainer.train_dataloader, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(trainer.current_epoch)


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
    callbacks: list[Callback] = [StopOnNonFiniteLoss(), LoaderEpoch()]
    ckpt_dir, resume_from = checkpoint_dir(variant), None
    if ckpt_dir is not None:
        saver = EpochCheckpoint(ckpt_dir / "last.ckpt", checkpoint_seconds())
        history.on_epoch_logged = saver.save
        callbacks += [saver, HistoryState(history)]
        if (ckpt_dir / "last.ckpt").is_file() and _readable_checkpoint(ckpt_dir / "last.ckpt", variant):
            resume_from = str(ckpt_dir / "last.ckpt")
            print(f"  resuming {variant} from {resume_from}", flush=True)
    kwargs: dict[str, Any] = dict(
        max_epochs=max_epochs,
        **trainer_settings(),
        logger=history,
        callbacks=callbacks,
        enable_checkpointing=False,  # EpochCheckpoint saves; no default ModelCheckpoint folder
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
    # weights_only: a checkpoint is unpickled only as tensors and plain containers (checked above too).
    trainer.fit(module, train_dataloaders=train_loader, val_dataloaders=val_loader, ckpt_path=resume_from,
                weights_only=True if resume_from else None)
    return history.records


def _readable_checkpoint(path, variant: str) -> bool:
    """Whether ``path`` loads with ``weights_only=True``. One that does not (objects the safe loader refuses,
    a file truncated or emptied by a crash or a full disk) is renamed aside and reported, and the fit
    starts afresh: an unreadable checkpoint never blocks later runs."""
    try:
        torch.load(path, map_location="cpu", weights_only=True)
        return True
    except (pickle.UnpicklingError, EOFError, OSError, RuntimeError, ValueError, KeyError, AttributeError) as exc:
        aside = path.with_name(f"{path.name}.unreadable-{time.strftime('%Y%m%d-%H%M%S')}")
        os.replace(path, aside)
        reason = "holds objects weights_only=True refuses" if isinstance(exc, pickle.UnpicklingError) else "is unreadable"
        print(f"  {path} {reason} ({type(exc).__name__}: {str(exc)[:200]}); set aside as {aside.name}; "
              f"training {variant} from scratch", flush=True)
        return False

