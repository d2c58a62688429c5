"""Figures of the Score-Fusion study; each takes plain values and returns the saved PNG's path.

Arm names are the metric prefixes of ``pipeline``: ``method`` (Score-Fusion), ``ablation_residual_only``,
``baseline`` (merge), ``baseline_tpdm``, ``baseline_axial`` / ``_coronal`` / ``_sagittal`` (one 2-D model).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from models.common import plotting

from .networks import AXIS_NAMES

LABELS = {
    "method": "Score-Fusion",
    "ablation_residual_only": "residual-only fusion",
    "baseline": "merge (mean of 2-D)",
    "baseline_tpdm": "TPDM",
    "baseline_axial": "2-D axial only",
    "baseline_coronal": "2-D coronal only",
    "baseline_sagittal": "2-D sagittal only",
    "reference_gaussian_prior": "data-free Gaussian",
    "control_untrained_fusion": "control: untrained fusion (= merge)",
}
COLORS = {
    "method": "tab:red",
    "ablation_residual_only": "tab:orange",
    "baseline": "tab:blue",
    "baseline_tpdm": "tab:purple",
    "baseline_axial": "tab:gray",
    "reference_gaussian_prior": "black",
}
FUSION_ARMS = ("method", "ablation_residual_only")


def central_slices(volume: torch.Tensor) -> list[np.ndarray]:
    d, h, w = volume.shape
    vol = volume.detach().cpu().numpy()
    return [vol[d // 2], vol[:, h // 2], vol[:, :, w // 2]]


def plot_orthogonal_slices(volumes: dict[str, torch.Tensor], psnr_db: dict[str, float], path: Path) -> Path:
    """Rows: central axial / coronal / sagittal slices; columns: input, samplers, truth, |error| maps.
    ``psnr_db``: this volume's PSNR per sampler (SAMPLERS' names) and of the LR input ("lr")."""
    plt = plotting.pyplot()
    truth = volumes["ground truth"]
    errors = {
        "|merge - truth|": (volumes["merge"] - truth).abs(),
        "|residual-only - truth|": (volumes["residual-only"] - truth).abs(),
        "|Score-Fusion - truth|": (volumes["Score-Fusion"] - truth).abs(),
    }
    columns = {**volumes, **errors}
    fig, axes = plt.subplots(3, len(columns), figsize=(1.8 * len(columns), 6.0), squeeze=False)
    vmax_err = max(float(e.max()) for e in errors.values()) or 1.0
    keys = {
        "LR input (nearest up)": "lr",
        "TPDM": "baseline_tpdm",
        "merge": "baseline",
        "residual-only": "ablation_residual_only",
        "Score-Fusion": "method",
    }
    for col, (title, vol) in enumerate(columns.items()):
        is_err = title.startswith("|")
        for row, img in enumerate(central_slices(vol)):
            ax = axes[row, col]
            ax.imshow(
                img,
                cmap="magma" if is_err else "gray",
                vmin=0 if is_err else -1,
                vmax=vmax_err if is_err else 1,
                interpolation="nearest",
            )
            ax.set_xticks([])
            ax.set_yticks([])
            if col == 0:
                ax.set_ylabel(AXIS_NAMES[row], fontsize=8)
        extra = f"\nPSNR {psnr_db[keys[title]]:.2f} dB" if title in keys else ""
        axes[0, col].set_title(title + extra, fontsize=7)
    fig.suptitle("test volume 0, seed 0: central orthogonal slices (DDIM samples)", fontsize=9)
    return plotting.save(fig, path)


def _curve(records: list[dict], key: str) -> list[tuple[float, float]]:
    return [(r["epoch"], r[key]) for r in records if key in r and "epoch" in r]


def plot_training_curves(history: dict, n_seeds: int, path: Path) -> Path:
    """The three 2-D models (first seed) and both fusion arms on every seed: validation eps-MSE, and the
    ratio to merge on the same fixed validation draws."""
    plt = plotting.pyplot()
    fig, axes = plt.subplots(1, 5, figsize=(17, 3.1))
    for ax, name in zip(axes[:3], AXIS_NAMES):
        records = history.get(f"baseline_2d_{name}", [])
        for key, style in (("train/loss", "-"), ("val/loss", "--")):
            pts = _curve(records, key)
            if pts:
                ax.plot(*zip(*pts), style, marker=".", label=key)
        ax.set_title(f"2-D {name} model: eps MSE", fontsize=8)
        ax.set_yscale("log")
    for k in range(n_seeds):
        for arm in FUSION_ARMS:
            records = history.get(arm if k == 0 else f"{arm}_seed{k}", [])
            pts = _curve(records, "val/eps_mse")
            merge = _curve(records, "val/merge_eps_mse")
            label = LABELS[arm] if k == 0 else None
            if pts:
                axes[3].plot(*zip(*pts), marker=".", color=COLORS[arm], alpha=0.8, label=label)
            if pts and merge:
                ratio = [a / b for (_, a), (_, b) in zip(pts, merge)]
                axes[4].plot([e for e, _ in pts], ratio, marker=".", color=COLORS[arm], label=label)
    axes[3].set_title("fusion arms: validation eps MSE (all seeds)", fontsize=8)
    axes[4].axhline(1.0, color=COLORS["baseline"], lw=1, label="merge (= fusion at init)")
    axes[4].set_title("validation eps MSE / merge's", fontsize=8)
    for ax in axes:
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    return plotting.save(fig, path)


def plot_eps_vs_t(steps: torch.Tensor, mse: dict, n_steps: int, threshold: float, path: Path, bins: int = 10) -> Path:
    """Test eps-MSE of every model against the diffusion step (first seed), and the fused / merge ratios."""
    plt = plotting.pyplot()
    edges = np.linspace(0, n_steps, bins + 1)
    centres = (edges[:-1] + edges[1:]) / 2
    which = np.clip(np.digitize(steps.numpy().ravel(), edges) - 1, 0, bins - 1)
    binned = {
        name: np.array([m.numpy().ravel()[which == b].mean() if (which == b).any() else np.nan for b in range(bins)])
        for name, m in mse.items()
    }
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(9.5, 3.3))
    for name, values in binned.items():
        ax.plot(
            centres, values, "-" if name in COLORS else "--", color=COLORS.get(name), marker=".", label=LABELS[name]
        )
    ax.set_yscale("log")
    ax.set_xlabel("diffusion step t")
    ax.set_ylabel("test eps MSE")
    ax.legend(fontsize=6)
    for arm in FUSION_ARMS:
        ax2.plot(centres, binned[arm] / binned["baseline"], color=COLORS[arm], marker=".", label=LABELS[arm])
    ax2.axhline(1.0, color=COLORS["baseline"], lw=1)
    ax2.axhline(threshold, color="gray", ls="--", lw=1, label=f"claim threshold {threshold}")
    ax2.set_xlabel("diffusion step t")
    ax2.set_ylabel("eps MSE / merge's")
    ax2.legend(fontsize=7)
    for a in (ax, ax2):
        a.grid(alpha=0.3)
    return plotting.save(fig, path)


def plot_seed_comparison(v: dict[str, float], n_seeds: int, threshold: float, path: Path) -> Path:
    """The claim's paired units: per seed, eps-MSE / merge's and PSNR - merge's of each fusion arm."""
    plt = plotting.pyplot()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(9, 3.2))
    seeds = np.arange(n_seeds)
    for i, arm in enumerate(FUSION_ARMS):
        ratio = [v[f"{arm}/seed{k}/eps_mse"] / v[f"baseline/seed{k}/eps_mse"] for k in seeds]
        gain = [v[f"{arm}/seed{k}/psnr"] - v[f"baseline/seed{k}/psnr"] for k in seeds]
        offset = (i - 0.5) * 0.15
        ax.plot(seeds + offset, ratio, "o", color=COLORS[arm], label=LABELS[arm])
        ax2.plot(seeds + offset, gain, "o", color=COLORS[arm], label=LABELS[arm])
    ax.axhline(1.0, color=COLORS["baseline"], lw=1, label="merge")
    ax.axhline(threshold, color="gray", ls="--", lw=1, label=f"claim threshold {threshold}")
    ax.set_ylabel("test eps MSE / merge's")
    ax2.axhline(0.0, color=COLORS["baseline"], lw=1, label="merge")
    ax2.set_ylabel("PSNR - merge's PSNR (dB)")
    for a in (ax, ax2):
        a.set_xticks(seeds)
        a.set_xlabel("paired seed")
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    return plotting.save(fig, path)


def plot_psnr_per_volume(per_seed: list[dict[str, np.ndarray]], path: Path) -> Path:
    """Per test volume, every sampler's PSNR minus merge's (one marker per seed; TPDM and the single 2-D
    model are sampled on the first seed only)."""
    plt = plotting.pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.2))
    markers = "os^vD<>"
    for k, psnrs in enumerate(per_seed):
        volumes = np.arange(len(psnrs["baseline"]))
        for name in (
            arm for arm in ("method", "ablation_residual_only", "baseline_tpdm", "baseline_axial") if arm in psnrs
        ):
            ax.plot(
                volumes,
                psnrs[name] - psnrs["baseline"],
                markers[k % len(markers)],
                ms=4,
                color=COLORS[name],
                alpha=0.7,
                label=LABELS[name] if k == 0 else None,
            )
    ax.axhline(0.0, color=COLORS["baseline"], lw=1)
    ax.set_xlabel("test volume")
    ax.set_ylabel("PSNR - merge's (dB)")
    ax.set_title("per-volume PSNR difference to merge (marker = seed)", fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return plotting.save(fig, path)


def plot_selection(selections: dict[str, dict], path: Path) -> Path:
    """Validation score against learning rate for every selected arm, the chosen point circled."""
    plt = plotting.pyplot()
    fig, axes = plt.subplots(1, len(selections), figsize=(3.4 * len(selections), 3.0), squeeze=False)
    for ax, (arm, selection) in zip(axes[0], selections.items()):
        table = selection["table"]
        metric = next(key for key in table[0] if key.startswith("val_"))
        lrs, scores = [row["lr"] for row in table], [row[metric] for row in table]
        ax.plot(lrs, scores, "o-", color=COLORS.get(arm, "tab:gray"))
        chosen = selection["chosen"]["lr"]
        ax.plot([chosen], [scores[lrs.index(chosen)]], "o", ms=12, mfc="none", color="black", label="chosen")
        ax.set_xscale("log")
        ax.set_xlabel("learning rate")
        ax.set_ylabel(f"validation {metric[4:]}")
        ax.set_title(LABELS.get(arm, "2-D models (axial; used for all 3)"), fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return plotting.save(fig, path)
