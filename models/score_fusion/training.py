"""Training of Score-Fusion's two stages (Lightning) and the data feeding them.

* Stage 1 (``SliceDiffusion``): one 2.5-D epsilon model per slice direction, the DDPM loss
  MSE(eps, eps_hat) on random slices of the residual volumes; the EMA weights are kept.
* Stage 2 (``FusionTraining``): the 2-D models frozen; the 3-D fusion net learns per-voxel weights
  (``networks.fuse``, or the residual-only ablation) with the official hybrid loss 5 L1 + 150 L2 on epsilon.

Both validate on fixed noise draws at fixed, stratified steps of the validation volumes (``WithSteps``;
comparable across epochs), which early stopping and the learning-rate selection read: ``SELECTION_METRIC``.

Cost (the default runs ~5000 small optimiser steps on one core): training metrics are averaged by the
module and logged once per epoch (``EpochMeans``; Lightning's per-step ``self.log`` was a fifth of a
step), Adam runs its multi-tensor (``foreach``) update, and the fusion fits of one set of frozen 2-D
models share their 2-D epsilon passes (``EpsCache``): every arm and learning rate of a seed draws the
same batches, steps and noise, and every validation the same fixed draws. None of this changes a number.
"""

from __future__ import annotations

import copy
import hashlib

import lightning as L
import torch
from torch.nn import functional as F
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

from models.common.diffusion import DDPMSchedule
from models.common.ema import EMA

from .config import FusionTrainConfig, TrainConfig
from .networks import ScoreFusion, SliceModel, coordinates, fuse

SELECTION_METRIC = {"slice": "val/loss", "fusion": "val/eps_mse"}  # lower is better
EPS_CACHE_BYTES = 512 * 2**20  # most 2-D epsilon fields an EpsCache keeps (the default stores ~100 MB)

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


class WithSteps(Dataset):
    """A validation set whose every item carries a fixed diffusion step, stratified over [0, n_steps) and
    shuffled across items: the validation score then has the test metric's t mix and no t-sampling noise
    (eps-MSE varies by orders of magnitude with t), so early stopping and selection compare like with like."""

    def __init__(self, base: Dataset, n_steps: int, seed: int) -> None:
        self.base = base
        n = len(base)
        g = torch.Generator().manual_seed(seed)
        order, u = torch.randperm(n, generator=g), torch.rand(n, generator=g, dtype=torch.float64)
        self.steps = ((order + u) * n_steps / n).long().clamp(max=n_steps - 1)

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index):
        return (*self.base[index], self.steps[torch.as_tensor(index)])


def random_batches(dataset: Dataset, batch_size: int, n_batches: int, seed: int) -> DataLoader:
    """``n_batches`` batches drawn with replacement, one index fetch per batch."""
    sampler = RandomSampler(
        dataset, replacement=True, num_samples=batch_size * n_batches, generator=torch.Generator().manual_seed(seed)
    )
    return DataLoader(dataset, sampler=BatchSampler(sampler, batch_size, drop_last=True), batch_size=None)


def whole_batches(dataset: Dataset, batch_size: int) -> DataLoader:
    return DataLoader(dataset, sampler=BatchSampler(range(len(dataset)), batch_size, False), batch_size=None)


# ----------------------------------------------------------------------------- Lightning


def noisy(schedule: DDPMSchedule, x0: torch.Tensor, stage: str, batch_idx: int, t: torch.Tensor | None = None):
    """(t, noise, x_t): random in training, a fixed draw per validation batch (comparable across epochs);
    a given ``t`` (the validation sets' fixed steps) is kept."""
    g = torch.Generator(device=x0.device).manual_seed(10_000 + batch_idx) if stage != "train" else None
    if t is None:
        t = torch.randint(0, schedule.n_steps, (len(x0),), generator=g, device=x0.device)
    noise = torch.randn(x0.shape, generator=g, device=x0.device, dtype=x0.dtype)
    return t, noise, schedule.q_sample(x0, t, noise)


class EpochMeans(L.LightningModule):
    """Training metrics as ``self.log(..., on_step=False, on_epoch=True)`` reports them (the batch-size
    weighted mean over the epoch, logged at its end), accumulated here instead: Lightning's per-call
    bookkeeping cost more than a small model's forward pass. Validation keeps ``self.log``."""

    def __init__(self) -> None:
        super().__init__()
        self._sums: dict[str, torch.Tensor] = {}
        self._count = 0

    def log_train(self, values: dict[str, torch.Tensor], batch_size: int) -> None:
        for key, value in values.items():
            self._sums[key] = self._sums.get(key, 0) + value.detach().float() * batch_size
        self._count += batch_size

    def on_train_epoch_start(self) -> None:
        self._sums, self._count = {}, 0

    def on_train_epoch_end(self) -> None:
        if self._count:
            means = {f"train/{key}": total / self._count for key, total in self._sums.items()}
            self.log_dict(means, on_step=False, on_epoch=True)


class EpsCache:
    """The frozen 2-D models' epsilon fields (``ScoreFusion.eps_2d``) by the content of their input, for the
    fusion fits of one set of 2-D models: the arms and learning rates of a seed draw the same batches,
    steps and noise (same seeds), and every validation the same fixed draws, so each distinct input goes
    through the three 2-D models once. A hit returns the very tensor computed before (bit for bit); past
    ``max_bytes`` new fields are computed and not kept. Make a new one whenever the 2-D models change."""

    def __init__(self, max_bytes: int = EPS_CACHE_BYTES) -> None:
        self.max_bytes, self.bytes, self.hits, self.misses = max_bytes, 0, 0, 0
        self.entries: dict[bytes, torch.Tensor] = {}

    @staticmethod
    def key(*tensors: torch.Tensor) -> bytes:
        digest = hashlib.blake2b(digest_size=20)
        for x in tensors:
            digest.update(f"{tuple(x.shape)}{x.dtype}".encode())
            digest.update(x.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
        return digest.digest()

    def __call__(self, model: ScoreFusion, x_t: torch.Tensor, cond: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        key = self.key(x_t, cond, t)
        if key in self.entries:
            self.hits += 1
            return self.entries[key]
        self.misses += 1
        eps = model.eps_2d(x_t, cond, t)
        size = eps.element_size() * eps.nelement()
        if self.bytes + size <= self.max_bytes:
            self.entries[key], self.bytes = eps, self.bytes + size
        return eps


class SliceDiffusion(EpochMeans):
    """Stage 1: a 2-D epsilon model on slices along one axis; EMA weights are the ones kept."""

    def __init__(self, model: SliceModel, schedule: DDPMSchedule, cfg: TrainConfig, lr: float) -> None:
        super().__init__()
        self.model, self.schedule, self.cfg, self.lr = model, schedule, cfg, lr
        self.ema = copy.deepcopy(model).requires_grad_(False)

    def shared_step(self, batch, stage: str, batch_idx: int) -> torch.Tensor:
        r, cond, *steps = batch
        t, noise, x_t = noisy(self.schedule, r, stage, batch_idx, *steps)
        model = self.model if stage == "train" else self.ema
        loss = F.mse_loss(model.forward_slices(torch.cat([x_t, cond], 1), t), noise)
        if stage == "train":
            self.log_train({"loss": loss}, len(r))
        else:
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
        # foreach: one multi-tensor update instead of a Python loop over the parameters (same arithmetic).
        return torch.optim.Adam(self.model.parameters(), lr=self.lr, foreach=True)


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


class FusionTraining(EpochMeans):
    """Stage 2: only the fusion net trains (with the model's fusion ``mode``); the three slice models are
    frozen (``requires_grad=False``, eval mode). Logs the fused loss and, on validation, the fused and
    merged epsilon-MSE. ``eps_cache`` (shared by the fits on the same 2-D models) saves their passes."""

    def __init__(
        self,
        model: ScoreFusion,
        schedule: DDPMSchedule,
        cfg: FusionTrainConfig,
        lr: float,
        eps_cache: EpsCache | None = None,
    ) -> None:
        super().__init__()
        self.model, self.schedule, self.cfg, self.lr = model, schedule, cfg, lr
        self.eps_cache = eps_cache
        self.model.slices.requires_grad_(False).eval()
        self.ema = copy.deepcopy(model.fusion).requires_grad_(False)

    def shared_step(self, batch, stage: str, batch_idx: int) -> torch.Tensor:
        r, cond, *steps = batch
        if stage == "train" and self.cfg.crop and self.cfg.crop < min(r.shape[2:]):
            r, cond = random_crop(r, cond, self.cfg.crop)
        self.model.slices.eval()  # Lightning switches every sub-module to train mode; the 2-D nets stay frozen
        t, noise, x_t = noisy(self.schedule, r, stage, batch_idx, *steps)
        with torch.no_grad():
            eps3 = (
                self.model.eps_2d(x_t, cond, t) if self.eps_cache is None else self.eps_cache(self.model, x_t, cond, t)
            )
        fusion = self.model.fusion if stage == "train" else self.ema
        eps_hat = fuse(eps3, self.model.weights(x_t, cond, t, eps3, fusion), self.model.mode)
        loss = hybrid_loss(eps_hat, noise, self.cfg)
        logs = {"loss": loss, "eps_mse": F.mse_loss(eps_hat.detach(), noise)}
        if stage == "train":
            self.log_train(logs, len(r))
            return loss
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
        return torch.optim.Adam(self.model.fusion.parameters(), lr=self.lr, foreach=True)
