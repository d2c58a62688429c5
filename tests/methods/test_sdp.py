"""sdp: irreps layers' equivariance, action packing, canonicalisation, the demo task, loaders, metrics, smoke pipeline."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from e3nn import o3

from models.base import Metrics, ValidationError, read_dataset, verdict_of
from models.common.diffusion import DDPMSchedule
from models.common.runtime import set_threads
from models.sdp import SPEC
from models.sdp.algorithm import (
    Normaliser,
    equivariance_error,
    make_schedule,
    policy_equivariance_error,
    sampling_timesteps,
    success_metrics,
)
from models.sdp.config import Config, DataConfig, DiffusionConfig, DPNetConfig, SDPNetConfig
from models.sdp.data import (
    axes_to_matrix,
    canonicalise,
    decanonicalise,
    demos_from_robomimic,
    load_demos_npz,
    make_scenes,
    make_splits,
    matrix_to_axes,
    object_template,
    position_scale,
    quat_xyzw_to_matrix,
    random_rotations,
    rot6d_rows_to_axes,
    rotation_angle_deg,
    save_demos_npz,
    slerp,
)
from models.sdp.networks import (
    DPPolicy,
    FlatFiLM,
    GateActivation,
    IrrepConv1d,
    IrrepConvBlock,
    IrrepLinear,
    IrrepRMSNorm,
    SDPPolicy,
    SFiLM,
    pack_actions,
    rotate_actions,
    unpack_actions,
)
from models.sdp.training import ema_decay, lr_factor, random_rotations_torch, rotate_batch

set_threads()

SMALL_SDP = SDPNetConfig(down_dims=(8, 16), enc_channels=8, enc_hidden=16, time_dim=8)
SMALL_DP = DPNetConfig(down_dims=(8, 16), enc_channels=8, enc_hidden=16, time_dim=8)
TOL = 1e-4  # the brief's float32 equivariance threshold


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def rotations(n: int = 8, seed: int = 0) -> torch.Tensor:
    """Random rotations from e3nn (an independent generator), float32."""
    torch.manual_seed(seed)
    return o3.rand_matrix(n).float()


def rotate_fields(x: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
    """The group action on (B, 4, C, ...) irreps fields: R on the l=1 slots, the l=0 slot unchanged."""
    return torch.cat([x[:, :1], torch.einsum("ij,bj...->bi...", R, x[:, 1:4])], 1)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a - b).norm() / b.norm()).detach())


def scene_batch(n: int = 6, rotation: str = "so3"):
    data = DataConfig(n_train=8, n_val=2, n_test=4)
    split = make_scenes(data, object_template(data, 0), np.random.default_rng(3), n, rotation)
    norm = Normaliser(0.35)
    points, ee_axes = norm.observation(split["points"], split["ee_pose"])
    return split, norm, points, ee_axes, norm.actions(split["actions"], split["ee_pose"])


# ----------------------------------------------------------------------------- config


def test_config_is_strict_and_scales_resolve():
    cfg = SPEC.make_config("smoke")
    assert cfg.scale.value == "smoke" and cfg.train.steps == 6 and cfg.diffusion.clip_sample is None
    assert Config().diffusion.train_steps == 100 and Config().diffusion.ddim_steps == 16
    with pytest.raises(ValidationError):
        Config.from_mapping({"train": {"steps": 0}})
    with pytest.raises(ValidationError):
        Config.from_mapping({"nope": 1})
    with pytest.raises(ValidationError):
        Config.from_mapping({"data": {"horizon": 10}})  # the U-nets halve the horizon
    with pytest.raises(ValidationError):
        Config.from_mapping({"diffusion": {"ddim_steps": 200}})


# ----------------------------------------------------------------------------- rotations and the task


def test_rotation_helpers_match_scipy_and_the_axes_convention():
    from scipy.spatial.transform import Rotation

    rng = np.random.default_rng(0)
    q = rng.standard_normal((20, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    R = quat_xyzw_to_matrix(q)
    assert np.allclose(R, Rotation.from_quat(q).as_matrix(), atol=1e-12)  # scipy: (x, y, z, w)
    assert np.allclose(axes_to_matrix(R[:, :, 0], R[:, :, 1]), R, atol=1e-12)
    assert np.allclose(matrix_to_axes(R)[:, :3], R[:, :, 0]) and np.allclose(matrix_to_axes(R)[:, 3:], R[:, :, 1])
    # robomimic / pytorch3d rotation-6D holds the first two ROWS; the policy needs the axes (columns).
    rows = np.concatenate([R[:, 0, :], R[:, 1, :]], 1)
    assert np.allclose(rot6d_rows_to_axes(rows), matrix_to_axes(R), atol=1e-12)
    assert not np.allclose(rows, matrix_to_axes(R), atol=1e-3)  # the pitfall: they differ
    S = random_rotations(rng, 500)
    assert np.allclose(S @ np.swapaxes(S, 1, 2), np.eye(3), atol=1e-12) and np.allclose(np.linalg.det(S), 1)
    assert abs(S[:, 2, 2].mean()) < 0.1  # Haar: E[R_zz] = 0 (a yaw would give 1)
    assert np.allclose(rotation_angle_deg(R, R), 0, atol=1e-5)
    # slerp: endpoints, constant angular speed, and left-equivariance g slerp(A, B) = slerp(gA, gB)
    A, B, g = R[:5], R[5:10], R[10:15]
    alpha = np.linspace(0, 1, 5)
    path = slerp(A, B, alpha)
    assert np.allclose(path[:, 0], A, atol=1e-9) and np.allclose(path[:, -1], B, atol=1e-9)
    total = rotation_angle_deg(A, B)
    assert np.allclose(rotation_angle_deg(A, path[:, 2]), total / 2, atol=1e-6)
    assert np.allclose(g[:, None] @ path, slerp(g @ A, g @ B, alpha), atol=1e-9)


def test_demonstrations_reach_a_grasp_point_with_the_objects_axes():
    data = DataConfig(n_train=8, n_val=2, n_test=4)
    template = object_template(data, 0)
    for rotation in ("yaw", "so3"):
        s = make_scenes(data, template, np.random.default_rng(1), 64, rotation)
        n = len(s["mode"])
        final = s["actions"][:, -1]
        assert np.allclose(final[:, :3], s["goals"][np.arange(n), s["mode"]], atol=1e-5)
        R_final = axes_to_matrix(final[:, 3:6].astype(np.float64), final[:, 6:9].astype(np.float64))
        R_goal = axes_to_matrix(s["goal_axes"][:, 0].astype(np.float64), s["goal_axes"][:, 1].astype(np.float64))
        assert rotation_angle_deg(R_final, R_goal).max() < 0.1
        assert (s["actions"][:, -data.close_steps :, 9] == 1).all() and (
            s["actions"][:, : -data.close_steps, 9] == -1
        ).all()
        assert np.allclose(
            np.linalg.norm(s["goals"][:, 0] - s["goals"][:, 1], axis=1), 2 * data.grasp_offset, atol=1e-5
        )
        g = s["scene_rotation"]
        if rotation == "yaw":  # rotations about z only: the table stays upright
            assert np.allclose(g[:, 2], [0, 0, 1], atol=1e-6) and np.allclose(s["goal_axes"][:, :, 2], 0, atol=1e-6)
        else:
            assert np.abs(g[:, 2, 2]).max() < 1 - 1e-3
    assert 0.3 < make_scenes(data, template, np.random.default_rng(2), 400, "yaw")["mode"].mean() < 0.7  # two modes


def test_canonicalisation_is_exactly_inverted_and_removes_translations():
    s = make_scenes(DataConfig(), object_template(DataConfig(), 0), np.random.default_rng(0), 16, "so3")
    points, pose, actions = canonicalise(s["points"], s["ee_pose"], s["actions"])
    assert np.abs(decanonicalise(actions, s["ee_pose"]) - s["actions"]).max() < 1e-6  # float32 round-off only
    s64 = {k: v.astype(np.float64) for k, v in s.items()}
    a64 = canonicalise(s64["points"], s64["ee_pose"], s64["actions"])[2]
    assert np.abs(decanonicalise(a64, s64["ee_pose"]) - s64["actions"]).max() < 1e-15
    assert np.all(pose[:, :3] == 0) and np.array_equal(pose[:, 3:], s["ee_pose"][:, 3:])
    shift = np.array([0.7, -0.2, 1.3], dtype=np.float32)
    moved = canonicalise(
        s["points"] + shift,
        s["ee_pose"] + np.r_[shift, np.zeros(6, np.float32)],
        s["actions"] + np.r_[shift, np.zeros(7, np.float32)],
    )
    assert all(np.allclose(a, b, atol=1e-5) for a, b in zip(moved, (points, pose, actions)))


def test_one_shared_scale_commutes_with_rotations_but_per_axis_normalisation_does_not():
    s, norm, points, ee_axes, actions = scene_batch(32)
    R = rotations(1)[0]
    rotated = dict(s)
    ee = s["ee_pose"][:, None, :3]
    Rn = R.double().numpy()
    rotated["points"] = ((s["points"] - ee) @ Rn.T + ee).astype(np.float32)
    rotated["actions"] = s["actions"].copy()
    rotated["actions"][..., :3] = ((s["actions"][..., :3] - ee) @ Rn.T + ee).astype(np.float32)
    for k in (3, 6):
        rotated["actions"][..., k : k + 3] = (s["actions"][..., k : k + 3] @ Rn.T).astype(np.float32)
    rp, _ = norm.observation(rotated["points"], s["ee_pose"])
    ra = norm.actions(rotated["actions"], s["ee_pose"])
    assert torch.allclose(rp, points @ R.T, atol=1e-5)
    assert torch.allclose(ra, rotate_actions(actions, R), atol=1e-5)
    # a per-axis min-max normaliser (Diffusion Policy's default) does not commute with R
    a = canonicalise(s["points"], s["ee_pose"], s["actions"])[2][..., :3].reshape(-1, 3)
    lo, hi = a.min(0), a.max(0)
    per_axis = lambda x: 2 * (x - lo) / (hi - lo) - 1
    b = canonicalise(rotated["points"], s["ee_pose"], rotated["actions"])[2][..., :3].reshape(-1, 3)
    assert np.abs(per_axis(b) - (per_axis(a) @ Rn.T)).max() > 0.1
    assert position_scale(canonicalise(s["points"], s["ee_pose"], s["actions"])[2]) > 0


def test_splits_are_deterministic_from_the_seed():
    data = DataConfig(n_train=16, n_val=4, n_test=4)
    a, b, c = make_splits(data, 0), make_splits(data, 0), make_splits(data, 1)
    assert all(np.array_equal(a["train"][k], b["train"][k]) for k in a["train"])
    assert not np.array_equal(a["train"]["points"], c["train"]["points"])
    assert set(a) == {"train", "train_so3", "val_so3", "test_yaw", "test_so3"}


# ----------------------------------------------------------------------------- file formats


def test_npz_loader_round_trip_and_validation(tmp_path):
    s = make_scenes(DataConfig(), object_template(DataConfig(), 0), np.random.default_rng(0), 5, "yaw")
    save_demos_npz(tmp_path / "demos.npz", s)
    back = load_demos_npz(tmp_path / "demos.npz")
    assert all(np.array_equal(back[k], s[k]) for k in s)
    save_demos_npz(tmp_path / "same.npz", s)
    assert (tmp_path / "demos.npz").read_bytes() == (tmp_path / "same.npz").read_bytes()  # byte-stable
    np.savez(tmp_path / "missing.npz", points=s["points"], actions=s["actions"])
    with pytest.raises(ValueError, match="ee_pose"):
        load_demos_npz(tmp_path / "missing.npz")
    np.savez(tmp_path / "bad.npz", points=s["points"], ee_pose=s["ee_pose"], actions=s["actions"][..., :9])
    with pytest.raises(ValueError, match="shapes"):
        load_demos_npz(tmp_path / "bad.npz")


def test_robomimic_layout_loader_converts_rot6d_rows_and_windows():
    """A tiny robomimic-style demo tree (as h5py exposes it: nested mappings of arrays)."""
    rng = np.random.default_rng(0)
    tree = {"data": {}}
    truth = {}
    for i, T in ((0, 5), (1, 3)):
        q = rng.standard_normal((T, 4))
        R_ee = quat_xyzw_to_matrix(q)
        R_act = random_rotations(rng, T)
        rot6d = np.concatenate([R_act[:, 0, :], R_act[:, 1, :]], 1)  # pytorch3d matrix_to_rotation_6d: rows
        actions = np.concatenate([rng.standard_normal((T, 3)), rot6d, np.sign(rng.standard_normal((T, 1)))], 1)
        tree["data"][f"demo_{i}"] = {
            "obs": {
                "point_cloud": rng.standard_normal((T, 7, 6)),
                "robot0_eef_pos": rng.standard_normal((T, 3)),
                "robot0_eef_quat": q,
            },
            "actions": actions,
        }
        truth[i] = (R_ee, R_act, actions)
    # keys in the wrong lexical order ("demo_10" < "demo_2") are sorted by index
    tree["data"] = {"demo_1": tree["data"]["demo_1"], "demo_0": tree["data"]["demo_0"]}
    out = demos_from_robomimic(tree, horizon=4)
    assert out["points"].shape == (8, 7, 3) and out["ee_pose"].shape == (8, 9) and out["actions"].shape == (8, 4, 10)
    R_ee0, R_act0, act0 = truth[0]
    assert np.allclose(out["ee_pose"][:5, 3:6], R_ee0[:, :, 0], atol=1e-6)
    assert np.allclose(out["actions"][0, :, 3:6], R_act0[:4, :, 0], atol=1e-6)  # x-axis = first column
    assert np.allclose(out["actions"][0, :, 6:9], R_act0[:4, :, 1], atol=1e-6)
    assert np.allclose(out["actions"][3, :, :3], act0[[3, 4, 4, 4], :3], atol=1e-6)  # padded with the last action
    assert np.allclose(out["points"][5:], tree["data"]["demo_1"]["obs"]["point_cloud"][..., :3], atol=1e-6)


# ----------------------------------------------------------------------------- layers


def test_action_packing_is_an_exact_round_trip_and_carries_the_group_action():
    a = torch.randn(5, 16, 10)
    x = pack_actions(a)
    assert x.shape == (5, 4, 3, 16) and torch.equal(unpack_actions(x), a)
    assert torch.equal(x[:, 0, 1:], torch.zeros(5, 2, 16))  # the axes' fields have no l=0 part
    R = rotations(1)[0]
    assert torch.allclose(pack_actions(rotate_actions(a, R)), rotate_fields(x, R), atol=1e-6)
    assert torch.equal(rotate_actions(a, R)[..., 9], a[..., 9])  # the gripper is a scalar


def test_irrep_conv_is_one_kernel_per_degree_shared_over_orders():
    conv = IrrepConv1d(6, 5, 5)
    x = torch.randn(3, 4, 6, 16)
    y = conv(x)
    ref0 = F.conv1d(x[:, 0], conv.weight[0], conv.bias, padding=2)
    ref1 = torch.stack([F.conv1d(x[:, m], conv.weight[1], None, padding=2) for m in (1, 2, 3)], 1)
    assert torch.allclose(y[:, 0], ref0, atol=1e-6) and torch.allclose(y[:, 1:], ref1, atol=1e-6)


@pytest.mark.parametrize(
    "layer",
    [
        lambda: IrrepConv1d(6, 5, 5),
        lambda: IrrepRMSNorm(6),
        lambda: GateActivation(6),
        lambda: IrrepConvBlock(6, 5, 5),
        lambda: IrrepConvBlock(6, 6, 3, norm=False, scale=0.5),
        lambda: IrrepConvBlock(6, 6, 3, norm=False, scale=2.0),
    ],
)
def test_every_irreps_layer_commutes_with_rotations(layer):
    net = layer()
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.3 * torch.randn_like(p))  # not just the initial values
    x = torch.randn(4, 4, 6, 16)
    y = net(x)
    for R in rotations(6):
        assert rel_err(net(rotate_fields(x, R)), rotate_fields(y, R)) < 1e-5


def test_sfilm_formula_equivariance_and_zero_features():
    film = SFiLM(3, 4)
    out, cond = torch.randn(2, 4, 4, 8), torch.randn(2, 4, 3)
    y = film(out, cond)
    embed = film.encoder(cond)
    s, b = embed[:, :, 0::2], embed[:, :, 1::2]  # (2, 4, C)
    v = out[:, 1:4]
    length = (v * s[:, 1:4, :, None]).sum(1, keepdim=True)
    expected_v = length * v / v.norm(dim=1, keepdim=True) + b[:, 1:4, :, None]
    expected_s = (out[:, 0] * s[:, 0, :, None]) * torch.sign(out[:, 0]) + b[:, 0, :, None]  # <s,k> s/|s| + b
    assert torch.allclose(y[:, 1:4], expected_v, atol=1e-5) and torch.allclose(y[:, 0], expected_s, atol=1e-5)
    for R in rotations(4):
        assert rel_err(film(rotate_fields(out, R), rotate_fields(cond, R)), rotate_fields(y, R)) < 1e-5
    zero = torch.zeros(2, 4, 4, 8, requires_grad=True)
    z = film(zero, cond)
    z.sum().backward()
    assert torch.isfinite(z).all() and torch.isfinite(zero.grad).all()
    assert torch.allclose(z[:, 1:4], b[:, 1:4, :, None].expand_as(z[:, 1:4]))  # only the bias survives
    flat = FlatFiLM(3, 4)  # the ablation is not equivariant
    R = rotations(1)[0]
    assert rel_err(flat(rotate_fields(out, R), rotate_fields(cond, R)), rotate_fields(flat(out, cond), R)) > 1e-2


def test_irrep_linear_and_rms_norm_values():
    lin = IrrepLinear(3, 2)
    x = torch.randn(5, 4, 3)
    y = lin(x)
    assert torch.allclose(y[:, 0], x[:, 0] @ lin.weight[0].T + lin.bias)
    assert torch.allclose(y[:, 1:], x[:, 1:] @ lin.weight[1].T)
    norm = IrrepRMSNorm(6)
    z = norm(torch.randn(3, 4, 6, 5) * 7)
    ms = 0.5 * (z[:, 0].pow(2).mean(1) + z[:, 1:].pow(2).sum(1).mean(1) / 3)
    assert torch.allclose(ms, torch.ones_like(ms), atol=1e-4) and torch.allclose(
        z[:, 0].mean(1), torch.zeros(3, 5), atol=1e-5
    )


# ----------------------------------------------------------------------------- whole policies


def test_untrained_sdp_lite_is_equivariant_and_the_baseline_is_not():
    """The brief's must-pass check, structural (no training): error < 1e-4 in float32 on random R."""
    _, _, points, ee_axes, actions = scene_batch(6)
    schedule = make_schedule(DiffusionConfig())
    R = rotations(8)
    sdp = SDPPolicy(SMALL_SDP).eval()
    err = equivariance_error(sdp, schedule, points, ee_axes, actions, R, seed=0)
    assert err < TOL
    wide = SDPPolicy(SDPNetConfig(down_dims=(16, 32, 64), res_blocks=2, enc_channels=16)).eval()  # deeper, 3 levels
    assert equivariance_error(wide, schedule, points, ee_axes, actions, R[:3], seed=1) < TOL
    assert equivariance_error(DPPolicy(SMALL_DP).eval(), schedule, points, ee_axes, actions, R, seed=0) > 1e-2
    assert equivariance_error(SDPPolicy(SMALL_SDP, "film").eval(), schedule, points, ee_axes, actions, R, seed=0) > 1e-2
    # the error measure sees non-equivariance: the identity "rotation" gives exactly 0 for any network
    assert equivariance_error(DPPolicy(SMALL_DP).eval(), schedule, points, ee_axes, actions, torch.eye(3)[None], 0) == 0


def test_sampled_policy_is_equivariant_without_clip_sample_and_not_with_it():
    _, _, points, ee_axes, _ = scene_batch(4)
    cfg = DiffusionConfig(ddim_steps=4)
    schedule = make_schedule(cfg)
    sdp = SDPPolicy(SMALL_SDP).eval()
    R = rotations(3)
    assert policy_equivariance_error(sdp, schedule, points, ee_axes, 16, cfg, R, seed=0) < TOL
    assert policy_equivariance_error(sdp, schedule, points, ee_axes, 16, cfg, R, seed=0, clip=0.2) > 1e-3


def test_schedules_ema_and_lr():
    cfg = DiffusionConfig()
    assert sampling_timesteps(cfg) == list(range(0, 91, 6))  # diffusers' leading spacing
    assert sampling_timesteps(DiffusionConfig(spacing="trailing"))[-1] == 99
    sched = make_schedule(cfg)
    t = torch.arange(101, dtype=torch.float64) / 100
    f = torch.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2
    assert torch.allclose(sched.betas, (1 - f[1:] / f[:-1]).clamp(max=0.999))  # squaredcos_cap_v2
    assert ema_decay(1, 0.75, 0.9999) == 0.0
    assert ema_decay(11, 0.75, 0.9999) == pytest.approx(1 - 11**-0.75)
    assert ema_decay(10**9, 0.75, 0.9999) == 0.9999
    assert lr_factor(0, 10, 100) == pytest.approx(1 / 11) and lr_factor(10, 10, 100) == pytest.approx(1.0)
    assert lr_factor(55, 10, 100) == pytest.approx(0.5) and lr_factor(100, 10, 100) == pytest.approx(0.0)


def test_success_metric_accepts_either_grasp_and_rejects_offsets():
    s = make_scenes(DataConfig(), object_template(DataConfig(), 0), np.random.default_rng(0), 20, "so3")
    demo = canonicalise(s["points"], s["ee_pose"], s["actions"].astype(np.float64))[2]
    ok = success_metrics(demo, s, 0.05, 15)
    assert ok["success"].all() and np.array_equal(ok["grasp"], s["mode"]) and ok["gripper_closed"].all()
    other = demo.copy()
    n = np.arange(20)
    other[:, -1, :3] = s["goals"][n, 1 - s["mode"]] - s["ee_pose"][:, :3]
    assert success_metrics(other, s, 0.05, 15)["success"].all()  # the other grasp point counts too
    shifted = demo.copy()
    shifted[:, -1, 0] += 0.06
    assert not success_metrics(shifted, s, 0.05, 15)["success"].any()
    turned = demo.copy()
    Rz = np.array([[math.cos(0.35), -math.sin(0.35), 0], [math.sin(0.35), math.cos(0.35), 0], [0, 0, 1]])  # 20 deg
    R = axes_to_matrix(demo[:, -1, 3:6], demo[:, -1, 6:9]) @ Rz
    turned[:, -1, 3:9] = matrix_to_axes(R)
    out = success_metrics(turned, s, 0.05, 15)
    assert not out["success"].any() and np.allclose(out["rot_err_deg"], 20.05, atol=0.1)
    midway = demo.copy()  # averaging the two modes fails: the midpoint is 0.06 from both grasp points
    midway[:, -1, :3] = s["goals"].mean(1) - s["ee_pose"][:, :3]
    assert not success_metrics(midway, s, 0.05, 15)["success"].any()


def test_ddpm_loss_and_sampler_shapes():
    _, _, points, ee_axes, actions = scene_batch(4)
    sched = DDPMSchedule.create("cosine", 100)
    sdp = SDPPolicy(SMALL_SDP)
    loss = sched.loss(lambda x, t: sdp(x, t, points, ee_axes), actions)
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in sdp.parameters() if p.grad is not None)


def test_sdp_loss_is_invariant_under_rotating_the_scene_so_augmentation_changes_nothing():
    """Why one SDP-lite fit serves both comparisons: with the noise rotated alongside, its DDPM loss and
    its gradient are the same for a scene and any rotation of it (the baseline's are not)."""
    _, _, points, ee_axes, actions = scene_batch(6)
    R = random_rotations_torch(len(actions), torch.Generator().manual_seed(2))
    assert torch.allclose(R @ R.transpose(1, 2), torch.eye(3).expand(6, 3, 3), atol=1e-5)
    assert torch.allclose(torch.linalg.det(R), torch.ones(6), atol=1e-5)
    rp, re, ra = rotate_batch(points, ee_axes, actions, R)
    sched = make_schedule(DiffusionConfig())
    t = torch.randint(0, 100, (6,), generator=torch.Generator().manual_seed(0))
    eps = torch.randn(actions.shape, generator=torch.Generator().manual_seed(1))

    def loss_and_grad(policy, p, e, a, noise):
        policy.zero_grad()
        loss = ((policy(sched.q_sample(a, t, noise), t, p, e) - noise) ** 2).mean()
        loss.backward()
        return float(loss.detach()), torch.cat([q.grad.flatten() for q in policy.parameters() if q.grad is not None])

    for policy, invariant in ((SDPPolicy(SMALL_SDP), True), (DPPolicy(SMALL_DP), False)):
        loss, grad = loss_and_grad(policy, points, ee_axes, actions, eps)
        loss_r, grad_r = loss_and_grad(policy, rp, re, ra, rotate_actions(eps, R))
        assert (abs(loss_r - loss) < 1e-5 * loss) == invariant
        assert (rel_err(grad_r, grad) < 1e-4) == invariant


# ----------------------------------------------------------------------------- smoke pipeline (mirrors the contract test)

ARM_NAMES = ["method", "baseline", "method_film", "baseline_so3"]
CRITERIA = ["sdp_beats_augmented_dp", "sdp_beats_dp_on_so3_scenes", "sdp_keeps_success", "sfilm_vs_film_so3"]


def test_smoke_pipeline(smoke_run):
    run = smoke_run("sdp")
    cfg, ref, layout, v = run.cfg, run.dataset, run.layout, run.metrics.values
    assert {f"{name}.npz" for name in ("train", "train_so3", "val_so3", "test_yaw", "test_so3")} <= set(ref.files)
    assert read_dataset(layout.data_dir).sha256 == ref.sha256
    assert ref.meta["source"] == "synthetic" and ref.meta["rotations"]["train"] == "yaw"
    H = cfg.data.horizon
    assert load_demos_npz(ref.file("train.npz"))["actions"].shape == (cfg.data.n_train, H, 10)
    so3 = load_demos_npz(ref.file("train_so3.npz"))
    assert not np.allclose(so3["scene_rotation"][:, 2], [0, 0, 1], atol=1e-3)  # tilted, unlike the yaw demos

    n = cfg.train.n_seeds
    assert set(run.artifacts.history) == {f"{a}/seed{k}" for a in ARM_NAMES + ["control_placebo"] for k in range(n)}
    for name, records in run.artifacts.history.items():
        assert records and all(math.isfinite(float(x)) for r in records for x in r.values()), name
        assert any("val/loss" in r for r in records) and any("train/loss" in r for r in records)
    summary = run.artifacts.summary
    for arm in ARM_NAMES:  # the chosen lr and the best epochs are logged for every arm
        assert summary[f"select/{arm}/lr"] in cfg.train.lr_grid
        assert all(f"select/{arm}/seed{k}/best_epoch" in summary for k in range(n))
    selection = json.loads((layout.model_dir / "selection.json").read_text())
    assert all(len(selection[a]["table"]) == len(cfg.train.lr_grid) for a in ARM_NAMES)

    assert SPEC.primary_metric in v and not run.metrics.non_finite()
    units = run.metrics.units
    assert all(0 <= x <= 1 for t in ("yaw", "so3") for a in ARM_NAMES for x in units[f"success_{t}"][a].values())
    assert v["method/success_so3"] == pytest.approx(np.mean(run.metrics.unit("success_so3", "method").values))
    assert v["method/equivariance_error"] < TOL and v["baseline/equivariance_error"] > 1e-2
    assert v["method_film/equivariance_error"] > 1e-2  # flat FiLM breaks equivariance
    assert v["oracle/demo_success_yaw"] == 1.0 and v["oracle/demo_success_so3"] == 1.0
    figures = run.metrics.figures
    assert len(figures) == 5 and all(f.suffix == ".png" and f.stat().st_size > 1000 for f in figures)
    result = run.claim
    assert [c.name for c in result.criteria] == CRITERIA
    assert all(c.n_units == n for c in result.criteria)
    augmented = result.criterion("sdp_beats_augmented_dp")
    so3 = run.metrics.paired("success_so3", "method", "baseline")
    assert augmented.estimate == pytest.approx(np.mean(so3["method"].values - so3["baseline"].values))
    assert augmented.labels == so3["method"].labels and augmented.covers
    assert result.sanity["sdp_equivariance_error_below_tol"] and result.sanity["baseline_equivariance_error_order_one"]
    assert {"baseline_learns_task_>=0.2", "baseline_so3_learns_task_>=0.2"} <= set(result.sanity)
    on_disk = json.loads(layout.claim_file.read_text())
    assert on_disk["verdict"] == result.verdict and on_disk["figures"].keys() == result.figures.keys()

    model = SPEC.module().load_model(cfg, layout.model_dir)
    test = load_demos_npz(ref.file("test_so3.npz"))
    chunk = model.predict(test["points"][:3], test["ee_pose"][:3])
    assert chunk.shape == (3, H, 10) and np.isfinite(chunk).all()
    import pickle  # the spine logs the registered module with pickle serialisation

    again = pickle.loads(pickle.dumps(model)).predict(test["points"][:3], test["ee_pose"][:3])
    assert np.array_equal(again, chunk)


def _claim_metrics(success: dict[str, list[tuple[float, float]]], val: float = 0.6) -> Metrics:
    """Hand-built evaluation numbers: per arm, (yaw, SO(3)) success per seed; sane checks."""
    values = {
        "method/equivariance_error": 6e-7,
        "method/equivariance_error_untrained": 5e-7,
        "method/policy_equivariance_error": 1e-6,
        "method/policy_equivariance_error_clip_sample": 0.2,
        "oracle/demo_success_yaw": 1.0,
        "oracle/demo_success_so3": 1.0,
        "blind/val_success": 0.0,
    }
    from models.common.units import unit_labels

    metrics = Metrics(values)
    success = {"control_placebo": success["baseline"], **success}  # a placebo as good as the baseline by default
    for arm, seeds in success.items():
        values.update({f"{arm}/equivariance_error": 6e-7 if arm == "method" else 0.9, f"{arm}/chosen_lr": 1e-3})
        labels = unit_labels("seed", len(seeds))
        for key, i in (("success_yaw", 0), ("success_so3", 1)):
            metrics.add_units(key, arm, [s[i] for s in seeds], labels)
            values[f"{arm}/{key}"] = float(np.mean([s[i] for s in seeds]))
        values[f"{arm}/val_success"] = val
    return metrics


def test_claim_holds_fails_or_is_inconclusive_over_paired_seeds():
    from models.sdp.pipeline import claim

    cfg = SPEC.make_config("default")
    assert cfg.train.n_seeds == 3
    clear = {
        "method": [(0.90, 0.88), (0.85, 0.86), (0.92, 0.90)],
        "baseline": [(0.60, 0.55), (0.50, 0.52), (0.58, 0.57)],
        "method_film": [(0.70, 0.60), (0.65, 0.62), (0.70, 0.66)],
        "baseline_so3": [(0.50, 0.45), (0.55, 0.50), (0.52, 0.49)],
    }
    result = claim(cfg, _claim_metrics(clear))
    assert result.sane and [c.name for c in result.criteria] == CRITERIA
    aug = result.criterion("sdp_beats_augmented_dp")
    assert aug.estimate == pytest.approx(np.mean([0.88 - 0.55, 0.86 - 0.52, 0.90 - 0.57]))
    assert (aug.threshold, aug.direction, aug.n_units) == (0.0, ">", 3)
    keeps = result.criterion("sdp_keeps_success")
    assert keeps.estimate == pytest.approx(np.mean([0.88 - 0.72, 0.86 - 0.68, 0.90 - 0.736]))
    assert result.verdict == "holds" and all(c.state == "holds" for c in result.criteria)
    # The placebo (the baseline on other seeds, here equal to it) cannot beat the baseline: the control fails.
    (control,) = result.controls
    assert control.of == "sdp_beats_augmented_dp" and control.criterion.state == "fails" and not control.passes
    # A placebo that beats the baseline as clearly as SDP-lite does: the control passes and the claim cannot hold.
    lucky = claim(cfg, _claim_metrics({**clear, "control_placebo": clear["method"]}))
    assert lucky.controls[0].passes and verdict_of(lucky.criteria) == "holds" and lucky.verdict == "inconclusive"
    # The augmented baseline wins on every seed: the main criterion fails, and with it the claim.
    dp_wins = {**clear, "baseline": [(0.95, 0.95), (0.96, 0.97), (0.94, 0.96)]}
    lost = claim(cfg, _claim_metrics(dp_wins))
    assert lost.criterion("sdp_beats_augmented_dp").state == "fails" and lost.verdict == "fails"
    # Seeds that disagree give an interval across zero: inconclusive.
    mixed = {**clear, "baseline": [(0.9, 0.95), (0.5, 0.60), (0.9, 0.70)]}
    unsure = claim(cfg, _claim_metrics(mixed))
    assert unsure.criterion("sdp_beats_augmented_dp").state == "inconclusive" and unsure.verdict == "inconclusive"
    # A baseline whose validation success is not above the blind policy's by the margin fails a must-pass.
    weak = claim(cfg, _claim_metrics(clear, val=0.1))
    assert not weak.sane and weak.sanity["baseline_learns_task_>=0.2"] is False


def test_augmentation_rotates_every_sample_by_its_own_rotation():
    from models.sdp.training import DiffusionPolicyModule

    _, _, points, ee_axes, actions = scene_batch(4)
    R = random_rotations_torch(4, torch.Generator().manual_seed(0))
    rp, re, ra = rotate_batch(points, ee_axes, actions, R)
    for i in range(4):
        assert torch.allclose(rp[i], points[i] @ R[i].T, atol=1e-6)
        assert torch.allclose(ra[i, :, 3:6], actions[i, :, 3:6] @ R[i].T, atol=1e-6)
    assert torch.equal(ra[..., 9], actions[..., 9])  # the gripper is a scalar
    module = DiffusionPolicyModule(SDPPolicy(SMALL_SDP), make_schedule(DiffusionConfig()), Config().train, 1e-3, True)
    first = random_rotations_torch(4, module.rotation_generator)
    assert not torch.allclose(first, random_rotations_torch(4, module.rotation_generator))  # fresh per batch


def test_robomimic_hdf5_file_round_trip(tmp_path):
    """The same layout written as a real HDF5 file (h5py) reads back through ``load_robomimic_hdf5``."""
    import h5py

    from models.sdp.data import load_robomimic_hdf5

    rng = np.random.default_rng(1)
    T = 6
    R_act = random_rotations(rng, T)
    actions = np.concatenate([rng.standard_normal((T, 3)), R_act[:, 0, :], R_act[:, 1, :], np.ones((T, 1))], 1)
    path = tmp_path / "demos.hdf5"
    with h5py.File(path, "w") as f:
        demo = f.create_group("data/demo_0")
        demo.create_dataset("actions", data=actions)
        demo.create_dataset("obs/point_cloud", data=rng.standard_normal((T, 5, 6)))
        demo.create_dataset("obs/robot0_eef_pos", data=rng.standard_normal((T, 3)))
        demo.create_dataset("obs/robot0_eef_quat", data=rng.standard_normal((T, 4)))
    out = load_robomimic_hdf5(path, horizon=3)
    assert out["points"].shape == (T, 5, 3) and out["actions"].shape == (T, 3, 10)
    assert np.allclose(out["actions"][0, :, 3:6], R_act[:3, :, 0], atol=1e-6)


def test_default_verdict_is_labelled_budget_limited_and_the_paper_scale_is_not():
    """Below the paper scale the fits cannot reach a plateau (docs/methods/sdp.md): the claim explains the
    still-improving and undecided-placebo flags as budget-limited; at the paper scale it explains nothing."""
    from models.base import Flag
    from models.sdp.pipeline import claim
    from tasks.diagnostics import _explanation

    seeds = [(0.9, 0.88), (0.85, 0.86), (0.92, 0.9)]
    success = {"method": seeds, "baseline": seeds, "method_film": seeds, "baseline_so3": seeds}
    default = claim(SPEC.make_config("default"), _claim_metrics(success))
    improving = Flag("budget", "still_improving", "baseline", "baseline still improving", "")
    assert _explanation(default, improving).startswith("budget-limited: decided at `paper` scale")
    assert "budget-limited" in default.notes
    paper = claim(SPEC.make_config("paper"), _claim_metrics(success))
    assert paper.explained == {} and _explanation(paper, improving) == ""
