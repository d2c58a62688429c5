"""``all_methods`` on a Dask LocalCluster with two worker processes (prefect-dask)."""

import os

import pytest

from models.base import Scale
from tasks import tracking

pytestmark = [pytest.mark.integration, pytest.mark.slow]

METHODS = ["sleeping_rl", "kernel_sgd"]  # the two fastest at smoke scale


def test_all_methods_on_two_dask_workers(prefect_harness, project):
    from prefect.artifacts import Artifact

    from flows.method_flows import all_methods

    results = all_methods(METHODS, Scale.smoke, runner="dask", dask_workers=2)
    assert [r["method"] for r in results] == METHODS
    assert all("error" not in r and r["version"] == "1" for r in results), results
    c = tracking.client(project)
    for slug, result in zip(METHODS, results):
        run = c.get_run(result["run_id"])
        assert run.info.status == "FINISHED" and run.data.tags["paperline.method"] == slug
        assert str(c.get_model_version_by_alias(f"paperline.{slug}", "champion").version) == "1"
    table = Artifact.get("claim-table")
    assert table is not None and all(f"| {slug} |" in table.data for slug in METHODS)
    assert (project / "outputs" / "report" / "index.html").is_file()


def test_parallel_and_sequential_runs_give_identical_results(
    prefect_harness, project, tmp_path, mlflow_template, monkeypatch
):
    """Two methods at a time on two worker processes give the same metrics and claims as one after another."""
    import json
    import shutil

    from flows.method_flows import all_methods

    def run(root, runner):
        (root / "mlflow").mkdir(parents=True, exist_ok=True)
        shutil.copy(mlflow_template, root / "mlflow" / "mlflow.db")
        monkeypatch.setenv("PAPERLINE_ROOT", str(root))
        results = all_methods(METHODS, Scale.smoke, runner=runner, dask_workers=2)
        assert all("error" not in r for r in results), results
        out = {}
        for slug in METHODS:
            metrics = json.loads((root / "outputs" / slug / "metrics.json").read_text())
            claim = json.loads((root / "outputs" / slug / "claim.json").read_text())
            out[slug] = ({k: v for k, v in metrics.items() if "seconds" not in k}, claim)
        return out

    parallel = run(project, "dask")
    sequential = run(tmp_path / "sequential", "sequential")
    assert parallel == sequential


def _worker_trim_threshold() -> str | None:
    from distributed import Client, LocalCluster

    try:
        with LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
        ) as c:
            with Client(c) as client:
                return next(iter(client.run(os.environ.get, "MALLOC_TRIM_THRESHOLD_").values()))
    finally:
        os.environ.pop("MALLOC_TRIM_THRESHOLD_", None)  # a nanny writes its worker settings into our environment


def test_local_workers_keep_glibc_malloc_defaults(monkeypatch):
    """Dask's own worker setting (a malloc trim threshold) made every large tensor an mmap + page faults."""
    from flows.method_flows import dask_worker_malloc_defaults

    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    with dask_worker_malloc_defaults():
        assert _worker_trim_threshold() is None
    assert _worker_trim_threshold() == "65536"  # what Dask does unasked
