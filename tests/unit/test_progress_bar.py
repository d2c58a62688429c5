"""A step-bounded fit's bar counts steps out of its budget; an epoch-bounded one counts epochs."""

import re

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from models.common.lightning import FitProgressBar


class _Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(capsys, bar=None, **limits) -> str:
    loader = DataLoader(TensorDataset(torch.randn(12, 2), torch.randn(12, 1)), batch_size=4)  # 3 batches/epoch
    trainer = L.Trainer(
        callbacks=[bar or FitProgressBar("method")],
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        accelerator="cpu",
        devices=1,
        **limits,
    )
    trainer.fit(_Tiny(), loader)
    captured = capsys.readouterr()
    return captured.out + captured.err


def test_step_bounded_fit_shows_its_step_budget(capsys):
    err = _fit(capsys, max_epochs=10**6, max_steps=7)
    assert "999999" not in err and "1000000" not in err
    assert re.search(r"method step.*7/7", err), err[-500:]


def test_epoch_bounded_fit_says_epoch_e_of_e(capsys):
    err = _fit(capsys, max_epochs=2)
    assert "method epoch 2/2" in err and "Epoch 1" not in err


def test_bar_redraws_are_bounded_by_time_not_by_steps(capsys):
    """400 fast steps draw the bar a handful of times (Lightning's own bar: once per step)."""
    err = _fit(capsys, bar=FitProgressBar("method", min_seconds=60), max_epochs=10**6, max_steps=400)
    assert re.search(r"method step.*400/400", err), err[-500:]
    assert err.count("method step") < 10, err.count("method step")


class _Validated(_Tiny):
    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val/loss", torch.nn.functional.mse_loss(self.net(x), y), prog_bar=True)


def test_validation_is_folded_into_the_fits_one_bar(capsys):
    """Lightning draws a validation bar every epoch (160 of a smoke run's 243 lines); one bar per fit stays."""
    loader = DataLoader(TensorDataset(torch.randn(12, 2), torch.randn(12, 1)), batch_size=4)
    trainer = L.Trainer(
        callbacks=[FitProgressBar("method")],
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        accelerator="cpu",
        devices=1,
        max_epochs=5,
    )
    trainer.fit(_Validated(), loader, loader)
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert "Validation" not in out and "method epoch 5/5" in out
    assert "val/loss" in out  # the validation metric is on the fit's bar
