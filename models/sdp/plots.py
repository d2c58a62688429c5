"""Figures of the SDP study; each takes plain arrays / dicts and returns the saved PNG's path.

``per_seed`` maps arm -> metric (``success_yaw``, ``success_so3``) -> one number per paired seed;
``outcomes`` maps arm -> test -> ``algorithm.success_metrics`` output of the first seed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.common import plotting

LABELS = {
    "method": "SDP-lite (SFiLM)",
    "baseline": "Diffusion Policy + SO(3) aug",
    "method_film": "SDP-lite, flat FiLM + SO(3) aug",
    "baseline_so3": "Diffusion Policy, SO(3) scenes",
}
COLORS = {"method": "tab:red", "baseline": "tab:blue", "method_film": "tab:orange", "baseline_so3": "tab:purple"}


def plot_success(arms: list[str], per_seed_values: dict, pos_tol: float, deg_tol: float, path: Path):
    """Test success per arm on yaw and SO(3) scenes: bars = mean over seeds, dots = the seeds."""
    plt = plotting.pyplot()
    fig, ax = plt.subplots(figsize=(7.4, 3.8))
    width = 0.38
    x = np.arange(len(arms))
    n_seeds = len(per_seed_values[arms[0]]["success_yaw"])
    for j, (test, hatch) in enumerate((("yaw", ""), ("so3", "//"))):
        per_seed = np.array([per_seed_values[a][f"success_{test}"] for a in arms])
        heights = per_seed.mean(1)
        bars = ax.bar(
            x + (j - 0.5) * width,
            heights,
            width,
            color=[COLORS[a] for a in arms],
            hatch=hatch,
            edgecolor="black",
            alpha=0.85 if j == 0 else 0.55,
            label="yaw scenes" if j == 0 else "SO(3)-rotated scenes",
        )
        for i, b in enumerate(bars):
            ax.scatter(np.full(n_seeds, b.get_x() + b.get_width() / 2), per_seed[i], s=8, color="black", zorder=3)
            ax.text(b.get_x() + b.get_width() / 2, heights[i] + 0.03, f"{heights[i]:.2f}", ha="center", fontsize=7)
    ax.set_xticks(x)
    ax.set_xticklabels([LABELS[a] for a in arms], fontsize=7)
    ax.set_ylabel(f"success (pos < {pos_tol:g}, rot < {deg_tol:g} deg)")
    ax.set_ylim(0, 1.15)
    ax.set_title(f"test success, mean over {n_seeds} seeds (dots: seeds)", fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    return plotting.save(fig, path)


def plot_rollouts(panels: list[dict], path: Path) -> Path:
    """3-D panels: the point cloud, both grasp points, several sampled chunks (green: success) and the
    final EE x-axes (purple; black: the demonstration's). ``panels``: dicts with title, row, col,
    n_rows, n_cols, cloud, goals, pred, success, demo_final (all EE-relative)."""
    plt = plotting.pyplot()
    n_rows, n_cols = panels[0]["n_rows"], panels[0]["n_cols"]
    fig = plt.figure(figsize=(3.3 * n_cols, 3.2 * n_rows))
    for p in panels:
        ax = fig.add_subplot(n_rows, n_cols, p["row"] * n_cols + p["col"] + 1, projection="3d")
        ax.scatter(*p["cloud"].T, s=4, color="gray", alpha=0.6)
        ax.scatter(*p["goals"].T, s=40, marker="*", color="green")
        ax.scatter([0], [0], [0], s=25, color="black", marker="s")
        for k in range(len(p["pred"])):
            traj = np.concatenate([np.zeros((1, 3)), p["pred"][k, :, :3]])
            ax.plot(*traj.T, color="tab:green" if p["success"][k] else "tab:red", lw=1)
            end = p["pred"][k, -1]
            ax.quiver(*end[:3], *(0.05 * end[3:6]), color="tab:purple", lw=0.8)
        demo = p["demo_final"]
        ax.quiver(*demo[:3], *(0.05 * demo[3:6]), color="black", lw=1.2)
        ax.set_title(p["title"], fontsize=7)
        ax.tick_params(labelsize=5)
    return plotting.save(fig, path)


def plot_errors(outcomes: dict, pos_tol: float, deg_tol: float, path: Path) -> Path:
    """Final position vs orientation error of every test scene (first seed), yaw and SO(3) panels."""
    plt = plotting.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.4), sharey=True)
    for ax, test in zip(axes, ("yaw", "so3")):
        for arm, res in outcomes.items():
            o = res[test]
            ax.scatter(
                np.clip(o["pos_err"], 1e-4, None),
                np.clip(o["rot_err_deg"], 1e-2, None),
                s=6,
                alpha=0.5,
                color=COLORS[arm],
                label=LABELS[arm],
            )
        ax.axvline(pos_tol, color="black", ls="--", lw=0.8)
        ax.axhline(deg_tol, color="black", ls="--", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("final position error to the nearest grasp")
        ax.set_title(f"{test} test scenes, seed 0 (success = lower-left box)", fontsize=9)
    axes[0].set_ylabel("final orientation error (deg)")
    axes[0].legend(fontsize=6)
    return plotting.save(fig, path)


def plot_learning_curves(history: dict, path: Path) -> Path:
    """Train and validation (EMA, fixed noise) DDPM loss of every fit; the first seed's fits solid."""
    plt = plotting.pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for name, records in history.items():
        arm = name.split("/")[0]
        for key, ls in (("train/loss", "-"), ("val/loss", "--")):
            pts = [(r["step"], r[key]) for r in records if key in r]
            if pts:
                ax.plot(*zip(*pts), ls=ls, lw=0.8, color=COLORS.get(arm, "gray"), alpha=0.6)
    for arm, label in LABELS.items():
        ax.plot([], [], color=COLORS[arm], label=label)
    ax.plot([], [], color="black", ls="--", label="validation (EMA)")
    ax.set_yscale("log")
    ax.set_xlabel("optimiser step")
    ax.set_ylabel("epsilon MSE")
    ax.set_title("DDPM loss of every fit (grid points and seeds)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    return plotting.save(fig, path)


def plot_selection(tables: dict[str, list[dict]], path: Path) -> Path:
    """Validation success against the learning rate for every arm (the first seed's grid)."""
    plt = plotting.pyplot()
    fig, ax = plt.subplots(figsize=(5.0, 3.4))
    for arm, table in tables.items():
        lrs = [row["lr"] for row in table]
        ax.plot(lrs, [row["val_success"] for row in table], marker="o", color=COLORS[arm], label=LABELS[arm])
    ax.set_xscale("log")
    ax.set_xlabel("learning rate")
    ax.set_ylabel("validation success (SO(3) scenes)")
    ax.set_title("selection grid (first seed); the best point is kept", fontsize=9)
    ax.legend(fontsize=6)
    return plotting.save(fig, path)
