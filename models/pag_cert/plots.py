"""Figures of pag_cert: per-run relative errors, the certified kappa -> rho map, pass rate against d,
learning curves."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.common import plotting
from models.common import verdicts as V
from models.pag_cert import algorithm as alg

PANELS = (
    ("", "fresh draws from D' (the claim's check)"),
    ("test_", "noisy resample of the official test split (shifted; reported)"),
)


def relative_errors(runs: dict, epsilon: float, sizes: dict[str, tuple[int, float]], path: Path) -> Path:
    """Per-run held-out relative error against the eps band: eps-net vs the under-sized control, fresh D' vs the
    test split."""
    plt = plotting.pyplot()
    settings = list(runs)
    fig, axes = plt.subplots(1, 2, figsize=(2.2 * len(settings) + 3, 4.4), sharey=True)
    rng = np.random.default_rng(0)
    arms = (
        (-0.18, "method", "tab:blue", f"eps-net, s = {sizes['method'][0]:,}"),
        (0.18, "control", "tab:red", f"control (under-sized), s = {sizes['control'][0]:,}"),
    )
    for ax, (where, title) in zip(axes, PANELS):
        for i, setting in enumerate(settings):
            for shift, arm, colour, name in arms:
                rel = np.array([r[f"{where}rel_err"] for r in runs[setting][arm]])
                jitter = rng.uniform(-0.07, 0.07, len(rel))
                ax.scatter(i + shift + jitter, rel, s=8, color=colour, alpha=0.6, label=name if i == 0 else None)
                ax.hlines(np.median(rel), i + shift - 0.12, i + shift + 0.12, color=colour, lw=2)
        ax.axhspan(0, epsilon, color="tab:green", alpha=0.12, label=f"passes: <= eps = {epsilon}")
        ax.set_yscale("symlog", linthresh=1e-3)
        ax.set_xticks(range(len(settings)), settings, rotation=20)
        ax.set_title(title, fontsize=10)
    axes[0].set_ylabel("relative error: sup over kappa <= kappa_max of\nPr(rob < M(kappa) | conf >= kappa)")
    axes[0].legend(fontsize=7, loc="upper left")
    return plotting.save(fig, path)


def sample_size_sweep(sizes: dict[str, tuple[int, float]], errors: dict[str, np.ndarray], path: Path) -> Path:
    """Relative error of every run against the sample size (linear, d = 784, exact oracle), each size's own eps
    (the eps it certifies) as a step, and the under-sized control."""
    plt = plotting.pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.3))
    rng = np.random.default_rng(0)
    order = sorted(sizes, key=lambda arm: sizes[arm][0])
    for arm in order:
        size, eps = sizes[arm]
        rel = errors[arm]
        colour = "tab:red" if arm == "control" else "tab:blue"
        x = size * np.exp(rng.uniform(-0.06, 0.06, len(rel)))
        ax.scatter(x, np.maximum(rel, 1e-5), s=7, alpha=0.5, color=colour)
        passes = float(np.mean(rel <= eps))
        ax.hlines(eps, size / 1.25, size * 1.25, color="black", lw=2)
        ax.annotate(f"{passes:.0%} <= {eps:g}", (size, eps), textcoords="offset points", xytext=(0, 6),
                    ha="center", fontsize=7)  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("certification sample size s (prefixes of one sample)")
    ax.set_ylabel("relative error on fresh draws (bar: the eps the size is judged against)")
    ax.set_title("sample-size sweep; red: the under-sized net (smallest that certifies)", fontsize=9)
    return plotting.save(fig, path)


def pass_rate_by_dimension(dims: list[int], passes: list[int], runs: list[int], threshold: float, path: Path) -> Path:
    """Pass rate with its Clopper-Pearson interval at every input dimension, all with the same s."""
    plt = plotting.pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4))
    rates = [V.clopper_pearson(k, n) for k, n in zip(passes, runs)]
    est = np.array([r[0] for r in rates])
    err = np.array([[r[0] - r[1] for r in rates], [r[2] - r[0] for r in rates]])
    ax.errorbar(dims, est, yerr=err, marker="o", capsize=4, label="pass rate, 95 % Clopper-Pearson")
    ax.axhline(threshold, color="tab:red", ls="--", label=f"threshold {threshold}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(dims, [str(d) for d in dims])
    ax.set_xlabel("input dimension d (same eps-net size s)")
    ax.set_ylabel("share of runs with relative error <= eps")
    ax.set_ylim(min(0.5, float(np.min([r[1] for r in rates])) - 0.05), 1.02)
    ax.set_title("dimension independence of s (linear, exact oracle)")
    ax.legend(fontsize=8, loc="lower left")
    return plotting.save(fig, path)


def quality_space(curves: dict, held_out: dict[str, alg.HeldOut], path: Path) -> Path:
    """Fresh held-out q(x) = (conf, rob) with the certified step function M(kappa) of one eps-net and one control run."""
    plt = plotting.pyplot()
    settings = list(curves)
    fig, axes = plt.subplots(1, len(settings), figsize=(4.6 * len(settings), 4), squeeze=False)
    rng = np.random.default_rng(0)

    def stretch(c):  # spreads the confident end
        return -np.log10(np.clip(1.0 - c, 1e-6, None))

    for ax, setting in zip(axes[0], settings):
        conf, rob = held_out[setting].conf, held_out[setting].rob
        pick = rng.choice(len(conf), size=min(4000, len(conf)), replace=False)
        finite = rob[np.isfinite(rob)]
        cap = float(finite.max()) * 1.05 if finite.size else 1.0
        ax.scatter(stretch(conf[pick]), np.minimum(rob[pick], cap), s=3, alpha=0.25, color="grey", label="fresh q(x)")
        for label, colour in (("method", "tab:blue"), ("control", "tab:red")):
            conf_desc, runmin, kappa_max = curves[setting][label]
            use = conf_desc <= kappa_max
            name = "eps-net" if label == "method" else "under-sized control"
            ax.step(stretch(conf_desc[use]), runmin[use], where="post", color=colour, lw=1.5, label=f"M(kappa), {name}")
            ax.axvline(stretch(kappa_max), color=colour, ls=":", lw=1)
        ticks = np.array([0.5, 0.9, 0.99, 0.999, 0.9999])
        ax.set_xticks(stretch(ticks), [f"{t:g}" for t in ticks])
        ax.set_xlabel("confidence kappa (dotted: kappa_max)")
        ax.set_ylabel("robustness radius rho (l_inf)")
        ax.set_title(f"{setting}: certified kappa -> rho (split 0, run 0)", fontsize=9)
        ax.legend(fontsize=7, loc="upper left")
    return plotting.save(fig, path)


def learning_curves(history: dict, path: Path) -> Path:
    plt = plotting.pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, records in history.items():
        val = [(r["epoch"], r["val/loss"]) for r in records if "val/loss" in r]
        if val:
            ax.plot(*zip(*val), marker=".", lw=1, label=name)
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation NLL (chosen lr)")
    ax.set_title("classifiers being certified (one curve per split seed)")
    ax.legend(fontsize=6, ncol=2)
    return plotting.save(fig, path)
