"""``paperline up`` / ``down``: the Prefect and MLflow servers on loopback, by recorded PID.

A record is trusted only while its PID is still the process ``up`` started (same command line and
start time): a PID reused by another program is never signalled. Prefect's server runs behind a
Host check (Prefect 3.9 has none; its CORS list and CSRF tokens come from :func:`env.prefect_server_env`),
so neither a foreign web page nor a DNS-rebound name can drive the loopback API.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tasks import env, prefect_db

LOOPBACK = "127.0.0.1"
PROBE_SECONDS = 3.0  # a loopback health check answers in milliseconds; longer means the server is stuck


def _record(root: Path) -> Path:
    return env.state_dir(root) / "servers.json"


def _records(root: Path) -> dict[str, dict]:
    path = _record(root)
    if not path.is_file():
        return {}
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError:
        return {}
    return record if isinstance(record, dict) else {}


def identity(pid: int) -> dict | None:
    """Command line and start of process ``pid``; None once it is gone (or a zombie). The start is the
    kernel's tick count since boot where /proc has it: a wall-clock time shifts when the clock is set."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        cmdline = proc.cmdline()
        try:
            started = "ticks:" + Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        except (OSError, IndexError):
            started = f"time:{proc.create_time():.1f}"
        return {"cmdline": cmdline, "started": started}
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def _identity_once_started(pid: int, cmd: list[str], timeout: float = 10.0) -> dict:
    """The identity of a process just started with ``cmd``: Popen returns while the kernel may still
    be setting up the new program, when its command line reads empty, so wait until it shows ``cmd``'s
    arguments (a console script's shows its interpreter first)."""
    deadline = time.monotonic() + timeout
    while True:
        now = identity(pid)
        shown = now["cmdline"] if now else []
        if now is None or (shown and shown[len(shown) - len(cmd) + 1 :] == cmd[1:]) or time.monotonic() > deadline:
            return now or {}
        time.sleep(0.05)


def _pid(info: object) -> int | None:
    try:
        return int(info["pid"])  # type: ignore[index]
    except (KeyError, TypeError, ValueError):
        return None


def is_ours(info: dict) -> bool:
    """Whether the record's PID is still the process that was started (not a reused PID)."""
    pid = _pid(info)
    now = identity(pid) if pid else None
    return now is not None and info.get("cmdline") == now["cmdline"] and info.get("started") == now["started"]


def _healthy(info: dict, timeout: float = PROBE_SECONDS) -> bool:
    try:
        with urllib.request.urlopen(info["url"] + info["health"], timeout=timeout) as resp:
            return resp.status == 200
    except (OSError, KeyError, ValueError):
        return False


def running(root: Path) -> dict[str, dict]:
    """Servers started by ``paperline up`` that are still those very processes, by name."""
    return {name: info for name, info in _records(root).items() if isinstance(info, dict) and is_ours(info)}


def check(root: Path) -> dict[str, str]:
    """Each recorded server's state, without waiting on it: ``up``, ``unresponsive`` (its health
    check did not answer within PROBE_SECONDS), ``stale`` (the PID is gone or another process)."""
    states = {}
    for name, info in _records(root).items():
        if not isinstance(info, dict) or not is_ours(info):
            states[name] = "stale"
        else:
            states[name] = "up" if _healthy(info) else "unresponsive"
    return states


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


def _uvicorn_prefect(host: str, port: int, *extra: str) -> list[str]:
    """Prefect's server as ``prefect server start`` runs it, but built by :func:`prefect_app`."""
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "--app-dir",
        str(Path(__file__).resolve().parents[1]),
        "--factory",
        "tasks.servers:prefect_app",
        "--host",
        host,
        "--port",
        str(port),
        "--lifespan",
        "on",
        *extra,
    ]


@contextlib.contextmanager
def _servers_lock(root: Path) -> Iterator[None]:
    """One ``up``/``down`` at a time per project: two ``up`` at once both found no server, both started one,
    and the one whose record was overwritten kept listening where ``down`` could not stop it."""
    from filelock import FileLock

    env.make_state_dirs(root)
    with FileLock(str(env.state_dir(root) / "servers.lock")):
        yield


def check_ports(prefect_port: int, mlflow_port: int) -> None:
    """Both ports in 1-65535 and different; a clear error naming the flag otherwise."""
    for name, port in (("--prefect-port", prefect_port), ("--mlflow-port", mlflow_port)):
        if not 1 <= port <= 65535:
            raise ValueError(f"{name} {port}: a TCP port is 1 to 65535")
    if prefect_port == mlflow_port:
        raise ValueError(f"--prefect-port and --mlflow-port are both {prefect_port}; the two servers need two ports")


def up(
    root: Path, host: str = LOOPBACK, prefect_port: int = 4200, mlflow_port: int = 5000, timeout: float = 300.0
) -> dict[str, dict]:
    """Start both servers (unless already up), wait for their health checks, record PIDs. A second ``up``
    while one is starting waits for it and then finds its servers running."""
    check_ports(prefect_port, mlflow_port)
    env.configure(root)
    with _servers_lock(root):
        return _up(root, host, prefect_port, mlflow_port, timeout)


def _up(root: Path, host: str, prefect_port: int, mlflow_port: int, timeout: float) -> dict[str, dict]:
    env.make_state_dirs(root)
    if host != LOOPBACK:
        print(
            f"warning: binding to {host}: the servers have no authentication and will be reachable from other machines",
            file=sys.stderr,
        )
    current = running(root)
    logs = env.state_dir(root) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (root / "mlflow" / "artifacts").mkdir(parents=True, exist_ok=True)
    bin_dir = Path(sys.executable).parent
    commands = {
        "prefect": (
            _uvicorn_prefect(
                host,
                prefect_port,
                "--timeout-keep-alive",
                "5",
                "--log-level",
                os.environ.get("PREFECT_SERVER_LOGGING_LEVEL", "warning").lower(),
            ),
            prefect_port,
            "/api/health",
            f"http://{host}:{prefect_port}",
        ),
        "mlflow": (
            [
                str(bin_dir / "mlflow"),
                "server",
                "--host",
                host,
                "--port",
                str(mlflow_port),
                "--workers",
                "1",
                "--backend-store-uri",
                f"sqlite:///{(root / 'mlflow' / 'mlflow.db').resolve()}",
                "--artifacts-destination",
                str((root / "mlflow" / "artifacts").resolve()),
            ],
            mlflow_port,
            "/health",
            f"http://{host}:{mlflow_port}",
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
            prefect_db.seed()
            # The UI's browser code calls this URL; its default is port 4200 whatever --port says.
            server_env.update(
                env.prefect_server_env(host, port), PREFECT_UI_API_URL=f"{url}/api", PREFECT__SERVER_FINAL="1"
            )
        proc = subprocess.Popen(
            cmd, cwd=root, stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True, env=server_env
        )
        procs[name] = (proc, url + health, log)
        started[name] = {
            "pid": proc.pid,
            "url": url,
            "health": health,
            "host": host,
            "port": port,
            "log": str(log),
            **_identity_once_started(proc.pid, cmd),
        }
        _record(root).write_text(json.dumps(started, indent=2))
    for proc, health_url, log in procs.values():
        try:
            _wait_healthy(health_url, proc, log, timeout)
        except Exception:
            _down(root)
            raise
    return started


def down(root: Path, timeout: float = 20.0) -> list[str]:
    """Stop exactly the process groups ``up`` started (SIGTERM, then SIGKILL); a record whose PID
    now belongs to another process is dropped without signalling anything."""
    with _servers_lock(root):
        return _down(root, timeout)


def _down(root: Path, timeout: float = 20.0) -> list[str]:
    path = _record(root)
    stopped = []
    for name, info in _records(root).items():
        pid = _pid(info)
        if not pid or not is_ours(info):
            if pid and identity(pid) is not None:
                print(
                    f"paperline: {name}: pid {pid} is not the server `paperline up` started (a reused PID, "
                    "or a record without its start time); left alone",
                    file=sys.stderr,
                )
            continue
        try:
            os.killpg(pid, signal.SIGTERM)  # the group we created with start_new_session
        except ProcessLookupError:
            continue
        deadline = time.monotonic() + timeout
        while _group_alive(pid) and time.monotonic() < deadline:  # the server's worker processes too
            _reap(pid)
            time.sleep(0.2)
        if _group_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        stopped.append(name)
    path.unlink(missing_ok=True)
    return stopped


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


PARENT_VAR = "PAPERLINE_SERVER_PARENT_PID"


def prefect_app():
    """uvicorn factory: Prefect's server app behind a Host check (Prefect itself checks no Host, so a
    DNS-rebound name reached the loopback API). Allowed names: ``PAPERLINE_PREFECT_ALLOWED_HOSTS``."""
    from prefect.server.api.server import create_app
    from starlette.middleware.trustedhost import TrustedHostMiddleware

    parent = os.environ.get(PARENT_VAR, "")
    if parent.isdigit():
        _stop_with_parent(int(parent))
    hosts = [h.strip() for h in os.environ.get(env.ALLOWED_HOSTS_VAR, "127.0.0.1,localhost").split(",") if h.strip()]
    return TrustedHostMiddleware(create_app(), allowed_hosts=hosts, www_redirect=False)


def _stop_with_parent(parent: int) -> None:
    """A temporary server runs in its own session (a Ctrl-C meant for the CLI must not kill it mid-run),
    so it ends itself once the process that started it is gone, even after a SIGKILL."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)  # uvicorn's graceful shutdown

    threading.Thread(target=watch, name="paperline-parent-watch", daemon=True).start()


def _free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


class TemporaryPrefect:
    """A temporary Prefect server for one CLI run, in its own session, with the Host check and hardened
    settings. It starts at once: Prefect's server imports itself and migrates its DB in its own process
    while the CLI imports torch and MLflow; ``wait_ready`` waits only when a flow is about to need it.
    (Prefect's own ``SubprocessASGIServer`` would cost the CLI an import of the whole server package.)"""

    def __init__(self, root: Path) -> None:
        self.port = _free_loopback_port()
        self.api_url = f"http://{LOOPBACK}:{self.port}/api"
        self.log = env.state_dir(root) / "prefect-temporary.log"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        server_env = {
            **os.environ,
            "PREFECT_UI_ENABLED": "0",
            "PREFECT__SERVER_EPHEMERAL": "1",
            "PREFECT__SERVER_FINAL": "1",
            **env.prefect_server_env(LOOPBACK, self.port),
            PARENT_VAR: str(os.getpid()),
        }
        self.db = prefect_db.project_db()
        self.migrates_new_db = self.db is not None and not prefect_db.seed() and not self.db.exists()
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                _uvicorn_prefect(LOOPBACK, self.port, "--log-level", "error"),
                env=server_env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_ready(self, timeout: float) -> None:
        _wait_healthy(self.api_url + "/health", self.proc, self.log, timeout)
        if self.migrates_new_db:
            prefect_db.save_template(self.db)
            self.migrates_new_db = False

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # uvicorn's graceful shutdown
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextlib.contextmanager
def shared_temporary_prefect(server: TemporaryPrefect | None = None, root: Path | None = None) -> Iterator[str]:
    """One temporary Prefect server for this process *and* the worker processes it starts.

    Without a server, Prefect starts a temporary one per process: each Dask worker then ran its own,
    and a worker's sub-flow lost its API half-way ("Connection refused"). The URL goes into the
    environment (inherited by the workers) and into this process's settings; the server stops on exit.
    It runs in its own session: a Ctrl-C reaches the CLI (which marks its runs and stops the server
    here) but not the server, which the interrupted flow still needs to record its final state.
    ``server`` is one already started (``TemporaryPrefect(root)``) so that its start-up overlapped other work."""
    server = server or TemporaryPrefect(root or env.project_root())
    previous = os.environ.get("PREFECT_API_URL")
    try:
        server.wait_ready(timeout=float(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")))
        from prefect.settings import PREFECT_API_URL, temporary_settings

        os.environ["PREFECT_API_URL"] = server.api_url
        with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
            yield server.api_url
    finally:
        try:
            if "prefect.logging.handlers" in sys.modules:
                from prefect.events.worker import EventsWorker
                from prefect.logging.handlers import APILogWorker

                # Queued run logs and events reach the server before it stops (nothing retries a dead API at exit).
                APILogWorker.drain_all(timeout=5)
                EventsWorker.drain_all(timeout=5)
        finally:
            if previous is None:
                os.environ.pop("PREFECT_API_URL", None)
            else:
                os.environ["PREFECT_API_URL"] = previous
            server.stop()


def use_running_servers(root: Path) -> dict[str, dict]:
    """Point this process at the servers ``paperline up`` started, so runs show in both UIs; a
    recorded server that is stale or does not answer is reported and not used."""
    current = running(root)
    usable = {}
    for name, info in current.items():
        if _healthy(info):
            usable[name] = info
        else:
            print(
                f"paperline: the {name} server at {info['url']} (pid {info['pid']}) does not answer; "
                "not using it (`paperline down` stops it)",
                file=sys.stderr,
            )
    if "prefect" in usable:
        os.environ.setdefault("PREFECT_API_URL", usable["prefect"]["url"] + "/api")
    if "mlflow" in usable:
        os.environ.setdefault("MLFLOW_TRACKING_URI", usable["mlflow"]["url"])
    return usable
