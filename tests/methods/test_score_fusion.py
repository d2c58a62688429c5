"""score_fusion: the fusion formula and its initialisation, slicing, the 2.5-D inputs, self-consistency,
metrics against brute-force references, data and the NIfTI loader, and the smoke pipeline."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from models.base import ClaimResult, Metrics, TrainedArtifacts, ValidationError, read_dataset
from models.common.diffusion import DDPMSchedule, linear_betas
from models.common.runtime import set_threads
from models.score_fusion import SPEC
from models.score_fusion.algorithm import (
    FusionTraining,
    SliceSet,
    VolumeSet,
    finite_difference_errors,
    hybrid_loss,
    pool_zero_projection,
    psnr,
    sample,
    ssim3d,
    stratified_steps,
    tpdm_eps,
)
from models.score_fusion.config import Config, DataConfig, FusionTrainConfig, NetConfig, SliceNetConfig
from models.score_fusion.data import load_brats, make_phantoms, pool_upsample
from models.score_fusion.networks import (
    ScoreFusion,
    SliceModel,
    UNet,
    eps_net,
    from_slices,
    fuse,
    fusion_coefficients,
    make_cond,
    neighbour_volume,
    slice_inputs,
    to_slices,
)

set_threads()

SLICE = SliceNetConfig(width=8, layers=3, time_dim=8)
FUSION = NetConfig(width=8, layers=3, time_dim=8)
SCHEDULE = DDPMSchedule(linear_betas(100))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def perturbed(module: torch.nn.Module, scale: float = 0.3) -> torch.nn.Module:
    """Move every weight (a stand-in for trained weights; the fusion net's zero last layer included)."""
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn_like(p))
    return module


def volumes(b: int = 2, shape=(4, 6, 8)) -> tuple[torch.Tensor, torch.Tensor]:
    x_t = torch.randn(b, 1, *shape)
    lr = torch.from_numpy(pool_upsample(np.random.default_rng(0).uniform(-1, 1, (b, *shape)).astype(np.float32), 2))
    return x_t, make_cond(lr)


# ----------------------------------------------------------------------------- fusion


def test_fusion_formula_weights_sum_to_one_and_zero_weights_give_the_mean():
    eps, w = torch.randn(3, 3, 4, 4, 4), torch.randn(3, 3, 4, 4, 4)
    e1, e2, e3 = eps[:, 0:1], eps[:, 1:2], eps[:, 2:3]
    w0, w1, w2 = w[:, 0:1], w[:, 1:2], w[:, 2:3]
    brief = (w0 + 1 / 3) * e1 + (w1 + 1 / 3) * e2 + (1 / 3 - w0 - w1) * e3 + w2
    assert torch.allclose(fuse(eps, w), brief, atol=1e-5)
    assert torch.allclose(fusion_coefficients(w).sum(1), torch.ones(3, 4, 4, 4), atol=1e-6)
    assert torch.equal(fuse(eps, torch.zeros_like(w)), eps.mean(1, keepdim=True))
    # Only w2 is a free residual: it shifts the output one-for-one; w0 moves weight from eps3 to eps1.
    shift = torch.zeros_like(w)
    shift[:, 2] = 0.5
    assert torch.allclose(fuse(eps, shift), eps.mean(1, keepdim=True) + 0.5)
    tilt = torch.zeros_like(w)
    tilt[:, 0] = 2 / 3
    assert torch.allclose(fuse(eps, tilt), e1 - e3 / 3 + e2 / 3, atol=1e-6)


@pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")
def test_score_fusion_at_initialisation_is_exactly_merge_and_trains_only_the_fusion_net():
    model = ScoreFusion(SLICE, FUSION)
    for sm in model.slices:
        perturbed(sm)
    x_t, cond = volumes()
    t = torch.tensor([3, 70])
    with torch.no_grad():
        eps3 = model.eps_2d(x_t, cond, t)
        assert (eps3[:, 0] - eps3[:, 1]).abs().max() > 1e-2  # the three directions really differ
        assert (model(x_t, cond, t) - model.merge(x_t, cond, t)).abs().max() <= 1e-6
        assert model.weights(x_t, cond, t, eps3).abs().max() == 0  # zero-initialised last conv
    module = FusionTraining(model, SCHEDULE, FusionTrainConfig(steps=1, batch_size=2))
    r = torch.randn(2, 1, 4, 6, 8) * 0.1
    loss = module.shared_step((r, cond), "train", 0)
    loss.backward()
    assert all(p.grad is None for p in model.slices.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.fusion.parameters())
    perturbed(model.fusion)  # a trained fusion net no longer reproduces merge
    with torch.no_grad():
        assert (model(x_t, cond, t) - model.merge(x_t, cond, t)).abs().max() > 1e-3


def test_fusion_ema_follows_the_official_trainer_schedule():
    """The fusion stage's EMA callback: a copy of the fusion net every 10 optimiser steps until step 2000,
    then a 0.995 average every 10 steps (official step_ema after 0-based step s = our step s + 1), into
    the ``ema`` copy the module validates with; batches without an optimiser step leave it alone."""
    from types import SimpleNamespace

    module = FusionTraining(
        ScoreFusion(SLICE, FUSION),
        SCHEDULE,
        FusionTrainConfig(steps=1, batch_size=2, ema=0.995, ema_start=2000, ema_every=10),
    )
    (ema,) = module.configure_callbacks()
    ema.on_fit_start(None, module)
    trainer = SimpleNamespace(global_step=0)

    def step(k: int, value: float) -> float:
        """Optimiser step k left every fusion weight at ``value``; the EMA copy's weights after it."""
        for p in module.model.fusion.parameters():
            torch.nn.init.constant_(p, value)
        trainer.global_step = k
        ema.on_train_batch_end(trainer, module, None, None, 0)
        values = torch.cat([p.flatten() for p in module.ema.parameters()])
        assert torch.all(values == values[0])
        return float(values[0])

    assert step(1, 1.0) == 1.0  # official step 0: a copy
    assert step(6, 2.0) == 1.0  # not a multiple of 10: untouched
    assert step(1991, 3.0) == 3.0  # official step 1990: still a copy
    assert step(2001, 4.0) == pytest.approx(0.995 * 3.0 + 0.005 * 4.0)  # official 2000: the average starts
    assert step(2001, 9.0) == pytest.approx(0.995 * 3.0 + 0.005 * 4.0)  # same step (accumulating): untouched
    assert step(2004, 5.0) == pytest.approx(0.995 * 3.0 + 0.005 * 4.0)


def test_hybrid_loss_is_5_l1_plus_150_l2():
    a, b = torch.zeros(4), torch.tensor([1.0, -1.0, 2.0, 0.0])
    assert hybrid_loss(a, b, FusionTrainConfig()).item() == pytest.approx(5 * 1.0 + 150 * 1.5)
    assert hybrid_loss(a, b, FusionTrainConfig(loss="mse")).item() == pytest.approx(1.5)


# ----------------------------------------------------------------------------- slicing and 2.5-D inputs


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_slicing_is_an_exact_round_trip_and_picks_the_right_planes(axis):
    v = torch.randn(2, 3, 4, 5, 6)
    s = to_slices(v, axis)
    assert s.shape[0] == 2 * v.shape[2 + axis]
    assert torch.equal(from_slices(s, axis, 2), v)
    n = v.shape[2 + axis]
    assert torch.equal(s[n + 1], v[1].select(1 + axis, 1))  # volume 1, slice 1: a plane of that volume


def test_neighbour_slices_replicate_the_edges():
    lr = torch.arange(4.0).view(1, 1, 4, 1, 1).expand(1, 1, 4, 2, 2)
    nb = neighbour_volume(lr, 0, 2)[0, :, :, 0, 0]  # (5 offsets, 4 slices)
    assert nb.tolist() == [[0, 0, 0, 1], [0, 0, 1, 2], [0, 1, 2, 3], [1, 2, 3, 3], [2, 3, 3, 3]]


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_training_slices_equal_the_slices_the_volume_model_sees(axis):
    r, cond = volumes(3)
    lr = cond[:, 0]
    ref = slice_inputs(r, cond, axis, 1)
    data = SliceSet(r[:, 0], lr, axis, 1)
    idx = list(range(len(data)))
    x, c = data[idx]
    assert torch.equal(torch.cat([x, c], 1), ref)
    rv, cv = VolumeSet(r[:, 0], lr)[[2, 0]]
    assert torch.equal(rv, r[[2, 0]]) and torch.equal(cv, cond[[2, 0]])


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_a_slice_model_treats_slices_independently(axis):
    model = perturbed(SliceModel(axis, SLICE))
    x_t, cond = volumes(1)
    t = torch.tensor([10])
    x2 = x_t.clone()
    x2.select(2 + axis, 2).add_(1.0)  # change slice 2 along this axis only
    with torch.no_grad():
        diff = (model(x2, cond, t) - model(x_t, cond, t)).abs()
    per_slice = diff.movedim(2 + axis, 0).flatten(1).amax(1)
    assert per_slice[2] > 1e-3 and torch.all(per_slice[torch.arange(len(per_slice)) != 2] == 0)


def test_unet_and_conv_nets_shapes_and_zero_output_layer():
    cfg = NetConfig(arch="unet", width=8, mults=(1, 2), res_blocks=1, time_dim=8)
    for dims, shape in ((2, (3, 7, 8, 8)), (3, (2, 5, 4, 8, 8))):
        t = torch.randint(0, 100, (shape[0],))
        net = UNet(dims, shape[1], 3, cfg)
        assert net(torch.randn(shape), t).shape == (shape[0], 3, *shape[2:])
        zero = eps_net(dims, shape[1], 3, cfg, zero_last=True)
        assert zero(torch.randn(shape), t).abs().max() == 0
        conv = eps_net(dims, shape[1], 3, NetConfig(width=4, layers=3, time_dim=8), zero_last=True)
        assert conv(torch.randn(shape), t).abs().max() == 0


# ----------------------------------------------------------------------------- self-consistency and sampling


def test_pool_zero_projection_is_the_orthogonal_projector():
    x = torch.randn(2, 1, 4, 6, 8)
    p = pool_zero_projection(x, 2)
    assert torch.nn.functional.avg_pool3d(p, 2).abs().max() < 1e-6
    assert torch.allclose(pool_zero_projection(p, 2), p, atol=1e-6)  # idempotent
    assert abs(float((p * (x - p)).sum())) < 1e-4  # x - Px is orthogonal to Px


def test_self_consistent_sampling_reproduces_the_low_resolution_input():
    _, cond = volumes(2)
    slices = ScoreFusion(SLICE, FUSION)
    for sm in slices.slices:
        perturbed(sm)
    x_T = torch.randn(2, 1, 4, 6, 8)
    fn = lambda x, t: slices.merge(x, cond, t)
    with torch.no_grad():
        on = sample(fn, SCHEDULE, x_T, 5, self_consistency=True, pool=2)
        off = sample(fn, SCHEDULE, x_T, 5, self_consistency=False, pool=2)
    assert torch.nn.functional.avg_pool3d(on, 2).abs().max() <= 1e-5 * max(1.0, float(on.abs().max()))
    assert torch.nn.functional.avg_pool3d(off, 2).abs().max() > 1e-3
    # The super-resolved volume up(LR) + residual pools back to the LR volume exactly.
    lr = cond[:, :1]
    assert torch.allclose(torch.nn.functional.avg_pool3d(lr + on, 2), torch.nn.functional.avg_pool3d(lr, 2), atol=1e-5)


def test_tpdm_draws_axes_with_the_given_probabilities():
    model = ScoreFusion(SLICE, FUSION)
    x_t, cond = volumes(1)
    fn, drawn = tpdm_eps(model, cond, (0.0, 1.0, 0.0), torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = fn(x_t, torch.tensor([5]))
        assert torch.equal(out, model.slices[1](x_t, cond, torch.tensor([5])))
    x_small, cond_small = volumes(1, (2, 2, 2))  # tiny volume: only the draws matter
    fn, drawn = tpdm_eps(model, cond_small, (0.1, 0.6, 0.3), torch.Generator().manual_seed(0))
    with torch.no_grad():
        for _ in range(300):
            fn(x_small, torch.tensor([5]))
    freq = np.bincount(drawn, minlength=3) / len(drawn)
    assert np.allclose(freq, (0.1, 0.6, 0.3), atol=0.08)


# ----------------------------------------------------------------------------- metrics


def ssim_brute_force(x: np.ndarray, y: np.ndarray, win: int) -> float:
    """skimage's structural_similarity, written out window by window (uniform filter, sample covariance)."""
    a, b = (np.clip(x, -1, 1) + 1) / 2, (y + 1) / 2
    c1, c2 = 0.01**2, 0.03**2
    vals = []
    for i in range(x.shape[0] - win + 1):
        for j in range(x.shape[1] - win + 1):
            for k in range(x.shape[2] - win + 1):
                p, q = (
                    a[i : i + win, j : j + win, k : k + win].ravel(),
                    b[i : i + win, j : j + win, k : k + win].ravel(),
                )
                ux, uy = p.mean(), q.mean()
                vx, vy, vxy = p.var(ddof=1), q.var(ddof=1), np.cov(p, q, ddof=1)[0, 1]
                vals.append((2 * ux * uy + c1) * (2 * vxy + c2) / ((ux**2 + uy**2 + c1) * (vx + vy + c2)))
    return float(np.mean(vals))


def test_ssim_matches_the_window_by_window_definition():
    x = torch.rand(2, 6, 7, 8) * 2 - 1
    y = (x + 0.3 * torch.randn_like(x)).clamp(-1, 1)
    got = ssim3d(y, x, window=3)
    for i in range(2):
        assert got[i].item() == pytest.approx(ssim_brute_force(y[i].numpy(), x[i].numpy(), 3), abs=1e-5)
    assert torch.allclose(ssim3d(x, x, 3), torch.ones(2), atol=1e-6)


def test_psnr_and_finite_difference_errors_closed_forms():
    ref = torch.zeros(1, 4, 4, 4)
    assert psnr(ref + 0.2, ref).item() == pytest.approx(20.0, abs=1e-4)  # [0, 1] error 0.1 -> 20 dB
    assert torch.allclose(finite_difference_errors(ref + 0.3, ref), torch.zeros(1, 3))  # a constant offset: 0
    stripes = ref + 0.1 * (-1.0) ** torch.arange(4.0).view(1, 4, 1, 1)  # alternating axial slices
    fd = finite_difference_errors(stripes, ref)[0]
    assert fd[0].item() == pytest.approx(0.04) and fd[1] == 0 and fd[2] == 0


def test_stratified_steps_put_one_step_in_each_bin():
    steps = stratified_steps(5, 8, 1000, torch.Generator().manual_seed(0))
    bins = steps // 125
    assert torch.equal(bins, torch.arange(8).expand(5, 8))


# ----------------------------------------------------------------------------- data


def test_phantoms_are_deterministic_scaled_and_the_residual_pools_to_zero():
    cfg = DataConfig(n_train=4, n_test=2, shape=(8, 8, 8))
    a, b = make_phantoms(cfg, 3), make_phantoms(cfg, 3)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(make_phantoms(cfg, 4)["hr_train"], a["hr_train"])
    hr = a["hr_train"]
    assert hr.shape == (4, 8, 8, 8) and hr.dtype == np.float32
    assert np.allclose(hr.min((1, 2, 3)), -1) and np.allclose(hr.max((1, 2, 3)), 1)
    residual = torch.from_numpy(hr - a["lr_train"])[:, None]
    assert torch.nn.functional.avg_pool3d(residual, 2).abs().max() < 1e-6
    lr = a["lr_train"]
    assert np.array_equal(lr[:, ::2, ::2, ::2].repeat(2, 1).repeat(2, 2).repeat(2, 3), lr)  # nearest upsampled


def test_nifti_loader_crops_normalises_and_orders_like_dataset_brats(tmp_path):
    nib = pytest.importorskip("nibabel")
    rng = np.random.default_rng(0)
    raw = {}
    for name in ("BraTS2021_00000", "BraTS2021_00001", "BraTS2021_00002"):
        (tmp_path / name).mkdir()
        vol = rng.uniform(0, 5000, (10, 12, 6))  # nibabel (x, y, z) = (H, W, D)
        raw[name] = vol
        nib.save(nib.Nifti1Image(vol, np.eye(4)), tmp_path / name / f"{name}_flair.nii.gz")
        nib.save(nib.Nifti1Image(vol * 0, np.eye(4)), tmp_path / name / f"{name}_t1.nii.gz")
    cfg = DataConfig(shape=(4, 8, 8), nifti_dir="x", nifti_train_fraction=0.8)
    out = load_brats(tmp_path, cfg)
    assert out["hr_train"].shape == (2, 4, 8, 8) and out["hr_test"].shape == (1, 4, 8, 8)
    crop = raw["BraTS2021_00002"][1:9, 2:10, 1:5]  # centre crop (H, W, D) = (8, 8, 4)
    expected = np.moveaxis(2 * (crop - crop.min()) / (crop.max() - crop.min()) - 1, -1, 0)
    assert np.allclose(out["hr_test"][0], expected, atol=1e-6)
    assert np.allclose(out["lr_test"][0], pool_upsample(expected[None].astype(np.float32), 2)[0], atol=1e-6)
    with pytest.raises(ValueError, match="smaller than the crop"):
        load_brats(tmp_path, DataConfig(shape=(8, 8, 8), nifti_dir="x"))


def test_config_rejects_bad_settings():
    Config.for_scale("paper")  # the paper's setting validates
    for overrides in (
        {"data.shape": (15, 16, 16)},
        {"eval.tpdm_probs": (0.5, 0.5, 0.5)},
        {"eval.sample_volumes": 17},
        {"data.nifti_dir": "../outside"},
        {"slice_net.arch": "mlp"},
    ):
        with pytest.raises((ValidationError, ValueError)):
            Config.for_scale("default", overrides)


# ----------------------------------------------------------------------------- pipeline (contract at smoke scale)


def test_smoke_pipeline_meets_the_contract(tmp_path):
    from tasks import steps

    cfg = SPEC.make_config("smoke")
    layout = steps.Layout(tmp_path, SPEC)
    ref = steps.prepare(SPEC, cfg, tmp_path)
    assert read_dataset(layout.data_dir).sha256 == ref.sha256
    assert steps.prepare(SPEC, cfg, tmp_path).sha256 == ref.sha256  # byte-identical from the seed
    artifacts = steps.train(SPEC, cfg, tmp_path)
    assert isinstance(artifacts, TrainedArtifacts)
    assert TrainedArtifacts.load(layout.model_dir).history == json.loads(json.dumps(artifacts.history))
    assert {"method", "baseline_2d_axial", "baseline_2d_coronal", "baseline_2d_sagittal"} <= set(artifacts.history)
    for variant, records in artifacts.history.items():
        assert records and all(math.isfinite(float(x)) for r in records for x in r.values()), variant
    metrics, result = steps.evaluate(SPEC, cfg, tmp_path)
    assert isinstance(metrics, Metrics) and isinstance(result, ClaimResult)
    assert SPEC.primary_metric in metrics.values and not metrics.non_finite()
    assert not any(k.startswith(("eval/", "train/")) for k in metrics.values)
    assert any(k.startswith("method/") for k in metrics.values) and any(
        k.startswith("baseline/") for k in metrics.values
    )
    assert metrics.figures and all(
        f.suffix == ".png" and f.stat().st_size > 1000 and f.parent == layout.plots_dir for f in metrics.figures
    )
    assert result.statement and result.figures and result.verdict in ("holds", "fails", "inconclusive")
    assert [c.name for c in result.criteria] == ["eps_mse_ratio", "psnr_gain_db"]
    ratio, gain = result.criterion("eps_mse_ratio"), result.criterion("psnr_gain_db")
    # Equal t points per volume: the ratio of per-volume means is the pooled ratio; one sampled volume at smoke.
    assert ratio.estimate == pytest.approx(result.figures["eps_mse_ratio"]) and ratio.n_units == cfg.data.n_test
    assert ratio.interval == "bootstrap" and ratio.low <= ratio.estimate <= ratio.high
    assert (
        gain.estimate == pytest.approx(result.figures["psnr_gain_db"]) and gain.n_units == cfg.eval.sample_volumes == 1
    )
    assert gain.state == "inconclusive" and math.isinf(gain.high)  # one unit: an infinite interval
    assert result.sane, result.sanity  # the must-pass checks hold at any scale
    assert {
        "fusion_at_init_equals_merge",
        "fusion_weights_sum_to_one",
        "self_consistency_pool_reproduces_lr",
        "finite_metrics",
    } <= set(result.sanity)
    assert metrics.values["method/init_gap"] == 0.0
    on_disk = json.loads(layout.claim_file.read_text())
    assert on_disk["verdict"] == result.verdict and on_disk["figures"].keys() == result.figures.keys()
    assert ClaimResult.from_dict(on_disk).criterion("eps_mse_ratio") == ratio
    model = SPEC.module().load_model(cfg, layout.model_dir)
    assert isinstance(model, ScoreFusion)


# ----------------------------------------------------------------------------- claim


def _claim_of(eps_fusion, eps_merge, psnr_fusion, psnr_merge):
    """claim() on hand-built per-volume metrics (the must-pass figures set to passing values)."""
    cfg = Config.for_scale("default")
    v = {
        "method/init_gap": 0.0,
        "method/weight_sum_err": 0.0,
        "method/slice_roundtrip_err": 0.0,
        "method/pool_residual_max": 0.0,
        "reference/eps_mse_gaussian_prior": 10.0,
        "method/eps_mse_diff_stderr": 0.0,
        "method/psnr_diff_stderr": 0.0,
    }
    for i, (f, m) in enumerate(zip(eps_fusion, eps_merge)):
        v[f"method/volume{i}_eps_mse"], v[f"baseline/volume{i}_eps_mse"] = f, m
    for i, (f, m) in enumerate(zip(psnr_fusion, psnr_merge)):
        v[f"method/volume{i}_psnr"], v[f"baseline/volume{i}_psnr"] = f, m
    means = {
        "method/eps_mse": np.mean(eps_fusion),
        "baseline/eps_mse": np.mean(eps_merge),
        "method/psnr": np.mean(psnr_fusion),
        "baseline/psnr": np.mean(psnr_merge),
    }
    for key in ("eps_mse_low_t", "ssim", "fd_err"):
        means[f"method/{key}"] = means[f"baseline/{key}"] = 1.0
    for key in ("tpdm_eps_mse", "tpdm_psnr", "tpdm_fd_err"):
        means[f"baseline/{key}"] = 1.0
    means["reference/lr_psnr"] = 20.0
    return SPEC.module().claim(cfg, Metrics({**v, **{k: float(x) for k, x in means.items()}}))


def test_claim_states_follow_the_volume_intervals():
    rng = np.random.default_rng(0)
    merge = 0.1 + 0.02 * rng.random(16)
    psnr_merge = 25 + rng.random(16)
    # Fusion 10 % below merge on every volume and +0.3 dB on every sample: both criteria hold.
    good = _claim_of(0.9 * merge, merge, psnr_merge + 0.3 + 0.01 * rng.standard_normal(16), psnr_merge)
    assert good.verdict == "holds" and good.sane
    assert good.criterion("eps_mse_ratio").estimate == pytest.approx(0.9)
    assert good.criterion("eps_mse_ratio").high < 0.95
    # A ratio of 0.95 on average, +-10 % volume to volume: the bootstrap interval straddles 0.95.
    spread = np.where(np.arange(16) % 2 == 0, 0.85, 1.05)
    straddle = _claim_of(spread * merge, merge, psnr_merge + 0.3, psnr_merge)
    c = straddle.criterion("eps_mse_ratio")
    assert c.low < 0.95 < c.high and c.state == "inconclusive" and straddle.verdict == "inconclusive"
    # PSNR gain +-0.5 dB around 0 (the review's "barely discriminates"): inconclusive; -0.3 dB everywhere fails.
    noisy_gain = _claim_of(0.9 * merge, merge, psnr_merge + np.where(np.arange(16) % 2 == 0, 0.5, -0.45), psnr_merge)
    assert noisy_gain.criterion("psnr_gain_db").state == "inconclusive"
    worse = _claim_of(0.9 * merge, merge, psnr_merge - 0.3 + 0.01 * rng.standard_normal(16), psnr_merge)
    assert worse.criterion("psnr_gain_db").state == "fails" and worse.verdict == "fails"
