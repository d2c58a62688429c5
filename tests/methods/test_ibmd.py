"""ibmd: the bridge networks, the IBMD losses and their gradient, data, metrics, and the smoke pipeline."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from models.base import Metrics, ValidationError
from models.common.diffusion import BridgeSchedule
from models.common.runtime import set_threads
from models.ibmd import SPEC
from models.ibmd.algorithm import (
    InverseBridgeMatching,
    bridge_matching_loss,
    convergence_condition,
    corrupted_only_loader,
    energy_distance,
    generator_loss,
    loss_weight,
    mean_pairwise_distance,
    sliced_w2,
)
from models.ibmd.config import BridgeConfig, Config, DataConfig, DistillConfig, TeacherConfig
from models.ibmd.data import (
    circle_means,
    corrupt_toy,
    load_pairs,
    make_digits,
    make_toy,
    pool_upsample,
    sample_toy_posterior,
    sample_toy_x0,
)
from models.ibmd.networks import BridgeNet, OneStepGenerator, network_times, with_noise_inputs
from models.ibmd.pipeline import EVAL_BLOCKS, blocks

set_threads()  # tiny tensors: OpenMP threads beyond the free cores only add contention

NET = TeacherConfig(hidden=32, layers=2, time_dim=8)
BRIDGE = BridgeConfig(steps=100)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def perturbed(net: BridgeNet, seed: int) -> BridgeNet:
    """A copy of ``net`` with every weight moved a little (a stand-in for a trained fake bridge)."""
    other = BridgeNet(net.dim, NET, BRIDGE, net.cond, net.noise_dim)
    other.load_state_dict(net.state_dict())
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    return other


# ----------------------------------------------------------------------------- networks


def test_network_time_and_bridge_tables_follow_i2sb():
    times = network_times(BridgeConfig())
    assert times[0].item() == pytest.approx(1e-4 * 1000) and times[-1].item() == pytest.approx(1000)
    net = BridgeNet(2, NET, BRIDGE, cond=False)
    bridge = BridgeSchedule.i2sb(100, 0.3)
    assert torch.allclose(net.std_fwd, bridge.std_fwd.float())
    mu0, mu1, std = bridge.coefficients
    f2, b2 = bridge.std_fwd**2, bridge.std_bwd**2
    assert torch.allclose(mu0 + mu1, torch.ones(100, dtype=torch.float64))
    assert torch.allclose(std**2, f2 * b2 / (f2 + b2))
    assert torch.equal(bridge.betas, bridge.betas.flip(0))  # the mirrored schedule is symmetric


@pytest.mark.parametrize("cond", [True, False])
def test_student_with_zero_noise_inputs_is_the_teachers_one_step_prediction(cond):
    teacher = perturbed(BridgeNet(2, NET, BRIDGE, cond), 1)  # nonzero everywhere
    student = OneStepGenerator(with_noise_inputs(teacher, NET, BRIDGE, noise_dim=3))
    x1 = torch.randn(256, 2)
    step = torch.full((256,), 99)
    reference = teacher.pred_x0(x1, step, x1 if cond else None)
    for seed in range(3):
        z = 5 * torch.randn(256, 3, generator=torch.Generator().manual_seed(seed))
        assert (student(x1, z) - reference).abs().max().item() <= 1e-6
    # Once the noise weights move, z changes the output: the student can represent a multimodal p(x0 | x1).
    with torch.no_grad():
        student.net.mlp[0].weight[:, -3:].normal_()
    assert (student(x1, torch.zeros(256, 3)) - student(x1, torch.ones(256, 3))).abs().max() > 1e-3


def test_pred_x0_is_xt_minus_sigma_fwd_times_eps():
    net = BridgeNet(2, NET, BRIDGE, cond=True)
    x_t, x1, step = torch.randn(5, 2), torch.randn(5, 2), torch.tensor([0, 10, 50, 98, 99])
    assert torch.allclose(net.pred_x0(x_t, step, x1), x_t - net.std_fwd[step][:, None] * net(x_t, step, x1))
    with pytest.raises(ValueError):
        net(x_t, step)  # a conditional network needs x1


# ----------------------------------------------------------------------------- losses


class Constant(torch.nn.Module):
    """A 'bridge network' whose x0 prediction is a fixed value (the posterior mean of a point mass)."""

    cond = False

    def __init__(self, value: torch.Tensor) -> None:
        super().__init__()
        self.value = value

    def pred_x0(self, x_t, step, x1=None):
        return self.value.expand_as(x_t)


def test_bridge_matching_loss_vanishes_at_the_posterior_mean_and_weights_by_t():
    bridge = BridgeSchedule.i2sb(100, 0.3)
    x0 = torch.tensor([[0.5, -1.0]]).expand(64, 2)
    x1 = torch.randn(64, 2)
    step = torch.randint(0, 99, (64,))
    assert bridge_matching_loss(Constant(x0[:1]), bridge, x0, x1, step).item() == 0
    wrong = Constant(torch.tensor([[0.5, 0.0]]))
    assert bridge_matching_loss(wrong, bridge, x0, x1, step).item() == pytest.approx(0.5)  # mean_d of (0, 1)
    assert bridge_matching_loss(
        wrong, bridge, x0, x1, torch.zeros(64, dtype=torch.long), coeff=2.0
    ).item() == pytest.approx(50)
    assert loss_weight(torch.tensor([0, 50, 100]), 100, 2.0).tolist() == pytest.approx([100, 10, 1])


def test_generator_gradient_is_twice_fake_minus_teacher_prediction():
    """d loss / d x0 = 2 w (x0_hat^phi - x0_hat*) / (B d): the DMD/SiD-like direction of the paper."""
    bridge = BridgeSchedule.i2sb(100, 0.3)
    teacher = BridgeNet(2, NET, BRIDGE, cond=True)
    fake = perturbed(teacher, 2)
    x1, step = torch.randn(32, 2), torch.randint(0, 99, (32,))
    x0 = torch.randn(32, 2, requires_grad=True)
    torch.manual_seed(5)
    loss, _ = generator_loss(teacher, fake, bridge, x0, x1, step, coeff=1.0)
    loss.backward()
    torch.manual_seed(5)  # the same bridge noise: the same x_t
    x_t = bridge.q_sample(step, x0.detach(), x1)
    with torch.no_grad():
        direction = fake.pred_x0(x_t, step, x1) - teacher.pred_x0(x_t, step, x1)
    w = loss_weight(step, 100, 1.0)[:, None]
    assert torch.allclose(x0.grad, 2 * w * direction / x0.numel(), atol=1e-7)


def test_generator_loss_is_zero_when_the_fake_bridge_equals_the_teacher():
    bridge = BridgeSchedule.i2sb(100, 0.3)
    teacher = BridgeNet(2, NET, BRIDGE, cond=False)
    x0 = torch.randn(16, 2, requires_grad=True)
    loss, _ = generator_loss(teacher, teacher, bridge, x0, torch.randn(16, 2), torch.randint(0, 99, (16,)))
    loss.backward()
    assert loss.item() == 0 and x0.grad.abs().max().item() == 0  # IBMD's fixed point: no signal left


def test_convergence_condition_is_zero_for_the_conditional_mean():
    x0 = torch.randn(1000, 2)
    mean = x0.mean(0, keepdim=True).expand_as(x0)
    assert convergence_condition(mean, x0).item() == pytest.approx(0, abs=1e-6)
    assert convergence_condition(x0 + 1.0, x0).item() > 0.5


# ----------------------------------------------------------------------------- distillation data


def test_distillation_loader_yields_only_x1_and_the_module_refuses_pairs():
    x1 = torch.randn(100, 2)
    cfg = DistillConfig(batch_size=8, bridge_loop=3, noise_dim=2)
    batches = list(corrupted_only_loader(x1, cfg, batches_per_epoch=4, seed=0))
    assert len(batches) == 4
    for batch in batches:
        assert torch.is_tensor(batch) and batch.shape == (32, 2)
        assert all((x1 == row).all(1).any() for row in batch)  # rows of x1, nothing else
    teacher = BridgeNet(2, NET, BRIDGE, cond=True)
    module = InverseBridgeMatching(
        OneStepGenerator(with_noise_inputs(teacher, NET, BRIDGE, 2)),
        perturbed(teacher, 1),
        teacher,
        BridgeSchedule.i2sb(100, 0.3),
        cfg,
    )
    assert module.split(batches[0]).shape == (4, 8, 2)
    with pytest.raises(TypeError):
        module.split((torch.randn(32, 2), torch.randn(32, 2)))  # an (x0, x1) pair is rejected
    assert module.x1_only_batches == 1 and module.batches == 2


# ----------------------------------------------------------------------------- data


def test_toy_corruption_and_its_exact_posterior():
    cfg = DataConfig()
    rng = np.random.default_rng(0)
    x0 = sample_toy_x0(50_000, cfg, rng)
    assert np.allclose(np.linalg.norm(circle_means(2.0), axis=1), 2.0)
    x1 = corrupt_toy(x0, cfg, rng)
    assert np.all(x1[:, 1] == 0) and np.std(x1[:, 0] - x0[:, 0]) == pytest.approx(0.05, rel=0.05)
    # The posterior at x1 = (0, 0) puts half its mass near (0, 2) and half near (0, -2).
    post = sample_toy_posterior(np.zeros((20_000, 2)), cfg, rng)
    assert np.mean(post[:, 1] > 1.5) == pytest.approx(0.5, abs=0.02)
    assert np.mean(np.abs(post[:, 1]) > 1.5) > 0.99 and np.std(post[:, 0]) == pytest.approx(
        0.1 * 0.05 / math.sqrt(0.0125), rel=0.05
    )
    # Against rejection from the joint: x0 whose x1 fell near 1.7 (between two modes).
    near = np.abs(x1[:, 0] - 1.7) < 0.02
    post = sample_toy_posterior(np.tile([[1.7, 0.0]], (20_000, 1)), cfg, rng)
    assert np.mean(np.abs(post[:, 1]) < 0.5) == pytest.approx(np.mean(np.abs(x0[near, 1]) < 0.5), abs=0.06)
    assert np.mean(post[:, 0]) == pytest.approx(np.mean(x0[near, 0]), abs=0.03)


def test_toy_and_digits_files_are_deterministic():
    cfg = DataConfig(toy_train=100, toy_test=64, digits_train_copies=1, digits_test_copies=2)
    a, b = make_toy(cfg, 3), make_toy(cfg, 3)
    assert (
        all(np.array_equal(a[k], b[k]) for k in a) and a["x0_train"].shape == (100, 2) and a["x1_test"].shape == (64, 2)
    )
    digits = make_digits(cfg, 0)
    n_test = digits["x0_test"].shape[0] // 2
    assert digits["x0_test"].shape[1] == 64 and np.array_equal(digits["x0_test"][:n_test], digits["x0_test"][n_test:])
    assert digits["x0_train"].min() >= -1 and digits["x0_train"].max() <= 1


def test_digit_corruption_is_a_blockwise_mean():
    images = np.random.default_rng(0).random((3, 8, 8))
    low = pool_upsample(images)
    blocks = images.reshape(3, 4, 2, 4, 2).mean((2, 4))
    assert np.allclose(low[:, ::2, ::2], blocks) and np.allclose(low[:, 1::2, 1::2], blocks)
    assert np.allclose(low.mean((1, 2)), images.mean((1, 2)))


def test_user_pairs_loader(tmp_path):
    x0 = np.arange(40, dtype=np.float32).reshape(10, 2, 2)
    np.savez(tmp_path / "pairs.npz", x0=x0, x1=x0 + 0.5)
    pairs = load_pairs(tmp_path / "pairs.npz", 0.2, seed=0)
    assert pairs["x0_train"].shape == (8, 4) and pairs["x1_test"].shape == (2, 4)
    assert np.allclose(pairs["x1_train"] - pairs["x0_train"], 0.5)  # rows stay paired after shuffling
    np.savez(tmp_path / "bad.npz", x0=x0)
    with pytest.raises(ValueError, match="x1"):
        load_pairs(tmp_path / "bad.npz", 0.2, 0)
    np.savez(tmp_path / "bad2.npz", x0=x0, x1=x0[:5])
    with pytest.raises(ValueError):
        load_pairs(tmp_path / "bad2.npz", 0.2, 0)


# ----------------------------------------------------------------------------- metrics


def test_energy_distance_against_scipy_and_closed_forms():
    from scipy.stats import energy_distance as scipy_ed

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(300, 1, generator=g), 0.5 + torch.randn(400, 1, generator=g)
    ed = energy_distance(x, y)
    # scipy: sqrt of the V-statistic (= 2 int (F - G)^2 in 1-D), whose self-terms are (n-1)/n of ours.
    xx = torch.cdist(x.double(), x.double()).sum().item() / (300 * 299)
    yy = torch.cdist(y.double(), y.double()).sum().item() / (400 * 399)
    v_stat = ed + xx / 300 + yy / 400
    assert math.sqrt(v_stat) == pytest.approx(scipy_ed(x[:, 0].numpy(), y[:, 0].numpy()), rel=1e-4)
    assert energy_distance(torch.zeros(50, 2), torch.tensor([[3.0, 4.0]]).expand(60, 2)) == pytest.approx(10.0)
    same = energy_distance(torch.randn(2000, 2, generator=g), torch.randn(2000, 2, generator=g))
    assert abs(same) < 0.01
    # Paired samples (x_i, y_i share x1): the dependent pairs (i, i) leave the cross term. With y = x the two
    # laws are equal, so the paired estimate is exactly 0; the unpaired one is biased by -2 E|X - X'| / n.
    z = torch.randn(40, 3, generator=g)
    m = mean_pairwise_distance(z, z, True)
    assert energy_distance(z, z.clone(), paired=True) == pytest.approx(0.0, abs=1e-9)
    assert energy_distance(z, z.clone()) == pytest.approx(-2 * m / 40, rel=1e-9)


def test_sliced_w2_of_a_shift_and_in_one_dimension():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2000, 1, generator=g)
    y = torch.randn(2000, 1, generator=g) * 2
    exact = math.sqrt(((x.sort(0)[0] - y.sort(0)[0]) ** 2).mean().item())
    assert sliced_w2(x, y) == pytest.approx(exact, rel=1e-6)  # in 1-D every direction is +-1
    x = torch.randn(1000, 4, generator=g)
    shift = torch.tensor([2.0, 0.0, 0.0, 0.0])
    # W2^2 of a shift projected on theta is (theta . shift)^2, with mean |shift|^2 / d over the sphere.
    assert sliced_w2(x, x + shift, n_projections=4000) == pytest.approx(2.0 / math.sqrt(4), rel=0.05)


# ----------------------------------------------------------------------------- config


def test_config_rejects_bad_values():
    with pytest.raises(ValidationError):
        Config.for_scale("default", {"many_nfe": 1000})
    with pytest.raises(ValidationError):
        Config.for_scale("default", {"toy_variants": ("uncond",)})
    with pytest.raises(ValidationError):
        Config.for_scale("default", {"distill.lr": 0.0})
    with pytest.raises(ValidationError):
        Config.for_scale("default", {"bridge.steps": 999})
    with pytest.raises(ValidationError):
        Config.for_scale("default", {"data.pairs_npz": "../outside.npz"})
    assert Config.for_scale("smoke").teacher.steps < Config().teacher.steps


# ----------------------------------------------------------------------------- pipeline


def test_smoke_pipeline(tmp_path):
    from tasks import steps

    cfg = SPEC.make_config("smoke")
    steps.prepare(SPEC, cfg, tmp_path)
    artifacts = steps.train(SPEC, cfg, tmp_path)
    assert {"baseline", "method", "baseline_digits", "method_digits"} <= set(artifacts.history)
    assert any("train/fake_loss" in r for r in artifacts.history["method"])
    metrics, result = steps.evaluate(SPEC, cfg, tmp_path)
    v = metrics.values
    assert not metrics.non_finite()
    for setup in ("toy_cond", "digits"):
        assert v[f"method/{setup}_x1_only_fraction"] == 1.0 and v[f"method/{setup}_init_gap"] <= 1e-6
        assert v[f"method/{setup}_ed"] >= -0.05 and f"baseline/{setup}_ed_nfe10" in v
    assert 0 <= v["method/toy_cond_frac_bimodal"] <= 1 and 0.5 < v["oracle/toy_cond_truth_frac_bimodal"] < 1
    assert abs(v["oracle/toy_cond_frac_bimodal"] - v["oracle/toy_cond_truth_frac_bimodal"]) < 0.1  # the exact posterior
    assert result.sane and result.verdict in ("holds", "fails", "inconclusive")
    assert "toy_cond_ed_ratio_ibmd_to_teacher_nfe1" in result.figures
    assert {c.name for c in result.criteria} == {
        "toy_cond_ed_vs_teacher_nfe10",
        "toy_cond_ed_vs_teacher_nfe1",
        "toy_cond_bimodal_gap_to_truth",
    }
    gap = result.criterion("toy_cond_bimodal_gap_to_truth")
    # Equal-size blocks: the blocks' mean fraction is the pooled fraction over the blocked pairs.
    assert gap.n_units == EVAL_BLOCKS and gap.low <= gap.estimate <= gap.high
    assert sum(b.stop - b.start for b in blocks(512)) == 512  # smoke's 512 test pairs all fall in a block
    block_truth = [v[f"oracle/toy_cond_truth_block{b}_frac_bimodal"] for b in range(EVAL_BLOCKS)]
    assert np.mean(block_truth) == pytest.approx(v["oracle/toy_cond_truth_frac_bimodal"])
    ed = result.criterion("toy_cond_ed_vs_teacher_nfe1")
    blocks_ed = [
        v[f"method/toy_cond_block{b}_ed"] - 0.5 * v[f"baseline/toy_cond_block{b}_ed_nfe1"] for b in range(EVAL_BLOCKS)
    ]
    assert ed.estimate == pytest.approx(np.mean(blocks_ed)) and ed.interval == "t"
    assert {p.name for p in metrics.figures} >= {"toy_samples.png", "energy_distance_vs_nfe.png", "digits_samples.png"}
    model = SPEC.module().load_model(cfg, steps.Layout(tmp_path, SPEC).model_dir)
    x1 = torch.zeros(64, 2)
    out = model(x1, torch.randn(64, model.noise_dim))
    assert isinstance(model, OneStepGenerator) and out.shape == (64, 2) and torch.isfinite(out).all()


# ----------------------------------------------------------------------------- claim


def _claim_of(ed_ibmd, ed_one, ed_many, frac, truth):
    """claim() on hand-built per-block metrics of one conditional toy setup (smoke: NFE 10 is "many")."""
    cfg = Config.for_scale("smoke", {"data.digits": False})
    v = {
        "method/toy_cond_x1_only_fraction": 1.0,
        "method/toy_cond_init_gap": 0.0,
        "method/toy_cond_convergence_fake": 0.0,
        "method/toy_cond_fake_loss": 0.1,
    }
    for b in range(EVAL_BLOCKS):
        v[f"method/toy_cond_block{b}_ed"] = ed_ibmd[b]
        v[f"baseline/toy_cond_block{b}_ed_nfe1"] = ed_one[b]
        v[f"baseline/toy_cond_block{b}_ed_nfe10"] = ed_many[b]
        v[f"method/toy_cond_block{b}_frac_bimodal"] = frac[b]
        v[f"oracle/toy_cond_truth_block{b}_frac_bimodal"] = truth[b]
    pooled = {
        "method/toy_cond_ed": np.mean(ed_ibmd),
        "baseline/toy_cond_ed_nfe1": np.mean(ed_one),
        "baseline/toy_cond_ed_nfe10": np.mean(ed_many),
        "method/toy_cond_frac_bimodal": np.mean(frac),
        "oracle/toy_cond_truth_frac_bimodal": np.mean(truth),
        "baseline/toy_cond_frac_bimodal_nfe1": 0.1,
        "baseline/toy_cond_frac_bimodal_nfe10": np.mean(truth),
    }
    return SPEC.module().claim(cfg, Metrics({**v, **{k: float(x) for k, x in pooled.items()}}))


def test_claim_states_follow_the_block_intervals():
    n = EVAL_BLOCKS
    alternating = np.array([1.0, -1.0] * (n // 2))
    truth = np.full(n, 0.75)
    # IBMD clearly below 0.5x the one-step teacher and 1.5x the many-step teacher on every block; bimodal gap ~0.02.
    good = _claim_of(np.full(n, 0.010) + 1e-4 * alternating, np.full(n, 0.2), np.full(n, 0.01), truth - 0.02, truth)
    assert good.verdict == "holds" and good.sane
    assert good.criterion("toy_cond_ed_vs_teacher_nfe10").estimate == pytest.approx(0.010 - 1.5 * 0.01)
    assert good.criterion("toy_cond_bimodal_gap_to_truth").estimate == pytest.approx(0.02)
    # The excess over 1.5x the many-step teacher straddles 0 across blocks (mean ~0, spread 0.01): inconclusive.
    straddle = _claim_of(0.015 + 0.01 * alternating, np.full(n, 0.2), np.full(n, 0.01), truth - 0.02, truth)
    c = straddle.criterion("toy_cond_ed_vs_teacher_nfe10")
    assert c.low < 0 < c.high and c.state == "inconclusive" and straddle.verdict == "inconclusive"
    # The student keeps the one-step mean's collapse (fraction 0.2 vs 0.75 on every block): the gap fails.
    collapsed = _claim_of(
        np.full(n, 0.010) + 1e-4 * alternating,
        np.full(n, 0.2),
        np.full(n, 0.01),
        np.full(n, 0.2) + 0.01 * alternating,
        truth,
    )
    assert collapsed.criterion("toy_cond_bimodal_gap_to_truth").state == "fails" and collapsed.verdict == "fails"
    # A gap of ~0.1 with block noise straddles the tolerance.
    edge = _claim_of(
        np.full(n, 0.010) + 1e-4 * alternating,
        np.full(n, 0.2),
        np.full(n, 0.01),
        truth - 0.1 + 0.05 * alternating,
        truth,
    )
    assert edge.criterion("toy_cond_bimodal_gap_to_truth").state == "inconclusive"
