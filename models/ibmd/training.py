"""The LightningModules of IBMD: bridge-matching teachers and inverse-bridge-matching students, several
paired units (seeds, lr grid points) side by side in one fit (docs/methods/ibmd.md).

Both are selected and early-stopped on a validation split, per unit:

* the teacher on its bridge-matching loss at *fixed* validation steps and bridge noise (so epochs
  compare like with like), computed with the EMA weights the student starts from;
* the student on the energy distance between its one-step samples and its teacher's own NFE-many
  samples on the validation x1, a score that needs no clean x0 (IBMD never sees one).
"""

from __future__ import annotations

import copy
import math

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
from .networks import BridgeNet, GroupedBridgeNet, OneStepGenerator

TEACHER_MONITOR = "val/loss"
STUDENT_MONITOR = "val/ed_to_teacher"


def fixed_validation_pairs(
    bridge: BridgeSchedule, x0: torch.Tensor, x1: torch.Tensor, seed: int
) -> tuple[torch.Tensor, ...]:
    """(x0, x1, step, x_t) with the steps and bridge noise drawn once: a deterministic validation loss."""
    g = torch.Generator().manual_seed(seed)
    step = torch.randint(0, bridge.n_steps, (len(x0),), generator=g)
    return x0, x1, step, bridge.q_sample(step, x0, x1, generator=g)


# ----------------------------------------------------------------------------- several units side by side
#
# The paired seeds of one arm (and the points of its lr grid) train together: every weight carries a leading
# unit axis (``networks.GroupedBridgeNet``), each unit draws its batches, steps and noise from its own
# generator (seeded as the one-at-a-time fit of that unit is), has its own learning rate (``GroupedAdam``) and
# its own early stopping (``UnitStopping``): a stopped unit keeps its best weights and later steps cannot
# change them, so every unit ends exactly as it would alone, up to float summation order (tests/methods/
# test_ibmd_batched.py). One Lightning fit then costs one Python/Lightning step for all units.


class GroupedAdam(torch.optim.Optimizer):
    """Adam (torch's update rule, no weight decay) on parameters whose leading axis is the unit, with one
    learning rate per unit: ``lrs`` (G,). ``scale`` multiplies every lr (a schedule sets it each step)."""

    def __init__(self, params, lrs: torch.Tensor, betas=(0.9, 0.999), eps: float = 1e-8) -> None:
        super().__init__(params, {"betas": betas, "eps": eps})
        self.lrs = torch.as_tensor(lrs, dtype=torch.float32)
        self.scale = 1.0

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                step = float(state["step"])
                state["exp_avg"].lerp_(p.grad, 1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                step_size = (self.lrs * self.scale / (1 - beta1**step)).view(-1, *([1] * (p.dim() - 1)))
                denom = (state["exp_avg_sq"].sqrt() / math.sqrt(1 - beta2**step)).add_(group["eps"])
                p.sub_(step_size * state["exp_avg"] / denom)
        return loss

    def state_dict(self):
        out = super().state_dict()
        out["lrs"], out["scale"] = self.lrs.clone(), self.scale
        return out

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        self.lrs, self.scale = state_dict.pop("lrs"), state_dict.pop("scale")
        super().load_state_dict(state_dict)


class UnitStopping:
    """Early stopping of each unit on its own validation score (lower is better), as ``Patience`` does for one
    fit: a unit stops after ``patience`` validations without an improvement; a NaN never improves. The state
    is plain lists (it travels with the module's checkpoint state)."""

    def __init__(self, units: int, patience: int) -> None:
        self.patience = patience
        self.best = [math.inf] * units
        self.best_eval = [-1] * units
        self.waited = [0] * units
        self.stopped_at = [-1] * units  # the validation at which the patience ran out (-1: still running)
        self.evaluations = 0

    def update(self, scores: list[float]) -> list[bool]:
        """One validation of every unit; True for the running units that improved (their best weights move)."""
        improved = []
        for g, score in enumerate(scores):
            better = self.stopped_at[g] < 0 and math.isfinite(score) and score < self.best[g]
            if better:
                self.best[g], self.best_eval[g], self.waited[g] = float(score), self.evaluations, 0
            elif self.stopped_at[g] < 0:
                self.waited[g] += 1
                if self.waited[g] >= self.patience:
                    self.stopped_at[g] = self.evaluations
            improved.append(better)
        self.evaluations += 1
        return improved

    @property
    def all_stopped(self) -> bool:
        return all(s >= 0 for s in self.stopped_at)

    def trained(self, g: int) -> int:
        """Validations unit ``g`` ran (up to its stop)."""
        return self.stopped_at[g] + 1 if self.stopped_at[g] >= 0 else self.evaluations

    def record(self, g: int, arm: str, unit: str) -> None:
        from models.common.evidence import record_fit

        record_fit(arm, unit, self.best_eval[g], self.trained(g), self.stopped_at[g] >= 0, self.patience)

    def as_state(self) -> dict:
        return {k: getattr(self, k) for k in ("patience", "best", "best_eval", "waited", "stopped_at", "evaluations")}

    @classmethod
    def from_state(cls, state: dict) -> UnitStopping:
        out = cls(len(state["best"]), state["patience"])
        for key, value in state.items():
            setattr(out, key, list(value) if isinstance(value, list) else value)
        return out


def unit_generators(seeds: list[int]) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(int(seed)) for seed in seeds]


class StepCounter(torch.utils.data.Dataset):
    """What the training loader of a grouped fit yields: the step index only (each unit draws its own batch)."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def __len__(self) -> int:
        return self.steps

    def __getitem__(self, index):
        return torch.tensor(index)


class GroupedFit(L.LightningModule):
    """What the grouped teacher and student fits share: per-unit generators kept as module attributes (so the
    checkpoint saves them), per-unit early stopping with best weights, per-unit learning curves."""

    def setup_units(self, seeds: list[int], patience: int) -> None:
        self.automatic_optimization = False
        for g, generator in enumerate(unit_generators(seeds)):
            setattr(self, f"rng_unit{g}", generator)
        self.n_units = len(seeds)
        self.stopping_state = UnitStopping(len(seeds), patience).as_state()
        self.unit_records: list[list[dict[str, float]]] = [[] for _ in seeds]
        self.best_state: dict[str, torch.Tensor] = {}
        self.train_sums: dict[str, torch.Tensor] = {}
        self.train_count = 0

    def generators(self) -> list[torch.Generator]:
        return [getattr(self, f"rng_unit{g}") for g in range(self.n_units)]

    @property
    def stopping(self) -> UnitStopping:
        return UnitStopping.from_state(self.stopping_state)

    def add_train(self, values: dict[str, torch.Tensor]) -> None:
        for key, value in values.items():
            value = value.detach()
            self.train_sums[key] = self.train_sums[key] + value if key in self.train_sums else value
        self.train_count += 1

    def end_validation(self, scores: torch.Tensor, kept: torch.nn.Module, extra: dict[str, torch.Tensor]) -> None:
        """Per-unit early stopping on ``scores`` (G,), the best weights of ``kept`` for the units that improved,
        the epoch's per-unit records; stops the fit once every unit has stopped."""
        stopping = self.stopping
        improved = stopping.update([float(x) for x in scores])
        state = {k: v.detach().clone() for k, v in kept.named_parameters()}
        if not self.best_state:
            self.best_state = state
        elif any(improved):
            mask = torch.tensor(improved)
            for name, value in state.items():
                keep = mask.view(-1, *([1] * (value.dim() - 1)))
                self.best_state[name] = torch.where(keep, value, self.best_state[name])
        means = {k: v / max(self.train_count, 1) for k, v in self.train_sums.items()}
        for g in range(self.n_units):
            if stopping.stopped_at[g] >= 0 and stopping.stopped_at[g] < stopping.evaluations - 1:
                continue  # a stopped unit's curve ends where it stopped
            record = {"step": int(self.global_step), "epoch": float(self.current_epoch)}
            record.update({k: float(v[g]) for k, v in means.items()})
            record.update({k: float(v[g]) for k, v in extra.items()})
            self.unit_records[g].append(record)
        self.train_sums, self.train_count = {}, 0
        self.stopping_state = stopping.as_state()
        self.log("val/units_running", float(sum(s < 0 for s in stopping.stopped_at)))
        if stopping.all_stopped:
            self.trainer.should_stop = True

    def restore_best(self, kept: torch.nn.Module) -> None:
        """The fit ended: every unit's kept network goes back to its best validation's weights."""
        if self.best_state:
            kept.load_members(self.best_state, torch.ones(self.n_units, dtype=torch.bool))


def cosine_scale(step: int, total: int) -> float:
    """CosineAnnealingLR to 0 over ``total`` steps, in closed form: the factor on the lr of optimiser step ``step``."""
    return 0.5 * (1 + math.cos(math.pi * min(step, total) / total))


class GroupedBridgeMatching(GroupedFit):
    """Teachers of several units by bridge matching (``BridgeMatching`` per unit): Adam with a cosine decay to 0,
    EMA, early stopping on the fixed-noise validation loss of the EMA weights.

    ``lrs`` and ``seeds`` (one per unit): a unit's initial weights, batches, steps and noise come from its seed
    alone. ``val``: per-unit (x0, x1, step, x_t) stacked on a leading unit axis. ``trace``: keep every
    validation's EMA weights of these units for the convergence trace."""

    def __init__(
        self,
        net: GroupedBridgeNet,
        bridge: BridgeSchedule,
        cfg: TeacherConfig,
        lrs: list[float],
        seeds: list[int],
        pairs: tuple[torch.Tensor, torch.Tensor],
        val: tuple[torch.Tensor, ...],
        trace: list[int] = (),
    ) -> None:
        super().__init__()
        self.net, self.bridge, self.cfg, self.lrs = net, bridge, cfg, list(lrs)
        self.ema = copy.deepcopy(net).requires_grad_(False)
        self.x0_train, self.x1_train = pairs
        self.val = val
        self.trace_units = list(trace)
        self.trace_weights: list[dict[str, torch.Tensor]] = []
        self.setup_units(seeds, cfg.patience)

    def draw(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per unit, from its generator in this order: batch rows, steps, bridge noise; stacked (G, B, ...)."""
        n, b, dim = len(self.x0_train), self.cfg.batch_size, self.x0_train.shape[1]
        rows, steps, noise = [], [], []
        for g in self.generators():
            rows.append(torch.randint(0, n, (b,), generator=g))
            steps.append(torch.randint(0, self.bridge.n_steps, (b,), generator=g))  # I2SB teacher: all steps
            noise.append(torch.randn(b, dim, generator=g))
        idx = torch.stack(rows)
        return self.x0_train[idx], self.x1_train[idx], torch.stack(steps), torch.stack(noise)

    def training_step(self, batch, batch_idx):
        x0, x1, step, noise = self.draw()
        per_unit = bridge_matching_loss(self.net, self.bridge, x0, x1, step, noise=noise)
        finite = torch.isfinite(per_unit)
        optimiser = self.optimizers()
        optimiser.optimizer.scale = cosine_scale(self.global_step, self.cfg.steps)
        optimiser.zero_grad()
        self.manual_backward(torch.where(finite, per_unit, 0.0).sum())
        optimiser.step()
        torch._foreach_lerp_(list(self.ema.parameters()), list(self.net.parameters()), 1 - self.cfg.ema)
        self.add_train({"train/loss": per_unit})
        return per_unit[finite].sum().detach() if finite.any() else per_unit.sum().detach()

    def validation_step(self, batch, batch_idx):
        x0, x1, step, x_t = self.val
        with torch.no_grad():
            x0_hat = self.ema.pred_x0(x_t, step, x1 if self.ema.cond else None)
        losses = ((x0_hat - x0) ** 2).mean((1, 2))
        if self.trace_units:
            self.trace_weights.append({k: v[self.trace_units].detach().clone() for k, v in self.ema.named_parameters()})
        self.end_validation(losses, self.ema, {TEACHER_MONITOR: losses})

    def on_train_end(self) -> None:
        self.restore_best(self.ema)

    def configure_optimizers(self):
        return GroupedAdam(self.net.parameters(), torch.tensor(self.lrs))


class GroupedInverseBridgeMatching(GroupedFit):
    """IBMD students of several units (``InverseBridgeMatching`` per unit): per step ``bridge_loop`` fake-bridge
    Adam steps on each unit's generator coupling, then one generator step; EMA of the generators; early stopping
    on each unit's validation ED to its own teacher's NFE-many samples. Sees corrupted x1 only.

    ``teacher``: the frozen teachers, one per unit; ``generator``/``fake`` start as copies of them (G with
    zero-initialised noise inputs). ``val_reference`` (G, n, dim): each teacher's samples on the validation x1;
    ``val_z`` (G, n, noise_dim) the fixed noise of each unit's validation samples."""

    def __init__(
        self,
        generator: GroupedBridgeNet,
        fake: GroupedBridgeNet,
        teacher: GroupedBridgeNet,
        bridge: BridgeSchedule,
        cfg: DistillConfig,
        lrs: list[float],
        seeds: list[int],
        x1_train: torch.Tensor,
        x1_val: torch.Tensor,
        val_reference: torch.Tensor,
        val_z: torch.Tensor,
    ) -> None:
        super().__init__()
        self.generator, self.fake, self.bridge, self.cfg, self.lrs = generator, fake, bridge, cfg, list(lrs)
        self.teacher = teacher.requires_grad_(False)
        self.generator_ema = copy.deepcopy(generator).requires_grad_(False)
        self.x1_train, self.x1_val = x1_train, x1_val
        self.val_reference, self.val_z = val_reference, val_z
        self.x1_only_batches = 0
        self.batches = 0
        self.setup_units(seeds, cfg.patience)

    def check_x1_only(self, x1: torch.Tensor) -> torch.Tensor:
        """The distillation's only data: corrupted x1 rows (the module holds no x0 at all)."""
        self.batches += 1
        if not (torch.is_tensor(x1) and x1.dim() == 2 and x1.shape[1] == self.teacher.dim):
            raise TypeError("IBMD distillation must receive corrupted inputs x1 only")
        self.x1_only_batches += 1
        return x1

    def draw(self):
        """Per unit, from its generator in this order: the (bridge_loop + 1) x B rows of x1, then per chunk
        z, steps (in [0, steps - 2], as the official distillation) and bridge noise; stacked (G, L + 1, B, ...)."""
        x1 = self.check_x1_only(self.x1_train)
        loops, b, dim, nz = self.cfg.bridge_loop + 1, self.cfg.batch_size, x1.shape[1], self.generator.noise_dim
        rows, zs, steps, noises = [], [], [], []
        for g in self.generators():
            rows.append(torch.randint(0, len(x1), (loops, b), generator=g))
            zs.append(torch.randn(loops, b, nz, generator=g))
            steps.append(torch.randint(0, self.bridge.n_steps - 1, (loops, b), generator=g))
            noises.append(torch.randn(loops, b, dim, generator=g))
        return x1[torch.stack(rows)], torch.stack(zs), torch.stack(steps), torch.stack(noises)

    def training_step(self, batch, batch_idx):
        x1, z, step, noise = self.draw()  # (G, L + 1, B, ...)
        units, loops, b = x1.shape[:3]
        opt_g, opt_f = self.optimizers()
        flat = lambda t: t.reshape(units, -1, *t.shape[3:])  # noqa: E731
        with torch.no_grad():  # G is fixed during the fake steps: one call for every fake chunk
            x0_fake = self.generator.generate(flat(x1[:, :-1]), flat(z[:, :-1])).view(units, loops - 1, b, -1)
        coeff = self.cfg.t_power_ten_coeff
        for j in range(loops - 1):
            fake_loss = bridge_matching_loss(
                self.fake, self.bridge, x0_fake[:, j], x1[:, j], step[:, j], coeff, noise[:, j]
            )
            opt_f.zero_grad()
            self.manual_backward(torch.where(torch.isfinite(fake_loss), fake_loss, 0.0).sum())
            opt_f.step()
        x0 = self.generator.generate(x1[:, -1], z[:, -1])
        gen_loss, fake_x0 = generator_loss(
            self.teacher, self.fake, self.bridge, x0, x1[:, -1], step[:, -1], coeff, noise[:, -1]
        )
        finite = torch.isfinite(gen_loss) & torch.isfinite(fake_loss)
        opt_g.zero_grad()
        self.manual_backward(torch.where(finite, gen_loss, 0.0).sum())
        opt_g.step()
        torch._foreach_lerp_(
            list(self.generator_ema.parameters()), list(self.generator.parameters()), 1 - self.cfg.student_ema
        )
        convergence = convergence_condition(fake_x0, x0.detach())
        self.add_train(
            {"train/fake_loss": fake_loss, "train/generator_loss": gen_loss, "train/convergence": convergence}
        )
        both = fake_loss + gen_loss
        return both[finite].sum().detach() if finite.any() else both.sum().detach()

    def validation_step(self, batch, batch_idx):
        x1 = self.check_x1_only(self.x1_val)
        units = self.n_units
        x1_g = x1.expand(units, -1, -1)
        with torch.no_grad():
            x0 = self.generator_ema.generate(x1_g, self.val_z)
            g = torch.Generator().manual_seed(0)
            step = torch.randint(0, self.bridge.n_steps - 1, (len(x1),), generator=g).expand(units, -1)
            x_t = self.bridge.q_sample(step, x0, x1_g, noise=torch.randn(x1.shape, generator=g).expand(units, -1, -1))
            fake_x0 = self.fake.pred_x0(x_t, step, x1_g if self.fake.cond else None)
        eds = torch.tensor(
            [
                energy_distance(torch.cat([x0[u], x1], 1), torch.cat([self.val_reference[u], x1], 1), paired=True)
                if torch.isfinite(x0[u]).all()
                else math.nan
                for u in range(units)
            ]
        )
        extra = {
            STUDENT_MONITOR: eds,
            "val/fake_loss": ((fake_x0 - x0) ** 2).mean((1, 2)),
            "val/convergence": convergence_condition(fake_x0, x0),
        }
        self.end_validation(eds, self.generator_ema, extra)

    def on_train_end(self) -> None:
        self.restore_best(self.generator_ema)

    def configure_optimizers(self):
        lrs = torch.tensor(self.lrs)
        return GroupedAdam(self.generator.parameters(), lrs), GroupedAdam(self.fake.parameters(), lrs)


# ----------------------------------------------------------------------------- one unit at a time
#
# The single-fit modules the grouped ones replaced in ``pipeline.train``. They stay as the reference of the cost
# cuts checked in tests/methods/test_ibmd_speed.py (and a one-unit path a user can read); they draw from the global
# torch stream and a seeded loader, so their numbers are not those of a grouped fit's per-unit streams.


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
