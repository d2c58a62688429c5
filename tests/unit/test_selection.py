"""Fair-arm helpers: validation grid search, early stopping on the best weights, the learns-task gate."""

import math

import pytest

from models.common import selection as S


def test_grid_is_the_cartesian_product_in_order():
    assert S.grid(lr=(1e-3, 1e-4), dropout=(0.0, 0.5)) == [
        {"lr": 1e-3, "dropout": 0.0},
        {"lr": 1e-3, "dropout": 0.5},
        {"lr": 1e-4, "dropout": 0.0},
        {"lr": 1e-4, "dropout": 0.5},
    ]
    with pytest.raises(ValueError, match="'lr' has no values"):
        S.grid(lr=())


def test_selection_uses_validation_scores_and_skips_diverged_points():
    scores = {1e-2: math.nan, 1e-3: 0.7, 1e-4: 0.9, 1e-5: 0.9}  # the tie keeps the earlier point
    chosen, fitted = S.select_on_validation(
        "baseline", S.grid(lr=tuple(scores)), lambda p: (scores[p["lr"]], f"net{p['lr']}"), metric="acc"
    )
    assert chosen.chosen == {"lr": 1e-4} and fitted == "net0.0001" and chosen.score == 0.9
    assert len(chosen.table) == 4 and chosen.summary() == {"select/baseline/val_acc": 0.9, "select/baseline/lr": 1e-4}
    lower, _ = S.select_on_validation("m", S.grid(lr=(1, 2)), lambda p: (float(p["lr"]), None), higher_is_better=False)
    assert lower.chosen == {"lr": 1}


def test_patience_stops_after_no_improvement():
    p = S.Patience(patience=2, higher_is_better=False)
    for loss in (1.0, 0.5, 0.6, 0.55):
        p.update(loss)
    assert p.stop and p.best == 0.5 and p.best_step == 1


def test_best_weights_end_the_fit_on_the_best_validation_epoch(tmp_path):
    import lightning as L
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from models.common.lightning import fit

    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=g)
    y = x[:, 0] + 0.5 * torch.randn(64, generator=g)
    xv = torch.randn(32, 8, generator=g)
    yv = xv[:, 0] + 0.5 * torch.randn(32, generator=g)

    class Overfit(L.LightningModule):  # 8 inputs, 64 noisy rows, a big step: validation loss turns up
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))

        def step(self, batch, stage):
            loss = torch.nn.functional.mse_loss(self.net(batch[0]).squeeze(-1), batch[1])
            self.log(f"{stage}/loss", loss, on_step=False, on_epoch=True)
            return loss

        def training_step(self, batch, _):
            return self.step(batch, "train")

        def validation_step(self, batch, _):
            self.step(batch, "val")

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=0.03)

    torch.manual_seed(0)
    module = Overfit()
    callbacks = S.early_stopping_callbacks("val/loss", patience=3, mode="min")
    records = fit(
        module,
        DataLoader(TensorDataset(x, y), batch_size=16, shuffle=False),
        DataLoader(TensorDataset(xv, yv), batch_size=32),
        max_epochs=60,
        seed=0,
        callbacks=callbacks,
    )
    best = callbacks[-1]
    val = [r["val/loss"] for r in records if "val/loss" in r]
    assert best.best == pytest.approx(min(val)) and best.best_epoch == val.index(min(val))
    assert best.epochs_seen == len(val) < 60 and best.epochs_seen == best.best_epoch + 1 + 3  # stopped by patience
    for name, tensor in module.state_dict().items():
        assert torch.equal(tensor, best.weights[name]), name
    assert best.summary("method")["select/method/best_epoch"] == best.best_epoch


def test_learns_task_gate():
    assert S.learns_task("baseline", 0.9, 0.6) == ("baseline_learns_task_>=0.6", True)
    assert S.learns_task("baseline", math.nan, 0.6)[1] is False
    assert S.learns_task("baseline", 0.4, 0.5, higher_is_better=False)[1] is True
