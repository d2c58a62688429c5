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
    for version, overrides, why in (("2", ["data.n=32"], "another dataset"), ("3", ["data.source=real"], "another dataset")):
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
