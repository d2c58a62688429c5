"""The registry contract: explicit, light to import, every spec complete."""

import subprocess
import sys

import pytest

from models.base import MethodConfig
from models.registry import METHODS, UnknownMethodError, get
from tests.conftest import ROOT

pytestmark = pytest.mark.sync  # the registry is what a new method must be entered in

CONTRACT = ("prepare", "train", "load_model", "evaluate", "claim")


def test_registry_import_is_light():
    code = "import sys, models.registry; print(sorted(m for m in ('torch','lightning','mlflow','prefect','sklearn') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("slug", list(METHODS))
def test_spec_is_complete(slug):
    spec = METHODS[slug]
    assert spec.slug == slug and spec.title and spec.paper and spec.claim
    assert issubclass(spec.config, MethodConfig)
    assert spec.impl.startswith(f"models.{slug}.")
    module = spec.module()
    for name in CONTRACT:
        assert callable(getattr(module, name, None)), f"{spec.impl} lacks {name}()"
    assert module.__doc__ and len(module.__doc__) > 200, "the module docstring names the paper, code and deviations"


def test_unknown_method_lists_the_valid_ones():
    with pytest.raises(UnknownMethodError) as info:
        get("nosuch")
    assert str(info.value) == f"unknown method 'nosuch'; choose from: {', '.join(METHODS)}"


def test_parallel_runs_start_the_longest_methods_first():
    from flows.method_flows import longest_first, method_costs
    from models.registry import names

    costs = method_costs()
    assert set(costs) == set(names()) and all(c.seconds > 0 for c in costs.values()), "a cost for every method"
    assert all(abs(sum(c.mix.values()) - 1) < 1e-9 for c in costs.values()), "each work mix sums to 1"
    order = longest_first(names())
    assert sorted(order) == sorted(names())
    times = [costs[m].seconds for m in order]
    assert times == sorted(times, reverse=True)
    longest, shortest = order[0], order[-1]
    assert longest_first([shortest, longest, "new_method"]) == [longest, shortest, "new_method"]


def test_the_wall_time_prediction_schedules_longest_first_on_the_workers():
    from tasks.speed import MethodCost, predict

    ref = {"gemm": 1.0, "conv": 1.0, "adam": 1.0, "python": 1.0}
    costs = {
        "a": MethodCost(100, {"conv": 1.0}),
        "b": MethodCost(60, {"python": 1.0}),
        "c": MethodCost(50, {"gemm": 1.0}),
    }
    one = predict(costs, ref, ref, list(costs), workers=1, overhead_seconds=0, startup_seconds=0)
    assert one.wall_seconds == 210 and one.speed_ratio == 1.0
    two = predict(costs, ref, ref, list(costs), workers=2, overhead_seconds=0, startup_seconds=0, contention=1.0)
    assert two.wall_seconds == 110  # a alone; b then c on the other worker
    slower_conv = predict(costs, ref, {**ref, "conv": 2.0}, list(costs), 1, overhead_seconds=0, startup_seconds=0)
    assert slower_conv.per_method["a"] == 200 and slower_conv.per_method["b"] == 60
