"""Figures of the ARS reproduction; each takes plain arrays/dicts and returns the saved PNG's path."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.common import plotting

LABELS = {
    "baseline": "(a) MT-SAC",
    "method": "(b) ARS scaling, no reset",
    "ars_reset": "(c) ARS scaling + reset (full)",
    "ablation_reset_only": "(d) reset only",
    "mtsac": "(a) MT-SAC",
    "scale_only": "(b) ARS scaling, no reset",
    "ars": "(c) ARS scaling + reset (full)",
    "reset_only": "(d) reset only",
}
COLORS = {"baseline": "tab:gray", "method": "tab:blue", "ars_reset": "tab:red", "ablation_reset_only": "tab:green"}
COLORS.update({"mtsac": "tab:gray", "scale_only": "tab:blue", "ars": "tab:red", "reset_only": "tab:green"})


def plot_toy(
    curves: dict[str, np.ndarray],
    steps: np.ndarray,
    test_success: dict[str, np.ndarray],
    kappa: tuple[float, ...],
    selection: dict[str, dict[float, list[float]]],
    reset_rounds: list[int],
    path: Path,
) -> Path:
    """Point-mass: validation mean success over rounds (chosen lr; mean and range over seeds), test success per
    task (mean +- std over seeds, the control's arms hatched), and the validation score of every lr per arm.

    ``curves[variant]`` is [seeds, evaluations], ``test_success[variant]`` [seeds, tasks] (variants without a
    ``control_`` prefix are the main kappa setting), ``selection[variant][lr]`` the per-seed validation scores."""
    plt = plotting.pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(16, 4))
    for variant, curve in curves.items():
        base = variant.removeprefix("control_")
        style = "--" if variant.startswith("control_") else "-"
        label = ("control " if style == "--" else "") + LABELS[base]
        mean = curve.mean(0)
        axes[0].plot(steps[: len(mean)], mean, style, marker="o", ms=3, color=COLORS[base], label=label)
        axes[0].fill_between(steps[: len(mean)], curve.min(0), curve.max(0), color=COLORS[base], alpha=0.12)
    for r in reset_rounds:
        axes[0].axvline(r, color="k", ls=":", lw=1)
    axes[0].set(xlabel="round (1 step per task + 1 update)", ylabel="validation mean success", ylim=(-0.05, 1.05))
    axes[0].set_title("point-mass, deterministic policy (chosen lr; band: seed range)", fontsize=9)
    axes[0].legend(fontsize=7)
    n_tasks = len(kappa)
    width = 0.8 / len(test_success)
    for k, (variant, success) in enumerate(test_success.items()):
        base = variant.removeprefix("control_")
        axes[1].bar(
            np.arange(n_tasks) + k * width,
            success.mean(0),
            width,
            yerr=success.std(0),
            color=COLORS[base],
            hatch="//" if variant.startswith("control_") else None,
            label=("control " if variant.startswith("control_") else "") + LABELS[base],
        )
    axes[1].set_xticks(np.arange(n_tasks) + 0.4, [f"task {i}\nκ={k:g}" for i, k in enumerate(kappa)])
    axes[1].axhline(0.6, color="k", ls=":", lw=1)
    axes[1].set(ylabel="test success (best final-period weights)", ylim=(0, 1.1))
    axes[1].set_title("test success per task (control: κ=1 everywhere)", fontsize=9)
    axes[1].legend(fontsize=6)
    for variant, table in selection.items():
        base = variant.removeprefix("control_")
        lrs = sorted(table)
        means = [np.mean(table[lr]) for lr in lrs]
        style = "--" if variant.startswith("control_") else "-"
        axes[2].plot(lrs, means, style, marker="o", color=COLORS[base], label=variant)
    axes[2].set(xscale="log", xlabel="learning rate", ylabel="best validation mean success (mean over seeds)")
    axes[2].set_title("selection grid (each seed picks its own lr)", fontsize=9)
    axes[2].legend(fontsize=6)
    return plotting.save(fig, path)


def plot_crn_invariance(raw: np.ndarray, scaled: np.ndarray, labels: list[str], path: Path) -> Path:
    """Common random numbers: each run's reward stream (tasks concatenated) divided by the first run's, raw and
    after Eq. (6) scaling; scaled ratios must be one constant per run. ``raw``/``scaled``: [runs, tasks, T]."""
    plt = plotting.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
    for ax, streams, title in ((axes[0], raw, "raw rewards"), (axes[1], scaled, "rewards x c_i (Eq. 6 at T_init)")):
        for m in range(1, len(streams)):
            ratio = (streams[m] / streams[0]).reshape(-1)
            ax.plot(ratio, lw=0.8, label=labels[m])
        n_tasks, length = streams.shape[1:]
        for i in range(1, n_tasks):
            ax.axvline(i * length, color="k", ls=":", lw=0.8)
        ax.set(yscale="log", xlabel="buffer slot (task 0 | task 1 | ...)", title=title)
    axes[0].set_ylabel(f"ratio to run '{labels[0]}'")
    axes[0].legend(fontsize=7)
    return plotting.save(fig, path)


def _rolling(values: np.ndarray, window: int) -> np.ndarray:
    kernel = np.ones(window) / window
    padded = np.concatenate([np.full(window - 1, values[0]), values])
    return np.convolve(padded, kernel, mode="valid")


def plot_metaworld(
    runs: dict[str, dict[str, dict[str, np.ndarray]]],
    tasks: list[str],
    t_init: int,
    reset_steps: list[int],
    path: Path,
) -> Path:
    """Meta-World: per task (columns) and arm, the success rate over training episodes (rolling mean, any-step
    success), the raw episode return and the scale c_i in force. ``runs[arm][task]`` holds the arrays
    ``step``, ``success_any``, ``return_raw`` and ``c_i`` per episode."""
    plt = plotting.pyplot()
    fig, axes = plt.subplots(3, len(tasks), figsize=(3.4 * len(tasks), 7.5), squeeze=False)
    for arm, per_task in runs.items():
        for j, task in enumerate(tasks):
            rows = per_task[task]
            window = max(1, len(rows["step"]) // 20)
            kw = dict(color=COLORS[arm], label=LABELS[arm], lw=1.2)
            axes[0, j].plot(rows["step"], _rolling(rows["success_any"].astype(float), window), **kw)
            axes[1, j].plot(rows["step"], np.maximum(rows["return_raw"], 1e-3), **kw)
            axes[2, j].plot(rows["step"], rows["c_i"], drawstyle="steps-post", **kw)
            axes[0, j].set_title(task, fontsize=9)
    for j in range(len(tasks)):
        axes[0, j].set(ylim=(-0.05, 1.05))
        axes[1, j].set(yscale="log")
        axes[2, j].set(yscale="log", xlabel="env steps per task")
        for ax in axes[:, j]:
            ax.axvline(t_init, color="grey", ls=":", lw=1)
            for s in reset_steps:
                ax.axvline(s, color="k", ls=":", lw=0.8)
    axes[0, 0].set_ylabel("success (any step), rolling mean")
    axes[1, 0].set_ylabel("raw episode return")
    axes[2, 0].set_ylabel("c_i in force")
    axes[0, 0].legend(fontsize=7)
    return plotting.save(fig, path)
