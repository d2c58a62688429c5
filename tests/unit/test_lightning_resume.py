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


# ----------------------------------------------------------------------------- exact resume, any fit shape


class DropoutRegressor(L.LightningModule):
    """Noise and dropout in training, a validation loss, and the optimiser/scheduler a case asks for."""

    def __init__(self, scheduler: str | None = None, step_logging: bool = False) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 1))
        self.scheduler, self.step_logging = scheduler, step_logging
        self.seen = 0  # plain training state (as hpde_gnn's best weights): checkpointed by the glue
        self.best: dict = {"val": math.inf, "epoch": -1, "weights": None}
        self._steps_here = 0  # private: not checkpointed, so it counts the steps trained in this process

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen += len(x)
        self._steps_here += 1
        loss = torch.nn.functional.mse_loss(self.net(x + 0.05 * torch.randn_like(x)), y)
        self.log("train/loss", loss, on_step=self.step_logging, on_epoch=not self.step_logging)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("val/loss", loss)
        if float(loss) < self.best["val"]:
            weights = self.net[0].weight.detach().clone()
            self.best = {"val": float(loss), "epoch": self.current_epoch, "weights": weights}

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=0.01)
        if self.scheduler == "step":
            sched = torch.optim.lr_scheduler.OneCycleLR(opt, 0.02, total_steps=200)
        elif self.scheduler == "epoch":
            sched = torch.optim.lr_scheduler.StepLR(opt, 1, 0.7)
        else:
            return opt
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": self.scheduler}}


X = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
Y = X.sum(1, keepdim=True)


def _shuffled(seed: int = 1) -> DataLoader:
    """Shuffled by the loader's own generator (as unhippo's and sta's loaders are)."""
    return DataLoader(TensorDataset(X, Y), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(seed))


def _random_batches() -> DataLoader:
    from models.common.batches import Rows, random_batches

    return random_batches(Rows(X, Y), 4, 16, seed=3)  # a BatchSampler over a seeded RandomSampler


STEPS = dict(max_epochs=10**6, check_val_every_n_epoch=None)
FIT_SHAPES = {
    "epochs": (_shuffled, dict(max_epochs=5)),
    "steps, validation across epochs": (_shuffled, dict(STEPS, max_steps=80, val_check_interval=8)),
    "steps ending mid-epoch": (_random_batches, dict(STEPS, max_steps=70, val_check_interval=5)),
    "steps, step schedule, step logging": (
        _shuffled,
        dict(STEPS, max_steps=80, scheduler="step", step_logging=True, log_every_n_steps=5, gradient_clip_val=0.5),
    ),
    "steps, epoch schedule": (_shuffled, dict(STEPS, max_steps=80, scheduler="epoch")),
    "gradient accumulation": (_shuffled, dict(max_epochs=5, accumulate_grad_batches=3)),
}


class CrashAtBatch(L.Callback):
    """Dies at a batch in the middle of an epoch: what that epoch trained is lost, as in a kill."""

    def __init__(self, epoch: int, batch: int) -> None:
        self.epoch, self.batch = epoch, batch

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.current_epoch == self.epoch and batch_idx == self.batch:
            raise SystemExit("killed")


@pytest.mark.parametrize("shape", FIT_SHAPES)
def test_a_resumed_fit_is_the_uninterrupted_fit_exactly(shape, tmp_path):
    """Same batches, steps, step numbers, validations and schedules: bit-identical weights and curve.
    (Resumed from an epoch-end checkpoint, a step-bounded fit used to skip a batch slot and reshuffle, and
    every fit's step numbers came back one short; a loader's own generator restarted from its seed.)"""
    make_loader, options = FIT_SHAPES[shape]

    def train(callbacks=()):
        kwargs = dict(options)
        torch.manual_seed(0)
        module = DropoutRegressor(kwargs.pop("scheduler", None), kwargs.pop("step_logging", False))
        records = fit(
            module, make_loader(), DataLoader(TensorDataset(X, Y), 64), seed=0, callbacks=list(callbacks), **kwargs
        )
        return module, records

    full, full_records = train()
    with checkpointing(tmp_path), pytest.raises(SystemExit):
        train([CrashAtBatch(epoch=2, batch=5)])
    with checkpointing(tmp_path):
        resumed, records = train()
    assert records == full_records
    assert all(torch.equal(a, b) for a, b in zip(full.parameters(), resumed.parameters()))
    assert resumed.seen == full.seen and resumed.best["epoch"] == full.best["epoch"]
    assert resumed.best["val"] == full.best["val"] and torch.equal(resumed.best["weights"], full.best["weights"])


def _two_fit_step(crash=None):
    """A train step as a method writes one: a first fit, draws from the random streams it left behind
    (the second network's initialisation), then a step-bounded, validated second fit with a weight EMA."""
    from models.common.ema import EMA

    torch.manual_seed(0)
    first = DropoutRegressor()
    first_records = fit(first, _shuffled(1), max_epochs=4, seed=0, variant="first")
    second = DropoutRegressor(scheduler="step")  # initialised from the global stream the first fit left
    ema = EMA("net", 0.8, start=5, apply_at_end=True)
    second_records = fit(
        second,
        _shuffled(2),
        DataLoader(TensorDataset(X, Y), 64),
        max_steps=96,
        val_check_interval=10,
        max_epochs=10**6,
        check_val_every_n_epoch=None,
        seed=1,
        variant="second",
        callbacks=[ema] + ([crash] if crash else []),
    )
    return (first, second), (first_records, second_records)


@pytest.mark.parametrize("period", [None, "0"], ids=["default period", "every epoch"])
def test_a_step_killed_in_its_second_fit_skips_the_first_and_ends_as_an_uninterrupted_one(
    period, tmp_path, capfd, monkeypatch
):
    """At the default period a short fit never reaches an epoch checkpoint, yet a completed fit is
    kept: the rerun loads the first fit's final state without training it (its weights, EMA, curve and
    the random streams after it) and retrains (default) or resumes (every epoch) the second."""
    if period is None:
        monkeypatch.delenv("PAPERLINE_CHECKPOINT_SECONDS", raising=False)  # the default 30 s
    else:
        monkeypatch.setenv("PAPERLINE_CHECKPOINT_SECONDS", period)
    (full_first, full_second), full_records = _two_fit_step()
    with checkpointing(tmp_path), pytest.raises(SystemExit):
        _two_fit_step(crash=Crash(epoch=3))
    assert torch.load(tmp_path / "001-first" / "last.ckpt", weights_only=True)["paperline_fit_complete"]
    assert (tmp_path / "002-second" / "last.ckpt").exists() == (period == "0")
    capfd.readouterr()
    with checkpointing(tmp_path):
        (first, second), records = _two_fit_step()
    out = capfd.readouterr().out
    assert "completed earlier, loading first" in out
    assert first._steps_here == 0, "the completed first fit was trained again"
    assert second._steps_here == 96 - (48 if period == "0" else 0)  # 16 batches an epoch, killed at epoch 3
    assert (first.seen, second.seen) == (full_first.seen, full_second.seen) == (256, 384)
    assert records == full_records
    for full, resumed in ((full_first, first), (full_second, second)):
        assert all(torch.equal(a, b) for a, b in zip(full.state_dict().values(), resumed.state_dict().values()))


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_checkpoint_period_counts_across_the_train_step(tmp_path, monkeypatch):
    """The period is the time since any fit of the step saved (or since the step began): a fit that
    starts 35 s into a step (data, baselines, earlier fits) saves at its first epoch's end."""
    import time

    from models.common import lightning as glue
    from models.common import runtime

    monkeypatch.delenv("PAPERLINE_CHECKPOINT_SECONDS", raising=False)  # the default 30 s
    clock = FakeClock()
    fake_time = type("FakeTime", (), {"monotonic": staticmethod(clock), "strftime": staticmethod(time.strftime)})
    monkeypatch.setattr(glue, "time", fake_time)
    monkeypatch.setattr(runtime, "time", fake_time, raising=False)
    with checkpointing(tmp_path), pytest.raises(SystemExit):
        clock.now += 35  # the step's work before this fit; its epochs then take no time
        _train(6, callbacks=[Crash(epoch=3)])
    ckpt = tmp_path / "001-method" / "last.ckpt"
    assert ckpt.is_file() and torch.load(ckpt, weights_only=True)["epoch"] == 0  # saved once, 30 s not yet over
