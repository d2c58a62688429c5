"""Figures of FairICP: the loss-fairness frontier, the EO-test p-values over mu, learning curves,
and the marginals of the A-tilde copies."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.common.plotting import pyplot, save

LABELS = {"method": "FairICP (estimated q(y|a))", "baseline": "CRT / Fair Dummies", "oracle": "FairICP (true q(y|a))"}
COLOURS = {"method": "C0", "baseline": "C1", "oracle": "C2"}


def plot_frontier(points: dict[str, np.ndarray], loss_name: str, path: Path) -> Path:
    """Test loss vs KPC(Y_hat, A | Y) per arm: every split's mu-curve (thin) and the mean over splits (bold).

    ``points[variant]`` is [splits, mus, 2] (loss, kpc), mu = 0 first (the shared unconstrained predictor)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for variant, arr in points.items():
        for split in arr:
            ax.plot(split[:, 0], split[:, 1], color=COLOURS[variant], alpha=0.25, linewidth=0.8)
        mean = arr.mean(axis=0)
        ax.plot(mean[:, 0], mean[:, 1], color=COLOURS[variant], marker="o", linewidth=2, label=LABELS[variant])
    ax.set_xlabel(f"test {loss_name}")
    ax.set_ylabel("KPC(Y_hat, A | Y), 1-NN graph")
    ax.set_title("Loss-fairness frontier over the mu grid (lower-left is better)", fontsize=10)
    ax.legend(fontsize=8)
    return save(fig, path)


def plot_pvalues(mus: list[float], pvalues: dict[str, np.ndarray], path: Path) -> Path:
    """The EO-test p-value per split (dots) and its median (line) against mu, per arm."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for k, (variant, arr) in enumerate(pvalues.items()):  # arr [splits, mus]
        offset = (k - 1) * 0.008
        for j, mu in enumerate(mus):
            ax.scatter(np.full(arr.shape[0], mu + offset), arr[:, j], color=COLOURS[variant], s=12, alpha=0.5)
        ax.plot(
            np.array(mus) + offset, np.median(arr, axis=0), color=COLOURS[variant], marker="o", label=LABELS[variant]
        )
    ax.axhline(0.05, color="grey", linestyle="--", linewidth=1, label="0.05")
    ax.set_yscale("log")
    ax.set_xlabel("mu (weight of the adversary)")
    ax.set_ylabel("EO-test p-value (KPC-1NN, ICP copies)")
    ax.legend(fontsize=8)
    return save(fig, path)


def plot_curves(history: dict[str, list[dict[str, float]]], groups: list[str], path: Path) -> Path:
    """Validation selection score, KPC and prediction loss per epoch for the selected members."""
    plt = pyplot()
    keys = [("val/score", "validation score (1-mu) loss + mu KPC"), ("val/kpc", "validation KPC(Y_hat, A | Y)"),
            ("val/pred_loss", "validation prediction loss")]  # fmt: skip
    fig, axes = plt.subplots(1, len(keys), figsize=(13, 3.6))
    for ax, (key, title) in zip(axes, keys):
        for group in groups:
            curve = [(r.get("epoch", r["step"]), r[key]) for r in history.get(group, []) if key in r]
            if curve:
                ax.plot(*zip(*curve), label=group)
        ax.set_xlabel("epoch")
        ax.set_title(title, fontsize=10)
    axes[0].legend(fontsize=7)
    return save(fig, path)


def plot_copies(a: np.ndarray, y: np.ndarray, rows: np.ndarray, crt_draw: np.ndarray, path: Path) -> Path:
    """The first A coordinate of a test split: real, an ICP copy (a permutation: same marginal) and a CRT draw."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    bins = np.linspace(min(a[:, 0].min(), crt_draw[:, 0].min()), max(a[:, 0].max(), crt_draw[:, 0].max()), 40)
    ax.hist(a[:, 0], bins=bins, alpha=0.5, label="A (real)")
    ax.hist(a[rows, 0], bins=bins, histtype="step", linewidth=2, label="A-tilde, ICP")
    ax.hist(crt_draw[:, 0], bins=bins, histtype="step", linewidth=2, label="A-tilde, CRT")
    ax.set_xlabel("A_1 (test split)")
    ax.set_title(f"Copies of the attribute (corr(Y, A_1) = {np.corrcoef(y, a[:, 0])[0, 1]:.2f})", fontsize=10)
    ax.legend(fontsize=8)
    return save(fig, path)
