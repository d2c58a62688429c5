"""The hardware setting reaches every method: with ``PAPERLINE_ACCELERATOR=gpu`` each method's first
Lightning Trainer is built for the GPU (no GPU needed: the Trainer is stopped right after its arguments
are resolved), and a method's own ``accelerator=`` choice only fills in what the environment leaves unset."""

import pytest

from models import registry
from models.common.runtime import hardware_settings

# Methods whose training is not a Lightning fit (tabular RL, kernel SGD in NumPy, plain-torch SAC):
# they never build a Trainer, so the setting has nothing to reach there.
NO_LIGHTNING = {"sleeping_rl", "kernel_sgd", "ars"}


class TrainerBuilt(Exception):
    """Raised by the stand-in Trainer once it has recorded its arguments."""


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """Each method's smoke dataset, prepared once for the parametrised test below."""
    from tasks import steps

    root = tmp_path_factory.mktemp("hardware")
    done: dict[str, object] = {}

    def get(slug: str):
        if slug not in done:
            spec = registry.get(slug)
            cfg = spec.config.for_scale("smoke")
            done[slug] = (spec, cfg, steps.prepare(spec, cfg, root))
        return done[slug]

    return get


def _first_trainer_kwargs(monkeypatch, slug: str, prepared, tmp_path) -> dict | None:
    """The arguments of the first Trainer ``slug``'s train step builds with ``PAPERLINE_ACCELERATOR=gpu``
    and ``PAPERLINE_DEVICES=2`` (None: it built none)."""
    import lightning

    seen: list[dict] = []

    def trainer(**kwargs):
        seen.append(kwargs)
        raise TrainerBuilt

    spec, cfg, data = prepared(slug)  # on the CPU: some prepare steps train (a pretrained encoder or LM)
    monkeypatch.setenv("PAPERLINE_ACCELERATOR", "gpu")
    monkeypatch.setenv("PAPERLINE_DEVICES", "2")
    monkeypatch.setattr(lightning, "Trainer", trainer)
    try:
        spec.module().train(cfg, data, tmp_path)
    except TrainerBuilt:
        pass
    return seen[0] if seen else None


@pytest.mark.parametrize("slug", registry.names())
def test_the_accelerator_setting_reaches_every_method(slug, monkeypatch, prepared, tmp_path):
    kwargs = _first_trainer_kwargs(monkeypatch, slug, prepared, tmp_path)
    if slug in NO_LIGHTNING:
        assert kwargs is None, f"{slug} builds a Lightning Trainer: remove it from NO_LIGHTNING"
        return
    assert kwargs is not None, f"{slug} trained without a Lightning Trainer"
    assert (kwargs["accelerator"], kwargs["devices"]) == ("gpu", 2)


def test_a_methods_own_accelerator_is_the_default_the_environment_overrides(monkeypatch):
    for var in ("PAPERLINE_ACCELERATOR", "PAPERLINE_DEVICES", "PAPERLINE_STRATEGY", "PAPERLINE_NUM_NODES"):
        monkeypatch.delenv(var, raising=False)
    assert hardware_settings({}) == {"accelerator": "cpu", "devices": 1}
    assert hardware_settings({"accelerator": "auto"}) == {"accelerator": "auto", "devices": 1}
    monkeypatch.setenv("PAPERLINE_ACCELERATOR", "gpu")
    assert hardware_settings({"accelerator": "cpu", "devices": 1}) == {"accelerator": "gpu", "devices": 1}
    monkeypatch.setenv("PAPERLINE_DEVICES", "4")
    assert hardware_settings({"accelerator": "cpu", "devices": 1}) == {"accelerator": "gpu", "devices": 4}
