"""Figures of the kernel-SGD study: learning curves on S^1 and S^{d-1}, one run's risk trace, tuned values.

``curves[target][estimator]`` holds the oracle-tuned curve of one target: ``mean``/``sem`` per n,
``tuned`` grid values per n and, on the circle, the fitted ``slope``/``intercept``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.common import plotting

from . import algorithm as alg

COLOR = {"exp_sgd": "tab:blue", "avg_sgd": "tab:red", "krr": "tab:green"}


def _circle_title(t: dict) -> str:
    what = "f* = √2 cos θ (every s)" if t["source"] is None else f"c_k = k^-(sβ+1)/2, s = {t['source']:g}"
    return f"{what}, σ = {t['noise']:g}, {t['seeds']} seeds"


def circle_learning_curves(targets, ns, curves, fit_range, beta: float, path: Path) -> Path:
    """Tuned excess risk against n per circle target, fitted slopes and the theory slopes."""
    plt = plotting.pyplot()
    fig, axes = plt.subplots(1, len(targets), figsize=(5.2 * len(targets), 4.3), squeeze=False)
    lo, hi = fit_range
    fit_n = ns[(ns >= lo) & (ns <= hi)]
    for ax, t in zip(axes[0], targets):
        by_est = curves[t["name"]]
        for est in alg.ESTIMATORS:
            c = by_est[est]
            ax.errorbar(
                ns,
                c["mean"],
                yerr=c["sem"],
                fmt="o",
                ms=4,
                color=COLOR[est],
                capsize=2,
                label=f"{alg.LABEL[est]}: slope {c['slope']:.2f}",
            )
            ax.plot(fit_n, np.exp(c["intercept"]) * fit_n ** c["slope"], "-", color=COLOR[est], lw=1.2)
        # Theory slopes, anchored at the exp-decay fit at the start of the window.
        anchor = np.exp(by_est["exp_sgd"]["intercept"]) * fit_n[0] ** by_est["exp_sgd"]["slope"]
        shown = set()
        for est, style in (("exp_sgd", "--"), ("krr", ":")):
            r = alg.theory_slope(est, t["source"], beta)
            if r in shown:
                continue
            shown.add(r)
            kind = "minimax" if est == "exp_sgd" else "saturated (KRR, avg SGD)"
            ax.plot(
                fit_n, anchor * (fit_n / fit_n[0]) ** r, style, color="grey", lw=1.5, label=f"theory {kind}: {r:.2f}"
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("n (samples = SGD steps)")
        ax.set_ylabel("excess risk ‖f̂ − f*‖²")
        ax.set_title(_circle_title(t), fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3, which="both")
    fig.suptitle(f"Learning curves on S¹ (kernel eigenvalues k^-β, β = {beta:g}), oracle-tuned per n", fontsize=10)
    return plotting.save(fig, path)


def sphere_learning_curves(sphere: dict, curves, judged_gamma, path: Path) -> Path:
    """log_d(tuned excess risk) against gamma = log_d n per sphere target (the paper's axes), judged range shaded."""
    plt = plotting.pyplot()
    targets = sphere["targets"]
    dim = sphere["dim"]
    gamma = np.asarray(sphere["gamma"])
    fig, axes = plt.subplots(1, len(targets), figsize=(5.2 * len(targets), 4.3), squeeze=False)
    for ax, t in zip(axes[0], targets):
        for est in alg.ESTIMATORS:
            c = curves[t["name"]][est]
            mean, sem = np.asarray(c["mean"]), np.asarray(c["sem"])
            low = np.log(np.clip(mean - sem, mean * 1e-3, None)) / np.log(dim)
            high = np.log(mean + sem) / np.log(dim)
            centre = np.log(mean) / np.log(dim)
            ax.errorbar(
                gamma,
                centre,
                yerr=[centre - low, high - centre],
                fmt="o-",
                ms=4,
                lw=1.0,
                color=COLOR[est],
                capsize=2,
                label=alg.LABEL[est],
            )
        ax.axvspan(
            *judged_gamma,
            color="grey",
            alpha=0.12,
            label="judged γ range" if t["name"] == sphere["claim_target"] else None,
        )
        claim = " (claim)" if t["name"] == sphere["claim_target"] else ""
        ax.set_title(
            f"s = {t['source']:g}{claim}: c_k² = μ_k^s, σ = {sphere['noise']:g}, {sphere['seeds']} seeds", fontsize=9
        )
        ax.set_xlabel("γ = log n / log d")
        ax.set_ylabel("log excess risk / log d")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle(
        f"Learning curves on S^{dim - 1} ⊂ R^{dim} (μ_k = d^-k up to degree {sphere['degree']}), n ≍ d^γ, "
        "oracle-tuned per n",
        fontsize=10,
    )
    return plotting.save(fig, path)


def risk_trace(tables, tuned_nmax: dict[str, float], target: str, path: Path) -> Path:
    """Risk along one circle run of n_max steps, exp-decay vs averaged, at the values tuned for n_max."""
    plt = plotting.pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.3))
    steps = tables["trace_steps"]
    n_max = int(tables["n"][-1])
    grid = tables["eta_norm"]
    for est in ("exp_sgd", "avg_sgd"):
        best = int(np.argmin(np.abs(grid - tuned_nmax[est])))
        trace = tables[f"{target}__{est}__trace"][:, best]
        ax.plot(steps, trace, color=COLOR[est], label=f"{alg.LABEL[est]}, η₀‖φ‖² = {grid[best]:.2g}")
    m = alg.stage_length(n_max)
    for b in range(m, n_max, m):
        ax.axvline(b, color="tab:blue", alpha=0.3, lw=0.6, ls=":")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("step t")
    ax.set_ylabel("excess risk of the current estimate")
    ax.set_title(f"One run of n = {n_max} steps on S¹, f* = √2 cos θ (tuned for n_max; stage ends dotted)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    return plotting.save(fig, path)


def tuned_hyperparameters(circle_ns, circle_curves, sphere_ns, sphere_curves, claim_target: str, path: Path) -> Path:
    """Oracle-tuned eta0 (normalised by sup K) and ridge per n, circle (top row) and sphere (bottom row)."""
    plt = plotting.pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(10, 7.5))
    for row, (ns, curves, where) in enumerate(((circle_ns, circle_curves, "S¹"), (sphere_ns, sphere_curves, "sphere"))):
        ax1, ax2 = axes[row]
        for name, by_est in curves.items():
            style = "-o" if name == claim_target or name == "top" else "--s"
            for est in ("exp_sgd", "avg_sgd"):
                ax1.plot(ns, by_est[est]["tuned"], style, color=COLOR[est], ms=4, label=f"{alg.LABEL[est]}, {name}")
            ax2.plot(ns, by_est["krr"]["tuned"], style, ms=4, label=f"KRR, {name}")
        for ax, label in ((ax1, f"tuned η₀ sup K ({where})"), (ax2, f"tuned ridge λ ({where})")):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("n")
            ax.set_ylabel(label)
            ax.legend(fontsize=6)
            ax.grid(alpha=0.3, which="both")
    fig.suptitle("Oracle-tuned hyperparameters per n", fontsize=10)
    return plotting.save(fig, path)
