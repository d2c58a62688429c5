"""SE(3)-Equivariant Diffusion Policy in Spherical Fourier Space (SDP, ICML 2025).

Xupeng Zhu, Fan Wang, Robin Walters, Jane Shi; ICML 2025, arXiv 2507.01723 (README title
"Spherical Diffusion Policy: A SE(3) Equivariant Visuomotor Policy with Spherical Fourier
Representation"). Official code: ``amazon-science/Spherical_Diffusion_Policy`` (HEAD ``ea25aa5``),
read: ``sdp/model/equivariant_diffusion/irreps_conditional_unet1d.py`` and
``irreps_conv1d_components.py`` (IrrepConv1d, rms_norm_sh, SFiLM / SSFiLM / FiLM, the U-net, its
C4 equivariance test), ``sdp/policy/step.py``, ``sdp/config/sdp_ddpm_5layer.yaml`` and the
normaliser of ``robomimic_replay_point_cloud_gripper_equal_scale_dataset.py`` (via the brief
shared/methods/sdp.md). Re-implemented here, not copied.

Idea: a diffusion policy that is SE(3)-equivariant end to end. Translations are removed by
canonicalising around the end-effector (EE); rotations act on spherical-harmonic (irreps)
coefficients: the 10-D action (position, EE x-axis, EE y-axis, gripper) is 3 fields of
(l=0, l=1) coefficients, and the denoiser -- a temporal U-net whose convolutions have one kernel
per degree l shared over the orders m, whose norms, activations and Spherical FiLM conditioning
all commute with rotations -- maps rotated observations and noisy actions to rotated noise.
Trained on yaw-only scenes it therefore acts correctly on any SO(3) rotation of them, where a
conventional Diffusion Policy sees out-of-distribution inputs.

Pipeline: ``prepare`` draws the brief's synthetic reach-and-align demonstrations: ``train`` (2000
yaw-rotated "upright table" scenes), ``train_so3`` (2000 uniform-SO(3) scenes), ``val_so3`` (128
held-out SO(3) scenes) and the tests (200 yaw, 200 SO(3)). ``train`` fits four arms, each with the
same budget, the same lr grid chosen on the first seed's validation success, early stopping on the
EMA validation loss (best epoch kept) and 3 paired seeds (the restated check of docs/methods/sdp.md: an
equal-data comparison the baseline can win): SDP-lite; Diffusion Policy on the same yaw demos with a fresh
uniform SO(3) rotation of every training sample (rotation augmentation; every arm on these demos
gets the same augmented stream); SDP-lite with flat FiLM (the SFiLM ablation, also augmented); and
Diffusion Policy trained on the SO(3)-varied scenes. SDP-lite's DDPM loss is invariant under rotating
a scene (tested), so augmentation or SO(3)-varied scenes leave its training problem unchanged: its one
fit per seed is the method arm of both comparisons. ``evaluate`` samples one chunk per test scene
(DDIM 16, eta 1, no clipping; the same noise for every arm of a seed), scores success (final
position within 0.05 of either grasp point and orientation error < 15 degrees) and measures
equivariance errors; ``claim``: SDP-lite's SO(3) success minus each baseline's, per seed (> 0),
SDP-lite keeping >= 0.8x its yaw success, SFiLM >= flat FiLM; must pass: SDP-lite's equivariance
error < 1e-4, the baseline's O(1), each baseline learning the task in distribution (validation
success >= a blind policy's + 0.2).

Deliberate deviations and choices (all [inferred] in the brief unless stated):
* Data: MimicGen / MuJoCo 2.3.2 with the custom robosuite forks is infeasible offline, so the
  brief's synthetic task: a 32-point asymmetric rigid object (box + post) upright on a table
  below the EE, a 16-step smooth-step trajectory (straight line in position, slerp of the EE
  rotation onto the object's, R e_x and R e_y) to one of two grasp points 0.12 apart, chosen at
  random (multimodal), gripper closed over the last 4 steps. The EE's yaw is uniform on the
  circle and the object's yaw is within +-45 deg of it (the shortest-arc slerp is ambiguous near
  180 deg). One static observation (n_obs_steps 1, not 2: nothing moves before acting) and
  open-loop execution of the whole chunk (the EE follows absolute actions exactly, so executing
  the chunk is the rollout; no receding horizon). Loaders: the brief's ``.npz`` format (the
  prepared files use it) and robomimic/MimicGen HDF5 (``data.demos_from_robomimic``; rot-6D rows
  -> EE axes as SDP transposes; tested on a tiny HDF5 file the test writes with h5py).
* Encoder: SDP's 5-layer EquiformerV2 (l_max 2, FPS/kNN pooling, dgl/torch_geometric) is
  replaced by a hand-written l <= 1 point encoder: two rounds of radial-MLP-weighted vector
  messages to the object's centroid (an l=0 x l=1 tensor product), the second round also using
  each point's invariant coordinates in the learned frame (Vector-Neuron style).
* Irreps stack: hand-written for l <= 1, not e3nn. e3nn 0.6.0 has no temporal (kernel > 1)
  irreps convolution, so the U-net is hand-written either way; for the encoder, an e3nn
  ``FullyConnectedTensorProduct`` point convolution measured 4.8 ms per batch-128 step against
  2.2 ms for the same l <= 1 map hand-written (one thread), plus ~3 s to import e3nn, and the
  default budget is already over the project's 90 s with the hand-written stack. The tests use
  e3nn's ``o3.rand_matrix`` as an independent source of random rotations.
* Activation: SDP's ``SeparableS2Activation`` (S^2 grid, resolution 14; equivariant only up to
  the grid) is replaced by the brief's exactly equivariant norm gate (SiLU on the scalars,
  sigmoid gates from [scalars, |v|] on the l=1 fields), so the equivariance error is float
  round-off (< 1e-4 is the must-pass check; measured ~1e-6).
* Baseline: Chi et al.'s ConditionalUnet1D (Conv1d-GroupNorm-Mish blocks, FiLM from [time
  embedding, observation feature]) on the flattened 10-D actions with a DP3-style PointNet
  (per-point MLP on [p_i, p_i - centroid], max-pool, EE axes appended). Same canonicalisation,
  normaliser, diffusion, optimiser, steps, batch and seed as SDP-lite.
* Sizes for the CPU budget (docs/methods/sdp.md; the default may take up to 10 minutes of one core:
  4 arms x (3 lr grid points + 2 more seeds) + 3 placebo fits = 23 fits): horizon 8 (SDP:
  16) and a single-level U-net, fields (16,) for SDP-lite (4 coefficients each) and channels (64,)
  for the baseline (SDP: [200, 400, 800], two residual blocks per level), which halves the cost of
  an optimiser step (SDP-lite 26 ms, DP 22 ms at batch 128 on one core; the grouped irreps
  convolution is computed as two plain ones, 2x faster on CPU); at most 440 AdamW steps at batch 128
  (SDP: ~50k at batch 32), lr grid (1e-3, 3e-3, 1e-2), 30 warm-up steps then cosine, EMA power 0.75 (max
  0.9999) as SDP; evaluation uses the EMA weights. This is far from convergence for every arm:
  the non-equivariant baseline must learn the SO(3) symmetry from data, which needs many more steps
  (a pilot: 800 steps x 128 left it at 0.08 SO(3) success); the ``learns_task`` must-pass says so when
  it has not, and the ``paper`` scale (50k steps, horizon 16, wider nets) is the deciding one. The
  earlier sizes (horizon 16, SDP-lite fields (32, 64), DP channels (64, 128)) cost 285 / 147 ms per
  step; trained to a plateau (>= 2000 steps) for all 23 fits they would need ~2.5 h of one core, so the
  default is labelled budget-limited (the claim's ``explained``) rather than run at them.
* The SFiLM -> flattened-FiLM ablation runs at every scale (it is part of the restated claim).
* Diffusion: DDPM, 100 train steps, squaredcos_cap_v2, epsilon prediction as SDP; DDIM with 16
  steps at inference (SDP's DDPM config samples 100) with diffusers' "leading" spacing (0, 6, ...,
  90; implemented here, models.common only has "trailing", which starts at alpha_bar = 2e-7 and
  diverged without clipping) and eta = 1 (stochastic, like SDP's DDPM sampler; eta = 0 gave
  visibly more mode averaging, e.g. the baseline's in-distribution success 0.39 vs 0.58 in a trial).
  **No clip_sample** (SDP sets it True; per-coordinate clipping is not rotation-equivariant: the
  evaluation measures the sampled policy's equivariance error with and without it).
  Normalisation: one shared scale for every xyz (SDP's equal-scale normaliser).
* Rotation augmentation: a uniform SO(3) rotation per sample (SDP's rot_aug is [5, 5, 180] deg), so
  that the augmented yaw demos cover exactly the SO(3) test distribution (a Haar rotation of a yaw
  scene is a uniform SO(3) scene).
* Success is the brief's geometric criterion on the final action (no simulator); 200 test
  scenes per split, one sampled chunk each, instead of 50 rollouts.
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
    write_manifest,
)
from models.common import verdicts as V
from models.common.batches import Rows, random_batches, whole_batch
from models.common.lightning import fit
from models.common.selection import BestWeights, early_stopping_callbacks, grid, learns_task, select_on_validation
from models.common.units import unit_labels

from .algorithm import (
    Normaliser,
    equivariance_error,
    make_schedule,
    policy_equivariance_error,
    sample_actions,
    success_metrics,
)
from .config import Config
from .data import (
    canonicalise,
    load_demos_npz,
    make_splits,
    object_template,
    position_scale,
    random_rotations,
    save_demos_npz,
)
from .networks import DPPolicy, SDPPolicy, n_params
from .plots import LABELS, plot_errors, plot_learning_curves, plot_rollouts, plot_selection, plot_success
from .training import DiffusionPolicyModule

SPLITS = ("train", "train_so3", "val_so3", "test_yaw", "test_so3")


@dataclass(frozen=True)
class Arm:
    policy: str  # "sdp", "sdp_film" or "dp"
    train_split: str  # the demonstrations it trains on
    augment: bool  # a fresh uniform SO(3) rotation of every training sample


# Every arm of the comparison on the upright-table demos sees the same augmented stream; the second
# comparison trains the baseline on SO(3)-varied scenes. SDP-lite's loss is invariant under rotating a
# scene (tests), so rotating its training demos -- per batch or once -- leaves its training problem
# unchanged: its one fit per seed is the method of both comparisons.
ARMS = {
    "method": Arm("sdp", "train", True),
    "baseline": Arm("dp", "train", True),
    "method_film": Arm("sdp_film", "train", True),
    "baseline_so3": Arm("dp", "train_so3", False),
}
BASELINES = ("baseline", "baseline_so3")
TESTS = ("yaw", "so3")
# The negative control: the augmented Diffusion Policy at its chosen lr, retrained on other seeds and scored as if
# it were SDP-lite. It has no equivariance at all, so it must not beat the baseline it is a copy of.
PLACEBO, PLACEBO_SEED_OFFSET = "control_placebo", 1000
PLACEBO_OF = "baseline"


# ----------------------------------------------------------------------------- data


def prepare(cfg: Config, data_dir: Path) -> DatasetRef:
    splits = make_splits(cfg.data, cfg.seed)
    for name, arrays in splits.items():
        save_demos_npz(Path(data_dir) / f"{name}.npz", arrays)
    points, grasps = object_template(cfg.data, cfg.seed)
    d = cfg.data
    provenance = (
        f"models.sdp.data synthetic reach-and-align (seed {cfg.seed}): {d.n_points}-point asymmetric object, "
        f"2 grasp points, {d.horizon}-step demos; train/test_yaw yaw-rotated, train_so3/val_so3/test_so3 uniform SO(3)"
    )
    return write_manifest(
        data_dir,
        meta={
            **dataset_meta("synthetic", provenance),
            "seed": cfg.seed,
            "sizes": {name: int(len(a["actions"])) for name, a in splits.items()},
            "rotations": {
                "train": "yaw",
                "train_so3": "uniform SO(3)",
                "val_so3": "uniform SO(3)",
                "test_yaw": "yaw",
                "test_so3": "uniform SO(3)",
            },
            "n_points": int(points.shape[0]),
            "horizon": cfg.data.horizon,
            "grasp_separation": float(np.linalg.norm(grasps[0] - grasps[1])),
            "format": "npz: points (n, N, 3), ee_pose (n, 9: pos, x-axis, y-axis), actions (n, H, 10), world frame",
        },
    )


def load_split(data: DatasetRef, name: str) -> dict[str, np.ndarray]:
    return load_demos_npz(data.file(f"{name}.npz"))


def normaliser_for(train: dict[str, np.ndarray]) -> Normaliser:
    _, _, actions = canonicalise(train["points"], train["ee_pose"], train["actions"])
    return Normaliser(position_scale(actions))


def demo_rows(split: dict[str, np.ndarray], norm: Normaliser) -> Rows:
    points, ee_axes = norm.observation(split["points"], split["ee_pose"])
    return Rows(points, ee_axes, norm.actions(split["actions"], split["ee_pose"]))


# ----------------------------------------------------------------------------- training


def build_policy(cfg: Config, kind: str) -> torch.nn.Module:
    if kind == "sdp":
        return SDPPolicy(cfg.sdp, "sfilm")
    if kind == "sdp_film":
        return SDPPolicy(cfg.sdp, "film")
    if kind == "dp":
        return DPPolicy(cfg.dp)
    raise ValueError(f"unknown policy kind {kind!r}: expected 'sdp', 'sdp_film' or 'dp'")


def weights(model_dir: Path, arm: str, seed_index: int) -> Path:
    return Path(model_dir) / f"{arm}_seed{seed_index}.pt"


def sampled_success(
    cfg: Config, policy: torch.nn.Module, split: dict, norm: Normaliser, seed: int
) -> tuple[float, dict, np.ndarray]:
    """One DDIM chunk per scene (noise from ``seed``: the same for every arm) -> mean success, outcomes, chunks."""
    points, ee_axes = norm.observation(split["points"], split["ee_pose"])
    gen = torch.Generator().manual_seed(seed)
    pred = norm.unnormalise(
        sample_actions(policy, make_schedule(cfg.diffusion), points, ee_axes, cfg.data.horizon, cfg.diffusion, gen)
    )
    out = success_metrics(pred, split, cfg.eval.success_pos, cfg.eval.success_deg)
    return float(out["success"].mean()), out, pred


@dataclass
class Fitted:
    ema: torch.nn.Module  # the EMA weights at the best validation epoch
    records: list[dict[str, float]]
    best: BestWeights
    val_success: float
    params: int


def fit_arm(
    cfg: Config,
    arm: str,
    lr: float,
    seed: int,
    rows: dict[str, Rows],
    val: dict,
    norm: Normaliser,
    unit: str = "",
):
    """Train one arm at one learning rate and seed; early stopping on the EMA validation loss, then the
    validation success of the best epoch's EMA weights (the selection score). With ``unit`` the fit is one of
    the compared ones (recorded for the verdict diagnostics)."""
    spec, tc = ARMS[PLACEBO_OF if arm == PLACEBO else arm], cfg.train
    torch.manual_seed(seed)  # same initial draw per policy kind, same batches and diffusion noise per seed
    policy = build_policy(cfg, spec.policy)
    module = DiffusionPolicyModule(policy, make_schedule(cfg.diffusion), tc, lr, spec.augment, seed)
    per_epoch = min(tc.steps_per_epoch, tc.steps)
    callbacks = early_stopping_callbacks("val/loss", tc.patience, mode="min", arm=arm if unit else "", unit=unit)
    records = fit(
        module,
        random_batches(rows[spec.train_split], tc.batch_size, per_epoch, seed),
        whole_batch(val["rows"]),
        max_epochs=math.ceil(tc.steps / per_epoch),
        max_steps=tc.steps,
        seed=seed,
        variant=f"{LABELS.get(arm, arm)} (lr={lr:g}), seed {seed}",
        callbacks=callbacks,
    )
    ema = module.ema.eval()
    score, _, _ = sampled_success(cfg, ema, val["split"], norm, seed + 500)
    return score, Fitted(ema, records, callbacks[-1], score, n_params(policy))


def train(cfg: Config, data: DatasetRef, out_dir: Path) -> TrainedArtifacts:
    splits = {name: load_split(data, name) for name in ("train", "train_so3", "val_so3")}
    norm = normaliser_for(splits["train"])
    rows = {name: demo_rows(splits[name], norm) for name in ("train", "train_so3")}
    val = {"rows": demo_rows(splits["val_so3"], norm), "split": splits["val_so3"]}
    history: dict[str, list[dict[str, float]]] = {}
    summary: dict[str, float] = {"position_scale": norm.scale}
    selections = {}
    units = unit_labels("seed", cfg.train.n_seeds)
    for arm in ARMS:
        selection, first = select_on_validation(
            arm,
            grid(lr=cfg.train.lr_grid),
            lambda point, arm=arm: fit_arm(cfg, arm, point["lr"], cfg.seed, rows, val, norm),
            metric="success",
            unit=units[0],
        )
        print(f"  selected {selection.describe()}", flush=True)
        first.best.record(arm, units[0])  # the chosen point's fit on the first seed is a compared one
        lr = selection.chosen["lr"]
        fits = [first] + [
            fit_arm(cfg, arm, lr, cfg.seed + k, rows, val, norm, units[k])[1] for k in range(1, cfg.train.n_seeds)
        ]
        for k, fitted in enumerate(fits):
            torch.save(fitted.ema.state_dict(), weights(out_dir, arm, k))
            history[f"{arm}/seed{k}"] = fitted.records
            summary.update(fitted.best.summary(f"{arm}/seed{k}"))
            summary[f"{arm}/seed{k}/val_success"] = fitted.val_success
        summary.update(selection.summary())
        summary[f"{arm}/params"] = float(fits[0].params)
        selections[arm] = {"chosen": selection.chosen, "table": selection.table}
    for k in range(cfg.train.n_seeds):  # the negative control: the baseline's chosen point on seeds of its own
        seed = cfg.seed + PLACEBO_SEED_OFFSET + k
        placebo = fit_arm(cfg, PLACEBO, selections[PLACEBO_OF]["chosen"]["lr"], seed, rows, val, norm)[1]
        torch.save(placebo.ema.state_dict(), weights(out_dir, PLACEBO, k))
        history[f"{PLACEBO}/seed{k}"] = placebo.records
        summary[f"{PLACEBO}/seed{k}/val_success"] = placebo.val_success
    (Path(out_dir) / "selection.json").write_text(json.dumps(selections, indent=1))
    (Path(out_dir) / "normaliser.json").write_text(json.dumps({"position_scale": norm.scale}))
    return TrainedArtifacts(out_dir, history, summary)


def load_policy(cfg: Config, model_dir: Path, arm: str, seed_index: int = 0) -> torch.nn.Module:
    policy = build_policy(cfg, ARMS[PLACEBO_OF if arm == PLACEBO else arm].policy)
    policy.load_state_dict(torch.load(weights(model_dir, arm, seed_index), weights_only=True))
    return policy.eval()


def load_normaliser(model_dir: Path) -> Normaliser:
    return Normaliser(float(json.loads((Path(model_dir) / "normaliser.json").read_text())["position_scale"]))


class ReachPolicy(torch.nn.Module):
    """The registered model: SDP-lite with its normaliser and DDIM sampler, world frame in and out."""

    def __init__(self, cfg: Config, policy: torch.nn.Module, norm: Normaliser) -> None:
        super().__init__()
        self.cfg, self.policy, self.norm = cfg, policy, norm
        self.schedule = make_schedule(cfg.diffusion)

    def forward(self, x_t, t, points, ee_axes):
        return self.policy(x_t, t, points, ee_axes)

    @torch.no_grad()
    def predict(self, points: np.ndarray, ee_pose: np.ndarray, seed: int = 0) -> np.ndarray:
        """World-frame point clouds (n, N, 3) and EE poses (n, 9) -> absolute action chunks (n, H, 10)."""
        p, e = self.norm.observation(points, ee_pose)
        a = sample_actions(
            self.policy,
            self.schedule,
            p,
            e,
            self.cfg.data.horizon,
            self.cfg.diffusion,
            torch.Generator().manual_seed(seed),
        )
        out = self.norm.unnormalise(a)
        out[..., :3] += ee_pose[:, None, :3]
        return out


def load_model(cfg: Config, model_dir: Path) -> ReachPolicy:
    return ReachPolicy(cfg, load_policy(cfg, model_dir, "method"), load_normaliser(model_dir)).eval()


# ----------------------------------------------------------------------------- evaluation


def rotations_tensor(n: int, seed: int) -> torch.Tensor:
    return torch.from_numpy(random_rotations(np.random.default_rng([seed, 99]), n)).float()


def canonical_demo(split: dict[str, np.ndarray]) -> np.ndarray:
    return canonicalise(split["points"], split["ee_pose"], split["actions"].astype(np.float64))[2]


def blind_success(cfg: Config, train_split: dict, split: dict) -> float:
    """A policy that ignores the observation: the mean canonical training chunk, for every scene."""
    mean_chunk = canonical_demo(train_split).mean(0)
    pred = np.broadcast_to(mean_chunk, (len(split["actions"]),) + mean_chunk.shape)
    return float(success_metrics(pred, split, cfg.eval.success_pos, cfg.eval.success_deg)["success"].mean())


def evaluate(cfg: Config, data: DatasetRef, artifacts: TrainedArtifacts, out_dir: Path) -> Metrics:
    norm = load_normaliser(artifacts.model_dir)
    schedule = make_schedule(cfg.diffusion)
    tests = {name: load_split(data, f"test_{name}") for name in TESTS}
    H, ec, n_seeds = cfg.data.horizon, cfg.eval, cfg.train.n_seeds
    metrics = Metrics({}, [])
    values: dict[str, float] = {}
    outcomes: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    units = unit_labels("seed", n_seeds)
    per_seed: dict[str, dict[str, list[float]]] = {}  # arm -> metric -> one number per paired seed
    rotations = rotations_tensor(ec.equivariance_rotations, cfg.seed)
    eq = tests["so3"]
    n_eq = min(ec.equivariance_batch, len(eq["actions"]))
    eq_points, eq_axes = norm.observation(eq["points"][:n_eq], eq["ee_pose"][:n_eq])
    eq_actions = norm.actions(eq["actions"][:n_eq], eq["ee_pose"][:n_eq])
    for arm in (*ARMS, PLACEBO):
        rows = per_seed.setdefault(arm, {})
        for k in range(n_seeds):
            policy = load_policy(cfg, artifacts.model_dir, arm, k)
            rows.setdefault("val_success", []).append(artifacts.summary[f"{arm}/seed{k}/val_success"])
            for i, name in enumerate(TESTS):
                # The same sampling noise for every arm of a seed (the placebo: that of the seed it is paired with).
                rate, out, _ = sampled_success(cfg, policy, tests[name], norm, cfg.seed + k + 1000 * (i + 1))
                rows.setdefault(f"success_{name}", []).append(rate)
                if k == 0 and arm != PLACEBO:
                    outcomes.setdefault(arm, {})[name] = out
                    values[f"{arm}/pos_err_{name}"] = float(np.median(out["pos_err"]))
                    values[f"{arm}/rot_err_deg_{name}"] = float(np.median(out["rot_err_deg"]))
                    values[f"{arm}/grasp0_fraction_{name}"] = float((out["grasp"] == 0).mean())
            if k == 0 and arm != PLACEBO:
                values[f"{arm}/equivariance_error"] = equivariance_error(
                    policy, schedule, eq_points, eq_axes, eq_actions, rotations, cfg.seed
                )
        for key, numbers in rows.items():
            metrics.add_units(key, arm, numbers, units)
            values[f"{arm}/{key}"] = float(np.mean(numbers))
    method = load_policy(cfg, artifacts.model_dir, "method", 0)
    rot = rotations[: min(4, len(rotations))]
    values["method/policy_equivariance_error"] = policy_equivariance_error(
        method, schedule, eq_points, eq_axes, H, cfg.diffusion, rot, cfg.seed
    )
    # The pitfall, measured: SDP's clip_sample=True clamps each coordinate of x0_hat to [-1, 1].
    values["method/policy_equivariance_error_clip_sample"] = policy_equivariance_error(
        method, schedule, eq_points, eq_axes, H, cfg.diffusion, rot, cfg.seed, clip=1.0
    )
    values["method/equivariance_error_untrained"] = equivariance_error(
        build_policy(cfg, "sdp").eval(), schedule, eq_points, eq_axes, eq_actions, rotations, cfg.seed
    )
    train_split, val_split = load_split(data, "train"), load_split(data, "val_so3")
    values["blind/val_success"] = blind_success(cfg, train_split, val_split)
    for name in TESTS:
        values[f"oracle/demo_success_{name}"] = float(
            success_metrics(canonical_demo(tests[name]), tests[name], ec.success_pos, ec.success_deg)["success"].mean()
        )
    selections = json.loads((Path(artifacts.model_dir) / "selection.json").read_text())
    for arm, chosen in selections.items():
        values[f"{arm}/chosen_lr"] = float(chosen["chosen"]["lr"])
    plots = Path(out_dir) / "plots"
    figures = [
        plot_success(list(ARMS), per_seed, ec.success_pos, ec.success_deg, plots / "success_yaw_vs_so3.png"),
        plot_rollouts(rollout_panels(cfg, tests, norm, artifacts.model_dir), plots / "rollouts.png"),
        plot_errors(outcomes, ec.success_pos, ec.success_deg, plots / "final_errors.png"),
        plot_learning_curves(artifacts.history, plots / "learning_curves.png"),
        plot_selection({a: s["table"] for a, s in selections.items()}, plots / "selection.png"),
    ]
    metrics.values, metrics.figures = values, figures
    return metrics


def rollout_panels(cfg: Config, tests: dict, norm: Normaliser, model_dir: Path) -> list[dict]:
    """A few scenes (first yaw, then SO(3)) x (SDP-lite, the augmented baseline), first seed."""
    ec = cfg.eval
    scenes = [("yaw", 0)] + [("so3", i) for i in range(max(ec.n_plot_scenes - 1, 1))]
    arms = ("method", "baseline")
    panels = []
    for r, arm in enumerate(arms):
        policy = load_policy(cfg, model_dir, arm, 0)
        for c, (test, idx) in enumerate(scenes):
            split = tests[test]
            rep = np.full(ec.samples_per_plot_scene, idx)
            sub = {k: v[rep] for k, v in split.items()}
            _, out, pred = sampled_success(cfg, policy, sub, norm, cfg.seed + 7)
            ee = split["ee_pose"][idx, :3]
            panels.append(
                {
                    "title": f"{LABELS[arm]}\n{test} scene {idx}: {int(out['success'].sum())}/{len(pred)} succeed",
                    "row": r,
                    "col": c,
                    "n_rows": len(arms),
                    "n_cols": len(scenes),
                    "cloud": split["points"][idx] - ee,
                    "goals": split["goals"][idx] - ee,
                    "pred": pred,
                    "success": out["success"],
                    "demo_final": canonical_demo({k: v[idx : idx + 1] for k, v in split.items()})[0, -1],
                }
            )
    return panels


# ----------------------------------------------------------------------------- claim


def claim(cfg: Config, metrics: Metrics) -> ClaimResult:
    """The restated check (docs/methods/sdp.md): equal-data comparisons the baseline can win. Every arm sees the same
    demonstrations, budget, lr grid (chosen on SO(3) validation scenes) and early stopping; the unit is
    the training seed (same initial draw per policy kind, batches, rotations and sampling noise)."""
    v = metrics.values
    ec = cfg.eval
    units = f"paired training seeds ({cfg.data.n_test} test scenes per split each)"
    # A unit is one training seed: the initial draw of each policy kind, the batches, the augmentation
    # rotations and the diffusion noise of training, and the sampling noise of evaluation.
    covers = ("training seed (init, batch order, augmentation rotations, diffusion noise)", "sampling seed")
    so3 = metrics.paired("success_so3", *ARMS, PLACEBO)
    sdp_so3, sdp_yaw = so3["method"], metrics.paired("success_yaw", "method", *BASELINES)["method"]
    paper = (
        "paper: SDP above Diffusion Policy on the 8 tilted-table (SE(3)) MimicGen tasks; numbers not available offline"
    )
    criteria = [
        V.difference_criterion(
            "sdp_beats_augmented_dp",
            "SO(3)-scene success: SDP-lite minus Diffusion Policy trained on the same demos with SO(3) augmentation",
            sdp_so3,
            so3["baseline"],
            0.0,
            ">",
            units=units,
            paper=paper,
            covers=covers,
        ),
        V.difference_criterion(
            "sdp_beats_dp_on_so3_scenes",
            "SO(3)-scene success: SDP-lite minus Diffusion Policy trained on as many SO(3)-varied scenes",
            sdp_so3,
            so3["baseline_so3"],
            0.0,
            ">",
            units=units,
            paper=paper,
            covers=covers,
        ),
        V.mean_criterion(
            "sdp_keeps_success",
            "SDP-lite SO(3) success minus 0.8 x its yaw success",
            sdp_so3 - 0.8 * sdp_yaw,
            0.0,
            ">=",
            units=units,
            covers=covers,
        ),
        V.difference_criterion(
            "sfilm_vs_film_so3",
            "SO(3)-scene success: SDP-lite (SFiLM) minus SDP-lite with flat FiLM (both SO(3)-augmented)",
            sdp_so3,
            so3["method_film"],
            0.0,
            ">=",
            units=units,
            paper="paper: SFiLM ablation in its Table 4 (numbers not available offline)",
            covers=covers,
        ),
    ]
    controls = [
        Control(
            "sdp_beats_augmented_dp",
            "no equivariance at all: the augmented Diffusion Policy at its chosen lr on seeds +1000, scored as SDP-lite",
            V.difference_criterion(
                "sdp_beats_augmented_dp",
                "SO(3)-scene success: augmented Diffusion Policy on other seeds minus augmented Diffusion Policy",
                so3[PLACEBO],
                so3["baseline"],
                0.0,
                ">",
                units=units,
                covers=covers,
            ),
        )
    ]
    separations = [
        Separation(f"{name} test success", {arm: v[f"{arm}/success_{name}"] for arm in ARMS}, floor=0.0, ceiling=1.0)
        for name in TESTS
    ]
    figures = {
        "blind_val_success": v["blind/val_success"],
        "sdp_equivariance_error": v["method/equivariance_error"],
        "sdp_equivariance_error_untrained": v["method/equivariance_error_untrained"],
        "sdp_policy_equivariance_error": v["method/policy_equivariance_error"],
        "sdp_policy_equivariance_error_clip_sample": v["method/policy_equivariance_error_clip_sample"],
    }
    for arm in ARMS:
        for key in ("success_yaw", "success_so3", "val_success", "equivariance_error", "chosen_lr"):
            figures[f"{arm}_{key}"] = v[f"{arm}/{key}"]
    bar = v["blind/val_success"] + ec.learns_task_margin
    sanity = dict(learns_task(arm, v[f"{arm}/val_success"], bar) for arm in BASELINES)
    sanity.update(
        {
            "sdp_equivariance_error_below_tol": v["method/equivariance_error"] < ec.equivariance_tol,
            "sdp_untrained_equivariance_error_below_tol": v["method/equivariance_error_untrained"]
            < ec.equivariance_tol,
            "baseline_equivariance_error_order_one": v["baseline/equivariance_error"] > ec.baseline_nonequivariance,
            "demonstrations_succeed": min(v["oracle/demo_success_yaw"], v["oracle/demo_success_so3"]) == 1.0,
        }
    )
    statement = (
        "With the same demonstrations, budget and selection, SDP-lite's success on SO(3)-rotated scenes beats a "
        "Diffusion Policy trained with SO(3) rotation augmentation and one trained on SO(3)-varied scenes, keeps "
        ">= 0.8 x its yaw success, and SFiLM >= flat FiLM"
    )
    notes = (
        f"scale={cfg.scale.value}; {cfg.train.n_seeds} paired seeds; lr grid {list(cfg.train.lr_grid)} per arm on "
        f"the first seed's validation success ({cfg.data.n_val} SO(3) scenes); at most {cfg.train.steps} steps x "
        f"{cfg.train.batch_size}, patience {cfg.train.patience} epochs on the EMA validation loss; "
        f"{cfg.data.n_test} test scenes per split, one DDIM-{cfg.diffusion.ddim_steps} chunk each (same noise for "
        f"every arm); success = final position < {ec.success_pos:g} from either grasp point and orientation error "
        f"< {ec.success_deg:g} deg; a baseline learns the task when its validation success >= the blind policy's "
        f"+ {ec.learns_task_margin:g}"
    )
    explained = {}
    if cfg.scale != Scale.paper:
        # Measured (docs/methods/sdp.md): a plateau needs >= 2000 steps per fit at the paper's horizon 16 and the
        # earlier net sizes (285 / 147 ms per step for SDP-lite / DP on one core), 23 fits: ~2.5 h of one core.
        budget = (
            f"budget-limited: decided at `paper` scale. At {cfg.scale.value} every fit stops at its cap of "
            f"{cfg.train.steps} steps (23 fits in the 10-minute budget; a plateau needs >= 2000 steps per fit, "
            "about 2.5 h of one core at the paper's horizon and the earlier net sizes)"
        )
        explained["still_improving"] = budget
        # The placebo is the augmented baseline on other seeds: with both at the floor of success it can be neither
        # refuted nor confirmed; it decides once the baseline learns the task (the same budget limit).
        explained["control_inconclusive"] = budget + "; the placebo and the baseline both sit near zero success"
        notes += f"; {budget}: the baselines-learn must-pass is expected to fail here"
    return ClaimResult(
        statement + f" (equivariance error < {ec.equivariance_tol:g} must pass)",
        criteria,
        sanity,
        figures,
        notes,
        controls,
        separations,
        explained,
    )


__all__ = ["claim", "evaluate", "load_model", "prepare", "train"]
