"""The equal-scale normaliser, the diffusion schedule, DDIM sampling, success and equivariance metrics.

Training (every arm's ``DiffusionPolicyModule``) lives in ``training.py``. Sampling is DDIM
(``models.common.diffusion.ddim_sample``) without clipping by default.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from models.common.diffusion import DDPMSchedule, ddim_sample, ddim_timesteps

from .config import DiffusionConfig
from .data import axes_to_matrix, canonicalise, rotation_angle_deg
from .networks import rotate_actions

# ----------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Normaliser:
    """SDP's equal-scale normaliser: every xyz (points, action positions) divided by one scalar; the
    axes are unit vectors and the gripper is +-1 already. One scalar commutes with rotations."""

    scale: float

    def observation(self, points: np.ndarray, ee_pose: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """World-frame arrays -> (points (n, N, 3), ee_axes (n, 2, 3)): canonicalised and normalised."""
        p, e = canonicalise(points, ee_pose)
        return tensor(p / self.scale), tensor(e[:, 3:9].reshape(-1, 2, 3))

    def actions(self, actions: np.ndarray, ee_pose: np.ndarray) -> torch.Tensor:
        a = actions.astype(np.float64).copy()
        a[..., :3] = (a[..., :3] - ee_pose[:, None, :3]) / self.scale
        return tensor(a)

    def unnormalise(self, actions: torch.Tensor) -> np.ndarray:
        """Normalised canonical actions -> canonical (EE-relative) actions in world units."""
        a = actions.double().numpy().copy()
        a[..., :3] *= self.scale
        return a


def tensor(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))


# ----------------------------------------------------------------------------- training


def make_schedule(cfg: DiffusionConfig) -> DDPMSchedule:
    """squaredcos_cap_v2 (Nichol & Dhariwal's cosine, betas capped at 0.999), ``train_steps`` steps."""
    return DDPMSchedule.create("cosine", cfg.train_steps)


# ----------------------------------------------------------------------------- sampling


def sampling_timesteps(cfg: DiffusionConfig) -> list[int]:
    """DDIM's sub-sequence: diffusers' "leading" spacing (k * (T // n), k < n) or "trailing" (ending at T - 1)."""
    return ddim_timesteps(cfg.train_steps, cfg.ddim_steps, cfg.spacing)


@torch.no_grad()
def sample_actions(
    policy: torch.nn.Module,
    schedule: DDPMSchedule,
    points: torch.Tensor,
    ee_axes: torch.Tensor,
    horizon: int,
    cfg: DiffusionConfig,
    generator: torch.Generator | None = None,
    x_T: torch.Tensor | None = None,
    clip: float | None = None,
) -> torch.Tensor:
    """DDIM from x_T ~ N(0, I) (or the given x_T) to normalised canonical action chunks (B, H, 10)."""
    cond = policy.encode(points, ee_axes)
    if x_T is None:
        x_T = torch.randn(len(points), horizon, 10, generator=generator)
    clip = cfg.clip_sample if clip is None else clip
    return ddim_sample(
        lambda x, t: policy.denoise(x, t, cond),
        schedule,
        x_T,
        eta=cfg.eta,
        generator=generator,
        clip_x0=clip,
        timesteps=sampling_timesteps(cfg),
    )


# ----------------------------------------------------------------------------- metrics


def success_metrics(
    pred: np.ndarray, split: dict[str, np.ndarray], pos_tol: float, deg_tol: float
) -> dict[str, np.ndarray]:
    """Per-scene outcome of a canonical (EE-relative, world-unit) action chunk's last action.

    Success: final position within ``pos_tol`` of either grasp point and orientation error (geodesic
    angle between the Gram-Schmidt rotation of the predicted axes and the object's) below ``deg_tol``.
    """
    final = pred[:, -1]
    goals = split["goals"] - split["ee_pose"][:, None, :3]  # (n, 2, 3), canonical
    dist = np.linalg.norm(final[:, None, :3] - goals, axis=-1)  # (n, 2)
    nearest = dist.argmin(1)
    R_pred = axes_to_matrix(final[:, 3:6], final[:, 6:9])
    R_goal = axes_to_matrix(split["goal_axes"][:, 0].astype(np.float64), split["goal_axes"][:, 1].astype(np.float64))
    angle = rotation_angle_deg(R_pred, R_goal)
    pos_err = dist.min(1)
    success = (pos_err < pos_tol) & (angle < deg_tol)
    return {
        "success": success,
        "pos_err": pos_err,
        "rot_err_deg": angle,
        "grasp": nearest,
        "gripper_closed": final[:, 9] > 0,
    }


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


@torch.no_grad()
def equivariance_error(
    policy: torch.nn.Module,
    schedule: DDPMSchedule,
    points: torch.Tensor,
    ee_axes: torch.Tensor,
    actions: torch.Tensor,
    rotations: torch.Tensor,
    seed: int,
) -> float:
    """max_R ||f(R obs, R a_t, t) - R f(obs, a_t, t)|| / ||f(obs, a_t, t)|| for the denoiser f, with
    a_t = q_sample(a_0, t) at random steps (float32, uniformly random rotations)."""
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(0, schedule.n_steps, (len(actions),), generator=g)
    x_t = schedule.q_sample(actions, t, generator=g)
    f = policy(x_t, t, points, ee_axes)
    worst = 0.0
    for R in rotations:
        f_rot = policy(rotate_actions(x_t, R), t, points @ R.T, ee_axes @ R.T)
        worst = max(worst, relative_error(f_rot, rotate_actions(f, R)))
    return worst


@torch.no_grad()
def policy_equivariance_error(
    policy: torch.nn.Module,
    schedule: DDPMSchedule,
    points: torch.Tensor,
    ee_axes: torch.Tensor,
    horizon: int,
    cfg: DiffusionConfig,
    rotations: torch.Tensor,
    seed: int,
    clip: float | None = None,
) -> float:
    """The sampled policy end to end: DDIM from R x_T on the rotated scene vs R (DDIM from x_T), with
    eta = 0 (deterministic; with eta > 0 the injected noise would have to be rotated as well)."""
    cfg = cfg.model_copy(update={"eta": 0.0})
    x_T = torch.randn(len(points), horizon, 10, generator=torch.Generator().manual_seed(seed))
    a = sample_actions(policy, schedule, points, ee_axes, horizon, cfg, x_T=x_T, clip=clip)
    worst = 0.0
    for R in rotations:
        a_rot = sample_actions(
            policy, schedule, points @ R.T, ee_axes @ R.T, horizon, cfg, x_T=rotate_actions(x_T, R), clip=clip
        )
        worst = max(worst, relative_error(a_rot, rotate_actions(a, R)))
    return worst
