"""Shared Lightning glue: learning curves captured, NaN stops training, interrupted fits resume."""

import math

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from models.common.lightning import NonFiniteLossError, fit
from models.common.runtime import checkpointing


class Regressor(L.LightningModule):
    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
        self.lr = lr

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train/loss", loss, on_step=False, on_epoch=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def _loader():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=16, shuffle=False)


def _train(epochs: int, lr: float = 0.05, callbacks=()):
    torch.manual_seed(0)
    module = Regressor(lr)
    records = fit(module, _loader(), max_epochs=epochs, seed=0, callbacks=list(callbacks))
    return module, records


def test_history_is_captured_per_epoch():
    module, records = _train(5)
    losses = [r["train/loss"] for r in records if "train/loss" in r]
    assert len(losses) == 5 and losses[-1] < losses[0]


class Crash(L.Callback):
    """Dies at the start of an epoch, as a killed process would: nothing runs after it."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_train_epoch_start(self, trainer, pl_module):
        if trainer.current_epoch == self.epoch:
            raise SystemExit("killed")


def test_interrupted_fit_resumes_from_its_last_checkpoint(tmp_path):
    full, full_records = _train(6)
    with checkpointing(tmp_path), pytest.raises(SystemExit):
        _train(6, callbacks=[Crash(epoch=3)])  # dies mid-fit: only per-epoch checkpoints stay behind
    ckpt = tmp_path / "001-method" / "last.ckpt"
    assert ckpt.is_file() and torch.load(ckpt, weights_only=False)["epoch"] == 2  # the last epoch it finished
    assert [p.name for p in ckpt.parent.iterdir()] == ["last.ckpt"]
    with checkpointing(tmp_path):
        resumed, records = _train(6)
    assert [r["train/loss"] for r in records] == pytest.approx([r["train/loss"] for r in full_records], rel=1e-5)
    for a, b in zip(full.parameters(), resumed.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_non_finite_loss_stops_training():
    torch.manual_seed(0)
    with pytest.raises(NonFiniteLossError, match="non-finite training loss"):
        fit(Regressor(lr=1e6), _loader(), max_epochs=50, seed=0)


def test_checkpoints_are_rate_limited(tmp_path, monkeypatch):
    """With PAPERLINE_CHECKPOINT_SECONDS an hour, a short fit that dies leaves no checkpoint."""
    monkeypatch.setenv("PAPERLINE_CHECKPOINT_SECONDS", "3600")
    with checkpointing(tmp_path), pytest.raises(SystemExit):
        _train(6, callbacks=[Crash(epoch=3)])
    assert not (tmp_path / "001-method" / "last.ckpt").exists()


@pytest.mark.parametrize("value", ["soon", "-1"])
def test_bad_checkpoint_interval_names_the_variable(monkeypatch, value):
    from models.common.runtime import checkpoint_seconds

    monkeypatch.setenv("PAPERLINE_CHECKPOINT_SECONDS", value)
    with pytest.raises(ValueError, match="PAPERLINE_CHECKPOINT_SECONDS"):
        checkpoint_seconds()


def _assert_killed_and_resumed_equals_uninterrupted(train, tmp_path) -> None:
    """``train(callbacks)`` -> (module, records): killed at epoch 3 then resumed, it ends as a full run does."""
    full, full_records = train()
    with checkpointing(tmp_path), pytest.raises(SystemExit):
        train([Crash(epoch=3)])
    with checkpointing(tmp_path):
        resumed, records = train()
    assert [r["train/loss"] for r in records] == pytest.approx([r["train/loss"] for r in full_records], rel=1e-6)
    for a, b in zip(full.parameters(), resumed.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


class NoisyRegressor(Regressor):
    """Training draws from the global RNGs (input noise, dropout) and its own generator: resuming must
    continue every stream."""

    def __init__(self) -> None:
        super().__init__()
        self.dropout = torch.nn.Dropout(0.3)
        self.generator = torch.Generator().manual_seed(7)  # a stream the module owns (as zo_natural's probes)

    def training_step(self, batch, batch_idx):
        import random

        import numpy as np

        x, y = batch
        x = x + 0.1 * torch.randn_like(x) + float(np.random.normal()) * 0.01 + random.random() * 0.01
        x = x + 0.1 * torch.randn(x.shape, generator=self.generator)
        loss = torch.nn.functional.mse_loss(self.net(self.dropout(x)), y)
        self.log("train/loss", loss, on_step=False, on_epoch=True)
        return loss


def test_resumed_fit_continues_the_random_streams(tmp_path):
    """Shuffled batches, noise and dropout after a resume are those of the uninterrupted fit."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)

    def train(callbacks=()):
        torch.manual_seed(0)
        module = NoisyRegressor()
        loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=16, shuffle=True)
        return module, fit(module, loader, max_epochs=5, seed=0, callbacks=list(callbacks))

    _assert_killed_and_resumed_equals_uninterrupted(train, tmp_path)


class EpochSeededBatches:
    """A loader whose batches depend on an epoch counter it keeps itself (as fair_icp's EnsembleBatches)."""

    def __init__(self, x: torch.Tensor) -> None:
        self.x, self.epoch = x, 0

    def __len__(self) -> int:
        return 4

    def __iter__(self):
        epoch, self.epoch = self.epoch, self.epoch + 1
        gen = torch.Generator().manual_seed(epoch)
        for idx in torch.randperm(len(self.x), generator=gen).split(16):
            yield self.x[idx] * (1 + epoch), self.x[idx].sum(1, keepdim=True)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch


def test_an_epoch_keyed_loader_resumes_at_its_next_epoch(tmp_path):
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))

    def train(callbacks=()):
        torch.manual_seed(0)
        module = Regressor(lr=0.002)
        return module, fit(module, EpochSeededBatches(x), max_epochs=5, seed=0, callbacks=list(callbacks))

    _assert_killed_and_resumed_equals_uninterrupted(train, tmp_path)
