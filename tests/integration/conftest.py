"""Integration fixtures: one Prefect server per session, a migrated MLflow DB template."""

import shutil

import pytest


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory):
    """The temporary Prefect server `paperline run` starts, on its own DB (one per xdist worker).

    Its DB starts from the migrated template (`tasks/prefect_db.py`): Prefect's own test harness
    migrated a new DB in every worker (12-19 s each)."""
    from tasks import servers

    root = tmp_path_factory.mktemp("prefect-server")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PREFECT_HOME", str(root / ".paperline" / "prefect"))  # the server's DB, not the checkout's
        server = servers.TemporaryPrefect(root)
    with servers.shared_temporary_prefect(server):
        yield


@pytest.fixture(scope="session")
def mlflow_template(tmp_path_factory):
    """A migrated, WAL-mode MLflow DB (migrations cost seconds; copying costs nothing)."""
    from tasks import tracking

    root = tmp_path_factory.mktemp("mlflow-template")
    tracking.client(root)
    return root / "mlflow" / "mlflow.db"


@pytest.fixture
def project(tmp_path, monkeypatch, mlflow_template):
    """An empty project root for flows: its own data/, outputs/ and MLflow DB."""
    (tmp_path / "mlflow").mkdir()
    shutil.copy(mlflow_template, tmp_path / "mlflow" / "mlflow.db")
    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path
