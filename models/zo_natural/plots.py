"""Figures: learning curves against chip queries and wall clock, the lr selection, queries to the target."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.common.plotting import pyplot, save

LABELS = {"method": "ZO-natural (Fisher)", "baseline": "ZO-I (isotropic)"}
COLORS = {"method": "C0", "baseline": "C1"}


def plot_curves(epochs: dict, steps: dict, twin_acc: float, targets: dict[int, float], path: Path) -> Path:
    """Chip validation accuracy and loss per epoch, and the whole training set's loss after every minibatch,
    against chip queries (the claim's curve; dotted: each seed's target), for the chosen lr of each arm.

    ``epochs[variant][seed]``: per-epoch arrays ``queries``, ``val/acc``, ``val/loss``; ``steps[variant][seed]``:
    ``(queries, training loss)`` after every minibatch (runs stop at different epochs: each seed drawn alone)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(16, 4))
    for variant, per_seed in epochs.items():
        for i, c in enumerate(per_seed.values()):
            label = LABELS[variant] if i == 0 else None
            axes[0].plot(c["queries"], c["val/acc"], color=COLORS[variant], alpha=0.8, label=label)
            axes[1].plot(c["queries"], c["val/loss"], color=COLORS[variant], alpha=0.8, label=label)
        for i, (queries, loss) in enumerate(steps[variant].values()):
            axes[2].plot(
                queries, loss, color=COLORS[variant], alpha=0.6, lw=0.8, label=LABELS[variant] if i == 0 else None
            )
    titles = (
        "chip validation accuracy",
        "chip validation loss (early stopping)",
        "chip training loss, every minibatch",
    )
    for ax, title in zip(axes, titles):
        ax.set_title(title)
        ax.set_xlabel("chip queries (parameter settings x minibatches)")
    for level in targets.values():
        if np.isfinite(level):
            axes[2].axhline(level, color="grey", ls=":", lw=1)
    axes[0].axhline(twin_acc, color="grey", ls="--", label="ideal twin after BP (mean over seeds)")
    axes[0].legend()
    axes[2].legend()
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
