"""Batched seeds and grid points of IBMD (issue 36 item 1): a grouped fit of several units equals the fits of each
unit alone (the same grouped module with one unit), to a stated float32 tolerance. Each unit draws its batches,
steps and noise from its own generator and keeps its own lr, Adam state and early stopping, so only the summation
order of a batched matmul may differ between the two (other kernels for another unit count)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.ibmd.config import BridgeConfig, Config, TeacherConfig
from models.ibmd.pipeline import Setup, fit_students, fit_teachers
from models.ibmd.training import UnitStopping

NET = TeacherConfig(hidden=16, layers=2, time_dim=8, steps=24, batch_size=16, epoch_steps=4, patience=2)
BRIDGE = BridgeConfig(steps=100)
# float32 weights after a few dozen Adam steps: the batched and the one-unit matmuls may round differently
# (another kernel, another summation order); 1e-4 is far below the lr-sized moves of one step (>= 1e-3).
TOL = dict(rtol=1e-4, atol=1e-4)


def _arrays():
    g = np.random.default_rng(0)
    x0 = g.normal(size=(512, 2)).astype(np.float32)
    x1 = (x0 + 0.1 * g.normal(size=x0.shape)).astype(np.float32)
    return {"x0_train": x0[:384], "x1_train": x1[:384], "x0_val": x0[384:], "x1_val": x1[384:]}


def _setup_and_cfg():
    cfg = Config(bridge=BRIDGE, many_nfe=5, eval_nfe=(1, 5))
    distill = cfg.distill.model_copy(
        update={"generator_steps": 6, "batch_size": 8, "bridge_loop": 2, "epoch_steps": 2, "patience": 2}
    )
    return cfg, Setup("toy_cond", "toy.npz", True, NET, distill, 3)


def _assert_units_equal(together, alone, g, net_name):
    a = getattr(together, net_name)
    b = getattr(alone, net_name)
    for (name, x), (_, y) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        torch.testing.assert_close(x[g], y[0], **TOL, msg=f"{net_name}.{name} of unit {g}")
    s, t = together.stopping, alone.stopping
    assert s.best_eval[g] == t.best_eval[0] and s.trained(g) == t.trained(0)
    assert s.best[g] == pytest.approx(t.best[0], rel=1e-4, abs=1e-6)


@pytest.mark.numerics
def test_grouped_teachers_equal_each_teacher_fitted_alone():
    cfg, setup = _setup_and_cfg()
    arrays = _arrays()
    lrs, seeds = [1e-3, 3e-3, 1e-2], [5, 6, 7]  # grid points and seeds at once: each unit its own lr and stream
    together = fit_teachers(cfg, setup, arrays, lrs, seeds, "together")
    for g in range(3):
        alone = fit_teachers(cfg, setup, arrays, [lrs[g]], [seeds[g]], "alone")
        _assert_units_equal(together, alone, g, "ema")
        assert len(together.unit_records[g]) == len(alone.unit_records[0])
    assert not torch.allclose(together.ema.layers[0].weight[0], together.ema.layers[0].weight[2])


@pytest.mark.numerics
def test_grouped_students_equal_each_student_fitted_alone():
    cfg, setup = _setup_and_cfg()
    arrays = _arrays()
    teachers = fit_teachers(cfg, setup, arrays, [3e-3, 3e-3], [1, 2], "teachers")
    nets = [teachers.ema.member(g, NET, BRIDGE).eval() for g in range(2)]
    lrs, seeds = [1e-3, 3e-3], [11, 12]
    together = fit_students(cfg, setup, nets, arrays, lrs, seeds, "together")
    for g in range(2):
        alone = fit_students(cfg, setup, [nets[g]], arrays, [lrs[g]], [seeds[g]], "alone")
        _assert_units_equal(together, alone, g, "generator_ema")
        _assert_units_equal(together, alone, g, "fake")
    assert together.x1_only_batches == together.batches > 0


def test_a_stopped_unit_keeps_its_best_and_the_others_run_on():
    stopping = UnitStopping(2, patience=2)
    stopping.update([1.0, 1.0])
    stopping.update([2.0, 0.5])
    stopping.update([2.0, 0.4])  # unit 0: two validations without improvement -> stopped at validation 2
    assert stopping.stopped_at == [2, -1] and not stopping.all_stopped
    assert stopping.update([0.1, 0.3]) == [False, True]  # a stopped unit never improves again
    assert stopping.best == [1.0, 0.3] and stopping.best_eval == [0, 3] and stopping.trained(0) == 3
