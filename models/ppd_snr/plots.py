"""Every figure of ppd_snr: SNR sweeps, estimation errors, proposal fits, the heavy-tailed and real-data parts."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.common.plotting import pyplot, save
from models.ppd_snr import algorithm as alg

VARIANTS = {"elbo": "method", "chi2": "method_chi2"}  # proxy -> metric prefix
LABELS = {"baseline": "simple MC", "method": "IS, r by ELBO (A)", "method_chi2": "IS, r by log-SNR (B)"}


def plot_snr_sweeps(cfg, rows: list[dict], means: dict, axes_points: dict, path: Path) -> Path:
    """SNR and Delta along each sweep: per-dataset closed form and simulation, and the analytical curve."""
    plt = pyplot()
    dc = cfg.data
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    for col, (axis, (label, points)) in enumerate(axes_points.items()):
        raw = np.array([{"d": d, "m": m, "shift": s}[axis] for d, m, s in points], dtype=float)
        x = raw / dc.n_train if axis == "m" else raw
        lo, hi = raw.min(), raw.max()
        grid = np.geomspace(max(lo, 1), hi, 200) if axis != "shift" else np.linspace(lo, hi, 200)
        fixed = {"d": dc.base.d, "m": dc.base.m, "shift": dc.base.shift}
        curve = []
        for g in grid:
            args = {**fixed, axis: g}
            curve.append(alg.expected_delta(args["d"], dc.n_train, args["m"], args["shift"], dc.sigma, dc.sigma0))
        curve = np.array(curve)
        gx = grid / dc.n_train if axis == "m" else grid
        top, bottom = axes[0, col], axes[1, col]
        top.plot(
            gx,
            [alg.snr_theory(v, cfg.snr_samples) for v in curve],
            "k-",
            lw=1,
            label="sqrt(K/(e^E[Delta]-1)) (analytical, mean data)",
        )
        top.plot(
            x, means[axis]["snr_theory"], "s", mfc="none", color="C0", ms=9, label="closed form, drawn data (mean)"
        )
        top.errorbar(
            x,
            means[axis]["snr_empirical"],
            yerr=means[axis]["snr_empirical_sd"],
            fmt="o",
            color="C1",
            capsize=3,
            label=f"empirical, M={cfg.snr_repeats} (mean ± sd over data replicates)",
        )
        top.set_yscale("log")
        top.set_ylabel(f"SNR of simple MC, K={cfg.snr_samples}")
        bottom.plot(gx, curve, "k-", lw=1, label="E_data[Delta] (analytical)")
        for r in rows:
            if (r["d"], r["m"], r["shift"]) in [tuple(p) for p in points]:
                xv = {"d": r["d"], "m": r["m"] / dc.n_train, "shift": r["shift"]}[axis]
                bottom.plot(xv, r["delta"], ".", color="C0", alpha=0.6)
        bottom.plot([], [], ".", color="C0", label="Delta of each drawn dataset")
        bottom.set_ylabel("Delta = log E[p^2] - 2 log E[p]")
        for ax in (top, bottom):
            ax.set_xlabel(label)
            if axis != "shift":
                ax.set_xscale("log")
        top.set_title(f"sweep of {axis} (base d={dc.base.d}, m/n={dc.base.m / dc.n_train:g}, shift={dc.base.shift:g})")
    axes[0, 0].legend(fontsize=8)
    axes[1, 0].legend(fontsize=8)
    fig.suptitle("Simple-MC posterior-predictive SNR under exact inference: simulation vs closed form")
    return save(fig, path)


def plot_estimates(cfg, rows: list[dict], sweep: dict, hardest: str, path: Path) -> Path:
    """Error of log p(D*|D) per setting (simple MC vs learned IS), and simple MC's K sweep."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5))
    variants = ["baseline"] + [VARIANTS[p] for p in cfg.proposal.proxies]
    width = 0.8 / len(variants)
    for j, variant in enumerate(variants):
        xs = np.arange(len(rows)) + (j - (len(variants) - 1) / 2) * width
        left.bar(
            xs,
            [r[f"{variant}/err"] for r in rows],
            width,
            yerr=[r[f"{variant}/err_sd"] for r in rows],
            capsize=3,
            color=f"C{j}",
            label=f"{LABELS[variant]} (K={int(rows[0][f'{variant}/samples'])})",
        )
    left.set_xticks(np.arange(len(rows)), [f"{r['name']}\nDelta={r['delta']:.1f}" for r in rows], fontsize=8)
    left.set_yscale("symlog", linthresh=0.1)
    left.axhline(0, color="k", lw=0.8)
    left.set_ylabel("estimate - log p(D*|D) (nats, mean ± sd)")
    left.set_title(f"log-PPD error, {cfg.estimate_repeats} repeats")
    left.legend(fontsize=8)
    delta_hard = next(r["delta"] for r in rows if r["name"] == hardest)
    for variant, color in (("baseline", "C0"), ("method", "C1")):
        errs = sweep[variant]
        for e in errs:
            right.plot(sweep[f"{variant}_k"], e, color=color, alpha=0.3, lw=0.8)
        right.plot(sweep[f"{variant}_k"], errs.mean(0), "o-", color=color, label=LABELS[variant])
    right.set_xscale("log")
    right.set_yscale("symlog", linthresh=0.1)
    right.axhline(0, color="k", lw=0.8)
    right.set_xlabel("samples K")
    right.set_ylabel("estimate - log p(D*|D) (nats)")
    right.set_title(f"{hardest}: Delta = {delta_hard:.0f}, simple MC needs K ~ e^Delta")
    right.legend(fontsize=8)
    return save(fig, path)


def plot_training(cfg, history: dict, rows: list[dict], path: Path) -> Path:
    """Exact KL(r || r*) and Delta_r of each proposal along its fit (validation points)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    for i, row in enumerate(rows):
        for proxy, style in zip(cfg.proposal.proxies, ("-", "--")):
            records = history[f"{row['name']}__{proxy}"]
            for ax, key in zip(axes, ("val/kl_exact", "val/delta_r_exact")):
                points = [(r["step"], r[key]) for r in records if key in r]
                if points:
                    ax.plot(*zip(*points), style, color=f"C{i}", marker=".", label=f"{row['name']} ({proxy})")
    titles = ("KL(r || r*): ELBO gap (nats)", "Delta_r = log E_r[w^2] - 2 log E_r[w] (missing: infinite)")
    for ax, title in zip(axes, titles):
        ax.set_yscale("log")
        ax.set_xlabel("Adam step")
        ax.set_title(title)
    axes[0].legend(fontsize=7)
    pc = cfg.proposal
    fig.suptitle(
        f"Test-time fit of the IS proposal (init r = q; Adam, lr chosen from {pc.lr_grid}, {pc.batch} samples/step)"
    )
    return save(fig, path)


def plot_heavy(cfg, rows: list[dict], history: dict, path: Path) -> Path:
    """Student-t part: log-PPD error of simple MC and learned IS per setting, and the proposal fits' exact
    KL(r || r*) (quadrature), with KL(r* || best Gaussian) as the floor no Gaussian proposal can beat."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5))
    xs = np.arange(len(rows))
    for j, variant in enumerate(("baseline", "method")):
        left.bar(
            xs + (j - 0.5) * 0.4,
            [r[f"{variant}/err"] for r in rows],
            0.4,
            yerr=[r[f"{variant}/err_sd"] for r in rows],
            capsize=3,
            color=f"C{j}",
            label=LABELS[variant],
        )
    left.set_xticks(xs, [f"{r['name']}\nDelta={r['delta']:.0f}" for r in rows], fontsize=8)
    left.set_yscale("symlog", linthresh=0.1)
    left.axhline(0, color="k", lw=0.8)
    left.set_ylabel("estimate - log p(D*|D) (nats, mean ± sd)")
    left.set_title(f"Student-t likelihood (nu={cfg.data.heavy.nu:g}): truth by quadrature")
    left.legend(fontsize=8)
    for i, row in enumerate(rows):
        points = [(r["step"], r["val/kl_exact"]) for r in history[f"{row['name']}__elbo"] if "val/kl_exact" in r]
        right.plot(*zip(*points), "-o", ms=3, color=f"C{i}", label=f"{row['name']}: KL(r || r*)")
        right.axhline(row["kl_star_to_family"], color=f"C{i}", ls=":", label=f"{row['name']}: KL(r* || Gaussians)")
    right.set_yscale("log")
    right.set_xlabel("Adam step")
    right.set_title("proposal fit (chosen learning rate)")
    right.legend(fontsize=7)
    return save(fig, path)


def plot_real(cfg, rows: list[dict], path: Path) -> Path:
    """posteriordb regressions: Delta per split, and the log-PPD error of simple MC vs learned full-rank IS."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 4.5))
    if not rows:
        left.set_title("no real data (data.source = synthetic)")
        return save(fig, path)
    names = [r["name"] for r in rows]
    xs = np.arange(len(rows))
    left.bar(xs, [r["delta"] for r in rows], color="C2")
    left.set_yscale("log")
    left.set_xticks(
        xs, [f"{n}\nd={r['d']}, m/n={r['m'] / r['n']:.2f}" for n, r in zip(names, rows)], fontsize=6, rotation=60
    )
    left.set_ylabel("Delta (closed form)")
    left.set_title("Bayesian linear regression on posteriordb: Delta per split (SNR ~ sqrt(K/(e^Delta-1)))")
    for j, variant in enumerate(("baseline", "method")):
        right.bar(
            xs + (j - 0.5) * 0.4,
            [r[f"{variant}/err"] for r in rows],
            0.4,
            yerr=[r[f"{variant}/err_sd"] for r in rows],
            capsize=2,
            color=f"C{j}",
            label=f"{LABELS[variant]} (K={int(rows[0][f'{variant}/samples'])})",
        )
    right.set_xticks(xs, names, fontsize=6, rotation=60)
    right.set_yscale("symlog", linthresh=0.01)
    right.axhline(0, color="k", lw=0.8)
    right.set_ylabel("estimate - log p(D*|D) (nats, mean ± sd)")
    right.set_title("log-PPD error (full-rank Gaussian r learned by ELBO)")
    right.legend(fontsize=8)
    return save(fig, path)
