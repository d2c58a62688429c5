"""Deployments: typed parameters (a method dropdown), the nightly cron, prefect.yaml in step."""

import importlib

import yaml

from models.registry import names
from tests.conftest import ROOT


def _choices(prop: dict) -> list:
    return prop["enum"] if "enum" in prop else [prop["const"]]


def test_served_deployments_have_typed_forms_and_the_nightly_cron():
    from flows.serve import NIGHTLY_CRON, deployments

    deps = {d.name: d for d in deployments()}
    assert set(deps) == {"method", "all-methods", "nightly"}
    method = deps["method"]._parameter_openapi_schema.model_dump()
    assert sorted(_choices(method["properties"]["method"])) == sorted(names())
    assert method["definitions"]["Scale"]["enum"] == ["smoke", "default", "paper"]
    nightly = deps["nightly"]
    assert [s.schedule.cron for s in nightly.schedules] == [NIGHTLY_CRON] == ["0 2 * * *"]
    listed = nightly._parameter_openapi_schema.model_dump()["properties"]["methods"]["anyOf"][0]["items"]
    assert sorted(_choices(listed)) == sorted(names())


def test_prefect_yaml_matches_the_served_deployments():
    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    deps = {d["name"]: d for d in spec["deployments"]}
    assert set(deps) == {"method", "all-methods", "nightly"}
    assert deps["nightly"]["schedules"][0]["cron"] == "0 2 * * *"
    for d in deps.values():
        path, func = d["entrypoint"].split(":")
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        assert callable(getattr(module, func))
        assert d["work_pool"]["name"] == "paperline-process"


def test_the_served_all_methods_form_bounds_the_worker_count_and_the_flow_refuses_zero():
    """A served run with dask_workers=0 or -3 once stayed RUNNING forever with no method started."""
    import pytest
    from prefect.exceptions import ParameterTypeError

    from flows.method_flows import all_methods, dask_runner
    from flows.serve import deployments

    deps = {d.name: d for d in deployments()}
    workers = deps["all-methods"]._parameter_openapi_schema.model_dump()["properties"]["dask_workers"]
    assert workers["minimum"] == 1 and workers["maximum"] >= 4
    assert deps["all-methods"].enforce_parameter_schema is not False
    for bad in (0, -3):
        with pytest.raises(ParameterTypeError, match="greater than or equal to 1"):
            all_methods.validate_parameters({"dask_workers": bad})
        with pytest.raises(ValueError, match="dask_workers"):
            dask_runner(workers=bad)
