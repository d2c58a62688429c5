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
    proc = subprocess.run([sys.executable, "-m", "tasks.cli", "up", "--host", "0.0.0.0"], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "--allow-remote" in proc.stderr
    assert not (tmp_path / ".paperline").exists()
