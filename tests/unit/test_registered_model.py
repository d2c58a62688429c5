"""The registered pyfunc refuses input its model would silently reshape or round (issue 22)."""

from types import SimpleNamespace

import numpy as np
import pytest

from models.sleeping_rl.algorithm import GreedyPolicy
from tasks import tracking


def _policy() -> GreedyPolicy:
    q = np.random.default_rng(0).normal(size=(2, 3, 4))  # (H, S, A)
    return GreedyPolicy(q, uses_availability=True)


def _served(model, expected):
    """tasks/registered_model.py's wrapper as MLflow builds it, around an already loaded model."""
    namespace: dict = {}
    exec(compile(tracking.MODEL_CODE.read_text(), str(tracking.MODEL_CODE), "exec"), namespace)  # noqa: S102
    served = namespace["PaperlineModel"]()
    served.method, served.expected, served.model = "sleeping_rl", expected, model
    return served


def test_input_spec_is_read_from_the_model():
    import torch

    assert tracking.input_spec(_policy()) == {"dtype": "int64", "shape": [-1, 3]}
    assert tracking.input_spec(SimpleNamespace(input_spec=("float32", (-1, 8)))) == {
        "dtype": "float32",
        "shape": [-1, 8],
    }
    assert tracking.input_spec(torch.nn.Linear(3, 2)) is None  # no fixed input known: no signature
    signature = tracking._signature(tracking.input_spec(_policy()))
    assert signature.inputs.numpy_types() == [np.dtype("int64")] and signature.inputs.inputs[0].shape == (-1, 3)
    assert tracking._signature(None) is None


def test_the_wrapper_refuses_a_wrong_shape_a_float_and_text():
    policy = _policy()
    served = _served(policy, tracking.input_spec(policy))
    rows = np.array([[h, s, m] for h in range(2) for s in range(3) for m in (0, 1, 5)])
    np.testing.assert_array_equal(served.predict(None, rows), policy.predict(rows))
    with pytest.raises(ValueError, match=r"shape \(-1, 3\) .*not \(3, 2\)"):
        served.predict(None, np.arange(6).reshape(3, 2))  # the policy alone answers 2 rows
    with pytest.raises(ValueError, match=r"not \(9,\)"):
        served.predict(None, rows[:3].reshape(-1))
    with pytest.raises(TypeError, match="int64 values, not float64"):
        served.predict(None, rows + 0.7)  # the policy alone rounds 1.7 down to 1
    with pytest.raises(TypeError, match="numeric array, not dtype <U1"):
        served.predict(None, np.array([["a", "b", "c"]]))
    assert _policy().predict(np.array([[0, 1], [2, 1], [0, 0]])).shape == (2,)  # what the checks prevent


def test_logged_requirements_are_this_environments_pins():
    """publish skips MLflow's installed-package scan, so the pins it logs must be the installed ones."""
    from importlib.metadata import version

    from packaging.requirements import Requirement

    from tasks.tracking import PIP_REQUIREMENTS

    for line in PIP_REQUIREMENTS:
        req = Requirement(line)
        assert req.specifier.contains(version(req.name), prereleases=True), (line, version(req.name))


def test_the_wrapper_refuses_non_finite_values_and_booleans():
    """A model without a declared input (kernel_sgd, bnn_linf) silently answered NaN, inf and bools."""
    import torch

    served = _served(torch.nn.Linear(3, 1), None)
    assert served.predict(None, np.ones((2, 3), dtype=np.float32)).shape == (2, 1)
    for bad in (np.array([[np.nan, 0.0, 1.0]]), np.array([[np.inf, 0.0, 1.0]])):
        with pytest.raises(ValueError, match="finite values; the input holds 1 NaN or inf"):
            served.predict(None, bad)
    with pytest.raises(TypeError, match="not booleans"):
        served.predict(None, np.ones((2, 3), dtype=bool))
    served = _served(torch.nn.Linear(3, 1), {"dtype": "float32", "shape": [-1, 3]})
    with pytest.raises(TypeError, match="not booleans"):
        served.predict(None, np.ones((2, 3), dtype=bool))
