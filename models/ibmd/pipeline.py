"""Inverse Bridge Matching Distillation (ICML 2025).

Nikita Gushchin, David Li, Daniil Selikhanovych, Evgeny Burnaev, Dmitry Baranchuk, Alexander
Korotin; PMLR 267:21471-21496, arXiv 2502.01362. Official code: ``ngushchin/IBMD`` (cited by the
paper), read as ``bluebluecard/IBMD`` at its initial commit ``e4c4679`` (by the first author):
``I2SB/i2sb/runner_distill.py``, ``diffusion.py``, ``runner.py``, ``network.py``. Re-implemented
here, not copied (docs/methods/ibmd.md).

Idea: a diffusion-bridge teacher (I2SB: x_t ~ q(x_t | x0, x1) = N(mu0 x0 + mu1 x1, sigma^2), see
``models.common.diffusion.BridgeSchedule``) trained by bridge matching is distilled into a
one-step generator G(z, x1) by solving the *inverse* bridge-matching problem: find the coupling
p(x0 | x1) p(x1) whose bridge-matching solution is the teacher. Its tractable form (Thm 3.2) is
min_G max_phi E[ ||x0_hat*(x_t) - x0||^2 - ||x0_hat^phi(x_t) - x0||^2 ], x0 = G(z, x1), with a
"fake" bridge phi trained by ordinary bridge matching on G's coupling. Only corrupted x1 is used.

Pipeline, per setup (2-D toy with a conditional and an unconditional teacher, ``n_seeds`` paired
training seeds each; digits restoration with a conditional teacher, one seed, reported only):
  1. teacher (the baseline, sampled at NFE 1 and NFE 100): MLP x0_hat(x_t, t [, x1]) by bridge
     matching, Adam with a cosine decay to 0, EMA; lr chosen on the first seed's fixed-noise
     validation loss from ``teacher.lr_grid``, early stopping (patience) with the best weights;
  2. IBMD (the method): G and phi copied from that seed's teacher EMA (G with zero-initialised noise
     inputs, so it starts as the teacher's one-step posterior mean), ``bridge_loop`` = 5 fake steps
     per generator step, EMA of G (the evaluated, registered student); lr chosen on the first seed
     from ``distill.lr_grid`` by the validation energy distance to the teacher's NFE-100 samples
     (x1 only), early stopping on the same score;
  3. evaluation: seed k on its own disjoint block of held-out pairs; plug-in energy distance (ED)
     and sliced W2 of (x0_hat, x1) against the true (x0, x1), the bimodal fraction, the noise floor
     (the ED between the exact posterior's samples and the truth: two independent sample sets of one
     law); the teacher's NFE curve on the first seed; digits PSNR, classifier accuracy, diversity.
  4. claim (the restated check of docs/methods/ibmd.md), per toy setup over the paired seeds, see ``claim``.

Deliberate deviations and choices (docs/methods/ibmd.md):
* Data: no ImageNet / E2H / DIODE or their I2SB/DDBM checkpoints offline. The substitutes:
  the 2-D toy (8 Gaussians on a circle of radius 2, std 0.1; x1 = (x0_1 + 0.05 xi, 0)) and
  scikit-learn digits (real 8x8 images in [-1, 1]; x1 = nearest-upsampled 2x average pool +
  N(0, 0.1^2)). The toy's exact posterior p(x0 | x1) is a Gaussian mixture; its samples give the
  noise floor of the energy distance. A user paired set (npz with x0, x1) can replace the toy.
* Teacher: an MLP (3 x 128 SiLU, sinusoidal embedding of I2SB's network time) instead of the
  ADM U-Net; trained with the x0-prediction loss (the method's objective; the official teacher uses
  the eps-loss, the official fake bridge ``--x0-prediction-loss``) so teacher and fake bridge are
  trained by exactly the same function. The teacher samples steps
  in [0, 999], the distillation in [0, 998], as the official code does.
* Convergence of the teacher (the review found the 3000-step constant-lr teacher, EMA 0.999,
  too bimodal: 0.82 vs the truth's 0.754): a cosine decay to 0 and EMA 0.99 reach the converged
  sampler within ~2000 steps at batch 256 (a pilot of the old constant-lr, EMA-0.999 recipe needed
  ~6000 steps); the training log shows the NFE-100 bimodal fraction per validation of the first seed's
  chosen teacher (computed after the lr selection from the EMA weights kept at every validation).
* Detach: x_t in the generator loss is drawn with x0 detached (the one-step I2SB path); the
  multi-step student and the DDBM variant are not implemented (the claim is at NFE 1).
* Sizes: teacher <= 2000 steps at batch 256; IBMD <= 800 generator steps x 5 fake steps at batch
  256 (the first design: 3000 teacher steps at 512, 800 generator steps at 512, lr 1e-4), for the
  conditional toy teacher x 3 seeds x the lr grids plus digits: ~82 s of one core (CPU time of
  prepare + train + evaluate on a lightly loaded machine, 2026-12-02; the code before the cost cuts
  of ``test_ibmd_speed.py``, which left every toy number within 2e-8, took 98 s in the same
  conditions and 125 s under a heavy load). Early stopping ends some fits sooner. The official
  AdamW (weight decay 0) with a 0.99-per-1000-iterations StepLR is ~constant over so few steps, so
  the student's Adam lr is constant. Digits: 3 x 256 MLP, <= 800 teacher steps at batch 128, <= 150
  generator steps at batch 64, 64 noise inputs (one extra image channel, as the paper's noise
  channels), one seed and one lr (a reported secondary, not a criterion). The ``paper`` scale
  restores batch 512 and the paper's lr 5e-5..1e-4 in the grid, with 10k steps.
* The teacher's EMA (0.99) stands in for I2SB's EMA checkpoint the student is initialised from.
* Metrics: FID / IS / ResNet-50 accuracy need ImageNet networks; the energy distance on joint
  (x0_hat, x1) (plug-in, FID-like finite-sample floor included) and sliced W2 replace FID, a
  logistic-regression digit classifier trained on clean digits replaces the ResNet-50 CA.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader

from models.base import (
    ClaimResult,
    Control,
    Criterion,
    DatasetRef,
    Metrics,
    Scale,
    Separation,
    TrainedArtifacts,
    dataset_meta,
    user_data_path,
    write_manifest,
)
from models.common import verdicts as V
from models.common.batches import Rows, whole_batch
from models.common.diffusion import BridgeSchedule
from models.common.lightning import fit
from models.common.selection import early_stopping_callbacks, grid, select_on_validation
from models.common.units import UnitValues, labels_of, unit_labels

from . import plots
from .algorithm import (
    SlicedReference,
    bimodal_fraction,
    both_energy_distances,
    convergence_condition,
    mean_pairwise_distance,
    teacher_sample,
)
from .config import Config, DistillConfig, TeacherConfig
from .data import load_pairs, make_digits, make_toy, sample_toy_posterior
from .networks import BridgeNet, GroupedBridgeNet, OneStepGenerator, with_noise_inputs
from .training import (
    STUDENT_MONITOR,
    GroupedBridgeMatching,
    GroupedInverseBridgeMatching,
    InverseBridgeMatching,
    StepCounter,
    corrupted_only_loader,
    fixed_validation_pairs,
)

ED_MANY_FACTOR = 1.5  # docs/methods/ibmd.md: ED(IBMD-1) <= 1.5 x ED(teacher-many)
ED_ONE_FACTOR = 0.5  # docs/methods/ibmd.md: ED(IBMD-1) <= 0.5 x ED(teacher-1)
BIMODAL_TOLERANCE = 0.1  # docs/methods/ibmd.md: |frac(|x0_2| > threshold) - reference| <= 0.1
TRACE_ROWS = 512  # validation x1 of the teacher's convergence trace (first seed)


# ----------------------------------------------------------------------------- setups


@dataclass(frozen=True)
class Setup:
    """One teacher -> student experiment: which data file, conditional or not, budgets, seeds."""

    name: str  # toy_cond | toy_uncond | digits
    file: str
    cond: bool
    teacher: TeacherConfig
    distill: DistillConfig
    n_seeds: int

    @property
    def toy(self) -> bool:
        return self.file == "toy.npz"

    def variant(self, role: str, seed_index: int = 0) -> str:
        """History names: "method"/"baseline" for the primary setup's first seed, else with setup and seed."""
        base = role if self.name == "toy_cond" else f"{role}_{self.name}"
        return base if seed_index == 0 else f"{base}_seed{seed_index}"


def setups(cfg: Config) -> list[Setup]:
    out = [Setup(f"toy_{v}", "toy.npz", v == "cond", cfg.teacher, cfg.distill, cfg.n_seeds) for v in cfg.toy_variants]
    if cfg.data.digits:
        out.append(Setup("digits", "digits.npz", True, cfg.digits_teacher, cfg.digits_distill, 1))
    return out


def bridge_of(cfg: Config) -> BridgeSchedule:
    return BridgeSchedule.i2sb(cfg.bridge.steps, cfg.bridge.beta_max, cfg.bridge.beta_min)


def run_seed(cfg: Config, setup_index: int, seed_index: int) -> int:
    """The training seed of one (setup, seed): teacher and student of a seed index are paired."""
    return cfg.seed + 101 * setup_index + 1009 * seed_index


# ----------------------------------------------------------------------------- data


def prepare(cfg: Config, data_dir: Path) -> DatasetRef:
    if cfg.data.pairs_npz:
        toy = load_pairs(user_data_path(cfg.data.pairs_npz), cfg.data.pairs_test_fraction, cfg.seed)
    else:
        toy = make_toy(cfg.data, cfg.seed)
    np.savez(data_dir / "toy.npz", **toy)
    d = cfg.data
    if d.pairs_npz:
        source, provenance = "real", f"user-supplied paired set data/{d.pairs_npz} (x0, x1)"
    else:
        source, provenance = (
            "synthetic",
            (
                f"2-D toy from seed {cfg.seed}: 8 Gaussians on a circle (radius {d.toy_radius:g}, std {d.toy_std:g}), "
                f"x1 = (x0_1 + N(0, {d.toy_x1_noise:g}^2), 0); {d.toy_test_blocks} test blocks of {d.toy_test}"
            ),
        )
    if d.digits:
        import sklearn

        provenance += (
            f"; digits (reported secondary): scikit-learn {sklearn.__version__} load_digits (real images), "
            f"corrupted by 2x2 average pool + N(0, {d.digits_noise:g}^2)"
        )
    meta = {
        **dataset_meta(source, provenance),
        "generator": cfg.data.pairs_npz or "8 Gaussians on a circle; x1 = (x0_1 + noise, 0)",
        "synthetic": not cfg.data.pairs_npz,
        "seed": cfg.seed,
        "toy_train": int(len(toy["x0_train"])),
        "toy_val": int(len(toy["x0_val"])),
        "toy_test": int(len(toy["x0_test"])),
        "toy_test_blocks": d.toy_test_blocks,
        "toy_dim": int(toy["x0_train"].shape[1]),
    }
    if cfg.data.digits:
        digits = make_digits(cfg.data, cfg.seed)
        np.savez(data_dir / "digits.npz", **digits)
        meta.update(
            digits_train=int(len(digits["x0_train"])),
            digits_val=int(len(digits["x0_val"])),
            digits_test=int(len(digits["x0_test"])),
            digits_corruption="2x2 average pool, nearest upsample, Gaussian noise",
        )
    return write_manifest(data_dir, meta=meta)


def load_arrays(data: DatasetRef, setup: Setup) -> dict[str, np.ndarray]:
    with np.load(data.file(setup.file)) as archive:
        return {k: archive[k] for k in archive.files}


def tensor(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))


def held_out_block(arrays: dict, setup: Setup, cfg: Config, seed_index: int) -> slice:
    """The held-out rows seed ``seed_index`` is scored on: its own block of the toy's test pairs."""
    if not setup.toy:
        return slice(None)
    size = len(arrays["x0_test"]) // cfg.data.toy_test_blocks
    return slice(seed_index * size, (seed_index + 1) * size)


# ----------------------------------------------------------------------------- training


def traced(setup: Setup, arrays: dict) -> bool:
    """Whether the teacher's convergence trace (NFE-many bimodal fraction per validation) applies: the 2-D toy."""
    return setup.toy and arrays["x0_train"].shape[1] == 2


def unit_stream(seed: int) -> int:
    """The seed of a unit's own generator (batches, steps, noise), distinct from its initial weights' seed."""
    return seed + 1_000_003


def one_validation_batch():
    """Lightning runs validation once per epoch over this single placeholder batch (the modules hold their
    per-unit validation data)."""
    return whole_batch(Rows(torch.zeros(1)))


def fit_teachers(
    cfg: Config, setup: Setup, arrays: dict, lrs: list[float], seeds: list[int], name: str, trace: bool = False
) -> GroupedBridgeMatching:
    """Bridge matching on (x0, x1) pairs for several units at once, unit g at ``lrs[g]`` from ``seeds[g]``
    (its initial weights, batches, steps, bridge noise and fixed validation draws); per-unit early stopping on
    the fixed-noise validation loss of the EMA weights. ``trace``: keep each validation's EMA weights (the
    convergence trace of the 2-D toy)."""
    t = setup.teacher
    dim = arrays["x0_train"].shape[1]
    bridge = bridge_of(cfg)
    nets = []
    for seed in seeds:
        torch.manual_seed(seed)  # a unit's initial weights depend on its seed alone
        nets.append(BridgeNet(dim, t, cfg.bridge, setup.cond))
    x0_val, x1_val = tensor(arrays["x0_val"]), tensor(arrays["x1_val"])
    val = [fixed_validation_pairs(bridge, x0_val, x1_val, seed) for seed in seeds]
    val = tuple(torch.stack([v[i] for v in val]) for i in range(4))
    module = GroupedBridgeMatching(
        GroupedBridgeNet(nets),
        bridge,
        t,
        lrs,
        [unit_stream(seed) for seed in seeds],
        (tensor(arrays["x0_train"]), tensor(arrays["x1_train"])),
        val,
        list(range(len(seeds))) if trace and traced(setup, arrays) else [],
    )
    per_epoch = min(t.epoch_steps, t.steps)
    fit(
        module,
        DataLoader(StepCounter(per_epoch), batch_size=None),
        one_validation_batch(),
        max_epochs=math.ceil(t.steps / per_epoch),
        max_steps=t.steps,
        seed=seeds[0],
        variant=f"teachers {setup.name} {name} ({len(seeds)} units)",
    )
    return module


def convergence_trace(cfg: Config, setup: Setup, arrays: dict, module: GroupedBridgeMatching, g: int) -> None:
    """Unit ``g``'s convergence trace: ``val/frac_bimodal_many`` in each of its validation records, the NFE-many
    bimodal fraction on the first ``TRACE_ROWS`` validation x1 of its EMA teacher as it was at that validation."""
    if not module.trace_units:
        return
    x1 = tensor(arrays["x1_val"][:TRACE_ROWS])
    net = copy.deepcopy(module.ema)
    keep = torch.ones(net.groups, dtype=torch.bool)
    for record, state in zip(module.unit_records[g], module.trace_weights):
        net.load_members(state, keep)
        x0 = teacher_sample(
            net.member(g, setup.teacher, cfg.bridge), bridge_of(cfg), x1, cfg.many_nfe, torch.Generator().manual_seed(0)
        )
        record["val/frac_bimodal_many"] = bimodal_fraction(x0, cfg.bimodal_threshold)
    module.trace_weights = []


def student_validation(
    cfg: Config, setup: Setup, teacher: BridgeNet, arrays: dict, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The student's validation targets: the teacher's own NFE-many samples on the validation x1 and
    the fixed noise z of the student's samples (one draw per teacher and seed, shared by the lr grid)."""
    x1_val = tensor(arrays["x1_val"])
    g = torch.Generator().manual_seed(seed)
    reference = teacher_sample(teacher, bridge_of(cfg), x1_val, cfg.many_nfe, g)
    return reference, torch.randn(len(x1_val), setup.distill.noise_dim, generator=g)


def fit_students(
    cfg: Config,
    setup: Setup,
    teachers: list[BridgeNet],
    arrays: dict,
    lrs: list[float],
    seeds: list[int],
    name: str,
    validations: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> GroupedInverseBridgeMatching:
    """IBMD from corrupted inputs only, several units at once: unit g distils ``teachers[g]`` at ``lrs[g]`` with
    its own stream from ``seeds[g]``; G and the fake bridge start as copies of its teacher (G with zero-initialised
    noise inputs). Nothing but x1 (and the teachers) reaches the distillation. ``validations``: per unit
    ``student_validation(cfg, setup, teachers[g], arrays, seeds[g])``, computed here when None."""
    d = setup.distill
    validations = validations or [
        student_validation(cfg, setup, teacher, arrays, seed) for teacher, seed in zip(teachers, seeds)
    ]
    generator = GroupedBridgeNet([with_noise_inputs(t, setup.teacher, cfg.bridge, d.noise_dim) for t in teachers])
    module = GroupedInverseBridgeMatching(
        generator,
        GroupedBridgeNet(teachers),
        GroupedBridgeNet(teachers),
        bridge_of(cfg),
        d,
        lrs,
        [unit_stream(seed) for seed in seeds],
        tensor(arrays["x1_train"]),
        tensor(arrays["x1_val"]),
        torch.stack([ref for ref, _ in validations]),
        torch.stack([z for _, z in validations]),
    )
    per_epoch = min(d.epoch_steps, d.generator_steps)
    fit(
        module,
        DataLoader(StepCounter(per_epoch), batch_size=None),
        one_validation_batch(),
        max_epochs=math.ceil(d.generator_steps / per_epoch),
        max_steps=d.generator_steps * (d.bridge_loop + 1),  # manual optimisation: every optimiser step counts
        seed=seeds[0],
        variant=f"IBMD {setup.name} {name} ({len(seeds)} units)",
    )
    return module


@dataclass
class Fitted:
    """One fit of the one-unit path: the module, its records, its best-weights callback."""

    module: object
    records: list[dict[str, float]]
    best: object


def fit_student(
    cfg: Config,
    setup: Setup,
    teacher: BridgeNet,
    arrays: dict,
    lr: float,
    seed: int,
    validation: tuple[torch.Tensor, torch.Tensor] | None = None,
    arm: str = "",
    unit: str = "",
) -> tuple[float, Fitted]:
    """One student at a time (``training.InverseBridgeMatching``; ``train`` uses ``fit_students``, the grouped fit):
    IBMD from corrupted inputs only: nothing but x1 (and the teacher) reaches the distillation.

    ``validation``: ``student_validation(cfg, setup, teacher, arrays, seed)``, computed here when None.
    With ``arm`` (and ``unit``) the fit is a compared one, recorded for the verdict diagnostics."""
    d = setup.distill
    reference, val_z = validation or student_validation(cfg, setup, teacher, arrays, seed)
    torch.manual_seed(seed)
    x1_train, x1_val = tensor(arrays["x1_train"]), tensor(arrays["x1_val"])
    bridge = bridge_of(cfg)
    generator = OneStepGenerator(with_noise_inputs(teacher, setup.teacher, cfg.bridge, d.noise_dim))
    fake = BridgeNet(teacher.dim, setup.teacher, cfg.bridge, teacher.cond)
    fake.load_state_dict(teacher.state_dict())
    frozen = BridgeNet(teacher.dim, setup.teacher, cfg.bridge, teacher.cond)
    frozen.load_state_dict(teacher.state_dict())
    module = InverseBridgeMatching(generator, fake, frozen, bridge, d, lr, reference, val_z)
    per_epoch = min(d.epoch_steps, d.generator_steps)
    callbacks = early_stopping_callbacks(STUDENT_MONITOR, d.patience, arm=arm, unit=unit)
    records = fit(
        module,
        corrupted_only_loader(x1_train, d, per_epoch, seed),
        whole_batch(Rows(x1_val)),
        max_epochs=math.ceil(d.generator_steps / per_epoch),
        max_steps=d.generator_steps * (d.bridge_loop + 1),  # manual optimisation: every optimiser step counts
        seed=seed,
        variant=f"IBMD {setup.name} (lr={lr:g}), seed {seed}",
        callbacks=callbacks,
    )
    best = callbacks[-1]
    return float(best.best if best.best is not None else math.nan), Fitted(module, records, best)


def weights(model_dir: Path, role: str, setup: str, seed_index: int) -> Path:
    return Path(model_dir) / f"{role}_{setup}_seed{seed_index}.pt"


def fit_summary(module, g: int, arm: str) -> dict[str, float]:
    """``select/<arm>/...`` figures of unit ``g`` of a grouped fit (as ``BestWeights.summary`` gives one fit's)."""
    stopping = module.stopping
    return {
        f"select/{arm}/best_epoch": float(stopping.best_eval[g]),
        f"select/{arm}/epochs_trained": float(stopping.trained(g)),
        f"select/{arm}/best_val": float(stopping.best[g]),
    }


def select_from_grid(arm: str, lrs: list[float], module, metric: str, unit: str):
    """The validation selection over a grid fitted as one grouped fit (unit g = grid point g): recorded like any
    ``select_on_validation``; returns (selection, the chosen unit's index)."""
    scores = module.stopping.best
    return select_on_validation(
        arm,
        grid(lr=lrs),
        lambda point: (scores[lrs.index(point["lr"])], lrs.index(point["lr"])),
        metric=metric,
        higher_is_better=False,
        unit=unit,
    )


def train(cfg: Config, data: DatasetRef, out_dir: Path) -> TrainedArtifacts:
    """Per setup: the teachers' lr grid on the first seed (one grouped fit), the other seeds' teachers at the
    chosen lr (one grouped fit); the same for the students, each distilling its own seed's teacher."""
    history: dict[str, list[dict[str, float]]] = {}
    summary: dict[str, float] = {}
    selections: dict[str, dict] = {}
    for i, setup in enumerate(setups(cfg)):
        arrays = load_arrays(data, setup)
        s, n = setup.name, setup.n_seeds
        units = unit_labels("seed", n)
        seeds = [run_seed(cfg, i, k) for k in range(n)]
        # The compared fits (recorded for the verdict diagnostics) are the toy's; digits is reported only.
        teacher_arm, student_arm = f"teacher_{s}", f"ibmd_{s}"
        record = setup.toy
        t_grid, d_grid = list(setup.teacher.lr_grid), list(setup.distill.lr_grid)

        # Teachers (the baseline): the lr on the first seed's validation loss; the other seeds reuse it.
        grid_fit = fit_teachers(cfg, setup, arrays, t_grid, [seeds[0]] * len(t_grid), "lr grid", trace=True)
        selection, c = select_from_grid(teacher_arm, t_grid, grid_fit, "bridge_loss", units[0])
        print(f"  selected {selection.describe()}", flush=True)
        convergence_trace(cfg, setup, arrays, grid_fit, c)
        summary.update(selection.summary())
        selections[teacher_arm] = {"chosen": selection.chosen, "table": selection.table}
        fits = [(grid_fit, c)]
        if n > 1:
            rest = fit_teachers(cfg, setup, arrays, [t_grid[c]] * (n - 1), seeds[1:], "seeds")
            fits += [(rest, g) for g in range(n - 1)]
        teachers = [module.ema.member(g, setup.teacher, cfg.bridge).eval() for module, g in fits]
        for k, (module, g) in enumerate(fits):
            if record:
                module.stopping.record(g, teacher_arm, units[k])
            history[setup.variant("baseline", k)] = module.unit_records[g]
            summary.update(fit_summary(module, g, f"{teacher_arm}/seed{k}"))
            summary[f"select/{teacher_arm}/seed{k}/max_epochs"] = float(
                math.ceil(setup.teacher.steps / min(setup.teacher.epoch_steps, setup.teacher.steps))
            )
            torch.save(teachers[k].state_dict(), weights(out_dir, "teacher", s, k))

        # Students (the method): the lr on the first seed's validation ED to its own teacher's samples (x1 only).
        student_seeds = [seed + 1 for seed in seeds]
        validation = student_validation(cfg, setup, teachers[0], arrays, student_seeds[0])
        grid_fit = fit_students(
            cfg,
            setup,
            [teachers[0]] * len(d_grid),
            arrays,
            d_grid,
            [student_seeds[0]] * len(d_grid),
            "lr grid",
            [validation] * len(d_grid),
        )
        selection, c = select_from_grid(student_arm, d_grid, grid_fit, "ed_to_teacher", units[0])
        print(f"  selected {selection.describe()}", flush=True)
        summary.update(selection.summary())
        selections[student_arm] = {"chosen": selection.chosen, "table": selection.table}
        fits = [(grid_fit, c)]
        if n > 1:
            rest = fit_students(cfg, setup, teachers[1:], arrays, [d_grid[c]] * (n - 1), student_seeds[1:], "seeds")
            fits += [(rest, g) for g in range(n - 1)]
        for k, (module, g) in enumerate(fits):
            if record:
                module.stopping.record(g, student_arm, units[k])
            history[setup.variant("method", k)] = module.unit_records[g]
            summary.update(fit_summary(module, g, f"{student_arm}/seed{k}"))
            summary[f"select/{student_arm}/seed{k}/x1_only_fraction"] = module.x1_only_batches / max(module.batches, 1)
            student = module.generator_ema.member(g, setup.teacher, cfg.bridge)
            torch.save(student.state_dict(), weights(out_dir, "student", s, k))
            torch.save(module.fake.member(g, setup.teacher, cfg.bridge).state_dict(), weights(out_dir, "fake", s, k))
        for key in ("train/fake_loss", "train/generator_loss", "train/convergence"):
            last = [r[key] for r in history[setup.variant("method", 0)] if key in r]
            if last:
                summary[f"{s}_ibmd_{key.replace('/', '_')}"] = last[-1]
    (Path(out_dir) / "selection.json").write_text(json.dumps(selections, indent=1))
    return TrainedArtifacts(out_dir, history, summary)


def load_networks(
    cfg: Config, setup: Setup, model_dir: Path, dim: int, seed_index: int
) -> tuple[BridgeNet, OneStepGenerator, BridgeNet]:
    def load(net: BridgeNet, role: str) -> BridgeNet:
        net.load_state_dict(torch.load(weights(model_dir, role, setup.name, seed_index), weights_only=True))
        return net.eval()

    teacher = load(BridgeNet(dim, setup.teacher, cfg.bridge, setup.cond), "teacher")
    student = load(BridgeNet(dim, setup.teacher, cfg.bridge, setup.cond, setup.distill.noise_dim), "student")
    fake = load(BridgeNet(dim, setup.teacher, cfg.bridge, setup.cond), "fake")
    return teacher, OneStepGenerator(student).eval(), fake


def load_model(cfg: Config, model_dir: Path) -> OneStepGenerator:
    """The registered model: the one-step IBMD student G(z, x1) of the first seed's conditional toy teacher."""
    setup = next(s for s in setups(cfg) if s.name == "toy_cond")
    state = torch.load(weights(model_dir, "student", setup.name, 0), weights_only=True)
    dim = state["mlp.0.weight"].shape[1] - setup.teacher.time_dim - setup.distill.noise_dim
    student = BridgeNet(dim // 2, setup.teacher, cfg.bridge, True, setup.distill.noise_dim)
    student.load_state_dict(state)
    return OneStepGenerator(student).eval()


# ----------------------------------------------------------------------------- evaluation


def nfe_grid(cfg: Config, seed_index: int) -> list[int]:
    """The teacher's NFE curve on the first seed; NFE 1 and NFE-many on every seed."""
    return sorted(set(cfg.eval_nfe if seed_index == 0 else ()) | {1, cfg.many_nfe})


@torch.no_grad()
def init_gap(cfg: Config, setup: Setup, teacher: BridgeNet, x1: torch.Tensor, seed: int) -> float:
    """max |G_init(z, x1) - x0_hat_teacher(x1, last step)| over z ~ N(0, I): 0 with zero-initialised noise inputs."""
    generator = OneStepGenerator(with_noise_inputs(teacher, setup.teacher, cfg.bridge, setup.distill.noise_dim))
    step = torch.full((len(x1),), teacher.last_step, dtype=torch.long)
    reference = teacher.pred_x0(x1, step, x1 if teacher.cond else None)
    z = 3 * torch.randn(len(x1), setup.distill.noise_dim, generator=torch.Generator().manual_seed(seed))
    return float((generator(x1, z) - reference).abs().max())


@torch.no_grad()
def bridge_diagnostics(
    cfg: Config, student: OneStepGenerator, teacher: BridgeNet, fake: BridgeNet, x1: torch.Tensor, seed: int
) -> dict[str, float]:
    """On held-out x1 only: the fake-bridge loss on G's coupling and the two convergence conditions."""
    g = torch.Generator().manual_seed(seed)
    bridge = bridge_of(cfg)
    x0 = student(x1, torch.randn(len(x1), student.noise_dim, generator=g))
    step = torch.randint(0, bridge.n_steps - 1, (len(x1),), generator=g)
    x_t = bridge.q_sample(step, x0, x1, generator=g)
    cond = x1 if teacher.cond else None
    fake_x0, teacher_x0 = fake.pred_x0(x_t, step, cond), teacher.pred_x0(x_t, step, cond)
    return {
        "fake_loss": float(((fake_x0 - x0) ** 2).mean()),
        "teacher_loss_on_student": float(((teacher_x0 - x0) ** 2).mean()),
        "convergence_fake": float(convergence_condition(fake_x0, x0)),
        "convergence_teacher": float(convergence_condition(teacher_x0, x0)),
    }


def psnr(x: torch.Tensor, ref: torch.Tensor) -> float:
    """Mean per-image PSNR for pixels in [-1, 1] (peak-to-peak 2)."""
    mse = ((x.clamp(-1, 1) - ref) ** 2).mean(1).clamp_min(1e-10)
    return float((10 * torch.log10(4.0 / mse)).mean())


def digit_classifier(arrays: dict, seed: int):
    """Logistic regression on the clean training digits, fitted with as many BLAS threads as torch uses
    (one by default): NumPy's two OpenBLAS threads spun on the busy machine, 100x the CPU time of one."""
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=torch.get_num_threads(), user_api="blas"):
        return LogisticRegression(max_iter=2000, random_state=seed).fit(arrays["clean_train"], arrays["label_train"])


def evaluate_seed(cfg: Config, setup: Setup, arrays: dict, model_dir: Path, seed_index: int, seed: int) -> dict:
    """One trained seed on its own held-out block: samples of every sampler, their metrics, diagnostics."""
    rows = held_out_block(arrays, setup, cfg, seed_index)
    x0, x1 = tensor(arrays["x0_test"][rows]), tensor(arrays["x1_test"][rows])
    teacher, student, fake = load_networks(cfg, setup, model_dir, x0.shape[1], seed_index)
    bridge = bridge_of(cfg)
    samples = {
        f"teacher_nfe{n}": teacher_sample(teacher, bridge, x1, n, torch.Generator().manual_seed(seed + n))
        for n in nfe_grid(cfg, seed_index)
    }
    z = torch.randn(len(x1), student.noise_dim, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        samples["ibmd"] = student(x1, z)
        if setup.toy:  # the negative control: the same student with its noise inputs removed (z = 0)
            samples["ibmd_z0"] = student(x1, torch.zeros_like(z))
    exact = setup.toy and x0.shape[1] == 2 and not cfg.data.pairs_npz
    if exact:  # an independent sample set of the reference law: its ED to the truth is the noise floor
        oracle = sample_toy_posterior(
            arrays["x1_test"][rows], cfg.data, np.random.default_rng([cfg.seed, 3, seed_index])
        )
        samples["oracle"] = tensor(oracle)
    joint_true = torch.cat([x0, x1], 1)
    true_self_all = mean_pairwise_distance(joint_true, joint_true)
    sliced_truth = SlicedReference(joint_true, seed=seed)  # the truth's projections, shared by every sampler
    values: dict[str, float] = {}
    for name, x in samples.items():
        joint = torch.cat([x, x1], 1)
        values[f"{name}/ed"], values[f"{name}/ed_plugin"] = both_energy_distances(joint, joint_true, true_self_all)
        values[f"{name}/sw2"] = sliced_truth.sliced_w2(joint)
        values[f"{name}/mse"] = float(((x - x0) ** 2).mean())
    if setup.toy and x0.shape[1] >= 2:
        for name, x in samples.items():
            values[f"{name}/frac_bimodal"] = bimodal_fraction(x, cfg.bimodal_threshold)
        values["truth/frac_bimodal"] = bimodal_fraction(x0, cfg.bimodal_threshold)
    if setup.name == "digits":
        classifier = digit_classifier(arrays, cfg.seed)
        labels = arrays["label_test_pairs"]
        for name, x in samples.items():
            values[f"{name}/psnr"] = psnr(x, x0)
            values[f"{name}/class_acc"] = float(np.mean(classifier.predict(x.clamp(-1, 1).numpy()) == labels))
        values["truth/class_acc"] = float(np.mean(classifier.predict(arrays["x0_test"]) == labels))
        values["corrupted/class_acc"] = float(np.mean(classifier.predict(arrays["x1_test"]) == labels))
        # Diversity: per-pixel std over 8 draws for the same x1 (the teacher's one-step mean has none).
        few = x1[:128]
        with torch.no_grad():
            values["ibmd/diversity"] = float(torch.stack([student(few) for _ in range(8)]).std(0).mean())
        for n in (1, cfg.many_nfe):
            draws = [teacher_sample(teacher, bridge, few, n) for _ in range(8)]
            values[f"teacher_nfe{n}/diversity"] = float(torch.stack(draws).std(0).mean())
    values.update({f"ibmd/{k}": v for k, v in bridge_diagnostics(cfg, student, teacher, fake, x1, seed).items()})
    values["ibmd/init_gap"] = init_gap(cfg, setup, teacher, tensor(arrays["x1_train"][:1024]), seed)
    return {"values": values, "samples": samples, "x0": x0, "x1": x1}


def metric_names(setup: Setup, values: dict[str, float]) -> dict[str, float]:
    """Namespaced keys: method/ = IBMD at NFE 1, baseline/ = the teacher (NFE in the key), oracle/ = references,
    control/ = the negative control (the trained student with its noise inputs held at z = 0)."""
    out: dict[str, float] = {}
    for key, value in values.items():
        sampler, metric = key.split("/")
        if sampler == "ibmd":
            out[f"method/{setup.name}_{metric}"] = value
        elif sampler == "ibmd_z0":
            out[f"control/{setup.name}_{metric}"] = value
        elif sampler.startswith("teacher_"):
            out[f"baseline/{setup.name}_{metric}_{sampler.removeprefix('teacher_')}"] = value
        elif sampler == "oracle":
            out[f"oracle/{setup.name}_{metric}"] = value
        else:
            out[f"oracle/{setup.name}_{sampler}_{metric}"] = value
    return out


def setup_values(setup: Setup, seeds: list[dict], summary: dict, metrics: Metrics) -> dict[str, float]:
    """Every metric's per-seed values into ``metrics``'s units (namespace = arm, e.g. ``method`` with
    ``toy_cond_ed``; the claim's paired units) and their mean over the seeds under the plain name."""
    out: dict[str, float] = {}
    pooled: dict[str, list[float]] = {}
    for k, result in enumerate(seeds):
        named = metric_names(setup, result["values"])
        named[f"method/{setup.name}_x1_only_fraction"] = float(
            summary.get(f"select/ibmd_{setup.name}/seed{k}/x1_only_fraction", 0.0)
        )
        for name, value in named.items():
            pooled.setdefault(name, []).append(value)
    labels = unit_labels("seed", len(seeds))
    for name, xs in pooled.items():
        if len(xs) == len(seeds):  # measured on every seed (the teacher's NFE curve is the first seed's only)
            arm, metric = name.split("/", 1)
            metrics.add_units(metric, arm, xs, labels)
        out[name] = float(np.mean(xs))
    return out


def evaluate(cfg: Config, data: DatasetRef, artifacts: TrainedArtifacts, out_dir: Path) -> Metrics:
    metrics = Metrics({}, [])
    values: dict[str, float] = {k: v for k, v in artifacts.summary.items() if k.startswith("select/")}
    first_seed: dict[str, dict] = {}
    for i, setup in enumerate(setups(cfg)):
        arrays = load_arrays(data, setup)
        seeds = [
            evaluate_seed(cfg, setup, arrays, artifacts.model_dir, k, run_seed(cfg, i, k) + 7)
            for k in range(setup.n_seeds)
        ]
        values.update(setup_values(setup, seeds, artifacts.summary, metrics))
        first_seed[setup.name] = seeds[0]
    metrics.values = values
    selections = json.loads((Path(artifacts.model_dir) / "selection.json").read_text())
    plot_dir = Path(out_dir) / "plots"
    toy = {k: v for k, v in first_seed.items() if k.startswith("toy")}
    grid_nfe = nfe_grid(cfg, 0)
    figures = [
        plots.plot_toy_samples(cfg.many_nfe, toy, plot_dir / "toy_samples.png"),
        plots.plot_ed_vs_nfe(grid_nfe, first_seed, plot_dir / "energy_distance_vs_nfe.png"),
        plots.plot_learning_curves(artifacts.history, plot_dir / "learning_curves.png"),
        plots.plot_teacher_convergence(
            artifacts.history,
            {s: values.get(f"oracle/{s}_truth_frac_bimodal") for s in toy},
            cfg.many_nfe,
            plot_dir / "teacher_convergence.png",
        ),
        plots.plot_seed_summary(
            cfg.many_nfe,
            [s.name for s in setups(cfg) if s.toy],
            cfg.n_seeds,
            {**values, **metrics.unit_values()},
            plot_dir / "seed_summary.png",
        ),
        plots.plot_selection(selections, plot_dir / "selection.png"),
    ]
    if "digits" in first_seed:
        figures.append(plots.plot_digits(cfg.many_nfe, first_seed["digits"], plot_dir / "digits_samples.png"))
    metrics.figures = figures
    return metrics


# ----------------------------------------------------------------------------- claim


# The random draws a toy seed's unit varies: its teacher and student are trained from their own seed, it is
# scored on its own disjoint block of held-out pairs, and its samplers draw their own noise.
COVERS = (
    "training seed (teacher and student initial weights, batch order, bridge noise)",
    "held-out test block (data draw)",
    "sampling seed (sampler and generator noise)",
)


def absolute_mean_criterion(
    name: str,
    statement: str,
    differences: UnitValues,
    tolerance: float,
    units: str,
    covers: tuple[str, ...] = COVERS,
) -> Criterion:
    """|mean difference| <= tolerance, its interval the |.| image of the difference's t-interval:
    holds iff the whole t-interval lies in [-tolerance, tolerance] (an equivalence test)."""
    values = np.asarray(differences, dtype=float)
    mean, low, high = V.t_interval(values)
    if not (math.isfinite(low) and math.isfinite(high)):
        abs_low, abs_high = (math.nan, math.nan) if math.isnan(low) else (0.0, math.inf)
    else:
        abs_low = 0.0 if low <= 0 <= high else min(abs(low), abs(high))
        abs_high = max(abs(low), abs(high))
    n = len(values)
    reason = "one unit: no interval, so at best inconclusive" if n == 1 else ""
    return Criterion(
        name,
        statement,
        abs(mean),
        abs_low,
        abs_high,
        tolerance,
        "<=",
        f"{n} {units}",
        n,
        "t",
        "",
        reason,
        labels_of(differences),
        tuple(values),
        covers,
    )


def claim(cfg: Config, metrics: Metrics) -> ClaimResult:
    """The restated check of docs/methods/ibmd.md, per toy teacher (conditional and unconditional), over the paired seeds
    (seed k: its own teacher, its own student, its own held-out block; Student-t 95 % intervals):

    * ``<s>_bimodal_gap_to_teacher_nfe<many>``: |frac(IBMD-1) - frac(teacher-many)| <= 0.1, the
      student judged against the teacher's own NFE-many samples (the truth gap is in the figures);
    * ``<s>_ed_vs_teacher_nfe<many>``: excess(IBMD-1) - 1.5 excess(teacher-many) <= F, with
      excess = plug-in ED to the truth minus the noise floor F (the plug-in ED between the exact
      posterior's samples and the truth: two independent sample sets of the reference law). The
      floor is the resolution at this sample size: a teacher at the floor leaves the student one
      floor of slack, where the bare ratio divided noise by noise;
    * ``<s>_ed_vs_teacher_nfe1``: excess(IBMD-1) <= 0.5 excess(teacher-1).

    Negative controls (same statistic, threshold and seeds): the trained student with its noise inputs held
    at z = 0 (a deterministic G(x1), the noise channels the paper calls essential removed) on the ED
    criterion against the NFE-many teacher; the student before distillation (G at initialisation, which is
    the teacher's one-step mean: the must-pass checks it to 1e-6) on the bimodal-gap criterion.

    Must pass: x1-only distillation and G_init = teacher one-step (any scale); at default scale the
    converged teacher's NFE-many sampler within 0.1 of the true bimodal fraction on every seed (the
    gate of docs/methods/ibmd.md) and its one-step mean collapsed (at most half the true fraction)."""
    v = metrics.values
    many = f"nfe{cfg.many_nfe}"
    figures: dict[str, float] = {}
    criteria: list[Criterion] = []
    controls: list[Control] = []
    separations: list[Separation] = []
    sanity: dict[str, bool] = {}
    for setup in setups(cfg):
        s = setup.name
        n = setup.n_seeds
        units = "paired seeds" if n > 1 else "seed"

        def seeds(namespace: str, metric: str) -> UnitValues:
            return metrics.unit(f"{s}_{metric}", namespace)

        sanity[f"{s}_distillation_sees_x1_only"] = bool(np.all(np.asarray(seeds("method", "x1_only_fraction")) == 1.0))
        init_gap = np.asarray(seeds("method", "init_gap"))
        sanity[f"{s}_student_init_equals_teacher_one_step"] = bool(np.all(init_gap <= 1e-6))
        figures[f"{s}_init_gap"] = float(init_gap.max())
        for role, arm in (("teacher", f"teacher_{s}"), ("ibmd", f"ibmd_{s}")):
            if f"select/{arm}/lr" in v:
                figures[f"{s}_{role}_chosen_lr"] = v[f"select/{arm}/lr"]
            best = [v.get(f"select/{arm}/seed{k}/best_epoch") for k in range(n)]
            if all(b is not None for b in best):
                figures[f"{s}_{role}_mean_best_epoch"] = float(np.mean(best))
        if not setup.toy:  # digits: reported, not judged
            for key, name in (
                (f"method/{s}_ed_plugin", "ed_plugin_ibmd_nfe1"),
                (f"baseline/{s}_ed_plugin_nfe1", "ed_plugin_teacher_nfe1"),
                (f"baseline/{s}_ed_plugin_{many}", f"ed_plugin_teacher_{many}"),
                (f"method/{s}_class_acc", "class_acc_ibmd_nfe1"),
                (f"baseline/{s}_class_acc_{many}", f"class_acc_teacher_{many}"),
                (f"method/{s}_psnr", "psnr_ibmd_nfe1"),
                (f"baseline/{s}_psnr_{many}", f"psnr_teacher_{many}"),
                (f"method/{s}_diversity", "diversity_ibmd_nfe1"),
            ):
                figures[f"{s}_{name}"] = v[key]
            continue

        ed_ibmd, ed_one, ed_many = (
            seeds("method", "ed_plugin"),
            seeds("baseline", "ed_plugin_nfe1"),
            seeds("baseline", f"ed_plugin_{many}"),
        )
        exact = f"{s}_ed_plugin" in metrics.units and "oracle" in metrics.units[f"{s}_ed_plugin"]
        # Without the exact posterior (a user-supplied pair set) there is no floor: F = 0, the plain ratios.
        floor = seeds("oracle", "ed_plugin") if exact else 0.0 * ed_ibmd
        excess_ibmd, excess_one, excess_many = ed_ibmd - floor, ed_one - floor, ed_many - floor
        ed_many_statement = (
            f"{s}: excess ED(IBMD, NFE 1) - {ED_MANY_FACTOR:g} x excess ED(teacher, NFE {cfg.many_nfe}) - noise "
            "floor F (excess = plug-in ED of joint (x0_hat, x1) to the truth minus F)"
        )
        criteria += [
            V.mean_criterion(
                f"{s}_ed_vs_teacher_{many}",
                ed_many_statement,
                excess_ibmd - ED_MANY_FACTOR * excess_many - floor,
                0.0,
                "<=",
                units,
                covers=COVERS,
            ),
            V.mean_criterion(
                f"{s}_ed_vs_teacher_nfe1",
                f"{s}: excess ED(IBMD, NFE 1) - {ED_ONE_FACTOR:g} x excess ED(teacher, NFE 1) over the noise floor",
                excess_ibmd - ED_ONE_FACTOR * excess_one,
                0.0,
                "<=",
                units,
                covers=COVERS,
            ),
        ]
        excess_z0 = seeds("control", "ed_plugin") - floor
        controls.append(
            Control(
                f"{s}_ed_vs_teacher_{many}",
                "the trained student with its noise inputs held at z = 0 (a deterministic G(x1): the noise "
                "channels removed)",
                V.mean_criterion(
                    f"{s}_ed_vs_teacher_{many}",
                    ed_many_statement.replace("ED(IBMD, NFE 1)", "ED(IBMD at z = 0)"),
                    excess_z0 - ED_MANY_FACTOR * excess_many - floor,
                    0.0,
                    "<=",
                    units,
                    covers=COVERS,
                ),
            )
        )
        separations.append(
            Separation(
                f"{s} excess energy distance over the noise floor",
                {
                    "ibmd_nfe1": excess_ibmd.mean(),
                    "teacher_nfe1": excess_one.mean(),
                    f"teacher_{many}": excess_many.mean(),
                },
                ceiling=0.0,
                margin=0.002,
            )
        )
        for label, values in (
            ("noise_floor", floor),
            ("ed_excess_ibmd_nfe1", excess_ibmd),
            ("ed_excess_teacher_nfe1", excess_one),
            (f"ed_excess_teacher_{many}", excess_many),
            ("ed_excess_control_z0", excess_z0),
            ("ed_ibmd_nfe1", seeds("method", "ed")),
            (f"ed_teacher_{many}", seeds("baseline", f"ed_{many}")),
        ):
            figures[f"{s}_{label}"] = float(np.mean(values))
        if f"{s}_frac_bimodal" not in metrics.units:  # a 1-D user-supplied pair set has no second coordinate
            continue
        frac, frac_one, frac_many, truth = (
            seeds("method", "frac_bimodal"),
            seeds("baseline", "frac_bimodal_nfe1"),
            seeds("baseline", f"frac_bimodal_{many}"),
            seeds("oracle", "truth_frac_bimodal"),
        )
        gap_statement = (
            f"{s}: |frac(|x0_2| > {cfg.bimodal_threshold:g}) of IBMD at NFE 1 - that of the teacher's own "
            f"NFE-{cfg.many_nfe} samples|"
        )
        criteria.append(
            absolute_mean_criterion(
                f"{s}_bimodal_gap_to_teacher_{many}", gap_statement, frac - frac_many, BIMODAL_TOLERANCE, units
            )
        )
        controls.append(
            Control(
                f"{s}_bimodal_gap_to_teacher_{many}",
                "the student before distillation (G at initialisation = the teacher's one-step mean)",
                absolute_mean_criterion(
                    f"{s}_bimodal_gap_to_teacher_{many}",
                    gap_statement.replace("IBMD at NFE 1", "G at initialisation"),
                    frac_one - frac_many,
                    BIMODAL_TOLERANCE,
                    units,
                ),
            )
        )
        truth_gap = absolute_mean_criterion("truth_gap", "", frac - truth, BIMODAL_TOLERANCE, units)
        teacher_gap = absolute_mean_criterion("teacher_gap", "", frac_many - truth, BIMODAL_TOLERANCE, units)
        figures.update(
            {
                f"{s}_bimodal_truth_gap_ibmd": truth_gap.estimate,
                f"{s}_bimodal_truth_gap_ibmd_high": truth_gap.high,
                f"{s}_bimodal_truth_gap_teacher_{many}": teacher_gap.estimate,
                f"{s}_bimodal_truth_gap_teacher_{many}_high": teacher_gap.high,
                f"{s}_frac_bimodal_truth": float(np.mean(truth)),
                f"{s}_frac_bimodal_ibmd_nfe1": float(np.mean(frac)),
                f"{s}_frac_bimodal_teacher_nfe1": float(np.mean(frac_one)),
                f"{s}_frac_bimodal_teacher_{many}": float(np.mean(frac_many)),
                f"{s}_frac_bimodal_control_z0": float(np.mean(seeds("control", "frac_bimodal"))),
                f"{s}_convergence_fake": float(np.mean(seeds("method", "convergence_fake"))),
                f"{s}_fake_loss": float(np.mean(seeds("method", "fake_loss"))),
            }
        )
        if exact:
            figures[f"{s}_frac_bimodal_exact_posterior"] = float(np.mean(seeds("oracle", "frac_bimodal")))
        for metric, arr in (
            ("noise_floor", floor),
            ("ed_excess_ibmd_nfe1", excess_ibmd),
            (f"ed_excess_teacher_{many}", excess_many),
        ):
            if n > 1:
                _, low, high = V.t_interval(arr)
                figures[f"{s}_{metric}_low"], figures[f"{s}_{metric}_high"] = low, high
        if cfg.scale == Scale.default:
            # The toy must be a real test: the many-step teacher finds both modes, its one-step mean does not.
            sanity[f"{s}_teacher_{many}_recovers_bimodality"] = bool(
                np.all(np.abs(np.asarray(frac_many - truth)) <= BIMODAL_TOLERANCE)
            )
            sanity[f"{s}_teacher_nfe1_collapses"] = bool(np.all(np.asarray(frac_one) <= 0.5 * np.asarray(truth)))
    toy_names = [s.name for s in setups(cfg) if s.toy]
    statement = (
        f"IBMD at NFE 1 vs the converged I2SB teacher at NFE 1 and {cfg.many_nfe} on the 2-D bimodal bridge "
        f"({', '.join(toy_names)}), over {cfg.n_seeds} paired training seeds: the student's bimodal fraction within "
        f"{BIMODAL_TOLERANCE:g} of the teacher's NFE-{cfg.many_nfe} samples; its energy-distance excess over the "
        f"noise floor <= {ED_MANY_FACTOR:g}x the NFE-{cfg.many_nfe} teacher's plus one floor, and <= {ED_ONE_FACTOR:g}x "
        "the one-step teacher's; digits restoration reported alongside"
    )
    notes = (
        f"scale={cfg.scale.value}; the claim must hold for every toy teacher ({', '.join(toy_names)}); ED is the "
        "plug-in energy distance of joint (x0_hat, x1) to held-out (x0, x1), seed k on its own block; the noise floor "
        "is the same statistic for exact-posterior samples; intervals are Student-t over paired training seeds "
        "(teacher, student and test block all vary per seed); lrs chosen on the first seed's validation split"
    )
    finite = {k: float(x) for k, x in figures.items() if math.isfinite(x)}  # one seed: no interval ends
    explained: dict[str, str] = {}
    for s in toy_names:
        explained[f"still_improving:teacher_{s}"] = (
            "the teacher's schedule is a cosine decay of the lr to 0 at its step cap (docs/methods/ibmd.md): the "
            "last validations gain from the annealing the schedule ends in, not from budget left unused; most "
            "teachers stop early and the must-pass checks every seed's NFE-many sampler against the true bimodal "
            "fraction"
        )
        if cfg.scale == Scale.paper:  # the deciding scale: nothing to explain away
            continue
        explained[f"still_improving:ibmd_{s}"] = (
            f"budget-limited: {cfg.n_seeds} seeds x {cfg.data.toy_test}-pair test blocks x the lr grids fill the "
            f"300 s of one core; at the {cfg.distill.generator_steps}-step cap the students' validation "
            "ED to their teacher is still falling, and more steps would be expected to lower IBMD's ED: the ED "
            "criteria are read against the method's favour here and decided at `paper` scale (10,000 generator "
            "steps, patience 10)"
        )
    return ClaimResult(statement, criteria, sanity, finite, notes, controls, separations, explained)
