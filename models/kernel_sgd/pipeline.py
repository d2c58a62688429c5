"""Learning curves of SGD in kernel regression (Zhang, Lin, Liu & Fang, ICML 2025, arXiv:2505.22048).

Claim: single-pass, last-iterate kernel SGD with an exponentially decaying step size attains the
minimax excess-risk rate for every source condition s > 0 at every scale n ~ d^gamma, i.e. it does
not saturate, unlike kernel ridge regression (KRR) and constant-step SGD with iterate averaging
(Dieuleveut & Bach 2016). Official code: none (a theory paper, no repository known). Everything
here re-implements the brief ``methods/kernel_sgd.md``; the paper's experiments are synthetic, and so
is the data here (``data.py``: two seeded generators, recorded as ``synthetic`` in the manifest).

Two regimes, both judged by the claim:

* Fixed dimension (the brief's prototyped default): the circle S^1 (d = 2) with the inner-product
  kernel k(a, b) = sum_{k<=K} 2 k^-beta cos(k (a - b)), K = 400, beta = 1.5, run in the primal with the
  exact feature map of ``algorithm``. Targets: the top eigenfunction sqrt(2) cos(theta) (claim),
  power laws c_k = k^-(s beta + 1)/2 for s in ``data.sources`` (s = 1 is the must-pass slope check).
  n = 2^9 ... 2^15. KRR and averaged SGD saturate at s > 2 here.
* High dimension (the paper's headline, REVIEW.md): the sphere S^{d-1}, d = 10, with the inner-product
  kernel Phi(t) = sum_{k<=5} d^-k N(d, k) P_k(t) (Gegenbauer P_k), n = round(d^gamma) for gamma = 1,
  1.25, ..., 3, run in the dual. Targets: zonal harmonics with per-degree energy c_k^2 = mu_k^s (each
  degree on the edge of the [H]^s ball, one random direction per degree and seed) for s = 2 (claim)
  and s = 1 (reported). In large dimension KRR saturates already for s > 1 (Zhang, Li, Lu & Lin 2024,
  abstract), so s = 2 is the smallest integer source where the paper's advantage can show.

Three estimators per regime, each tuned per n on a declared grid by the oracle (lowest seed-mean
excess risk): step-decay SGD (last iterate), constant-step SGD (uniform average of the iterates), KRR.
Variants: ``method`` = step-decay SGD, ``baseline`` = averaged constant-step SGD (the paper's figure
compares these two), ``baseline_krr`` = tuned KRR. Metric keys: ``<variant>/excess_risk`` (circle claim
target at n_max), ``<variant>/<target>_...`` otherwise (``method/s1_slope``, ``method/sphere_s2_excess_risk``),
learning curves ``<variant>`` / ``<variant>_<target>``.

Claim check (``claim``), over each regime's paired seeds (seed k's stream feeds every estimator),
delta-method and jackknife intervals:
- circle: risk(n_max) of step-decay SGD / averaged SGD <= 0.75 and / KRR <= 0.75 (the brief's
  "<= 0.75 x min(avg, KRR)"), and the slope of its seed-mean curve minus KRR's <= -0.1;
- sphere: the geometric mean over n = d^gamma, gamma in ``sphere.judged_gamma`` = [1.5, 2.5], of the
  risk ratio step-decay SGD / averaged SGD <= 0.75 and / KRR <= 0.75 (the same bar as the circle). In
  large d the rate is read at fixed gamma, so a log-log slope in n at one d is not the paper's exponent
  and is reported only. The window is the interior of gamma in (1, 3), where for s = 2 a bias-variance
  count puts the saturation of a qualification-1 method (fixed before any run; the exact rate formulas
  of the paper were not read).
evaluate records the per-seed tuned risks as paired units (``excess_risk_n<n>``,
``sphere_s2_excess_risk_n<n>`` per arm) the criteria are rebuilt from.

Why no Lightning: the method *is* a per-sample recursion with a hand-set step-size schedule: no
mini-batches, epochs, autograd or optimiser state. All runs (every n, step size, schedule, seed and
target) are one batched tensor recursion, updated sample by sample; Lightning's
one-model/one-optimiser loop would run them one after another. The risk needs no validation loop
(closed form).

Deliberate deviations and choices (with reasons):
- Tuning: the oracle on the exact excess risk, one grid value per n for all seeds (the seed-mean
  minimiser), the same protocol for every arm, rather than REVIEW.md's validation split: a learning
  curve of a rate theorem is the tuned curve, and a feasible hold-out cannot resolve the differences at
  stake (risks of 1e-3-1e-2 against a held-out MSE whose noise std is about sigma^2 sqrt(2 / m)). There
  are no epochs to stop early: n, the number of single-pass steps, is the experiment's axis. The tuned
  values per n are logged (history ``tuned_*``, figure ``tuned_hyperparameters.png``) and the choices
  that sit on a grid end are listed in ``grid_edges.json``.
- Step-size schedule [brief: inferred, the paper's constants unread]: n steps in stages of length
  m = ceil(n / log2 n), eta_t = eta0 2^-(l-1) in stage l, eta0 tuned on logspace(-3.5, -0.3, 9) / sup K on
  the circle and on logspace(-2.5, -0.1, 9) / sup K on the sphere (eta0 sup K(x, x) < 1 either way).
- The sphere kernel is truncated at degree L = 5 (d^5 = 10^5 >> n_max = 10^3; the dropped trace
  sum_{k>5} d^-k N(d, k) is below 2e-3), with eigenvalues exactly d^-k, so the target lies in the model
  class and the dual risk a' M a - 2 a' b + ||f*||^2 is exact. The brief's paper scale (d up to 100,
  n up to 10^6) is beyond an n x n dual Gram matrix; ``paper`` runs d = 20 up to n = 8000.
- The circle targets are truncated to K harmonics and the labels are drawn from the truncated f*, so
  the closed-form risk is exact; the dropped tail energy sum_{k>K} c_k^2 is reported
  (``data/<target>_tail_energy``).
- KRR minimises (1/n) sum (f(x_i) - y_i)^2 + lambda ||f||_H^2 (circle: lambda on logspace(-8, -1, 15);
  sphere: logspace(-6, 1, 15)); averaged SGD averages f_1..f_n. The brief's ``2 processes`` are
  replaced by the batched recursions, run single-threaded whatever PAPERLINE_THREADS says
  (``algorithm.one_thread``: threads only slowed it).
- Checks of the closed-form risks: exact equispaced quadrature on the circle (degree-2K exact), and Monte
  Carlo on fresh points in both regimes judged in standard errors (|z| < 4) rather than the brief's
  fixed 2 %, which is only ~2 standard errors for a rough error function.
- Smoke scale uses 2 seeds and 5-point grids (brief: 1 seed, 3 points): with those the averaged-SGD
  tuned risk rose from n = 2^8 to 2^10 (grid too coarse), so the smoke curves meant nothing.
- Theory slopes on the circle are the textbook fixed-d rates (no log factors): minimax -s beta / (s beta + 1),
  -1 for the top eigenfunction; the paper's exact piecewise exponents were not available, so the sphere
  curves carry no theory line.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import torch

from models.base import (
    ClaimResult,
    Control,
    DatasetRef,
    Metrics,
    Scale,
    Separation,
    TrainedArtifacts,
    dataset_meta,
    write_manifest,
)
from models.common import evidence
from models.common import verdicts as V
from models.common.runtime import show_progress
from models.common.units import UnitValues, unit_labels

from . import algorithm as alg
from . import data as D
from . import plots
from .config import Config

# The brief's pass criteria (fixed; never tuned). The sphere uses the circle's risk bar.
RISK_RATIO_MAX = 0.75  # risk_exp <= 0.75 x the baseline's
SLOPE_MARGIN = 0.1  # slope_exp <= slope_KRR - 0.1 (circle)
SANITY_SLOPE_TOL = 0.1  # at s = 1 every circle slope within 0.1 of -s beta / (s beta + 1)
MC_Z_MAX = 4.0  # Monte-Carlo risk within 4 standard errors of the closed form
LEARNS_FRACTION = 0.5  # must-pass: every sphere arm ends below half the zero predictor's risk ||f*||^2

VARIANT = {"exp_sgd": "method", "avg_sgd": "baseline", "krr": "baseline_krr"}
CLAIM_TARGET = D.CLAIM_TARGET
DATA_FILE = "stream.npz"
TABLE_FILE = "risk_tables.npz"
MODEL_FILE = "model.npz"


def _device(cfg: Config) -> torch.device:
    if cfg.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(cfg.device)


def _variant(target: str, estimator: str) -> str:
    return VARIANT[estimator] if target == CLAIM_TARGET else f"{VARIANT[estimator]}_{target}"


# ----------------------------------------------------------------------------- data


def prepare(cfg: Config, data_dir: Path) -> DatasetRef:
    """Both regimes' streams from the seed (``data.py``); common random numbers across targets and methods."""
    d = cfg.data
    circle, targets = D.circle_arrays(cfg)
    sphere, sphere_meta = D.sphere_arrays(cfg)
    np.savez(Path(data_dir) / DATA_FILE, **circle, **sphere)
    meta = {
        **dataset_meta(
            "synthetic",
            D.provenance(cfg),
            real_data="none: the paper's experiments are synthetic (a theory paper; no benchmark dataset exists)",
        ),
        "generator": (
            "circle: uniform theta on S^1, y = f*(theta) + noise * N(0, 1), kernel sum_k 2 k^-beta cos(k(a-b)); "
            "sphere: uniform x on S^{d-1}, y = f*(x) + noise * N(0, 1), kernel sum_k d^-k N(d,k) P_k(<x,x'>)"
        ),
        "synthetic": True,
        "seed": cfg.seed,
        "harmonics": d.harmonics,
        "beta": d.beta,
        "n": [2**j for j in range(d.log2_n_min, d.log2_n_max + 1)],
        "seeds": max(t["seeds"] for t in targets),
        "targets": targets,
        "feature_norm_sq": alg.feature_norm_sq(circle["eigenvalues"]),
        "sphere": sphere_meta,
    }
    return write_manifest(data_dir, meta=meta)


def _load_stream(data: DatasetRef) -> dict[str, np.ndarray]:
    with np.load(data.file(DATA_FILE), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


# ----------------------------------------------------------------------------- training


def _trace_steps(n_max: int) -> list[int]:
    return sorted(set(np.unique(np.round(np.logspace(0, math.log10(n_max), 64)).astype(int)).tolist()))


def train(cfg: Config, data: DatasetRef, out_dir: Path) -> TrainedArtifacts:
    """Run every SGD run and the KRR paths of both regimes once; tune per n; save the risk tables and the
    tuned final models. Single-threaded on purpose (``algorithm.one_thread``: more threads only slow it)."""
    with alg.one_thread():
        tables: dict[str, np.ndarray] = {}
        models: dict[str, np.ndarray] = {}
        history: dict[str, list[dict[str, float]]] = {}
        summary: dict[str, float] = {}
        stream = _load_stream(data)
        device = _device(cfg)
        _train_circle(cfg, data, stream, device, tables, models, history, summary)
        _train_sphere(cfg, data, stream, device, tables, models, history, summary)
        np.savez(Path(out_dir) / TABLE_FILE, **tables)
        np.savez(Path(out_dir) / MODEL_FILE, **models)
        return TrainedArtifacts(Path(out_dir), history=history, summary=summary)


def _tuned_history(ns, risk, grid, key, arm: str = ""):
    """Oracle choice per n and the learning-curve records of one (target, estimator). With ``arm`` (a claim
    target's estimator) every per-n choice is recorded for the verdict diagnostics (grid edges)."""
    best, mean, sem = alg.oracle_tune(risk)
    axis = key.removeprefix("tuned_")
    for j, n in enumerate(ns) if arm else ():
        table = [{axis: float(g), "n": int(n), "val_excess_risk": float(r)} for g, r in zip(grid, risk[:, j].mean(-1))]
        chosen = {axis: float(grid[best[j]]), "n": int(n)}
        evidence.record_selection(evidence.SelectionRecord(arm, "", "excess_risk", chosen, table))
    records = [
        {"step": int(n), "excess_risk": float(m), "excess_risk_sem": float(e), key: float(grid[b])}
        for n, m, e, b in zip(ns, mean, sem, best)
    ]
    return best, mean, records


def _train_circle(cfg, data, stream, device, tables, models, history, summary) -> None:
    targets, ns = data.meta["targets"], [int(n) for n in data.meta["n"]]
    lam = stream["eigenvalues"]
    norm_sq = alg.feature_norm_sq(lam)
    eta_norm = np.logspace(*cfg.eta_log10_range, cfg.eta_grid_size)  # eta0 * ||phi||^2
    ridges = np.logspace(*cfg.ridge_log10_range, cfg.ridge_grid_size)

    def tensor(x: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(x, dtype=torch.float64, device=device)

    # Batch = (target, seed) pairs; all pairs share the recursion.
    pairs = [(t["name"], s) for t in targets for s in range(t["seeds"])]
    trace_steps = _trace_steps(ns[-1])
    curves = alg.run_sgd(
        tensor(np.stack([stream["theta"][s, : ns[-1]] for _, s in pairs])),
        tensor(np.stack([stream[f"y_{name}"][s, : ns[-1]] for name, s in pairs])),
        tensor(np.stack([stream[f"coef_{name}"] for name, _ in pairs])),
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

    tables.update({"n": np.asarray(ns), "eta_norm": eta_norm, "ridges": ridges, "trace_steps": np.asarray(trace_steps)})
    models["eigenvalues"] = lam
    summary.update(
        {
            "sgd_runs": float(len(pairs) * (len(ns) + 1) * len(eta_norm)),
            "sgd_samples_processed": float(len(pairs) * ns[-1]),
            "feature_norm_sq": norm_sq,
            "max_eta0_norm": float(eta_norm.max()),
        }
    )
    grids = {"exp_sgd": eta_norm, "avg_sgd": eta_norm, "krr": ridges}
    for t in targets:
        name = t["name"]
        rows = [i for i, p in enumerate(pairs) if p[0] == name]
        risk = {  # (grid, n, seed)
            "exp_sgd": curves.exp_risk[rows].transpose(2, 1, 0),
            "avg_sgd": curves.avg_risk[rows].transpose(2, 1, 0),
            "krr": np.stack([krr_risk[name, s] for s in range(t["seeds"])], axis=-1),
        }
        finals = {"exp_sgd": curves.exp_final[rows[0]], "avg_sgd": curves.avg_final[rows[0]], "krr": krr_final[name, 0]}
        for est in alg.ESTIMATORS:
            tables[f"{name}__{est}"] = risk[est]
            key = "tuned_ridge" if est == "krr" else "tuned_eta0_norm"
            arm = _variant(name, est) if name == CLAIM_TARGET else ""
            best, mean, history[_variant(name, est)] = _tuned_history(ns, risk[est], grids[est], key, arm)
            models[f"{name}__{est}"] = finals[est][best[-1]]  # seed 0, tuned for n_max
            summary[f"{_variant(name, est)}/excess_risk_nmax"] = float(mean[-1])
            summary[f"select/{_variant(name, est)}/{key}_nmax"] = float(grids[est][best[-1]])
        # Risk along the longest runs (the paper's figure), seed-mean, every grid value.
        for est, trace in (("exp_sgd", curves.exp_trace), ("avg_sgd", curves.avg_trace)):
            tables[f"{name}__{est}__trace"] = trace[rows].mean(0)  # (trace step, eta)
            if name == CLAIM_TARGET:
                tuned = tables[f"{name}__{est}__trace"][:, alg.oracle_tune(risk[est])[0][-1]]
                history[f"trace_{VARIANT[est]}"] = [
                    {"step": int(s), "excess_risk": float(r)} for s, r in zip(trace_steps, tuned)
                ]


def _sphere_problem(stream, meta, seed: int, device) -> dict[str, torch.Tensor]:
    """One seed's sphere stream as tensors: points, Gram matrices K and M, labels y and b = E K(x_i, .) f*."""
    dim = int(meta["dim"])
    names = [t["name"] for t in meta["targets"]]

    def tensor(x) -> torch.Tensor:
        return torch.as_tensor(x, dtype=torch.float64, device=device)

    x, mu = tensor(stream["sphere_x"][seed]), tensor(stream["sphere_eigenvalues"])
    directions = tensor(stream["sphere_directions"][seed])
    return {
        "x": x,
        "gram": alg.sphere_kernel(x, x, mu, dim),
        "msq": alg.sphere_kernel_square(x, x, mu, dim),
        "y": tensor(np.stack([stream[f"{name}_y"][seed] for name in names])),
        "b": torch.stack(
            [alg.zonal_target(x, directions, tensor(stream[f"{name}_amplitude"]), dim, filt=mu) for name in names]
        ),
        "norm_sq": tensor([t["norm_sq"] for t in meta["targets"]]),
    }


def _train_sphere(cfg, data, stream, device, tables, models, history, summary) -> None:
    meta, sp = data.meta["sphere"], cfg.sphere
    ns, seeds, names = [int(n) for n in meta["n"]], int(meta["seeds"]), [t["name"] for t in meta["targets"]]
    eta_norm = np.logspace(*sp.eta_log10_range, sp.eta_grid_size)  # eta0 * K(x, x)
    ridges = np.logspace(*sp.ridge_log10_range, sp.ridge_grid_size)
    eta0 = torch.as_tensor(eta_norm / float(meta["kernel_diagonal"]), dtype=torch.float64, device=device)
    ridge_t = torch.as_tensor(ridges, dtype=torch.float64, device=device)
    grids = {"exp_sgd": eta_norm, "avg_sgd": eta_norm, "krr": ridges}
    risk = {est: np.zeros((len(names), len(grids[est]), len(ns), seeds)) for est in alg.ESTIMATORS}
    final: dict[str, np.ndarray] = {}  # seed 0 at n_max: (targets, grid, n_max) dual coefficients
    for seed in range(seeds):
        p = _sphere_problem(stream, meta, seed, device)
        runs = alg.dual_sgd(p["gram"], p["y"], eta0, ns)
        for j, n in enumerate(ns):
            msq, b, norm_sq = p["msq"][:n, :n], p["b"][:, None, :n], p["norm_sq"][:, None]
            coefs = {
                "exp_sgd": runs.step_decay(j),
                "avg_sgd": runs.averaged(j),
                "krr": alg.dual_ridge_path(p["gram"], p["y"], ridge_t, n),
            }
            for est, coef in coefs.items():
                risk[est][:, :, j, seed] = alg.dual_risk(coef, msq, b, norm_sq).cpu().numpy()
                if seed == 0 and j == len(ns) - 1:
                    final[est] = coef.cpu().numpy()
    tables.update({"sphere_n": np.asarray(ns), "sphere_eta_norm": eta_norm, "sphere_ridges": ridges})
    models["sphere_support"] = stream["sphere_x"][0, : ns[-1]]
    models["sphere_eigenvalues"] = stream["sphere_eigenvalues"]
    summary["sphere_sgd_runs"] = float(len(names) * seeds * (len(ns) + 1) * len(eta_norm))
    summary["sphere_max_eta0_norm"] = float(eta_norm.max())
    for i, name in enumerate(names):
        for est in alg.ESTIMATORS:
            table = risk[est][i]  # (grid, n, seed)
            tables[f"{name}__{est}"] = table
            key = "tuned_ridge" if est == "krr" else "tuned_eta0_norm"
            arm = _variant(name, est) if name == meta["claim_target"] else ""
            best, mean, history[_variant(name, est)] = _tuned_history(ns, table, grids[est], key, arm)
            models[f"{name}__{est}"] = final[est][i, best[-1]]
            summary[f"{_variant(name, est)}/excess_risk_nmax"] = float(mean[-1])
            summary[f"select/{_variant(name, est)}/{key}_nmax"] = float(grids[est][best[-1]])


def load_model(
    cfg: Config, model_dir: Path, target: str = CLAIM_TARGET, estimator: str = "exp_sgd"
) -> alg.SpectralEstimator | alg.SphereEstimator:
    """The registered model: the tuned step-decay SGD estimate at n_max (seed 0) on the circle's claim target.
    ``target="sphere_s<s>"`` gives a sphere estimate instead."""
    with np.load(Path(model_dir) / MODEL_FILE, allow_pickle=False) as z:
        if target.startswith("sphere_"):
            return alg.SphereEstimator(z["sphere_support"], z[f"{target}__{estimator}"], z["sphere_eigenvalues"])
        return alg.SpectralEstimator(weights=z[f"{target}__{estimator}"], eigenvalues=z["eigenvalues"])


# ----------------------------------------------------------------------------- evaluation


def evaluate(cfg: Config, data: DatasetRef, artifacts: TrainedArtifacts, out_dir: Path) -> Metrics:
    """Tuned learning curves of both regimes, slopes against theory (circle), exactness checks, csv table, figures."""
    with alg.one_thread():
        stream = _load_stream(data)
        with np.load(Path(artifacts.model_dir) / TABLE_FILE, allow_pickle=False) as z:
            tables = {k: z[k] for k in z.files}
        metrics = Metrics({}, [])
        values = metrics.values
        rows: list[list] = []
        edges: list[str] = []  # (target, estimator, n) whose oracle choice sits on a grid end
        circle = _evaluate_circle(cfg, data, stream, tables, artifacts, metrics, rows, edges)
        sphere = _evaluate_sphere(cfg, data, stream, tables, artifacts, metrics, rows, edges)
        values["check/tuned_at_grid_edge"] = float(len(edges))
        n_max = int(tables["n"][-1])
        claim_edges = [e for e in edges if e.startswith(f"{CLAIM_TARGET}/") and e.endswith(f"n={n_max}")]
        values["check/tuned_at_grid_edge_nmax_claim"] = float(len(claim_edges) > 0)

        out_dir = Path(out_dir)
        (out_dir / "grid_edges.json").write_text(json.dumps(edges, indent=1))
        with open(out_dir / "learning_curves.csv", "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["target", "estimator", "n", "seed", "excess_risk", "tuned", "tuned_value"])
            writer.writerows(rows)
        plot_dir = out_dir / "plots"
        beta = float(data.meta["beta"])
        fit = tuple(2**e for e in cfg.fit_log2_range)
        meta = data.meta["sphere"]
        figures = [
            plots.circle_learning_curves(
                data.meta["targets"], tables["n"], circle, fit, beta, plot_dir / "learning_curves.png"
            ),
            plots.sphere_learning_curves(
                meta, sphere, cfg.sphere.judged_gamma, plot_dir / "sphere_learning_curves.png"
            ),
            plots.risk_trace(
                tables,
                {est: circle[CLAIM_TARGET][est]["tuned"][-1] for est in ("exp_sgd", "avg_sgd")},
                CLAIM_TARGET,
                plot_dir / "risk_vs_iteration.png",
            ),
            plots.tuned_hyperparameters(
                tables["n"],
                circle,
                tables["sphere_n"],
                sphere,
                meta["claim_target"],
                plot_dir / "tuned_hyperparameters.png",
            ),
        ]
        metrics.figures = figures
        return metrics


def _tuned_rows(name, est, ns, risk, best, grid) -> list[list]:
    kind = "ridge" if est == "krr" else "eta0_norm"
    return [
        [name, est, int(n), seed, f"{risk[best[j], j, seed]:.6e}", kind, f"{grid[best[j]]:.4e}"]
        for j, n in enumerate(ns)
        for seed in range(risk.shape[-1])
    ]


def _mc_z(sq: np.ndarray, closed: float) -> float:
    """|Monte-Carlo mean - closed form| in standard errors of the Monte-Carlo mean."""
    return float(abs(sq.mean() - closed) / (sq.std(ddof=1) / math.sqrt(len(sq))))


def _evaluate_circle(cfg, data, stream, tables, artifacts, metrics, rows, edges) -> dict:
    values = metrics.values
    lam, beta = stream["eigenvalues"], float(data.meta["beta"])
    ns = tables["n"]
    lo, hi = (2**e for e in cfg.fit_log2_range)
    grids = {"exp_sgd": tables["eta_norm"], "avg_sgd": tables["eta_norm"], "krr": tables["ridges"]}
    curves: dict[str, dict[str, dict]] = {}
    quad_err = mc_z = table_err = 0.0
    decreases = True
    for t in data.meta["targets"]:
        name, source = t["name"], t["source"]
        prefix = "" if name == CLAIM_TARGET else f"{name}_"
        coef = stream[f"coef_{name}"]
        truth_test = alg.target_function(stream["theta_test"], coef)
        curves[name] = {}
        for est in alg.ESTIMATORS:
            risk = tables[f"{name}__{est}"]
            best, mean, sem = alg.oracle_tune(risk)
            slope, intercept = alg.fit_slope(ns, mean, lo, hi)
            curves[name][est] = dict(mean=mean, sem=sem, slope=slope, intercept=intercept, tuned=grids[est][best])
            v = VARIANT[est]
            values[f"{v}/{prefix}excess_risk"] = float(mean[-1])
            if name == CLAIM_TARGET:  # per-seed tuned risks: the paired units of the claim's intervals
                chosen = risk[best, np.arange(len(ns))]  # (n, seed), one grid value per n for all seeds
                for j, n in enumerate(ns):
                    metrics.add_units(f"excess_risk_n{int(n)}", v, chosen[j], unit_labels("seed", risk.shape[-1]))
            values[f"{v}/{prefix}slope"] = slope
            values[f"theory/{prefix}slope_{est}"] = alg.theory_slope(est, source, beta)
            decreases &= bool(mean[-1] < mean[0])
            edges += [f"{name}/{est}/n={n}" for n, b in zip(ns, best) if b in (0, len(grids[est]) - 1)]
            rows += _tuned_rows(name, est, ns, risk, best, grids[est])
            # The saved model: closed form vs exact quadrature vs the table vs Monte Carlo on fresh points.
            model = load_model(cfg, artifacts.model_dir, name, est)
            closed = float(alg.excess_risk(model.weights, coef, lam))
            quad_err = max(quad_err, abs(alg.quadrature_risk(model.weights, coef, lam) - closed) / closed)
            table_err = max(table_err, abs(risk[best[-1], -1, 0] - closed) / closed)
            mc_z = max(mc_z, _mc_z((model.predict(stream["theta_test"]) - truth_test) ** 2, closed))
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
    return curves


def judged_mask(gamma: np.ndarray, judged_gamma: tuple[float, float]) -> np.ndarray:
    """The sphere sample sizes whose gamma = log_d n lies in the judged range (a 1e-9 slack for rounding)."""
    lo, hi = judged_gamma
    return (gamma >= lo - 1e-9) & (gamma <= hi + 1e-9)


def _geometric_mean_ratio(per_n_method: list[np.ndarray], per_n_base: list[np.ndarray]) -> float:
    """exp(mean_n log(mean_seeds method / mean_seeds baseline)): the risk ratio averaged on the log scale."""
    return float(np.exp(np.mean([np.log(a.mean() / b.mean()) for a, b in zip(per_n_method, per_n_base)])))


def _evaluate_sphere(cfg, data, stream, tables, artifacts, metrics, rows, edges) -> dict:
    values = metrics.values
    meta = data.meta["sphere"]
    dim, ns = int(meta["dim"]), tables["sphere_n"]
    gamma = np.asarray(meta["gamma"])
    judged = judged_mask(gamma, cfg.sphere.judged_gamma)
    grids = {"exp_sgd": tables["sphere_eta_norm"], "avg_sgd": tables["sphere_eta_norm"], "krr": tables["sphere_ridges"]}
    x_test = torch.from_numpy(stream["sphere_x_test"])
    directions = torch.from_numpy(stream["sphere_directions"][0])
    curves: dict[str, dict[str, dict]] = {}
    mc_z, decreases = 0.0, True
    for t in meta["targets"]:
        name = t["name"]
        amplitude = torch.from_numpy(stream[f"{name}_amplitude"])
        truth_test = alg.zonal_target(x_test, directions, amplitude, dim).numpy()
        curves[name] = {}
        for est in alg.ESTIMATORS:
            risk = tables[f"{name}__{est}"]
            best, mean, sem = alg.oracle_tune(risk)
            curves[name][est] = dict(mean=mean, sem=sem, tuned=grids[est][best])
            v = VARIANT[est]
            values[f"{v}/{name}_excess_risk"] = float(mean[-1])
            values[f"{v}/{name}_risk_fraction_nmax"] = float(mean[-1] / t["norm_sq"])
            values[f"data/{name}_norm_sq"] = float(t["norm_sq"])
            values[f"{v}/{name}_local_slope"] = alg.fit_slope(ns, mean, ns[judged].min(), ns[judged].max())[0]
            if name == meta["claim_target"]:
                chosen = risk[best, np.arange(len(ns))]  # (n, seed)
                for j, n in enumerate(ns):
                    metric = f"{name}_excess_risk_n{int(n)}"
                    metrics.add_units(metric, v, chosen[j], unit_labels("seed", risk.shape[-1]))
            decreases &= bool(mean[-1] < mean[0])
            edges += [f"{name}/{est}/n={n}" for n, b in zip(ns, best) if b in (0, len(grids[est]) - 1)]
            rows += _tuned_rows(name, est, ns, risk, best, grids[est])
            # The saved model (seed 0, tuned for n_max): the table's closed form vs Monte Carlo on fresh points.
            model = load_model(cfg, artifacts.model_dir, name, est)
            sq = (model.predict(stream["sphere_x_test"]) - truth_test) ** 2
            mc_z = max(mc_z, _mc_z(sq, float(risk[best[-1], -1, 0])))
        for base in ("avg_sgd", "krr"):
            ratio = curves[name]["exp_sgd"]["mean"][judged] / curves[name][base]["mean"][judged]
            values[f"method/{name}_judged_ratio_vs_{base}"] = float(np.exp(np.log(ratio).mean()))
    values["check/sphere_mc_max_abs_z"] = mc_z
    values["check/sphere_max_eta0_norm"] = float(tables["sphere_eta_norm"].max())
    values["check/sphere_risk_decreases"] = float(decreases)
    return curves


# ----------------------------------------------------------------------------- claim


CIRCLE_COVERS = ("data stream seed (sample draw, label noise)",)
SPHERE_COVERS = ("data stream seed (sample draw, label noise)", "target directions (one per degree and seed)")


def _per_seed_risks(metrics: Metrics, arm: str, ns, metric: str = "excess_risk") -> list[UnitValues]:
    """Per n, the tuned excess risks of one arm on a claim target over the paired seeds (evaluate's units)."""
    return [metrics.unit(f"{metric}_n{int(n)}", arm) for n in ns]


def _rotated(values: UnitValues) -> UnitValues:
    """The placebo's units: the same arm's value on the *next* seed's stream (another data draw), keeping the
    labels, so the pairing with the original arm is a pairing of independent runs of one estimator."""
    return UnitValues(values.labels, np.roll(values.values, -1))


def _circle_criteria(cfg: Config, metrics: Metrics) -> list:
    """The brief's two conjuncts on S^1: one ratio criterion per baseline at n_max, the slope gap vs KRR
    (a bootstrap over seeds of the slope of the seed-mean curves; the per-n oracle choice is held fixed)."""
    ns = np.array([2**j for j in range(cfg.data.log2_n_min, cfg.data.log2_n_max + 1)])
    lo, hi = (2**e for e in cfg.fit_log2_range)
    risks = {est: _per_seed_risks(metrics, VARIANT[est], ns) for est in alg.ESTIMATORS}
    units = "paired seeds (common data streams)"
    criteria = [
        V.ratio_of_means_criterion(
            f"risk_ratio_vs_{est}",
            f"S^1 (d = 2), f* = sqrt(2) cos theta: excess risk at n = {ns[-1]}, step-decay SGD / {alg.LABEL[est]} "
            "(seed means)",
            risks["exp_sgd"][-1],
            risks[est][-1],
            RISK_RATIO_MAX,
            "<=",
            units=units,
            covers=CIRCLE_COVERS,
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
            f"S^1: log-log slope over n in [2^{cfg.fit_log2_range[0]}, 2^{cfg.fit_log2_range[1]}] of the seed-mean "
            "curve, step-decay SGD minus KRR",
            slope_gap,
            [
                *(r for r, keep in zip(risks["exp_sgd"], fit) if keep),
                *(r for r, keep in zip(risks["krr"], fit) if keep),
            ],
            -SLOPE_MARGIN,
            "<=",
            units=units,
            covers=CIRCLE_COVERS,
        )
    )
    return criteria


def _sphere_criteria(cfg: Config, metrics: Metrics) -> list:
    """The same risk bar on S^{d-1}: geometric mean over the judged n = d^gamma of the seed-mean risk ratio,
    one criterion per baseline, bootstrapped over the paired seeds."""
    sp = cfg.data.sphere
    ns = np.asarray(D.sphere_sample_sizes(sp))
    judged = judged_mask(np.log(ns) / np.log(sp.dim), cfg.sphere.judged_gamma)
    name = D.sphere_target_name(sp.claim_source)
    risks = {
        est: [r for r, keep in zip(_per_seed_risks(metrics, VARIANT[est], ns, f"{name}_excess_risk"), judged) if keep]
        for est in alg.ESTIMATORS
    }
    k = int(judged.sum())
    g_lo, g_hi = cfg.sphere.judged_gamma
    return [
        V.bootstrap_criterion(
            f"sphere_risk_ratio_vs_{est}",
            f"S^{sp.dim - 1} in d = {sp.dim}, source s = {sp.claim_source:g}: excess risk of step-decay SGD / "
            f"{alg.LABEL[est]}, geometric mean over the {k} sample sizes n = d^gamma, gamma in [{g_lo:g}, {g_hi:g}] "
            "(seed means)",
            lambda *per_n: _geometric_mean_ratio(list(per_n[:k]), list(per_n[k:])),
            [*risks["exp_sgd"], *risks[est]],
            RISK_RATIO_MAX,
            "<=",
            units="paired seeds (common data streams)",
            covers=SPHERE_COVERS,
        )
        for est in ("avg_sgd", "krr")
    ]


def claim(cfg: Config, metrics: Metrics) -> ClaimResult:
    """The circle's and the sphere's criteria over each regime's paired seeds (common random numbers: seed
    k's stream feeds every estimator); the per-n oracle tuning is held fixed inside the bootstraps."""
    v = metrics.values
    sp = cfg.data.sphere
    sphere_name = D.sphere_target_name(sp.claim_source)
    criteria = _circle_criteria(cfg, metrics) + _sphere_criteria(cfg, metrics)
    controls = _controls(cfg, metrics)
    separations = [
        Separation(  # log10 risk: 0 is the zero predictor's (||f*||^2 = 1); no arm learning is the floor
            f"S^1 log10 excess risk at n = 2^{cfg.data.log2_n_max}",
            {VARIANT[e]: math.log10(v[f"{VARIANT[e]}/excess_risk"]) for e in alg.ESTIMATORS},
            floor=0.0,
        ),
        Separation(
            f"S^{sp.dim - 1} excess risk / ||f*||^2 at n_max",
            {VARIANT[e]: v[f"{VARIANT[e]}/{sphere_name}_risk_fraction_nmax"] for e in alg.ESTIMATORS},
            floor=1.0,
            ceiling=0.0,
        ),
    ]
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
        "sphere_dual_risk_matches_monte_carlo": bool(v["check/sphere_mc_max_abs_z"] < MC_Z_MAX),
        "sphere_step_sizes_stable": bool(v["check/sphere_max_eta0_norm"] < 1.0),
        "sphere_tuned_risk_decreases_with_n": bool(v["check/sphere_risk_decreases"] == 1.0),
    }
    # Every sphere arm must learn the claim target (a baseline that does not would make the ratios vacuous).
    # Named as models.common.selection.learns_task names it; not imported from there because that module
    # imports Lightning (~5 s), which this method never uses.
    for est in alg.ESTIMATORS:
        fraction = v[f"{VARIANT[est]}/{sphere_name}_risk_fraction_nmax"]
        sanity[f"sphere_{VARIANT[est]}_learns_task_<={LEARNS_FRACTION:g}"] = bool(
            math.isfinite(fraction) and fraction <= LEARNS_FRACTION
        )
    for est, short in (("method", "exp"), ("baseline", "avg"), ("baseline_krr", "krr")):
        figures[f"s1_slope_{short}"] = v[f"{est}/s1_slope"]
    figures["s1_theory_slope"] = v["theory/s1_slope_exp_sgd"]
    if cfg.scale == Scale.default:  # slopes at smoke scale (3 points, 2 seeds) mean nothing
        sanity["s1_slopes_within_0.1_of_theory"] = bool(
            all(
                abs(figures[f"s1_slope_{s}"] - figures["s1_theory_slope"]) <= SANITY_SLOPE_TOL
                for s in ("exp", "avg", "krr")
            )
        )
    for name in (f"s{s:g}" for s in cfg.data.sources if s != 1.0):  # reported, not judged
        for est, short in (("method", "exp"), ("baseline", "avg"), ("baseline_krr", "krr")):
            figures[f"{name}_slope_{short}"] = v[f"{est}/{name}_slope"]
    for source in sp.sources:  # every sphere target: judged-range ratios, risks at n_max and local slopes
        name = D.sphere_target_name(source)
        for base in ("avg_sgd", "krr"):
            figures[f"{name}_judged_ratio_vs_{base}"] = v[f"method/{name}_judged_ratio_vs_{base}"]
        for est, short in (("method", "exp"), ("baseline", "avg"), ("baseline_krr", "krr")):
            figures[f"{name}_risk_nmax_{short}"] = v[f"{est}/{name}_excess_risk"]
            figures[f"{name}_local_slope_{short}"] = v[f"{est}/{name}_local_slope"]
    notes = (
        f"S^1: claim target f* = sqrt(2) cos theta, slopes fitted over n in [2^{cfg.fit_log2_range[0]}, "
        f"2^{cfg.fit_log2_range[1]}], {cfg.data.top_seeds} paired seeds; tuned eta0 ||phi||^2 at n_max = "
        f"{v['method/tuned_eta0_norm_nmax']:.3g}. S^{sp.dim - 1}: d = {sp.dim}, source s = {sp.claim_source:g}, "
        f"ratios over gamma in {list(cfg.sphere.judged_gamma)}, {sp.seeds} paired seeds; the other sphere sources "
        f"({[s for s in sp.sources if s != sp.claim_source]}) are reported, not judged (KRR is minimax for s <= 1 in "
        f"large d). {int(v['check/tuned_at_grid_edge'])} (target, estimator, n) oracle choices sit on a grid end "
        f"(grid_edges.json; circle claim target at n_max: {'yes' if v['check/tuned_at_grid_edge_nmax_claim'] else 'no'}). "
        "The step-decay schedule constants are a reconstruction (the paper's were not read)."
    )
    statement = (
        "Step-decay last-iterate kernel SGD beats saturated averaged SGD and tuned KRR in both regimes: on S^1 "
        f"(top eigenfunction) risk(n_max) <= {RISK_RATIO_MAX} x each baseline and slope <= slope_KRR - {SLOPE_MARGIN}; "
        f"on S^{sp.dim - 1} with n ~ d^gamma (source s = {sp.claim_source:g}) risk <= {RISK_RATIO_MAX} x each "
        "baseline on average over the judged gamma range"
    )
    return ClaimResult(statement, criteria, sanity, figures, notes, controls, separations)


def _controls(cfg: Config, metrics: Metrics) -> list[Control]:
    """Placebos: averaged SGD on the next seed's stream scored as the method against averaged SGD, at n_max on
    the circle and over the judged gamma range on the sphere (the same statistics and bars)."""
    n_max = 2**cfg.data.log2_n_max
    avg = metrics.unit(f"excess_risk_n{n_max}", "baseline")
    sp = cfg.data.sphere
    ns = np.asarray(D.sphere_sample_sizes(sp))
    judged = judged_mask(np.log(ns) / np.log(sp.dim), cfg.sphere.judged_gamma)
    name = D.sphere_target_name(sp.claim_source)
    sphere_avg = [r for r, keep in zip(_per_seed_risks(metrics, "baseline", ns, f"{name}_excess_risk"), judged) if keep]
    k = len(sphere_avg)
    broken = "no step-decay SGD at all: averaged SGD on the next seed's data stream labelled as the method"
    return [
        Control(
            "risk_ratio_vs_avg_sgd",
            broken,
            V.ratio_of_means_criterion(
                "risk_ratio_vs_avg_sgd",
                f"S^1: excess risk at n = {n_max}, averaged SGD (next seed's stream) / averaged SGD",
                _rotated(avg),
                avg,
                RISK_RATIO_MAX,
                "<=",
                units="paired seeds (common data streams)",
                covers=CIRCLE_COVERS,
            ),
        ),
        Control(
            "sphere_risk_ratio_vs_avg_sgd",
            broken,
            V.bootstrap_criterion(
                "sphere_risk_ratio_vs_avg_sgd",
                "sphere: geometric-mean risk ratio over the judged gamma, averaged SGD (next seed) / averaged SGD",
                lambda *per_n: _geometric_mean_ratio(list(per_n[:k]), list(per_n[k:])),
                [*(_rotated(r) for r in sphere_avg), *sphere_avg],
                RISK_RATIO_MAX,
                "<=",
                units="paired seeds (common data streams)",
                covers=SPHERE_COVERS,
            ),
        ),
    ]
