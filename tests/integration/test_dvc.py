"""`dvc repro` in a temporary clone: the stages run once, then a second repro does nothing."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SLUG = "sleeping_rl"


def _clone(dest: Path) -> None:
    """Copy what a clone would hold (tracked and not-ignored files), then commit it."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    subprocess.run([*git, "add", "-A"], cwd=dest, check=True)
    subprocess.run([*git, "commit", "-qm", "clone"], cwd=dest, check=True)


def _dvc(dest: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PAPERLINE_ROOT=str(dest), PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    env.pop("PYTEST_CURRENT_TEST", None)
    return subprocess.run([sys.executable, "-m", "dvc", *args], cwd=dest, env=env, capture_output=True, text=True)


def test_dvc_repro_runs_then_is_a_no_op(tmp_path):
    from models.registry import get

    _clone(tmp_path)
    params = yaml.safe_load((tmp_path / "params.yaml").read_text())
    params[SLUG] = get(SLUG).make_config("smoke").model_dump(mode="json")  # keep the test quick
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))

    first = _dvc(tmp_path, "repro", f"evaluate@{SLUG}")
    assert first.returncode == 0, first.stdout + first.stderr
    for stage in ("prepare", "train", "evaluate"):
        assert f"Running stage '{stage}@{SLUG}'" in first.stdout
    metrics = tmp_path / "outputs" / SLUG / "metrics.json"
    stamp = metrics.stat().st_mtime_ns
    lock = yaml.safe_load((tmp_path / "dvc.lock").read_text())
    assert {f"prepare@{SLUG}", f"train@{SLUG}", f"evaluate@{SLUG}"} <= set(lock["stages"])

    second = _dvc(tmp_path, "repro", f"evaluate@{SLUG}")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "Running stage" not in second.stdout
    assert metrics.stat().st_mtime_ns == stamp

    status = _dvc(tmp_path, "status", f"evaluate@{SLUG}")
    assert "up to date" in status.stdout.lower(), status.stdout


def test_concurrent_dvc_repro_is_refused_and_writes_nothing(tmp_path):
    """While another DVC process holds the repository lock, `dvc repro` stops at once."""
    from dvc.repo import Repo

    _clone(tmp_path)
    repo = Repo(str(tmp_path))
    with repo.lock:  # exactly what a running `dvc repro` holds
        refused = _dvc(tmp_path, "repro", f"prepare@{SLUG}")
    repo.close()
    assert refused.returncode != 0
    assert "Unable to acquire lock" in refused.stdout + refused.stderr
    assert not (tmp_path / "data" / "frozenlake").exists() and not (tmp_path / "dvc.lock").exists()
    after = _dvc(tmp_path, "status", f"prepare@{SLUG}")  # the lock is gone with its holder
    assert after.returncode == 0, after.stderr
