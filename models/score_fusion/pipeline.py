"""Score-Fusion: 3-D volume-to-volume translation by fusing perpendicular 2-D diffusion models in score space.

Xiyue Zhu*, Dou Hoon Kwark*, Ruike Zhu, Kaiwen Hong, Yiqi Tao, Shirui Luo, Yudu Li, Zhi-Pei Liang,
Volodymyr Kindratenko, "Introducing 3D Representation for Medical Image Volume-to-Volume Translation
via Score Fusion", ICML 2025, arXiv 2501.07430. Official code: ``score-fusion/ScoreFusion`` (HEAD
fd13d64; no checkpoints released), read: ``3D_scorefuser/diffusion_model/unet_brats.py``
(``model_ensemble_three_25_model``), ``diffusion_ensemble.py``, ``train_ensemble_325model.py``,
``dataset_brats.py``, ``metrics.py``; ``med_palette_2D/models/network.py`` and
``config/brast_5SSR_1.json``. Re-implemented here, not copied (docs/methods/score_fusion.md).

Method. Stage 1 trains one 2.5-D conditional epsilon model per slice direction (axial, coronal,
sagittal): input = the noisy residual slice, 2k+1 neighbouring low-resolution slices and 3 global
position channels. Stage 2 freezes them, slices a noisy volume x_t along each axis, restacks the three
epsilon fields eps1..3 and trains a small 3-D net on [x_t, LR, eps1, eps2, eps3] whose zero-initialised
output w gives eps_fused = (w0 + 1/3) eps1 + (w1 + 1/3) eps2 + (1/3 - w0 - w1) eps3 + w2, so training
starts exactly at the TOSM/MADM "merge" baseline (the mean of the three 2-D epsilons).

Data (``data``). Default: real brain MRI, 16^3 crops of nilearn's MNI152 2009a T1 template (1 mm,
read from the pinned nilearn wheel), 256 train / 64 val / 16 test crops from disjoint slabs along the
anterior-posterior axis; 4x through-plane super-resolution (thick slices along D, the anisotropic
acquisition on which the three 2-D models disagree; docs/methods/score_fusion.md), target = residual
HR - up(LR). The synthetic phantoms (ellipsoids + thin tubes) stay behind ``data.source="synthetic"``; BraTS-layout NIfTI folders
behind ``data.source="nifti"`` (the ``paper`` scale).

Arms (every one on the same frozen 2-D models of a seed, scored on the same noisy inputs and start noise):
  method                  Score-Fusion (per-voxel fusion weights + residual);
  ablation_residual_only  the same 3-D net, same budget and selection, but only its residual w2 is used
                          (eps = mean + w2): the review found such a correction alone passes the old check;
  baseline                merge (the mean of the three 2-D epsilons; the paper's TOSM/MADM);
  baseline_tpdm           TPDM (one random slice model per sampler step), baseline_axial (one 2-D model).

Selection (docs/methods/score_fusion.md). Stage 1: the 2-D learning rate is chosen from ``slice_train.lr_grid`` on
the axial model's validation loss (first seed) and used for all three directions; every 2-D fit stops
early on its validation loss (patience) and ends on its best epoch's EMA weights. Stage 2: each fusion
arm picks its own learning rate from ``fusion_train.lr_grid`` on validation eps-MSE (first seed), every
fit stops early (patience) and ends on its best epoch. Chosen values and best epochs are logged.

Claim check (restated by the review; ``claim``): over ``n_seeds`` paired seeds of the fusion stage
(Student-t 95 % intervals of per-seed values), eps-MSE(Score-Fusion) <= 0.95 x eps-MSE(merge), eps-MSE
below the residual-only ablation's (ratio < 1), and PSNR of DDIM-25 samples >= merge's and > the
ablation's. Must pass: fused == merge at initialisation (1e-6), fusion weights sum to 1, exact
slicing, self-consistent samples pool to 0, and (default scale) merge beats the data-free Gaussian
predictor and the ablation improves on merge on validation (it learned, so beating it means something).

Measured at default (December 2026, 3 seeds): the claim fails. eps-MSE ratio vs merge 0.997 [0.982,
1.012] (fails), vs residual-only 0.999 [0.994, 1.003] (inconclusive); PSNR +0.14 [0.07, 0.22] dB over merge
(holds), -0.01 [-0.06, 0.05] dB vs residual-only (inconclusive); the must-pass "ablation improves on merge
on validation" fails on one seed (on these smooth template crops neither fusion arm moves far from merge;
seed 2's ablation is already above merge at its first validation, after 50 steps, and never gets below).
Cost: ~64 CPU s of one core (prepare 5, train 49, evaluate + claim 10), ~88 s before the fusion fits
shared their 2-D epsilon passes (``training.EpsCache``), training metrics were logged once per epoch, Adam
went multi-tensor and the 3-D nets channels-last; the verdict and every selection are unchanged (metrics
equal to ~1e-5 relative: the channels-last weight gradients differ in float32 summation order only).
Before the review's restatement (phantoms, one seed, volumes as units) the check held: 0.936, +0.22 dB.

Deliberate deviations (and why):
* Data: BraTS 2021 is not downloadable here. The MNI152 template is one (averaged) real brain, so the
  crops are not independent subjects; train/val/test never share a voxel. 16^3 crops and 2x pooling
  instead of 152x192x192 and 4x. The loader for the paper's BraTS files stays (``data.source="nifti"``).
* Seeds: at default one set of 2-D models (trained on the first seed) serves every seed, as the paper
  fine-tunes on fixed pretrained 2-D models; the intervals cover the fusion stage (init, batch order)
  and the evaluation noise, not stage 1. ``stage1_per_seed=True`` retrains stage 1 per seed (the
  ``paper`` scale does), at n_seeds times its cost: three times over the default budget here.
* Networks at default scale: FiLM-conditioned conv stacks (2-D: 4 layers x 12 channels; 3-D fusion:
  3 layers x 16, the brief's) instead of the 64-channel guided-diffusion U-Nets, to fit ~90 s of one CPU
  core with three seeds, an ablation and two learning-rate grids; the U-Net (no attention, as in the
  configs used) is implemented and selected at ``paper`` scale. Stage 1 stops at 800 steps at default.
* One noise schedule for both stages (linear 1e-4 -> 0.02, 1000 steps; ``paper``: the 3-D code's
  1e-4 -> 0.09) and the 2-D nets get the same step index t as the 3-D model: the official
  ``int(t / time_step * ntime_steps_2D)`` mapping and Palette's continuous-gamma training are not
  reproduced (the brief's pitfall: feed both the identical alpha_bar).
* 2.5-D inputs: the non-zero (brain) mask channel is dropped; k = 1 neighbour on each side at default
  (3 LR slices), the paper's k = 2 at ``paper`` scale.
* Phase 2 of the paper (hierarchical 2-D decoder features injected into the 3-D U-Net) is not
  implemented; this is phase 1 (fusion in score space), the part the claim is about.
* Optimisation: Adam with learning rates from {1e-3, 3e-3} and EMA 0.99 (2-D) (official 5e-5 / 1e-5
  with EMA 0.9999 / 0.995 assume 10^5 steps; at a few hundred steps they would not move the weights).
  The 3-D loss is the official hybrid 5 L1 + 150 L2 on epsilon; the fusion stage keeps the official 3-D
  Trainer's EMA schedule (a copy of the model until step 2000, then an average every 10 steps).
* Evaluation: eps-MSE on 16 test crops x 16 stratified t; DDIM samples of 8 test crops per seed (TPDM
  and the single 2-D model on the first seed only: they are reported, not judged).
* Sampling: DDIM (25 steps, eta 0) from the shared toolkit instead of 1000-step ancestral DDPM.
  Self-consistency (x0_hat projected so its average pool is 0) is applied to *every* sampler, the
  baselines included (the official baselines run with ``--no_self_consistency``), so PSNR differences
  come from the scores alone.
* Metrics: PSNR and 3-D SSIM (skimage's algorithm, re-implemented: scikit-image is not installed) on
  volumes rescaled to [0, 1]; MMD and the downstream segmentation Dice are not computed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from models.base import (
    ClaimResult,
    Control,
    DatasetRef,
    Metrics,
    Scale,
    Separation,
    TrainedArtifacts,
    dataset_meta,
    user_data_path,
    write_manifest,
)
from models.common import raw_data, runtime
from models.common import verdicts as V
from models.common.arrays import save_npz
from models.common.diffusion import DDPMSchedule, linear_betas
from models.common.lightning import fit
from models.common.selection import BestWeights, early_stopping_callbacks, select_on_validation
from models.common.units import unit_labels

from . import plots
from .algorithm import (
    finite_difference_errors,
    psnr,
    sample,
    ssim3d,
    stratified_steps,
    tpdm_eps,
)
from .config import Config
from .data import MNI_MEMBERS, NILEARN_WHEEL, load_brats, load_mni152, make_phantoms
from .networks import (
    AXIS_NAMES,
    FusionMode,
    ScoreFusion,
    SliceModel,
    eps_net,
    from_slices,
    fuse,
    fusion_coefficients,
    make_cond,
    to_slices,
)
from .training import (
    SELECTION_METRIC,
    EpsCache,
    FusionTraining,
    SliceDiffusion,
    SliceSet,
    VolumeSet,
    WithSteps,
    random_batches,
    whole_batches,
)

FILE = "volumes.npz"
SELECTION_FILE = "selection.json"
# The two trained fusion arms and their fusion rule (networks.fuse).
FUSION_ARMS: dict[str, FusionMode] = {"method": "full", "ablation_residual_only": "residual_only"}
# Samplers scored on DDIM samples (metric prefixes): the claim's three on every seed, the reported-only
# TPDM and single-axis ones on the first seed.
CLAIM_SAMPLERS = ("method", "ablation_residual_only", "baseline")
SAMPLERS = (*CLAIM_SAMPLERS, "baseline_tpdm", "baseline_axial")
EPS_RATIO_MAX = 0.95  # the brief's claim: eps-MSE(Score-Fusion) <= 0.95 x eps-MSE(merge)
CONTROL_ARM = "control_untrained_fusion"  # the method's fusion net at its initial weights (= merge by design)
SHARED_UNIT = "all_seeds"  # the unit label of the one set of 2-D models every seed shares (stage1_per_seed off)
# The random draws a paired seed varies (the 2-D models of stage 1 are shared unless stage1_per_seed).
COVERS = (
    "fusion training seed (fusion-net initial weights, batch order, training noise)",
    "evaluation noise (diffusion steps, noise draws, DDIM start noise)",
)


# ----------------------------------------------------------------------------- data


def prepare(cfg: Config, data_dir: Path) -> DatasetRef:
    d, shape = cfg.data, "x".join(map(str, cfg.data.shape))
    if d.source == "mni152":
        arrays = load_mni152(d, cfg.seed)
        source = "real"
        provenance = (
            f"MNI152 2009a sym {d.mni_template.upper()} template ({MNI_MEMBERS[d.mni_template]} in "
            f"{raw_data.provenance(NILEARN_WHEEL)}), min-max to [-1, 1], random {shape} crops with >= "
            f"{d.mni_min_brain:g} brain from disjoint {d.mni_slab}-voxel anterior-posterior slabs, seed {cfg.seed}"
        )
    elif d.source == "nifti":
        arrays = load_brats(user_data_path(d.nifti_dir), d)
        source = "real"
        provenance = (
            f"BraTS-layout NIfTI ({d.nifti_modality}) from data/{d.nifti_dir}, read with nibabel, "
            f"centre-cropped to {shape}, min-max to [-1, 1]"
        )
    else:
        arrays = make_phantoms(d, cfg.seed)
        source = "synthetic"
        provenance = (
            f"{shape} phantoms from seed {cfg.seed}: random ellipsoids + axis-aligned tubes, "
            "Gaussian-smoothed, min-max to [-1, 1]"
        )
    save_npz(data_dir / FILE, **arrays)
    degradation = f"{'x'.join(map(str, d.pool_factors))} ({d.acquisition}) average pool, nearest upsample"
    return write_manifest(
        data_dir,
        meta={
            **dataset_meta(source, f"{provenance}; LR = {degradation}"),
            "data_source": d.source,
            "seed": cfg.seed,
            **{f"n_{split}": int(len(arrays[f"hr_{split}"])) for split in ("train", "val", "test")},
            "shape": list(d.shape),
            "degradation": degradation,
        },
    )


def load_arrays(data: DatasetRef) -> dict[str, torch.Tensor]:
    with np.load(data.file(FILE)) as archive:
        return {k: torch.from_numpy(np.ascontiguousarray(archive[k], dtype=np.float32)) for k in archive.files}


def schedule_of(cfg: Config) -> DDPMSchedule:
    return DDPMSchedule(linear_betas(cfg.diffusion.steps, cfg.diffusion.beta_start, cfg.diffusion.beta_end))


def residual_and_lr(arrays: dict[str, torch.Tensor], split: str) -> tuple[torch.Tensor, torch.Tensor]:
    return arrays[f"hr_{split}"] - arrays[f"lr_{split}"], arrays[f"lr_{split}"]


# ----------------------------------------------------------------------------- training


@dataclass
class Fitted:
    net: torch.nn.Module  # the kept (EMA, best-epoch) weights
    records: list[dict[str, float]]
    best: BestWeights


def seed_of(cfg: Config, k: int) -> int:
    """The training seed of paired seed ``k`` (0, 1, ...)."""
    return cfg.seed + 100 * k


def fresh_fusion_net(cfg: Config, seed: int) -> torch.nn.Module:
    """The 3-D fusion net exactly as training starts from it (seeded; last conv zero); every arm of a
    seed starts from the same one."""
    torch.manual_seed(seed + 1000)
    return eps_net(3, ScoreFusion.FUSION_IN, 3, cfg.fusion_net, zero_last=True)


def trainer_kwargs(cfg: Config) -> dict:
    """Numerical precision from the config; the hardware (CPU/GPU) comes from the spine's ``fit``."""
    return {"precision": cfg.precision}


def fit_slice_model(
    cfg: Config, arrays: dict, schedule: DDPMSchedule, axis: int, lr: float, seed: int, arm: str = "", unit: str = ""
) -> tuple[float, Fitted]:
    """Stage 1 for one slice direction at one learning rate; (best validation loss, the fit). With ``arm``
    (and ``unit``) the fit is recorded for the verdict diagnostics."""
    seed = seed + 11 * (axis + 1)
    torch.manual_seed(seed)
    module = SliceDiffusion(SliceModel(axis, cfg.slice_net), schedule, cfg.slice_train, lr)
    k, tc = cfg.slice_net.neighbours, cfg.slice_train
    per_epoch = min(tc.epoch_steps, tc.steps)
    callbacks = early_stopping_callbacks(SELECTION_METRIC["slice"], tc.patience, arm=arm, unit=unit)
    records = fit(
        module,
        random_batches(SliceSet(*residual_and_lr(arrays, "train"), axis, k), tc.batch_size, per_epoch, seed),
        whole_batches(WithSteps(SliceSet(*residual_and_lr(arrays, "val"), axis, k), schedule.n_steps, cfg.seed), 256),
        max_epochs=math.ceil(tc.steps / per_epoch),
        max_steps=tc.steps,
        seed=seed,
        variant=f"2-D {AXIS_NAMES[axis]} (lr={lr:g}, seed {seed})",
        callbacks=callbacks,
        **trainer_kwargs(cfg),
    )
    best = callbacks[-1]
    return float(best.best if best.best is not None else math.nan), Fitted(module.ema.cpu().eval(), records, best)


def fit_fusion(
    cfg: Config,
    arrays: dict,
    schedule: DDPMSchedule,
    slices: list[SliceModel],
    arm: str,
    lr: float,
    seed: int,
    eps_cache: EpsCache | None = None,
    unit: str = "",
) -> tuple[float, Fitted]:
    """Stage 2 for one fusion arm at one learning rate on frozen ``slices``; (best validation eps-MSE, fit).
    ``eps_cache``: the 2-D epsilon passes shared with the other fits on the same ``slices``. With ``unit``
    the fit is a compared one of ``arm``, recorded for the verdict diagnostics."""
    model = ScoreFusion(cfg.slice_net, cfg.fusion_net, FUSION_ARMS[arm])
    for axis, sm in enumerate(slices):
        model.slices[axis].load_state_dict(sm.state_dict())
    model.fusion = fresh_fusion_net(cfg, seed)
    tc = cfg.fusion_train
    module = FusionTraining(model, schedule, tc, lr, eps_cache)
    per_epoch = min(tc.epoch_steps, tc.steps)
    r_val, lr_val = residual_and_lr(arrays, "val")
    # Each validation volume val_repeats times (each copy gets its own fixed t and noise).
    val_set = VolumeSet(r_val.repeat(tc.val_repeats, 1, 1, 1), lr_val.repeat(tc.val_repeats, 1, 1, 1))
    val_set = WithSteps(val_set, schedule.n_steps, cfg.seed)  # the same steps for every arm and seed
    callbacks = early_stopping_callbacks(SELECTION_METRIC["fusion"], tc.patience, arm=arm if unit else "", unit=unit)
    records = fit(
        module,
        random_batches(
            VolumeSet(*residual_and_lr(arrays, "train")), tc.batch_size, per_epoch * tc.grad_accum, seed + 77
        ),
        whole_batches(val_set, cfg.eval.chunk),
        max_epochs=math.ceil(tc.steps / per_epoch),
        max_steps=tc.steps,
        seed=seed + 77,
        variant=f"{arm} (lr={lr:g}, seed {seed})",
        accumulate_grad_batches=tc.grad_accum,
        callbacks=callbacks,
        **trainer_kwargs(cfg),
    )
    best = callbacks[-1]
    return float(best.best if best.best is not None else math.nan), Fitted(module.ema.cpu().eval(), records, best)


def slices_file(model_dir: Path, k: int) -> Path:
    return Path(model_dir) / f"slices_seed{k}.pt"


def fusion_file(model_dir: Path, arm: str, k: int) -> Path:
    return Path(model_dir) / f"fusion_{arm}_seed{k}.pt"


def stage1_seed(cfg: Config, k: int) -> int:
    """The paired seed whose 2-D models seed ``k`` uses (0 unless stage 1 is retrained per seed)."""
    return k if cfg.stage1_per_seed else 0


def history_key(name: str, k: int) -> str:
    return name if k == 0 else f"{name}_seed{k}"


def stage1_unit(cfg: Config, k: int) -> str:
    """The unit label of seed ``k``'s 2-D models: its own, or one set shared by every seed."""
    return f"seed{k}" if cfg.stage1_per_seed else SHARED_UNIT


def train_stage1(cfg: Config, arrays: dict, schedule: DDPMSchedule, k: int, state: dict) -> list[SliceModel]:
    """The three 2-D models of paired seed ``k``; on the first call the axial model picks the learning rate."""
    seed, tc = seed_of(cfg, k), cfg.slice_train
    unit = stage1_unit(cfg, k)
    fits: dict[int, Fitted] = {}
    if "slice_lr" not in state:
        selection, fits[0] = select_on_validation(
            "baseline_2d",
            [{"lr": lr} for lr in tc.lr_grid],
            lambda point: fit_slice_model(cfg, arrays, schedule, 0, point["lr"], seed),
            metric="loss",
            higher_is_better=False,
            unit=unit,
        )
        fits[0].best.record(f"baseline_2d_{AXIS_NAMES[0]}", unit)  # the chosen point's fit is the axial model
        print(f"  selected {selection.describe()} (axial model; used for all three directions)", flush=True)
        state["slice_lr"] = selection.chosen["lr"]
        state["summary"].update(selection.summary())
        state["selections"]["baseline_2d"] = {"chosen": selection.chosen, "table": selection.table}
    for axis in range(3):
        name = f"2d_{AXIS_NAMES[axis]}"
        if axis not in fits:
            fits[axis] = fit_slice_model(
                cfg, arrays, schedule, axis, state["slice_lr"], seed, arm=f"baseline_{name}", unit=unit
            )[1]
        state["history"][history_key(f"baseline_{name}", k)] = fits[axis].records
        state["summary"].update(fits[axis].best.summary(f"baseline_{name}/seed{k}"))
    return [fits[axis].net for axis in range(3)]


def train_stage2(
    cfg: Config, arrays: dict, schedule: DDPMSchedule, slices: list, k: int, state: dict, eps_cache: EpsCache
) -> dict:
    """Both fusion arms on the frozen 2-D models of seed ``k``; on the first seed each picks its learning rate.
    Every fit reads the 2-D epsilon passes through ``eps_cache`` (one per set of ``slices``)."""
    seed, nets = seed_of(cfg, k), {}
    for arm in FUSION_ARMS:
        if f"{arm}_lr" not in state:
            selection, fitted = select_on_validation(
                arm,
                [{"lr": lr} for lr in cfg.fusion_train.lr_grid],
                lambda point, arm=arm: fit_fusion(cfg, arrays, schedule, slices, arm, point["lr"], seed, eps_cache),
                metric="eps_mse",
                higher_is_better=False,
                unit=f"seed{k}",
            )
            fitted.best.record(arm, f"seed{k}")  # the chosen point's fit is this seed's compared one
            print(f"  selected {selection.describe()}", flush=True)
            state[f"{arm}_lr"] = selection.chosen["lr"]
            state["summary"].update(selection.summary())
            state["selections"][arm] = {"chosen": selection.chosen, "table": selection.table}
        else:
            fitted = fit_fusion(
                cfg, arrays, schedule, slices, arm, state[f"{arm}_lr"], seed, eps_cache, unit=f"seed{k}"
            )[1]
        state["history"][history_key(arm, k)] = fitted.records
        state["summary"].update(fitted.best.summary(f"{arm}/seed{k}"))
        merge_val = [r["val/merge_eps_mse"] for r in fitted.records if "val/merge_eps_mse" in r]
        if merge_val:  # the fixed validation draws: merge's value is the same at every epoch
            state["summary"][f"select/{arm}/seed{k}/val_merge_eps_mse"] = merge_val[0]
        nets[arm] = fitted.net
    return nets


def train(cfg: Config, data: DatasetRef, out_dir: Path) -> TrainedArtifacts:
    arrays = load_arrays(data)
    schedule = schedule_of(cfg)
    state: dict = {"history": {}, "summary": {}, "selections": {}}
    slices = None
    for k in range(cfg.n_seeds):
        if slices is None or cfg.stage1_per_seed:
            slices = train_stage1(cfg, arrays, schedule, k, state)
            torch.save([sm.state_dict() for sm in slices], slices_file(out_dir, k))
            eps_cache = EpsCache()  # valid for these 2-D models only
        for arm, net in train_stage2(cfg, arrays, schedule, slices, k, state, eps_cache).items():
            torch.save(net.state_dict(), fusion_file(out_dir, arm, k))
    (Path(out_dir) / SELECTION_FILE).write_text(json.dumps(state["selections"], indent=1))
    return TrainedArtifacts(out_dir, state["history"], state["summary"])


def load_arms(cfg: Config, model_dir: Path, k: int) -> dict[str, ScoreFusion]:
    """Seed ``k``'s trained fusion arms, sharing that seed's three frozen 2-D models (one ``slices``)."""
    states = torch.load(slices_file(model_dir, stage1_seed(cfg, k)), weights_only=True)
    models = {}
    for arm, mode in FUSION_ARMS.items():
        model = ScoreFusion(cfg.slice_net, cfg.fusion_net, mode)
        if models:
            model.slices = next(iter(models.values())).slices
        else:
            for sm, state in zip(model.slices, states):
                sm.load_state_dict(state)
        model.fusion.load_state_dict(torch.load(fusion_file(model_dir, arm, k), weights_only=True))
        models[arm] = model.eval()
    return models


def load_model(cfg: Config, model_dir: Path) -> ScoreFusion:
    """The registered model: Score-Fusion of the first seed, i.e. the three 2-D slice models and the trained
    fusion net (``forward`` = fused epsilon, ``merge`` = the baseline) on (x_t, cond = make_cond(LR), t)."""
    return load_arms(cfg, model_dir, 0)["method"]


# ----------------------------------------------------------------------------- evaluation


def device_of() -> torch.device:
    """Evaluate where training ran: the spine's Lightning hardware setting (CPU unless it names a GPU)."""
    settings = getattr(runtime, "trainer_settings", lambda: {"accelerator": "cpu"})()
    gpu = str(settings.get("accelerator", "cpu")) in ("gpu", "cuda", "auto")
    return torch.device("cuda" if gpu and torch.cuda.is_available() else "cpu")


@torch.no_grad()
def eps_errors(
    cfg: Config,
    models: dict[str, ScoreFusion],
    schedule: DDPMSchedule,
    r: torch.Tensor,
    cond: torch.Tensor,
    prior_var: float,
    seed: int,
) -> dict:
    """Per (volume, t) epsilon-MSE of every model on the same noisy inputs (paired), plus the checks:
    |fused_at_init - merge| over both fusion rules (on the first chunk of inputs) and |sum of the fusion
    weights - 1| (max over voxels), and the method's mean |w|.

    Reference "gaussian_prior": the data-free MMSE predictor if every residual voxel were independent
    N(0, prior_var): eps_hat = sqrt(1 - ab) x_t / (ab prior_var + 1 - ab). A model that learned nothing
    from the LR input or the volume's structure cannot beat it."""
    n, k = len(r), cfg.eval.t_points
    g = torch.Generator().manual_seed(seed + 1)
    steps = stratified_steps(n, k, schedule.n_steps, g)
    items = torch.arange(n).repeat_interleave(k)
    t_all = steps.flatten()
    init_fusion = fresh_fusion_net(cfg, seed).to(r.device).eval()
    axes = [f"baseline_{name}" for name in AXIS_NAMES]
    names = [*axes, "baseline", *FUSION_ARMS, CONTROL_ARM, "reference_gaussian_prior"]
    mse = {name: torch.empty(n * k) for name in names}
    init_gap = weight_sum_err = disagreement = 0.0
    abs_w = torch.zeros(3, dtype=torch.float64)
    method = models["method"]
    for i in range(0, n * k, cfg.eval.chunk):
        idx, t = items[i : i + cfg.eval.chunk].to(r.device), t_all[i : i + cfg.eval.chunk].to(r.device)
        x0, c = r[idx], cond[idx]
        noise = torch.randn(x0.shape, generator=g).to(r.device)
        x_t = schedule.q_sample(x0, t, noise)
        eps3 = method.eps_2d(x_t, c, t)
        merged = eps3.mean(1, keepdim=True)
        # How much the three 2-D models disagree: the per-voxel variance of their epsilons (what fusion can use).
        disagreement += float(eps3.var(1, unbiased=False).mean()) * len(idx)
        ab = schedule.alpha_bar(t, x_t)
        preds = {
            **{name: eps3[:, a : a + 1] for a, name in enumerate(axes)},
            "baseline": merged,
            "reference_gaussian_prior": (1 - ab).sqrt() * x_t / (ab * prior_var + 1 - ab),
        }
        w_init = method.weights(x_t, c, t, eps3, init_fusion)
        # The negative control: the method's fusion at its initial weights (nothing learned in stage 2).
        preds[CONTROL_ARM] = fuse(eps3, w_init, method.mode)
        w_init = w_init if i == 0 else None  # one chunk checks the init gap
        for arm, model in models.items():
            w = model.weights(x_t, c, t, eps3)
            preds[arm] = fuse(eps3, w, model.mode)
            if w_init is not None:
                init_gap = max(init_gap, float((fuse(eps3, w_init, model.mode) - merged).abs().max()))
            weight_sum_err = max(weight_sum_err, float((fusion_coefficients(w, model.mode).sum(1) - 1).abs().max()))
            if arm == "method":
                abs_w += w.abs().double().mean((0, 2, 3, 4)).cpu() * len(idx)
        for name, pred in preds.items():
            mse[name][i : i + cfg.eval.chunk] = ((pred - noise) ** 2).flatten(1).mean(1).cpu()
    return {
        "steps": steps,
        "mse": {name: v.view(n, k) for name, v in mse.items()},
        "init_gap": init_gap,
        "slice_disagreement": disagreement / (n * k),
        "weight_sum_err": weight_sum_err,
        "mean_abs_w": (abs_w / (n * k)).tolist(),
    }


@torch.no_grad()
def sample_all(
    cfg: Config,
    models: dict[str, ScoreFusion],
    schedule: DDPMSchedule,
    cond: torch.Tensor,
    seed: int,
    samplers: tuple[str, ...] = SAMPLERS,
):
    """Residual samples of every one of ``samplers`` from the same starting noise (DDIM, self-consistency
    as configured), and TPDM's per-axis call counts."""
    n, ev = cfg.eval.sample_volumes, cfg.eval
    cond = cond[:n]
    x_T = torch.randn((n, 1, *cond.shape[2:]), generator=torch.Generator().manual_seed(seed + 2)).to(cond.device)
    method = models["method"]
    out, tpdm_axes = {}, []
    tpdm_gen = torch.Generator().manual_seed(seed + 3)
    for name in samplers:
        parts = []
        for i in range(0, n, ev.chunk):
            c = cond[i : i + ev.chunk]
            if name in models:
                fn = lambda x, t, c=c, m=models[name]: m(x, c, t)
            elif name == "baseline":
                fn = lambda x, t, c=c: method.merge(x, c, t)
            elif name == "baseline_tpdm":
                fn, drawn = tpdm_eps(method, c, ev.tpdm_probs, tpdm_gen)
            else:
                fn = lambda x, t, c=c: method.slices[0](x, c, t)
            noise_gen = torch.Generator(device=cond.device).manual_seed(seed + 4 + i)  # eta > 0: paired noise
            parts.append(
                sample(
                    fn,
                    schedule,
                    x_T[i : i + ev.chunk],
                    ev.sample_steps,
                    ev.eta,
                    ev.self_consistency,
                    cfg.data.pool_factors,
                    noise_gen,
                )
            )
            if name == "baseline_tpdm":
                tpdm_axes += drawn
        out[name] = torch.cat(parts)
    return out, [tpdm_axes.count(a) for a in range(3)]


def sample_metrics(hr_hat: torch.Tensor, hr: torch.Tensor, window: int) -> dict[str, torch.Tensor]:
    fd = finite_difference_errors(hr_hat, hr)
    return {
        "psnr": psnr(hr_hat, hr),
        "ssim": ssim3d(hr_hat, hr, window),
        "fd_err": fd.mean(1),
        **{f"fd_err_{name}": fd[:, a] for a, name in enumerate(AXIS_NAMES)},
    }


def slice_roundtrip_error(volume: torch.Tensor) -> float:
    """max |restack(slice(v, axis)) - v| over the three axes (exactly 0 for a correct slicer)."""
    v = volume[:, None]
    return max(float((from_slices(to_slices(v, a), a, len(v)) - v).abs().max()) for a in range(3))


def evaluate_seed(cfg: Config, models: dict[str, ScoreFusion], arrays: dict, device: torch.device, k: int) -> dict:
    """Every arm's test metrics for paired seed ``k`` (``{prefix/metric: value}``), its eps-MSE table and
    its samples (for the figures)."""
    schedule, seed = schedule_of(cfg), seed_of(cfg, k)
    hr, lr = arrays["hr_test"].to(device), arrays["lr_test"].to(device)
    r, cond = (hr - lr)[:, None], make_cond(lr)
    prior_var = float((arrays["hr_train"] - arrays["lr_train"]).var())
    errs = eps_errors(cfg, models, schedule, r, cond, prior_var, seed)
    mse, steps = errs["mse"], errs["steps"]
    low = steps < cfg.eval.low_t_fraction * schedule.n_steps
    p = cfg.eval.tpdm_probs
    values: dict[str, float] = {
        f"{name}/eps_mse": float(m.mean()) for name, m in mse.items() if not name.startswith("reference")
    }
    values["reference/eps_mse_gaussian_prior"] = float(mse["reference_gaussian_prior"].mean())
    # TPDM's expected eps-MSE over its per-step axis draw.
    values["baseline_tpdm/eps_mse"] = float(
        sum(p[a] * mse[f"baseline_{name}"] for a, name in enumerate(AXIS_NAMES)).mean()
    )
    for name in ("method", "ablation_residual_only", "baseline"):
        values[f"{name}/eps_mse_low_t"] = float(mse[name][low].mean())
    values["method/init_gap"], values["method/weight_sum_err"] = errs["init_gap"], errs["weight_sum_err"]
    values["baseline/slice_disagreement"] = errs["slice_disagreement"]
    values.update({f"method/mean_abs_w{i}": w for i, w in enumerate(errs["mean_abs_w"])})

    samples, tpdm_counts = sample_all(cfg, models, schedule, cond, seed, SAMPLERS if k == 0 else CLAIM_SAMPLERS)
    n = cfg.eval.sample_volumes
    hr_s, lr_s = hr[:n], lr[:n]
    hr_hats = {name: (lr_s + sample[:, 0]).clamp(-1, 1) for name, sample in samples.items()}
    per_volume_psnr = {}
    for name, hr_hat in hr_hats.items():
        for metric, per_volume in sample_metrics(hr_hat, hr_s, cfg.eval.ssim_window).items():
            values[f"{name}/{metric}"] = float(per_volume.mean())
        per_volume_psnr[name] = psnr(hr_hat, hr_s)
    for metric, per_volume in sample_metrics(lr_s, hr_s, cfg.eval.ssim_window).items():
        values[f"reference/lr_{metric}"] = float(per_volume.mean())
    # max |avg_pool(residual sample)| relative to max(1, max |sample|): float32 rounding scales with the values.
    values["method/pool_residual_max"] = max(
        float(torch.nn.functional.avg_pool3d(s, cfg.data.pool_factors).abs().max() / s.abs().max().clamp_min(1))
        for s in samples.values()
    )
    if "baseline_tpdm" in samples:
        for a, count in enumerate(tpdm_counts):
            values[f"baseline_tpdm/calls_{AXIS_NAMES[a]}"] = float(count)
    return {"values": values, "mse": mse, "steps": steps, "hr_hats": hr_hats, "psnr": per_volume_psnr}


def evaluate(cfg: Config, data: DatasetRef, artifacts: TrainedArtifacts, out_dir: Path) -> Metrics:
    device = device_of()
    arrays = load_arrays(data)
    per_seed = []
    for k in range(cfg.n_seeds):
        models = {arm: m.to(device) for arm, m in load_arms(cfg, artifacts.model_dir, k).items()}
        per_seed.append(evaluate_seed(cfg, models, arrays, device, k))
    metrics = Metrics({}, [])
    labels = unit_labels("seed", cfg.n_seeds)
    v: dict[str, float] = {}
    for key in per_seed[0]["values"]:
        measured = [result["values"][key] for result in per_seed if key in result["values"]]
        if len(measured) == len(per_seed):  # measured on every seed: the claim's paired units
            arm, metric = key.split("/", 1)
            metrics.add_units(metric, arm, measured, labels)
        v[key] = float(np.mean(measured))  # the mean over the seeds that measured it
    for key in ("init_gap", "weight_sum_err", "pool_residual_max"):  # the worst seed for the must-pass checks
        v[f"method/{key}"] = max(result["values"][f"method/{key}"] for result in per_seed)
    v["method/slice_roundtrip_err"] = slice_roundtrip_error(arrays["hr_test"])
    v.update({key: value for key, value in artifacts.summary.items() if key.startswith("select/")})

    first = per_seed[0]
    selections = json.loads((Path(artifacts.model_dir) / SELECTION_FILE).read_text())
    plot_dir = Path(out_dir) / "plots"
    figures = [
        plots.plot_orthogonal_slices(
            {
                "LR input (nearest up)": arrays["lr_test"][0],
                "TPDM": first["hr_hats"]["baseline_tpdm"][0],
                "merge": first["hr_hats"]["baseline"][0],
                "residual-only": first["hr_hats"]["ablation_residual_only"][0],
                "Score-Fusion": first["hr_hats"]["method"][0],
                "ground truth": arrays["hr_test"][0],
            },
            {name: float(first["psnr"][name][0]) for name in SAMPLERS} | {"lr": first["values"]["reference/lr_psnr"]},
            plot_dir / "orthogonal_slices.png",
        ),
        plots.plot_training_curves(artifacts.history, cfg.n_seeds, plot_dir / "training_curves.png"),
        plots.plot_eps_vs_t(
            first["steps"], first["mse"], cfg.diffusion.steps, EPS_RATIO_MAX, plot_dir / "eps_mse_vs_t.png"
        ),
        plots.plot_seed_comparison(
            {**v, **metrics.unit_values()}, cfg.n_seeds, EPS_RATIO_MAX, plot_dir / "paired_seeds.png"
        ),
        plots.plot_psnr_per_volume(
            [{name: values.cpu().numpy() for name, values in r["psnr"].items()} for r in per_seed],
            plot_dir / "psnr_per_volume.png",
        ),
        plots.plot_selection(selections, plot_dir / "selection.png"),
    ]
    metrics.values, metrics.figures = v, figures
    return metrics


# ----------------------------------------------------------------------------- claim


def claim(cfg: Config, metrics: Metrics) -> ClaimResult:
    """The review's restated check, over paired seeds (t intervals of per-seed values):
    eps-MSE(Score-Fusion) / eps-MSE(merge) <= 0.95; eps-MSE(Score-Fusion) / eps-MSE(residual-only) < 1;
    PSNR(Score-Fusion) - PSNR(merge) >= 0 dB; PSNR(Score-Fusion) - PSNR(residual-only) > 0 dB.
    Must pass (any scale): fused == merge at initialisation (1e-6), fusion weights sum to 1 per voxel,
    slicing/restacking is exact, and with self-consistency the residual samples pool to 0 (1e-5).
    At default scale also: merge beats the data-free epsilon predictor on every seed (the 2-D models
    learned) and the residual-only ablation improves on merge on validation (it learned too)."""
    v, n = metrics.values, cfg.n_seeds
    seeds = lambda arm, metric: metrics.unit(metric, arm)  # noqa: E731
    units = "paired seeds"
    sampling = f"DDIM-{cfg.eval.sample_steps} samples of {cfg.eval.sample_volumes} test volumes (same start noise)"
    criteria = [
        V.mean_criterion(
            "eps_mse_ratio",
            "test eps-MSE(Score-Fusion) / eps-MSE(merge), per seed (paired noise and t)",
            seeds("method", "eps_mse") / seeds("baseline", "eps_mse"),
            EPS_RATIO_MAX,
            "<=",
            units,
            covers=COVERS,
        ),
        V.mean_criterion(
            "eps_mse_ratio_vs_residual_only",
            "test eps-MSE(Score-Fusion) / eps-MSE(residual-only fusion ablation), per seed",
            seeds("method", "eps_mse") / seeds("ablation_residual_only", "eps_mse"),
            1.0,
            "<",
            units,
            covers=COVERS,
        ),
        V.difference_criterion(
            "psnr_gain_db",
            f"PSNR(Score-Fusion) - PSNR(merge) of {sampling}, dB",
            seeds("method", "psnr"),
            seeds("baseline", "psnr"),
            0.0,
            ">=",
            units,
            paper="paper tables not available offline; the brief expects +0.2 to +1 dB",
            covers=COVERS,
        ),
        V.difference_criterion(
            "psnr_gain_vs_residual_only_db",
            f"PSNR(Score-Fusion) - PSNR(residual-only fusion ablation) of {sampling}, dB",
            seeds("method", "psnr"),
            seeds("ablation_residual_only", "psnr"),
            0.0,
            ">",
            units,
            covers=COVERS,
        ),
    ]
    # Negative control: the learned fusion removed (the method's fusion net at its initial weights, which
    # reproduce merge by design), scored by the deciding ratio's rule; it cannot beat merge by 5 %.
    controls = [
        Control(
            "eps_mse_ratio",
            "stage-2 training removed (the method's fusion net at its initial weights: fusion = merge)",
            V.mean_criterion(
                "eps_mse_ratio",
                "test eps-MSE(untrained fusion) / eps-MSE(merge), per seed (paired noise and t)",
                seeds(CONTROL_ARM, "eps_mse") / seeds("baseline", "eps_mse"),
                EPS_RATIO_MAX,
                "<=",
                units,
                covers=COVERS,
            ),
        )
    ]
    fusion_arms = ("method", "ablation_residual_only", "baseline")
    separations = [
        Separation(
            "test eps-MSE",
            {arm: v[f"{arm}/eps_mse"] for arm in fusion_arms},
            floor=v["reference/eps_mse_gaussian_prior"],  # the data-free predictor
            ceiling=0.0,
            margin=0.005,
        ),
        Separation(
            f"PSNR of {sampling} (dB)",
            {arm: v[f"{arm}/psnr"] for arm in fusion_arms},
            floor=v["reference/lr_psnr"],  # the low-resolution input itself
            margin=0.1,
        ),
    ]
    figures = {
        "eps_mse_ratio_residual_only_vs_merge": v["ablation_residual_only/eps_mse"] / max(v["baseline/eps_mse"], 1e-12),
        "eps_mse_low_t_ratio": v["method/eps_mse_low_t"] / max(v["baseline/eps_mse_low_t"], 1e-12),
        "eps_mse_gaussian_prior": v["reference/eps_mse_gaussian_prior"],
        "psnr_lr_input": v["reference/lr_psnr"],
        "init_gap": v["method/init_gap"],
        # the 2-D models' disagreement relative to merge's error: near 0, fusion has nothing to weigh
        "slice_disagreement_over_merge_eps_mse": v.get("baseline/slice_disagreement", math.nan)
        / max(v["baseline/eps_mse"], 1e-12),
        "weight_sum_err": v["method/weight_sum_err"],
        "pool_residual_max": v["method/pool_residual_max"],
    }
    for arm in SAMPLERS:
        for metric in ("eps_mse", "psnr", "ssim", "fd_err"):
            figures[f"{metric}_{arm}"] = v[f"{arm}/{metric}"]
    for arm in ("baseline_2d", *FUSION_ARMS):  # what the selection chose, where the train summary reached the metrics
        if f"select/{arm}/lr" in v:
            figures[f"{arm}_chosen_lr"] = v[f"select/{arm}/lr"]
        epochs = [v[key] for key in v if key.startswith(f"select/{arm}") and key.endswith("/best_epoch")]
        if epochs:
            figures[f"{arm}_mean_best_epoch"] = float(np.mean(epochs))

    sanity = {
        "fusion_at_init_equals_merge": v["method/init_gap"] <= 1e-6,
        "fusion_weights_sum_to_one": v["method/weight_sum_err"] <= 1e-6,
        "slice_restack_roundtrip_exact": v["method/slice_roundtrip_err"] == 0.0,
    }
    if cfg.eval.self_consistency:
        sanity["self_consistency_pool_reproduces_lr"] = v["method/pool_residual_max"] <= 1e-5
    if cfg.scale == Scale.default:  # a few smoke steps need not learn anything
        sanity["merge_beats_data_free_eps"] = bool(
            np.all(np.asarray(seeds("baseline", "eps_mse")) < np.asarray(seeds("reference", "eps_mse_gaussian_prior")))
        )
        ablation_val = [
            v.get(f"select/ablation_residual_only/seed{k}/best_val_val_eps_mse", math.nan) for k in range(n)
        ]
        merge_val = [v.get(f"select/ablation_residual_only/seed{k}/val_merge_eps_mse", math.nan) for k in range(n)]
        sanity["residual_only_ablation_improves_on_merge_val"] = bool(np.all(np.less(ablation_val, merge_val)))
    data = {"mni152": "MNI152 T1 brain crops (real)", "synthetic": "synthetic phantoms", "nifti": "NIfTI volumes"}
    statement = (
        f"Score-Fusion (a 3-D net fusing three frozen 2-D slice diffusion models per voxel, initialised at their "
        f"mean) on held-out {'x'.join(map(str, cfg.data.shape))} {data[cfg.data.source]}, {cfg.data.pool}x SR: "
        f"eps-MSE <= {EPS_RATIO_MAX} x merge's and below the residual-only ablation's; PSNR >= merge's and > the "
        f"ablation's ({sampling}; {n} paired seeds, every arm's learning rate chosen on validation)"
    )
    fd_worst = max(("method", "baseline", "baseline_tpdm"), key=lambda arm: v[f"{arm}/fd_err"])
    notes = (
        f"scale={cfg.scale.value}; eps-MSE over {cfg.eval.t_points} stratified t per test volume with paired noise; "
        f"intervals over {n} paired seeds of the fusion stage"
        + ("" if cfg.stage1_per_seed else " on one set of 2-D models (stage 1 shared)")
        + f"; eps-MSE ratio vs merge: Score-Fusion {v['method/eps_mse'] / v['baseline/eps_mse']:.3f}, residual-only "
        f"{figures['eps_mse_ratio_residual_only_vs_merge']:.3f}; PSNR Score-Fusion / residual-only / merge / TPDM / LR "
        f"input: {v['method/psnr']:.2f} / {v['ablation_residual_only/psnr']:.2f} / {v['baseline/psnr']:.2f} / "
        f"{v['baseline_tpdm/psnr']:.2f} / {v['reference/lr_psnr']:.2f} dB; largest finite-difference error "
        f"(cross-slice inconsistency): {fd_worst} (TPDM expected worst; reported only)"
    )
    return ClaimResult(statement, criteria, sanity, figures, notes, controls, separations)
