"""sleeping_rl's figures: reward curves against the exact V*, and cumulative regret."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.common import plotting

from .algorithm import VARIANTS
from .config import Config


def _smooth(x: np.ndarray, window: int) -> np.ndarray:
    window = max(1, min(window, x.shape[-1]))
    kernel = np.ones(window) / window
    return np.apply_along_axis(lambda row: np.convolve(row, kernel, mode="valid"), -1, np.atleast_2d(x))


def _grid(n: int):
    plt = plotting.pyplot()
    cols = min(n, 3)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.axis("off")
    return fig, axes.flat


LABELS = {"method": ("SleepingUCBVI", "tab:blue"), "baseline": ("UCBVI", "tab:orange")}


def plot_rewards(cfg: Config, settings: list[dict], runs: dict, plots: Path) -> Path:
    fig, axes = _grid(len(settings))
    names = [str(n) for n in runs["run_setting"]]
    for ax, s in zip(axes, settings):
        rows = [i for i, n in enumerate(names) if n == s["name"]]
        for variant in VARIANTS:
            label, colour = LABELS[variant]
            curves = _smooth(runs[f"rewards_{variant}"][rows], cfg.smooth_window)
            x = np.arange(curves.shape[1]) + min(cfg.smooth_window, runs[f"rewards_{variant}"].shape[1])
            for curve in curves:
                ax.plot(x, curve, color=colour, alpha=0.25, lw=0.7)
            ax.plot(x, curves.mean(axis=0), color=colour, lw=1.6, label=label)
        ax.axhline(s["v_star"], color="k", ls="--", lw=1, label=f"V* = {s['v_star']:.2f}")
        ax.axhline(s["v_agnostic"], color="grey", ls=":", lw=1.2, label=f"V*_agnostic = {s['v_agnostic']:.2f}")
        ax.set_title(f"g={s['grid']}, p={s['safe_prob']:g} ({s['role']})")
        ax.set_xlabel("episode")
        ax.set_ylabel(f"reward ({cfg.smooth_window}-episode mean)")
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"StochasticFrozenLake, H={settings[0]['horizon']}, beta={cfg.bonus_scale:g}, {cfg.n_seeds} seed(s)")
    return plotting.save(fig, plots / "reward_curves.png")


def plot_regret(settings: list[dict], runs: dict, plots: Path) -> Path:
    fig, axes = _grid(len(settings))
    names = [str(n) for n in runs["run_setting"]]
    for ax, s in zip(axes, settings):
        rows = [i for i, n in enumerate(names) if n == s["name"]]
        for variant in VARIANTS:
            label, colour = LABELS[variant]
            rewards = runs[f"rewards_{variant}"][rows]
            episodes = np.arange(1, rewards.shape[1] + 1)
            regret = episodes * s["v_star"] - np.cumsum(rewards, axis=1)
            for curve in regret:
                ax.plot(episodes, curve, color=colour, alpha=0.25, lw=0.7)
            ax.plot(episodes, regret.mean(axis=0), color=colour, lw=1.6, label=label)
        ax.set_title(f"g={s['grid']}, p={s['safe_prob']:g} ({s['role']})")
        ax.set_xlabel("episode k")
        ax.set_ylabel("cumulative regret vs exact V*")
        ax.legend(fontsize=7, loc="upper left")
    return plotting.save(fig, plots / "cumulative_regret.png")
