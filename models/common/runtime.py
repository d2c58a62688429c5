"""Process-level switches shared by every method (no torch import at module level)."""

from __future__ import annotations

import contextlib
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
