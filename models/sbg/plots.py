"""Figures of the SBG study; each takes plain arrays and returns the saved PNG's path."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.common.plotting import pyplot, save

LABELS = {"md": "MD (test frames)", "proposal": "TarFlow proposals", "baseline": "SNIS", "method": "SBG (SMC)"}


def _pairs(angles: np.ndarray) -> np.ndarray:
    """(phi_i, psi_i) pairs of every residue stacked: (batch * k, 2)."""
    k = angles.shape[1] // 2
    return np.stack([angles[:, :k].ravel(), angles[:, k:].ravel()], 1)


def plot_ramachandran(angle_sets: dict[str, np.ndarray], distinct: dict[str, float], path: Path) -> Path:
    """(phi, psi) histograms of MD, the flow's proposals, SNIS and SMC side by side."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(angle_sets), figsize=(3.8 * len(angle_sets), 3.8), sharex=True, sharey=True)
    for ax, (key, angles) in zip(np.atleast_1d(axes), angle_sets.items()):
        pairs = _pairs(angles)
        ax.hist2d(pairs[:, 0], pairs[:, 1], bins=60, range=[[-np.pi, np.pi]] * 2, cmap="viridis", cmin=1)
        extra = f", {distinct[key]:.0%} distinct lineages" if key in distinct else ""
        ax.set_title(f"{LABELS[key]}\n(n={len(angles)}{extra})", fontsize=9)
        ax.set_xlabel("phi (rad)")
    np.atleast_1d(axes)[0].set_ylabel("psi (rad)")
    return save(fig, path)


def plot_energy_histogram(energy_sets: dict[str, np.ndarray], path: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ref = energy_sets["md"]
    finite = np.concatenate([e[np.isfinite(e)] for e in energy_sets.values()])
    hi = min(np.percentile(finite, 99), ref.max() + 100)
    bins = np.linspace(ref.min() - 10, hi, 60)
    for key, e in energy_sets.items():
        e = e[np.isfinite(e)]
        ax.hist(np.clip(e, bins[0], bins[-1]), bins=bins, density=True, histtype="step", lw=1.5, label=LABELS[key])
    ax.set_xlabel("energy U/kT (clipped)")
    ax.set_ylabel("density")
    ax.legend()
    return save(fig, path)


def plot_smc_trace(trace: dict[str, list[float]], md_median_energy: float, path: Path) -> Path:
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    ax1.plot(trace["t"], trace["ess"])
    ax1.set_xlabel("t")
    ax1.set_ylabel("normalised ESS before resampling")
    ax2.plot(trace["t"], trace["median_energy"], label="SMC particles")
    ax2.axhline(md_median_energy, color="k", ls="--", label="MD")
    ax2.set_yscale("symlog", linthresh=10)
    ax2.set_xlabel("t")
    ax2.set_ylabel("median energy U/kT")
    ax2.legend()
    return save(fig, path)


def plot_learning_curves(histories: dict[str, list[dict]], chosen: str, path: Path) -> Path:
    """Validation NLL (EMA weights) per epoch of every learning rate in the grid; the chosen one bold."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name, history in histories.items():
        for key, style in (("val/nll", "-"), ("train/nll", ":")):
            points = [(r["epoch"], r[key]) for r in history if key in r and "epoch" in r]
            if points:
                ax.plot(*zip(*points), style, lw=2.2 if name == chosen else 1.0, label=f"{name} {key}")
    ax.set_xlabel("epoch")
    ax.set_ylabel("NLL per dimension")
    ax.legend(fontsize=7)
    return save(fig, path)


def plot_step_selection(table: list[dict], chosen: float, path: Path) -> Path:
    """SMC's validation energy-W2 over the Langevin-step grid."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.4))
    eps = [row["eps"] for row in table]
    ax.plot(eps, [row["val_energy_w2"] for row in table], "o-")
    ax.axvline(chosen, color="k", ls="--", label=f"chosen eps={chosen:g}")
    ax.set_xscale("log")
    ax.set_xlabel("Langevin time eps (whitened units)")
    ax.set_ylabel("validation energy-W2 (kT)")
    ax.legend()
    return save(fig, path)
