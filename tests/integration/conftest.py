"""Integration fixtures: one Prefect test server per session, a migrated MLflow DB template."""

import shutil

import pytest


@pytest.fixture(scope="session")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=600):
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
