"""Every figure of the Hyperbolic-PDE GNN reproduction."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.common import plotting

from .data import TARGET_RESPONSES

NAMES = {"gpr": "GPR-GNN", "chebii": "ChebNetII", "bern": "BernNet", "mlp": "MLP", "wave": "wave (sym, GWN)"}
COLORS = {"gpr": "tab:blue", "chebii": "tab:green", "bern": "tab:purple", "mlp": "tab:gray", "wave": "tab:orange"}


def style(arm: str) -> dict:
    role, family = arm.split("_", 1)
    return {"color": COLORS[family], "linestyle": "-" if role == "method" else "--"}


def label(arm: str) -> str:
    role, family = arm.split("_", 1)
    return f"PDE-{NAMES[family]}" if role == "method" else NAMES[family]


def accuracy_by_graph(cfg, arms: list[str], graphs: list[str], values: dict, paper: dict, path: Path) -> Path:
    """Mean test accuracy (+- std over splits) of every arm on every judged graph; the paper's numbers as stars."""
    plt = plotting.pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(graphs) + 2), 4.0))
    width = 0.8 / len(arms)
    for i, arm in enumerate(arms):
        role, family = arm.split("_", 1)
        mean = [100 * values[f"{role}/{family}/acc_{g}"] for g in graphs]
        std = [100 * values[f"{role}/{family}/acc_std_{g}"] for g in graphs]
        x = np.arange(len(graphs)) + (i - (len(arms) - 1) / 2) * width
        ax.bar(x, mean, width, yerr=std, capsize=2, label=label(arm), color=COLORS[family],
               alpha=1.0 if role == "method" else 0.45, hatch="" if role == "method" else "//")  # fmt: skip
        for j, g in enumerate(graphs):
            if family in NAMES and (family, g) in paper:
                ax.scatter(x[j], paper[family, g][role == "method"], marker="*", s=80, color="black", zorder=3)
    ax.scatter([], [], marker="*", color="black", label="paper (approx.)")
    ax.set_xticks(np.arange(len(graphs)), graphs)
    ax.set(ylabel="test accuracy (%)", title="Base spectral GNNs vs their Hyperbolic-PDE versions (mean +- std)")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(axis="y", alpha=0.3)
    return plotting.save(fig, path)


def paired_gains(cfg, graphs: list[str], metrics, path: Path) -> Path:
    """PDE - base test accuracy per (graph, split) unit, per filter, with the mean's 95 % t-interval."""
    from models.common.verdicts import t_interval

    plt = plotting.pyplot()
    fig, axes = plt.subplots(1, len(cfg.filters), figsize=(4.2 * len(cfg.filters), 3.6), sharey=True, squeeze=False)
    for ax, f in zip(axes[0], cfg.filters):
        all_gains = []
        paired = metrics.paired("test_acc", f"method_{f}", f"baseline_{f}")
        per_unit = (100 * (paired[f"method_{f}"] - paired[f"baseline_{f}"])).as_dict()
        for j, g in enumerate(graphs):
            gains = [x for label, x in per_unit.items() if label.rsplit("_split", 1)[0] == g]
            all_gains += gains
            ax.scatter([j] * len(gains), gains, color=COLORS[f], alpha=0.7)
        mean, low, high = t_interval(all_gains)
        ax.axhspan(low, high, color=COLORS[f], alpha=0.15, label=f"mean {mean:+.2f} pt [{low:+.2f}, {high:+.2f}]")
        ax.axhline(0, color="black", lw=0.8)
        ax.axhline(-0.5, color="red", ls=":", label="claim margin -0.5 pt")
        ax.set_xticks(np.arange(len(graphs)), graphs, rotation=30, fontsize=7)
        ax.set(title=f"PDE-{NAMES[f]} - {NAMES[f]}")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("test accuracy gain per split (pt)")
    return plotting.save(fig, path)


def csbm_sweep(cfg, arms: list[str], sweep: list[dict], values: dict, path: Path) -> Path:
    """Secondary: accuracy against edge homophily on the CSBM levels."""
    plt = plotting.pyplot()
    h = [d["edge_homophily"] for d in sweep]
    fig, axes = plt.subplots(1, len(cfg.filters), figsize=(4.2 * len(cfg.filters), 3.6), sharey=True, squeeze=False)
    for ax, family in zip(axes[0], cfg.filters):
        shown = (
            ["baseline_mlp"] + [a for a in arms if a == "baseline_wave"] + [f"baseline_{family}", f"method_{family}"]
        )
        for arm in shown:
            role, fam = arm.split("_", 1)
            mean = [100 * values[f"{role}/{fam}/acc_{d['name']}"] for d in sweep]
            std = [100 * values[f"{role}/{fam}/acc_std_{d['name']}"] for d in sweep]
            ax.errorbar(h, mean, yerr=std, marker="o", capsize=3, label=label(arm), **style(arm))
        ax.set(title=f"CSBM: {NAMES[family]} vs its PDE version", xlabel="edge homophily")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("test accuracy (%)")
    return plotting.save(fig, path)


def learning_curves(history: dict, graphs: list[str], path: Path) -> Path:
    """Validation accuracy per arm on every graph (mean over grid points and splits still training)."""
    plt = plotting.pyplot()
    cols = min(4, len(graphs))
    rows = -(-len(graphs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.8 * rows), squeeze=False)
    for ax, g in zip(axes.ravel(), graphs):
        for arm, records in history.items():
            if arm.startswith("regression_"):
                continue
            points = [(r["epoch"], r[f"{g}/val/acc"]) for r in records if f"{g}/val/acc" in r]
            if points:
                ax.plot(*zip(*points), label=label(arm), lw=1, **style(arm))
        ax.set_title(g, fontsize=9)
        ax.set_xlabel("epoch", fontsize=8)
    for ax in axes.ravel()[len(graphs) :]:
        ax.axis("off")
    axes[0][0].set_ylabel("validation accuracy")
    axes[0][0].legend(fontsize=6)
    return plotting.save(fig, path)


def selection_summary(arms: list[str], graphs: list[str], selection: dict, cfg, path: Path) -> Path:
    """Chosen learning rate / dropout and the best epochs of every arm on every graph."""
    plt = plotting.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for i, arm in enumerate(arms):
        for j, g in enumerate(graphs):
            entry = selection[f"{arm}/{g}"]
            x = j + (i - (len(arms) - 1) / 2) * 0.8 / len(arms)
            axes[0].scatter([x] * len(entry["best_epochs"]), entry["best_epochs"], color=style(arm)["color"],
                            marker="o" if arm.startswith("method") else "x", s=14,
                            label=label(arm) if j == 0 else None)  # fmt: skip
            chosen = entry["chosen"]
            text = f"{chosen['lr']:g}\n{chosen['dropout']:g}" + (
                f"\na={chosen['alpha']:g}" if "alpha" in chosen else ""
            )
            axes[1].text(i, j, text, ha="center", va="center", fontsize=6)
    axes[0].axhline(cfg.max_epochs, color="red", ls=":", label="max epochs")
    axes[0].set_xticks(range(len(graphs)), graphs, rotation=30, fontsize=7)
    axes[0].set(ylabel="best (lowest validation loss) epoch per split", title=f"patience {cfg.patience}")
    axes[0].legend(fontsize=6, ncol=2)
    axes[1].set(
        xlim=(-0.5, len(arms) - 0.5),
        ylim=(len(graphs) - 0.5, -0.5),
        title="chosen lr / dropout / GPR alpha (validation)",
    )
    axes[1].set_xticks(range(len(arms)), [label(a) for a in arms], rotation=30, fontsize=7)
    axes[1].set_yticks(range(len(graphs)), graphs, fontsize=7)
    return plotting.save(fig, path)


def step_norms(cfg, graphs: list[str], runs: dict, path: Path) -> Path:
    plt = plotting.pyplot()
    pde = [f"method_{f}" for f in cfg.filters] + (["baseline_wave"] if cfg.wave_baseline else [])
    fig, axes = plt.subplots(1, len(pde), figsize=(3.6 * len(pde), 3.4), sharey=True, squeeze=False)
    cmap = plt.get_cmap("viridis")
    for ax, arm in zip(axes[0], pde):
        for i, g in enumerate(graphs):
            ax.plot(runs[arm, g]["step_norms"], color=cmap(i / max(1, len(graphs) - 1)), alpha=0.8, label=g)
        ax.axhline(cfg.blowup_norm, color="red", linestyle=":", label="blow-up bound")
        ax.set(title=label(arm), xlabel="leapfrog state m", yscale="log")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("max node feature norm ||X_m[i]||")
    axes[0][0].legend(fontsize=6)
    return plotting.save(fig, path)


def filter_regression(cfg, regression: dict, path: Path) -> Path:
    plt = plotting.pyplot()
    targets = cfg.data.targets
    fig, axes = plt.subplots(
        len(cfg.filters), len(targets), figsize=(2.8 * len(targets), 2.4 * len(cfg.filters)), squeeze=False
    )
    grid = np.linspace(0, 2, 200)
    for row, family in zip(axes, cfg.filters):
        for ax, target in zip(row, targets):
            ax.plot(grid, TARGET_RESPONSES[target](grid), color="black", lw=2, label="target")
            for role in ("baseline", "method"):
                r = regression[(role, family, target)]
                arm = f"{role}_{family}"
                ax.plot(r["eigenvalues"], r["response"], label=f"{label(arm)} R2={r['r2']:.3f}", **style(arm))
            ax.set_title(f"{target}", fontsize=9)
            ax.legend(fontsize=6)
            ax.set_ylim(-0.3, 1.3)
    fig.supxlabel(
        "eigenvalue lambda of L (GPR-GNN: 1 - eigenvalue of its A_tilde); black: target response, lines: learned"
    )
    return plotting.save(fig, path)
