"""``all_methods`` on a Dask LocalCluster with two worker processes (prefect-dask)."""

import pytest

from models.base import Scale
from tasks import tracking

pytestmark = [pytest.mark.integration, pytest.mark.slow]

METHODS = ["sleeping_rl", "kernel_sgd"]  # the two fastest at smoke scale


def test_all_methods_on_two_dask_workers(prefect_harness, project):
    from prefect.artifacts import Artifact

    from flows.pipelines import all_methods

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

    from flows.pipelines import all_methods

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
