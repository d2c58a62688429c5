"""Whether to show progress bars: on for people at a console, off in tests and CI (no torch here)."""

from __future__ import annotations

import os


def show_progress() -> bool:
    return os.environ.get("PAPERLINE_PROGRESS", "1") == "1" and "PYTEST_CURRENT_TEST" not in os.environ
