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


def pytest_addoption(parser):
    parser.addoption(
        "--method",
        default=None,
        help="only this method's tests: its own files, its cases of the parametrised tests, and the sync "
        "checks (registry, params.yaml/dvc.yaml, README tables; marker `sync`) - what `make test-method M=` runs",
    )


def _about(item, slug: str) -> bool:
    """Whether ``item`` exercises ``slug``: a test of its folder, or a case parametrised with it."""
    if _method_of(item) == slug and "tests/methods/" in str(item.fspath).replace("\\", "/"):
        return True
    params = getattr(getattr(item, "callspec", None), "params", {})
    return slug in params.values() or item.get_closest_marker("sync") is not None


def pytest_collection_modifyitems(config, items):
    slug = config.getoption("--method")
    if slug:
        from models.registry import METHODS

        if slug not in METHODS:
            raise pytest.UsageError(f"--method {slug!r}: not a registered method; choose from {', '.join(METHODS)}")
        kept = [item for item in items if _about(item, slug)]
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept
    # Under `pytest -n N --dist loadgroup` (make test) every test of one method runs in one worker, so the
    # session-wide smoke run (tests/methods/conftest.py) is made once, not once per worker.
    for item in items:
        if "tests/methods/" in str(item.fspath).replace("\\", "/"):
            slug = _method_of(item)
            if slug:
                item.add_marker(pytest.mark.xdist_group(slug))
