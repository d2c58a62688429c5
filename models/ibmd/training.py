"""The LightningModules of IBMD: the bridge-matching teacher and the inverse-bridge-matching student.

Both are selected and early-stopped on a validation split (REVIEW.md rule 2):

* the teacher on its bridge-matching loss at *fixed* validation steps and bridge noise (so epochs
  compare like with like), computed with the EMA weights the student starts from;
* the student on the energy distance between its one-step samples and the teacher's own NFE-many
  samples on the validation x1, a score that needs no clean x0 (IBMD never sees one).
"""

from __future__ import annotations

import copy

import lightning as L
import torch
from torch.utils.data import DataLoader

from models.common.batches import Rows, random_batches
from models.common.diffusion import BridgeSchedule

from .algorithm import (
    bimodal_fraction,
    bridge_matching_loss,
    convergence_condition,
    energy_distance,
    generator_loss,
    teacher_sample,
)
from .config import DistillConfig, TeacherConfig
from .networks import BridgeNet, OneStepGenerator

TEACHER_MONITOR = "val/loss"
STUDENT_MONITOR = "val/ed_to_teacher"


@torch.no_grad()
def ema_update(ema: torch.nn.Module, model: torch.nn.Module, decay: float) -> None:
    """e <- e + (1 - decay) (p - e) for every parameter, in one multi-tensor call."""
    torch._foreach_lerp_(list(ema.parameters()), list(model.parameters()), 1 - decay)


def adam(params, lr: float) -> torch.optim.Adam:
    """Adam with the fused CPU kernel: the same update rule, one kernel for all tensors of a step."""
    return torch.optim.Adam(params, lr=lr, fused=True)


class EpochMeans:
    """Sums of per-step training scalars, logged as epoch means at the epoch's end.

    Equal to ``self.log(..., on_step=False, on_epoch=True)`` for equally sized batches, without
    Lightning's per-call logging machinery (about a sixth of a small model's step time)."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.count = 0

    def add(self, values: dict[str, torch.Tensor]) -> None:
        for key, value in values.items():
            value = value.detach()
            self.sums[key] = self.sums[key] + value if key in self.sums else value
        self.count += 1

    def pop(self) -> dict[str, float]:
        means = {key: float(total) / self.count for key, total in self.sums.items()}
        self.sums, self.count = {}, 0
        return means


def corrupted_only_loader(x1: torch.Tensor, cfg: DistillConfig, batches_per_epoch: int, seed: int) -> DataLoader:
    """The distillation data: x1 only (no x0 exists in this dataset), ``bridge_loop + 1`` batches per item."""
    return random_batches(Rows(x1), cfg.batch_size * (cfg.bridge_loop + 1), batches_per_epoch, seed)


def fixed_validation_pairs(
    bridge: BridgeSchedule, x0: torch.Tensor, x1: torch.Tensor, seed: int
) -> tuple[torch.Tensor, ...]:
    """(x0, x1, step, x_t) with the steps and bridge noise drawn once: a deterministic validation loss."""
    g = torch.Generator().manual_seed(seed)
    step = torch.randint(0, bridge.n_steps, (len(x0),), generator=g)
    return x0, x1, step, bridge.q_sample(step, x0, x1, generator=g)


def add_convergence_trace(
    module: BridgeMatching, records: list[dict[str, float]], x1: torch.Tensor, nfe: int, threshold: float
) -> None:
    """Adds ``val/frac_bimodal_many`` to each validation record of a ``keep_trace`` fit: the NFE-``nfe``
    bimodal fraction on ``x1`` of the EMA teacher as it was at that validation, with the same sampler
    noise every time (the values the validation hook computed before, bit for bit)."""
    validations = [r for r in records if TEACHER_MONITOR in r]
    if len(validations) != len(module.trace_weights):
        raise ValueError(f"{len(validations)} validation records but {len(module.trace_weights)} kept EMA weights")
    net = copy.deepcopy(module.ema)
    for record, weights in zip(validations, module.trace_weights):
        net.load_state_dict(weights)
        x0 = teacher_sample(net, module.bridge, x1, nfe, torch.Generator().manual_seed(0))
        record["val/frac_bimodal_many"] = bimodal_fraction(x0, threshold)
    module.trace_weights = []


class BridgeMatching(L.LightningModule):
    """Trains the teacher by bridge matching on (x0, x1) pairs (Adam, cosine decay to 0); keeps an EMA.

    With ``keep_trace``, every validation keeps a copy of the EMA weights (``trace_weights``), from
    which ``add_convergence_trace`` computes the sampler-level convergence trace after the fit: only
    for the grid point that is chosen, where computing it at every validation of every grid point
    spent ~40 % of a teacher fit on traces that were thrown away."""

    def __init__(
        self, net: BridgeNet, bridge: BridgeSchedule, cfg: TeacherConfig, lr: float, keep_trace: bool = False
    ) -> None:
        super().__init__()
        # Manual optimisation: the same zero_grad, backward, Adam and scheduler steps, in that order, as
        # Lightning's automatic loop (tested bit for bit), without its per-step closure machinery.
        self.automatic_optimization = False
        self.net, self.bridge, self.cfg, self.lr = net, bridge, cfg, lr
        self.ema = copy.deepcopy(net).requires_grad_(False)
        self.keep_trace = keep_trace
        self.trace_weights: list[dict[str, torch.Tensor]] = []  # plain state: resumed fits keep it
        self.epoch_means = EpochMeans()

    def training_step(self, batch, batch_idx):
        x0, x1 = batch
        step = torch.randint(0, self.bridge.n_steps, (len(x0),))  # I2SB teacher: all steps
        loss = bridge_matching_loss(self.net, self.bridge, x0, x1, step)
        optimiser = self.optimizers()
        optimiser.zero_grad()
        self.manual_backward(loss)
        optimiser.step()
        self.lr_schedulers().step()
        self.epoch_means.add({"train/loss": loss})
        return loss.detach()

    def on_train_epoch_end(self) -> None:
        self.log_dict(self.epoch_means.pop())

    def validation_step(self, batch, batch_idx):
        x0, x1, step, x_t = batch
        x0_hat = self.ema.pred_x0(x_t, step, x1 if self.ema.cond else None)  # the weights the student copies
        self.log(TEACHER_MONITOR, ((x0_hat - x0) ** 2).mean(), on_step=False, on_epoch=True, batch_size=len(x0))

    def on_validation_epoch_end(self) -> None:
        if self.keep_trace:
            self.trace_weights.append({k: v.detach().clone() for k, v in self.ema.state_dict().items()})

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        ema_update(self.ema, self.net, self.cfg.ema)

    def configure_optimizers(self):
        optimiser = adam(self.net.parameters(), self.lr)
        # The decay to 0 lets the last weights settle (a constant lr leaves them jittering around the
        # optimum and the EMA lagging behind it: the review's under-trained teacher at 3000 steps).
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, T_max=self.cfg.steps)
        return [optimiser], [{"scheduler": schedule, "interval": "step"}]


class InverseBridgeMatching(L.LightningModule):
    """The min-max of Theorem 3.2 with manual optimisation: per item, ``bridge_loop`` fake-bridge
    steps on the generator's coupling, then one generator step. Sees corrupted x1 only.

    Validation: ``val_reference`` holds the teacher's NFE-many samples on the validation x1 (the same
    rows in the same order), scored against the EMA student's samples at the fixed noise ``val_z``."""

    def __init__(
        self,
        generator: OneStepGenerator,
        fake: BridgeNet,
        teacher: BridgeNet,
        bridge: BridgeSchedule,
        cfg: DistillConfig,
        lr: float,
        val_reference: torch.Tensor,
        val_z: torch.Tensor,
    ) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.generator, self.fake, self.bridge, self.cfg, self.lr = generator, fake, bridge, cfg, lr
        self.teacher = teacher.requires_grad_(False)  # frozen (an MLP: no train/eval differences)
        self.generator_ema = copy.deepcopy(generator).requires_grad_(False)
        self.val_reference, self.val_z = val_reference, val_z
        self.x1_only_batches = 0  # batches that were a single tensor of x1 rows (counted, then asserted)
        self.batches = 0
        self.epoch_means = EpochMeans()

    def check_x1_only(self, batch) -> torch.Tensor:
        self.batches += 1
        if not (torch.is_tensor(batch) and batch.dim() == 2 and batch.shape[1] == self.teacher.dim):
            raise TypeError("IBMD distillation must receive corrupted inputs x1 only")
        self.x1_only_batches += 1
        return batch

    def split(self, batch) -> torch.Tensor:
        """(bridge_loop + 1) * B rows of x1 -> (bridge_loop + 1, B, d); refuses anything but x1."""
        batch = self.check_x1_only(batch)
        return batch.view(-1, len(batch) // (self.cfg.bridge_loop + 1), batch.shape[1])

    def steps(self, n: int) -> torch.Tensor:
        return torch.randint(0, self.bridge.n_steps - 1, (n,))  # official distillation: [0, steps - 2]

    def training_step(self, batch, batch_idx):
        chunks = self.split(batch)
        opt_g, opt_f = self.optimizers()
        fake_chunks = chunks[:-1]
        # G is fixed during the fake steps, so one call gives every fake chunk's x0 = G(z, x1): the same
        # values, bit for bit, as one call per chunk, with the random numbers drawn in that loop's order
        # (per chunk: z, then the steps, then the bridge noise).
        draws = [
            (torch.randn(len(x1), self.generator.noise_dim), self.steps(len(x1)), torch.randn_like(x1))
            for x1 in fake_chunks
        ]
        with torch.no_grad():
            x0_all = self.generator(fake_chunks.reshape(-1, fake_chunks.shape[-1]), torch.cat([z for z, _, _ in draws]))
        for x1, x0, (_, step, noise) in zip(fake_chunks, x0_all.view_as(fake_chunks), draws):
            fake_loss = bridge_matching_loss(self.fake, self.bridge, x0, x1, step, self.cfg.t_power_ten_coeff, noise)
            opt_f.zero_grad()
            self.manual_backward(fake_loss)
            opt_f.step()
        x1 = chunks[-1]
        x0 = self.generator(x1)
        gen_loss, fake_x0 = generator_loss(
            self.teacher, self.fake, self.bridge, x0, x1, self.steps(len(x1)), self.cfg.t_power_ten_coeff
        )
        opt_g.zero_grad()
        self.manual_backward(gen_loss)
        opt_g.step()
        ema_update(self.generator_ema, self.generator, self.cfg.student_ema)
        logs = {
            "fake_loss": fake_loss,
            "generator_loss": gen_loss,
            "convergence": convergence_condition(fake_x0, x0.detach()),
        }
        self.epoch_means.add({f"train/{k}": v for k, v in logs.items()})
        # For the non-finite-loss stop: finite iff both the fake and the generator losses are.
        return (fake_loss + gen_loss).detach()

    def on_train_epoch_end(self) -> None:
        self.log_dict(self.epoch_means.pop())

    def validation_step(self, batch, batch_idx):
        x1 = self.check_x1_only(batch)
        x0 = self.generator_ema(x1, self.val_z)
        ed = energy_distance(torch.cat([x0, x1], 1), torch.cat([self.val_reference, x1], 1), paired=True)
        g = torch.Generator().manual_seed(0)
        step = torch.randint(0, self.bridge.n_steps - 1, (len(x1),), generator=g)
        x_t = self.bridge.q_sample(step, x0, x1, generator=g)
        fake_x0 = self.fake.pred_x0(x_t, step, x1 if self.fake.cond else None)
        self.log_dict(
            {
                STUDENT_MONITOR: ed,
                "val/fake_loss": ((fake_x0 - x0) ** 2).mean(),
                "val/convergence": convergence_condition(fake_x0, x0),
            },
            on_step=False,
            on_epoch=True,
            batch_size=len(x1),
        )

    def configure_optimizers(self):
        return adam(self.generator.parameters(), self.lr), adam(self.fake.parameters(), self.lr)
