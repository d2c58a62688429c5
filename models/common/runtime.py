"""Process-level switches shared by every method (no torch import at module level)."""

from __future__ import annotations

import os


def show_progress() -> bool:
    """Progress bars for people at a console; off in tests and CI (``PAPERLINE_PROGRESS=0``)."""
    return os.environ.get("PAPERLINE_PROGRESS", "1") == "1" and "PYTEST_CURRENT_TEST" not in os.environ


def set_threads() -> None:
    """Use the cores we have, at most two (the project's CPU budget); ``PAPERLINE_THREADS`` overrides."""
    import torch

    torch.set_num_threads(int(os.environ.get("PAPERLINE_THREADS", min(2, os.cpu_count() or 1))))
