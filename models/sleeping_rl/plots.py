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


def plot_regret_by_beta(cfg: Config, settings: list[dict], runs: dict, plots: Path) -> Path:
    """Cumulative regret vs the exact V* per setting, one colour per beta of the sweep (seed means; solid
    SleepingUCBVI, dashed UCBVI)."""
    plt = plotting.pyplot()
    fig, axes = _grid(len(settings))
    names = [str(n) for n in runs["run_setting"]]
    betas = [float(b) for b in runs["run_beta"]]
    colours = plt.cm.viridis(np.linspace(0.0, 0.9, len(cfg.beta_sweep)))
    for ax, s in zip(axes, settings):
        for colour, beta in zip(colours, cfg.beta_sweep):
            rows = [i for i, (n, b) in enumerate(zip(names, betas)) if n == s["name"] and b == beta]
            for variant, style in (("method", "-"), ("baseline", "--")):
                rewards = runs[f"rewards_{variant}"][rows]
                episodes = np.arange(1, rewards.shape[1] + 1)
                regret = (episodes * s["v_star"] - np.cumsum(rewards, axis=1)).mean(axis=0)
                label = f"{LABELS[variant][0]}, beta={beta:g}" + (" (deciding)" if beta == cfg.bonus_scale else "")
                ax.plot(episodes, regret, color=colour, ls=style, lw=1.4, label=label)
        ax.set_title(f"g={s['grid']}, p={s['safe_prob']:g} ({s['role']})")
        ax.set_xlabel("episode k")
        ax.set_ylabel("cumulative regret vs exact V*")
        ax.legend(fontsize=6, loc="upper left", ncol=2)
    fig.suptitle(f"Regret per beta ({cfg.n_seeds} seed(s), the same random streams at every beta)")
    return plotting.save(fig, plots / "cumulative_regret_by_beta.png")


def plot_beta_sweep(cfg: Config, settings: list[dict], values: dict, plots: Path) -> Path:
    """Last-10% reward of both algorithms against beta, with V* and V*_agnostic and the claim's tolerance bands."""
    fig, axes = _grid(len(settings))
    for ax, s in zip(axes, settings):
        for variant in VARIANTS:
            label, colour = LABELS[variant]
            rewards = [
                values[f"{variant}/last10_reward_{s['name']}" + ("" if b == cfg.bonus_scale else f"_beta{b:g}")]
                for b in cfg.beta_sweep
            ]
            ax.plot(cfg.beta_sweep, rewards, "o-", color=colour, label=label)
        for ref, style, name in ((s["v_star"], "--", "V*"), (s["v_agnostic"], ":", "V*_agnostic")):
            ax.axhline(ref, color="k", ls=style, lw=1, label=f"{name} = {ref:.2f}")
            ax.axhspan(ref - 0.3, ref + 0.3, color="grey", alpha=0.1)
        ax.axvline(cfg.bonus_scale, color="red", lw=0.8, ls=":", label=f"deciding beta {cfg.bonus_scale:g}")
        ax.set_xscale("log")
        ax.set_title(f"g={s['grid']}, p={s['safe_prob']:g} ({s['role']})")
        ax.set_xlabel("beta (bonus scale)")
        ax.set_ylabel("last-10% reward (seed mean)")
        ax.legend(fontsize=6, loc="lower left")
    fig.suptitle(f"Beta sweep at K={cfg.episodes}")
    return plotting.save(fig, plots / "beta_sweep.png")
