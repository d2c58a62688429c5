"""``paperline status`` and ``paperline report`` describe what MLflow holds, figures included."""

import json

import pytest

from models import registry
from models.base import Scale
from tasks import overview, tracking
from tests import toy_method

pytestmark = [pytest.mark.integration]


@pytest.fixture
def toy_runs(prefect_harness, project, monkeypatch):
    from flows.method_flows import method_flow

    monkeypatch.setitem(registry.METHODS, "toy", toy_method.SPEC)
    run = method_flow.with_options(validate_parameters=False)
    first = run("toy", Scale.default, ["quality=0.8"])
    second = run("toy", Scale.default, ["quality=0.6"])  # worse: challenger only
    return first, second


def test_status_names_latest_run_claim_and_aliases(toy_runs, project):
    first, second = toy_runs
    (status,) = overview.collect(project, [toy_method.SPEC])
    assert status.run_id == second["run_id"] and status.status == "FINISHED"
    assert status.verdict == "holds" and status.sane is True
    assert status.figures == {"score": pytest.approx(0.6)}
    (criterion,) = status.criteria
    assert (
        criterion["name"] == "score" and criterion["estimate"] == pytest.approx(0.6) and criterion["state"] == "holds"
    )
    assert (status.dataset, status.data_source) == ("toy", "synthetic") and status.data_provenance
    assert (status.champion, status.challenger) == ("1", "2")
    assert "does not beat champion v1" in status.decision
    table = overview.status_table([status])
    assert table.splitlines()[2].split()[-2:] == ["v1", "v2"]
    assert table.splitlines()[3].strip().startswith("score: 0.6") and "-> holds" in table


def test_status_of_a_method_never_run(project):
    from mlflow.exceptions import MlflowException  # noqa: F401 (MLflow must be importable)

    (status,) = overview.collect(project, [toy_method.SPEC])
    assert status.run_id is None and status.champion is None
    assert "never" in overview.status_table([status])


def test_report_has_claim_table_figures_and_run_links(toy_runs, project):
    _, second = toy_runs
    path = overview.write_report(project)
    assert path == project / "outputs" / "report" / "index.html"
    page = path.read_text()
    assert "<table" in page and ">toy<" in page and "quality &gt;= 0.5" in page
    assert 'class="criteria"' in page and "<code>score</code>" in page and 'data-verdict="holds"' in page
    assert "synthetic" in page and "numpy normal draws" in page
    assert f"/runs/{second['run_id']}" in page  # a link to the MLflow run
    figure = path.parent / "figures" / "toy" / "plots" / "loss.png"
    assert figure.is_file() and figure.read_bytes()[:4] == b"\x89PNG"
    assert 'src="figures/toy/plots/loss.png"' in page
    assert json.loads((path.parent / "status.json").read_text())[-1]["champion"] == "1"
    assert not (project / "outputs" / "report.partial").exists()

    c = tracking.client(project)
    exp = c.get_experiment_by_name(overview.REPORT_EXPERIMENT)
    (run,) = c.search_runs([exp.experiment_id])
    logged = {a.path for a in c.list_artifacts(run.info.run_id, "report")}
    assert "report/index.html" in logged


def test_status_command_prints_the_table_and_json(toy_runs, project, capsys):
    from flows.cli import main

    assert main(["status"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("toy "))
    assert row.split()[-2:] == ["v1", "v2"] and "FINISHED" in row
    assert main(["status", "--json"]) == 0
    toy = next(item for item in json.loads(capsys.readouterr().out) if item["method"] == "toy")
    assert toy["champion"] == "1" and toy["verdict"] == "holds"


def test_every_view_of_a_verdict_agrees(prefect_harness, project, monkeypatch):
    """An inconclusive claim reads the same in the flow result, claim.json, the claim table, MLflow,
    ``paperline status`` and the report."""
    from flows.method_flows import method_flow
    from tasks import report

    monkeypatch.setitem(registry.METHODS, "toy", toy_method.SPEC)
    # Per-seed scores 0.3, 0.6, 0.9: mean 0.6 >= 0.5, but the interval reaches far below it.
    result = method_flow.with_options(validate_parameters=False)("toy", Scale.default, ["quality=0.6", "spread=0.3"])
    assert result["verdict"] == "inconclusive"
    (criterion,) = result["criteria"]
    assert criterion["low"] < 0.5 < criterion["high"] and criterion["state"] == "inconclusive"
    on_disk = json.loads((project / "outputs" / "toy" / "claim.json").read_text())
    assert on_disk["verdict"] == "inconclusive" and on_disk["criteria"][0] == criterion

    line = report.criterion_line(criterion)
    assert line.startswith("score: 0.6 [") and line.endswith("-> inconclusive (3 seeds)")
    table = report.text_table([result])
    assert "inconclusive" in table.splitlines()[2] and line in table
    assert line in report.markdown_table([result])

    c = tracking.client(project)
    run = c.get_run(result["run_id"])
    assert run.data.tags["paperline.verdict"] == "inconclusive" and run.data.metrics["claim/verdict"] == 0.0
    assert run.data.metrics["claim/score/low"] == pytest.approx(criterion["low"])
    assert run.data.metrics["claim/score/high"] == pytest.approx(criterion["high"])

    (status,) = overview.collect(project, [toy_method.SPEC])
    assert status.verdict == "inconclusive" and status.criteria == [criterion]
    assert line in overview.status_table([status])
    page = overview.write_report(project, log_to_mlflow=False).read_text()
    assert 'data-verdict="inconclusive"' in page and report.interval_text(criterion) in page
    # The diagnostics read the same everywhere too: the toy declares no negative control.
    assert result["decided_by"] == on_disk["decided_by"] == status.decided_by == "check: no negative control declared"
    assert run.data.tags["paperline.decided_by"] == result["decided_by"] and run.data.metrics["claim/flags"] == 1.0
    assert [f["code"] for f in status.flags] == ["no_control"] and "no negative control declared" in page
    assert "0 of 1 verdicts decided by the method" in page
    assert list(status.power) == ["score"] and status.power["score"] > 3  # more seeds than the 3 it has


def test_status_finds_a_method_with_two_hundred_nested_runs(project):
    """The newest pipeline run is found by a filter, not among the newest N runs (win_rate logs 56 children)."""
    from mlflow.entities import RunStatus

    spec, cfg = toy_method.SPEC, toy_method.SPEC.make_config("smoke")
    parent = tracking.start_pipeline_run(spec, cfg, project)
    c = tracking.client(project)
    exp = c.get_run(parent).info.experiment_id
    for k in range(200):
        child = c.create_run(exp, tags={"mlflow.parentRunId": parent, "mlflow.runName": f"toy/variant{k}"})
        c.set_terminated(child.info.run_id, RunStatus.to_string(RunStatus.FINISHED))
    (status,) = overview.collect(project, [spec])
    assert status.run_id == parent and status.scale == "smoke"
    assert status.host["isa"] and status.host["torch"]  # the host fingerprint travels as tags
    assert len(list(tracking.all_runs(c, exp, f"tags.mlflow.parentRunId = '{parent}'"))) == 200
