"""`.paperline/servers.json` is not trusted blindly: a reused PID is never signalled, a dead or stuck
server is reported by `paperline status`, not waited on."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import psutil
import pytest

from tasks import servers
from tests.conftest import ROOT


@pytest.fixture
def bystander():
    """An unrelated live process leading its own process group (what a reused PID points at)."""
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def silent_port():
    """A port that accepts connections and never answers (a stopped or wedged server)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield s.getsockname()[1]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write(root, record: dict) -> None:
    (root / ".paperline").mkdir(parents=True, exist_ok=True)
    (root / ".paperline" / "servers.json").write_text(json.dumps(record))


def _entry(pid: int, port: int, health: str, **identity) -> dict:
    return {
        "pid": pid,
        "url": f"http://127.0.0.1:{port}",
        "health": health,
        "host": "127.0.0.1",
        "port": port,
        **identity,
    }


def _cli(root, *args, timeout=120):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "MLFLOW_"))}
    env.update(PAPERLINE_ROOT=str(root), PREFECT_HOME=str(root / ".paperline" / "prefect"))
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_a_reused_pid_is_not_signalled_by_down(tmp_path, bystander):
    me = servers.identity(bystander.pid)
    _write(
        tmp_path,
        {
            # the PID now runs another program (the old record's command line)
            "prefect": _entry(
                bystander.pid,
                _closed_port(),
                "/api/health",
                cmdline=["prefect", "server", "start"],
                started=me["started"],
            ),
            # the same program, started at another time than the recorded one (a PID reused by a look-alike)
            "mlflow": _entry(bystander.pid, _closed_port(), "/health", cmdline=me["cmdline"], started="ticks:1"),
        },
    )
    assert servers.running(tmp_path) == {}
    proc = _cli(tmp_path, "down")
    assert proc.returncode == 0 and "nothing was running" in proc.stdout, proc.stderr
    assert f"pid {bystander.pid} is not the server `paperline up` started" in proc.stderr
    time.sleep(0.5)
    assert bystander.poll() is None and psutil.Process(bystander.pid).status() != psutil.STATUS_ZOMBIE
    assert not (tmp_path / ".paperline" / "servers.json").exists()


def test_a_record_from_before_identities_is_left_alone(tmp_path, bystander):
    _write(tmp_path, {"prefect": {"pid": bystander.pid, "url": "http://127.0.0.1:4200"}})
    assert servers.running(tmp_path) == {} and servers.check(tmp_path) == {"prefect": "stale"}
    assert servers.down(tmp_path) == []
    time.sleep(0.5)
    assert bystander.poll() is None


def test_down_stops_a_recorded_process_that_is_still_ours(tmp_path, bystander):
    _write(
        tmp_path, {"prefect": _entry(bystander.pid, _closed_port(), "/api/health", **servers.identity(bystander.pid))}
    )
    assert set(servers.running(tmp_path)) == {"prefect"}
    assert servers.down(tmp_path) == ["prefect"]
    assert bystander.wait(timeout=10) is not None


def test_status_reports_stale_and_stuck_servers_without_waiting(tmp_path, bystander, silent_port):
    _write(
        tmp_path,
        {
            "prefect": _entry(bystander.pid, _closed_port(), "/api/health", cmdline=["not", "it"], started="ticks:1"),
            "mlflow": _entry(bystander.pid, silent_port, "/health", **servers.identity(bystander.pid)),
        },
    )
    assert servers.check(tmp_path) == {"prefect": "stale", "mlflow": "unresponsive"}
    started = time.monotonic()
    proc = _cli(tmp_path, "status", timeout=100)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "prefect server in .paperline/servers.json is stale" in proc.stderr
    assert "mlflow server in .paperline/servers.json is unresponsive" in proc.stderr
    assert "sleeping_rl" in proc.stdout and f"sqlite:///{tmp_path.resolve()}" in proc.stdout
    assert took < 60, f"status took {took:.0f} s"
    assert bystander.poll() is None
