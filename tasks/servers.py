"""``paperline up`` / ``down``: the Prefect and MLflow servers on loopback, by recorded PID."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

from tasks import env

LOOPBACK = "127.0.0.1"


def _record(root: Path) -> Path:
    return env.state_dir(root) / "servers.json"


def running(root: Path) -> dict[str, dict]:
    """Servers started by ``paperline up`` that are still alive, by name."""
    path = _record(root)
    if not path.is_file():
        return {}
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError:
        return {}
    return {name: info for name, info in record.items() if env.pid_alive(int(info["pid"]))}


def port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode}; see {log}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f} s; see {log}")


def up(root: Path, host: str = LOOPBACK, prefect_port: int = 4200, mlflow_port: int = 5000,
       timeout: float = 300.0) -> dict[str, dict]:
    """Start both servers (unless already up), wait for their health checks, record PIDs."""
    env.configure(root)
    env.make_state_dirs(root)
    if host != LOOPBACK:
        print(f"warning: binding to {host}: the servers have no authentication and will be reachable "
              "from other machines", file=sys.stderr)
    current = running(root)
    logs = env.state_dir(root) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (root / "mlflow" / "artifacts").mkdir(parents=True, exist_ok=True)
    bin_dir = Path(sys.executable).parent
    commands = {
        "prefect": (
            [str(bin_dir / "prefect"), "server", "start", "--host", host, "--port", str(prefect_port)],
            prefect_port, "/api/health", f"http://{host}:{prefect_port}",
        ),
        "mlflow": (
            [str(bin_dir / "mlflow"), "server", "--host", host, "--port", str(mlflow_port), "--workers", "1",
             "--backend-store-uri", f"sqlite:///{(root / 'mlflow' / 'mlflow.db').resolve()}",
             "--artifacts-destination", str((root / "mlflow" / "artifacts").resolve())],
            mlflow_port, "/health", f"http://{host}:{mlflow_port}",
        ),
    }
    started: dict[str, dict] = dict(current)
    procs = {}
    for name, (cmd, port, health, url) in commands.items():
        if name in current:
            continue
        if not port_free(host, port):
            raise RuntimeError(f"port {port} on {host} is in use; pick another with --{name}-port")
        log = logs / f"{name}.log"
        server_env = os.environ.copy()
        if name == "prefect":
            # The UI's browser code calls this URL; its default is port 4200 whatever --port says.
            server_env["PREFECT_UI_API_URL"] = f"{url}/api"
        proc = subprocess.Popen(cmd, cwd=root, stdout=open(log, "ab"), stderr=subprocess.STDOUT,
                                start_new_session=True, env=server_env)
        procs[name] = (proc, url + health, log)
        started[name] = {"pid": proc.pid, "url": url, "host": host, "port": port, "log": str(log)}
        _record(root).write_text(json.dumps(started, indent=2))
    for name, (proc, health_url, log) in procs.items():
        try:
            _wait_healthy(health_url, proc, log, timeout)
        except Exception:
            down(root)
            raise
    return started


def down(root: Path, timeout: float = 20.0) -> list[str]:
    """Stop exactly the process groups ``up`` started (SIGTERM, then SIGKILL)."""
    path = _record(root)
    if not path.is_file():
        return []
    record = json.loads(path.read_text())
    stopped = []
    for name, info in record.items():
        pid = int(info["pid"])
        if not env.pid_alive(pid):
            continue
        try:
            os.killpg(pid, signal.SIGTERM)  # the group we created with start_new_session
        except ProcessLookupError:
            continue
        deadline = time.monotonic() + timeout
        while env.pid_alive(pid) and time.monotonic() < deadline:
            _reap(pid)
            time.sleep(0.2)
        if env.pid_alive(pid):
            os.killpg(pid, signal.SIGKILL)
        stopped.append(name)
    path.unlink(missing_ok=True)
    return stopped


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


@contextlib.contextmanager
def shared_temporary_prefect() -> Iterator[str]:
    """One temporary Prefect server for this process *and* the worker processes it starts.

    Without a server, Prefect starts a temporary one per process: each Dask worker then ran its own,
    and a worker's sub-flow lost its API half-way ("Connection refused"). The URL goes into the
    environment (inherited by the workers) and into this process's settings; the server stops on exit."""
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_API_URL, temporary_settings

    server = SubprocessASGIServer()
    server.start(timeout=int(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")))
    previous = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = server.api_url
    try:
        with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
            yield server.api_url
    finally:
        from prefect.logging.handlers import APILogWorker

        APILogWorker.drain_all(timeout=5)  # queued run logs reach the server before it stops
        if previous is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = previous
        server.stop()


def use_running_servers(root: Path) -> dict[str, dict]:
    """Point this process at the servers ``paperline up`` started, so runs show in both UIs."""
    current = running(root)
    if "prefect" in current:
        os.environ.setdefault("PREFECT_API_URL", current["prefect"]["url"] + "/api")
    if "mlflow" in current:
        os.environ.setdefault("MLFLOW_TRACKING_URI", current["mlflow"]["url"])
    return current
