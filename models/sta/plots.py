"""Figures of the STA reproduction: learning curves, denoising loss against density, samples, block classes."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from models.common import plotting

from .masks import Canvas, counts_of_mask, same_reach_token_window, sta_token_mask, swa_token_mask

COLORS = {
    "pretrain": "k",
    "dense_pretrained": "k",
    "baseline": "tab:gray",
    "method": "tab:red",
    "ablation_tile": "tab:purple",
    "sta_zero_shot": "tab:orange",
    "tile_zero_shot": "plum",
    "swa_zero_shot": "tab:blue",
}
LABELS = {
    "pretrain": "dense pre-training",
    "dense_pretrained": "dense (pre-trained)",
    "baseline": "dense, fine-tuned",
    "method": "STA, fine-tuned",
    "ablation_tile": "tile-only window, fine-tuned",
    "sta_zero_shot": "STA, training-free",
    "tile_zero_shot": "tile-only, training-free",
    "swa_zero_shot": "token SWA, training-free",
}


def plot_training(cfg, history: dict, path: Path) -> Path:
    """Train and validation loss of the pre-training and of every arm's fine-tunes (one line per seed)."""
    plt = plotting.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    labelled = set()
    for name, records in history.items():
        arm = name.split("/")[0]
        offset = 0 if arm == "pretrain" else cfg.train.dense_steps
        label = None if arm in labelled else LABELS.get(arm, arm)
        labelled.add(arm)
        steps = [(r["step"] + offset, r["train/loss"]) for r in records if "train/loss" in r]
        if steps:
            xs, ys = np.array(steps).T
            width = max(1, len(ys) // 20)
            smooth = np.convolve(ys, np.ones(width) / width, mode="valid")
            axes[0].plot(xs[width - 1 :], smooth, color=COLORS.get(arm, "k"), lw=0.8, label=label)
        val = [(r["step"] + offset, r["val/loss"]) for r in records if "val/loss" in r]
        if val:
            axes[1].plot(*np.array(val).T, marker="o", ms=3, lw=0.8, color=COLORS.get(arm, "k"), label=label)
    for ax, title in zip(axes, ("train loss (running mean)", "validation loss (fixed noise)")):
        ax.set_xlabel("step")
        ax.set_yscale("log")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
        ax.axvline(cfg.train.dense_steps, color="k", lw=0.5, ls=":")
    axes[1].legend(fontsize=7)
    return plotting.save(fig, path)


def plot_losses(cfg, extras: dict, path: Path) -> Path:
    """Left: test loss per flow time (fine-tuned arms: mean over seeds). Right: loss against density, the
    training-free window sweep and the fine-tuned arms with their range over seeds."""
    plt = plotting.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for name, curve in extras["curves"].items():
        axes[0].plot(cfg.eval.loss_times, curve, marker="o", ms=3, color=COLORS[name], label=LABELS[name])
    axes[0].set_xlabel("flow time t (0 = data, 1 = noise)")
    axes[0].set_ylabel("test MSE of the x_0 estimate")
    axes[0].set_yscale("log")
    axes[0].legend(fontsize=6)
    axes[0].set_title("Denoising loss per noise level", fontsize=9)
    for window, dens, loss in extras["sweep"]:
        axes[1].scatter(dens, loss, color="tab:orange", s=12)
        axes[1].annotate("x".join(map(str, window)), (dens, loss), fontsize=6)
    for arm, (dens, per_seed) in extras["finetuned"].items():
        per_seed = np.asarray(per_seed)
        axes[1].errorbar(
            dens,
            per_seed.mean(),
            yerr=[[per_seed.mean() - per_seed.min()], [per_seed.max() - per_seed.mean()]],
            fmt="s",
            color=COLORS[arm],
            label=f"{LABELS[arm]} ({len(per_seed)} seeds)",
        )
    axes[1].axhline(float(extras["curves"]["dense_pretrained"].mean()), color="k", ls="--", lw=0.8, label="dense")
    axes[1].set_xscale("log")
    axes[1].set_xlabel("attention density (log)")
    axes[1].set_ylabel("test denoising loss (mean over t)")
    axes[1].set_title("Training-free windows (orange) and fine-tuned arms", fontsize=9)
    axes[1].legend(fontsize=6)
    axes[1].grid(alpha=0.3)
    return plotting.save(fig, path)


def _to_image(video: torch.Tensor, frames: int) -> np.ndarray:
    """(C, F, S, S) in [-1, 1] -> (S, frames * S, 3) image strip."""
    v = ((video[:, :frames] + 1) / 2).clamp(0, 1)
    if v.shape[0] == 1:
        v = v.expand(3, -1, -1, -1)
    elif v.shape[0] == 2:
        v = torch.cat([v, v[:1]])
    return v.permute(2, 1, 3, 0).reshape(v.shape[2], -1, 3).numpy()


def plot_samples(cfg, extras: dict, path: Path) -> Path:
    plt = plotting.pyplot()
    rows = [("test videos", extras["test"])] + [(LABELS[n], s) for n, s in extras["samples"].items()]
    n_videos = min(3, len(extras["test"]))
    fig, axes = plt.subplots(len(rows), n_videos, figsize=(3.2 * n_videos, 0.9 * len(rows) + 0.4), squeeze=False)
    for r, (label, videos) in enumerate(rows):
        for c in range(n_videos):
            axes[r, c].imshow(_to_image(videos[c], cfg.data.frames), interpolation="nearest")
            axes[r, c].set_xticks([])
            axes[r, c].set_yticks([])
        axes[r, 0].set_ylabel(label, fontsize=6, rotation=0, ha="right", va="center")
    axes[0, 0].set_title("frames left to right; sample rows share their initial noise", fontsize=8, loc="left")
    return plotting.save(fig, path)


def plot_block_counts(cases: list, values: dict, path: Path) -> Path:
    """Fraction of full / partial / skipped tile blocks of STA and same-reach token SWA per canvas."""
    plt = plotting.pyplot()
    names = [name for name, _, _ in cases]
    fig, axes = plt.subplots(1, len(names), figsize=(2.4 * len(names), 3.2), squeeze=False)
    for ax, name in zip(axes[0], names):
        p = f"sparsity/{name}/"
        bottom = np.zeros(2)
        total = np.array(
            [sum(values[p + f"{m}_{q}_blocks"] for q in ("full", "partial", "skipped")) for m in ("sta", "swa")]
        )
        for part, color in (("full", "tab:green"), ("partial", "tab:red"), ("skipped", "lightgray")):
            heights = np.array([values[p + f"{m}_{part}_blocks"] for m in ("sta", "swa")], dtype=float) / total
            ax.bar([0, 1], heights, bottom=bottom, color=color, label=part)
            bottom += heights
        ax.set_xticks([0, 1], ["STA", "token\nSWA"])
        ax.set_title(f"{name}\nideal x{values[p + 'sta_ideal_speedup']:.1f}", fontsize=7)
    axes[0, 0].set_ylabel("fraction of tile blocks")
    axes[0, -1].legend(fontsize=7, loc="upper right")
    return plotting.save(fig, path)


def plot_block_maps(name: str, canvas: Canvas, window, path: Path) -> Path:
    """Block classes (full / partial / skipped) of STA vs token SWA of the same reach on one small canvas."""
    plt = plotting.pyplot()
    from matplotlib.colors import ListedColormap

    s = canvas.tile_tokens
    fig, axes = plt.subplots(1, 2, figsize=(8, 4))
    masks = {
        "STA": sta_token_mask(canvas, window),
        "token SWA": swa_token_mask(canvas, same_reach_token_window(canvas, window)),
    }
    for ax, (label, mask) in zip(axes, masks.items()):
        per_block = mask.reshape(canvas.n_tiles, s, canvas.n_tiles, s).sum((1, 3))
        classes = torch.where(per_block == s * s, 2, torch.where(per_block > 0, 1, 0)).numpy()
        ax.imshow(
            classes,
            cmap=ListedColormap(["whitesmoke", "tab:red", "tab:green"]),
            vmin=0,
            vmax=2,
            interpolation="nearest",
        )
        counts = counts_of_mask(mask, s)
        ax.set_title(f"{label}: {counts.full} full, {counts.partial} mixed\n(density {counts.density:.3f})", fontsize=9)
        ax.set_xlabel("key tile")
        ax.set_ylabel("query tile")
    fig.suptitle(f"{name}: canvas {canvas.size}, tile {canvas.tile}, window {window} tiles", fontsize=9)
    return plotting.save(fig, path)


def small_case(cases: list) -> tuple:
    """The first accounting case small enough for an explicit token mask (<= 4096 tokens)."""
    return next(((n, c, w) for n, c, w in cases if math.prod(c.size) <= 4096), cases[0])
