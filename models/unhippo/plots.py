"""Figures of the UnHiPPO experiments (every function writes one PNG and returns its path)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from models.common import plotting

from . import algorithm
from .networks import ssm_matrices

LABELS = {"baseline": "LSSL (HiPPO-LegS)", "method": "UnLSSL (UnHiPPO)"}
COLORS = {"baseline": "tab:blue", "method": "tab:red"}


def accuracy_vs_noise(scores: dict, train_noises, eval_noises, chance: float, snr_db: dict, path: Path) -> Path:
    """Test accuracy against evaluation noise, one panel per training noise (mean +- std over seeds)."""
    plt = plotting.pyplot()
    fig, axes = plt.subplots(1, len(train_noises), figsize=(4.6 * len(train_noises), 3.6), squeeze=False, sharey=True)
    for ax, tn in zip(axes[0], train_noises):
        for arm in ("baseline", "method"):
            ens = sorted(scores[arm][tn])
            acc = np.array([[row["acc"] for row in scores[arm][tn][en]] for en in ens])  # (levels, seeds)
            ax.errorbar(
                ens, acc.mean(1), yerr=acc.std(1), marker="o", ms=4, capsize=2, color=COLORS[arm], label=LABELS[arm]
            )
        ax.axvline(tn, color="gray", lw=0.8, ls="--")  # the training noise: train = eval there
        ax.set_xscale("symlog", linthresh=min([e for e in eval_noises if e > 0], default=0.1))
        ax.axhline(chance, color="gray", lw=0.8, ls=":")
        snr = f" (SNR {snr_db[tn]:+.0f} dB)" if tn in snr_db else ""
        ax.set_title(f"trained at noise std {tn:g}{snr}", fontsize=10)
        ax.set_xlabel("evaluation noise std")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    n_seeds = len(next(iter(next(iter(scores["baseline"].values())).values())))
    axes[0, 0].set_ylabel(f"test accuracy ({n_seeds} seed(s))")
    return plotting.save(fig, path)


def selection(tables: dict[str, list[dict]], chosen: dict, path: Path) -> Path:
    """Validation accuracy of every grid point: learning rates per arm, then sigma^2 for UnLSSL (Fig. 7)."""
    plt = plotting.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.4))
    for arm, key in (("baseline", "baseline_lr"), ("method", "method_lr")):
        rows = sorted(tables[key], key=lambda r: r["lr"])
        axes[0].plot([r["lr"] for r in rows], [r["val_acc"] for r in rows], "o-", color=COLORS[arm], label=LABELS[arm])
    axes[0].set_xscale("log")
    axes[0].set_xlabel("learning rate")
    axes[0].set_title("learning rate (seed 0, validation)", fontsize=10)
    rows = sorted(tables["method_sigma2"], key=lambda r: r["obs_sigma2"])
    axes[1].plot([r["obs_sigma2"] for r in rows], [r["val_acc"] for r in rows], "o-", color=COLORS["method"])
    axes[1].axvline(chosen["method"]["obs_sigma2"], color="gray", ls="--", lw=0.8, label="chosen")
    axes[1].set_xscale("log")
    axes[1].set_xlabel("observation variance sigma^2")
    axes[1].set_title(f"UnLSSL sigma^2 at lr {chosen['method']['lr']:g} (validation)", fontsize=10)
    axes[1].legend(fontsize=8)
    for ax in axes:
        ax.set_ylabel("validation accuracy")
        ax.grid(alpha=0.3)
    return plotting.save(fig, path)


def learning_curves(history: dict, finals: dict[str, str], path: Path) -> Path:
    """Training loss and validation accuracy per epoch of the first seed's final runs."""
    plt = plotting.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.3))
    for (label, name), ls in zip(finals.items(), ("-", "--", "-.", ":") * 8):
        arm = label.split(",")[0]
        for ax, key in zip(axes, ("train/loss", "val/acc")):
            pts = [(r["epoch"] if "epoch" in r else r["step"], r[key]) for r in history.get(name, []) if key in r]
            if pts:
                ax.plot(*zip(*pts), ls=ls, marker=".", color=COLORS[arm], label=f"{LABELS[arm]}{label[len(arm) :]}")
    for ax, title in zip(axes, ("training loss", "validation accuracy (val split at the train noise)")):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=6)
    return plotting.save(fig, path)


def reconstruction(recon: dict, r, seed: int, path: Path) -> Path:
    """E1: final-time reconstruction MSE per noise level, one reconstruction, and the sigma^2 sweep."""
    plt = plotting.pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.6))
    noises = list(r.noises)
    axes[0].plot(noises, [recon["hippo"][s] for s in noises], "o-", color=COLORS["baseline"], label="HiPPO-LegS")
    axes[0].plot(
        noises,
        [recon["unhippo"][s] for s in noises],
        "o-",
        color=COLORS["method"],
        label=f"UnHiPPO sigma^2={r.obs_sigma2:.0e}",
    )
    axes[0].set_yscale("log")
    axes[0].set_xlabel("observation noise std")
    axes[0].set_ylabel("reconstruction MSE on [0, T]")
    axes[0].set_title(f"E1: final-time reconstruction, N={r.n}, T={r.length}", fontsize=10)
    axes[0].legend(fontsize=8)
    shown = max(noises)
    clean = algorithm.e1_signal(r.length)
    rng = np.random.default_rng([seed, 4001, int(round(shown * 1e9))])
    axes[1].plot(
        clean + shown * rng.standard_normal((r.draws, r.length))[0], color="lightgray", lw=0.7, label="observed"
    )
    axes[1].plot(clean, "k", lw=1.5, label="clean f")
    axes[1].plot(recon["examples"][shown][0], color=COLORS["baseline"], label="HiPPO")
    axes[1].plot(recon["examples"][shown][1], color=COLORS["method"], label="UnHiPPO")
    axes[1].set_title(f"reconstruction at noise {shown:g}", fontsize=10)
    axes[1].set_xlabel("t")
    axes[1].legend(fontsize=7)
    sweep = sorted(recon["sweep"])
    if sweep:
        axes[2].plot(sweep, [recon["sweep"][s] for s in sweep], "o-", color=COLORS["method"], label="UnHiPPO")
        axes[2].set_xscale("log")
    axes[2].axhline(recon["hippo_sweep_noise"], color=COLORS["baseline"], ls="--", label="HiPPO-LegS")
    axes[2].set_yscale("log")
    axes[2].set_xlabel("observation variance sigma^2")
    axes[2].set_title(f"sigma^2 sweep at noise {r.sweep_noise:g}", fontsize=10)
    axes[2].legend(fontsize=8)
    for ax in axes:
        ax.grid(alpha=0.3)
    return plotting.save(fig, path)


def matrices(cfg, obs_sigma2: float, length: int, path: Path) -> Path:
    """Spectra of A_0 and A_R, and one channel's impulse response in each model."""
    plt = plotting.pyplot()
    m = cfg.model
    eig_0 = torch.linalg.eigvals(algorithm.data_free_matrix(m.n)).numpy()
    eig_r = torch.linalg.eigvals(algorithm.regularized_matrix(m.n)).numpy()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    axes[0].scatter(eig_0.real, eig_0.imag, s=10, label="A_0 = A_H^T - I")
    axes[0].scatter(eig_r.real, eig_r.imag, s=10, color="tab:red", label="A_R (regularised)")
    axes[0].axvline(0, color="gray", lw=0.8)
    axes[0].set_title(f"eigenvalues, N={m.n}", fontsize=10)
    axes[0].set_xlabel("Re")
    axes[0].set_ylabel("Im")
    axes[0].legend(fontsize=8)
    max_t = m.max_t or float(length)
    c = m.hidden // 2
    u = cfg.unhippo
    for kind, arm in (("lssl", "baseline"), ("unlssl", "method")):
        a_bar, b_bar = ssm_matrices(kind, m.n, m.hidden, m.min_t, max_t, obs_sigma2, u.trans_sigma2, u.discretisation)
        _, b_h = algorithm.hippo_legs(m.n)
        response = b_h @ algorithm.krylov(length, a_bar[c], b_bar[c])  # f_hat at the window end after an impulse
        axes[1].plot(response.numpy() / response.abs().max().item(), color=COLORS[arm], label=LABELS[arm])
    t_c = algorithm.channel_steps(m.min_t, max_t, m.hidden)[c].item()
    axes[1].set_title(f"channel {c} (t={t_c:.1f}): B_H^T A_bar^l B_bar, normalised", fontsize=10)
    axes[1].set_xlabel("lag l")
    axes[1].legend(fontsize=8)
    for ax in axes:
        ax.grid(alpha=0.3)
    return plotting.save(fig, path)
