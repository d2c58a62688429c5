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

Pipeline: ``prepare`` renders a synthetic tabletop (32 x 32 px, 3 objects from 4 colours x 4
shapes, a 2 x 2 agent, instruction "<colour> <shape>"), pretrains a tiny CLIP-layout encoder on
captioned scenes over all 16 pairs and saves it next to the data (DVC versions both), and writes
expert demonstrations (targets from seen pairs only) and fixed evaluation episodes. ``train`` runs
three behaviour-cloning arms on the same demonstrations, steps, batches and seeds:
  method     OTTER head, encoder frozen;
  finetuned  the same OTTER head with the encoder fine-tuned (lr 3e-4; heads 1e-3), the
             paper's "fine-tune the VLM" alternative;
  baseline   all-tokens head (64 patch tokens + PE, 2 word tokens, proprio, CLS readout through a
             transformer), encoder frozen: the "independent features" design OTTER argues against.
``evaluate`` rolls each policy out on seen and held-out targets and probes the encoder's
word->patch localisation. ``claim`` judges three criteria on held-out success, each with a 95 %
t-interval over the paired behaviour-cloning seeds: OTTER >= 0.5, OTTER - fine-tuned >= 0.2,
OTTER - all-tokens >= 0.3.

Deliberate deviations, and why:
* No CLIP weights, robot data or LIBERO exist offline: the encoder is a tiny CLIP-layout model
  (OpenAI parameter names, plus a 3x3 conv stem) pretrained with the brief's grounded region-word
  contrastive loss (the global FILIP-style loss did not converge at toy scale, brief). A loader for
  real OpenAI-layout CLIP state dicts (``clip_weights``, a path under data/) builds the same
  encoder interface and uses the ClearCLIP-style last-block attention output like the official code;
  the tiny encoder uses its ordinary output tokens, which its loss trained directly.
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
* Budget: 600 BC steps at batch 64, AdamW (weight decay 0.01), no warm-up/cosine schedule, no
  augmentation. 3 behaviour-cloning seeds at default and paper scale (the brief: "3 seeds for the
  claim"); a single seed decides nothing here: OTTER's held-out success was 0.60 / 0.43 / 0.85 on seeds
  0 / 1 / 2 against the fine-tuned arm's 0.41 / 0.35 / 0.19 (session-3 audit). This puts the default
  at ~3x the one-seed time (~4 min on 2 cores), over the project's 90 s target by decision.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from models.base import (
    ClaimResult,
    DatasetRef,
    Metrics,
    Scale,
    TrainedArtifacts,
    dataset_meta,
    user_data_path,
    write_manifest,
)
from models.common import plotting
from models.common import verdicts as V
from models.common.lightning import fit, set_threads

from . import data as tabletop
from .config import Config
from .networks import (
    AllTokensPolicy,
    CLIPEncoder,
    OtterPolicy,
    all_captions,
    grounded_contrastive_loss,
    load_clip_weights,
)

ARMS = ("method", "finetuned", "baseline")

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


class ContrastivePretraining(L.LightningModule):
    """The grounded region-word contrastive loss on captioned scenes; Adam."""

    def __init__(self, encoder: CLIPEncoder, cfg: Config) -> None:
        super().__init__()
        self.encoder, self.cfg = encoder, cfg.data.pretrain
        self.register_buffer("captions", all_captions(), persistent=False)

    def shared_step(self, batch, stage: str) -> torch.Tensor:
        images, patch, pairs = batch
        patches = self.encoder.encode_patches(images)
        words = self.encoder.encode_words(self.captions)
        loss, region, word = grounded_contrastive_loss(patches, words, patch, pairs, self.cfg.tau)
        train = stage == "train"
        self.log_dict(
            {f"{stage}/loss": loss, f"{stage}/region_loss": region, f"{stage}/word_loss": word},
            on_step=train,
            on_epoch=not train,
            batch_size=len(images),
        )
        return loss

    def training_step(self, batch, batch_idx):
        return self.shared_step(batch, "train")

    def configure_optimizers(self):
        return torch.optim.Adam(self.encoder.parameters(), lr=self.cfg.lr)


def pretrain_encoder(cfg: Config, scenes: dict[str, np.ndarray]) -> tuple[CLIPEncoder, list[dict]]:
    torch.manual_seed(cfg.seed)
    encoder = build_encoder(cfg)
    p = cfg.data.pretrain
    dataset = TensorDataset(
        torch.from_numpy(scenes["images"]), torch.from_numpy(scenes["patch"]), torch.from_numpy(scenes["pairs"])
    )
    loader = DataLoader(
        dataset, p.batch_size, shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(cfg.seed)
    )
    records = fit(
        ContrastivePretraining(encoder, cfg),
        loader,
        max_epochs=math.ceil(p.steps / len(loader)),
        max_steps=p.steps,
        seed=cfg.seed,
        variant="pretrain",
        log_every_n_steps=max(1, p.steps // 30),
    )
    return encoder.eval(), records


def prepare(cfg: Config, data_dir: Path) -> DatasetRef:
    set_threads()
    d = cfg.data
    grid = d.image_size // d.encoder.patch
    rng = np.random.default_rng(cfg.seed)
    pretraining = tabletop.make_pretraining(rng, d.n_pretrain, d.image_size, grid)
    demo_scenes = tabletop.make_scenes(rng, d.n_demos, d.image_size, grid, d.split, heldout=False)
    demos = tabletop.make_demos(demo_scenes, d.demo_steps, d.step_size, grid)
    episodes = {
        split: tabletop.make_scenes(rng, d.n_eval, d.image_size, grid, d.split, heldout=split == "heldout")
        for split in ("seen", "heldout")
    }
    np.savez_compressed(data_dir / "pretrain.npz", **pretraining)
    np.savez_compressed(data_dir / "demos.npz", **demos)
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
            "n_demo_pairs": len(demos["actions"]),
            "n_eval_per_split": d.n_eval,
            "pretrain_final_loss": records[-1].get("train/loss", float("nan")) if records else float("nan"),
        },
    )


def load_npz(data: DatasetRef, name: str) -> dict[str, np.ndarray]:
    with np.load(data.file(name)) as f:
        return {k: f[k] for k in f.files}


def load_encoder(cfg: Config, data: DatasetRef) -> CLIPEncoder:
    """The frozen VL encoder: real CLIP weights if configured, else the one pretrained in prepare."""
    if cfg.clip_weights:
        return load_clip_weights(user_data_path(cfg.clip_weights), cfg.clip_head_width, cfg.clip_word_ids)
    encoder = build_encoder(cfg)
    encoder.load_state_dict(torch.load(data.file("encoder.pt"), weights_only=True))
    return encoder.eval()


# ----------------------------------------------------------------------------- behaviour cloning


def build_policy(cfg: Config, arm: str, encoder: CLIPEncoder) -> torch.nn.Module:
    if arm == "baseline":
        b = cfg.baseline
        return AllTokensPolicy(encoder, frozen=True, d_model=b.d_model, layers=b.layers, hidden=b.hidden)
    p = cfg.policy
    return OtterPolicy(
        encoder,
        frozen=arm == "method",
        tau=p.tau,
        learn_tau=p.learn_tau,
        tau_min=p.tau_min,
        d_model=p.d_model,
        layers=p.layers,
        hidden=p.hidden,
    )


class BehaviourCloning(L.LightningModule):
    """L1 between predicted and expert actions (the official loss); AdamW, encoder at its own lr."""

    def __init__(self, policy: torch.nn.Module, cfg: Config) -> None:
        super().__init__()
        self.policy, self.cfg = policy, cfg.bc

    def shared_step(self, batch, stage: str) -> torch.Tensor:
        if self.policy.frozen:  # batches of precomputed (patch, word) features: the same maths, faster
            patches, words, proprio, actions = batch
            predicted = self.policy.act(patches, words, proprio)
        else:
            images, tokens, proprio, actions = batch
            predicted = self.policy(images, tokens, proprio)
        loss = F.l1_loss(predicted, actions)
        train = stage == "train"
        self.log(f"{stage}/l1", loss, on_step=train, on_epoch=not train, batch_size=len(actions))
        if train and isinstance(self.policy, OtterPolicy):
            self.log("train/tau", self.policy.tau.detach(), on_step=True, batch_size=len(actions))
        return loss

    def training_step(self, batch, batch_idx):
        return self.shared_step(batch, "train")

    def configure_optimizers(self):
        encoder = [p for p in self.policy.encoder.parameters() if p.requires_grad]
        ids = {id(p) for p in self.policy.encoder.parameters()}
        head = [p for p in self.policy.parameters() if p.requires_grad and id(p) not in ids]
        groups = []
        for params, lr in ((head, self.cfg.lr), (encoder, self.cfg.encoder_lr)):
            # OTTER's add_weight_decay: no decay on norms, biases and scalars (log_tau), i.e. tensors below 2-D
            decay, no_decay = [p for p in params if p.ndim >= 2], [p for p in params if p.ndim < 2]
            groups += [
                {"params": ps, "lr": lr, "weight_decay": wd}
                for ps, wd in ((decay, self.cfg.weight_decay), (no_decay, 0.0))
                if ps
            ]
        return torch.optim.AdamW(groups)


@torch.no_grad()
def encoder_features(encoder: CLIPEncoder, images: torch.Tensor, tokens: torch.Tensor, chunk: int = 512):
    patches = torch.cat([encoder.encode_patches(images[i : i + chunk]) for i in range(0, len(images), chunk)])
    return patches, encoder.encode_words(tokens)


def weights_file(model_dir: Path, arm: str, seed_index: int) -> Path:
    return Path(model_dir) / f"{arm}_seed{seed_index}.pt"


def train(cfg: Config, data: DatasetRef, out_dir: Path) -> TrainedArtifacts:
    set_threads()
    demos = load_npz(data, "demos.npz")
    images, tokens, proprio, actions = (torch.from_numpy(demos[k]) for k in ("images", "tokens", "proprio", "actions"))
    frozen_features = encoder_features(load_encoder(cfg, data), images, tokens)  # the frozen arms never change them
    history: dict[str, list[dict[str, float]]] = {
        "pretrain": json.loads(data.file("pretrain_history.json").read_text())
    }
    summary: dict[str, float] = {}
    steps = cfg.bc.steps
    for k in range(cfg.n_seeds):
        seed = cfg.seed + k
        for arm in ARMS:
            torch.manual_seed(seed)  # same head init streams and the same batches for every arm
            policy = build_policy(cfg, arm, load_encoder(cfg, data))
            dataset = (
                TensorDataset(*frozen_features, proprio, actions)
                if policy.frozen
                else TensorDataset(images, tokens, proprio, actions)
            )
            loader = DataLoader(
                dataset, cfg.bc.batch_size, shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(seed)
            )
            name = arm if k == 0 else f"{arm}_seed{k}"
            records = fit(
                BehaviourCloning(policy, cfg),
                loader,
                max_epochs=math.ceil(steps / len(loader)),
                max_steps=steps,
                seed=seed,
                variant=name,
                gradient_clip_val=cfg.bc.grad_clip,
                log_every_n_steps=max(1, steps // 30),
            )
            torch.save(policy.state_dict(), weights_file(out_dir, arm, k))
            history[name] = records
            l1 = [r["train/l1"] for r in records if "train/l1" in r]
            summary[f"{name}/final_l1"] = float(np.mean(l1[-5:])) if l1 else float("nan")
    return TrainedArtifacts(out_dir, history, summary)


def load_policy(
    cfg: Config, model_dir: Path, arm: str, seed_index: int = 0, data: DatasetRef | None = None
) -> torch.nn.Module:
    encoder = (
        build_encoder(cfg)
        if not cfg.clip_weights
        else load_clip_weights(user_data_path(cfg.clip_weights), cfg.clip_head_width, cfg.clip_word_ids)
    )
    policy = build_policy(cfg, arm, encoder)
    policy.load_state_dict(torch.load(weights_file(model_dir, arm, seed_index), weights_only=True))
    return policy.eval()


def load_model(cfg: Config, model_dir: Path) -> OtterPolicy:
    """The registered model: the OTTER policy (frozen encoder inside), first seed."""
    return load_policy(cfg, model_dir, "method")


# ----------------------------------------------------------------------------- evaluation


@torch.no_grad()
def rollout(cfg: Config, policy: torch.nn.Module, scenes: dict[str, np.ndarray], act=None) -> np.ndarray:
    """Closed-loop episodes (all in one batch); returns per-episode success (reached within the radius)."""
    d = cfg.data
    grid = d.image_size // d.encoder.patch
    agent = scenes["agent"].copy()
    target = tabletop.cell_centre(scenes["cells"][:, 0], grid)
    tokens = torch.from_numpy(tabletop.caption(scenes["pairs"][:, 0]))
    reached = np.zeros(len(agent), bool)
    for _ in range(d.max_steps):
        if act is None:
            images = torch.from_numpy(tabletop.draw_agent(scenes["background"], agent))
            action = policy(images, tokens, torch.from_numpy(agent.astype(np.float32))).numpy()
        else:
            action = act(agent, target)
        agent = np.where(reached[:, None], agent, tabletop.step(agent, action, d.step_size))
        reached |= np.linalg.norm(agent - target, axis=1) <= d.success_radius
    return reached


@torch.no_grad()
def probe_localisation(encoder: CLIPEncoder, scenes: dict[str, np.ndarray], grid: int) -> float:
    """How often the argmax over patches of the mean word-patch cosine is the target's patch."""
    images = torch.from_numpy(tabletop.draw_agent(scenes["background"], scenes["agent"]))
    patches = encoder.encode_patches(images)
    words = encoder.encode_words(torch.from_numpy(tabletop.caption(scenes["pairs"][:, 0])))
    best = (words.mean(1, keepdim=True) @ patches.transpose(1, 2))[:, 0].argmax(-1).numpy()
    cells = scenes["cells"][:, 0]
    return float(np.mean(best == cells[:, 0] * grid + cells[:, 1]))


def evaluate(cfg: Config, data: DatasetRef, artifacts: TrainedArtifacts, out_dir: Path) -> Metrics:
    set_threads()
    d = cfg.data
    grid = d.image_size // d.encoder.patch
    episodes = {s: load_npz(data, f"episodes_{s}.npz") for s in ("seen", "heldout")}
    demos = load_npz(data, "demos.npz")
    encoder = load_encoder(cfg, data)
    values: dict[str, float] = {}
    for split, scenes in episodes.items():
        values[f"probe/localisation_{split}"] = probe_localisation(encoder, scenes, grid)
        values[f"expert/success_{split}"] = float(
            rollout(cfg, None, scenes, act=lambda a, t: tabletop.expert_action(a, t, d.step_size)).mean()
        )
    values["check/heldout_bc_targets"] = float(tabletop.is_heldout(demos["target_pair"], d.split).sum())
    reference = encoder.state_dict()
    per_arm: dict[str, dict[str, list[float]]] = {arm: {"seen": [], "heldout": []} for arm in ARMS}
    policies = {}
    for k in range(cfg.n_seeds):
        for arm in ARMS:
            policy = load_policy(cfg, artifacts.model_dir, arm, k)
            policies.setdefault(arm, policy)
            for split, scenes in episodes.items():
                per_arm[arm][split].append(float(rollout(cfg, policy, scenes).mean()))
            unchanged = all(torch.equal(v, policy.encoder.state_dict()[n]) for n, v in reference.items())
            values[f"{arm}/encoder_unchanged"] = min(values.get(f"{arm}/encoder_unchanged", 1.0), float(unchanged))
            if isinstance(policy, OtterPolicy):
                values[f"{arm}/tau"] = float(policy.tau.detach())
    for arm, splits in per_arm.items():
        for split, rates in splits.items():
            values[f"{arm}/success_{split}"] = float(np.mean(rates))
            for k, rate in enumerate(rates):  # the claim's paired units: every arm shares seed k's init and batches
                values[f"{arm}/seed{k}/success_{split}"] = rate
        name = arm
        values[f"{arm}/final_l1"] = float(artifacts.summary.get(f"{name}/final_l1", float("nan")))
    figures = [
        plot_success(values, out_dir / "plots" / "success.png"),
        plot_attention(policies["method"], episodes, out_dir / "plots" / "attention.png"),
        plot_curves(artifacts.history, out_dir / "plots" / "learning_curves.png"),
    ]
    return Metrics(values, figures)


def plot_success(values: dict[str, float], path: Path) -> Path:
    plt = plotting.pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    labels = {"method": "OTTER (frozen)", "finetuned": "OTTER (encoder fine-tuned)", "baseline": "all tokens (frozen)"}
    x = np.arange(len(ARMS))
    for i, split in enumerate(("seen", "heldout")):
        ax.bar(x + (i - 0.5) * 0.38, [values[f"{a}/success_{split}"] for a in ARMS], 0.38, label=f"{split} targets")
    ax.set_xticks(x, [labels[a] for a in ARMS], fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("closed-loop success rate")
    ax.legend()
    ax.set_title("Reaching the instructed object")
    return plotting.save(fig, path)


@torch.no_grad()
def plot_attention(policy: OtterPolicy, episodes: dict[str, dict[str, np.ndarray]], path: Path) -> Path:
    """Scenes with OTTER's per-word attention over the patches (seen and held-out targets)."""
    plt = plotting.pyplot()
    fig, axes = plt.subplots(2, 3, figsize=(7, 4.8))
    grid = policy.encoder.grid
    for row, split in enumerate(("seen", "heldout")):
        scenes = episodes[split]
        image = tabletop.draw_agent(scenes["background"][:1], scenes["agent"][:1])
        tokens = tabletop.caption(scenes["pairs"][:1, 0])
        _, _, weights = policy.select(torch.from_numpy(image), torch.from_numpy(tokens))
        axes[row, 0].imshow(image[0])
        axes[row, 0].set_title(f"{split}: " + " ".join(tabletop.WORDS[t] for t in tokens[0]), fontsize=8)
        for j in range(2):
            axes[row, j + 1].imshow(weights[0, j].reshape(grid, grid).numpy(), cmap="magma")
            axes[row, j + 1].set_title(f"attention of '{tabletop.WORDS[tokens[0, j]]}'", fontsize=8)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    return plotting.save(fig, path)


def plot_curves(history: dict[str, list[dict[str, float]]], path: Path) -> Path:
    plt = plotting.pyplot()
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(8, 3.2))
    pre = [r for r in history.get("pretrain", []) if "train/loss" in r]
    ax0.plot([r["step"] for r in pre], [r["train/loss"] for r in pre])
    ax0.set(title="contrastive pretraining", xlabel="step", ylabel="grounded loss")
    for arm in ARMS:
        rec = [r for r in history.get(arm, []) if "train/l1" in r]
        ax1.plot([r["step"] for r in rec], [r["train/l1"] for r in rec], label=arm)
    ax1.set(title="behaviour cloning", xlabel="step", ylabel="L1")
    ax1.legend(fontsize=8)
    return plotting.save(fig, path)


# ----------------------------------------------------------------------------- claim


def claim(cfg: Config, metrics: Metrics) -> ClaimResult:
    """Three criteria on held-out-target success, each a mean over the paired behaviour-cloning seeds (every arm
    shares seed k's head initialisation and batches) with its t-interval: OTTER >= 0.5, OTTER - fine-tuned-encoder
    OTTER >= 0.2, OTTER - all-tokens head >= 0.3."""
    v = metrics.values
    a_held, a_seen = v["method/success_heldout"], v["method/success_seen"]
    b_held, c_held = v["finetuned/success_heldout"], v["baseline/success_heldout"]
    figures = {
        k: v[k]
        for k in (
            "method/success_seen",
            "method/success_heldout",
            "finetuned/success_seen",
            "finetuned/success_heldout",
            "baseline/success_seen",
            "baseline/success_heldout",
            "probe/localisation_seen",
            "probe/localisation_heldout",
            "method/tau",
        )
    }
    figures["method_minus_finetuned_heldout"] = a_held - b_held
    figures["method_minus_baseline_heldout"] = a_held - c_held
    sanity = {
        "expert_always_succeeds": v["expert/success_seen"] == 1.0 and v["expert/success_heldout"] == 1.0,
        "no_heldout_bc_targets": v["check/heldout_bc_targets"] == 0.0,
        "frozen_encoders_unchanged": v["method/encoder_unchanged"] == 1.0 and v["baseline/encoder_unchanged"] == 1.0,
    }
    if cfg.scale == Scale.default:
        sanity["probe_localisation_heldout_ge_0.9"] = v["probe/localisation_heldout"] >= 0.9
        sanity["method_seen_success_ge_0.8"] = a_seen >= 0.8
        sanity["finetuned_encoder_changed"] = v["finetuned/encoder_unchanged"] == 0.0

    def per_seed(arm: str) -> list[float]:
        return [v[f"{arm}/seed{k}/success_heldout"] for k in range(cfg.n_seeds)]

    tol = 1e-9  # success rates are counts / n: 0.6 >= 0.4 + 0.2 must hold despite float round-off
    units = f"paired BC seeds ({cfg.data.n_eval} held-out episodes each)"
    criteria = [
        V.mean_criterion(
            "heldout_success",
            "OTTER (frozen encoder) held-out-target success",
            per_seed("method"),
            0.5 - tol,
            ">=",
            units=units,
        ),
        V.difference_criterion(
            "vs_finetuned_heldout",
            "OTTER minus fine-tuned-encoder OTTER, held-out-target success",
            per_seed("method"),
            per_seed("finetuned"),
            0.2 - tol,
            ">=",
            units=units,
        ),
        V.difference_criterion(
            "vs_all_tokens_heldout",
            "OTTER minus the all-tokens frozen head, held-out-target success",
            per_seed("method"),
            per_seed("baseline"),
            0.3 - tol,
            ">=",
            units=units,
        ),
    ]
    return ClaimResult(
        statement=(
            "Held-out-target success of OTTER on the frozen encoder >= 0.5, >= the fine-tuned-encoder "
            "OTTER + 0.2 and >= the all-tokens frozen head + 0.3 "
            f"({cfg.n_seeds} seed(s), {cfg.data.n_eval} episodes per split, split '{cfg.data.split}')"
        ),
        criteria=criteria,
        sanity=sanity,
        figures=figures,
        notes=f"OTTER seen {a_seen:.2f} / held-out {a_held:.2f}; fine-tuned {v['finetuned/success_seen']:.2f} / {b_held:.2f}; "
        f"all-tokens {v['baseline/success_seen']:.2f} / {c_held:.2f} (means over {cfg.n_seeds} seed(s)); "
        "intervals are over the seeds, not the episodes (seed-to-seed spread dominates the episode noise)",
    )
