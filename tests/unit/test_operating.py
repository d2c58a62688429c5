"""Operating switches: Lightning hardware from the environment, per-method nightly overrides."""

import pytest

from flows.cli import main
from models.common.runtime import trainer_settings
from tasks.config import ConfigError, check_override_targets, overrides_for


def test_trainer_settings_default_to_one_cpu(monkeypatch):
    for var in ("PAPERLINE_ACCELERATOR", "PAPERLINE_DEVICES", "PAPERLINE_STRATEGY", "PAPERLINE_NUM_NODES"):
        monkeypatch.delenv(var, raising=False)
    assert trainer_settings() == {"accelerator": "cpu", "devices": 1}


def test_trainer_settings_from_environment(monkeypatch):
    monkeypatch.setenv("PAPERLINE_ACCELERATOR", "gpu")
    monkeypatch.setenv("PAPERLINE_DEVICES", "4")
    monkeypatch.setenv("PAPERLINE_STRATEGY", "ddp")
    monkeypatch.setenv("PAPERLINE_NUM_NODES", "2")
    assert trainer_settings() == {"accelerator": "gpu", "devices": 4, "strategy": "ddp", "num_nodes": 2}
    monkeypatch.setenv("PAPERLINE_DEVICES", "0,1")
    assert trainer_settings()["devices"] == "0,1"


@pytest.mark.parametrize(
    "var,value", [("PAPERLINE_NUM_NODES", "zero"), ("PAPERLINE_NUM_NODES", "0"), ("PAPERLINE_DEVICES", "many")]
)
def test_bad_trainer_setting_names_the_variable(monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    with pytest.raises(ValueError, match=f"{var}='{value}'"):
        trainer_settings()


def test_fit_uses_the_trainer_settings(monkeypatch):
    import lightning as L
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from models.common import lightning as pl_common

    seen = {}

    class Probe(L.Callback):
        def on_fit_start(self, trainer, pl_module):
            seen["accelerator"] = type(trainer.accelerator).__name__
            seen["devices"] = trainer.num_devices

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(2, 1)

        def training_step(self, batch, _):
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    monkeypatch.setenv("PAPERLINE_ACCELERATOR", "cpu")
    monkeypatch.setenv("PAPERLINE_DEVICES", "1")
    loader = DataLoader(TensorDataset(torch.ones(4, 2)), batch_size=2)
    pl_common.fit(Tiny(), loader, max_epochs=1, seed=0, callbacks=[Probe()])
    assert seen == {"accelerator": "CPUAccelerator", "devices": 1}


def test_nightly_overrides_apply_to_all_or_one_method():
    pairs = ["seed=3", "sleeping_rl:episodes=10", "kernel_sgd:data.n_max=64"]
    assert overrides_for("sleeping_rl", pairs) == ["seed=3", "episodes=10"]
    assert overrides_for("kernel_sgd", pairs) == ["seed=3", "data.n_max=64"]
    assert overrides_for("other", pairs) == ["seed=3"]
    assert overrides_for("x", ["note=a:b"]) == ["note=a:b"]  # a colon inside the value is not a target
    check_override_targets(pairs, ["sleeping_rl", "kernel_sgd"])
    with pytest.raises(ConfigError, match="'kernel_sgd', which is not in this run"):
        check_override_targets(pairs, ["sleeping_rl"])


def test_dask_runner_needs_all(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "sleeping_rl", "--runner", "dask"]) == 2
    assert "name two or more, or use --all" in capsys.readouterr().err
    assert main(["run", "--all", "--runner", "dask", "--workers", "0"]) == 2
    assert "--workers 0" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
