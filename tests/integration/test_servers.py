"""`paperline up` / `down`: loopback only, recorded PIDs, exactly those stopped."""

import json
import os
import socket
import subprocess
import sys
import urllib.request

import pytest

from tasks import servers
from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(autouse=True)
def own_state(tmp_path, monkeypatch):
    """The servers keep their state in the test's project, not the checkout's ``.paperline/``."""
    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    for key, folder in {"PREFECT_HOME": "prefect", "DVC_SITE_CACHE_DIR": "dvc-site", "MPLCONFIGDIR": "mpl"}.items():
        monkeypatch.setenv(key, str(tmp_path / ".paperline" / folder))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> list[str]:
    """Local addresses listening on ``port`` (from /proc/net/tcp*)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in open(table).read().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, hexport = local.rsplit(":", 1)
            if state == "0A" and int(hexport, 16) == port:
                found.append(addr)
    return found


def test_up_binds_loopback_and_down_stops_exactly_those(tmp_path):
    pp, mp = _free_port(), _free_port()
    try:
        info = servers.up(tmp_path, prefect_port=pp, mlflow_port=mp)
        assert set(info) == {"prefect", "mlflow"}
        record = json.loads((tmp_path / ".paperline" / "servers.json").read_text())
        assert {record[n]["pid"] for n in record} == {info[n]["pid"] for n in info}
        with urllib.request.urlopen(f"http://127.0.0.1:{pp}/api/health", timeout=5) as r:
            assert r.status == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{mp}/health", timeout=5) as r:
            assert r.status == 200
        for port in (pp, mp):
            addrs = _listening(port)
            assert addrs and all(a == "0100007F" for a in addrs), f"port {port} listens on {addrs}"
        assert servers.running(tmp_path).keys() == {"prefect", "mlflow"}
    finally:
        stopped = servers.down(tmp_path)
    assert sorted(stopped) == ["mlflow", "prefect"]
    for item in info.values():
        with pytest.raises(ProcessLookupError):
            os.killpg(item["pid"], 0)
    assert not (tmp_path / ".paperline" / "servers.json").exists()


def test_remote_bind_needs_explicit_flag(tmp_path):
    env = dict(os.environ, PAPERLINE_ROOT=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cli", "up", "--host", "0.0.0.0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "--allow-remote" in proc.stderr
    assert not (tmp_path / ".paperline").exists()


def _status(url: str, method: str = "GET", headers: dict | None = None, body: bytes | None = None):
    """(status code, response headers) of one request; HTTP errors are answers too."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}


def test_servers_refuse_foreign_origins_and_hosts(tmp_path):
    """A web page from another origin, or a DNS-rebound name, cannot drive the loopback APIs; Prefect's
    own client (and so the UI's Run button) still can."""
    pp, mp = _free_port(), _free_port()
    prefect, mlflow = f"http://127.0.0.1:{pp}", f"http://127.0.0.1:{mp}"
    evil = {"Origin": "http://evil.example"}
    json_type = {"content-type": "application/json"}
    try:
        servers.up(tmp_path, prefect_port=pp, mlflow_port=mp)
        # Host check (DNS rebinding: the browser sends the attacker's name).
        assert _status(f"{prefect}/api/health", headers={"Host": f"evil.example:{pp}"})[0] == 400
        assert (
            _status(
                f"{mlflow}/api/2.0/mlflow/experiments/search",
                "POST",
                {"Host": f"evil.example:{mp}", **json_type},
                b"{}",
            )[0]
            == 403
        )
        # CORS: a foreign origin gets no preflight and may not read answers (a CSRF token included).
        code, headers = _status(
            f"{prefect}/api/deployments/filter",
            "OPTIONS",
            {
                **evil,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type,prefect-csrf-token,prefect-csrf-client",
            },
        )
        assert code == 400 and "access-control-allow-origin" not in headers
        code, headers = _status(f"{prefect}/api/csrf-token?client=x", headers=evil)
        assert "access-control-allow-origin" not in headers
        # CSRF: a state change without a token (a form post needs no preflight) is refused.
        code, _ = _status(
            f"{prefect}/api/flows/", "POST", {**evil, "content-type": "text/plain"}, b'{"name": "planted"}'
        )
        assert code == 403
        assert (
            _status(
                f"{mlflow}/api/2.0/mlflow/experiments/create", "POST", {**evil, **json_type}, b'{"name": "planted"}'
            )[0]
            == 403
        )
        # The UI's own origin and names still work.
        code, headers = _status(f"{prefect}/api/csrf-token?client=x", headers={"Origin": prefect})
        assert code == 200 and headers["access-control-allow-origin"] == prefect
        assert _status(f"http://localhost:{pp}/api/health")[0] == 200
        code, _ = _status(f"{prefect}/deployments", headers={"Accept": "text/html", "Sec-Fetch-Mode": "navigate"})
        assert code == 200
        # Prefect's client fetches a CSRF token by itself: flows (and deployment runs) are created as before.
        from prefect.client.orchestration import get_client
        from prefect.settings import PREFECT_API_URL, temporary_settings

        with temporary_settings(updates={PREFECT_API_URL: f"{prefect}/api"}), get_client(sync_client=True) as client:
            flow_id = client.create_flow_from_name("made-by-prefect-client")
            assert client.read_flow(flow_id).name == "made-by-prefect-client"
            assert [f.name for f in client.read_flows()] == ["made-by-prefect-client"]  # nothing planted
    finally:
        servers.down(tmp_path)


def test_two_ups_at_once_leave_one_pair_of_servers_that_down_stops(tmp_path):
    """Two `paperline up` started together once both reported success and left an MLflow server listening
    that `paperline down` could not stop; now the second waits for the first and finds its servers."""
    pp, mp = _free_port(), _free_port()
    env = dict(os.environ, PAPERLINE_ROOT=str(tmp_path))
    cmd = [sys.executable, "-m", "flows.cli", "up", "--prefect-port", str(pp), "--mlflow-port", str(mp)]
    first, second = (subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True) for _ in range(2))
    try:
        outs = [p.communicate(timeout=300)[0] for p in (first, second)]
        assert first.returncode == second.returncode == 0, outs
        pids = [{line.split("pid ")[1].split(",")[0] for line in out.splitlines() if "(pid " in line} for out in outs]
        assert pids[0] == pids[1] and len(pids[0]) == 2  # the same two servers, reported twice
    finally:
        down = subprocess.run([sys.executable, "-m", "flows.cli", "down"], cwd=ROOT, env=env, capture_output=True)
    assert down.returncode == 0
    for port in (pp, mp):
        assert _listening(port) == [], f"a server still listens on {port}"


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--prefect-port", "70000"], "--prefect-port 70000: a TCP port is 1 to 65535"),
        (["--mlflow-port", "0"], "--mlflow-port 0: a TCP port is 1 to 65535"),
        (["--prefect-port", "5055", "--mlflow-port", "5055"], "both 5055; the two servers need two ports"),
    ],
)
def test_bad_ports_are_refused_in_one_line(tmp_path, flags, message):
    env = dict(os.environ, PAPERLINE_ROOT=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cli", "up", *flags], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
