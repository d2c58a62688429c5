"""Learning curves of SGD in kernel regression (Zhang, Lin, Liu & Fang, ICML 2025, arXiv:2505.22048).

Claim: single-pass, last-iterate kernel SGD with an exponentially decaying step size attains the
minimax excess-risk rate for every source condition s > 0, i.e. it does not saturate, unlike kernel
ridge regression (KRR) and constant-step SGD with iterate averaging (Dieuleveut & Bach 2016).
Official code: none (a theory paper, no repository known). Everything here re-implements the brief
``methods/kernel_sgd.md``.

Set-up (the brief's prototyped default): the circle S^1 (d = 2) with the inner-product kernel
k(a, b) = sum_{k<=K} 2 k^-beta cos(k (a - b)), K = 400, beta = 1.5, run in the primal with the exact
feature map of ``algorithm``; excess risk in closed form. Three estimators, each tuned per n on a grid
by the oracle (lowest seed-mean excess risk): step-decay SGD (last iterate), constant-step SGD
(uniform average of the iterates), KRR. Targets: the top eigenfunction sqrt(2) cos(theta) (claim),
power laws c_k = k^-(s beta + 1)/2 for s in ``data.sources`` (s = 1 is the must-pass slope check).
Variants: ``method`` = step-decay SGD, ``baseline`` = averaged constant-step SGD (the paper's figure
compares these two), ``baseline_krr`` = tuned KRR. For a power-law target the metric keys read
``<variant>/<target>_...`` (e.g. ``method/s1_slope``) and the learning curves ``<variant>_<target>``.

Claim check (``claim``): three criteria over the claim target's paired seeds, each a percentile
bootstrap: risk(n_max) of step-decay SGD / averaged SGD <= 0.75 and / KRR <= 0.75 (the brief's
"<= 0.75 x min(avg, KRR)"), and the slope of its seed-mean curve minus KRR's <= -0.1. evaluate emits
the per-seed tuned risks (``<variant>/seed<k>/excess_risk_n<n>``) they are rebuilt from.

Why no Lightning: the method *is* a per-sample recursion with a hand-set step-size schedule: no
mini-batches, epochs, autograd or optimiser state. All runs (every n, step size, schedule, seed and
target: hundreds of independent SGD runs) are one batched tensor recursion, updated sample by sample;
Lightning's one-model/one-optimiser loop would run them one after another. The risk needs no
validation loop (closed form).

Deliberate deviations and choices (with reasons):
- Step-size schedule [brief: inferred, the paper's constants unread]: n steps in stages of length
  m = ceil(n / log2 n), eta_t = eta0 2^-(l-1) in stage l, eta0 tuned on logspace(-3.5, -0.3, 9) /
  ||phi||^2 (so eta0 sup K(x, x) < 1).
- Fixed dimension d = 2 instead of the paper's high-dimensional sphere n ~ d^gamma: the brief's CPU
  set-up. It tests the fixed-d regime, where KRR and averaged SGD saturate at s > 2 (theory slope
  -2 beta / (2 beta + 1) = -0.75), not the large-d staircase. The ``paper`` scale is the same S^1 study
  at larger n, K and seed counts (GPU); the high-dimensional sphere (spherical-harmonic features or
  O(n^2) dual SGD) is not implemented.
- The targets are truncated to K harmonics and the labels are drawn from the truncated f*, so the
  model class contains f* and the closed-form risk is exact; the dropped tail energy
  sum_{k>K} c_k^2 is reported (``data/<target>_tail_energy``).
- Per-n oracle tuning uses one grid value for all seeds (the seed-mean minimiser), not one per seed,
  so the tuned curves are not biased by picking each seed's luckiest value.
- KRR minimises (1/n) sum (f(x_i) - y_i)^2 + lambda ||f||_H^2 (lambda on logspace(-8, -1, 15)); averaged
  SGD averages w_1..w_n. The brief's ``2 processes`` are replaced by the batched recursion, run
  single-threaded whatever PAPERLINE_THREADS says (``algorithm.one_thread``: threads only slowed it).
- Checks of the closed-form risk: exact equispaced quadrature (degree-2K exact) and Monte Carlo on
  ``data.test_points`` fresh points judged in standard errors (|z| < 4) rather than the brief's fixed
  2 %, which is only ~2 standard errors for a rough error function.
- Smoke scale uses 2 seeds and 5-point grids (brief: 1 seed, 3 points): with those the averaged-SGD
  tuned risk rose from n = 2^8 to 2^10 (grid too coarse), so the smoke curves meant nothing.
- Theory slopes are the textbook fixed-d rates (no log factors): minimax -s beta / (s beta + 1), -1 for
  the top eigenfunction; the paper's exact piecewise exponents were not available.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import torch

from models.base import ClaimResult, DatasetRef, Metrics, Scale, TrainedArtifacts, dataset_meta, write_manifest
from models.common import plotting
from models.common import verdicts as V
from models.common.runtime import show_progress
from models.kernel_sgd import algorithm as alg
from models.kernel_sgd.config import Config

# The brief's pass criteria (fixed; never tuned).
RISK_RATIO_MAX = 0.75  # risk_exp(n_max) <= 0.75 min(risk_avg, risk_KRR)
SLOPE_MARGIN = 0.1  # slope_exp <= slope_KRR - 0.1
SANITY_SLOPE_TOL = 0.1  # at s = 1 every slope within 0.1 of -s beta / (s beta + 1)
MC_Z_MAX = 4.0  # Monte-Carlo risk within 4 standard errors of the closed form

ESTIMATORS = ("exp_sgd", "avg_sgd", "krr")
VARIANT = {"exp_sgd": "method", "avg_sgd": "baseline", "krr": "baseline_krr"}
LABEL = {"exp_sgd": "exp-decay SGD (last iterate)", "avg_sgd": "const-step SGD (averaged)", "krr": "KRR (tuned ridge)"}
COLOR = {"exp_sgd": "tab:blue", "avg_sgd": "tab:red", "krr": "tab:green"}
CLAIM_TARGET = "top"
DATA_FILE = "stream.npz"
TABLE_FILE = "risk_tables.npz"
MODEL_FILE = "model.npz"


def _device(cfg: Config) -> torch.device:
    if cfg.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(cfg.device)


def _targets(cfg: Config) -> list[dict]:
    """The claim target first, then the power-law targets: name, source s (None = every s), seeds, noise."""
    d = cfg.data
    out = [{"name": CLAIM_TARGET, "source": None, "seeds": d.top_seeds, "noise": d.top_noise}]
    out += [{"name": f"s{s:g}", "source": s, "seeds": d.source_seeds, "noise": d.source_noise} for s in d.sources]
    return out


def _variant(target: str, estimator: str) -> str:
    return VARIANT[estimator] if target == CLAIM_TARGET else f"{VARIANT[estimator]}_{target}"


# ----------------------------------------------------------------------------- data


def prepare(cfg: Config, data_dir: Path) -> DatasetRef:
    """One stream of (theta_t, y_t) per seed and target; common random numbers across targets and methods."""
    d = cfg.data
    rng = np.random.default_rng(cfg.seed)
    targets = _targets(cfg)
    n_max, seeds = 2**d.log2_n_max, max(t["seeds"] for t in targets)
    theta = rng.uniform(0.0, 2.0 * np.pi, size=(seeds, n_max))
    noise = rng.standard_normal((seeds, n_max))
    theta_test = rng.uniform(0.0, 2.0 * np.pi, size=d.test_points)
    arrays = {"theta": theta, "theta_test": theta_test, "eigenvalues": alg.eigenvalues(d.harmonics, d.beta)}
    for t in targets:
        coef = alg.target_coefficients(t["source"], d.harmonics, d.beta)
        s = t["seeds"]
        arrays[f"coef_{t['name']}"] = coef
        arrays[f"y_{t['name']}"] = alg.target_function(theta[:s], coef) + t["noise"] * noise[:s]
        t["tail_energy"] = alg.tail_energy(t["source"], d.harmonics, d.beta)
    np.savez(Path(data_dir) / DATA_FILE, **arrays)
    meta = {
        **dataset_meta(
            "synthetic",
            f"generated from seed {cfg.seed}: uniform theta on S^1, kernel eigenvalues "
            f"k^-{d.beta:g} truncated at K = {d.harmonics}, n up to 2^{d.log2_n_max}, "
            f"targets {[t['name'] for t in targets]}",
        ),
        "generator": "uniform theta on S^1, y = f*(theta) + noise * N(0, 1); kernel sum_k 2 k^-beta cos(k(a-b))",
        "synthetic": True,
        "seed": cfg.seed,
        "harmonics": d.harmonics,
        "beta": d.beta,
        "n": [2**j for j in range(d.log2_n_min, d.log2_n_max + 1)],
        "seeds": seeds,
        "targets": targets,
        "feature_norm_sq": alg.feature_norm_sq(arrays["eigenvalues"]),
    }
    return write_manifest(data_dir, meta=meta)


def _load_stream(data: DatasetRef) -> dict[str, np.ndarray]:
    with np.load(data.file(DATA_FILE), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


# ----------------------------------------------------------------------------- training


def _trace_steps(n_max: int) -> list[int]:
    return sorted(set(np.unique(np.round(np.logspace(0, math.log10(n_max), 64)).astype(int)).tolist()))


def train(cfg: Config, data: DatasetRef, out_dir: Path) -> TrainedArtifacts:
    """Run every SGD run and the KRR path once; tune per n; save the risk tables and tuned final models.
    Single-threaded on purpose (see ``algorithm.one_thread``: PAPERLINE_THREADS > 1 only slows it)."""
    with alg.one_thread():
        return _train(cfg, data, out_dir)


def _train(cfg: Config, data: DatasetRef, out_dir: Path) -> TrainedArtifacts:
    device = _device(cfg)
    stream = _load_stream(data)
    targets, ns = data.meta["targets"], [int(n) for n in data.meta["n"]]
    lam = stream["eigenvalues"]
    norm_sq = alg.feature_norm_sq(lam)
    eta_norm = np.logspace(*cfg.eta_log10_range, cfg.eta_grid_size)  # eta0 * ||phi||^2
    ridges = np.logspace(*cfg.ridge_log10_range, cfg.ridge_grid_size)

    def tensor(x: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(x, dtype=torch.float64, device=device)

    # Batch = (target, seed) pairs; all pairs share the recursion.
    pairs = [(t["name"], s) for t in targets for s in range(t["seeds"])]
    theta_b = tensor(np.stack([stream["theta"][s, : ns[-1]] for _, s in pairs]))
    y_b = tensor(np.stack([stream[f"y_{name}"][s, : ns[-1]] for name, s in pairs]))
    coef_b = tensor(np.stack([stream[f"coef_{name}"] for name, _ in pairs]))
    trace_steps = _trace_steps(ns[-1])
    curves = alg.run_sgd(
        theta_b,
        y_b,
        coef_b,
        tensor(lam),
        tensor(eta_norm / norm_sq),
        ns,
        trace_steps,
        chunk=cfg.chunk,
        progress=show_progress(),
    )

    # KRR: one eigendecomposition per (seed, n), shared by every target drawn from that seed's stream.
    krr_risk, krr_final = {}, {}
    for s in range(int(data.meta["seeds"])):
        names = [t["name"] for t in targets if s < t["seeds"]]
        risk, final = alg.ridge_path(
            tensor(stream["theta"][s, : ns[-1]]),
            tensor(np.stack([stream[f"y_{name}"][s, : ns[-1]] for name in names], axis=1)),
            tensor(np.stack([stream[f"coef_{name}"] for name in names])),
            tensor(lam),
            tensor(ridges),
            ns,
            chunk=cfg.chunk,
        )
        for i, name in enumerate(names):
            krr_risk[name, s], krr_final[name, s] = risk[i], final[i]

    tables: dict[str, np.ndarray] = {
        "n": np.asarray(ns),
        "eta_norm": eta_norm,
        "ridges": ridges,
        "trace_steps": np.asarray(trace_steps),
    }
    models: dict[str, np.ndarray] = {"eigenvalues": lam}
    history: dict[str, list[dict[str, float]]] = {}
    summary: dict[str, float] = {
        "sgd_runs": float(len(pairs) * (len(ns) + 1) * len(eta_norm)),
        "sgd_samples_processed": float(len(pairs) * ns[-1]),
        "feature_norm_sq": norm_sq,
        "max_eta0_norm": float(eta_norm.max()),
    }
    for t in targets:
        name = t["name"]
        rows = [i for i, p in enumerate(pairs) if p[0] == name]
        risk = {  # (grid, n, seed)
            "exp_sgd": curves.exp_risk[rows].transpose(2, 1, 0),
            "avg_sgd": curves.avg_risk[rows].transpose(2, 1, 0),
            "krr": np.stack([krr_risk[name, s] for s in range(t["seeds"])], axis=-1),
        }
        finals = {"exp_sgd": curves.exp_final[rows[0]], "avg_sgd": curves.avg_final[rows[0]], "krr": krr_final[name, 0]}
        grids = {"exp_sgd": eta_norm, "avg_sgd": eta_norm, "krr": ridges}
        for est in ESTIMATORS:
            tables[f"{name}__{est}"] = risk[est]
            best, mean, sem = alg.oracle_tune(risk[est])
            models[f"{name}__{est}"] = finals[est][best[-1]]  # seed 0, tuned for n_max
            key = "tuned_ridge" if est == "krr" else "tuned_eta0_norm"
            history[_variant(name, est)] = [
                {"step": n, "excess_risk": float(m), "excess_risk_sem": float(e), key: float(grids[est][b])}
                for n, m, e, b in zip(ns, mean, sem, best)
            ]
            summary[f"{_variant(name, est)}/excess_risk_nmax"] = float(mean[-1])
        # Risk along the longest runs (the paper's figure), seed-mean, every grid value.
        for est, trace in (("exp_sgd", curves.exp_trace), ("avg_sgd", curves.avg_trace)):
            tables[f"{name}__{est}__trace"] = trace[rows].mean(0)  # (trace step, eta)
            if name == CLAIM_TARGET:
                tuned = tables[f"{name}__{est}__trace"][:, alg.oracle_tune(risk[est])[0][-1]]
                history[f"trace_{VARIANT[est]}"] = [
                    {"step": int(s), "excess_risk": float(r)} for s, r in zip(trace_steps, tuned)
                ]
    np.savez(Path(out_dir) / TABLE_FILE, **tables)
    np.savez(Path(out_dir) / MODEL_FILE, **models)
    return TrainedArtifacts(Path(out_dir), history=history, summary=summary)


def load_model(
    cfg: Config, model_dir: Path, target: str = CLAIM_TARGET, estimator: str = "exp_sgd"
) -> alg.SpectralEstimator:
    """The registered model: the tuned step-decay SGD estimate at n_max (seed 0) on the claim target."""
    with np.load(Path(model_dir) / MODEL_FILE, allow_pickle=False) as z:
        return alg.SpectralEstimator(weights=z[f"{target}__{estimator}"], eigenvalues=z["eigenvalues"])


# ----------------------------------------------------------------------------- evaluation


def evaluate(cfg: Config, data: DatasetRef, artifacts: TrainedArtifacts, out_dir: Path) -> Metrics:
    """Tuned learning curves, fitted slopes against theory, exactness checks, csv table and figures."""
    with alg.one_thread():
        return _evaluate(cfg, data, artifacts, out_dir)


def _evaluate(cfg: Config, data: DatasetRef, artifacts: TrainedArtifacts, out_dir: Path) -> Metrics:
    stream = _load_stream(data)
    lam, beta = stream["eigenvalues"], float(data.meta["beta"])
    with np.load(Path(artifacts.model_dir) / TABLE_FILE, allow_pickle=False) as z:
        tables = {k: z[k] for k in z.files}
    ns = tables["n"]
    lo, hi = (2**e for e in cfg.fit_log2_range)
    grids = {"exp_sgd": tables["eta_norm"], "avg_sgd": tables["eta_norm"], "krr": tables["ridges"]}
    values: dict[str, float] = {}
    curves: dict[str, dict[str, dict]] = {}
    rows = []
    quad_err = mc_z = table_err = 0.0
    decreases = True
    edges: list[str] = []  # (target, estimator, n) whose oracle choice sits on a grid end
    for t in data.meta["targets"]:
        name, source = t["name"], t["source"]
        prefix = "" if name == CLAIM_TARGET else f"{name}_"
        coef = stream[f"coef_{name}"]
        truth_test = alg.target_function(stream["theta_test"], coef)
        curves[name] = {}
        for est in ESTIMATORS:
            risk = tables[f"{name}__{est}"]
            best, mean, sem = alg.oracle_tune(risk)
            slope, intercept = alg.fit_slope(ns, mean, lo, hi)
            curves[name][est] = dict(mean=mean, sem=sem, slope=slope, intercept=intercept, tuned=grids[est][best])
            v = VARIANT[est]
            values[f"{v}/{prefix}excess_risk"] = float(mean[-1])
            if name == CLAIM_TARGET:  # per-seed tuned risks: the paired units of the claim's intervals
                chosen = risk[best, np.arange(len(ns))]  # (n, seed), one grid value per n for all seeds
                for j, n in enumerate(ns):
                    for seed in range(risk.shape[-1]):
                        values[f"{v}/seed{seed}/excess_risk_n{int(n)}"] = float(chosen[j, seed])
            values[f"{v}/{prefix}slope"] = slope
            values[f"theory/{prefix}slope_{est}"] = alg.theory_slope(est, source, beta)
            decreases &= bool(mean[-1] < mean[0])
            edges += [f"{name}/{est}/n={n}" for n, b in zip(ns, best) if b in (0, len(grids[est]) - 1)]
            for j, n in enumerate(ns):
                for seed in range(risk.shape[-1]):
                    rows.append(
                        [
                            name,
                            est,
                            int(n),
                            seed,
                            f"{risk[best[j], j, seed]:.6e}",
                            "ridge" if est == "krr" else "eta0_norm",
                            f"{grids[est][best[j]]:.4e}",
                        ]
                    )
            # The saved model: closed form vs exact quadrature vs the table vs Monte Carlo on fresh points.
            model = load_model(cfg, artifacts.model_dir, name, est)
            closed = float(alg.excess_risk(model.weights, coef, lam))
            quad_err = max(quad_err, abs(alg.quadrature_risk(model.weights, coef, lam) - closed) / closed)
            table_err = max(table_err, abs(risk[best[-1], -1, 0] - closed) / closed)
            sq = (model.predict(stream["theta_test"]) - truth_test) ** 2
            mc_z = max(mc_z, abs(sq.mean() - closed) / (sq.std(ddof=1) / math.sqrt(len(sq))))
        values[f"data/{prefix}tail_energy"] = float(t["tail_energy"])
    top = curves[CLAIM_TARGET]
    values["method/risk_ratio_vs_best_baseline"] = top["exp_sgd"]["mean"][-1] / min(
        top["avg_sgd"]["mean"][-1], top["krr"]["mean"][-1]
    )
    values["method/slope_minus_krr_slope"] = top["exp_sgd"]["slope"] - top["krr"]["slope"]
    values["method/tuned_eta0_norm_nmax"] = float(top["exp_sgd"]["tuned"][-1])
    values["check/quadrature_rel_err"] = quad_err
    values["check/table_rel_err"] = table_err
    values["check/mc_max_abs_z"] = float(mc_z)
    values["check/max_eta0_norm"] = float(tables["eta_norm"].max())
    values["check/risk_decreases"] = float(decreases)
    values["check/tuned_at_grid_edge"] = float(len(edges))
    claim_edges = [e for e in edges if e.startswith(f"{CLAIM_TARGET}/") and e.endswith(f"n={ns[-1]}")]
    values["check/tuned_at_grid_edge_nmax_claim"] = float(len(claim_edges) > 0)

    out_dir = Path(out_dir)
    (out_dir / "grid_edges.json").write_text(json.dumps(edges, indent=1))
    with open(out_dir / "learning_curves.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["target", "estimator", "n", "seed", "excess_risk", "tuned", "tuned_value"])
        writer.writerows(rows)
    figures = [
        _plot_learning_curves(cfg, data, ns, curves, out_dir / "plots" / "learning_curves.png"),
        _plot_trace(tables, curves, out_dir / "plots" / "risk_vs_iteration.png"),
        _plot_tuning(ns, curves, out_dir / "plots" / "tuned_hyperparameters.png"),
    ]
    return Metrics(values, figures)


def _title(t: dict) -> str:
    what = "f* = √2 cos θ (every s)" if t["source"] is None else f"c_k = k^-(sβ+1)/2, s = {t['source']:g}"
    return f"{what}, σ = {t['noise']:g}, {t['seeds']} seeds"


def _plot_learning_curves(cfg: Config, data: DatasetRef, ns, curves, path: Path) -> Path:
    plt = plotting.pyplot()
    targets = data.meta["targets"]
    fig, axes = plt.subplots(1, len(targets), figsize=(5.2 * len(targets), 4.3), squeeze=False)
    lo, hi = (2**e for e in cfg.fit_log2_range)
    fit_n = ns[(ns >= lo) & (ns <= hi)]
    beta = float(data.meta["beta"])
    for ax, t in zip(axes[0], targets):
        for est in ESTIMATORS:
            c = curves[t["name"]][est]
            ax.errorbar(
                ns,
                c["mean"],
                yerr=c["sem"],
                fmt="o",
                ms=4,
                color=COLOR[est],
                capsize=2,
                label=f"{LABEL[est]}: slope {c['slope']:.2f}",
            )
            ax.plot(fit_n, np.exp(c["intercept"]) * fit_n ** c["slope"], "-", color=COLOR[est], lw=1.2)
        # Theory slopes, anchored at the exp-decay fit at the start of the window.
        anchor = np.exp(curves[t["name"]]["exp_sgd"]["intercept"]) * fit_n[0] ** curves[t["name"]]["exp_sgd"]["slope"]
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
        ax.set_title(_title(t), fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3, which="both")
    fig.suptitle(f"Learning curves on S¹ (kernel eigenvalues k^-β, β = {beta:g}), oracle-tuned per n", fontsize=10)
    return plotting.save(fig, path)


def _plot_trace(tables, curves, path: Path) -> Path:
    plt = plotting.pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.3))
    steps = tables["trace_steps"]
    n_max = int(tables["n"][-1])
    grid = tables["eta_norm"]
    for est in ("exp_sgd", "avg_sgd"):
        best = int(np.argmin(np.abs(grid - curves[CLAIM_TARGET][est]["tuned"][-1])))
        trace = tables[f"{CLAIM_TARGET}__{est}__trace"][:, best]
        ax.plot(steps, trace, color=COLOR[est], label=f"{LABEL[est]}, η₀‖φ‖² = {grid[best]:.2g}")
    m = alg.stage_length(n_max)
    for b in range(m, n_max, m):
        ax.axvline(b, color="tab:blue", alpha=0.3, lw=0.6, ls=":")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("step t")
    ax.set_ylabel("excess risk of the current estimate")
    ax.set_title(f"One run of n = {n_max} steps, f* = √2 cos θ (tuned for n_max; stage ends shaded)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    return plotting.save(fig, path)


def _plot_tuning(ns, curves, path: Path) -> Path:
    plt = plotting.pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for name, by_est in curves.items():
        style = "-o" if name == CLAIM_TARGET else "--s"
        for est in ("exp_sgd", "avg_sgd"):
            ax1.plot(ns, by_est[est]["tuned"], style, color=COLOR[est], ms=4, label=f"{LABEL[est]}, {name}")
        ax2.plot(ns, by_est["krr"]["tuned"], style, ms=4, label=f"KRR, {name}")
    for ax, label in ((ax1, "tuned η₀ ‖φ‖²"), (ax2, "tuned ridge λ")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("n")
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3, which="both")
    fig.suptitle("Oracle-tuned hyperparameters per n", fontsize=10)
    return plotting.save(fig, path)


# ----------------------------------------------------------------------------- claim


def _per_seed_risks(cfg: Config, values: dict[str, float], variant: str) -> np.ndarray:
    """(n, seed) tuned excess risks of the claim target, rebuilt from evaluate's per-seed keys."""
    d = cfg.data
    return np.array(
        [
            [values[f"{variant}/seed{seed}/excess_risk_n{2**j}"] for seed in range(d.top_seeds)]
            for j in range(d.log2_n_min, d.log2_n_max + 1)
        ]
    )


def claim(cfg: Config, metrics: Metrics) -> ClaimResult:
    """The brief's two conjuncts as criteria over the claim target's paired seeds (common random numbers:
    seed k's stream feeds every estimator). "risk <= 0.75 min(avg, KRR)" is one ratio criterion per
    baseline; the slope gap is a bootstrap over seeds of the slope of the seed-mean curves, as today's
    number is. The per-n oracle tuning is held fixed inside the bootstrap (not re-tuned per resample)."""
    v = metrics.values
    ns = np.array([2**j for j in range(cfg.data.log2_n_min, cfg.data.log2_n_max + 1)])
    lo, hi = (2**e for e in cfg.fit_log2_range)
    risks = {est: _per_seed_risks(cfg, v, VARIANT[est]) for est in ESTIMATORS}
    units = "paired seeds (common data streams)"
    criteria = [
        V.ratio_of_means_criterion(
            f"risk_ratio_vs_{est}",
            f"excess risk at n = {ns[-1]}: step-decay SGD / {LABEL[est]} (seed means)",
            risks["exp_sgd"][-1],
            risks[est][-1],
            RISK_RATIO_MAX,
            "<=",
            units=units,
        )
        for est in ("avg_sgd", "krr")
    ]
    fit = (ns >= lo) & (ns <= hi)
    n_fit = int(fit.sum())

    def slope_gap(*per_n: np.ndarray) -> float:  # per_n: step-decay risks at each fitted n, then KRR's
        exp_mean = np.array([a.mean() for a in per_n[:n_fit]])
        krr_mean = np.array([a.mean() for a in per_n[n_fit:]])
        return alg.fit_slope(ns[fit], exp_mean, lo, hi)[0] - alg.fit_slope(ns[fit], krr_mean, lo, hi)[0]

    criteria.append(
        V.bootstrap_criterion(
            "slope_gap_vs_krr",
            f"log-log slope over n in [2^{cfg.fit_log2_range[0]}, 2^{cfg.fit_log2_range[1]}] of the seed-mean curve: "
            "step-decay SGD minus KRR",
            slope_gap,
            [*risks["exp_sgd"][fit], *risks["krr"][fit]],
            -SLOPE_MARGIN,
            "<=",
            units=units,
        )
    )
    figures = {
        "risk_ratio_exp_vs_best_baseline": v["method/risk_ratio_vs_best_baseline"],
        "slope_exp_minus_slope_krr": v["method/slope_minus_krr_slope"],
        "risk_exp_nmax": v["method/excess_risk"],
        "risk_avg_nmax": v["baseline/excess_risk"],
        "risk_krr_nmax": v["baseline_krr/excess_risk"],
        "slope_exp": v["method/slope"],
        "slope_avg": v["baseline/slope"],
        "slope_krr": v["baseline_krr/slope"],
        "theory_slope_exp": v["theory/slope_exp_sgd"],
        "theory_slope_saturated": v["theory/slope_krr"],
    }
    sanity = {
        "closed_form_risk_exact": bool(v["check/quadrature_rel_err"] < 1e-8 and v["check/table_rel_err"] < 1e-8),
        "closed_form_matches_monte_carlo": bool(v["check/mc_max_abs_z"] < MC_Z_MAX),
        "step_sizes_stable": bool(v["check/max_eta0_norm"] < 1.0),
        "tuned_risk_decreases_with_n": bool(v["check/risk_decreases"] == 1.0),
    }
    for est, short in (("method", "exp"), ("baseline", "avg"), ("baseline_krr", "krr")):
        figures[f"s1_slope_{short}"] = v[f"{est}/s1_slope"]
    figures["s1_theory_slope"] = v["theory/s1_slope_exp_sgd"]
    if cfg.scale == Scale.default:  # slopes at smoke scale (3 points, 1 seed) mean nothing
        sanity["s1_slopes_within_0.1_of_theory"] = bool(
            all(
                abs(figures[f"s1_slope_{s}"] - figures["s1_theory_slope"]) <= SANITY_SLOPE_TOL
                for s in ("exp", "avg", "krr")
            )
        )
    for name in (f"s{s:g}" for s in cfg.data.sources if s != 1.0):  # reported, not judged
        for est, short in (("method", "exp"), ("baseline", "avg"), ("baseline_krr", "krr")):
            figures[f"{name}_slope_{short}"] = v[f"{est}/{name}_slope"]
    notes = (
        f"Claim target f* = sqrt(2) cos theta; slopes fitted over n in [2^{cfg.fit_log2_range[0]}, "
        f"2^{cfg.fit_log2_range[1]}]; intervals are percentile bootstraps over the {cfg.data.top_seeds} paired seeds. "
        f"Tuned eta0 ||phi||^2 at n_max = {v['method/tuned_eta0_norm_nmax']:.3g}. "
        f"{int(v['check/tuned_at_grid_edge'])} (target, estimator, n) oracle choices sit on a grid end "
        f"(listed in grid_edges.json; claim target at n_max: {'yes' if v['check/tuned_at_grid_edge_nmax_claim'] else 'no'}). "
        "The step-decay schedule constants are a reconstruction (the paper's were not read)."
    )
    statement = (
        "Step-decay last-iterate kernel SGD beats saturated averaged SGD and tuned KRR on a very smooth target: "
        f"risk(n_max) <= {RISK_RATIO_MAX} x best baseline and slope <= slope_KRR - {SLOPE_MARGIN}"
    )
    return ClaimResult(statement, criteria, sanity=sanity, figures=figures, notes=notes)
