"""The UIs as a person sees them, and nightly champion/challenger end to end.

``paperline up`` (Prefect + MLflow on free loopback ports) and ``paperline serve`` run as
subprocesses over a temporary project. Runs are triggered through Prefect's REST API exactly as
the UI's "Run" button does (``POST /deployments/{id}/create_flow_run``); headless Chromium
(Debian's package, driven by Playwright) then checks the pages. Screenshots: ``outputs/ui/``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest

from tests.conftest import ROOT

# One xdist worker for the module (its group), and session fixtures: the servers and runs (~60 s) are built
# once whatever order the worker runs its tests in.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.browser, pytest.mark.xdist_group("browser")]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SHOTS = ROOT / "outputs" / "ui"
CRIPPLED = "episodes=10"  # sleeping_rl learns nothing in 10 episodes: its primary metric drops to 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _project_env(root) -> dict[str, str]:
    """The environment of a user working in ``root``: no state borrowed from the test process."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PREFECT_", "MLFLOW_", "PYTEST_"))
        and k not in ("PAPERLINE_ROOT", "DVC_SITE_CACHE_DIR", "MPLCONFIGDIR", "TORCHINDUCTOR_CACHE_DIR")
    }
    env.update(PAPERLINE_ROOT=str(root), PAPERLINE_PROGRESS="0", PYTHONPATH=str(ROOT))
    return env


def _cli(env, *args, timeout=600) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


class Api:
    def __init__(self, url: str) -> None:
        self.url = url
        self.csrf_client = str(uuid.uuid4())
        self.csrf_token: str | None = None

    def __call__(self, method: str, path: str, body=None):
        data = json.dumps(body).encode() if body is not None else None
        headers = {"content-type": "application/json"}
        if method != "GET":
            # The server wants a CSRF token for state changes; the UI and Prefect's client fetch one the same way.
            if self.csrf_token is None:
                self.csrf_token = self("GET", f"/csrf-token?client={self.csrf_client}")["token"]
            headers.update({"Prefect-Csrf-Token": self.csrf_token, "Prefect-Csrf-Client": self.csrf_client})
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read() or b"null")

    def deployments(self) -> dict[str, dict]:
        return {d["name"]: d for d in self("POST", "/deployments/filter", {})}

    def run_deployment(self, name: str, parameters: dict, timeout: float = 400) -> dict:
        """What the UI's Run button does, then wait for a final state."""
        flow_run = self(
            "POST", f"/deployments/{self.deployments()[name]['id']}/create_flow_run", {"parameters": parameters}
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = self("GET", f"/flow_runs/{flow_run['id']}")
            if run["state_type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
                return run
            time.sleep(2)
        raise TimeoutError(f"flow run of {name} not finished in {timeout} s")

    def artifact(self, key: str, flow_run_id: str) -> str:
        found = self(
            "POST", "/artifacts/filter", {"artifacts": {"key": {"any_": [key]}, "flow_run_id": {"any_": [flow_run_id]}}}
        )
        assert found, f"no artifact {key!r} on flow run {flow_run_id}"
        return found[0]["data"]


@pytest.fixture(scope="session")
def live(tmp_path_factory):
    if CHROMIUM is None:
        # A missing browser is a broken install, not a pass: `make test` installs Debian's chromium.
        if os.environ.get("PAPERLINE_ALLOW_NO_BROWSER") != "1":
            pytest.fail(
                "Debian's chromium is not installed: run `make browser` (apt-get install chromium), "
                "or set PAPERLINE_ALLOW_NO_BROWSER=1 to skip the UI checks knowingly"
            )
        pytest.skip("PAPERLINE_ALLOW_NO_BROWSER=1 and no chromium")
    root = tmp_path_factory.mktemp("live")
    env = _project_env(root)
    prefect_port, mlflow_port = _free_port(), _free_port()
    serve = None
    try:
        _cli(env, "up", "--prefect-port", str(prefect_port), "--mlflow-port", str(mlflow_port))
        record = json.loads((root / ".paperline" / "servers.json").read_text())
        serve_env = dict(env, PREFECT_API_URL=f"http://127.0.0.1:{prefect_port}/api")
        serve = subprocess.Popen(
            [sys.executable, "-m", "flows.cli", "serve"],
            cwd=ROOT,
            env=serve_env,
            stdout=open(root / "serve.log", "wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        api = Api(f"http://127.0.0.1:{prefect_port}/api")
        deadline = time.monotonic() + 180
        while len(api.deployments()) < 3:
            assert serve.poll() is None, (root / "serve.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "deployments never appeared"
            time.sleep(1)
        yield dict(
            root=root,
            env=env,
            api=api,
            prefect=f"http://127.0.0.1:{prefect_port}",
            mlflow=f"http://127.0.0.1:{mlflow_port}",
            record=record,
        )
    finally:
        if serve is not None:
            os.killpg(serve.pid, signal.SIGTERM)
            try:
                serve.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(serve.pid, signal.SIGKILL)
        _cli(env, "down")
    for item in record.values():  # exactly the PIDs `up` started are gone
        with pytest.raises(ProcessLookupError):
            os.killpg(int(item["pid"]), 0)


@pytest.fixture(scope="session")
def nightly(live):
    """A crippled first version, a nightly that beats it, and a crippled nightly that must not."""
    api = live["api"]
    first = api.run_deployment("method", {"method": "sleeping_rl", "scale": "smoke", "overrides": [CRIPPLED]})
    better = api.run_deployment("nightly", {"methods": ["sleeping_rl", "kernel_sgd"], "scale": "smoke"})
    worse = api.run_deployment(
        "nightly",
        {"methods": ["sleeping_rl", "kernel_sgd"], "scale": "smoke", "overrides": [f"sleeping_rl:{CRIPPLED}"]},
    )
    assert [r["state_type"] for r in (first, better, worse)] == ["COMPLETED"] * 3
    return dict(first=first, better=better, worse=worse)


def _alias(c, name: str, alias: str) -> str:
    return str(c.get_model_version_by_alias(name, alias).version)


def test_nightly_moves_champion_only_when_earned(live, nightly):
    from mlflow.tracking import MlflowClient

    c = MlflowClient(tracking_uri=live["mlflow"], registry_uri=live["mlflow"])
    # sleeping_rl: v1 crippled (first: champion), v2 better (promoted), v3 crippled again (kept).
    assert _alias(c, "paperline.sleeping_rl", "champion") == "2"
    assert _alias(c, "paperline.sleeping_rl", "challenger") == "3"
    # kernel_sgd: v1 first (champion); v2 is the same config, so it does not *beat* v1.
    assert _alias(c, "paperline.kernel_sgd", "champion") == "1"
    assert _alias(c, "paperline.kernel_sgd", "challenger") == "2"
    v3 = c.get_model_version("paperline.sleeping_rl", "3")
    assert v3.tags["paperline.decision"] == "kept" and "does not beat champion v2" in v3.tags["paperline.reason"]

    api = live["api"]
    promoted = api.artifact("nightly-decisions", nightly["better"]["id"])
    # the smoke reward itself moves whenever sleeping_rl's smoke config does; the decision must name it
    from tasks import tracking

    metrics = c.get_run(c.get_model_version("paperline.sleeping_rl", "2").run_id).data.metrics
    reward = metrics[tracking.metric_name("eval/method/last10_reward_main")]
    shown = re.search(r"promoted: method/last10_reward_main (-?[0-9.]+) beats champion v1", promoted)
    assert shown, promoted
    assert float(shown.group(1)) == pytest.approx(reward, rel=1e-3)
    kept = api.artifact("nightly-decisions", nightly["worse"]["id"])
    assert "| sleeping_rl |" in kept and "does not beat champion v2" in kept
    assert "| kernel_sgd |" in kept and "does not beat champion v1" in kept


def test_ui_pages_in_chromium(live, nightly):
    from playwright.sync_api import expect, sync_playwright

    _cli(live["env"], "report")
    report = live["root"] / "outputs" / "report" / "index.html"
    SHOTS.mkdir(parents=True, exist_ok=True)
    api = live["api"]
    nightly_id = api.deployments()["nightly"]["id"]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(60_000)

        def visit(url: str, *texts: str, shot: str) -> None:
            page.goto(url)
            for text in texts:
                expect(page.get_by_text(text, exact=False).first).to_be_visible()
            page.screenshot(path=str(SHOTS / f"{shot}.png"), full_page=True)

        visit(
            f"{live['prefect']}/deployments",
            "method",
            "all-methods",
            "nightly-retrain",
            shot="prefect-deployments",
        )
        visit(
            f"{live['prefect']}/deployments/deployment/{nightly_id}",
            "Scheduled for",
            "02:00:00 AM",
            shot="prefect-nightly-schedule",
        )

        visit(
            f"{live['prefect']}/runs/flow-run/{nightly['worse']['id']}",
            "Completed",
            "nightly-retrain",
            shot="prefect-nightly-run",
        )
        page.get_by_text("Artifacts", exact=True).first.click()
        page.get_by_text("nightly-decisions", exact=True).first.click()
        expect(page.get_by_text("does not beat champion v2").first).to_be_visible()
        page.screenshot(path=str(SHOTS / "prefect-claim-table.png"), full_page=True)

        from mlflow.tracking import MlflowClient

        c = MlflowClient(tracking_uri=live["mlflow"])
        exp = c.get_experiment_by_name("paperline/sleeping_rl")
        champion_run = c.get_model_version("paperline.sleeping_rl", "2").run_id
        visit(
            f"{live['mlflow']}/#/experiments/{exp.experiment_id}/runs",
            "sleeping_rl-smoke",
            "paperline.sleeping_rl v2",
            shot="mlflow-experiment",
        )
        visit(
            f"{live['mlflow']}/#/experiments/{exp.experiment_id}/runs/{champion_run}",
            "eval/method/last10_reward_main",
            "claim/verdict",
            shot="mlflow-run",
        )
        visit(
            f"{live['mlflow']}/#/models/paperline.sleeping_rl",
            "Version 3",
            "does not beat champion v2",
            shot="mlflow-registered-model",
        )
        expect(page.get_by_text("champion").first).to_be_visible()

        visit(report.as_uri(), "paperline report", "sleeping_rl", "kernel_sgd", shot="report")
        widths = page.eval_on_selector_all("#sleeping_rl img", "imgs => imgs.map(i => i.naturalWidth)")
        assert widths and all(w > 0 for w in widths), "report figures did not load"
        # The method's section renders its verdict badge and its criteria table, one row per criterion, each
        # with an estimate and a state badge, laid out on the page (not just present in the HTML).
        section = page.locator("#sleeping_rl")
        expect(section.locator("h2 .badge")).to_be_visible()
        table = section.locator("table.criteria")
        expect(table).to_be_visible()
        box = table.bounding_box()
        assert box and box["width"] > 300 and box["height"] > 40, box
        cells = table.locator("tbody tr").first.locator("td")
        assert cells.count() == 7 and cells.nth(2).inner_text().strip()[0] in "-0123456789"
        states = table.locator("tbody .badge").all_inner_texts()
        assert states and set(states) <= {"holds", "fails", "inconclusive"}, states
        image = section.locator("figure img").first
        expect(image).to_be_visible()
        assert image.bounding_box()["width"] > 100
        section.screenshot(path=str(SHOTS / "report-sleeping_rl.png"))
        browser.close()
