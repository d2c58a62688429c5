"""Ctrl-C and SIGTERM during `paperline run`: prompt exit, run marked failed, nothing left behind.

The CLI runs as a user starts it (its own process group, a fresh project, no server up), so the
temporary Prefect server it starts is a real child; a Ctrl-C is SIGINT to the whole foreground group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXIT_WITHIN = 45  # seconds from the signal to the CLI's exit (it hung ~150 s on the dead server before)


def _user_env(root) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PREFECT_", "MLFLOW_", "PYTEST_"))
        and k not in ("PAPERLINE_ROOT", "DVC_SITE_CACHE_DIR", "MPLCONFIGDIR", "TORCHINDUCTOR_CACHE_DIR")
    }
    env.update(PAPERLINE_ROOT=str(root), PAPERLINE_PROGRESS="0", PYTHONPATH=str(ROOT))
    return env


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _start_training(project, command=("sleeping_rl", "--scale", "smoke", "--set", "episodes=400000"), wait=2.0):
    """`paperline run` as a user starts it, returned once it is training (with its output so far)."""
    slug = command[0]
    proc = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", "run", *command],
        cwd=ROOT,
        env=_user_env(project),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    training = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if f"{slug}: train ..." in line:
                training.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert training.wait(300), "training never started:\n" + "".join(lines)[-3000:]
        time.sleep(wait)
        children = _descendants(proc.pid)
        assert any("uvicorn" in c.cmdline() for c in children), "no temporary Prefect server"
        assert (project / "outputs" / slug / "model.partial").is_dir()
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return proc, lines, children


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_interrupted_run_ends_promptly_and_cleanly(project, how):
    from mlflow.tracking import MlflowClient

    from tasks import tracking

    proc, lines, children = _start_training(project)
    try:
        sent = time.monotonic()
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)  # what the terminal does: the whole foreground group
        else:
            proc.send_signal(signal.SIGTERM)  # what `kill PID` or a process manager does
        code = proc.wait(timeout=EXIT_WITHIN + 60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    time.sleep(0.5)  # the reader thread takes the last lines
    output = "".join(lines)
    assert took < EXIT_WITHIN, f"exit took {took:.0f} s:\n{output[-3000:]}"
    assert code == (130 if how == "ctrl-c" else 128 + signal.SIGTERM), output[-3000:]
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"left running: {[p.cmdline() for p in alive]}"

    c = MlflowClient(tracking_uri=tracking.local_uri(project))
    runs = c.search_runs([c.get_experiment_by_name("paperline/sleeping_rl").experiment_id])
    assert [r.info.status for r in runs] == ["FAILED"], output[-3000:]
    reason = runs[0].data.tags["paperline.failure"]
    expected = "StopRequested: interrupted by the user" if how == "ctrl-c" else "StopRequested: terminated"
    assert reason.startswith(expected), reason
    assert ("paperline: interrupted" if how == "ctrl-c" else "paperline: terminated") in output
    assert not list(project.rglob("*.partial")), list(project.rglob("*.partial"))


def test_a_killed_run_leaves_no_temporary_server(project):
    """The temporary server runs in its own session (Ctrl-C must not reach it), so it watches its parent:
    a SIGKILLed CLI cannot stop it, and it stops itself."""
    proc, _, children = _start_training(project)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    gone, alive = psutil.wait_procs(children, timeout=30)
    assert not alive, f"left running: {[p.cmdline() for p in alive]}"


@pytest.mark.parametrize("after", [0.5, 4.0])
def test_a_sigterm_during_lightning_training_is_never_lost(project, after):
    """One of two SIGTERMs during bnn_linf's train step was lost: the run finished (rc 0) and registered v1 as
    champion. Lightning and Prefect swap the handlers around every fit; the supervisor's stop now lands
    whenever it comes: exit 143, the run FAILED, no version registered."""
    from mlflow.tracking import MlflowClient

    from tasks import tracking

    # 40 epochs and patience 40: the smoke fit (3 epochs) ends before a signal sent 4 s in.
    command = ("bnn_linf", "--scale", "smoke", "--set", "max_epochs=40", "--set", "patience=40")
    proc, lines, children = _start_training(project, command, wait=after)
    try:
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=EXIT_WITHIN + 60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    time.sleep(0.5)
    output = "".join(lines)
    assert code == 143 and took < EXIT_WITHIN, f"rc {code} after {took:.0f} s:\n{output[-3000:]}"
    c = MlflowClient(tracking_uri=tracking.local_uri(project))
    runs = c.search_runs(
        [c.get_experiment_by_name("paperline/bnn_linf").experiment_id], "tags.`paperline.scale` LIKE '%'"
    )
    assert [r.info.status for r in runs] == ["FAILED"], output[-3000:]
    assert c.search_model_versions("name='paperline.bnn_linf'") == []
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"left running: {[p.cmdline() for p in alive]}"
