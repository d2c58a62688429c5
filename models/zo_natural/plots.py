"""Figures: learning curves against chip queries and wall clock, the lr selection, queries to the target."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.common.plotting import pyplot, save

LABELS = {"method": "ZO-natural (Fisher)", "baseline": "ZO-I (isotropic)"}
COLORS = {"method": "C0", "baseline": "C1"}


def plot_curves(curves: dict, twin_acc: float, targets: dict[int, float], path: Path) -> Path:
    """Chip validation accuracy and loss and training loss against queries, training loss against seconds.

    ``curves[variant][seed]`` holds the per-evaluation arrays ``queries``, ``seconds``, ``val/acc``,
    ``val/loss``, ``trainset/loss`` (runs stop at different epochs, so each seed is drawn on its own)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 4, figsize=(19, 4))
    panels = (
        ("val/acc", "queries", "chip validation accuracy"),
        ("val/loss", "queries", "chip validation loss (early stopping)"),
        ("trainset/loss", "queries", "chip training loss (dotted: the seed's target)"),
        ("trainset/loss", "seconds", "chip training loss vs wall clock"),
    )
    for variant, per_seed in curves.items():
        for i, c in enumerate(per_seed.values()):
            for ax, (key, x_key, title) in zip(axes, panels):
                ax.plot(c[x_key], c[key], color=COLORS[variant], alpha=0.8, label=LABELS[variant] if i == 0 else None)
                ax.set_title(title)
                ax.set_xlabel("seconds" if x_key == "seconds" else "chip queries (parameter settings x minibatches)")
    for level in targets.values():
        if np.isfinite(level):
            axes[2].axhline(level, color="grey", ls=":", lw=1)
    axes[0].axhline(twin_acc, color="grey", ls="--", label="ideal twin after BP (mean over seeds)")
    axes[0].legend()
    fig.suptitle(f"ZO training of a deficient chip after BP on its twin ({len(targets)} seeds, chosen lr each)")
    return save(fig, path)


def plot_lr_selection(lr_grid, table: dict[str, list[dict]], chosen: dict[str, float], path: Path) -> Path:
    """Validation loss (mean over seeds) of each grid point per arm, the chosen lr marked."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for variant, rows in table.items():
        lrs = [row["lr"] for row in rows]
        ax.plot(lrs, [row["val_loss"] for row in rows], "o-", color=COLORS[variant], label=LABELS[variant])
        best = next(row for row in rows if row["lr"] == chosen[variant])
        ax.plot([best["lr"]], [best["val_loss"]], "*", ms=14, color=COLORS[variant])
    ax.set_xscale("log")
    ax.set_xticks(list(lr_grid))
    ax.set_xlabel("learning rate (star: chosen)")
    ax.set_ylabel("best chip validation loss (mean over seeds)")
    ax.legend()
    return save(fig, path)


def plot_queries_to_target(seeds: list[int], queries: dict[str, list[float]], budget: float, path: Path) -> Path:
    """Per seed: the queries each arm needs to reach the seed's target training loss."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4))
    x = np.arange(len(seeds))
    width = 0.38
    for offset, (variant, values) in zip((-width / 2, width / 2), queries.items()):
        ax.bar(x + offset, values, width, color=COLORS[variant], label=LABELS[variant])
    ax.axhline(budget, color="grey", ls="--", label="query budget (max epochs)")
    ax.set_xticks(x, [f"seed {s}" for s in seeds])
    ax.set_ylabel("chip queries to the target training loss")
    ax.legend()
    return save(fig, path)
