"""The verdict diagnostics flag what may decide a verdict besides the method (tasks/diagnostics.py)."""

import math

import numpy as np
import pytest

from models.base import ClaimResult, Control, Metrics, Separation
from models.common import evidence
from models.common import selection as S
from models.common import verdicts as V
from models.common.units import UnitsNotAligned, UnitValues
from tasks.diagnostics import diagnose


def _claim(**kw) -> ClaimResult:
    gain = V.mean_criterion("gain", "s", UnitValues(["seed0", "seed1", "seed2"], [1.0, 1.2, 1.1]), 0.0, ">")
    control = Control("gain", "a placebo", V.mean_criterion("gain", "s", [-0.5, -0.4, -0.6], 0.0, ">"))
    return ClaimResult("c", [gain], controls=kw.pop("controls", [control]), **kw)


def codes(claim: ClaimResult) -> list[str]:
    return [f.code for f in claim.diagnostics]


def test_a_clean_claim_is_decided_by_the_method():
    claim = diagnose(_claim())
    assert claim.verdict == "holds" and claim.decided_by == "method" and claim.power == {}


def test_a_choice_on_a_grid_edge_is_flagged_and_an_interior_one_is_not():
    with evidence.recording() as ev:
        for arm, best_lr in (("method", 1e-2), ("baseline", 3e-3)):
            S.select_on_validation(
                arm,
                S.grid(lr=(1e-3, 3e-3, 1e-2)),
                lambda p, best_lr=best_lr: (-abs(math.log(p["lr"] / best_lr)), None),
                unit="seed0",
            )
    claim = diagnose(_claim(), ev)
    edges = [f for f in claim.diagnostics if f.code == "grid_edge"]
    assert [f.subject for f in edges] == ["method/lr"] and "top" in edges[0].text and edges[0].kind == "set-up"
    assert claim.decided_by.startswith("set-up: grid edge: method chose lr=0.01")
    assert claim.verdict == "holds"  # the state stays the interval's


def test_an_end_declared_as_the_domain_limit_is_not_an_edge():
    with evidence.recording() as ev:
        S.select_on_validation(
            "method", S.grid(penalty=(0.0, 0.1, 1.0)), lambda p: (-p["penalty"], None), limits={"penalty": [0.0]}
        )
    assert "grid_edge" not in codes(diagnose(_claim(), ev))


def test_a_grid_with_no_eligible_point_is_an_error_flag_not_a_silent_choice():
    with evidence.recording() as ev:
        chosen, _ = S.select_on_validation("verbalised", S.grid(lr=(1e-3, 1e-2)), lambda p: (math.nan, None))
    assert chosen.eligible is False
    flags = diagnose(_claim(), ev).diagnostics
    assert [(f.kind, f.code) for f in flags] == [("error", "no_eligible_point")]


def test_a_fit_stopped_at_its_cap_while_improving_is_flagged():
    with evidence.recording() as ev:
        improving = S.Patience(patience=3)
        for score in (5.0, 4.0, 3.0, 2.5, 2.0):  # still falling when the 5-evaluation budget ends
            improving.update(score)
        improving.record("dense", "seed0")
        stopped = S.Patience(patience=2)
        for score in (5.0, 4.0, 4.5, 4.6):  # the patience fired
            stopped.update(score)
            if stopped.stop:
                break
        stopped.record("sparse", "seed0")
    flags = diagnose(_claim(), ev).diagnostics
    assert [(f.kind, f.code, f.subject) for f in flags] == [("budget", "still_improving", "dense")]
    assert "1 of 1 fits" in flags[0].text


def test_lightning_fits_record_whether_the_patience_ended_them():
    import lightning as L
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from models.common.lightning import fit

    g = torch.Generator().manual_seed(0)
    x, xv = torch.randn(64, 4, generator=g), torch.randn(32, 4, generator=g)
    y, yv = x.sum(1), xv.sum(1)

    class Linear(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(4, 1)

        def step(self, batch, stage):
            loss = torch.nn.functional.mse_loss(self.net(batch[0]).squeeze(-1), batch[1])
            self.log(f"{stage}/loss", loss, on_step=False, on_epoch=True)
            return loss

        def training_step(self, batch, _):
            return self.step(batch, "train")

        def validation_step(self, batch, _):
            self.step(batch, "val")

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)  # slow: still improving after 4 epochs

    with evidence.recording() as ev:
        callbacks = S.early_stopping_callbacks("val/loss", patience=2, arm="method", unit="seed0")
        loaders = DataLoader(TensorDataset(x, y), batch_size=16), DataLoader(TensorDataset(xv, yv), batch_size=32)
        fit(Linear(), *loaders, max_epochs=4, seed=0, callbacks=callbacks)
    (record,) = ev.fits
    assert (record.arm, record.unit, record.trained, record.best, record.stopped_early) == (
        "method",
        "seed0",
        4,
        3,
        False,
    )
    assert record.still_improving and "still_improving" in codes(diagnose(_claim(), ev))


def test_a_saturated_pair_is_flagged():
    top = Separation("held-out success", {"method": 0.998, "baseline": 1.0}, floor=0.0, ceiling=1.0, margin=0.02)
    apart = Separation("held-out success", {"method": 0.9, "baseline": 0.6}, floor=0.0, ceiling=1.0)
    chance = Separation("accuracy", {"method": 0.11, "baseline": 0.1}, floor=0.1, ceiling=1.0)
    assert (top.saturated, apart.saturated, chance.saturated) == ("ceiling", "", "floor")
    claim = diagnose(_claim(separations=[top, apart]))
    assert [f.code for f in claim.diagnostics] == ["saturated"] and claim.diagnostics[0].kind == "set-up"


def test_a_claim_whose_control_passes_cannot_hold():
    passing = Control("gain", "1/50 of the samples", V.mean_criterion("gain", "s", [1.0, 1.1, 0.9], 0.0, ">"))
    claim = diagnose(_claim(controls=[passing]))
    assert claim.criterion("gain").state == "holds" and claim.verdict == "inconclusive"
    assert codes(claim) == ["control_passes"] and claim.diagnostics[0].kind == "check"
    vague = Control("gain", "a placebo", V.mean_criterion("gain", "s", [1.0, -1.0, 0.5], 0.0, ">"))
    claim = diagnose(_claim(controls=[vague]))
    assert claim.verdict == "holds" and codes(claim) == ["control_inconclusive"]
    assert codes(diagnose(_claim(controls=[]))) == ["no_control"]
    with pytest.raises(ValueError, match="no such criterion"):
        _claim(controls=[Control("missing", "x", passing.criterion)])


def test_a_draw_the_units_hold_fixed_is_flagged_and_explanations_are_kept():
    c = V.mean_criterion("auroc_gain", "s", [0.01, 0.02, 0.015], 0.0, ">", not_covered=("pre-training",))
    control = Control("auroc_gain", "p", V.mean_criterion("auroc_gain", "s", [-0.02, -0.01, -0.015], 0.0, ">"))
    claim = diagnose(ClaimResult("c", [c], controls=[control], explained={"not_covered": "one base model at default"}))
    (flag,) = claim.diagnostics
    assert (flag.kind, flag.subject, flag.explanation) == ("units", "pre-training", "one base model at default")
    assert claim.decided_by.endswith("(explained)") and claim.unexplained == []


def test_diagnostics_round_trip_through_claim_json():
    import json

    claim = diagnose(_claim(controls=[]))
    again = ClaimResult.from_dict(json.loads(json.dumps(claim.to_dict())))
    assert again.to_dict() == claim.to_dict() and again.decided_by == "check: no negative control declared"


def test_paired_units_refuse_to_misalign():
    m = Metrics({})
    m.add_units("acc", "method", [0.9, 0.8, 0.7], ["seed0", "seed1", "seed2"])
    m.add_units("acc", "baseline", [0.6, 0.5, 0.4], ["seed2", "seed1", "seed0"])  # other order: realigned
    m.add_units("acc", "short", [0.6, 0.5], ["seed0", "seed1"])
    p = m.paired("acc", "method", "baseline")
    assert p["baseline"].labels == ("seed0", "seed1", "seed2") and list(p["baseline"]) == [0.4, 0.5, 0.6]
    gain = p["method"] - p["baseline"]
    assert isinstance(gain, UnitValues) and np.allclose(gain.values, [0.5, 0.3, 0.1])
    with pytest.raises(UnitsNotAligned, match="short"):
        m.paired("acc", "method", "short")
    with pytest.raises(UnitsNotAligned):
        m.unit("acc", "method") - m.unit("acc", "short")
    with pytest.raises(ValueError, match="twice"):
        m.add_units("acc", "method", [1.0], ["seed0"])
    assert m.flat()["baseline/seed2/acc"] == 0.6
    criterion = V.difference_criterion("gain", "s", p["method"], p["baseline"], 0.0, ">")
    assert criterion.labels == ("seed0", "seed1", "seed2") and criterion.unit_values == pytest.approx((0.5, 0.3, 0.1))
