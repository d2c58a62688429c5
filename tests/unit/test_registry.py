"""The registry contract: explicit, light to import, every spec complete."""

import subprocess
import sys

import pytest

from models.base import MethodConfig
from models.registry import METHODS, UnknownMethodError, get
from tests.conftest import ROOT

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
    from flows.pipelines import MEASURED_DEFAULT_SECONDS, longest_first
    from models.registry import names

    assert set(MEASURED_DEFAULT_SECONDS) == set(names()), "every method needs a measured default time"
    order = longest_first(names())
    assert sorted(order) == sorted(names())
    times = [MEASURED_DEFAULT_SECONDS[m] for m in order]
    assert times == sorted(times, reverse=True)
    assert longest_first(["sleeping_rl", "sdp", "new_method"]) == ["sdp", "sleeping_rl", "new_method"]
