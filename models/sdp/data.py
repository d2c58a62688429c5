"""The synthetic 3-D reach-and-align demonstrations, SDP's action layout, and the file loaders.

Action (10-D, absolute pose, SDP's layout): position (3), the EE's x- and y-axes (6: the first two
*columns* of the EE rotation matrix, i.e. the first two rows of its transpose, as SDP's
``rot_mat.transpose(2, 1)[:, :2, :]``), gripper (1, -1 open / +1 closed). The EE pose has the
same layout without the gripper: ``ee_pose`` = (position, x-axis, y-axis), 9 numbers.

Files (the brief's synthetic ``.npz`` format, one per split): ``points`` (n, N, 3), ``ee_pose``
(n, 9) and ``actions`` (n, H, 10), all in the world frame; the test splits add the evaluation
ground truth ``goals`` (n, 2, 3: both grasp points), ``goal_axes`` (n, 2, 3: target x/y axes),
``mode`` (n,: the grasp the demonstration chose) and ``scene_rotation`` (n, 3, 3).

A loader for robomimic/MimicGen-style demonstrations (``data/demo_<i>/obs/...``,
``data/demo_<i>/actions`` with pos + rot-6D + gripper absolute actions after SDP's conversion
scripts) turns them into the same arrays (``demos_from_robomimic``; ``load_robomimic_hdf5`` opens
the HDF5 file with h5py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
from scipy.spatial.transform import Rotation

from models.common.arrays import save_npz

from .config import DataConfig

DEMO_KEYS = ("points", "ee_pose", "actions")
ACTION_DIM = 10

# ----------------------------------------------------------------------------- rotations


def rot_z(theta: np.ndarray) -> np.ndarray:
    """(n,) angles -> (n, 3, 3) rotations about z."""
    c, s = np.cos(theta), np.sin(theta)
    z, o = np.zeros_like(theta), np.ones_like(theta)
    return np.stack([np.stack([c, -s, z], -1), np.stack([s, c, z], -1), np.stack([z, z, o], -1)], -2)


def random_rotations(rng: np.random.Generator, n: int) -> np.ndarray:
    """(n, 3, 3) rotations uniform on SO(3) (Haar): normalised Gaussian quaternions."""
    q = rng.standard_normal((n, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return quat_xyzw_to_matrix(q)


def quat_xyzw_to_matrix(q: np.ndarray) -> np.ndarray:
    """Unit quaternions (x, y, z, w) (robosuite's order) -> rotation matrices."""
    x, y, z, w = np.moveaxis(q / np.linalg.norm(q, axis=-1, keepdims=True), -1, 0)
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], -1),
            np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], -1),
            np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], -1),
        ],
        -2,
    )


def axes_to_matrix(ax: np.ndarray, ay: np.ndarray) -> np.ndarray:
    """Gram-Schmidt: two (possibly noisy) axes -> the rotation whose first two columns they span."""
    x = ax / np.maximum(np.linalg.norm(ax, axis=-1, keepdims=True), 1e-12)
    y = ay - (ay * x).sum(-1, keepdims=True) * x
    y = y / np.maximum(np.linalg.norm(y, axis=-1, keepdims=True), 1e-12)
    return np.stack([x, y, np.cross(x, y)], -1)


def matrix_to_axes(R: np.ndarray) -> np.ndarray:
    """Rotation matrices (..., 3, 3) -> (..., 6): the x-axis then the y-axis (first two columns)."""
    return np.concatenate([R[..., :, 0], R[..., :, 1]], -1)


def rot6d_rows_to_axes(d6: np.ndarray) -> np.ndarray:
    """robomimic/pytorch3d rotation-6D (the first two *rows* of R) -> the EE axes (first two columns).

    pytorch3d's ``rotation_6d_to_matrix`` Gram-Schmidts the two rows and stacks (b1, b2, b1 x b2) as
    rows; SDP then transposes, so the policy sees the columns: the pitfall the brief warns about.
    """
    rows = axes_to_matrix(d6[..., :3], d6[..., 3:6])  # columns = the orthonormalised rows
    R = np.swapaxes(rows, -1, -2)  # the rotation itself: its rows are b1, b2, b3
    return matrix_to_axes(R)


def rotation_angle_deg(R1: np.ndarray, R2: np.ndarray) -> np.ndarray:
    """Geodesic angle between rotations, degrees."""
    cos = (np.einsum("...ij,...ij->...", R1, R2) - 1) / 2  # trace(R1^T R2)
    return np.degrees(np.arccos(np.clip(cos, -1.0, 1.0)))


def slerp(R0: np.ndarray, R1: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """(n,3,3), (n,3,3), (H,) -> (n, H, 3, 3): R0 exp(alpha log(R0^T R1)) (left-equivariant)."""
    omega = Rotation.from_matrix(np.swapaxes(R0, -1, -2) @ R1).as_rotvec()  # (n, 3)
    steps = Rotation.from_rotvec((alpha[None, :, None] * omega[:, None, :]).reshape(-1, 3)).as_matrix()
    return R0[:, None] @ steps.reshape(len(R0), len(alpha), 3, 3)


# ----------------------------------------------------------------------------- the task


def object_template(data: DataConfig, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """An asymmetric rigid object in its own frame (origin = bottom centre, z up) and its 2 grasp points.

    Body: a box L x L/2 x L/3; a post of height 0.8 L near the (+x, +y) corner (no symmetry left).
    Grasp points: the two ends of the top face, +-grasp_offset along x.
    """
    rng = np.random.default_rng([seed, 17])
    L, n = data.object_size, data.n_points
    n_post = max(n // 4, 1)
    body = rng.uniform([-L / 2, -L / 4, 0], [L / 2, L / 4, L / 3], size=(n - n_post, 3))
    post = np.stack([np.full(n_post, L / 4), np.full(n_post, L / 4), np.linspace(L / 3, 0.8 * L, n_post)], 1)
    post[:, :2] += rng.uniform(-L / 40, L / 40, size=(n_post, 2))
    grasps = np.array([[data.grasp_offset, 0.0, L / 3], [-data.grasp_offset, 0.0, L / 3]])
    return np.concatenate([body, post]), grasps


def trajectory_profile(horizon: int) -> np.ndarray:
    """Smooth-step progress alpha(k / H) = 3 s^2 - 2 s^3 for actions k = 1..H (alpha = 1 at the end)."""
    s = np.arange(1, horizon + 1) / horizon
    return 3 * s**2 - 2 * s**3


def make_scenes(
    data: DataConfig,
    template: tuple[np.ndarray, np.ndarray],
    rng: np.random.Generator,
    n: int,
    rotation: Literal["yaw", "so3"],
) -> dict[str, np.ndarray]:
    """``n`` scenes with their demonstrations, world frame.

    Table frame (relative to the EE): the object stands upright at yaw psi, distance rho, depth d
    below the EE; the EE starts upright at yaw psi_ee (uniform), psi - psi_ee uniform in +-relative_yaw. The whole scene is then rotated about the EE
    by g (a yaw for "yaw", uniform on SO(3) for "so3") and translated to a random world EE position.
    """
    points_obj, grasps_obj = template
    H = data.horizon
    psi_ee, phi = (rng.uniform(0, 2 * np.pi, n) for _ in range(2))
    psi = psi_ee + np.radians(rng.uniform(-data.relative_yaw, data.relative_yaw, n))
    rho = rng.uniform(*data.reach_radius, n)
    depth = rng.uniform(*data.reach_depth, n)
    center = np.stack([rho * np.cos(phi), rho * np.sin(phi), -depth], 1)
    R_obj, R_ee = rot_z(psi), rot_z(psi_ee)
    points = center[:, None] + points_obj @ np.swapaxes(R_obj, 1, 2)
    points = points + data.point_noise * rng.standard_normal(points.shape)
    goals = center[:, None] + grasps_obj @ np.swapaxes(R_obj, 1, 2)  # (n, 2, 3)
    mode = rng.integers(0, 2, n)
    target = goals[np.arange(n), mode]
    alpha = trajectory_profile(H)
    pos = alpha[None, :, None] * target[:, None]  # from the EE (origin) to the grasp point
    rots = slerp(R_ee, R_obj, alpha)  # (n, H, 3, 3): EE axes turned onto the object's
    grip = np.where(np.arange(H) >= H - data.close_steps, 1.0, -1.0)

    g = rot_z(rng.uniform(0, 2 * np.pi, n)) if rotation == "yaw" else random_rotations(rng, n)
    ee = np.stack(
        [
            rng.uniform(-data.ee_box, data.ee_box, n),
            rng.uniform(-data.ee_box, data.ee_box, n),
            rng.uniform(0.3, 0.5, n),
        ],
        1,
    )
    gT = np.swapaxes(g, 1, 2)
    actions = np.concatenate(
        [
            ee[:, None] + pos @ gT,
            matrix_to_axes(g[:, None] @ rots),
            np.broadcast_to(grip[None, :, None], (n, H, 1)),
        ],
        -1,
    )
    goal_R = g @ R_obj
    return {
        "points": (ee[:, None] + points @ gT).astype(np.float32),
        "ee_pose": np.concatenate([ee, matrix_to_axes(g @ R_ee)], 1).astype(np.float32),
        "actions": actions.astype(np.float32),
        "goals": (ee[:, None] + goals @ gT).astype(np.float32),
        "goal_axes": np.stack([goal_R[:, :, 0], goal_R[:, :, 1]], 1).astype(np.float32),
        "mode": mode.astype(np.int64),
        "scene_rotation": g.astype(np.float32),
    }


def make_splits(data: DataConfig, seed: int) -> dict[str, dict[str, np.ndarray]]:
    """train (yaw: the upright table), train_so3 (as many uniform-SO(3) scenes: the second arm's data),
    val_so3 (held-out SO(3) scenes: every arm's validation), test_yaw and test_so3."""
    template = object_template(data, seed)
    sizes = {
        "train": (data.n_train, "yaw"),
        "train_so3": (data.n_train, "so3"),
        "val_so3": (data.n_val, "so3"),
        "test_yaw": (data.n_test, "yaw"),
        "test_so3": (data.n_test, "so3"),
    }
    return {
        name: make_scenes(data, template, np.random.default_rng([seed, i]), n, rot)
        for i, (name, (n, rot)) in enumerate(sizes.items())
    }


# ----------------------------------------------------------------------------- canonicalisation


def canonicalise(points: np.ndarray, ee_pose: np.ndarray, actions: np.ndarray | None = None):
    """T(3) invariance: subtract the EE position from the points, the EE and the action positions."""
    ee = ee_pose[:, None, :3]
    out_points = points - ee
    out_pose = np.concatenate([np.zeros_like(ee_pose[:, :3]), ee_pose[:, 3:]], 1)
    if actions is None:
        return out_points, out_pose
    out_actions = actions.copy()
    out_actions[..., :3] -= ee
    return out_points, out_pose, out_actions


def decanonicalise(actions: np.ndarray, ee_pose: np.ndarray) -> np.ndarray:
    """Add the EE position back to canonical action positions."""
    out = actions.copy()
    out[..., :3] += ee_pose[:, None, :3]
    return out


def position_scale(actions_canonical: np.ndarray) -> float:
    """SDP's equal-scale normaliser: ONE scale for every xyz (points and actions), so rotations commute
    with it (a per-axis min-max normaliser would not): the largest action displacement."""
    return float(np.abs(actions_canonical[..., :3]).max())


# ----------------------------------------------------------------------------- files


def save_demos_npz(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    save_npz(Path(path), **{k: np.asarray(v) for k, v in arrays.items()})


def load_demos_npz(path: Path) -> dict[str, np.ndarray]:
    """The brief's synthetic format: ``points`` (n, N, 3), ``ee_pose`` (n, 9), ``actions`` (n, H, 10)."""
    with np.load(path) as archive:
        arrays = {k: archive[k] for k in archive.files}
    missing = [k for k in DEMO_KEYS if k not in arrays]
    if missing:
        raise ValueError(f"{path}: missing arrays {missing} (need {DEMO_KEYS})")
    n = len(arrays["points"])
    p, e, a = arrays["points"], arrays["ee_pose"], arrays["actions"]
    if (
        p.ndim != 3
        or p.shape[2] != 3
        or e.shape != (n, 9)
        or a.ndim != 3
        or a.shape[0] != n
        or a.shape[2] != ACTION_DIM
    ):
        raise ValueError(
            f"{path}: shapes points {p.shape}, ee_pose {e.shape}, actions {a.shape} do not match "
            "(n, N, 3), (n, 9), (n, H, 10)"
        )
    return arrays


def demos_from_robomimic(
    root: Mapping[str, Any], horizon: int, point_cloud_key: str = "point_cloud", rot6d: Literal["rows", "axes"] = "rows"
) -> dict[str, np.ndarray]:
    """robomimic/MimicGen layout -> (points, ee_pose, actions) windows in this module's layout.

    ``root["data"]["demo_<i>"]`` holds ``obs/<point_cloud_key>`` (T, N, >=3; colour columns dropped),
    ``obs/robot0_eef_pos`` (T, 3), ``obs/robot0_eef_quat`` (T, 4, x y z w) and ``actions`` (T, 10:
    pos, rot-6D, gripper; absolute, after SDP's ``robomimic_dataset_conversion.py``). ``rot6d="rows"``
    is pytorch3d's ``matrix_to_rotation_6d`` (first two rows, SDP's files), converted here to the EE
    axes. Every time step t starts one window of ``horizon`` actions, padded with the last action
    (Diffusion Policy's sequence sampler with pad_after).
    """
    demos = root["data"]
    names = sorted(demos.keys(), key=lambda k: int(str(k).rsplit("_", 1)[-1]))
    points, poses, windows = [], [], []
    for name in names:
        demo = demos[name]
        obs = demo["obs"]
        pc = np.asarray(obs[point_cloud_key])[..., :3]
        pos = np.asarray(obs["robot0_eef_pos"])
        R = quat_xyzw_to_matrix(np.asarray(obs["robot0_eef_quat"]))
        act = np.asarray(demo["actions"], dtype=np.float64)
        if act.shape[-1] != ACTION_DIM:
            raise ValueError(f"{name}: actions have {act.shape[-1]} columns, expected 10 (pos, rot-6D, gripper)")
        axes = rot6d_rows_to_axes(act[:, 3:9]) if rot6d == "rows" else act[:, 3:9]
        act = np.concatenate([act[:, :3], axes, act[:, 9:]], 1)
        T = len(act)
        index = np.minimum(np.arange(T)[:, None] + np.arange(horizon)[None], T - 1)
        points.append(pc)
        poses.append(np.concatenate([pos, matrix_to_axes(R)], 1))
        windows.append(act[index])
    return {
        "points": np.concatenate(points).astype(np.float32),
        "ee_pose": np.concatenate(poses).astype(np.float32),
        "actions": np.concatenate(windows).astype(np.float32),
    }


def load_robomimic_hdf5(path: Path, horizon: int, point_cloud_key: str = "point_cloud") -> dict[str, np.ndarray]:
    """Open a robomimic/MimicGen HDF5 file (needs h5py) and convert it with ``demos_from_robomimic``."""
    try:
        import h5py
    except ImportError as exc:  # requirements/methods.txt pins it; a bare install may lack it
        raise ImportError("reading robomimic HDF5 demonstrations needs h5py (pip install h5py)") from exc
    with h5py.File(path, "r") as root:
        return demos_from_robomimic(root, horizon, point_cloud_key)
