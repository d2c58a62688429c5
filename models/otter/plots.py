"""Figures of the OTTER study; each takes plain arrays and returns the saved PNG's path."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.common import plotting

LABELS = {"method": "OTTER (frozen)", "finetuned": "OTTER (encoder fine-tuned)", "baseline": "all tokens (frozen)"}
COLORS = {"method": "tab:red", "finetuned": "tab:blue", "baseline": "tab:gray"}


def plot_success(per_seed: dict[str, dict[str, list[float]]], path: Path) -> Path:
    """Closed-loop success on seen and held-out targets per arm: bars = mean over seeds, dots = seeds."""
    plt = plotting.pyplot()
    arms = list(per_seed)
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    x = np.arange(len(arms))
    for i, (split, hatch) in enumerate((("seen", ""), ("heldout", "//"))):
        offset = (i - 0.5) * 0.38
        means = [np.mean(per_seed[a][split]) for a in arms]
        ax.bar(x + offset, means, 0.38, color=[COLORS[a] for a in arms], alpha=0.75, hatch=hatch, edgecolor="k")
        for j, arm in enumerate(arms):
            rates = per_seed[arm][split]
            ax.scatter(np.full(len(rates), j + offset), rates, s=12, color="k", zorder=3)
            ratio = np.mean(per_seed[arm]["heldout"]) / max(np.mean(per_seed[arm]["seen"]), 1e-9)
            if i == 1:
                ax.text(j, 1.07, f"held-out/seen {ratio:.2f}", ha="center", fontsize=7)
    ax.bar([], [], color="w", edgecolor="k", label="seen targets")
    ax.bar([], [], color="w", edgecolor="k", hatch="//", label="held-out targets")
    ax.set_xticks(x, [LABELS[a] for a in arms], fontsize=8)
    ax.set_ylim(0, 1.15)
    ax.set_ylabel("closed-loop success rate")
    ax.legend(fontsize=7, loc="center right")
    ax.set_title("Reaching the instructed object (dots: behaviour-cloning seeds)", fontsize=9)
    return plotting.save(fig, path)


def plot_selected_patches(
    images: np.ndarray,
    captions: list[str],
    target_patch: np.ndarray,
    weights: dict[str, np.ndarray],
    words: list[list[str]],
    grid: int,
    path: Path,
) -> Path:
    """The patches each instruction word selects: column = a scene (its caption on top, target framed in green),
    one row per (arm, word) with the softmax(cos / tau) weights over the patches overlaid and the argmax
    patch framed in white.

    images (S, H, W, 3); target_patch (S,) patch index of the target; weights[arm] (S, k, N)."""
    plt = plotting.pyplot()
    from matplotlib.patches import Rectangle

    n_scenes = len(images)
    rows = [(None, None)] + [(arm, j) for arm in weights for j in range(weights[arm].shape[1])]
    fig, axes = plt.subplots(len(rows), n_scenes, figsize=(1.5 * n_scenes, 1.5 * len(rows)), squeeze=False)
    size = images.shape[1]
    cell = size / grid

    def frame(ax, patch: int, colour: str) -> None:
        row, col = divmod(int(patch), grid)
        ax.add_patch(Rectangle((col * cell - 0.5, row * cell - 0.5), cell, cell, fill=False, ec=colour, lw=1.5))

    for s in range(n_scenes):
        for r, (arm, j) in enumerate(rows):
            ax = axes[r, s]
            ax.imshow(images[s])
            if arm is None:
                frame(ax, target_patch[s], "lime")
                ax.set_title(captions[s], fontsize=7)
            else:
                w = weights[arm][s, j].reshape(grid, grid)
                ax.imshow(w, cmap="magma", alpha=0.7, extent=(-0.5, size - 0.5, size - 0.5, -0.5))
                frame(ax, w.argmax(), "white")
                frame(ax, target_patch[s], "lime")
                if s == 0:
                    ax.set_ylabel(f"OTTER {arm_tag(arm)}\n{('colour', 'shape')[j]} word", fontsize=7)
            ax.set_xticks([])
            ax.set_yticks([])
    fig.suptitle("Selected patches per word (white: argmax, green: target)", fontsize=9)
    return plotting.save(fig, path)


def arm_tag(arm: str) -> str:
    return {"method": "frozen", "finetuned": "fine-tuned"}.get(arm, arm)


def plot_curves(history: dict[str, list[dict[str, float]]], arms: list[str], path: Path) -> Path:
    """Pretraining loss, and behaviour-cloning train / validation L1 per epoch of each arm's first seed."""
    plt = plotting.pyplot()
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(8.5, 3.2))
    pre = [r for r in history.get("pretrain", []) if "train/loss" in r]
    ax0.plot([r["step"] for r in pre], [r["train/loss"] for r in pre])
    ax0.set(title="grounded contrastive pretraining", xlabel="step", ylabel="loss")
    for arm in arms:
        records = history.get(arm, [])
        for key, style in (("train/l1", "-"), ("val/l1", "--")):
            rows = [r for r in records if key in r]
            ax1.plot(range(1, len(rows) + 1), [r[key] for r in rows], style, color=COLORS[arm], marker=".")
        ax1.plot([], [], color=COLORS[arm], label=LABELS[arm])
    ax1.plot([], [], "k-", label="train")
    ax1.plot([], [], "k--", label="seen-target validation")
    ax1.set(title="behaviour cloning (first seed)", xlabel="epoch", ylabel="L1")
    ax1.legend(fontsize=7)
    return plotting.save(fig, path)


def plot_selection(tables: dict[str, list[dict]], chosen: dict[str, dict], path: Path) -> Path:
    """Every grid point's seen-target validation success per arm; the chosen point is starred."""
    plt = plotting.pyplot()
    fig, axes = plt.subplots(1, len(tables), figsize=(3.2 * len(tables), 3.0), squeeze=False)
    for ax, (arm, table) in zip(axes[0], tables.items()):
        labels = [", ".join(f"{k} {row[k]:g}" for k in chosen[arm]) for row in table]
        scores = [row["val_success"] for row in table]
        ax.barh(range(len(table)), scores, color=COLORS[arm], alpha=0.75)
        pick = next(i for i, row in enumerate(table) if all(row[k] == v for k, v in chosen[arm].items()))
        ax.plot(scores[pick], pick, "k*", ms=10)
        ax.set_yticks(range(len(table)), labels, fontsize=6)
        ax.set_xlim(0, 1.05)
        ax.set(title=LABELS[arm], xlabel="seen-target validation success")
    return plotting.save(fig, path)
