"""Figures of the Self-REF reproduction: routing curves, rejection ROC, calibration, learning curves."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.common import plotting

LABELS = {
    "method": "Self-REF c(x)",
    "baseline": "token prob (product)",
    "baseline_mean": "token prob (mean)",
    "finetuned_logits": "fine-tuned logits",
    "verbalized": "verbalised digit",
    "random": "random",
    "control_shuffled": "control: shuffled <CN>/<UN>",
}
COLORS = {
    "method": "tab:red",
    "baseline": "tab:blue",
    "baseline_mean": "tab:cyan",
    "finetuned_logits": "tab:green",
    "verbalized": "tab:orange",
    "random": "tab:gray",
    "control_shuffled": "tab:purple",
}


def plot_routing(result: dict, rates: np.ndarray, values: dict, path: Path) -> Path:
    plt = plotting.pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, curve in result["curves"].items():
        ax.plot(
            rates,
            curve,
            marker=".",
            color=COLORS[name],
            label=f"{LABELS[name]} (area {values[name + '/routing_auc']:.3f})",
        )
    ax.axhline(result["large_acc"], color="k", ls=":", lw=0.8, label="large model alone")
    ax.set_xlabel("routing rate (fraction sent to the large model)")
    ax.set_ylabel("system accuracy")
    ax.set_title("Accuracy vs routing rate (split C, first seed)", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return plotting.save(fig, path)


def plot_roc(result: dict, path: Path) -> Path:
    from sklearn.metrics import roc_curve

    plt = plotting.pyplot()
    fig, ax = plt.subplots(figsize=(4.6, 4.2))
    for name, (score, correct) in result["calibration"].items():
        if 0 < correct.mean() < 1:
            fpr, tpr, _ = roc_curve(correct, score)
            ax.plot(fpr, tpr, color=COLORS[name], label=f"{LABELS[name]} ({result['values'][name]['auroc']:.3f})")
    ax.plot([0, 1], [0, 1], "k:", lw=0.8)
    ax.set_xlabel("false positive rate (wrong answers accepted)")
    ax.set_ylabel("true positive rate (right answers accepted)")
    ax.set_title("Rejection ROC of each confidence (AUROC)", fontsize=9)
    ax.legend(fontsize=6)
    return plotting.save(fig, path)


def plot_calibration(result: dict, bins: int, path: Path) -> Path:
    plt = plotting.pyplot()
    names = [n for n in ("method", "baseline", "finetuned_logits", "verbalized") if n in result["calibration"]]
    fig, axes = plt.subplots(2, len(names), figsize=(3.0 * len(names), 5.4), squeeze=False)
    edges = np.linspace(0, 1, bins + 1)
    for j, name in enumerate(names):
        score, correct = result["calibration"][name]
        which = np.clip(np.digitize(score, edges[1:-1]), 0, bins - 1)
        centres = [score[which == b].mean() for b in range(bins) if (which == b).any()]
        accs = [correct[which == b].mean() for b in range(bins) if (which == b).any()]
        ax = axes[0, j]
        ax.plot([0, 1], [0, 1], "k:", lw=0.8)
        ax.plot(centres, accs, marker="o", color=COLORS[name])
        ax.set_title(f"{LABELS[name]}\nECE {result['values'][name]['ece']:.3f}", fontsize=8)
        ax.set_xlabel("confidence", fontsize=7)
        ax.set_ylabel("accuracy", fontsize=7)
        ax = axes[1, j]
        ax.hist(
            [score[correct == 1], score[correct == 0]],
            bins=edges,
            color=["tab:green", "tab:red"],
            label=["right", "wrong"],
            stacked=True,
        )
        ax.set_xlabel("confidence", fontsize=7)
    axes[1, 0].legend(fontsize=7)
    return plotting.save(fig, path)


def plot_training(history: dict, path: Path) -> Path:
    plt = plotting.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for key, color in (("train/loss", "tab:blue"), ("val/loss", "tab:orange")):
        pts = [(r.get("epoch", i), r[key]) for i, r in enumerate(history.get("pretraining", [])) if key in r]
        if pts:
            axes[0].plot(*zip(*pts), marker=".", color=color, label=key)
    axes[0].set_title("small LM pretraining on split A", fontsize=9)
    axes[0].set_xlabel("epoch")
    axes[0].set_yscale("log")
    axes[0].legend(fontsize=7)
    for name, color in (("selfref", "tab:red"), ("finetuned_logits", "tab:green"), ("verbalized", "tab:orange")):
        for key, ls in (("train/loss", "-"), ("val/loss", "--")):
            pts = [(r.get("epoch", i), r[key]) for i, r in enumerate(history.get(name, [])) if key in r]
            if pts:
                axes[1].plot(*zip(*pts), ls, marker=".", color=color, label=f"{name} {key}")
    axes[1].set_title("fine-tuning (first seed)", fontsize=9)
    axes[1].set_xlabel("epoch")
    axes[1].legend(fontsize=6)
    return plotting.save(fig, path)


def plot_selection(summary: dict, path: Path) -> Path:
    """Each arm's split-V AUROC per learning rate (the chosen one marked) and its best epochs per seed."""
    plt = plotting.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    arms = {"selfref": "method", "finetuned_logits": "finetuned_logits", "verbalized": "verbalized"}
    for arm, source in arms.items():
        rows = sorted(
            (float(key.split("/")[2][2:]), value)
            for key, value in summary.items()
            if key.startswith(f"select/{arm}/lr") and key.endswith("/val_auroc")
        )
        if not rows:
            continue
        lrs, scores = zip(*rows)
        axes[0].plot(lrs, scores, marker="o", color=COLORS[source], label=LABELS[source])
        chosen = summary.get(f"select/{arm}/lr")
        if chosen is not None:
            axes[0].axvline(chosen, color=COLORS[source], ls=":", lw=0.8)
        epochs = [
            v for k, v in sorted(summary.items()) if k.startswith(f"select/{arm}/seed") and k.endswith("best_epoch")
        ]
        axes[1].plot(range(len(epochs)), np.asarray(epochs) + 1, marker="s", color=COLORS[source], label=LABELS[source])
    axes[0].set_xscale("log")
    axes[0].set_xlabel("learning rate")
    axes[0].set_ylabel("split-V AUROC (NaN: answers moved > 1 pt)")
    axes[0].set_title("learning-rate selection on V (first seed; dotted: chosen)", fontsize=9)
    axes[0].legend(fontsize=7)
    axes[1].set_xlabel("fine-tuning seed")
    axes[1].set_ylabel("best epoch (early stopping on V loss)")
    axes[1].set_title("best epochs", fontsize=9)
    return plotting.save(fig, path)
