"""The cost cuts of IBMD's training change no value: each is checked against the computation it replaced."""

from __future__ import annotations

import copy

import lightning as L
import torch

from models.common.batches import Rows, random_batches, whole_batch
from models.common.diffusion import BridgeSchedule, sinusoidal_embedding
from models.common.lightning import fit
from models.ibmd.algorithm import bridge_matching_loss
from models.ibmd.config import BridgeConfig, Config, TeacherConfig
from models.ibmd.networks import BridgeNet
from models.ibmd.pipeline import Setup, fit_student, student_validation
from models.ibmd.training import BridgeMatching, EpochMeans, ema_update, fixed_validation_pairs

NET = TeacherConfig(hidden=16, layers=2, time_dim=8, steps=12, batch_size=16, epoch_steps=4, patience=2)
BRIDGE = BridgeConfig(steps=100)


def test_time_feature_table_is_the_per_call_embedding_bitwise():
    net = BridgeNet(2, NET, BRIDGE, cond=True)
    step = torch.randint(0, BRIDGE.steps, (257,), generator=torch.Generator().manual_seed(0))
    assert torch.equal(net.time_features[step], sinusoidal_embedding(net.times[step], NET.time_dim))
    assert "time_features" not in net.state_dict()  # saved weights keep their old keys


def test_multi_tensor_ema_is_the_per_parameter_lerp():
    torch.manual_seed(0)
    model, ema = BridgeNet(2, NET, BRIDGE, cond=True), BridgeNet(2, NET, BRIDGE, cond=True)
    expected = copy.deepcopy(ema)
    with torch.no_grad():
        for e, p in zip(expected.parameters(), model.parameters()):
            e.lerp_(p, 1 - 0.99)
    ema_update(ema, model, 0.99)
    for e, x in zip(ema.parameters(), expected.parameters()):
        torch.testing.assert_close(e, x, rtol=0, atol=1e-7)


def test_epoch_means_are_the_mean_of_the_steps_and_reset():
    means = EpochMeans()
    for value in (1.0, 2.0, 6.0):
        means.add({"a": torch.tensor(value), "b": torch.tensor(-value)})
    assert means.pop() == {"a": 3.0, "b": -3.0}
    means.add({"a": torch.tensor(5.0)})
    assert means.pop() == {"a": 5.0}


class PerStepLogging(BridgeMatching):
    """The replaced logging: Lightning's per-step ``self.log(on_epoch=True)``."""

    def training_step(self, batch, batch_idx):
        x0, x1 = batch
        step = torch.randint(0, self.bridge.n_steps, (len(x0),))
        loss = bridge_matching_loss(self.net, self.bridge, x0, x1, step)
        self.log("train/loss", loss, on_step=False, on_epoch=True, batch_size=len(x0))
        return loss

    def on_train_epoch_end(self) -> None:
        pass


def _teacher_curve(module_class) -> list[dict]:
    bridge = BridgeSchedule.i2sb(BRIDGE.steps, BRIDGE.beta_max, BRIDGE.beta_min)
    g = torch.Generator().manual_seed(1)
    x0, x1 = torch.randn(256, 2, generator=g), torch.randn(256, 2, generator=g)
    L.seed_everything(0, verbose=False)
    module = module_class(BridgeNet(2, NET, BRIDGE, cond=True), bridge, NET, 1e-3)
    val = whole_batch(Rows(*fixed_validation_pairs(bridge, x0[:64], x1[:64], 0)))
    return fit(module, random_batches(Rows(x0, x1), NET.batch_size, NET.epoch_steps, 0), val, max_epochs=3, seed=0)


def test_epoch_mean_logging_gives_lightnings_epoch_curve():
    ours, lightning = _teacher_curve(BridgeMatching), _teacher_curve(PerStepLogging)

    def train_curve(records):
        return [(r["step"], r["train/loss"]) for r in records if "train/loss" in r]

    assert len(train_curve(ours)) == 3
    for (step_a, a), (step_b, b) in zip(train_curve(ours), train_curve(lightning), strict=True):
        assert step_a == step_b and abs(a - b) <= 1e-6 * max(1.0, abs(b))


def test_shared_student_validation_targets_give_the_same_fit_as_per_fit_ones():
    cfg = Config(bridge=BRIDGE, many_nfe=5, eval_nfe=(1, 5))
    distill = cfg.distill.model_copy(
        update={"generator_steps": 4, "batch_size": 8, "bridge_loop": 1, "epoch_steps": 2, "patience": 2}
    )
    setup = Setup("toy_cond", "toy.npz", True, NET, distill, 1)
    teacher = BridgeNet(2, NET, BRIDGE, cond=True).eval()
    g = torch.Generator().manual_seed(2)
    arrays = {"x1_train": torch.randn(128, 2, generator=g).numpy(), "x1_val": torch.randn(32, 2, generator=g).numpy()}
    shared = student_validation(cfg, setup, teacher, arrays, 7)
    own_score, own = fit_student(cfg, setup, teacher, arrays, 1e-3, 7)
    shared_score, fitted = fit_student(cfg, setup, teacher, arrays, 1e-3, 7, shared)
    assert own_score == shared_score
    for a, b in zip(own.module.generator_ema.parameters(), fitted.module.generator_ema.parameters()):
        assert torch.equal(a, b)
