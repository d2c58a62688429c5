"""A tiny Lightning method for the crash tests: linear regression, slow epochs, real checkpoints.

``python -m tests.toy_lightning [overrides...]`` registers it and runs the Prefect flow, so a test
can SIGKILL the process in the middle of training and start it again.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from pydantic import Field

from models.base import (
    ClaimResult,
    MethodConfig,
    MethodSpec,
    Metrics,
    StrictModel,
    TrainedArtifacts,
    dataset_meta,
    write_manifest,
)


class Data(StrictModel):
    n: int = Field(256, gt=0)


class Config(MethodConfig):
    data: Data = Data()
    epochs: int = Field(8, gt=0)
    epoch_seconds: float = Field(0.6, ge=0)  # slow epochs leave time to kill the process mid-training


SPEC = MethodSpec(
    "toy_lightning",
    "Toy Lightning method",
    "tests",
    "val mse < 1",
    Config,
    "tests.toy_lightning",
    "toy_lightning",
    "method/mse",
    higher_is_better=False,
)


def prepare(cfg: Config, data_dir: Path):
    rng = np.random.default_rng(cfg.seed)
    x = rng.normal(size=(cfg.data.n, 4)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0], dtype=np.float32) + 0.1 * rng.normal(size=cfg.data.n)).astype(np.float32)
    np.savez(data_dir / "xy.npz", x=x, y=y)
    return write_manifest(data_dir, dataset_meta("synthetic", "numpy linear-regression draws"))


def _net():
    import torch

    return torch.nn.Linear(4, 1)


def train(cfg: Config, data, out_dir: Path) -> TrainedArtifacts:
    import lightning as L
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from models.common.lightning import fit

    arrays = np.load(data.path / "xy.npz")
    loader = DataLoader(TensorDataset(torch.from_numpy(arrays["x"]), torch.from_numpy(arrays["y"])), batch_size=32)

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = _net()

        def training_step(self, batch, _):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x).squeeze(-1), y)
            self.log("train/loss", loss, on_step=False, on_epoch=True)
            return loss

        def on_train_epoch_end(self):
            time.sleep(cfg.epoch_seconds)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    torch.manual_seed(cfg.seed)  # the initial weights too, not only what fit() seeds
    module = Module()
    history = fit(module, loader, max_epochs=cfg.epochs, seed=cfg.seed)
    torch.save(module.net.state_dict(), out_dir / "net.pt")
    return TrainedArtifacts(out_dir, {"method": history, "baseline": history}, {"epochs": float(cfg.epochs)})


def load_model(cfg: Config, model_dir: Path):
    import torch

    net = _net()
    net.load_state_dict(torch.load(model_dir / "net.pt", weights_only=True))
    return net


def evaluate(cfg: Config, data, artifacts, out_dir: Path) -> Metrics:
    import torch

    arrays = np.load(data.path / "xy.npz")
    net = load_model(cfg, artifacts.model_dir)
    with torch.no_grad():
        mse = float(((net(torch.from_numpy(arrays["x"])).squeeze(-1) - torch.from_numpy(arrays["y"])) ** 2).mean())
    return Metrics({"method/mse": mse, "baseline/mse": float(arrays["y"].var())}, [])


def claim(cfg: Config, metrics: Metrics) -> ClaimResult:
    from models.common.verdicts import exact_criterion

    mse = metrics["method/mse"]
    return ClaimResult(
        "val mse < 1", [exact_criterion("mse", "validation MSE below 1", mse, 1.0, "<")], {}, {"mse": mse}
    )


if __name__ == "__main__":
    from models import registry
    from tasks import env

    env.configure()
    env.make_state_dirs()

    registry.METHODS["toy_lightning"] = SPEC  # before the flows build their method Literal
    from flows.method_flows import method_flow
    from models.base import Scale

    result = method_flow("toy_lightning", Scale.default, sys.argv[1:])
    print("RESULT", result["version"], result["figures"]["mse"], flush=True)
