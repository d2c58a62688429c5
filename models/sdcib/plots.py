"""SDCIB figures: scores per arm, PCA of the representations, layer-wise k-means ACC, learning curves.

Every title names the data set (``dataset``), so a figure of the synthetic set says so.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.common import plotting
from models.common.verdicts import t_interval

LABELS = {
    "method": "SDCIB (every layer)",
    "baseline": "last layer only",
    "baseline_no_ib": "no IB (alpha = 0)",
    "baseline_kmeans": "k-means (concat)",
}
COLORS = {"method": "tab:red", "baseline": "tab:blue", "baseline_no_ib": "tab:green", "baseline_kmeans": "tab:gray"}


def pca_2d(x: np.ndarray) -> np.ndarray:
    """Projection on the top-2 principal axes (eigenvectors of the d x d covariance: cheap for N >> d)."""
    x = x - x.mean(axis=0)
    _, vectors = np.linalg.eigh(x.T @ x)
    return x @ vectors[:, -1:-3:-1]


def plot_scores(per_seed: dict, dataset: str, path: Path) -> Path:
    """Test ACC / NMI / ARI per arm: mean with its 95 % t-interval over seeds, dots = seeds."""
    plt = plotting.pyplot()
    names = ("acc", "nmi", "ari")
    prefixes = list(per_seed)
    width = 0.8 / len(prefixes)
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    for i, prefix in enumerate(prefixes):
        xs = np.arange(len(names)) + (i - (len(prefixes) - 1) / 2) * width
        seeds = [np.asarray(per_seed[prefix][n]) for n in names]
        means = np.array([s.mean() for s in seeds])
        bounds = [t_interval(s) if len(s) > 1 else (s.mean(), s.mean(), s.mean()) for s in seeds]
        errors = np.array([[m - lo for m, lo, _ in bounds], [hi - m for m, _, hi in bounds]])
        ax.bar(xs, means, width, yerr=errors, capsize=3, color=COLORS[prefix], label=LABELS[prefix])
        for x, s in zip(xs, seeds):
            ax.scatter(np.full(len(s), x), s, color="k", s=6, zorder=3)
    ax.set_xticks(range(len(names)), [n.upper() for n in names])
    ax.set_ylim(0, 1)
    ax.set_ylabel("test score (mean, 95 % t-interval; dots = seeds)")
    ax.set_title(f"Multi-modal clustering: {dataset}", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(axis="y", alpha=0.3)
    return plotting.save(fig, path)


def plot_embeddings(
    raw: np.ndarray, embeddings: dict, labels: np.ndarray, kmeans_acc: float, dataset: str, path: Path
) -> Path:
    plt = plotting.pyplot()
    panels = [("k-means input: standardised concatenated views", raw, kmeans_acc)]
    panels += [(f"{LABELS[p]}: last-layer mu (seed 0)", emb, acc) for p, (emb, acc) in embeddings.items()]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.0 * len(panels), 3.8), squeeze=False)
    for ax, (title, x, acc) in zip(axes[0], panels):
        xy = pca_2d(x)
        ax.scatter(xy[:, 0], xy[:, 1], c=labels, cmap="tab10", s=4, alpha=0.7)
        ax.set_title(f"{title}\ntest ACC {acc:.3f}", fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(f"PCA of the representations, coloured by true class ({dataset})", fontsize=9)
    return plotting.save(fig, path)


def plot_layerwise(layerwise: dict, kmeans_acc: float, dataset: str, path: Path) -> Path:
    plt = plotting.pyplot()
    fig, ax = plt.subplots(figsize=(5.0, 3.4))
    for prefix, accs in layerwise.items():
        ax.plot(range(1, len(accs) + 1), accs, marker="o", color=COLORS[prefix], label=LABELS[prefix])
    ax.axhline(kmeans_acc, color=COLORS["baseline_kmeans"], ls="--", label=LABELS["baseline_kmeans"])
    ax.set_xlabel("encoder layer k")
    ax.set_ylabel("k-means test ACC on mu_k (views concatenated)")
    ax.set_title(f"How cluster-friendly each layer's code is (seed 0; {dataset})", fontsize=8)
    ax.set_xticks(range(1, len(next(iter(layerwise.values()))) + 1))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return plotting.save(fig, path)


def plot_learning_curves(curves: dict, per_term: dict, dataset: str, path: Path) -> Path:
    """Seed 0's chosen fit per arm: loss parts per (view, layer) term, so arms with 1 and with all
    layers compare; validation ACC (what early stopping reads) with the best epoch marked."""
    plt = plotting.pyplot()
    keys = ("train/loss", "train/instance", "train/mi", "val/acc")
    titles = ("total loss", "instance NT-Xent per layer", "I_JSD(h; c) per critic", "validation ACC")
    fig, axes = plt.subplots(1, len(keys), figsize=(3.3 * len(keys), 3.0))
    for prefix, records in curves.items():
        for ax, key in zip(axes, keys):
            scale = per_term[prefix].get(key, 1.0)
            pts = [(r["epoch"], r[key] * scale) for r in records if key in r]
            if pts and scale != 0.0:
                ax.plot(*zip(*pts), marker=".", color=COLORS[prefix], label=LABELS[prefix])
                if key == "val/acc":
                    best = max(pts, key=lambda p: p[1])
                    ax.scatter([best[0]], [best[1]], s=60, facecolors="none", edgecolors=COLORS[prefix])
    axes[2].axhline(-2 * np.log(2), color="k", ls=":", lw=1, label="critic at chance")
    for ax, title in zip(axes, titles):
        ax.set_title(f"{title} (seed 0)", fontsize=9)
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
    axes[2].legend(fontsize=7)
    axes[-1].legend(fontsize=7)
    fig.suptitle(dataset, fontsize=9)
    return plotting.save(fig, path)
