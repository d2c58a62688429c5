"""The LightningModule every arm trains with: the DDPM epsilon loss, optional SO(3) augmentation, EMA.

The loss is E_{t, eps} ||eps - eps_hat(sqrt(ab_t) a_0 + sqrt(1 - ab_t) eps, t | obs)||^2 on
normalised, canonicalised 10-D action chunks (``models.common.diffusion.DDPMSchedule.loss``);
AdamW with a linear warm-up then cosine decay; diffusers' EMA (decay 1 - (1 + step)^-power,
capped), whose weights are validated, early-stopped on and kept.

``augment``: each training sample is rotated about the EE by its own uniform SO(3) rotation (points,
EE axes and actions alike) -- the rotation augmentation a practitioner gives a non-equivariant
policy, drawn from a generator the module owns (so a resumed fit draws the same rotations).
Validation uses one fixed draw of (t, eps) per sample, so ``val/loss`` changes only with the weights.
"""

from __future__ import annotations

import copy
import math

import lightning as L
import torch

from models.common.diffusion import DDPMSchedule

from .config import TrainConfig
from .networks import rotate_actions

VALIDATION_NOISE_SEED = 12345


def ema_decay(step: int, power: float, max_decay: float) -> float:
    """diffusers' EMAModel.get_decay (inv_gamma 1, update_after_step 0, min_value 0)."""
    step = step - 1
    if step <= 0:
        return 0.0
    return min(1 - (1 + step) ** -power, max_decay)


def lr_factor(step: int, warmup: int, total: int) -> float:
    """Linear warm-up then cosine decay to 0 (diffusers' cosine schedule with warm-up, starting at 1/(warmup+1))."""
    if step < warmup:
        return (step + 1) / (warmup + 1)
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def random_rotations_torch(n: int, generator: torch.Generator) -> torch.Tensor:
    """(n, 3, 3) rotations uniform on SO(3): normalised Gaussian quaternions (w, x, y, z)."""
    q = torch.randn(n, 4, generator=generator)
    w, x, y, z = (q / q.norm(dim=1, keepdim=True)).unbind(1)
    return torch.stack(
        [
            torch.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], -1),
            torch.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], -1),
            torch.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], -1),
        ],
        -2,
    )


def rotate_batch(points: torch.Tensor, ee_axes: torch.Tensor, actions: torch.Tensor, R: torch.Tensor):
    """Rotate each sample of a canonical batch about the EE by its own R (B, 3, 3)."""
    Rt = R.transpose(1, 2)
    return points @ Rt, ee_axes @ Rt, rotate_actions(actions, R)


class DiffusionPolicyModule(L.LightningModule):
    """Epsilon-prediction DDPM training of a policy ``net(x_t, t, points, ee_axes) -> eps_hat``."""

    def __init__(
        self,
        policy: torch.nn.Module,
        schedule: DDPMSchedule,
        cfg: TrainConfig,
        lr: float,
        augment: bool = False,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.policy, self.schedule, self.cfg, self.lr, self.augment = policy, schedule, cfg, lr, augment
        self.ema = copy.deepcopy(policy).requires_grad_(False)
        self.updates = 0
        self.rotation_generator = torch.Generator().manual_seed(seed + 7919)

    def training_step(self, batch, batch_idx):
        points, ee_axes, actions = batch
        if self.augment:
            R = random_rotations_torch(len(actions), self.rotation_generator)
            points, ee_axes, actions = rotate_batch(points, ee_axes, actions, R)
        loss = self.schedule.loss(lambda x, t: self.policy(x, t, points, ee_axes), actions, prediction="eps")
        self.log("train/loss", loss, on_step=False, on_epoch=True, batch_size=len(actions))
        return loss

    def validation_step(self, batch, batch_idx):
        points, ee_axes, actions = batch
        fixed = torch.Generator().manual_seed(VALIDATION_NOISE_SEED)
        loss = self.schedule.loss(lambda x, t: self.ema(x, t, points, ee_axes), actions, "eps", fixed)
        self.log("val/loss", loss, on_step=False, on_epoch=True, batch_size=len(actions))

    @torch.no_grad()
    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        self.updates += 1
        decay = ema_decay(self.updates, self.cfg.ema_power, self.cfg.ema_max_decay)
        for e, p in zip(self.ema.parameters(), self.policy.parameters()):
            e.lerp_(p, 1 - decay)

    def configure_optimizers(self):
        c = self.cfg
        opt = torch.optim.AdamW(
            self.policy.parameters(), lr=self.lr, betas=c.betas, weight_decay=c.weight_decay, fused=True
        )
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, c.warmup_steps, c.steps))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
