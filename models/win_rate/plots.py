"""Figures of the win-rate study; each takes plain lists/dicts and returns the saved PNG's path.

``curves[arm][seed]`` is that arm's chosen-lr learning curve: records with ``step``, ``val/objective``,
``val/win_rate_own``, ``val/win_rate_oracle`` and ``val/active`` (Monte-Carlo estimates at each checkpoint).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from models.common import plotting

COLORS = {"rlhf": "tab:red", "dpo": "tab:blue", "sft": "tab:gray", "wro": "tab:orange", "nlhf": "tab:purple"}


def color(arm: str) -> str:
    return COLORS.get(arm.split("_")[0], "k")


def plot_win_rate_curves(curves: dict, path: Path) -> Path:
    plt = plotting.pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    styles = ["-", "--", ":", "-."]
    seen: dict[str, int] = {}
    for arm, seeds in curves.items():
        family = arm.split("_")[0]
        style = styles[seen.setdefault(family, 0) % len(styles)]
        seen[family] += 1
        steps = [r["step"] for r in seeds[0]]
        wr = np.array([[r["val/win_rate_oracle"] for r in s] for s in seeds])
        ax.plot(steps, wr.mean(0), style, color=color(arm), marker=".", label=arm)
        ax.fill_between(steps, wr.mean(0) - wr.std(0), wr.mean(0) + wr.std(0), color=color(arm), alpha=0.1)
    ax.axhline(0.5, color="k", lw=0.5)
    ax.set_xlabel("training step")
    ax.set_ylabel("MC oracle win rate vs anchor q")
    ax.set_title(
        f"Win rate over training, chosen lr (mean +- sd over {len(next(iter(curves.values())))} seeds)", fontsize=9
    )
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    return plotting.save(fig, path)


def plot_correspondence(curves: dict, judged: list[str], path: Path) -> Path:
    """Objective vs own-model win rate at each checkpoint (active checkpoints only), one panel per arm."""
    plt = plotting.pyplot()
    names = list(curves)
    cols = 4
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.0 * cols, 2.6 * rows), squeeze=False)
    for ax, arm in zip(axes.ravel(), names):
        for k, records in enumerate(curves[arm]):
            active = [r for r in records if r["val/active"] > 0]
            ax.plot(
                [r["val/objective"] for r in active],
                [r["val/win_rate_own"] for r in active],
                marker="o",
                ms=3,
                color=color(arm),
                alpha=1.0 if k == 0 else 0.4,
            )
        tag = " (judged)" if arm in judged else ""
        ax.set_title(f"{arm}{tag}", fontsize=8)
        ax.set_xlabel("objective (MC / held-out)", fontsize=7)
        ax.set_ylabel("own-model win rate (MC)", fontsize=7)
        ax.tick_params(labelsize=6)
    for ax in axes.ravel()[len(names) :]:
        ax.axis("off")
    fig.suptitle("Correspondence: objective vs win rate under the objective's own preference model", fontsize=9)
    return plotting.save(fig, path)


def plot_family_ranking(runs: dict, path: Path) -> Path:
    """Per family: final win rate against the fraction of the optimum reached and against the optimum's win rate."""
    plt = plotting.pyplot()
    fig, axes = plt.subplots(len(runs), 2, figsize=(9, 3.2 * len(runs)), squeeze=False)
    for row, (family, items) in zip(axes, runs.items()):
        arms = sorted({r["arm"] for r in items})
        marks = dict(zip(arms, "osD^v"))
        for r in items:
            row[0].scatter(
                r["fraction"],
                r["final"],
                marker=marks[r["arm"]],
                c=[[math.log10(r["lr"]) + 2]],
                s=20,
                cmap="viridis",
                vmin=0,
                vmax=2,
            )
            row[1].scatter(r["expected"], r["final"], marker=marks[r["arm"]], color=color(family), s=20)
        for arm in arms:
            row[1].scatter([], [], marker=marks[arm], color=color(family), label=arm)
        row[0].set_xlabel("fraction of the objective's optimum reached (colour: log10 lr)", fontsize=8)
        row[1].set_xlabel("MC win rate at the objective's optimum", fontsize=8)
        for ax in row:
            ax.set_ylabel("final MC oracle win rate", fontsize=8)
            ax.grid(alpha=0.3)
        row[1].legend(fontsize=7)
        row[0].set_title(f"{family.upper()} family: optimisation success", fontsize=9)
        row[1].set_title(f"{family.upper()} family: the choice (beta) fixing the solution", fontsize=9)
    return plotting.save(fig, path)


def plot_tabular(betas, tab: dict, path: Path) -> Path:
    plt = plotting.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    for ax, setting in zip(axes, ("uniform", "skewed")):
        p = setting + "_"
        labels = ["anchor", "SFT", *[f"DPO b={b:g}" for b in betas], "WRO"]
        closed = [
            tab[p + "anchor_wr"],
            tab[p + "sft_closed_form"],
            *[tab[p + f"rlhf_optimum_b{b:g}"] for b in betas],
            tab[p + "wro_optimum"],
        ]
        trained = [
            tab[p + "anchor_wr"],
            tab[p + "sft_trained"],
            *[tab[p + f"dpo_trained_b{b:g}"] for b in betas],
            tab[p + "wro_trained"],
        ]
        xs = np.arange(len(labels))
        ax.bar(xs - 0.2, closed, 0.4, label="closed form / optimum", color="tab:gray")
        ax.bar(xs + 0.2, trained, 0.4, label="trained", color="tab:red")
        ax.set_xticks(xs, labels, rotation=30, fontsize=7)
        ax.set_ylim(0.4, 1.0)
        ax.set_ylabel("win rate vs q")
        ax.set_title(f"Tabular bandit, {setting} anchor", fontsize=9)
    axes[0].legend(fontsize=7)
    return plotting.save(fig, path)
