"""Lightning glue every gradient-trained method uses: one ``fit`` with history capture.

The LightningModule of a method adds loss, metrics and optimiser to a plain ``nn.Module``;
``fit`` runs ``Trainer.fit`` with an in-memory logger so the learning curve comes back as
records the spine logs to MLflow, and stops on a non-finite loss.

Inside ``runtime.checkpointing(folder)`` (the train step opens it), every ``fit`` call saves
``last.ckpt`` under ``folder/<call index>-<variant>/`` together with its learning curve: at the end of
an epoch when ``PAPERLINE_CHECKPOINT_SECONDS`` have passed since any fit of the step last saved, and
always when the fit completes. A rerun resumes the interrupted fit where it stopped and does not
retrain the completed ones (it loads their final state): the result is that of an uninterrupted run.
"""

from __future__ import annotations

import functools
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
from lightning.pytorch.callbacks import Callback, TQDMProgressBar
from lightning.pytorch.loggers import Logger
from lightning.pytorch.loops.loop import _Loop
from lightning.pytorch.utilities import rank_zero_only

from models.common.runtime import (  # noqa: F401 (re-exported)
    STOP_FILE_VAR,
    TRAINER_ENV,
    checkpoint_dir,
    checkpoint_seconds,
    checkpoint_session,
    dry_run,
    hardware_settings,
    raise_if_stop_requested,
    set_threads,
    show_progress,
    trainer_settings,
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
    """Writes ``path`` at the end of an epoch, after the epoch's metrics have reached the history, and once
    more when the fit completes (``finish``), marked complete.

    Lightning's ``ModelCheckpoint`` saves before the epoch-end metrics are logged (a resumed curve
    would miss that epoch) and, from 2.6, writes ``save_last`` only after a top-k save. Here each
    epoch logs a mark; when the logger receives it (the epoch's own log call) the checkpoint is written
    under a temporary name and renamed, so a kill during the save leaves the previous file intact.
    Saves are at most ``every_seconds`` apart, counted across the fits of a train step (``session``).
    """

    def __init__(self, path, every_seconds: float, session=None, train_loader=None) -> None:
        self.path = path
        self.every_seconds = every_seconds  # at most one save per this many seconds (0: every epoch)
        self.session = session  # runtime.CheckpointSession: the clock all fits of the train step share
        self.train_loader = train_loader
        self.trainer = None
        self.complete = False
        self.resuming = False  # set by fit when it resumes from this callback's epoch-end checkpoint
        self._at_epoch_end = False
        self._last_save = time.monotonic()  # without a session

    def on_train_start(self, trainer, pl_module) -> None:
        if self.resuming:
            # The checkpoint is a completed epoch: the next one starts as in an uninterrupted fit. Lightning
            # restarts a step-bounded fit (max_steps) as if stopped mid-epoch instead, whatever the state
            # says: it then skipped a batch slot, counted one step too many and held back epoch schedulers.
            _Loop.restarting.fset(trainer.fit_loop, False)  # the base setter, which also clears the inner loops

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.trainer = trainer
        pl_module.log(EPOCH_MARK, 1.0, on_step=False, on_epoch=True, logger=True, prog_bar=False)

    # Random streams travel with the checkpoint, so that a resumed fit draws the same shuffles, noise and
    # dropout masks as an uninterrupted one: the global torch / NumPy / Python states, every
    # torch.Generator the LightningModule holds (probe or rollout streams) and those of the training
    # loader (a DataLoader's or sampler's ``generator``); so do the module's plain attributes (counters,
    # best-so-far records). Tensors, numbers and containers only: resume loads with weights_only=True.
    def state_dict(self) -> dict[str, Any]:
        return _global_rng_state()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:  # empty: a checkpoint written before RNG states were saved
            _set_global_rng_state(state)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        checkpoint["module_generators"] = {name: g.get_state() for name, g in _module_generators(pl_module).items()}
        checkpoint["module_state"] = _plain_state(pl_module)
        loader_generators = _loader_generators(self.train_loader)
        checkpoint["loader_generators"] = {name: g.get_state() for name, g in loader_generators.items()}
        checkpoint["paperline_fit_complete"] = self.complete
        if self._at_epoch_end and "loops" in checkpoint:
            _as_completed_epoch(checkpoint["loops"])

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        _set_module_generators(pl_module, checkpoint)
        for name, value in checkpoint.get("module_state", {}).items():
            setattr(pl_module, name, value)

    def save(self) -> None:
        """At an epoch's end (the logger received its mark): write unless a fit of this step saved recently."""
        if self.trainer is None or self.trainer.sanity_checking:
            return
        last = self.session.last_save if self.session is not None else self._last_save
        if time.monotonic() - last < self.every_seconds:
            return
        self._at_epoch_end = True
        try:
            self._write(self.trainer)
        finally:
            self._at_epoch_end = False

    def finish(self, trainer) -> None:
        """The fit completed: its final state (weights, callbacks, random streams after training) is saved
        so that a rerun of the train step returns it without training."""
        self.complete = True
        self._write(trainer)

    def _write(self, trainer) -> None:
        partial = self.path.with_name(self.path.name + ".partial")
        trainer.save_checkpoint(partial)  # every rank takes part; global rank zero writes
        if trainer.is_global_zero:
            os.replace(partial, self.path)
        self._last_save = time.monotonic()
        if self.session is not None:
            self.session.last_save = self._last_save


def _global_rng_state() -> dict[str, Any]:
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "numpy_keys": torch.from_numpy(keys.astype("int64")),
        "numpy": [kind, int(pos), int(has_gauss), float(cached)],
        "python": random.getstate(),
    }


def _set_global_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    kind, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, state["numpy_keys"].numpy().astype("uint32"), pos, has_gauss, cached))
    random.setstate(state["python"])


def _module_generators(pl_module) -> dict[str, torch.Generator]:
    return {name: g for name, g in vars(pl_module).items() if isinstance(g, torch.Generator)}


def _set_module_generators(pl_module, checkpoint: dict) -> None:
    for name, state in checkpoint.get("module_generators", {}).items():
        getattr(pl_module, name).set_state(state)


def _plain_state(pl_module) -> dict[str, Any]:
    """The LightningModule's own plain attributes (numbers, strings, tensors and lists/tuples/dicts of
    them, e.g. hpde_gnn's best-validation weights, ibmd's batch counts, zo_natural's query count): what
    training changes besides weights and optimiser, so a resumed or reloaded fit ends with the same
    values. Private names, Lightning's own attributes and anything else (configs, samplers) stay out."""
    base = _lightning_attributes()
    return {
        name: value
        for name, value in vars(pl_module).items()
        if not name.startswith("_") and name not in base and _is_plain(value)
    }


@functools.cache
def _lightning_attributes() -> frozenset[str]:
    return frozenset(vars(L.LightningModule()))


def _is_plain(value, depth: int = 0) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, torch.Tensor):
        return not isinstance(value, torch.nn.Parameter)
    if depth < 8 and isinstance(value, (list, tuple)):
        return all(_is_plain(v, depth + 1) for v in value)
    if depth < 8 and isinstance(value, dict):
        return all(_is_plain(k, depth + 1) and _is_plain(v, depth + 1) for k, v in value.items())
    return False


def _loader_generators(loader) -> dict[str, torch.Generator]:
    """Every torch.Generator the training loader draws its order from: the loader's own ``generator``
    and those of its (batch) samplers, nested as ``BatchSampler(RandomSampler(generator=...))`` nests them,
    and the generators a custom loader object keeps as attributes."""
    found: dict[str, torch.Generator] = {}
    seen: set[int] = set()

    def walk(obj, prefix: str, depth: int) -> None:
        if obj is None or id(obj) in seen or depth > 3 or not hasattr(obj, "__dict__"):
            return
        seen.add(id(obj))
        for name, value in vars(obj).items():
            if isinstance(value, torch.Generator):
                found[prefix + name] = value
            elif name in ("sampler", "batch_sampler") or isinstance(value, torch.utils.data.Sampler):
                walk(value, f"{prefix}{name}.", depth + 1)

    walk(loader, "", 0)
    return found


def _set_loader_generators(loader, checkpoint: dict) -> None:
    generators = _loader_generators(loader)
    for name, state in checkpoint.get("loader_generators", {}).items():
        if name in generators:
            generators[name].set_state(state)


def _as_completed_epoch(loops: dict) -> None:
    """Rewrite the loop state saved at an epoch's end as it stands once that epoch is complete.

    The epoch-end metrics reach the logger (and so ``save``) before Lightning counts the epoch completed,
    and while it holds its logged-batches counter one lower: resumed from that state, Lightning replayed
    the epoch's end, with the step counter one short.
    """
    fit_loop = loops.get("fit_loop", {})
    for counts in fit_loop.get("epoch_progress", {}).values():
        counts["completed"] = counts["processed"]
    stepped = fit_loop.get("epoch_loop.state_dict", {})
    if "_batches_that_stepped" in stepped:
        stepped["_batches_that_stepped"] += 1


class LoaderEpoch(Callback):
    """Tells a training loader with ``set_epoch`` (DistributedSampler's convention) which epoch starts, so
    loaders whose batches depend on the epoch continue correctly after a resume."""

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        set_epoch = getattr(trainer.train_dataloader, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(trainer.current_epoch)


class FitProgressBar(TQDMProgressBar):
    """One bar per fit, named after its arm. A step-bounded fit (``max_steps``) counts optimiser steps out of
    that budget across epochs; an epoch-bounded one says "epoch e/E". (Lightning's own bar numbers epochs
    out of ``max_epochs``, which a step-bounded fit sets to a nominal bound: "Epoch 9/999999".)"""

    def __init__(self, variant: str, min_seconds: float = 0.5) -> None:
        super().__init__()
        self.variant = variant
        # Lightning redraws every batch (a metrics read and a write each): thousands of small steps cost
        # seconds of CPU, and a log or a Dask worker's stderr gets megabytes of bars. Redraw at most
        # every ``min_seconds``, and at the end.
        self.min_seconds = min_seconds
        self._last_draw = -math.inf

    def _should_update(self, current: int, total: int | float) -> bool:
        now = time.monotonic()
        if current == total or now - self._last_draw >= self.min_seconds:
            self._last_draw = now
            return True
        return False

    @staticmethod
    def _step_bounded(trainer) -> bool:
        return trainer.max_steps is not None and trainer.max_steps > 0

    def on_train_epoch_start(self, trainer, *args: Any) -> None:
        bar = self.train_progress_bar
        if not self._step_bounded(trainer):
            total = self.total_train_batches
            bar.reset(total=None if total == float("inf") else total)
            bar.set_description(f"{self.variant} epoch {trainer.current_epoch + 1}/{trainer.max_epochs}")
            return
        if bar.total != trainer.max_steps:  # the first epoch (or a resumed fit): one bar for the whole budget
            bar.reset(total=trainer.max_steps)
            bar.n = trainer.global_step
        bar.set_description(f"{self.variant} step", refresh=False)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if not self._step_bounded(trainer):
            return super().on_train_epoch_end(trainer, pl_module)
        bar = self.train_progress_bar
        if self._should_update(trainer.global_step, trainer.max_steps) and not bar.disable:
            bar.n = trainer.global_step
            bar.set_postfix(self.get_metrics(trainer, pl_module), refresh=True)

    # Validation is folded into the fit's one bar: its metrics join the bar's postfix, and no bar of its own
    # is drawn (Lightning's per-epoch validation bars were 160 of a smoke run's 243 lines).
    def on_validation_start(self, trainer, pl_module) -> None:
        pass

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        pass

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int, dataloader_idx: int = 0):
        pass

    def on_validation_end(self, trainer, pl_module) -> None:
        if self._train_progress_bar is not None and trainer.state.fn == "fit":
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if not self._step_bounded(trainer):
            return super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        step = trainer.global_step
        if self._should_update(step, trainer.max_steps) and not self.train_progress_bar.disable:
            self.train_progress_bar.n = step
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module), refresh=True)


class StopOnNonFiniteLoss(Callback):
    """Raise as soon as a training step returns a NaN/inf loss (the run is then failed)."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if loss is not None and not math.isfinite(float(loss)):
            raise NonFiniteLossError(
                f"non-finite training loss {float(loss)} at epoch {trainer.current_epoch}, batch {batch_idx}"
            )


class StopOnRequest(Callback):
    """Ends the fit when the `paperline run` supervisor asked the process to stop (checked at most every
    ``every`` seconds, between batches): a SIGTERM whose handler a library swapped out still lands."""

    def __init__(self, every: float = 0.5) -> None:
        self.every, self.last = every, 0.0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            raise_if_stop_requested()


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
    """Train ``module`` and return its learning curve.

    The hardware is ``hardware_settings``: the environment's (``PAPERLINE_ACCELERATOR``, ...; one CPU
    by default), where a per-call ``accelerator=``/``devices=`` only fills in what the environment leaves
    unset."""
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    logging.getLogger("lightning.fabric").setLevel(logging.WARNING)
    logging.getLogger("pytorch_lightning").setLevel(logging.WARNING)  # same messages, other namespace
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")  # torch 2.13 vs Lightning 2.6
    # Frozen sub-networks (pretrained encoders) are in eval mode on purpose.
    warnings.filterwarnings("ignore", message=r".*module\(s\) in eval mode.*")
    L.seed_everything(seed, workers=True, verbose=False)
    history = HistoryLogger()
    callbacks: list[Callback] = [StopOnNonFiniteLoss(), LoaderEpoch()]
    if os.environ.get(STOP_FILE_VAR):
        callbacks.append(StopOnRequest())
    ckpt_dir, saver, resume_from, complete, after = checkpoint_dir(variant), None, None, False, {}
    if ckpt_dir is not None:
        saver = EpochCheckpoint(ckpt_dir / "last.ckpt", checkpoint_seconds(), checkpoint_session(), train_loader)
        history.on_epoch_logged = saver.save
        callbacks += [saver, HistoryState(history)]
        state = (
            _load_checkpoint(ckpt_dir / "last.ckpt", variant, module) if (ckpt_dir / "last.ckpt").is_file() else None
        )
        if state is not None:
            resume_from, complete = str(ckpt_dir / "last.ckpt"), bool(state.get("paperline_fit_complete", False))
            how = "completed earlier, loading" if complete else "resuming"
            print(f"  {how} {variant} from {resume_from}", flush=True)
            # Lightning reads the loader before any hook could restore its generators: restore them here.
            _set_loader_generators(train_loader, state)
            saver.resuming = not complete
            if complete:  # the random streams as the completed fit left them
                after = {key: state.get(key, {}) for key in ("module_generators", "loader_generators")}
                after["rng"] = state.get("callbacks", {}).get(saver.state_key)
            del state  # Lightning loads the file itself
    if dry_run():  # paper-scale dry run: shapes and memory, two optimiser steps, one validation batch
        trainer_kwargs.update(
            max_steps=-1, limit_train_batches=2, limit_val_batches=1, val_check_interval=None, check_val_every_n_epoch=1
        )
        max_epochs = 1
        _log_dry_run_fit(module, train_loader, variant)
    hardware = hardware_settings({k: trainer_kwargs.pop(k) for k in TRAINER_ENV if k in trainer_kwargs})
    kwargs: dict[str, Any] = dict(
        max_epochs=max_epochs,
        **hardware,
        logger=history,
        callbacks=callbacks,
        enable_checkpointing=False,  # EpochCheckpoint saves; no default ModelCheckpoint folder
        enable_progress_bar=show_progress(),
        enable_model_summary=False,
        deterministic=True,
        num_sanity_val_steps=0,
        log_every_n_steps=1,
    )
    if show_progress():
        callbacks.append(FitProgressBar(variant))
    callbacks += trainer_kwargs.pop("callbacks", [])
    kwargs.update(trainer_kwargs)
    if complete:
        # Lightning restores the model, optimisers, callbacks and curve from the final checkpoint and
        # trains no batch (it neither reads the loader nor calls the train start/end hooks).
        kwargs["limit_train_batches"] = 0
    trainer = L.Trainer(**kwargs)
    if show_progress() and not complete:
        steps = kwargs.get("max_steps", -1)
        budget = f"{steps} steps" if steps and steps > 0 else f"{max_epochs} epochs"
        print(f"  training {variant} ({budget})", flush=True)
    # weights_only: a checkpoint is unpickled only as tensors and plain containers (checked above too).
    trainer.fit(
        module,
        train_dataloaders=train_loader,
        val_dataloaders=val_loader,
        ckpt_path=resume_from,
        weights_only=True if resume_from else None,
    )
    if complete:
        # What runs after the fit continues the random streams exactly where the completed fit left them.
        if after["rng"]:
            _set_global_rng_state(after["rng"])
        _set_module_generators(module, after)
        _set_loader_generators(train_loader, after)
    elif saver is not None:
        saver.finish(trainer)
    return history.records


CHECKPOINT_KEYS = ("pytorch-lightning_version", "state_dict", "loops", "callbacks", "optimizer_states", "epoch")


class WrongCheckpoint(ValueError):
    """A checkpoint that loads but is not this fit's Lightning checkpoint."""


def _log_dry_run_fit(module, train_loader, variant: str) -> None:
    """One record of a dry run's fit: parameters, their dtype, the first batch's shapes and dtypes."""
    from models.common.runtime import DRY_RUN_LOG

    def shapes(batch):
        if isinstance(batch, torch.Tensor):
            return [list(batch.shape), str(batch.dtype).removeprefix("torch.")]
        if isinstance(batch, (list, tuple)):
            return [shapes(b) for b in batch]
        if isinstance(batch, dict):
            return {k: shapes(v) for k, v in batch.items()}
        return type(batch).__name__

    params = list(module.parameters())
    try:
        first = shapes(next(iter(train_loader)))
    except (StopIteration, TypeError) as exc:
        first = f"no batch ({type(exc).__name__})"
    DRY_RUN_LOG.fits.append(
        {
            "variant": variant,
            "parameters": int(sum(p.numel() for p in params)),
            "trainable": int(sum(p.numel() for p in params if p.requires_grad)),
            "dtype": str(params[0].dtype).removeprefix("torch.") if params else "-",
            "first_batch": first,
        }
    )


def _load_checkpoint(path, variant: str, module=None) -> dict | None:
    """``path`` loaded with ``weights_only=True`` and checked to be this fit's Lightning checkpoint, or None.
    One that does not load (objects the safe loader refuses, a file truncated or emptied by a crash or a full
    disk) or loads but is something else (another module's weights, a dict without Lightning's keys) is
    renamed aside and reported, and the fit starts afresh: a bad checkpoint never blocks later runs."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        _check_checkpoint(state, module)
        return state
    except (pickle.UnpicklingError, EOFError, OSError, RuntimeError, ValueError, KeyError, AttributeError) as exc:
        aside = path.with_name(f"{path.name}.unreadable-{time.strftime('%Y%m%d-%H%M%S')}")
        os.replace(path, aside)
        reason = (
            "holds objects weights_only=True refuses"
            if isinstance(exc, pickle.UnpicklingError)
            else "is not this fit's checkpoint"
            if isinstance(exc, WrongCheckpoint)
            else "is unreadable"
        )
        print(
            f"  {path} {reason} ({type(exc).__name__}: {str(exc)[:200]}); set aside as {aside.name}; "
            f"training {variant} from scratch",
            flush=True,
        )
        return None


def _check_checkpoint(state, module) -> None:
    if not isinstance(state, dict):
        raise WrongCheckpoint(f"a {type(state).__name__}, not a checkpoint dict")
    missing = [k for k in CHECKPOINT_KEYS if k not in state]
    if missing:
        raise WrongCheckpoint(f"no {', '.join(missing)}")
    if module is None:
        return
    expected = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    found = {k: tuple(getattr(v, "shape", ())) for k, v in state["state_dict"].items()}
    if expected != found:
        differ = sorted(set(expected) ^ set(found)) or [k for k in expected if expected[k] != found[k]]
        raise WrongCheckpoint(f"its weights do not match the module's ({', '.join(differ[:4])})")
