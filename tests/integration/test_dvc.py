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
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\0")
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
    lock_file = tmp_path / "dvc.lock"  # a clone holds one once it is committed
    lock_before = lock_file.read_bytes() if lock_file.exists() else None
    repo = Repo(str(tmp_path))
    with repo.lock:  # exactly what a running `dvc repro` holds
        refused = _dvc(tmp_path, "repro", f"prepare@{SLUG}")
    repo.close()
    assert refused.returncode != 0
    assert "Unable to acquire lock" in refused.stdout + refused.stderr
    assert not (tmp_path / "data" / "frozenlake").exists()
    assert (lock_file.read_bytes() if lock_file.exists() else None) == lock_before
    after = _dvc(tmp_path, "status", f"prepare@{SLUG}")  # the lock is gone with its holder
    assert after.returncode == 0, after.stderr


def _tree(root: Path, *folders: str) -> dict[str, bytes]:
    """Every file under ``folders`` with its bytes."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for folder in folders
        for p in sorted((root / folder).rglob("*"))
        if p.is_file()
    }


def test_a_bad_params_yaml_costs_no_outputs(tmp_path):
    """DVC removes a stage's outs before running its command unless they are `persist`: a params.yaml
    that `paperline stage` refuses must leave the data and the model (not in any cache) byte-identical."""
    from models.registry import get

    _clone(tmp_path)
    good = yaml.safe_load((tmp_path / "params.yaml").read_text())
    good[SLUG] = get(SLUG).make_config("smoke").model_dump(mode="json")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(good, sort_keys=False))
    first = _dvc(tmp_path, "repro", f"evaluate@{SLUG}")
    assert first.returncode == 0, first.stdout + first.stderr
    before = _tree(tmp_path, "data", "outputs")
    assert any(p.startswith(f"outputs/{SLUG}/model/") for p in before)
    assert any(p.startswith(f"data/{get(SLUG).dataset}/") for p in before)

    breaks = [
        ("episodes: many", "episodes='many'", f"train@{SLUG}", lambda s: s.update(episodes="many")),
        ("unknown key", "unknown key 'bogus'", f"train@{SLUG}", lambda s: s.update(bogus=1)),
        # A key in `data` changes the prepare stage's params too: DVC would remove data/<dataset> first.
        ("unknown data key", "unknown key 'data.bogus'", f"prepare@{SLUG}", lambda s: s["data"].update(bogus=1)),
    ]
    for what, named, stage, breaking in breaks:
        bad = yaml.safe_load(yaml.safe_dump(good))
        breaking(bad[SLUG])
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(bad, sort_keys=False))
        refused = _dvc(tmp_path, "repro", f"evaluate@{SLUG}")
        out = refused.stdout + refused.stderr
        assert refused.returncode != 0, (what, out)
        assert f"Running stage '{stage}'" in refused.stdout and named in out, (what, out)
        assert _tree(tmp_path, "data", "outputs") == before, f"{what}: dvc repro changed data/ or outputs/"

    # Back to the good params: nothing to do, and DVC's own view agrees with the files.
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(good, sort_keys=False))
    status = _dvc(tmp_path, "status", f"evaluate@{SLUG}")
    assert "up to date" in status.stdout.lower(), status.stdout
    again = _dvc(tmp_path, "repro", f"evaluate@{SLUG}")
    assert again.returncode == 0 and "Running stage" not in again.stdout, again.stdout + again.stderr
    # A persistent out is still restored from the cache like any other.
    shutil.rmtree(tmp_path / "outputs" / SLUG / "model")
    restored = _dvc(tmp_path, "checkout", f"train@{SLUG}")
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert _tree(tmp_path, "data", "outputs") == before
