"""The cost cuts of IBMD change no value (the float32 distance sums none beyond 1e-6): each is checked against
the computation it replaced."""

from __future__ import annotations

import copy

import lightning as L
import pytest
import torch

from models.common.batches import Rows, random_batches, whole_batch
from models.common.diffusion import BridgeSchedule, sinusoidal_embedding
from models.common.lightning import fit
from models.ibmd.algorithm import (
    SlicedReference,
    bimodal_fraction,
    bridge_matching_loss,
    convergence_condition,
    energy_distance,
    generator_loss,
    mean_pairwise_distance,
    sliced_w2,
    teacher_sample,
)
from models.ibmd.config import BridgeConfig, Config, TeacherConfig
from models.ibmd.networks import BridgeNet
from models.ibmd.pipeline import Setup, fit_student, student_validation
from models.ibmd.training import (
    BridgeMatching,
    EpochMeans,
    InverseBridgeMatching,
    add_convergence_trace,
    ema_update,
    fixed_validation_pairs,
)

NET = TeacherConfig(hidden=16, layers=2, time_dim=8, steps=12, batch_size=16, epoch_steps=4, patience=2)
BRIDGE = BridgeConfig(steps=100)


def test_time_feature_table_is_the_per_call_embedding_bitwise():
    net = BridgeNet(2, NET, BRIDGE, cond=True)
    step = torch.randint(0, BRIDGE.steps, (257,), generator=torch.Generator().manual_seed(0))
    # A table computed once against the embedding computed per batch: vectorised sin/cos over other lengths
    # (SIMD body against scalar tail) may round differently on other hosts.
    torch.testing.assert_close(
        net.time_features[step], sinusoidal_embedding(net.times[step], NET.time_dim), rtol=1e-6, atol=1e-6
    )
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
        optimiser = self.optimizers()
        optimiser.zero_grad()
        self.manual_backward(loss)
        optimiser.step()
        self.lr_schedulers().step()
        return loss.detach()

    def on_train_epoch_end(self) -> None:
        pass


class AutomaticOptimisation(BridgeMatching):
    """The replaced teacher loop: Lightning's automatic optimisation (closure, then the scheduler)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.automatic_optimization = True

    def training_step(self, batch, batch_idx):
        x0, x1 = batch
        step = torch.randint(0, self.bridge.n_steps, (len(x0),))
        loss = bridge_matching_loss(self.net, self.bridge, x0, x1, step)
        self.epoch_means.add({"train/loss": loss})
        return loss


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


def _float64_mean_distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """The replaced sum: the whole distance matrix cast to float64."""
    return torch.cdist(a, b).double().sum().item() / (len(a) * len(b))


def test_float32_row_sums_match_the_float64_matrix_sum():
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(4096, 4, generator=g), 2 + torch.randn(3000, 4, generator=g)
    exact = _float64_mean_distance(a, b)
    assert abs(mean_pairwise_distance(a, b) - exact) <= 1e-6 * exact
    # The energy distance of two samples of one law (~1e-3 here: the size of the noise floor) to 1e-6.
    x, y = torch.randn(2048, 4, generator=g), torch.randn(2048, 4, generator=g)
    old = 2 * _float64_mean_distance(x, y) - _float64_mean_distance(x, x) - _float64_mean_distance(y, y)
    new = 2 * mean_pairwise_distance(x, y) - mean_pairwise_distance(x, x) - mean_pairwise_distance(y, y)
    assert abs(new - old) <= 1e-6
    # Identical inputs cancel to float32 rounding (the self term sums only the upper block triangle).
    assert abs(energy_distance(x, x.clone(), paired=True)) <= 1e-7


def test_symmetric_self_distance_equals_the_full_matrix():
    """``a is b``: the blocks above the diagonal counted twice equal the whole matrix (odd sizes, ragged chunks)."""
    g = torch.Generator().manual_seed(5)
    for n in (1, 7, 513, 1500):
        a = torch.randn(n, 4, generator=g)
        exact = _float64_mean_distance(a, a)
        for chunk in (5, 512, 2048):
            assert abs(mean_pairwise_distance(a, a, chunk=chunk) - exact) <= 1e-6 * max(exact, 1e-12)
            assert abs(
                mean_pairwise_distance(a, a, chunk=chunk) - mean_pairwise_distance(a, a.clone(), chunk=chunk)
            ) <= 1e-6 * max(exact, 1e-12)


def test_shared_sliced_reference_is_the_per_call_sliced_w2_bitwise():
    g = torch.Generator().manual_seed(4)
    y = torch.randn(512, 4, generator=g)
    reference = SlicedReference(y, seed=9)
    for shift in (0.0, 0.5):
        x = shift + torch.randn(512, 4, generator=g)
        assert reference.sliced_w2(x) == sliced_w2(x, y, seed=9)


class ValidationHookTrace(BridgeMatching):
    """The replaced trace: the NFE-many bimodal fraction computed in every validation hook."""

    def __init__(self, *args, trace_x1: torch.Tensor, trace_nfe: int) -> None:
        super().__init__(*args)
        self.trace_x1, self.trace_nfe = trace_x1, trace_nfe

    def on_validation_epoch_end(self) -> None:
        x0 = teacher_sample(self.ema, self.bridge, self.trace_x1, self.trace_nfe, torch.Generator().manual_seed(0))
        self.log("val/frac_bimodal_many", bimodal_fraction(x0, 0.5))


def assert_records_close(a: list[dict], b: list[dict], rel: float = 1e-5) -> None:
    assert [r.keys() for r in a] == [r.keys() for r in b]
    for x, y in zip(a, b):
        assert x == pytest.approx(y, rel=rel, abs=1e-6)


def _traced_teacher(module_class, **kwargs) -> tuple[BridgeMatching, list[dict]]:
    bridge = BridgeSchedule.i2sb(BRIDGE.steps, BRIDGE.beta_max, BRIDGE.beta_min)
    g = torch.Generator().manual_seed(1)
    x0 = torch.randn(256, 2, generator=g) + torch.tensor([0.0, 2.0]) * torch.randint(-1, 2, (256, 1), generator=g)
    x1 = x0 * torch.tensor([1.0, 0.0])
    L.seed_everything(0, verbose=False)
    module = module_class(BridgeNet(2, NET, BRIDGE, cond=True), bridge, NET, 3e-3, **kwargs)
    val = whole_batch(Rows(*fixed_validation_pairs(bridge, x0[:64], x1[:64], 0)))
    loader = random_batches(Rows(x0, x1), NET.batch_size, NET.epoch_steps, 0)
    return module, fit(module, loader, val, max_epochs=3, seed=0)


def test_convergence_trace_after_the_fit_is_the_validation_hooks_bitwise():
    trace_x1 = (torch.randn(64, 2, generator=torch.Generator().manual_seed(5)) * torch.tensor([1.0, 0.0])).contiguous()
    hook, hook_records = _traced_teacher(ValidationHookTrace, trace_x1=trace_x1, trace_nfe=5)
    kept, records = _traced_teacher(BridgeMatching, keep_trace=True)
    assert len(kept.trace_weights) == 3
    add_convergence_trace(kept, records, trace_x1, 5, 0.5)
    assert records == hook_records  # every record, the trace included, bit for bit
    assert sum("val/frac_bimodal_many" in r for r in records) == 3
    for a, b in zip(kept.ema.parameters(), hook.ema.parameters()):
        assert torch.equal(a, b)


class PerChunkGenerator(InverseBridgeMatching):
    """The replaced student step: one generator call per fake-bridge chunk (the rest as before)."""

    def training_step(self, batch, batch_idx):
        chunks = self.split(batch)
        opt_g, opt_f = self.optimizers()
        for x1 in chunks[:-1]:
            with torch.no_grad():
                x0 = self.generator(x1)
            fake_loss = bridge_matching_loss(self.fake, self.bridge, x0, x1, self.steps(len(x1)))
            opt_f.zero_grad()
            self.manual_backward(fake_loss)
            opt_f.step()
        x1 = chunks[-1]
        x0 = self.generator(x1)
        gen_loss, fake_x0 = generator_loss(self.teacher, self.fake, self.bridge, x0, x1, self.steps(len(x1)))
        opt_g.zero_grad()
        self.manual_backward(gen_loss)
        opt_g.step()
        ema_update(self.generator_ema, self.generator, self.cfg.student_ema)
        logs = {
            "fake_loss": fake_loss,
            "generator_loss": gen_loss,
            "convergence": convergence_condition(fake_x0, x0.detach()),
        }
        self.epoch_means.add({f"train/{k}": v for k, v in logs.items()})
        return (fake_loss + gen_loss).detach()


@pytest.mark.numerics
def test_one_generator_call_for_all_fake_chunks_gives_the_per_chunk_fit(monkeypatch):
    import models.ibmd.pipeline as pipeline

    cfg = Config(bridge=BRIDGE, many_nfe=5, eval_nfe=(1, 5))
    distill = cfg.distill.model_copy(
        update={"generator_steps": 6, "batch_size": 8, "bridge_loop": 3, "epoch_steps": 3, "patience": 2}
    )
    setup = Setup("toy_cond", "toy.npz", True, NET, distill, 1)
    teacher = BridgeNet(2, NET, BRIDGE, cond=True).eval()
    g = torch.Generator().manual_seed(2)
    arrays = {"x1_train": torch.randn(128, 2, generator=g).numpy(), "x1_val": torch.randn(32, 2, generator=g).numpy()}
    shared = student_validation(cfg, setup, teacher, arrays, 7)
    _, batched = fit_student(cfg, setup, teacher, arrays, 1e-3, 7, shared)
    monkeypatch.setattr(pipeline, "InverseBridgeMatching", PerChunkGenerator)
    _, per_chunk = fit_student(cfg, setup, teacher, arrays, 1e-3, 7, shared)
    assert isinstance(per_chunk.module, PerChunkGenerator)
    # One generator call on all chunks against one per chunk: matmuls of other row counts may take other kernels.
    assert_records_close(batched.records, per_chunk.records)
    for a, b in zip(batched.module.generator_ema.parameters(), per_chunk.module.generator_ema.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(batched.module.fake.parameters(), per_chunk.module.fake.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_manual_teacher_optimisation_is_lightnings_automatic_loop_bitwise():
    manual, manual_records = _traced_teacher(BridgeMatching)
    automatic, automatic_records = _traced_teacher(AutomaticOptimisation)
    assert manual_records == automatic_records
    assert manual.lr_schedulers().last_epoch == automatic.lr_schedulers().last_epoch == 3 * NET.epoch_steps
    for a, b in zip(manual.ema.parameters(), automatic.ema.parameters()):
        assert torch.equal(a, b)
