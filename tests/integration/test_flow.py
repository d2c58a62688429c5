"""A Prefect flow end to end: MLflow run, nested variant runs, registered versions, aliases."""

from pathlib import Path

import numpy as np
import pytest

from models.base import Scale, read_dataset
from models.registry import get
from tasks import tracking

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SLUG = "sleeping_rl"  # the fastest method at smoke scale


def test_method_flow_tracks_registers_and_promotes(prefect_harness, project):
    from prefect.artifacts import Artifact

    import mlflow
    from flows.method_flows import method_flow

    spec = get(SLUG)
    first = method_flow(SLUG, Scale.smoke)
    c = tracking.client(project)
    run = c.get_run(first["run_id"])
    assert run.info.status == "FINISHED"
    tags = run.data.tags
    assert tags["paperline.scale"] == "smoke" and tags["paperline.method"] == SLUG
    assert tags["paperline.prefect_flow_run_id"] and tags["paperline.git_commit"]
    assert tags["paperline.data_sha256"] == read_dataset(project / "data" / spec.dataset).sha256
    assert f"eval/{spec.primary_metric}" in run.data.metrics
    assert {"claim/verdict", "claim/sane"} <= set(run.data.metrics)
    assert tags["paperline.verdict"] == first["verdict"] in ("holds", "fails", "inconclusive")
    assert tags["paperline.data_source"] in ("real", "synthetic") and tags["paperline.data_provenance"]
    for criterion in first["criteria"]:
        assert run.data.metrics[f"claim/{criterion['name']}/threshold"] == criterion["threshold"]
        assert tracking.STATE_CODE[criterion["state"]] == run.data.metrics[f"claim/{criterion['name']}/state"]
    assert any(k.startswith("train/") for k in run.data.metrics)
    assert run.data.params["seed"] == "0"
    children = c.search_runs([run.info.experiment_id], f"tags.mlflow.parentRunId = '{run.info.run_id}'")
    assert {ch.data.tags["paperline.variant"] for ch in children} >= {"method", "baseline"}
    assert all(any(k.startswith("train/") for k in ch.data.metrics) for ch in children)
    plots = [a.path for a in c.list_artifacts(run.info.run_id, "plots")]
    assert plots and all(p.endswith(".png") for p in plots)

    name = tracking.registered_name(spec)
    assert first["version"] == "1" and first["promoted"]
    assert str(c.get_model_version_by_alias(name, "champion").version) == "1"
    assert str(c.get_model_version_by_alias(name, "challenger").version) == "1"
    # The registered model is the method's model folder + config, rebuilt by its own loader: same answers,
    # and no pickled object anywhere in the registry (MLflow "models from code").
    model = mlflow.pyfunc.load_model(f"models:/{name}@champion")
    rows = np.array([[h, s, m] for h in range(2) for s in range(3) for m in (1, 2, 3)])
    own = spec.module().load_model(spec.make_config("smoke"), project / "outputs" / SLUG / "model")
    np.testing.assert_array_equal(model.predict(rows), own.predict(rows))
    # Rows are (stage, state, mask) integers, enforced by the version's signature: the policy itself would
    # read a (3, 2) array as 2 rows of 3 and round 1.7 down to 1.
    from mlflow.exceptions import MlflowException

    schema = model.metadata.get_input_schema()
    assert schema.is_tensor_spec() and schema.numpy_types() == [np.dtype("int64")]
    assert schema.inputs[0].shape == (-1, 3)
    with pytest.raises(MlflowException, match=r"Shape of input \(3, 2\) does not match expected shape \(-1, 3\)"):
        model.predict(rows[:3, :2].copy())
    with pytest.raises(MlflowException, match="dtype of input float64 does not match expected dtype int64"):
        model.predict(rows + 0.7)
    # The same checks without MLflow in between (the wrapper itself, as a pyfunc server would call it).
    wrapper = model.unwrap_python_model()
    with pytest.raises(ValueError, match=r"paperline.sleeping_rl takes an array of shape \(-1, 3\)"):
        wrapper.predict(None, rows.reshape(-1)[:6].reshape(3, 2))
    with pytest.raises(TypeError, match="floats are not rounded"):
        wrapper.predict(None, rows + 0.7)
    np.testing.assert_array_equal(wrapper.predict(None, rows), own.predict(rows))
    local = Path(mlflow.artifacts.download_artifacts(f"models:/{name}@champion"))
    files = {p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file()}
    assert "registered_model.py" in files and any(f.endswith("config.json") for f in files), files
    assert not [f for f in files if f.endswith((".pkl", ".pickle", ".pth"))], files

    artifact = Artifact.get("claim-sleeping-rl")
    assert artifact is not None and "| sleeping_rl |" in artifact.data

    # Same seed and config: the same primary metric, which does not *beat* the champion.
    second = method_flow(SLUG, Scale.smoke)
    assert second["version"] == "2" and not second["promoted"]
    assert "does not beat champion v1" in second["reason"]
    assert str(c.get_model_version_by_alias(name, "challenger").version) == "2"
    assert str(c.get_model_version_by_alias(name, "champion").version) == "1"
