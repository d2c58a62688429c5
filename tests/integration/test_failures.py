"""Failure paths of the flow, on a toy method: failed runs, blocked promotion, kept champions."""

import pytest

from models import registry
from models.base import Scale
from tasks import tracking
from tests import toy_method

pytestmark = [pytest.mark.integration]


@pytest.fixture
def toy(monkeypatch, project):
    # Import first: the flows' method Literal is built at import and must not include the toy.
    from flows.pipelines import method_pipeline

    monkeypatch.setitem(registry.METHODS, "toy", toy_method.SPEC)

    # The flow's `method` parameter is a Literal of the registered names; the toy is not one.
    run = method_pipeline.with_options(validate_parameters=False)
    return lambda *overrides: run("toy", Scale.default, list(overrides))


def _versions(c):
    from mlflow.exceptions import MlflowException

    try:
        return sorted(int(v.version) for v in c.search_model_versions("name='paperline.toy'"))
    except MlflowException:
        return []


def test_training_failure_marks_run_failed_and_registers_nothing(prefect_harness, project, toy):
    with pytest.raises(FloatingPointError, match="non-finite training loss"):
        toy("fail=nan")
    c = tracking.client(project)
    runs = c.search_runs([c.get_experiment_by_name("paperline/toy").experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FAILED"
    assert "non-finite training loss" in runs[0].data.tags["paperline.failure"]
    assert _versions(c) == []


def test_champion_moves_only_when_earned(prefect_harness, project, toy):
    c = tracking.client(project)
    first = toy("quality=0.8")
    assert first["promoted"] and first["champion_version"] == "1"

    sane_fail = toy("quality=0.99", "fail=sanity")  # better metric, failed must-pass check
    assert sane_fail["version"] is None and not sane_fail["promoted"]
    assert c.get_run(sane_fail["run_id"]).info.status == "FAILED"
    assert _versions(c) == [1]

    worse = toy("quality=0.6")
    assert worse["version"] == "2" and not worse["promoted"]
    assert "does not beat champion v1" in worse["reason"]
    assert str(c.get_model_version_by_alias("paperline.toy", "champion").version) == "1"
    assert str(c.get_model_version_by_alias("paperline.toy", "challenger").version) == "2"

    better = toy("quality=0.95")
    assert better["promoted"] and better["version"] == "3"
    assert str(c.get_model_version_by_alias("paperline.toy", "champion").version) == "3"
    tags = c.get_model_version("paperline.toy", "2").tags
    assert tags["paperline.decision"] == "kept" and "0.6" in tags["paperline.reason"]


def test_champion_is_compared_only_like_for_like(prefect_harness, project, toy):
    from flows.pipelines import method_pipeline

    c = tracking.client(project)
    first = toy("quality=0.8")
    assert first["promoted"]
    tags = c.get_model_version("paperline.toy", "1").tags
    assert tags["paperline.dataset"] == "toy" and tags["paperline.data_source"] == "synthetic"
    assert tags["paperline.scale"] == "default" and len(tags["paperline.data_sha256"]) == 64

    # Better metrics, but another dataset (other content; same files labelled real; another scale).
    for version, overrides, why in (
        ("2", ["data.n=32"], "another dataset"),
        ("3", ["data.source=real"], "another dataset"),
    ):
        other = toy("quality=0.99", *overrides)
        assert other["version"] == version and not other["promoted"], other
        assert why in other["reason"] and "not compared with champion v1" in other["reason"]
        assert c.get_model_version("paperline.toy", version).tags["paperline.decision"] == "not compared"
    smoke = method_pipeline.with_options(validate_parameters=False)("toy", Scale.smoke, ["quality=0.99"])
    assert not smoke["promoted"] and "another scale" in smoke["reason"]
    assert str(c.get_model_version_by_alias("paperline.toy", "champion").version) == "1"
    assert str(c.get_model_version_by_alias("paperline.toy", "challenger").version) == "4"

    back = toy("quality=0.95")  # the champion's own dataset and scale: ranked, and better
    assert back["promoted"] and back["version"] == "5"


def test_a_retried_publish_registers_its_run_once(prefect_harness, project, toy, monkeypatch):
    """A transient error after registration makes Prefect retry publish: the retry reuses the version."""
    from tasks import promotion

    real, calls = promotion.decide_and_alias, []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("tracking server went away for a moment")
        return real(*args, **kwargs)

    monkeypatch.setattr(promotion, "decide_and_alias", flaky)
    result = toy("quality=0.8")
    assert len(calls) == 2 and result["version"] == "1" and result["promoted"]
    c = tracking.client(project)
    assert _versions(c) == [1]
    run = c.get_run(result["run_id"])
    children = c.search_runs([run.info.experiment_id], f"tags.mlflow.parentRunId = '{run.info.run_id}'")
    assert sorted(ch.data.tags["paperline.variant"] for ch in children) == ["baseline", "method"]  # not twice


def test_a_version_left_by_a_killed_publish_is_marked_orphaned(prefect_harness, project, toy):
    from models.base import Scale
    from tasks import publish, steps

    spec = toy_method.SPEC
    cfg = spec.make_config(Scale.default, {"quality": 0.99})
    for step in (steps.prepare, steps.train, steps.evaluate):
        step(spec, cfg, project)
    killed_run = tracking.start_pipeline_run(spec, cfg, project)
    orphan = tracking.log_model(project, killed_run, spec, cfg, project / "outputs" / "toy" / "model")  # then: SIGKILL

    result = toy("quality=0.8")
    c = tracking.client(project)
    tags = c.get_model_version("paperline.toy", orphan).tags
    assert tags["paperline.decision"] == "orphaned" and "interrupted" in tags["paperline.reason"]
    assert result["version"] == "2" and result["promoted"]  # the orphan (0.99) was never ranked
    assert publish.version_of_run(c, spec, killed_run) == orphan
