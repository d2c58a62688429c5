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
    from flows.method_flows import method_flow

    monkeypatch.setitem(registry.METHODS, "toy", toy_method.SPEC)

    # The flow's `method` parameter is a Literal of the registered names; the toy is not one.
    run = method_flow.with_options(validate_parameters=False)
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
    from flows.method_flows import method_flow

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
    smoke = method_flow.with_options(validate_parameters=False)("toy", Scale.smoke, ["quality=0.99"])
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


def _dead_pid() -> str:
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return str(child.pid)


def _running(c, experiment_id: str) -> list[str]:
    return [r.info.run_id for r in tracking.all_runs(c, experiment_id, "attributes.status = 'RUNNING'")]


def test_a_run_killed_after_registration_is_marked_killed_not_finished(prefect_harness, project, toy):
    """log_model's MLflow context used to end the run FINISHED, so a kill before the decision left it looking done."""
    from tasks import steps

    spec = toy_method.SPEC
    cfg = spec.make_config(Scale.default, {"quality": 0.99})
    for step in (steps.prepare, steps.train, steps.evaluate):
        step(spec, cfg, project)
    killed = tracking.start_pipeline_run(spec, cfg, project)
    tracking.log_model(project, killed, spec, cfg, project / "outputs" / "toy" / "model")
    c = tracking.client(project)
    assert c.get_run(killed).info.status == "RUNNING"  # reopened after log_model; publish decides the end
    c.set_tag(killed, "paperline.pid", _dead_pid())  # ... and then the process was SIGKILLed
    toy("quality=0.8")
    run = c.get_run(killed)
    assert run.info.status == "KILLED" and "died" in run.data.tags["paperline.failure"]


def test_children_left_running_by_a_kill_are_closed_by_the_next_run(prefect_harness, project, toy, capsys):
    spec = toy_method.SPEC
    cfg = spec.make_config(Scale.default)
    c = tracking.client(project)
    dead = _dead_pid()
    parent = tracking.start_pipeline_run(spec, cfg, project)
    exp = c.get_run(parent).info.experiment_id
    c.set_tag(parent, "paperline.pid", dead)
    child = c.create_run(exp, tags={"mlflow.parentRunId": parent, "paperline.pid": dead, "paperline.host": "x"})
    failed = tracking.start_pipeline_run(spec, cfg, project)  # a parent that ended FAILED, its child still open
    orphan = c.create_run(exp, tags={"mlflow.parentRunId": failed}).info.run_id
    c.set_terminated(failed, status="FAILED")
    toy("quality=0.8")
    assert _running(c, exp) == []
    assert c.get_run(child.info.run_id).info.status == "KILLED" and c.get_run(orphan).info.status == "FAILED"
    assert "run(s) a dead process had left open" in capsys.readouterr().out


def test_a_full_disk_in_publish_leaves_nothing_running_after_the_next_run(prefect_harness, project, toy):
    """Publish under a small RLIMIT_FSIZE (as `ulimit -f`): it fails half-way through logging; whatever it
    left open, the next run closes."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import os, resource, sys
        from models import registry
        from tests import toy_method
        registry.METHODS["toy"] = toy_method.SPEC
        from tasks import publish, steps, tracking
        root = __import__("pathlib").Path(os.environ["PAPERLINE_ROOT"])
        spec = toy_method.SPEC; cfg = spec.make_config("default")
        for step in (steps.prepare, steps.train, steps.evaluate):
            step(spec, cfg, root)
        run_id = tracking.start_pipeline_run(spec, cfg, root)
        print(run_id, flush=True)
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))  # no file may grow past 2 KiB now
        try:
            publish.publish(spec, cfg, root, run_id)
        except Exception as exc:
            print("publish failed:", type(exc).__name__, str(exc)[:200], flush=True)
            try:
                tracking.fail_run(root, run_id, str(exc))
            except Exception as again:
                print("fail_run failed too:", type(again).__name__, flush=True)
            sys.exit(3)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "publish failed" in out.stdout
    c = tracking.client(project)
    exp = c.get_experiment_by_name("paperline/toy").experiment_id
    assert _running(c, exp), "the failed publish left runs open (the case under test)"
    toy("quality=0.8")
    assert _running(c, exp) == [], [(r, c.get_run(r).data.tags.get("mlflow.runName")) for r in _running(c, exp)]
