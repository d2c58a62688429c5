"""Bridge matching (teacher and fake bridge), the IBMD min-max, samplers and distribution metrics.

Losses follow the official I2SB runner at commit e4c4679:

* bridge matching (teacher and fake bridge, the *same* function):
  E_{t, x_t ~ q(x_t | x0, x1)} w(t) ||x0_hat(x_t, t [, x1]) - x0||^2 (``--x0-prediction-loss``);
* generator (Theorem 3.2, inner max solved approximately by ``bridge_loop`` fake steps):
  E w(t) [ ||x0_hat*(x_t) - x0||^2 - ||x0_hat^phi(x_t) - x0||^2 ], x0 = G(z, x1) and x_t drawn
  from the bridge with x0 *detached* (``q_sample(..., detach=True)``, the one-step I2SB path), so
  the gradient reaches theta through the explicit x0 only: 2 (x0_hat^phi - x0_hat*) dx0/dtheta.
"""

from __future__ import annotations

import copy
import math

import lightning as L
import torch
from torch.utils.data import DataLoader

from models.common.batches import Rows, random_batches
from models.common.diffusion import BridgeSchedule

from .config import DistillConfig, TeacherConfig
from .networks import BridgeNet, OneStepGenerator

# ----------------------------------------------------------------------------- losses


def loss_weight(step: torch.Tensor, n_steps: int, coeff: float) -> torch.Tensor:
    """``--normalize-generator-loss-by-t-power-ten``: 10^(c (1 - step / n_steps)); 1 when c = 0."""
    return 10.0 ** (coeff * (1 - step.float() / n_steps))


def bridge_matching_loss(
    net: BridgeNet, bridge: BridgeSchedule, x0: torch.Tensor, x1: torch.Tensor, step: torch.Tensor, coeff: float = 0.0
) -> torch.Tensor:
    """Mean over the batch of w(t) * mean_d (x0_hat(x_t, t) - x0)^2, x_t ~ q(x_t | x0, x1)."""
    x_t = bridge.q_sample(step, x0, x1)
    x0_hat = net.pred_x0(x_t, step, x1 if net.cond else None)
    per_sample = ((x0_hat - x0) ** 2).mean(1)
    return (loss_weight(step, bridge.n_steps, coeff) * per_sample).mean()


def generator_loss(
    teacher: BridgeNet,
    fake: BridgeNet,
    bridge: BridgeSchedule,
    x0: torch.Tensor,
    x1: torch.Tensor,
    step: torch.Tensor,
    coeff: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """IBMD's generator objective (can be negative) and the fake bridge's prediction at x_t."""
    x_t = bridge.q_sample(step, x0.detach(), x1)
    cond = x1 if teacher.cond else None
    with torch.no_grad():  # both bridges are constants here; only x0 = G(z, x1) carries gradient
        teacher_x0 = teacher.pred_x0(x_t, step, cond)
        fake_x0 = fake.pred_x0(x_t, step, cond)
    per_sample = ((teacher_x0 - x0) ** 2 - (fake_x0 - x0) ** 2).mean(1)
    return (loss_weight(step, bridge.n_steps, coeff) * per_sample).mean(), fake_x0


def convergence_condition(bridge_x0: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
    """The code's logged condition mean(x0_hat^2) - mean(x0_hat * x0): 0 when x0_hat = E[x0 | x_t]."""
    return (bridge_x0**2).mean() - (bridge_x0 * x0).mean()


# ----------------------------------------------------------------------------- data loading


def corrupted_only_loader(x1: torch.Tensor, cfg: DistillConfig, batches_per_epoch: int, seed: int) -> DataLoader:
    """The distillation data: x1 only (no x0 exists in this dataset), ``bridge_loop + 1`` batches per item."""
    return random_batches(Rows(x1), cfg.batch_size * (cfg.bridge_loop + 1), batches_per_epoch, seed)


# ----------------------------------------------------------------------------- Lightning: teacher


@torch.no_grad()
def ema_update(ema: torch.nn.Module, model: torch.nn.Module, decay: float) -> None:
    for e, p in zip(ema.parameters(), model.parameters()):
        e.lerp_(p, 1 - decay)


class BridgeMatching(L.LightningModule):
    """Trains the teacher by bridge matching on (x0, x1) pairs; keeps an EMA of its weights."""

    def __init__(self, net: BridgeNet, bridge: BridgeSchedule, cfg: TeacherConfig) -> None:
        super().__init__()
        self.net, self.bridge, self.cfg = net, bridge, cfg
        self.ema = copy.deepcopy(net).requires_grad_(False)

    def shared_step(self, batch, stage: str) -> torch.Tensor:
        x0, x1 = batch
        step = torch.randint(0, self.bridge.n_steps, (len(x0),))  # I2SB teacher: all steps
        net = self.net if stage == "train" else self.ema
        loss = bridge_matching_loss(net, self.bridge, x0, x1, step)
        self.log(f"{stage}/loss", loss, on_step=False, on_epoch=True, batch_size=len(x0))
        return loss

    def training_step(self, batch, batch_idx):
        return self.shared_step(batch, "train")

    def validation_step(self, batch, batch_idx):
        self.shared_step(batch, "val")  # on the EMA weights, the ones distillation starts from

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        ema_update(self.ema, self.net, self.cfg.ema)

    def configure_optimizers(self):
        return torch.optim.Adam(self.net.parameters(), lr=self.cfg.lr)


# ----------------------------------------------------------------------------- Lightning: IBMD


class InverseBridgeMatching(L.LightningModule):
    """The min-max of Theorem 3.2 with manual optimisation: per item, ``bridge_loop`` fake-bridge
    steps on the generator's coupling, then one generator step. Sees corrupted x1 only."""

    def __init__(
        self,
        generator: OneStepGenerator,
        fake: BridgeNet,
        teacher: BridgeNet,
        bridge: BridgeSchedule,
        cfg: DistillConfig,
    ) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.generator, self.fake, self.bridge, self.cfg = generator, fake, bridge, cfg
        self.teacher = teacher.requires_grad_(False)  # frozen (an MLP: no train/eval differences)
        self.generator_ema = copy.deepcopy(generator).requires_grad_(False)
        self.x1_only_batches = 0  # batches that were a single tensor of x1 rows (counted, then asserted)
        self.batches = 0

    def split(self, batch) -> torch.Tensor:
        """(bridge_loop + 1) * B rows of x1 -> (bridge_loop + 1, B, d); refuses anything but x1."""
        self.batches += 1
        if not (torch.is_tensor(batch) and batch.dim() == 2 and batch.shape[1] == self.teacher.dim):
            raise TypeError("IBMD distillation must receive corrupted inputs x1 only")
        self.x1_only_batches += 1
        return batch.view(-1, len(batch) // (self.cfg.bridge_loop + 1), batch.shape[1])

    def steps(self, n: int) -> torch.Tensor:
        return torch.randint(0, self.bridge.n_steps - 1, (n,))  # official distillation: [0, steps - 2]

    def fake_step_loss(self, generator: OneStepGenerator, x1: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            x0 = generator(x1)
        return bridge_matching_loss(self.fake, self.bridge, x0, x1, self.steps(len(x1)), self.cfg.t_power_ten_coeff)

    def shared_step(self, batch, stage: str) -> torch.Tensor:
        chunks = self.split(batch)
        generator = self.generator if stage == "train" else self.generator_ema
        opt_g, opt_f = self.optimizers() if stage == "train" else (None, None)
        for x1 in chunks[:-1]:
            fake_loss = self.fake_step_loss(generator, x1)
            if opt_f is not None:
                opt_f.zero_grad()
                self.manual_backward(fake_loss)
                opt_f.step()
        x1 = chunks[-1]
        x0 = generator(x1)
        gen_loss, fake_x0 = generator_loss(
            self.teacher, self.fake, self.bridge, x0, x1, self.steps(len(x1)), self.cfg.t_power_ten_coeff
        )
        if opt_g is not None:
            opt_g.zero_grad()
            self.manual_backward(gen_loss)
            opt_g.step()
            ema_update(self.generator_ema, self.generator, self.cfg.student_ema)
        logs = {
            "fake_loss": fake_loss,
            "generator_loss": gen_loss,
            "convergence": convergence_condition(fake_x0, x0.detach()),
        }
        self.log_dict({f"{stage}/{k}": v for k, v in logs.items()}, on_step=False, on_epoch=True, batch_size=len(x1))
        # For the non-finite-loss stop: finite iff both the fake and the generator losses are.
        return (fake_loss + gen_loss).detach()

    def training_step(self, batch, batch_idx):
        return self.shared_step(batch, "train")

    def validation_step(self, batch, batch_idx):
        self.shared_step(batch, "val")

    def configure_optimizers(self):
        return (
            torch.optim.Adam(self.generator.parameters(), lr=self.cfg.lr),
            torch.optim.Adam(self.fake.parameters(), lr=self.cfg.lr),
        )


# ----------------------------------------------------------------------------- sampling


@torch.no_grad()
def teacher_sample(
    teacher: BridgeNet, bridge: BridgeSchedule, x1: torch.Tensor, nfe: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """I2SB's DDPM-posterior sampler from x1 with ``nfe`` teacher calls (state at step 0)."""
    cond = x1 if teacher.cond else None
    return bridge.sample(lambda x_t, step: teacher.pred_x0(x_t, step, cond), x1, nfe, generator)


# ----------------------------------------------------------------------------- metrics


@torch.no_grad()
def mean_pairwise_distance(
    a: torch.Tensor, b: torch.Tensor, exclude_diagonal: bool = False, chunk: int = 2048
) -> float:
    """Mean Euclidean distance over all pairs (a_i, b_j) (i != j with ``exclude_diagonal``); float64 sums."""
    total = 0.0
    for i in range(0, len(a), chunk):
        total += torch.cdist(a[i : i + chunk].float(), b.float()).double().sum().item()
    if exclude_diagonal:  # the pairs (a_i, b_i): zero up to rounding when a is b
        total -= (a.double() - b.double()).norm(dim=1).sum().item()
    pairs = len(a) * len(b) - (len(a) if exclude_diagonal else 0)
    return total / pairs


def energy_distance(x: torch.Tensor, y: torch.Tensor, y_self: float | None = None, paired: bool = False) -> float:
    """Unbiased energy distance 2 E|X - Y| - E|X - X'| - E|Y - Y'| (U-statistics; ~0 for equal laws).

    ``y_self`` = E|Y - Y'| may be passed in when ``y`` is the same reference for many ``x``. ``paired``:
    x_i and y_i share a coordinate (the same corrupted x1), so the cross term skips the dependent pairs (i, i).
    """
    if y_self is None:
        y_self = mean_pairwise_distance(y, y, True)
    if paired and len(x) != len(y):
        raise ValueError(f"paired energy distance needs equal sample sizes, got {len(x)} and {len(y)}")
    return 2 * mean_pairwise_distance(x, y, paired) - mean_pairwise_distance(x, x, True) - y_self


@torch.no_grad()
def sliced_w2(x: torch.Tensor, y: torch.Tensor, n_projections: int = 128, seed: int = 0) -> float:
    """sqrt(mean over random unit directions of W2^2 of the 1-D projections) (equal sample sizes)."""
    if len(x) != len(y):
        raise ValueError("sliced_w2 needs equal sample sizes")
    dirs = torch.randn(n_projections, x.shape[1], generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    dirs /= dirs.norm(dim=1, keepdim=True)
    px, _ = (dirs @ x.double().T).sort(1)  # (projections, n): sort along the contiguous axis
    py, _ = (dirs @ y.double().T).sort(1)
    return math.sqrt(((px - py) ** 2).mean().item())
