"""Process-level switches shared by every method (no torch import at module level)."""

from __future__ import annotations

import contextlib
import math
import os
import re
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path


def show_progress() -> bool:
    """Progress bars for people at a console; off in tests and CI (``PAPERLINE_PROGRESS=0``)."""
    return os.environ.get("PAPERLINE_PROGRESS", "1") == "1" and "PYTEST_CURRENT_TEST" not in os.environ


def set_threads() -> None:
    """One intra-op thread unless ``PAPERLINE_THREADS`` says more: the models are small, and two
    OpenMP threads on a busy 2-core machine ran 5-10x slower than one. ``tasks.steps`` calls it before
    every step, so it holds in every process that runs one (CLI, Dask worker, DVC stage)."""
    import sys

    threads = int(os.environ.get("PAPERLINE_THREADS", "1"))
    torch = sys.modules.get("torch")
    if torch is None:  # not loaded (a numpy-only method): torch reads this when a step imports it
        os.environ["OMP_NUM_THREADS"] = str(threads)
    elif torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's global and torch's generators, so a step's result never depends on
    what ran before it in the process (e.g. the previous method of ``paperline run --all``)."""
    import random
    import sys

    import numpy as np

    random.seed(seed)
    np.random.seed(seed % 2**32)
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(seed)


TRAINER_ENV = {
    "accelerator": "PAPERLINE_ACCELERATOR",
    "devices": "PAPERLINE_DEVICES",
    "strategy": "PAPERLINE_STRATEGY",
    "num_nodes": "PAPERLINE_NUM_NODES",
}


def trainer_settings() -> dict[str, object]:
    """Lightning's hardware switches from the environment (default: one CPU device).

    ``PAPERLINE_ACCELERATOR=gpu PAPERLINE_DEVICES=4 PAPERLINE_STRATEGY=ddp PAPERLINE_NUM_NODES=2``
    scales every method's ``fit`` without touching its config (docs/scaling.md).
    """
    settings: dict[str, object] = {"accelerator": "cpu", "devices": 1}
    for key, var in TRAINER_ENV.items():
        raw = os.environ.get(var, "").strip()
        if not raw:
            continue
        if key == "num_nodes":
            if not raw.isdigit() or int(raw) < 1:
                raise ValueError(f"{var}={raw!r}: expected a positive integer")
            settings[key] = int(raw)
        elif key == "devices":
            if raw == "auto" or raw.startswith("[") or "," in raw:
                settings[key] = raw  # Lightning parses "auto", "0,1" itself
            elif raw.lstrip("-").isdigit():
                settings[key] = int(raw)
            else:
                raise ValueError(f"{var}={raw!r}: expected an integer, 'auto' or a device list like '0,1'")
        else:
            settings[key] = raw
    return settings


def hardware_settings(requested: dict[str, object]) -> dict[str, object]:
    """The Trainer's hardware for one ``fit``: ``trainer_settings()``, where a method's own choice
    (``requested``: its ``accelerator``, ``devices``, ... e.g. a config's ``accelerator="cpu"``) fills
    in only what the environment leaves unset. ``PAPERLINE_ACCELERATOR=gpu`` reaches every method."""
    settings = trainer_settings()
    for key, var in TRAINER_ENV.items():
        if key in requested and not os.environ.get(var, "").strip():
            settings[key] = requested[key]
    return settings


def checkpoint_seconds() -> float:
    """How often a training fit checkpoints, at most: ``PAPERLINE_CHECKPOINT_SECONDS`` (default 30).

    Saving every epoch cost up to a third of the training time for methods with many short
    full-batch epochs; a crash now loses at most this many seconds of training."""
    raw = os.environ.get("PAPERLINE_CHECKPOINT_SECONDS", "30").strip()
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not value >= 0:  # also NaN
        raise ValueError(f"PAPERLINE_CHECKPOINT_SECONDS={raw!r}: expected a number of seconds >= 0")
    return value


@dataclass
class CheckpointSession:
    """The checkpoints of one train step: its folder, how many ``fit`` calls it has made, and when any of
    them last saved (the ``PAPERLINE_CHECKPOINT_SECONDS`` period counts across all of its fits)."""

    folder: Path
    calls: int = 0
    last_save: float = field(default_factory=lambda: time.monotonic())  # looked up at each call (tests fake it)


_CHECKPOINTS: ContextVar[CheckpointSession | None] = ContextVar("paperline_checkpoints", default=None)


@contextlib.contextmanager
def checkpointing(folder: Path) -> Iterator[None]:
    """Checkpoint and resume every Lightning ``fit`` made inside this block under ``folder``."""
    token = _CHECKPOINTS.set(CheckpointSession(Path(folder)))
    try:
        yield
    finally:
        _CHECKPOINTS.reset(token)


def checkpoint_session() -> CheckpointSession | None:
    """The enclosing ``checkpointing`` block's state, or None outside one."""
    return _CHECKPOINTS.get()


def checkpoint_dir(variant: str) -> Path | None:
    """The folder for the next ``fit`` call's checkpoints, or None outside ``checkpointing``."""
    session = _CHECKPOINTS.get()
    if session is None:
        return None
    session.calls += 1  # fit calls happen in the same order on a rerun: the index names the call
    return session.folder / f"{session.calls:03d}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', variant)}"


ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps", "tpu")  # Lightning's accelerator names


def check_environment() -> None:
    """Raise ``ValueError`` naming the first ``PAPERLINE_*`` variable the readers above (or Lightning)
    would reject once training starts, so the CLI can refuse it before a run is opened."""
    settings = trainer_settings()
    accelerator = os.environ.get("PAPERLINE_ACCELERATOR", "").strip()
    if accelerator and accelerator not in ACCELERATORS:
        raise ValueError(f"PAPERLINE_ACCELERATOR={accelerator!r}: expected one of {', '.join(ACCELERATORS)}")
    devices = settings["devices"]
    indices = str(devices).strip("[]").split(",") if isinstance(devices, str) and devices != "auto" else []
    if (isinstance(devices, int) and devices < 1) or any(not i.strip().isdigit() for i in indices):
        raise ValueError(
            f"PAPERLINE_DEVICES={os.environ['PAPERLINE_DEVICES'].strip()!r}: expected a positive "
            "integer, 'auto' or a device list like '0,1'"
        )
    checkpoint_seconds()
    threads = os.environ.get("PAPERLINE_THREADS", "1").strip()
    if not threads.isdigit() or int(threads) < 1:
        raise ValueError(f"PAPERLINE_THREADS={threads!r}: expected a positive integer")


# ----------------------------------------------------------------------------- stop requests

STOP_FILE_VAR = "PAPERLINE_STOP_FILE"  # set by the `paperline run` supervisor for the process it starts


class StopRequested(SystemExit):
    """The supervisor asked this run to stop (Ctrl-C or SIGTERM reached `paperline run`). A BaseException, so
    no retry or ``except Exception`` swallows it; raised at step boundaries, before a model is registered and
    between training batches, so a stop lands even where a library replaced this process's signal handlers."""

    def __init__(self, reason: str) -> None:
        super().__init__(143)
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


def stop_reason() -> str:
    """Why the supervisor asked this process to stop, or ``""`` when it did not."""
    path = os.environ.get(STOP_FILE_VAR)
    if not path:
        return ""
    try:
        return Path(path).read_text().strip() or "stop requested"
    except OSError:
        return ""


def raise_if_stop_requested() -> None:
    reason = stop_reason()
    if reason:
        raise StopRequested(reason)


# ----------------------------------------------------------------------------- paper-scale dry runs

DRY_RUN_VAR = "PAPERLINE_DRY_RUN"  # "1": every fit takes two optimiser steps and every grid its first point


def dry_run() -> bool:
    return os.environ.get(DRY_RUN_VAR, "") == "1"


@dataclass
class DryRunLog:
    """What the fits of a dry run met: each network's size and the shapes of its first batch."""

    fits: list[dict] = field(default_factory=list)


DRY_RUN_LOG = DryRunLog()
