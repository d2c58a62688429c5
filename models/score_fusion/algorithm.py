"""Training (Lightning), sampling and metrics of Score-Fusion and its baselines.

* Stage 1 (``SliceDiffusion``): one 2.5-D epsilon model per slice direction, the DDPM loss
  MSE(eps, eps_hat) on random slices of the residual volumes.
* Stage 2 (``FusionTraining``): the 2-D models frozen; the 3-D fusion net learns per-voxel weights
  (``networks.fuse``) with the official hybrid loss 5 L1 + 150 L2 on epsilon.
* Samplers: DDIM from the shared toolkit with every model's epsilon; "self-consistency" projects
  x0_hat onto {r : avg_pool(r) = 0} so the super-resolved volume reproduces its LR input.
* Metrics: held-out epsilon-MSE on a stratified t grid (paired noise across models), PSNR, 3-D SSIM
  (skimage's algorithm), and finite-difference errors per axis (cross-slice consistency).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import lightning as L
import torch
from torch.nn import functional as F
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

from models.common.diffusion import DDPMSchedule, ddim_sample
from models.common.ema import EMA

from .config import FusionTrainConfig, TrainConfig
from .networks import ScoreFusion, SliceModel, coordinates, fuse

# ----------------------------------------------------------------------------- data


class SliceSet(Dataset):
    """Every slice along ``axis`` of a set of volumes, built on demand a whole batch at a time.

    An item is (clean residual slice (1, P, Q), the rest of the 2.5-D input (2k+1+3, P, Q)): the same
    channels ``networks.slice_inputs`` builds from whole volumes (the test checks they agree).
    """

    def __init__(self, residual: torch.Tensor, lr: torch.Tensor, axis: int, k: int) -> None:
        self.axis, self.k = axis, k
        self.n_slices = residual.shape[1 + axis]
        self.r = residual.movedim(1 + axis, 1)  # (N, S, P, Q) views
        self.lr = lr.movedim(1 + axis, 1)
        self.coords = coordinates(tuple(residual.shape[1:])).movedim(1 + axis, 1)  # (3, S, P, Q)

    def __len__(self) -> int:
        return len(self.r) * self.n_slices

    def __getitem__(self, index):
        index = torch.as_tensor(index)
        v, s = index // self.n_slices, index % self.n_slices
        lr = [self.lr[v, (s + o).clamp(0, self.n_slices - 1)] for o in range(-self.k, self.k + 1)]
        cond = torch.stack(lr + list(self.coords[:, s].unbind(0)), 1)
        return self.r[v, s][:, None], cond


class VolumeSet(Dataset):
    """(residual (1, D, H, W), cond (4, D, H, W)) per volume, a whole batch at a time."""

    def __init__(self, residual: torch.Tensor, lr: torch.Tensor) -> None:
        self.r, self.lr = residual, lr
        self.coords = coordinates(tuple(residual.shape[1:]))

    def __len__(self) -> int:
        return len(self.r)

    def __getitem__(self, index):
        index = torch.as_tensor(index)
        coords = self.coords.expand(len(index), -1, -1, -1, -1)
        return self.r[index][:, None], torch.cat([self.lr[index][:, None], coords], 1)


def random_batches(dataset: Dataset, batch_size: int, n_batches: int, seed: int) -> DataLoader:
    """``n_batches`` batches drawn with replacement, one index fetch per batch."""
    sampler = RandomSampler(
        dataset, replacement=True, num_samples=batch_size * n_batches, generator=torch.Generator().manual_seed(seed)
    )
    return DataLoader(dataset, sampler=BatchSampler(sampler, batch_size, drop_last=True), batch_size=None)


def whole_batches(dataset: Dataset, batch_size: int) -> DataLoader:
    return DataLoader(dataset, sampler=BatchSampler(range(len(dataset)), batch_size, False), batch_size=None)


# ----------------------------------------------------------------------------- Lightning


def noisy(schedule: DDPMSchedule, x0: torch.Tensor, stage: str, batch_idx: int):
    """(t, noise, x_t): random in training, a fixed draw per validation batch (comparable across epochs)."""
    g = torch.Generator(device=x0.device).manual_seed(10_000 + batch_idx) if stage != "train" else None
    t = torch.randint(0, schedule.n_steps, (len(x0),), generator=g, device=x0.device)
    noise = torch.randn(x0.shape, generator=g, device=x0.device, dtype=x0.dtype)
    return t, noise, schedule.q_sample(x0, t, noise)


class SliceDiffusion(L.LightningModule):
    """Stage 1: a 2-D epsilon model on slices along one axis; EMA weights are the ones kept."""

    def __init__(self, model: SliceModel, schedule: DDPMSchedule, cfg: TrainConfig) -> None:
        super().__init__()
        self.model, self.schedule, self.cfg = model, schedule, cfg
        self.ema = copy.deepcopy(model).requires_grad_(False)

    def shared_step(self, batch, stage: str, batch_idx: int) -> torch.Tensor:
        r, cond = batch
        t, noise, x_t = noisy(self.schedule, r, stage, batch_idx)
        model = self.model if stage == "train" else self.ema
        loss = F.mse_loss(model.forward_slices(torch.cat([x_t, cond], 1), t), noise)
        self.log(f"{stage}/loss", loss, on_step=False, on_epoch=True, batch_size=len(r))
        return loss

    def training_step(self, batch, batch_idx):
        return self.shared_step(batch, "train", batch_idx)

    def validation_step(self, batch, batch_idx):
        self.shared_step(batch, "val", batch_idx)

    def configure_callbacks(self) -> list:
        # ``ema`` holds the average, updated after every step (its state travels with the checkpoint).
        return [EMA("model", self.cfg.ema, into="ema")]

    def configure_optimizers(self):
        return torch.optim.Adam(self.model.parameters(), lr=self.cfg.lr)


def hybrid_loss(eps_hat: torch.Tensor, eps: torch.Tensor, cfg: FusionTrainConfig) -> torch.Tensor:
    """med-ddpm's ``hybrid``: l1_weight * L1 + l2_weight * L2 (plain MSE with ``loss='mse'``)."""
    if cfg.loss == "mse":
        return F.mse_loss(eps_hat, eps)
    return cfg.l1_weight * F.l1_loss(eps_hat, eps) + cfg.l2_weight * F.mse_loss(eps_hat, eps)


def random_crop(r: torch.Tensor, cond: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same random size^3 crop of both (coordinates stay global: they were built before cropping)."""
    starts = [int(torch.randint(0, n - size + 1, ())) for n in r.shape[2:]]
    window = (slice(None), slice(None), *(slice(s, s + size) for s in starts))
    return r[window], cond[window]


class FusionTraining(L.LightningModule):
    """Stage 2: only the fusion net trains; the three slice models are frozen (``requires_grad=False``,
    eval mode). Logs the fused loss and, on validation, the fused and merged epsilon-MSE."""

    def __init__(self, model: ScoreFusion, schedule: DDPMSchedule, cfg: FusionTrainConfig) -> None:
        super().__init__()
        self.model, self.schedule, self.cfg = model, schedule, cfg
        self.model.slices.requires_grad_(False).eval()
        self.ema = copy.deepcopy(model.fusion).requires_grad_(False)

    def shared_step(self, batch, stage: str, batch_idx: int) -> torch.Tensor:
        r, cond = batch
        if stage == "train" and self.cfg.crop and self.cfg.crop < min(r.shape[2:]):
            r, cond = random_crop(r, cond, self.cfg.crop)
        self.model.slices.eval()  # Lightning switches every sub-module to train mode; the 2-D nets stay frozen
        t, noise, x_t = noisy(self.schedule, r, stage, batch_idx)
        with torch.no_grad():
            eps3 = self.model.eps_2d(x_t, cond, t)
        fusion = self.model.fusion if stage == "train" else self.ema
        eps_hat = fuse(eps3, fusion(torch.cat([x_t, cond[:, :1], eps3], 1), t))
        loss = hybrid_loss(eps_hat, noise, self.cfg)
        logs = {"loss": loss, "eps_mse": F.mse_loss(eps_hat.detach(), noise)}
        if stage != "train":
            logs["merge_eps_mse"] = F.mse_loss(eps3.mean(1, keepdim=True), noise)
        self.log_dict({f"{stage}/{k}": v for k, v in logs.items()}, on_step=False, on_epoch=True, batch_size=len(r))
        return loss

    def training_step(self, batch, batch_idx):
        return self.shared_step(batch, "train", batch_idx)

    def validation_step(self, batch, batch_idx):
        self.shared_step(batch, "val", batch_idx)

    def configure_callbacks(self) -> list:
        # The official 3-D Trainer.step_ema: every ema_every optimiser steps, a copy of the fusion net until
        # step ema_start, then an exponential moving average (into ``ema``).
        c = self.cfg
        return [EMA("model.fusion", c.ema, start=c.ema_start, every=c.ema_every, into="ema")]

    def configure_optimizers(self):
        return torch.optim.Adam(self.model.fusion.parameters(), lr=self.cfg.lr)


# ----------------------------------------------------------------------------- sampling

EpsFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def pool_zero_projection(x: torch.Tensor, factor: int) -> torch.Tensor:
    """Orthogonal projection onto {x : avg_pool_factor(x) = 0}: x - up(avg_pool(x)) (nearest upsampling)."""
    pooled = F.avg_pool3d(x, factor, factor)
    return x - pooled.repeat_interleave(factor, 2).repeat_interleave(factor, 3).repeat_interleave(factor, 4)


def sample(
    eps_fn: EpsFn,
    schedule: DDPMSchedule,
    x_T: torch.Tensor,
    steps: int,
    eta: float = 0.0,
    self_consistency: bool = True,
    pool: int = 2,
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
