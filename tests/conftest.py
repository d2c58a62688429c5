"""Test-wide settings: set before any project or library module is imported."""

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ["PAPERLINE_PROGRESS"] = "0"
sys.path.insert(0, str(ROOT))
from models.common.triton_mode import use_interpreter_without_gpu  # noqa: E402

use_interpreter_without_gpu()  # before any @triton.jit module (or Lightning) imports triton.language
os.environ.setdefault("PAPERLINE_THREADS", "1")
os.environ["PAPERLINE_CHECKPOINT_SECONDS"] = "0"  # checkpoint every epoch: the crash tests kill within seconds
os.environ.setdefault("OMP_NUM_THREADS", "1")  # torch reads it at import: no oversubscription on 2 cores
os.environ.setdefault("PAPERLINE_ROOT", str(ROOT))
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "600")

from tasks import env  # noqa: E402

env.configure(ROOT)
env.make_state_dirs(ROOT)
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _method_of(item) -> str | None:
    """The method a test under tests/methods/ exercises: its ``slug`` parameter, else its file's name."""
    from models.registry import METHODS

    slug = getattr(getattr(item, "callspec", None), "params", {}).get("slug")
    if slug in METHODS:
        return slug
    stem = Path(str(item.fspath)).stem.removeprefix("test_")
    return max((s for s in METHODS if stem == s or stem.startswith(s + "_")), key=len, default=None)


def pytest_collection_modifyitems(config, items):
    # Under `pytest -n N --dist loadgroup` (make test) every test of one method runs in one worker, so the
    # session-wide smoke run (tests/methods/conftest.py) is made once, not once per worker.
    for item in items:
        if "tests/methods/" in str(item.fspath).replace("\\", "/"):
            slug = _method_of(item)
            if slug:
                item.add_marker(pytest.mark.xdist_group(slug))
