"""A process SIGKILLed mid-training resumes; flows running at once lose nothing; DVC refuses a
second concurrent repro. Each flow here is a separate process, as a person would start it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from models import registry
from models.base import Scale
from tasks import steps, tracking
from tests import toy_lightning
from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOY = [sys.executable, "-m", "tests.toy_lightning"]


@pytest.fixture
def env(prefect_harness, project):
    """A user's environment for ``project``, logging to the test's Prefect server."""
    from prefect.settings import PREFECT_API_URL

    values = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    values.update(PAPERLINE_ROOT=str(project), PREFECT_API_URL=str(PREFECT_API_URL.value()), PYTHONPATH=str(ROOT))
    return values


def _versions(c, name: str) -> list[int]:
    from mlflow.exceptions import MlflowException

    try:
        return sorted(int(v.version) for v in c.search_model_versions(f"name='{name}'"))
    except MlflowException:
        return []


def _runs(c, slug: str):
    exp = c.get_experiment_by_name(f"paperline/{slug}")
    runs = c.search_runs([exp.experiment_id]) if exp else []
    return [r for r in runs if "mlflow.parentRunId" not in r.data.tags]


def _result(stdout: str) -> tuple[str, float]:
    line = next(line for line in stdout.splitlines() if line.startswith("RESULT "))
    _, version, mse = line.split()
    return version, float(mse)


def test_sigkill_mid_training_resumes_from_the_last_checkpoint(env, project, tmp_path_factory):
    log = project / "first.log"
    first = subprocess.Popen(
        TOY, cwd=ROOT, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True
    )
    checkpoints = project / "outputs" / "toy_lightning" / "checkpoints"
    deadline = time.monotonic() + 240
    while not list(checkpoints.glob("*/001-method/last.ckpt")):
        assert first.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.1)
    time.sleep(1.5)  # a couple more epochs: the kill lands in the middle of training
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    (ckpt,) = checkpoints.glob("*/001-method/last.ckpt")
    import torch

    killed_at = torch.load(ckpt, weights_only=False)["epoch"]  # our own file, just written
    assert 0 <= killed_at < 7, "the process was killed after training had finished"
    c = tracking.client(project)
    assert _versions(c, "paperline.toy_lightning") == []
    (dead,) = _runs(c, "toy_lightning")
    assert dead.info.status == "RUNNING"  # nobody could close it

    second = subprocess.run(TOY, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "resuming method from" in second.stdout + second.stderr
    version, resumed_mse = _result(second.stdout)
    assert version == "1" and _versions(c, "paperline.toy_lightning") == [1]  # no duplicate version
    assert not checkpoints.exists(), "checkpoints are dropped once the model is saved"
    history = json.loads((project / "outputs" / "toy_lightning" / "model" / "train.json").read_text())["history"]
    assert [r["epoch"] for r in history["method"]] == list(range(8)), "the resumed curve has every epoch once"

    statuses = {r.info.run_id: r.info.status for r in _runs(c, "toy_lightning")}
    assert statuses[dead.info.run_id] == "KILLED" and sorted(statuses.values()) == ["FINISHED", "KILLED"]
    assert "died" in c.get_run(dead.info.run_id).data.tags["paperline.failure"]

    # The same config run without interruption, in another workspace: the same model.
    ref_root = tmp_path_factory.mktemp("uninterrupted")
    spec, cfg = toy_lightning.SPEC, toy_lightning.Config.for_scale(Scale.default)
    steps.prepare(spec, cfg, ref_root)
    steps.train(spec, cfg, ref_root)
    metrics, _ = steps.evaluate(spec, cfg, ref_root)
    assert resumed_mse == pytest.approx(metrics["method/mse"], rel=1e-5)


def test_flows_at_once_lose_nothing(env, project):
    """The same method twice and another method, as three processes on one SQLite MLflow."""
    fast = dict(env, PAPERLINE_PROGRESS="0")
    procs = [
        subprocess.Popen(
            [*TOY, "epoch_seconds=0.1"], cwd=ROOT, env=fast, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ),
        subprocess.Popen(
            [*TOY, "epoch_seconds=0.1"], cwd=ROOT, env=fast, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ),
        subprocess.Popen(
            [sys.executable, "-m", "flows.cli", "run", "sleeping_rl", "--scale", "smoke"],
            cwd=ROOT,
            env=fast,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ),
    ]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    for proc, out in zip(procs, outputs):
        assert proc.returncode == 0, out[-4000:]
        assert "database is locked" not in out
    assert sorted(_result(out)[0] for out in outputs[:2]) == ["1", "2"]
    c = tracking.client(project)
    assert _versions(c, "paperline.toy_lightning") == [1, 2]
    assert sorted(r.info.status for r in _runs(c, "toy_lightning")) == ["FINISHED", "FINISHED"]
    assert [r.info.status for r in _runs(c, "sleeping_rl")] == ["FINISHED"]
    assert _versions(c, "paperline.sleeping_rl") == [1]
    # Both toy runs logged their full curves into their own nested runs.
    for run in _runs(c, "toy_lightning"):
        children = c.search_runs([run.info.experiment_id], f"tags.mlflow.parentRunId = '{run.info.run_id}'")
        assert len(children) == 2


def test_method_lock_serialises_runs_of_one_method(tmp_path):
    import threading

    order = []

    def hold(name: str, seconds: float) -> None:
        with steps.method_lock(toy_lightning.SPEC, tmp_path, wait_message=False):
            order.append(f"{name}+")
            time.sleep(seconds)
            order.append(f"{name}-")

    first = threading.Thread(target=hold, args=("a", 0.5))
    first.start()
    time.sleep(0.1)
    hold("b", 0.0)
    first.join()
    assert order == ["a+", "a-", "b+", "b-"]
    other = registry.METHODS["sleeping_rl"]
    with steps.method_lock(toy_lightning.SPEC, tmp_path), steps.method_lock(other, tmp_path):
        pass  # different methods never wait for each other


def test_processes_opening_a_fresh_mlflow_db_at_once_migrate_it_once(tmp_path):
    """Parallel workers (make run's two Dask processes) open a fresh SQLite store together: one migrates it,
    the others wait; without the lock alembic's temporary tables collide and the runs fail."""
    import subprocess
    import sys

    code = (
        "import sys; from pathlib import Path; from tasks import tracking; "
        "c = tracking.client(Path(sys.argv[1])); c.create_experiment(sys.argv[2]); print('ok')"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path), f"e{i}"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    from tasks import tracking

    names = {e.name for e in tracking.client(tmp_path).search_experiments()}
    assert {"e0", "e1", "e2"} <= names
