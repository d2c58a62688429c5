"""Process-level switches shared by every method (no torch import at module level)."""

from __future__ import annotations

import contextlib
import math
import os
import re
from contextvars import ContextVar
from pathlib import Path
from typing import Iterator


def show_progress() -> bool:
    """Progress bars for people at a console; off in tests and CI (``PAPERLINE_PROGRESS=0``)."""
    return os.environ.get("PAPERLINE_PROGRESS", "1") == "1" and "PYTEST_CURRENT_TEST" not in os.environ


def set_threads() -> None:
    """One intra-op thread unless ``PAPERLINE_THREADS`` says more: the models are small, and two
    OpenMP threads on a busy 2-core machine ran 5-10x slower than one."""
    import torch

    torch.set_num_threads(int(os.environ.get("PAPERLINE_THREADS", "1")))


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


_CHECKPOINTS: ContextVar[tuple[Path, list[int]] | None] = ContextVar("paperline_checkpoints", default=None)


@contextlib.contextmanager
def checkpointing(folder: Path) -> Iterator[None]:
    """Checkpoint and resume every Lightning ``fit`` made inside this block under ``folder``."""
    token = _CHECKPOINTS.set((Path(folder), [0]))
    try:
        yield
    finally:
        _CHECKPOINTS.reset(token)


def checkpoint_dir(variant: str) -> Path | None:
    """The folder for the next ``fit`` call's checkpoints, or None outside ``checkpointing``."""
    state = _CHECKPOINTS.get()
    if state is None:
        return None
    folder, counter = state
    counter[0] += 1  # fit calls happen in the same order on a rerun: the index names the call
    return folder / f"{counter[0]:03d}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', variant)}"
