"""score_fusion: the fusion formula (and the residual-only ablation) and its initialisation, slicing, the
2.5-D inputs, self-consistency, metrics against brute-force references, the MNI152 crops and the NIfTI
loaders, the claim's states on hand-built per-seed metrics, and the session's smoke run."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from models.base import Metrics, ValidationError
from models.common.diffusion import DDPMSchedule, linear_betas
from models.common.raw_data import RawDataError
from models.common.runtime import set_threads
from models.score_fusion import SPEC
from models.score_fusion import data as data_module
from models.score_fusion.algorithm import (
    finite_difference_errors,
    pool_zero_projection,
    psnr,
    sample,
    ssim3d,
    stratified_steps,
    tpdm_eps,
)
from models.score_fusion.config import Config, DataConfig, FusionTrainConfig, NetConfig, SliceNetConfig
from models.score_fusion.data import (
    SPLIT_CYCLE,
    brain_crops,
    load_brats,
    load_mni152,
    make_phantoms,
    pool_upsample,
    read_mni152,
    slab_splits,
    volume_from_nifti_gz,
)
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
from models.score_fusion.training import FusionTraining, SliceSet, VolumeSet, WithSteps, hybrid_loss, noisy

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
def test_residual_only_ablation_keeps_the_mean_weights_and_learns_only_the_residual_channel():
    eps, w = torch.randn(2, 3, 4, 4, 4), torch.randn(2, 3, 4, 4, 4)
    mean = eps.mean(1, keepdim=True)
    assert torch.allclose(fuse(eps, w, "residual_only"), mean + w[:, 2:3])
    moved = w.clone()
    moved[:, :2] += 5.0  # the per-voxel weight channels have no effect on the ablation
    assert torch.equal(fuse(eps, moved, "residual_only"), fuse(eps, w, "residual_only"))
    assert torch.equal(fuse(eps, torch.zeros_like(w), "residual_only"), mean)
    assert torch.equal(fusion_coefficients(w, "residual_only"), torch.full_like(w, 1 / 3))
    assert not torch.allclose(fuse(eps, w), fuse(eps, w, "residual_only"))  # the method does use them
    with pytest.raises(ValueError, match="fusion mode"):
        fuse(eps, w, "weights")
    # Trained through FusionTraining: the last conv's w0/w1 output rows get no gradient, w2's does.
    model = ScoreFusion(SLICE, FUSION, "residual_only")
    for sm in model.slices:
        perturbed(sm)
    x_t, cond = volumes()
    module = FusionTraining(model, SCHEDULE, FusionTrainConfig(steps=1, batch_size=2), lr=1e-3)
    module.shared_step((torch.randn(2, 1, 4, 6, 8) * 0.1, cond), "train", 0).backward()
    grad = model.fusion.out.weight.grad
    assert grad[:2].abs().max() == 0 and grad[2].abs().max() > 0
    with torch.no_grad():
        assert torch.equal(model(x_t, cond, torch.tensor([3, 70])), model.merge(x_t, cond, torch.tensor([3, 70])))


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
    module = FusionTraining(model, SCHEDULE, FusionTrainConfig(steps=1, batch_size=2), lr=1e-3)
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
        lr=1e-3,
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


def test_validation_sets_carry_fixed_stratified_steps():
    r, cond = volumes(4)
    base = VolumeSet(r[:, 0], cond[:, 0])
    val = WithSteps(base, 1000, seed=0)
    res, c, t = val[[0, 1, 2, 3]]
    assert torch.equal(res, base[[0, 1, 2, 3]][0]) and torch.equal(c, base[[0, 1, 2, 3]][1])
    assert sorted((t // 250).tolist()) == [0, 1, 2, 3]  # one step in each quarter of [0, T)
    assert torch.equal(WithSteps(base, 1000, seed=0).steps, val.steps)  # the same steps for every arm
    steps, noise, x_t = noisy(SCHEDULE, res, "val", 0, t % 100)
    assert torch.equal(steps, t % 100) and torch.equal(x_t, SCHEDULE.q_sample(res, t % 100, noise))


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
    cfg = DataConfig(source="synthetic", n_train=4, n_val=1, n_test=2, shape=(8, 8, 8))
    a, b = make_phantoms(cfg, 3), make_phantoms(cfg, 3)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(make_phantoms(cfg, 4)["hr_train"], a["hr_train"])
    hr = a["hr_train"]
    assert hr.shape == (4, 8, 8, 8) and hr.dtype == np.float32
    assert a["hr_val"].shape == (1, 8, 8, 8) and a["hr_test"].shape == (2, 8, 8, 8)
    assert np.allclose(hr.min((1, 2, 3)), -1) and np.allclose(hr.max((1, 2, 3)), 1)
    residual = torch.from_numpy(hr - a["lr_train"])[:, None]
    assert torch.nn.functional.avg_pool3d(residual, cfg.pool_factors).abs().max() < 1e-6
    lr = a["lr_train"]
    fd, fh, fw = cfg.pool_factors
    assert np.array_equal(lr[:, ::fd, ::fh, ::fw].repeat(fd, 1).repeat(fh, 2).repeat(fw, 3), lr)  # nearest upsampled


def test_nifti_loader_crops_normalises_and_orders_like_dataset_brats(tmp_path):
    nib = pytest.importorskip("nibabel")
    rng = np.random.default_rng(0)
    raw = {}
    names = [f"BraTS2021_0000{i}" for i in range(5)]
    for name in names:
        (tmp_path / name).mkdir()
        vol = rng.uniform(0, 5000, (10, 12, 6))  # nibabel (x, y, z) = (H, W, D)
        raw[name] = vol
        nib.save(nib.Nifti1Image(vol, np.eye(4)), tmp_path / name / f"{name}_flair.nii.gz")
        nib.save(nib.Nifti1Image(vol * 0, np.eye(4)), tmp_path / name / f"{name}_t1.nii.gz")
    cfg = DataConfig(source="nifti", shape=(4, 8, 8), nifti_dir="x", nifti_train_fraction=0.8)
    out = load_brats(tmp_path, cfg)
    # 5 subjects: the first 4 (80 %) fit the model, the last of those validates; subject 5 tests.
    assert out["hr_train"].shape == (3, 4, 8, 8) and out["hr_val"].shape == (1, 4, 8, 8)
    assert out["hr_test"].shape == (1, 4, 8, 8)
    crop = raw[names[4]][1:9, 2:10, 1:5]  # centre crop (H, W, D) = (8, 8, 4)
    expected = np.moveaxis(2 * (crop - crop.min()) / (crop.max() - crop.min()) - 1, -1, 0)
    assert np.allclose(out["hr_test"][0], expected, atol=1e-6)
    assert np.allclose(
        out["lr_test"][0], pool_upsample(expected[None].astype(np.float32), cfg.pool_factors)[0], atol=1e-6
    )
    with pytest.raises(ValueError, match="smaller than the crop"):
        load_brats(tmp_path, DataConfig(source="nifti", shape=(8, 8, 8), nifti_dir="x"))


def test_nifti_bytes_are_read_in_dhw_order_and_garbage_is_a_raw_data_error():
    nib = pytest.importorskip("nibabel")
    import gzip

    vol = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)  # (x, y, z)
    blob = gzip.compress(nib.Nifti1Image(vol, np.eye(4)).to_bytes())
    out = volume_from_nifti_gz(blob, "toy.nii.gz")
    assert out.shape == (5, 3, 4)  # (D, H, W) = (z, x, y)
    assert np.allclose(out, np.moveaxis(vol / vol.max() * 2 - 1, -1, 0))
    for bad in (b"not gzip", gzip.compress(b"x" * 400)):
        with pytest.raises(RawDataError, match="toy.nii.gz"):
            volume_from_nifti_gz(bad, "toy.nii.gz")


def test_the_pinned_mni152_template_is_a_skull_stripped_1mm_brain():
    volume = read_mni152("t1")
    assert volume.shape == (189, 197, 233) and volume.dtype == np.float32  # (z, x, y) at 1 mm
    assert volume.min() == -1 and volume.max() == 1
    brain = volume > -1
    assert 0.15 < brain.mean() < 0.3  # ~1.5-2 l of brain in a 8.7 l box; the skull is stripped
    assert np.allclose(volume, volume[:, ::-1, :], atol=0.05)  # the symmetric template: x mirrors itself


def test_a_missing_or_corrupt_nilearn_wheel_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    (tmp_path / "data" / "raw").mkdir(parents=True)  # a project with its own (here empty) raw folder
    with pytest.raises(RawDataError, match="nilearn-0.14.1-py3-none-any.whl is missing"):
        read_mni152()
    (tmp_path / "data" / "raw" / "nilearn-0.14.1-py3-none-any.whl").write_bytes(b"not a wheel")
    with pytest.raises(RawDataError, match="expected 725206484e9fb3f6.*corrupt or altered"):
        read_mni152()


def test_slabs_tile_the_axis_in_the_split_cycle():
    slabs = slab_splits(100, 24)
    assert slabs["train"] == [(0, 24), (48, 72), (96, 100)] and slabs["val"] == [(24, 48)]
    assert slabs["test"] == [(72, 96)]
    assert SPLIT_CYCLE == ("train", "val", "train", "test")


def test_mni_crops_stay_inside_their_split_slabs_and_hold_enough_brain(monkeypatch):
    # A stand-in template whose values encode the W (anterior-posterior) coordinate: a crop's values say
    # where it was cut. Brain = W in [10, 90); the rest is background (-1).
    w = np.arange(100, dtype=np.float32)
    volume = np.broadcast_to(np.where((w >= 10) & (w < 90), w / 100, -1.0), (12, 12, 100)).astype(np.float32)
    monkeypatch.setattr(data_module, "read_mni152", lambda template: volume)
    cfg = DataConfig(n_train=30, n_val=6, n_test=6, shape=(4, 4, 8), mni_slab=20, mni_min_brain=0.75)
    out = load_mni152(cfg, seed=1)
    slabs = slab_splits(100, 20)
    for split in ("train", "val", "test"):
        crops = out[f"hr_{split}"]
        assert crops.shape == (getattr(cfg, f"n_{split}"), 4, 4, 8)
        assert ((crops > -1).mean((1, 2, 3)) >= 0.75).all()
        for crop in crops:
            ys = np.round(crop[crop > -1] * 100).astype(int)
            assert any(a <= ys.min() and ys.max() < b for a, b in slabs[split]), (split, ys.min(), ys.max())
        assert np.allclose(out[f"lr_{split}"], pool_upsample(crops, cfg.pool_factors))
    assert all(np.array_equal(out[k], load_mni152(cfg, seed=1)[k]) for k in out)  # deterministic from the seed
    with pytest.raises(ValueError, match="crops with brain fraction"):
        brain_crops(volume, [(0, 10)], 2, (4, 4, 8), 0.5, np.random.default_rng(0), "toy")


def test_config_rejects_bad_settings():
    Config.for_scale("paper")  # the paper's setting validates
    for overrides in (
        {"data.shape": (15, 16, 16)},
        {"eval.tpdm_probs": (0.5, 0.5, 0.5)},
        {"eval.sample_volumes": 17},
        {"data.nifti_dir": "../outside"},
        {"data.source": "nifti"},  # no folder named
        {"data.mni_slab": 12},  # thinner than a crop
        {"slice_net.arch": "mlp"},
        {"fusion_train.lr_grid": ()},
    ):
        with pytest.raises((ValidationError, ValueError)):
            Config.for_scale("default", overrides)


# ----------------------------------------------------------------------------- pipeline (the session's smoke run)


def test_smoke_pipeline(smoke_run):
    run = smoke_run("score_fusion")
    cfg, layout, metrics, result = run.cfg, run.layout, run.metrics, run.claim
    assert run.dataset.source == "real" and "nilearn-0.14.1-py3-none-any.whl" in run.dataset.provenance
    assert {run.dataset.meta[f"n_{s}"] for s in ("train", "val", "test")} == {16, 2, 4}
    arms = {"baseline_2d_axial", "baseline_2d_coronal", "baseline_2d_sagittal", "method", "ablation_residual_only"}
    assert arms | {f"{a}_seed1" for a in ("method", "ablation_residual_only")} <= set(run.artifacts.history)
    assert "baseline_2d_axial_seed1" not in run.artifacts.history  # stage 1 is shared by the seeds at smoke
    selections = json.loads((layout.model_dir / "selection.json").read_text())
    assert set(selections) == {"baseline_2d", "method", "ablation_residual_only"}
    grids = {"baseline_2d": cfg.slice_train.lr_grid} | dict.fromkeys(
        ("method", "ablation_residual_only"), cfg.fusion_train.lr_grid
    )
    for arm, selection in selections.items():  # every arm tried the whole declared grid on validation
        assert [row["lr"] for row in selection["table"]] == list(grids[arm])
    names = [c.name for c in result.criteria]
    assert names == ["eps_mse_ratio", "eps_mse_ratio_vs_residual_only", "psnr_gain_db", "psnr_gain_vs_residual_only_db"]
    v = metrics.flat()
    # The negative control (the fusion net at its initial weights) reproduces merge, so it cannot pass.
    assert v["control_untrained_fusion/eps_mse"] == pytest.approx(v["baseline/eps_mse"], rel=1e-4)
    assert result.controls and not result.controls[0].passes
    ratio = result.criterion("eps_mse_ratio")
    per_seed = [v[f"method/seed{k}/eps_mse"] / v[f"baseline/seed{k}/eps_mse"] for k in range(cfg.n_seeds)]
    assert ratio.n_units == cfg.n_seeds == 2 and ratio.estimate == pytest.approx(np.mean(per_seed))
    gain = result.criterion("psnr_gain_db")
    assert gain.estimate == pytest.approx(
        np.mean([v[f"method/seed{k}/psnr"] - v[f"baseline/seed{k}/psnr"] for k in range(cfg.n_seeds)])
    )
    assert result.sane, result.sanity  # the must-pass checks hold at any scale
    assert {
        "fusion_at_init_equals_merge",
        "fusion_weights_sum_to_one",
        "self_consistency_pool_reproduces_lr",
        "finite_metrics",
    } <= set(result.sanity)
    assert v["method/init_gap"] == 0.0 and v["method/pool_residual_max"] <= 1e-5
    assert {f.name for f in metrics.figures} >= {"paired_seeds.png", "selection.png", "orthogonal_slices.png"}
    model = SPEC.module().load_model(cfg, layout.model_dir)
    assert isinstance(model, ScoreFusion) and model.mode == "full"
    ablation = SPEC.module().load_arms(cfg, layout.model_dir, 1)["ablation_residual_only"]
    assert ablation.mode == "residual_only" and ablation.slices is not model.slices


# ----------------------------------------------------------------------------- claim


ARMS = ("method", "ablation_residual_only", "baseline", "baseline_tpdm", "baseline_axial", "control_untrained_fusion")


def _claim_of(eps: dict[str, list[float]], psnr_db: dict[str, list[float]], scale: str = "default", **overrides):
    """claim() on hand-built per-seed metrics: ``eps`` / ``psnr_db`` per arm (method, ablation_residual_only,
    baseline), the rest set to passing must-pass values. An override ``<arm>/seed<k>/<metric>`` (not
    ``select/``) sets that unit's value."""
    n = len(eps["method"])
    cfg = Config.for_scale(scale, {"n_seeds": n})
    v = {
        "method/init_gap": 0.0,
        "method/weight_sum_err": 0.0,
        "method/slice_roundtrip_err": 0.0,
        "method/pool_residual_max": 0.0,
    }
    units: dict[tuple[str, str], list[float]] = {("reference", "eps_mse_gaussian_prior"): [10.0] * n}
    for k in range(n):
        v[f"select/ablation_residual_only/seed{k}/best_val_val_eps_mse"] = 0.09
        v[f"select/ablation_residual_only/seed{k}/val_merge_eps_mse"] = 0.1
    for arm in ARMS:
        units[(arm, "eps_mse")] = list(eps.get(arm, eps["baseline"]))
        units[(arm, "psnr")] = list(psnr_db.get(arm, psnr_db["baseline"]))
    for key, value in overrides.items():
        parts = key.split("/")
        if len(parts) == 3 and parts[0] != "select" and parts[1].startswith("seed"):
            units[(parts[0], parts[2])][int(parts[1].removeprefix("seed"))] = value
        else:
            v[key] = value
    for arm in ARMS:
        for metric in ("eps_mse", "psnr"):
            v[f"{arm}/{metric}"] = float(np.mean(units[(arm, metric)]))
        for metric in ("ssim", "fd_err", "eps_mse_low_t"):
            v[f"{arm}/{metric}"] = 1.0
    v["reference/eps_mse_gaussian_prior"], v["reference/lr_psnr"] = 10.0, 20.0
    metrics = Metrics(v)
    for (arm, metric), values in units.items():
        metrics.add_units(metric, arm, values, [f"seed{k}" for k in range(n)])
    return SPEC.module().claim(cfg, metrics)


def test_claim_states_follow_the_seed_intervals():
    merge = [0.10, 0.11, 0.12]
    psnr_merge = [30.0, 30.4, 29.8]
    plus = lambda xs, d: [x + d for x in xs]
    times = lambda xs, f: [x * f for x in xs]
    # Score-Fusion 10 % below merge and 4 % below the ablation on every seed, +0.3 / +0.1 dB: all four hold.
    good = _claim_of(
        {"method": times(merge, 0.90), "ablation_residual_only": times(merge, 0.94), "baseline": merge},
        {"method": plus(psnr_merge, 0.3), "ablation_residual_only": plus(psnr_merge, 0.2), "baseline": psnr_merge},
    )
    assert good.verdict == "holds" and good.sane, [(c.name, c.state) for c in good.criteria]
    assert good.criterion("eps_mse_ratio").estimate == pytest.approx(0.90)
    assert good.criterion("eps_mse_ratio_vs_residual_only").estimate == pytest.approx(0.90 / 0.94)
    assert good.criterion("psnr_gain_vs_residual_only_db").estimate == pytest.approx(0.1)
    (control,) = good.controls  # the untrained fusion (= merge) scored as the method: ratio 1, not <= 0.95
    assert control.of == "eps_mse_ratio" and control.criterion.state == "fails"
    assert (
        good.criterion("eps_mse_ratio").labels == ("seed0", "seed1", "seed2") and good.criterion("eps_mse_ratio").covers
    )
    # The review's finding: a residual-only fusion as good as the method -> the ablation criterion fails.
    hollow = _claim_of(
        {"method": times(merge, 0.90), "ablation_residual_only": times(merge, 0.90), "baseline": merge},
        {"method": plus(psnr_merge, 0.3), "ablation_residual_only": plus(psnr_merge, 0.3), "baseline": psnr_merge},
    )
    assert hollow.criterion("eps_mse_ratio").state == "holds"
    assert hollow.criterion("eps_mse_ratio_vs_residual_only").state == "fails" and hollow.verdict == "fails"
    assert not hollow.controls[0].passes
    # Per-seed ratios 0.85 / 1.0 / 0.94: the t interval over 3 seeds straddles 0.95 -> inconclusive.
    spread = _claim_of(
        {"method": [0.085, 0.11, 0.94 * 0.12], "ablation_residual_only": merge, "baseline": merge},
        {"method": plus(psnr_merge, 0.3), "ablation_residual_only": psnr_merge, "baseline": psnr_merge},
    )
    c = spread.criterion("eps_mse_ratio")
    assert c.low < 0.95 < c.high and c.state == "inconclusive" and c.n_units == 3
    # PSNR gains +0.5 / -0.45 / +0.1 dB: inconclusive; -0.3 dB on every seed: fails.
    noisy = _claim_of(
        {"method": times(merge, 0.9), "ablation_residual_only": merge, "baseline": merge},
        {"method": [30.5, 29.95, 29.9], "ablation_residual_only": psnr_merge, "baseline": psnr_merge},
    )
    assert noisy.criterion("psnr_gain_db").state == "inconclusive"
    worse = _claim_of(
        {"method": times(merge, 0.9), "ablation_residual_only": merge, "baseline": merge},
        {"method": [29.7, 30.1, 29.5], "ablation_residual_only": psnr_merge, "baseline": psnr_merge},
    )
    assert worse.criterion("psnr_gain_db").state == "fails" and worse.verdict == "fails"


def test_claim_must_pass_checks_catch_an_untrained_baseline_and_a_broken_initialisation():
    eps = {"method": [0.09] * 3, "ablation_residual_only": [0.095] * 3, "baseline": [0.1] * 3}
    psnr_db = {"method": [30.3] * 3, "ablation_residual_only": [30.1] * 3, "baseline": [30.0] * 3}
    assert _claim_of(eps, psnr_db).sane
    untrained = _claim_of(eps, psnr_db, **{"reference/seed1/eps_mse_gaussian_prior": 0.05})
    assert not untrained.sanity["merge_beats_data_free_eps"]
    stuck = _claim_of(eps, psnr_db, **{"select/ablation_residual_only/seed2/best_val_val_eps_mse": 0.1})
    assert not stuck.sanity["residual_only_ablation_improves_on_merge_val"]
    broken = _claim_of(eps, psnr_db, **{"method/init_gap": 1e-3})
    assert not broken.sanity["fusion_at_init_equals_merge"]
    smoke = _claim_of(eps, psnr_db, scale="smoke", **{"reference/seed1/eps_mse_gaussian_prior": 0.05})
    assert "merge_beats_data_free_eps" not in smoke.sanity  # a few smoke steps need not learn


def test_through_plane_pooling_blurs_along_d_only_and_the_projection_matches_it():
    """The default acquisition: 4x thick slices along D, full in-plane resolution; the self-consistency
    projection uses the same per-axis factors (idempotent, pools to zero)."""
    rng = np.random.default_rng(3)
    volumes = rng.uniform(-1, 1, (2, 8, 4, 4)).astype(np.float32)
    lr = pool_upsample(volumes, (4, 1, 1))
    expected = volumes.reshape(2, 2, 4, 4, 4).mean(2).repeat(4, axis=1)
    assert np.allclose(lr, expected, atol=1e-6)
    assert np.allclose(pool_upsample(volumes, 2), pool_upsample(volumes, (2, 2, 2)))
    x = torch.from_numpy(volumes)[:, None]
    p = pool_zero_projection(x, (4, 1, 1))
    assert torch.nn.functional.avg_pool3d(p, (4, 1, 1)).abs().max() < 1e-6
    assert torch.allclose(pool_zero_projection(p, (4, 1, 1)), p, atol=1e-6)
    cfg = Config.for_scale("default")
    assert cfg.data.pool_factors == (4, 1, 1) and cfg.data.n_val * cfg.fusion_train.val_repeats >= 256
    assert Config.for_scale("paper").data.pool_factors == (4, 4, 4)
