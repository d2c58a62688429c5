"""Figures of the noise-robustness study; each takes plain arrays and returns the saved PNG's path.

``results`` below is ``pipeline.evaluate_arms``'s output: per arm, per-seed lists/arrays of
``acc_clean``, ``acc_cells`` (seeds x cells), ``noise_gain``, the bounds, ``layer_norms`` and
``features`` (seeds x residual-stream states).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.common import plotting

LABELS = {
    "baseline": "plain BNN",
    "baseline_spectral": "spectral penalty",
    "method": "L1,inf, every layer (paper)",
    "ablation_alpha_only": "L1,inf on alpha only",
}
COLORS = {
    "baseline": "tab:gray",
    "baseline_spectral": "tab:blue",
    "method": "tab:red",
    "ablation_alpha_only": "tab:orange",
}


def plot_noise_robustness(cells: list[tuple[str, float]], results: dict, path: Path) -> Path:
    """Test accuracy against noise level, one panel per noise kind (level 0 = clean), mean +- std over seeds."""
    plt = plotting.pyplot()
    kinds = list(dict.fromkeys(kind for kind, _ in cells))
    fig, axes = plt.subplots(1, len(kinds), figsize=(3.3 * len(kinds), 3.0), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        columns = [c for c, (k, _) in enumerate(cells) if k == kind]
        levels = [0.0] + [cells[c][1] for c in columns]
        for arm, rows in results.items():
            curve = np.column_stack([rows["acc_clean"], np.asarray(rows["acc_cells"])[:, columns]])
            ax.errorbar(levels, curve.mean(0), yerr=curve.std(0), marker="o", ms=3, capsize=2, color=COLORS[arm])
            ax.plot([], [], color=COLORS[arm], label=LABELS[arm])
        ax.axhspan(0.6, 0.95, color="tab:green", alpha=0.06)
        ax.set_title(f"ECG5000 test: {kind} noise", fontsize=9)
        ax.set_xlabel("noise level (x signal std)")
        ax.set_ylabel("accuracy")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7)
    return plotting.save(fig, path)


def plot_bounds(results: dict, path: Path) -> Path:
    """Per arm: computed l_inf bounds (log scale) and the measured noise gain, mean over seeds."""
    plt = plotting.pyplot()
    panels = {
        "bound_network": "relaxed-network l_inf bound",
        "bound_binary": "prod ||alpha B||_{1,inf} (binary layers)",
        "bound_spectral": "prod ||M_l||_2 (l2 proxy)",
        "noise_gain": "empirical noise gain",
    }
    fig, axes = plt.subplots(1, len(panels), figsize=(3.3 * len(panels), 3.2))
    arms = list(results)
    for ax, (key, title) in zip(axes, panels.items()):
        values = np.array([results[arm][key] for arm in arms])  # (arms, seeds)
        ax.bar(range(len(arms)), values.mean(1), yerr=values.std(1), color=[COLORS[a] for a in arms], capsize=2)
        ax.set_xticks(range(len(arms)), [LABELS[a] for a in arms], rotation=25, ha="right", fontsize=7)
        if key.startswith("bound"):
            ax.set_yscale("log")
        ax.set_title(title, fontsize=9)
    return plotting.save(fig, path)


def plot_layer_norms(results: dict, path: Path) -> Path:
    """||M_l||_{1,inf} of every layer (stem, binary layers, head) per arm: which layers a penalty reaches."""
    plt = plotting.pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    for arm, rows in results.items():
        norms = np.asarray(rows["layer_norms"])  # (seeds, layers)
        ax.errorbar(range(norms.shape[1]), norms.mean(0), yerr=norms.std(0), marker="o", capsize=2, color=COLORS[arm])
        ax.plot([], [], color=COLORS[arm], label=LABELS[arm])
    n_layers = np.asarray(next(iter(results.values()))["layer_norms"]).shape[1]
    ax.set_xticks(range(n_layers), ["stem", *[f"binary {i + 1}" for i in range(n_layers - 2)], "head"], fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("||M_l||_{1,inf}")
    ax.set_title("Effective-weight L1,inf norm per layer (mean over seeds)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return plotting.save(fig, path)


def plot_feature_perturbation(results: dict, path: Path) -> Path:
    """Mean |h(x+e) - h(x)| along the residual stream, averaged over noise cells and seeds."""
    plt = plotting.pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    for arm, rows in results.items():
        features = np.asarray(rows["features"])
        ax.plot(features.mean(0), marker="o", color=COLORS[arm], label=LABELS[arm])
    ax.set_xlabel("residual stream after layer (0 = stem)")
    ax.set_ylabel("mean |h(x+e) - h(x)|")
    ax.set_title("Feature perturbation under test noise", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return plotting.save(fig, path)


def plot_learning_curves(history: dict, arms: list[str], path: Path) -> Path:
    """Training cross-entropy and validation noisy accuracy of each arm's first seed (chosen grid point)."""
    plt = plotting.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.0))
    for arm in arms:
        records = history.get(arm, [])
        for ax, key in zip(axes, ("train/ce", "val/acc_noisy")):
            points = [(r["epoch"], r[key]) for r in records if key in r and "epoch" in r]
            if points:
                ax.plot(*zip(*points), marker=".", color=COLORS[arm], label=LABELS[arm])
            ax.set_title(f"first seed: {key}", fontsize=9)
            ax.set_xlabel("epoch")
    axes[1].legend(fontsize=7)
    return plotting.save(fig, path)


def plot_selection(tables: dict[str, list[dict]], chosen: dict[str, dict], path: Path) -> Path:
    """Validation score of every grid point of every arm (first seed), the chosen one ringed."""
    plt = plotting.pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 3.2))
    ticks = []
    for arm, table in tables.items():
        for point in table:
            x = len(ticks)
            settings = {k: v for k, v in point.items() if not k.startswith("val_")}
            score = next(v for k, v in point.items() if k.startswith("val_"))
            ax.bar(x, score, color=COLORS[arm])
            if settings == chosen[arm]:
                ax.plot(x, score, "ko", mfc="none", ms=9)
            ticks.append(f"{LABELS[arm]}\n" + ", ".join(f"{k}={v:g}" for k, v in settings.items()))
    ax.set_xticks(range(len(ticks)), ticks, rotation=90, fontsize=5)
    low = min(next(v for k, v in p.items() if k.startswith("val_")) for t in tables.values() for p in t)
    ax.set_ylim(max(0.0, low - 0.05), 1.0)
    ax.set_ylabel("validation noisy accuracy")
    ax.set_title("Grid selection on validation (ringed: chosen)", fontsize=9)
    return plotting.save(fig, path)


def plot_ecg_noise(beat: np.ndarray, noisy: dict[str, np.ndarray], label: str, path: Path) -> Path:
    """One test beat, clean and under each noise kind at its highest level."""
    plt = plotting.pyplot()
    fig, axes = plt.subplots(len(noisy), 1, figsize=(7, 1.4 * len(noisy) + 0.5), sharex=True, squeeze=False)
    for ax, (name, x_noisy) in zip(axes[:, 0], noisy.items()):
        ax.plot(x_noisy, color="tab:orange", lw=0.8, label=name)
        ax.plot(beat, color="k", lw=0.8, label="clean")
        ax.legend(fontsize=7, loc="upper right")
    axes[0, 0].set_title(f"Test heartbeat (class {label}) under each environmental noise", fontsize=9)
    axes[-1, 0].set_xlabel("sample")
    return plotting.save(fig, path)
