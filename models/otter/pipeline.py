"""OTTER: A Vision-Language-Action Model with Text-Aware Visual Feature Extraction (ICML 2025).

Huang Huang, Fangchen Liu, Letian Fu, Tingfan Wu, Mustafa Mukadam, Jitendra Malik, Ken Goldberg,
Pieter Abbeel; arXiv 2503.03734. Official code: ``FangchenLiu/otter_jax`` (d66aa5a, the paper's
experiments: ``otter/model/transformer.py`` ``TextImageCrossAttention``, ``vision/clip_module.py``)
and the PyTorch re-implementation ``Max-Fu/otter`` (cc769b0, ``otter/policy/otter.py``
``TextAwareVisualExtraction``). Re-implemented here, not copied.

Idea: keep a pretrained CLIP frozen; from its unit-norm patch features P (N x D) and the
instruction's per-token text features T (k x D), build one visual token per word,
f = softmax_patches(T P^T / tau) (P + PE), so only instruction-relevant visual content reaches the
policy. Behaviour cloning with an L1 loss trains the policy on top.

Data (synthetic: no robot data, LIBERO assets or CLIP weights exist offline): ``prepare`` renders a
tabletop (32 x 32 px, 3 objects from 4 colours x 4 shapes, a 2 x 2 agent, instruction "<colour>
<shape>"), pretrains a tiny CLIP-layout encoder on captioned scenes over all 16 pairs and saves it
next to the data (DVC versions both), and writes expert demonstrations and seen-target validation
scenes (targets from seen pairs only) and fixed test episodes on seen and held-out targets.

Arms (``train``), all on the same demonstrations, epoch budget, batches and seeds:
  method     OTTER head, encoder frozen;
  finetuned  the same OTTER head with the encoder fine-tuned, the paper's "fine-tune the VLM"
             alternative;
  baseline   all-tokens head (64 patch tokens, 2 word tokens and proprio through a transformer read out
             at the word and proprio positions), encoder frozen: the "independent features" design
             OTTER argues against, which must learn its own word->patch attention from the seen targets.
Selection (REVIEW.md rule 2): each arm's grid is fitted on the first seed: the head lr
(``bc.lr_grid``) for the frozen arms; for the fine-tuned arm the encoder lr (``bc.encoder_lr_grid``,
3e-4 / 1e-4 / 3e-5, the values the review found to decide the comparison) with its head, the frozen
arm's head, at the lr chosen for the frozen arm. Every fit stops early on the seen-target validation L1
(patience, best epoch's weights); the grid point with the best closed-loop success on the seen-target
validation episodes wins (ties: lower validation L1) and is refitted on the other seeds. Held-out
targets enter no choice.

Claim (``claim``), on the held-out-colour split, each criterion a mean over the paired BC seeds (every
arm of a seed shares its head initialisation and batch order) with its t-interval: OTTER's held-out
success >= 0.5, >= the fine-tuned arm's + 0.2 and >= the all-tokens arm's + 0.3 (the brief's revised
criteria); OTTER's held-out / seen success >= 0.8 (the brief's first criterion (ii); REVIEW.md asks for
the ratio). Must pass: the encoder probe localises held-out targets (>= 0.9), OTTER's seen success
>= 0.8 (brief), and every arm learns the seen task (seen-target success >= 0.5, a majority of episodes,
about 10x a random policy; REVIEW.md: "the all-tokens baseline must learn the seen task").

Deliberate deviations, and why:
* No CLIP weights: the encoder is a tiny CLIP-layout model (OpenAI parameter names, plus a 3x3 conv
  stem) pretrained with the brief's grounded region-word contrastive loss (the global FILIP-style
  loss did not converge at toy scale, brief). A loader for real OpenAI-layout CLIP state dicts
  (``clip_weights``, a path under data/) builds the same encoder interface and uses the
  ClearCLIP-style last-block attention output like the official code; the tiny encoder uses its
  ordinary output tokens, which its loss trained directly.
* Held-out split: the default holds out a colour (yellow is never a BC target but is in the
  pretraining and as a distractor), the brief's revised primary split; ``data.split=pairs`` holds
  out 4 colour-shape pairs instead. Distractors share no attribute with the target.
* Policy: one time step (the task is Markov) instead of a 12-step causal context with 12-action
  chunks; the policy transformer (``policy.layers``) runs over [k selected visual tokens, k word
  tokens, proprio] and an MLP reads the action out, instead of the attention poolers + 8-layer
  causal transformer. Text tokens are not pooled separately; there are no start/end/padding tokens.
* Position code: a fixed 2-D sin-cos table added to the values (the paper's 1-D index code made the
  target hard to decode for a small head, brief). Temperature: learnable from 0.07 (PyTorch code),
  clamped below at 0.01 (the JAX clip on the inverse temperature), logged.
* The all-tokens head reads its action out at the word and proprio positions, not at a CLS token (the
  prototype's one-layer CLS query is a constant, so its attention could not depend on the instruction:
  0.03 seen success), and its position code enters the values only, as in OTTER's selection (in the
  keys too it swamped the patch content: no learning in 1,000 steps).
* Demonstrations end when the expert reaches the target (the brief's fixed 12 steps were ~70 % "stay"
  rows, which made 0 the L1-optimal output of any head that has not found the target yet); 600 of them
  give ~2,800 (state, action) rows, about the brief's 3,600.
* Budget: up to 10 epochs of batch 32 per fit (~870 steps), patience 3, AdamW (weight decay 0.01), no
  warm-up/cosine schedule, no augmentation; encoder width 32 with a 16-channel stem (a quarter of width
  64's cost, the same probe localisation). The default takes up to about 180 s of one core (the issue
  allows OTTER that much), not 90: the fine-tuned arm back-propagates through the encoder for each of its
  3 encoder learning rates and 2 further seeds (most of the training time), and a fair choice of that lr
  is what the review asked for; 3 seeds, because one decides nothing (held-out success spread 0.43-0.85
  over seeds in the session-3 audit).
"""

from __future__ import annotations

import copy
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
from models.common import verdicts as V
from models.common.evidence import record_fit
from models.common.lightning import fit
from models.common.selection import BestWeights, early_stopping_callbacks, grid, learns_task, select_on_validation
from models.common.units import unit_labels

from . import data as tabletop
from . import plots
from .config import Config
from .networks import AllTokensPolicy, CLIPEncoder, OtterPolicy, load_clip_weights
from .training import EARLY_STOPPING_METRIC, BehaviourCloning, ContrastivePretraining, train_loader, validation_loader

ARMS = ("method", "finetuned", "baseline")
# The negative control: OTTER's head, at the method's chosen lr and budget, on a frozen encoder whose
# vision-language pretraining was removed (the same architecture, randomly initialised). Without the alignment
# the text-aware selection has nothing to select with, so it must not reach the held-out success bar.
CONTROL = "control_unaligned"
CONTROL_ENCODER_SEED = 7919  # the untrained encoder's initialisation, an offset from cfg.seed
COVERS = ("behaviour-cloning seed (head initialisation, batch order)",)
LEARNS_TASK_SUCCESS = 0.5  # seen-target success every arm must reach: a majority of episodes (random policy ~0.05)
METHOD_SEEN_SUCCESS = 0.8  # brief: OTTER's seen success
PROBE_LOCALISATION = 0.9  # brief: word->patch argmax localisation on held-out targets
TIE_BREAK_L1 = 1e-3  # selection score = validation success - 1e-3 x validation L1 (L1 < 2: breaks ties only)


def grid_size(cfg: Config) -> int:
    return cfg.data.image_size // cfg.data.encoder.patch


# ----------------------------------------------------------------------------- prepare


def build_encoder(cfg: Config) -> CLIPEncoder:
    e = cfg.data.encoder
    return CLIPEncoder(
        image_size=cfg.data.image_size,
        patch=e.patch,
        width=e.width,
        layers=e.layers,
        heads=e.width // e.head_width,
        embed_dim=e.embed_dim,
        stem_channels=e.stem_channels,
        vocab=len(tabletop.WORDS),
        context=2,
    )


def pretrain_encoder(cfg: Config, scenes: dict[str, np.ndarray]) -> tuple[CLIPEncoder, list[dict]]:
    torch.manual_seed(cfg.seed)
    encoder = build_encoder(cfg)
    p = cfg.data.pretrain
    tensors = tuple(torch.from_numpy(scenes[k]) for k in ("images", "patch", "pairs"))
    loader = train_loader(tensors, p.batch_size, cfg.seed)
    records = fit(
        ContrastivePretraining(encoder, p.lr, p.tau),
        loader,
        max_epochs=math.ceil(p.steps / len(loader)),
        max_steps=p.steps,
        seed=cfg.seed,
        variant="pretrain",
        log_every_n_steps=max(1, p.steps // 30),
    )
    return encoder.eval(), records


def prepare(cfg: Config, data_dir: Path) -> DatasetRef:
    d = cfg.data
    grid = grid_size(cfg)
    rng = np.random.default_rng(cfg.seed)
    pretraining = tabletop.make_pretraining(rng, d.n_pretrain, d.image_size, grid)
    demo_scenes = tabletop.make_scenes(rng, d.n_demos, d.image_size, grid, d.split, heldout=False)
    val_scenes = tabletop.make_scenes(rng, d.n_val, d.image_size, grid, d.split, heldout=False)
    episodes = {
        split: tabletop.make_scenes(rng, d.n_eval, d.image_size, grid, d.split, heldout=split == "heldout")
        for split in ("seen", "heldout")
    }
    np.savez_compressed(data_dir / "pretrain.npz", **pretraining)
    np.savez_compressed(data_dir / "demos.npz", **tabletop.make_demos(demo_scenes, d.demo_steps, d.step_size, grid))
    np.savez_compressed(data_dir / "val_scenes.npz", **val_scenes)
    np.savez_compressed(data_dir / "val_demos.npz", **tabletop.make_demos(val_scenes, d.demo_steps, d.step_size, grid))
    for split, scenes in episodes.items():
        np.savez_compressed(data_dir / f"episodes_{split}.npz", **scenes)
    encoder, records = pretrain_encoder(cfg, pretraining)
    torch.save(encoder.state_dict(), data_dir / "encoder.pt")
    (data_dir / "pretrain_history.json").write_text(json.dumps(records))
    provenance = (
        f"models.otter.data synthetic tabletop ({d.image_size} px, 4 colours x 4 shapes, split '{d.split}', "
        f"seed {cfg.seed}) + grounded contrastive pretraining of the tiny CLIP-layout encoder "
        f"({d.pretrain.steps} steps)"
    )
    if cfg.clip_weights:
        provenance += f"; the policies use CLIP weights from data/{cfg.clip_weights}"
    return write_manifest(
        data_dir,
        meta={
            **dataset_meta("synthetic", provenance),
            "generator": "models.otter.data (synthetic tabletop) + grounded contrastive pretraining",
            "synthetic": True,
            "split": d.split,
            "n_pretrain": d.n_pretrain,
            "n_demo_pairs": int(np.load(data_dir / "demos.npz")["actions"].shape[0]),
            "n_val_scenes": d.n_val,
            "n_eval_per_split": d.n_eval,
            "pretrain_final_loss": records[-1].get("train/loss", float("nan")) if records else float("nan"),
        },
    )


def load_npz(data: DatasetRef, name: str) -> dict[str, np.ndarray]:
    with np.load(data.file(name)) as f:
        return {k: f[k] for k in f.files}


def load_encoder(cfg: Config, data: DatasetRef | None) -> CLIPEncoder:
    """The VL encoder: real CLIP weights if configured, else the one pretrained in prepare (None: untrained)."""
    if cfg.clip_weights:
        return load_clip_weights(user_data_path(cfg.clip_weights), cfg.clip_head_width, cfg.clip_word_ids)
    encoder = build_encoder(cfg)
    if data is not None:
        encoder.load_state_dict(torch.load(data.file("encoder.pt"), weights_only=True))
    return encoder.eval()


# ----------------------------------------------------------------------------- behaviour cloning


def build_policy(cfg: Config, arm: str, encoder: CLIPEncoder) -> torch.nn.Module:
    if arm == "baseline":
        b = cfg.baseline
        return AllTokensPolicy(encoder, frozen=True, d_model=b.d_model, layers=b.layers, hidden=b.hidden, heads=b.heads)
    p = cfg.policy
    return OtterPolicy(
        encoder,
        frozen=arm in ("method", CONTROL),
        tau=p.tau,
        learn_tau=p.learn_tau,
        tau_min=p.tau_min,
        d_model=p.d_model,
        layers=p.layers,
        hidden=p.hidden,
    )


@torch.no_grad()
def encoder_features(encoder: CLIPEncoder, images: torch.Tensor, tokens: torch.Tensor, chunk: int = 512):
    patches = torch.cat([encoder.encode_patches(images[i : i + chunk]) for i in range(0, len(images), chunk)])
    return patches, encoder.encode_words(tokens)


@dataclass
class CloningData:
    """What every fit reads: the demonstrations (raw, and as frozen-encoder features), the seen-target
    validation demonstrations and episodes, and the pretrained encoder each fit starts from."""

    encoder: CLIPEncoder
    train_raw: tuple[torch.Tensor, ...]  # images, tokens, proprio, actions
    train_features: tuple[torch.Tensor, ...]  # patches, words, proprio, actions
    val_raw: tuple[torch.Tensor, ...]
    val_features: tuple[torch.Tensor, ...]
    val_scenes: dict[str, np.ndarray]


def load_cloning_data(cfg: Config, data: DatasetRef, encoder: CLIPEncoder | None = None) -> CloningData:
    """The cloning data as seen through ``encoder`` (default: the pretrained one)."""
    encoder = load_encoder(cfg, data) if encoder is None else encoder

    def tensors(name: str) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        demos = load_npz(data, name)
        images, tokens, proprio, actions = (
            torch.from_numpy(demos[k]) for k in ("images", "tokens", "proprio", "actions")
        )
        return (images, tokens, proprio, actions), (*encoder_features(encoder, images, tokens), proprio, actions)

    train_raw, train_features = tensors("demos.npz")
    val_raw, val_features = tensors("val_demos.npz")
    return CloningData(encoder, train_raw, train_features, val_raw, val_features, load_npz(data, "val_scenes.npz"))


@dataclass
class Fitted:
    policy: torch.nn.Module
    records: list[dict[str, float]]
    best: BestWeights  # best validation L1 and its epoch
    val_success: float  # closed-loop success on the seen-target validation episodes (best epoch's weights)


def arm_grid(cfg: Config, arm: str, method_lr: float | None = None) -> list[dict]:
    """The declared selection grid of an arm: the head lr; for the fine-tuned arm the encoder lr, its head (the
    frozen arm's head) at the lr chosen for the frozen arm (``method_lr``)."""
    if arm == "finetuned":
        if method_lr is None:
            raise ValueError("the fine-tuned arm's grid needs the head lr chosen for the frozen OTTER arm")
        return grid(lr=(method_lr,), encoder_lr=cfg.bc.encoder_lr_grid)
    return grid(lr=cfg.bc.lr_grid)


def fit_arm(cfg: Config, bc: CloningData, arm: str, point: dict, seed: int, unit: str = "") -> tuple[float, Fitted]:
    """Train one arm at one grid point and seed, stopping early on the seen-target validation L1; the
    selection score is the closed-loop seen-target validation success (ties: lower L1). With ``unit`` the fit
    is a compared one (recorded for the verdict diagnostics)."""
    torch.manual_seed(seed)  # identical head initialisation for every arm and grid point of a seed
    policy = build_policy(cfg, arm, copy.deepcopy(bc.encoder))
    train_tensors, val_tensors = (bc.train_features, bc.val_features) if policy.frozen else (bc.train_raw, bc.val_raw)
    callbacks = early_stopping_callbacks(
        EARLY_STOPPING_METRIC, cfg.bc.patience, mode="min", arm=arm if unit else "", unit=unit
    )
    settings = ", ".join(f"{k}={v:g}" for k, v in point.items())
    module = BehaviourCloning(policy, point["lr"], point.get("encoder_lr", 0.0), cfg.bc.weight_decay)
    records = fit(
        module,
        train_loader(train_tensors, cfg.bc.batch_size, seed),
        validation_loader(val_tensors),
        max_epochs=cfg.bc.max_epochs,
        seed=seed,
        variant=f"{arm} ({settings}), seed {seed}",
        gradient_clip_val=cfg.bc.grad_clip,
        callbacks=callbacks,
    )
    best = callbacks[-1]
    policy.eval()
    val_success = success_rate(cfg, policy, bc.val_scenes)
    val_l1 = best.best if best.best is not None else math.nan
    return val_success - TIE_BREAK_L1 * val_l1, Fitted(policy, records, best, val_success)


def history_key(arm: str, seed_index: int) -> str:
    return arm if seed_index == 0 else f"{arm}_seed{seed_index}"


def weights_file(model_dir: Path, arm: str, seed_index: int) -> Path:
    return Path(model_dir) / f"{arm}_seed{seed_index}.pt"


def record_pretraining(records: list[dict[str, float]], window: int = 5) -> None:
    """Record the encoder's contrastive pretraining (a fixed step schedule, shared by every arm) for the verdict
    diagnostics: its best point is the minimum of the training loss smoothed over ``window`` logged steps (the
    per-batch loss is too noisy for its raw minimum to say whether the loss still falls)."""
    losses = np.array([r["train/loss"] for r in records if "train/loss" in r], dtype=float)
    if len(losses) == 0:
        return
    smoothed = np.convolve(losses, np.ones(window) / window, mode="valid") if len(losses) >= window else losses
    best = int(np.argmin(smoothed)) + (len(losses) - len(smoothed))  # index of the window's last logged step
    record_fit("encoder_pretraining", "", best, len(losses), stopped_early=False, patience=None)


def train(cfg: Config, data: DatasetRef, out_dir: Path) -> TrainedArtifacts:
    bc = load_cloning_data(cfg, data)
    history: dict[str, list[dict[str, float]]] = {
        "pretrain": json.loads(data.file("pretrain_history.json").read_text())
    }
    if not cfg.clip_weights:  # the pretrained encoder is part of what decides the verdict
        record_pretraining(history["pretrain"])
    summary: dict[str, float] = {}
    selections = {}
    units = unit_labels("seed", cfg.n_seeds)
    for arm in ARMS:
        trials: list[dict] = []

        def fit_and_score(point: dict, arm: str = arm) -> tuple[float, Fitted]:
            score, fitted = fit_arm(cfg, bc, arm, point, cfg.seed)
            best_l1 = fitted.best.best if fitted.best.best is not None else math.nan
            trials.append(
                {**point, "val_success": fitted.val_success, "val_l1": best_l1, "best_epoch": fitted.best.best_epoch}
            )
            return score, fitted

        points = arm_grid(cfg, arm, selections.get("method", {}).get("chosen", {}).get("lr"))
        selection, first = select_on_validation(arm, points, fit_and_score, metric="score", unit=units[0])
        print(f"  selected {selection.describe()}", flush=True)
        first.best.record(arm, units[0])  # the chosen point's fit on the first seed is a compared one
        fits = [first] + [
            fit_arm(cfg, bc, arm, selection.chosen, cfg.seed + k, units[k])[1] for k in range(1, cfg.n_seeds)
        ]
        for k, fitted in enumerate(fits):
            torch.save(fitted.policy.state_dict(), weights_file(out_dir, arm, k))
            history[history_key(arm, k)] = fitted.records
            summary.update(fitted.best.summary(f"{arm}/seed{k}"))
            summary[f"select/{arm}/seed{k}/val_success"] = fitted.val_success
        summary.update(selection.summary())
        selections[arm] = {"chosen": selection.chosen, "table": trials}
    # The negative control: the method's chosen point on an encoder without its pretraining, every seed.
    torch.manual_seed(cfg.seed + CONTROL_ENCODER_SEED)
    unaligned = load_cloning_data(cfg, data, build_encoder(cfg).eval())
    for k in range(cfg.n_seeds):
        fitted = fit_arm(cfg, unaligned, CONTROL, selections["method"]["chosen"], cfg.seed + k)[1]
        torch.save(fitted.policy.state_dict(), weights_file(out_dir, CONTROL, k))
    (Path(out_dir) / "selection.json").write_text(json.dumps(selections, indent=1))
    return TrainedArtifacts(out_dir, history, summary)


def load_policy(cfg: Config, model_dir: Path, arm: str, seed_index: int = 0) -> torch.nn.Module:
    policy = build_policy(cfg, arm, load_encoder(cfg, None))
    policy.load_state_dict(torch.load(weights_file(model_dir, arm, seed_index), weights_only=True))
    return policy.eval()


def load_model(cfg: Config, model_dir: Path) -> OtterPolicy:
    """The registered model: the OTTER policy (frozen encoder inside), first seed."""
    return load_policy(cfg, model_dir, "method")


# ----------------------------------------------------------------------------- evaluation


@torch.no_grad()
def success_rate(cfg: Config, policy: torch.nn.Module, scenes: dict[str, np.ndarray]) -> float:
    """Closed-loop success rate of a policy from the scenes' start states."""
    d = cfg.data

    def act(images, tokens, agent, target):
        return policy(torch.from_numpy(images), torch.from_numpy(tokens), torch.from_numpy(agent.astype(np.float32)))

    reached = tabletop.rollout(
        lambda *args: act(*args).numpy(), scenes, grid_size(cfg), d.max_steps, d.step_size, d.success_radius
    )
    return float(reached.mean())


def scripted_success(cfg: Config, scenes: dict[str, np.ndarray], act) -> float:
    """Success of a scripted controller ``act(agent, target)`` (the expert, a random policy)."""
    d = cfg.data
    reached = tabletop.rollout(
        lambda images, tokens, agent, target: act(agent, target),
        scenes,
        grid_size(cfg),
        d.max_steps,
        d.step_size,
        d.success_radius,
    )
    return float(reached.mean())


def first_frames(scenes: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Each episode's first image and its instruction tokens."""
    return tabletop.draw_agent(scenes["background"], scenes["agent"]), tabletop.caption(scenes["pairs"][:, 0])


def target_patch(scenes: dict[str, np.ndarray], grid: int) -> np.ndarray:
    cells = scenes["cells"][:, 0]
    return cells[:, 0] * grid + cells[:, 1]


@torch.no_grad()
def selection_stats(policy: OtterPolicy, scenes: dict[str, np.ndarray], grid: int) -> dict[str, float]:
    """Where OTTER's per-word selection lands on the episodes' first frames: the attention mass on the target's
    patch (mean over words) and how often each word's argmax patch is the target's."""
    images, tokens = first_frames(scenes)
    _, _, weights = policy.select(torch.from_numpy(images), torch.from_numpy(tokens))
    target = torch.from_numpy(target_patch(scenes, grid))
    on_target = weights[torch.arange(len(target)), :, target]  # (S, k)
    hit = (weights.argmax(-1) == target[:, None]).float()
    return {
        "target_mass": float(on_target.mean()),
        "colour_word_hit": float(hit[:, 0].mean()),
        "shape_word_hit": float(hit[:, 1].mean()),
    }


@torch.no_grad()
def probe_localisation(encoder: CLIPEncoder, scenes: dict[str, np.ndarray], grid: int) -> float:
    """How often the argmax over patches of the mean word-patch cosine is the target's patch."""
    images, tokens = first_frames(scenes)
    patches = encoder.encode_patches(torch.from_numpy(images))
    words = encoder.encode_words(torch.from_numpy(tokens))
    best = (words.mean(1, keepdim=True) @ patches.transpose(1, 2))[:, 0].argmax(-1).numpy()
    return float(np.mean(best == target_patch(scenes, grid)))


def evaluate(cfg: Config, data: DatasetRef, artifacts: TrainedArtifacts, out_dir: Path) -> Metrics:
    d = cfg.data
    grid = grid_size(cfg)
    episodes = {s: load_npz(data, f"episodes_{s}.npz") for s in ("seen", "heldout")}
    demos = load_npz(data, "demos.npz")
    encoder = load_encoder(cfg, data)
    random_actions = np.random.default_rng(cfg.seed)
    values: dict[str, float] = {}
    for split, scenes in episodes.items():
        values[f"probe/localisation_{split}"] = probe_localisation(encoder, scenes, grid)
        values[f"expert/success_{split}"] = scripted_success(
            cfg, scenes, lambda a, t: tabletop.expert_action(a, t, d.step_size)
        )
        values[f"random/success_{split}"] = scripted_success(
            cfg, scenes, lambda a, t: random_actions.uniform(-1, 1, size=a.shape)
        )
    values["check/heldout_bc_targets"] = float(tabletop.is_heldout(demos["target_pair"], d.split).sum())
    reference = encoder.state_dict()
    metrics = Metrics({}, [])
    labels = unit_labels("seed", cfg.n_seeds)
    per_seed: dict[str, dict[str, list[float]]] = {arm: {"seen": [], "heldout": []} for arm in (*ARMS, CONTROL)}
    stats: dict[str, list[dict[str, float]]] = {}
    first_policies = {}
    for arm in (*ARMS, CONTROL):
        unchanged, taus = True, []
        for k in range(cfg.n_seeds):
            policy = load_policy(cfg, artifacts.model_dir, arm, k)
            first_policies.setdefault(arm, policy)
            for split, scenes in episodes.items():
                per_seed[arm][split].append(success_rate(cfg, policy, scenes))
                if isinstance(policy, OtterPolicy) and arm != CONTROL:
                    stats.setdefault(f"{arm}/{split}", []).append(selection_stats(policy, scenes, grid))
            unchanged &= all(torch.equal(v, policy.encoder.state_dict()[n]) for n, v in reference.items())
            if isinstance(policy, OtterPolicy):
                taus.append(float(policy.tau.detach()))
        seen, held = (np.array(per_seed[arm][split]) for split in ("seen", "heldout"))
        metrics.add_units("success_seen", arm, seen, labels)
        metrics.add_units("success_heldout", arm, held, labels)
        metrics.add_units("heldout_over_seen", arm, held / np.maximum(seen, 1e-9), labels)
        if taus:
            metrics.add_units("tau", arm, taus, labels)
        if arm != CONTROL:
            values[f"{arm}/encoder_unchanged"] = float(unchanged)
        for split, rates in per_seed[arm].items():
            values[f"{arm}/success_{split}"] = float(np.mean(rates))
        values[f"{arm}/heldout_over_seen"] = values[f"{arm}/success_heldout"] / max(values[f"{arm}/success_seen"], 1e-9)
    for key, rows in stats.items():  # selection statistics, means over seeds
        arm, split = key.split("/")
        for name in rows[0]:
            values[f"{arm}/selection_{name}_{split}"] = float(np.mean([r[name] for r in rows]))
    values.update({k: v for k, v in artifacts.summary.items() if k.startswith("select/")})
    selections = json.loads((Path(artifacts.model_dir) / "selection.json").read_text())
    plot_dir = Path(out_dir) / "plots"
    figures = [
        plots.plot_success({arm: per_seed[arm] for arm in ARMS}, plot_dir / "success.png"),
        selected_patches_figure(cfg, first_policies, episodes, plot_dir / "selected_patches.png"),
        plots.plot_curves(artifacts.history, list(ARMS), plot_dir / "learning_curves.png"),
        plots.plot_selection(
            {arm: s["table"] for arm, s in selections.items()},
            {arm: s["chosen"] for arm, s in selections.items()},
            plot_dir / "selection.png",
        ),
    ]
    metrics.values, metrics.figures = values, figures
    return metrics


@torch.no_grad()
def selected_patches_figure(
    cfg: Config, policies: dict, episodes: dict[str, dict[str, np.ndarray]], path: Path
) -> Path:
    """The per-word selection of the frozen and the fine-tuned OTTER on the first 3 seen and 3 held-out scenes."""
    grid = grid_size(cfg)
    shown = {k: np.concatenate([episodes[s][k][:3] for s in ("seen", "heldout")]) for k in episodes["seen"]}
    images, tokens = first_frames(shown)
    weights = {
        arm: policies[arm].select(torch.from_numpy(images), torch.from_numpy(tokens))[2].numpy()
        for arm in ("method", "finetuned")
    }
    words = [[tabletop.WORDS[t] for t in row] for row in tokens]
    captions = [f"{split}: {' '.join(w)}" for split, w in zip(["seen"] * 3 + ["held-out"] * 3, words)]
    return plots.plot_selected_patches(images, captions, target_patch(shown, grid), weights, words, grid, path)


# ----------------------------------------------------------------------------- claim


def claim(cfg: Config, metrics: Metrics) -> ClaimResult:
    """Four criteria over the paired behaviour-cloning seeds (every arm of a seed shares its head initialisation
    and batches), each a mean with its t-interval: OTTER's held-out success >= 0.5, OTTER - fine-tuned >= 0.2,
    OTTER - all-tokens >= 0.3 (held-out success), OTTER's held-out / seen success >= 0.8."""
    v = metrics.values
    held = metrics.paired("success_heldout", *ARMS, CONTROL)
    ratio = metrics.paired("heldout_over_seen", "method", CONTROL)

    tol = 1e-9  # success rates are counts / n: 0.6 >= 0.4 + 0.2 must hold despite float round-off
    units = f"paired BC seeds ({cfg.data.n_eval} episodes per split each)"
    criteria = [
        V.mean_criterion(
            "heldout_success",
            "OTTER (frozen encoder) success on held-out-colour targets",
            held["method"],
            0.5 - tol,
            ">=",
            units=units,
            covers=COVERS,
        ),
        V.difference_criterion(
            "vs_finetuned_heldout",
            "OTTER minus fine-tuned-encoder OTTER (encoder lr chosen on seen-target validation), held-out success",
            held["method"],
            held["finetuned"],
            0.2 - tol,
            ">=",
            units=units,
            covers=COVERS,
        ),
        V.difference_criterion(
            "vs_all_tokens_heldout",
            "OTTER minus the all-tokens frozen head, held-out success",
            held["method"],
            held["baseline"],
            0.3 - tol,
            ">=",
            units=units,
            covers=COVERS,
        ),
        V.mean_criterion(
            "heldout_over_seen",
            "OTTER's held-out / seen success (per seed)",
            ratio["method"],
            0.8 - tol,
            ">=",
            units=units,
            covers=COVERS,
        ),
    ]
    controls = [
        Control(
            "heldout_success",
            "the vision-language pretraining removed: OTTER's head (method's lr, same budget) on a frozen, "
            "randomly initialised encoder",
            V.mean_criterion(
                "heldout_success",
                "OTTER on an unaligned (untrained) frozen encoder, success on held-out-colour targets",
                held[CONTROL],
                0.5 - tol,
                ">=",
                units=units,
                covers=COVERS,
            ),
        )
    ]
    chance = v["random/success_heldout"]
    separations = [
        Separation("held-out success", {a: v[f"{a}/success_heldout"] for a in ARMS}, floor=chance, ceiling=1.0),
        Separation(
            "seen success", {a: v[f"{a}/success_seen"] for a in ARMS}, floor=v["random/success_seen"], ceiling=1.0
        ),
    ]
    figures: dict[str, float] = {}
    for arm in ARMS:
        for key in ("success_seen", "success_heldout", "heldout_over_seen"):
            figures[f"{arm}/{key}"] = v[f"{arm}/{key}"]
        for key in ("lr", "encoder_lr"):
            if f"select/{arm}/{key}" in v:
                figures[f"{arm}_chosen_{key}"] = v[f"select/{arm}/{key}"]
        best_epochs = [v.get(f"select/{arm}/seed{k}/best_epoch") for k in range(cfg.n_seeds)]
        if all(e is not None for e in best_epochs):
            figures[f"{arm}_mean_best_epoch"] = float(np.mean(best_epochs))
    for arm in ("method", "finetuned"):
        for key in ("selection_target_mass_seen", "selection_target_mass_heldout", "selection_colour_word_hit_heldout"):
            if f"{arm}/{key}" in v:
                figures[f"{arm}/{key}"] = v[f"{arm}/{key}"]
    figures["probe/localisation_heldout"] = v["probe/localisation_heldout"]
    figures["control_unaligned/success_heldout"] = v[f"{CONTROL}/success_heldout"]
    figures["control_unaligned/success_seen"] = v[f"{CONTROL}/success_seen"]
    figures["random/success_seen"] = v["random/success_seen"]
    figures["method_minus_finetuned_heldout"] = v["method/success_heldout"] - v["finetuned/success_heldout"]
    figures["method_minus_baseline_heldout"] = v["method/success_heldout"] - v["baseline/success_heldout"]

    sanity = {
        "expert_always_succeeds": v["expert/success_seen"] == 1.0 and v["expert/success_heldout"] == 1.0,
        "no_heldout_bc_targets": v["check/heldout_bc_targets"] == 0.0,
        "frozen_encoders_unchanged": v["method/encoder_unchanged"] == 1.0 and v["baseline/encoder_unchanged"] == 1.0,
    }
    if cfg.scale != Scale.smoke:  # a few smoke steps need not learn anything
        sanity[f"probe_localisation_heldout_ge_{PROBE_LOCALISATION:g}"] = (
            v["probe/localisation_heldout"] >= PROBE_LOCALISATION
        )
        sanity[f"method_seen_success_ge_{METHOD_SEEN_SUCCESS:g}"] = v["method/success_seen"] >= METHOD_SEEN_SUCCESS
        sanity["finetuned_encoder_changed"] = v["finetuned/encoder_unchanged"] == 0.0
        for arm in ARMS:
            check, passed = learns_task(arm, v[f"{arm}/success_seen"], LEARNS_TASK_SUCCESS)
            sanity[check] = passed
    chosen = "; ".join(
        f"{arm} lr {v[f'select/{arm}/lr']:g}"
        + (f", encoder lr {v[f'select/{arm}/encoder_lr']:g}" if f"select/{arm}/encoder_lr" in v else "")
        for arm in ARMS
        if f"select/{arm}/lr" in v
    )
    notes = (
        "seen / held-out success (means over seeds): "
        + "; ".join(
            f"{plots.LABELS[arm]} {v[f'{arm}/success_seen']:.2f} / {v[f'{arm}/success_heldout']:.2f}" for arm in ARMS
        )
        + f". Chosen on seen-target validation: {chosen}. Intervals are over the {cfg.n_seeds} seed(s)."
    )
    return ClaimResult(
        statement=(
            "On a frozen contrastively pretrained encoder, OTTER's text-aware selection generalises to an unseen "
            "target colour: held-out success >= 0.5, >= the fine-tuned-encoder OTTER + 0.2 and >= the all-tokens "
            "frozen head + 0.3, and >= 0.8 x its seen success "
            f"(every arm's learning rates chosen on seen-target validation; {cfg.n_seeds} seed(s), "
            f"{cfg.data.n_eval} episodes per split, split '{cfg.data.split}')"
        ),
        criteria=criteria,
        sanity=sanity,
        figures=figures,
        notes=notes,
        controls=controls,
        separations=separations,
    )
