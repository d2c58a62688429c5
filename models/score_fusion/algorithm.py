"""Sampling and metrics of Score-Fusion and its baselines (training: ``training``).

* Samplers: DDIM from the shared toolkit with every model's epsilon; "self-consistency" projects
  x0_hat onto {r : avg_pool(r) = 0} so the super-resolved volume reproduces its LR input.
* Metrics: held-out epsilon-MSE on a stratified t grid (paired noise across models), PSNR, 3-D SSIM
  (skimage's algorithm), and finite-difference errors per axis (cross-slice consistency).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.nn import functional as F

from models.common.diffusion import DDPMSchedule, ddim_sample

from .networks import ScoreFusion

# ----------------------------------------------------------------------------- sampling

EpsFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def pool_zero_projection(x: torch.Tensor, factor: int | tuple[int, int, int]) -> torch.Tensor:
    """Orthogonal projection onto {x : avg_pool_factor(x) = 0}: x - up(avg_pool(x)) (nearest upsampling);
    ``factor`` per axis (D, H, W) or the same on all three."""
    fd, fh, fw = (factor,) * 3 if isinstance(factor, int) else factor
    pooled = F.avg_pool3d(x, (fd, fh, fw), (fd, fh, fw))
    return x - pooled.repeat_interleave(fd, 2).repeat_interleave(fh, 3).repeat_interleave(fw, 4)


def sample(
    eps_fn: EpsFn,
    schedule: DDPMSchedule,
    x_T: torch.Tensor,
    steps: int,
    eta: float = 0.0,
    self_consistency: bool = True,
    pool: int | tuple[int, int, int] = 2,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """DDIM (the shared sampler) with a model epsilon ``eps_fn(x_t, t)``.

    With ``self_consistency`` the model is wrapped into an x0-predictor whose x0_hat is projected so
    that its ``pool``-fold average pool is zero; the last DDIM step returns x0_hat itself, so the
    residual sample pools to exactly 0 and up(LR) + sample reproduces the LR input under the pooling.
    """
    if not self_consistency:
        return ddim_sample(eps_fn, schedule, x_T, steps, eta=eta, prediction="eps", generator=generator)

    def x0_fn(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return pool_zero_projection(schedule.predict_x0(x, t, eps_fn(x, t)), pool)

    return ddim_sample(x0_fn, schedule, x_T, steps, eta=eta, prediction="x0", generator=generator)


def tpdm_eps(
    model: ScoreFusion, cond: torch.Tensor, probs: tuple[float, float, float], generator: torch.Generator
) -> tuple[EpsFn, list[int]]:
    """TPDM: at every sampler call one slice direction, drawn with ``probs``, supplies epsilon.
    Returns the epsilon function and the list that records the drawn axes."""
    drawn: list[int] = []
    weights = torch.tensor(probs, dtype=torch.float64)

    def eps_fn(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        axis = int(torch.multinomial(weights, 1, generator=generator))
        drawn.append(axis)
        return model.slices[axis](x, cond, t)

    return eps_fn, drawn


# ----------------------------------------------------------------------------- metrics


def stratified_steps(n_volumes: int, points: int, n_steps: int, generator: torch.Generator) -> torch.Tensor:
    """(n_volumes, points) steps: one uniform draw inside each of ``points`` equal bins of [0, n_steps)."""
    u = torch.rand(n_volumes, points, generator=generator, dtype=torch.float64)
    return ((torch.arange(points, dtype=torch.float64) + u) * n_steps / points).long().clamp(max=n_steps - 1)


def psnr(x: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Per-volume PSNR (dB) of volumes in [-1, 1] rescaled to [0, 1] (data_range 1, as the official metrics)."""
    mse = (((x.clamp(-1, 1) - ref) / 2) ** 2).flatten(1).mean(1).clamp_min(1e-12)
    return -10 * torch.log10(mse)


def ssim3d(x: torch.Tensor, ref: torch.Tensor, window: int = 7, data_range: float = 1.0) -> torch.Tensor:
    """Per-volume 3-D SSIM with skimage's defaults (uniform ``window``^3 filter, K1 0.01, K2 0.03, sample
    covariance, the border (window - 1) / 2 excluded): the mean over every full window position.

    Inputs (B, D, H, W) in [-1, 1] are rescaled to [0, 1] first (data_range 1).
    """
    a, b = ((x.clamp(-1, 1) + 1) / 2)[:, None].double(), ((ref + 1) / 2)[:, None].double()
    mean = lambda v: F.avg_pool3d(v, window, 1)  # (valid positions = skimage's cropped map)
    n = window**3
    cov_norm = n / (n - 1)
    ux, uy = mean(a), mean(b)
    vx = cov_norm * (mean(a * a) - ux * ux)
    vy = cov_norm * (mean(b * b) - uy * uy)
    vxy = cov_norm * (mean(a * b) - ux * uy)
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    s = (2 * ux * uy + c1) * (2 * vxy + c2) / ((ux * ux + uy * uy + c1) * (vx + vy + c2))
    return s.flatten(1).mean(1).float()


def finite_difference_errors(x: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """(B, 3): MSE between the forward differences of ``x`` and of ``ref`` along D, H, W (cross-slice
    consistency: a slice-wise model that treats neighbouring slices independently errs along its axis)."""
    x = x.clamp(-1, 1)
    return torch.stack([((x.diff(dim=1 + a) - ref.diff(dim=1 + a)) ** 2).flatten(1).mean(1) for a in range(3)], 1)
