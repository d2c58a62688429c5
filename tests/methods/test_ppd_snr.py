"""Core maths of ppd_snr: exact log p(D*|D), Delta, the SNR law, r*, Gaussian chi^2/KL, Pareto k-hat, the pipeline."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch
from scipy import integrate, stats

os.environ.setdefault("PAPERLINE_PROGRESS", "0")

from models.base import Metrics, ValidationError  # noqa: E402
from models.ppd_snr import SPEC  # noqa: E402
from models.ppd_snr import algorithm as alg  # noqa: E402
from models.ppd_snr.config import Config  # noqa: E402
from models.ppd_snr.data import GaussianData, load_index, load_npz, save_npz  # noqa: E402

torch.set_num_threads(1)


def _data(d, m, shift, n=20, sigma=1.0, sigma0=1.0, seed=0) -> GaussianData:
    rng = np.random.default_rng(seed)
    z = sigma0 * rng.standard_normal(d)
    return GaussianData(
        z + sigma * rng.standard_normal((n, d)), z + shift + sigma * rng.standard_normal((m, d)), sigma, sigma0, shift
    )


def _log_normal(x, mean, sd):
    return -0.5 * ((x - mean) / sd) ** 2 - math.log(math.sqrt(2 * math.pi) * sd)


def _gen(seed=0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------------------- closed forms


def test_log_ppd_equals_the_gaussian_marginal_of_the_test_set():
    # Independent route: given D, each coordinate of the m test points is jointly Gaussian,
    # x*_{:,k} ~ N(mu_n,k 1, sigma^2 I + s^2 1 1^T), and coordinates are independent.
    data = _data(d=3, m=4, shift=0.4, n=5, sigma=0.7, sigma0=1.3)
    p = alg.make_problem(data)
    cov = data.sigma**2 * np.eye(4) + p.post_var * np.ones((4, 4))
    reference = sum(
        stats.multivariate_normal(np.full(4, p.post_mean[k]), cov).logpdf(data.x_test[:, k]) for k in range(3)
    )
    assert alg.log_ppd(p) == pytest.approx(reference, abs=1e-10)


def test_log_ppd_delta_and_moments_match_quadrature_in_one_dimension():
    data = _data(d=1, m=7, shift=0.8, n=15, sigma=0.9, sigma0=2.0, seed=3)
    p = alg.make_problem(data)
    mu, s = p.post_mean[0], math.sqrt(p.post_var)

    x_test = data.x_test[:, 0]

    def log_lik(z):
        return float(np.sum([_log_normal(x, z, data.sigma) for x in x_test]))

    def q(z):
        return math.exp(-0.5 * ((z - mu) / s) ** 2) / (math.sqrt(2 * math.pi) * s)

    log_ref = alg.log_ppd(p)  # integrate the ratio to the reference so the integrand is O(1)
    moments = [
        integrate.quad(
            lambda z, k=k: q(z) * math.exp(k * (log_lik(z) - log_ref)),
            mu - 12 * s,
            mu + 12 * s,
            points=[p.test_mean[0]],
            epsabs=1e-13,
            epsrel=1e-12,
        )[0]
        for k in (1, 2, 3)
    ]
    assert math.log(moments[0]) == pytest.approx(0.0, abs=1e-6)  # log p(D*|D) exact
    assert alg.delta(p) == pytest.approx(math.log(moments[1]) - 2 * math.log(moments[0]), abs=1e-6)
    assert alg.log_normalised_moment(p, 3) == pytest.approx(math.log(moments[2]), abs=1e-6)


@pytest.mark.parametrize(("d", "m", "shift"), [(1, 10, 0.0), (5, 50, 0.3), (100, 100, 0.3)])
def test_delta_equals_the_exponential_family_second_difference(d, m, shift):
    p = alg.make_problem(_data(d, m, shift, n=100))
    assert alg.delta(p) == pytest.approx(alg.delta_exponential_family(p), rel=1e-10)
    assert alg.delta(p) == pytest.approx(alg.log_normalised_moment(p, 2), rel=1e-10)
    assert alg.delta(p) > 0  # convexity of the log-normaliser


def test_delta_grows_with_dimension_mismatch_and_test_size():
    base = dict(d=5, n=100, m=10, shift=0.0, sigma=1.0, sigma0=1.0)
    for key, values in (("d", [1, 5, 20, 100]), ("m", [1, 10, 100, 1000]), ("shift", [0.0, 0.2, 0.5, 1.0])):
        deltas = [alg.expected_delta(**{**base, key: v}) for v in values]
        assert np.all(np.diff(deltas) > 0), key


def test_expected_delta_is_the_mean_over_datasets():
    d, n, m, shift = 4, 50, 25, 0.3
    deltas = []
    for seed in range(3000):
        rng = np.random.default_rng(seed)
        data = GaussianData(rng.standard_normal((n, d)), shift + rng.standard_normal((m, d)), 1.0, 1.0, shift)
        deltas.append(alg.delta(alg.make_problem(data)))
    se = np.std(deltas) / math.sqrt(len(deltas))
    assert abs(np.mean(deltas) - alg.expected_delta(d, n, m, shift, 1.0, 1.0)) < 4 * se


def test_optimal_proposal_is_the_posterior_given_both_sets_and_has_zero_variance_weights():
    data = _data(d=6, m=30, shift=0.5, n=40, sigma=0.8, sigma0=1.5)
    p = alg.make_problem(data)
    mean, var = alg.optimal_proposal(p)
    both = alg.make_problem(GaussianData(np.vstack([data.x_train, data.x_test]), data.x_test, data.sigma, data.sigma0))
    assert np.allclose(mean, both.post_mean, atol=1e-12) and var == pytest.approx(both.post_var, rel=1e-12)
    log_w = alg.WeightSampler(p, mean, np.full(6, math.sqrt(var))).draw(500, _gen()).numpy()
    assert np.ptp(log_w) < 1e-8 and np.abs(log_w - alg.log_ppd(p)).max() < 1e-8
    assert alg.gaussian_log_chi2(mean, np.full(6, math.sqrt(var)), mean, var) == pytest.approx(0.0, abs=1e-12)
    assert alg.gaussian_kl(mean, np.full(6, math.sqrt(var)), mean, var) == pytest.approx(0.0, abs=1e-12)


def test_gaussian_chi2_and_kl_match_quadrature():
    mu1, v1, mu2, sd2 = 0.3, 0.5, -0.1, 0.9
    sd1 = math.sqrt(v1)
    chi2 = integrate.quad(lambda x: math.exp(2 * _log_normal(x, mu1, sd1) - _log_normal(x, mu2, sd2)), -30, 30)[0]
    log_r, log_star = (lambda x: _log_normal(x, mu2, sd2)), (lambda x: _log_normal(x, mu1, sd1))
    kl = integrate.quad(lambda x: math.exp(log_r(x)) * (log_r(x) - log_star(x)), -30, 30)[0]
    assert alg.gaussian_log_chi2([mu2], [sd2], mu1, v1) == pytest.approx(math.log(chi2), abs=1e-9)
    assert alg.gaussian_kl([mu2], [sd2], mu1, v1) == pytest.approx(kl, abs=1e-9)
    # Narrower than r*/sqrt(2): the second moment diverges.
    assert alg.gaussian_log_chi2([0.0], [0.99 * math.sqrt(v1 / 2)], 0.0, v1) == math.inf


def test_is_weights_of_a_learned_like_proposal_have_the_closed_form_second_moment():
    p = alg.make_problem(_data(d=3, m=20, shift=0.2, n=30))
    mean, var = alg.optimal_proposal(p)
    r_mean, r_std = mean + 0.05, np.full(3, 1.15 * math.sqrt(var))
    delta_r = alg.gaussian_log_chi2(r_mean, r_std, mean, var)
    log_w = alg.WeightSampler(p, r_mean, r_std).draw(400_000, _gen(1))
    se = math.sqrt(math.expm1(delta_r) / len(log_w))  # sd of the log of the IS estimate
    assert float(alg.log_mean_exp(log_w)) == pytest.approx(alg.log_ppd(p), abs=4 * se)  # IS is unbiased for Z
    empirical = float(torch.logsumexp(2 * log_w, 0) - 2 * torch.logsumexp(log_w, 0) + math.log(len(log_w)))
    assert 0.2 < delta_r < 1 and empirical == pytest.approx(delta_r, abs=0.01)


# ----------------------------------------------------------------------------- simple MC


def test_empirical_snr_matches_theory_at_high_snr():
    p = alg.make_problem(_data(d=5, m=10, shift=0.2, n=100, seed=4))
    k, repeats = 10, 20_000
    ratio = torch.exp(
        alg.log_mean_exp(alg.WeightSampler(p).matrix(repeats, k, _gen(2), 1 << 16)) - alg.log_ppd(p)
    ).numpy()
    theory = alg.snr_theory(alg.delta(p), k)
    rel_se = alg.snr_estimate_rel_se(p, k, repeats)
    assert theory > 2 and rel_se < 0.02
    assert abs(ratio.mean() / ratio.std(ddof=1) / theory - 1) < 4 * rel_se
    assert abs(ratio.mean() - 1) < 4 * ratio.std() / math.sqrt(repeats)  # R_K is unbiased for p(D*|D)


def test_predicted_standard_error_of_the_empirical_snr_is_right():
    p = alg.make_problem(_data(d=5, m=30, shift=0.0, n=100, seed=5))
    k, repeats, batches = 10, 2000, 60
    log_w = alg.WeightSampler(p).matrix(repeats * batches, k, _gen(3), 1 << 16)
    ratio = torch.exp(alg.log_mean_exp(log_w) - alg.log_ppd(p)).numpy().reshape(batches, repeats)
    log_snr = np.log(ratio.mean(1) / ratio.std(1, ddof=1))
    predicted = alg.snr_estimate_rel_se(p, k, repeats)
    assert np.std(log_snr, ddof=1) == pytest.approx(predicted, rel=0.3)  # 60 batches: sd known to ~10 %


def test_log_of_simple_mc_is_biased_down_by_the_jensen_gap():
    p = alg.make_problem(_data(d=5, m=30, shift=0.1, n=100, seed=6))
    k, repeats = 50, 40_000
    errors = (alg.log_mean_exp(alg.WeightSampler(p).matrix(repeats, k, _gen(4), 1 << 16)) - alg.log_ppd(p)).numpy()
    gap = -math.expm1(alg.delta(p)) / (2 * k)  # second-order delta method: E log R_K - log p
    se = errors.std() / math.sqrt(repeats)
    assert errors.mean() < 0 and abs(errors.mean() - gap) < 0.15 * abs(gap) + 4 * se


def test_running_estimates_are_log_mean_exp_of_prefixes():
    p = alg.make_problem(_data(d=2, m=5, shift=0.0))
    stream = torch.randn(1000, dtype=torch.float64, generator=_gen(5)) * 3

    class Replay(alg.WeightSampler):
        used = 0

        def draw(self, count, generator):
            out = stream[self.used : self.used + count]
            self.used += count
            return out

    ks = [10, 30, 100, 999, 1000]
    got = Replay(p).running_estimates(ks, _gen(), chunk=2 * 37)  # 37 draws per chunk: crosses boundaries
    want = [float(alg.log_mean_exp(stream[:k])) for k in ks]
    assert np.allclose(got, want, atol=1e-12)


# ----------------------------------------------------------------------------- diagnostics


@pytest.mark.parametrize("xi", [-0.2, 0.3, 0.8])
def test_pareto_k_recovers_the_generalised_pareto_shape(xi):
    x = stats.genpareto.rvs(xi, scale=1.7, size=3000, random_state=np.random.default_rng(7))
    assert alg.gpd_shape(x) == pytest.approx(stats.genpareto.fit(x, floc=0)[0], abs=0.03)
    assert alg.gpd_shape(x) == pytest.approx(xi, abs=0.1)


def test_ess_and_pareto_k_separate_good_from_bad_weights():
    rng = np.random.default_rng(8)
    flat, heavy = np.zeros(10_000), rng.standard_normal(10_000) * 4.0  # log-normal weights, sigma = 4
    assert alg.effective_sample_size(flat) == pytest.approx(10_000)
    assert alg.effective_sample_size(heavy) < 100
    assert alg.pareto_k(heavy) > 0.7 and alg.pareto_k(rng.standard_normal(10_000) * 0.1) < 0.5


# ----------------------------------------------------------------------------- proposal fit


def test_elbo_fit_moves_the_proposal_to_r_star():
    from models.ppd_snr.training import exact_diagnostics, fit_proposal

    # A smaller step than the grid's largest, so that Adam's noise floor sits well below the tolerance.
    cfg = Config.for_scale("smoke", {"proposal.steps": 300, "proposal.val_every": 100, "proposal.lr_grid": [0.01]})
    target = alg.GaussianMeanTarget(alg.make_problem(_data(d=4, m=40, shift=0.5, n=40)))
    proposal, records, selection = fit_proposal(cfg, target, "elbo", _gen(6), seed=0)
    start, final = records[0], exact_diagnostics(proposal, target)
    assert start["val/delta_r_exact"] == pytest.approx(alg.delta(target.problem), rel=1e-9)  # r = q at the start
    assert final["val/kl_exact"] < 0.02 * start["val/kl_exact"] and final["val/delta_r_exact"] < 0.1
    assert all(math.isfinite(v) for r in records for v in r.values())
    assert selection["lr"] == 0.01 and 0 < selection["best_step"] <= 300


def test_full_rank_fit_reaches_the_correlated_r_star_of_a_regression():
    from models.ppd_snr.training import exact_diagnostics, fit_proposal, initial_proposal

    target = _regression(d=3, n=30, m=30, rho=0.8)
    cfg = Config.for_scale(
        "smoke", {"proposal.steps": 300, "proposal.val_every": 50, "proposal.lr_grid": [0.003, 0.03]}
    )
    proposal, _, selection = fit_proposal(cfg, target, "elbo", _gen(7), seed=0, full_rank=True)
    start = exact_diagnostics(initial_proposal(target, True), target)
    final = exact_diagnostics(proposal, target)
    assert final["val/kl_exact"] < 0.05 * start["val/kl_exact"] and selection["lr"] in (0.003, 0.03)


def test_fitting_targets_side_by_side_equals_fitting_each_alone():
    from models.ppd_snr.training import fit_proposal, fit_proposals

    cfg = Config.for_scale("smoke", {"proposal.steps": 60, "proposal.val_every": 10, "proposal.lr_grid": [0.01, 0.1]})
    first = alg.GaussianMeanTarget(alg.make_problem(_data(d=3, m=30, shift=0.4, n=30)))
    second = alg.GaussianMeanTarget(alg.make_problem(_data(d=5, m=5, shift=0.0, n=30, seed=1)))
    (together, _, sel_together), _ = fit_proposals(cfg, [first, second], "elbo", _gen(9), seed=0)
    alone, _, sel_alone = fit_proposal(cfg, first, "elbo", _gen(9), seed=0)  # the first target's noise is the same
    assert torch.allclose(together.mean, alone.mean, atol=1e-12) and torch.allclose(together.std, alone.std, atol=1e-12)
    assert sel_together == sel_alone


# ----------------------------------------------------------------------------- data and config


def test_config_rejects_bad_values():
    for override in (
        {"data.sweep_d": [5, 1]},
        {"proposal.proxies": ["chi2"]},
        {"proposal.lr_grid": [0.1, 0.01]},
        {"data.heavy.nu": 2.0},
        {"data.real.datasets": ["kidiq", "kidiq"]},
        {"data.real.datasets": ["wells"]},
        {"data.source": "simulated"},
        {"data.sigma": 0.0},
        {"data.estimate_settings": [{"d": 1, "m": 1, "shift": 0.0}, {"d": 1, "m": 1, "shift": 0.0}]},
        {"data.user_npz": "../x.npz"},
        {"data.user_npz": "/etc/x.npz"},
        {"snr_repeats": 1},
    ):
        with pytest.raises(ValidationError):
            Config.for_scale("smoke", override)


def test_sweeps_share_their_noise_and_user_npz_is_loaded(tmp_path, monkeypatch):
    from models.ppd_snr.pipeline import prepare

    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    user = _data(d=3, m=8, shift=0.0, n=12)
    user = GaussianData(user.x_train, user.x_test, 0.5, 2.0, float("nan"))  # a user file's shift is unknown
    save_npz(tmp_path / "data" / "mine.npz", user)
    cfg = Config.for_scale("smoke", {"data.user_npz": "mine.npz", "data.source": "synthetic"})
    ref = prepare(cfg, tmp_path / "out")
    index = load_index(ref)
    by_tag = {(e["d"], e["m"], e["shift"]): load_npz(ref.file(e["file"])) for e in index["snr"]}
    small, large = by_tag[(1, 10, 0.0)], by_tag[(20, 10, 0.0)]
    assert np.array_equal(small.x_train, large.x_train[:, :1]) and np.array_equal(small.x_test, large.x_test[:, :1])
    shifted = by_tag[(5, 10, 0.4)]
    assert np.allclose(shifted.x_test - 0.4, by_tag[(5, 10, 0.0)].x_test)
    entry = next(e for e in index["estimate"] if e["name"] == "user")
    loaded = load_npz(ref.file(entry["file"]))
    assert np.array_equal(loaded.x_train, user.x_train) and entry["shift"] is None and loaded.sigma == 0.5
    with open(tmp_path / "data" / "bad.npz", "wb") as fh:
        np.savez(fh, x_train=np.zeros((3, 2)), x_test=np.zeros((4, 3)), sigma=1.0, sigma0=1.0)
    with pytest.raises(ValueError, match="x_train"):
        prepare(Config.for_scale("smoke", {"data.user_npz": "bad.npz", "data.source": "synthetic"}), tmp_path / "out2")


# ----------------------------------------------------------------------------- pipeline


def test_smoke_pipeline(smoke_run):
    run = smoke_run("ppd_snr")
    cfg, artifacts, metrics, result, root = run.cfg, run.artifacts, run.metrics, run.claim, run.root
    v = metrics.values
    assert (
        not metrics.non_finite() and len(metrics.figures) == 5
    )  # the diagnostics figures sit beside them, not in the list
    assert all(result.sanity.values()), result.sanity
    assert run.dataset.meta["source"] == "real" and "posteriordb/kidiq.json.zip" in run.dataset.meta["provenance"]
    hard = "d10_m100_s0p50"
    assert v["baseline/samples_" + hard] == cfg.estimate_samples + artifacts.summary["training_evaluations"]
    # Delta ~ 40 here: simple MC is many nats low, learned IS is close, with far better ESS.
    assert v["problem/delta_hardest"] > 20 and v["baseline/err_hardest"] < -5
    assert v["method/abs_err_hardest"] < 0.5 and v[f"method/ess_frac_{hard}"] > 100 * v[f"baseline/ess_frac_{hard}"]
    assert v["snr/checked"] >= 3 and v["snr/max_rel_dev"] <= 0.1
    # The heavy-tailed hard case: large Delta, simple MC far off, IS close to the quadrature truth.
    assert v["heavy/delta_hardest"] > 20 and v["heavy/baseline/err_hardest"] < -5
    assert abs(v["heavy/method/err_hardest"]) < 0.5
    assert v["real/snr_checked"] >= 1 and v["real/is_abs_err_max"] < 0.5
    claim = json.loads((root / "outputs" / "ppd_snr" / "claim.json").read_text())
    mc = next(c for c in claim["criteria"] if c["name"] == "mc_err_hardest")
    assert mc["estimate"] == pytest.approx(v["baseline/err_hardest"]) and mc["n_units"] == cfg.estimate_repeats
    assert result.criterion("is_err_hardest_lt_plus1").estimate == pytest.approx(v["method/err_hardest"])
    assert result.criterion("heavy_mc_err_hardest").n_units == cfg.heavy_repeats
    # Two data replicates and two splits at smoke: every criterion has a spread (and a defined power).
    assert result.criterion("delta_increases_d").n_units == cfg.data.replicates == 2
    assert result.criterion("real_is_worst_abs_err").n_units == cfg.data.real.splits == 2
    assert any(k.startswith("select/") and k.endswith("/lr") for k in artifacts.summary)
    bank = SPEC.module().load_model(cfg, root / "outputs" / "ppd_snr" / "model")
    z = bank.get(bank.primary).sample(5, _gen())
    assert bank(z).shape == (5,) and torch.isfinite(bank(z)).all()
    full = bank.get("kidiq_s0__elbo")
    assert full.tril.shape == (3, 3) and torch.isfinite(full(full.sample(4, _gen()))).all()


# ----------------------------------------------------------------------------- claim from hand-built metrics


def _claim_metrics(
    cfg,
    mc_errors,
    is_errors,
    step_noise=0.0,
    heavy_mc=(-80.0, -79.0, -81.0, -80.5),
    heavy_is=(0.0, 0.01, -0.01, 0.0),
    real_is=(0.01, -0.02, 0.0),
) -> Metrics:
    """Every key claim() reads: Delta = d + m + 10 shift (SNR = 100 minus it) on every sweep point, each replicate's
    Delta scaled by 1 +- step_noise (alternating), plus the hardest setting's repeats."""
    from models.ppd_snr.data import tag
    from models.ppd_snr.pipeline import sweep_axes

    metrics = Metrics({})
    v = metrics.values
    replicates = [f"replicate{r}" for r in range(cfg.data.replicates)]
    done = set()
    for _, points in sweep_axes(cfg).values():
        for d, m, shift in points:  # the base point lies on all three sweeps: its values depend on it alone
            if (d, m, shift) in done:
                continue
            done.add((d, m, shift))
            t = tag(d, m, shift)
            deltas = [(1 + step_noise * (-1) ** r) * (d + m + 10 * shift) for r in range(cfg.data.replicates)]
            metrics.add_units(f"delta_{t}", "simple_mc", deltas, replicates)
            metrics.add_units(
                f"snr_empirical_{t}", "simple_mc", [100.0 - (d + m + 10 * shift)] * len(deltas), replicates
            )
            metrics.add_units(f"snr_rel_se_{t}", "simple_mc", [0.01] * len(deltas), replicates)
    hard = "d10_m100_s0p50"
    unfitted = [-40.0 - j for j in range(len(mc_errors))]  # r = q with the IS estimate's K: far off
    for variant, errors in (("baseline", mc_errors), ("method", is_errors), ("control_unfitted", unfitted)):
        metrics.add_units("err_hardest", variant, errors, [f"repeat{j}" for j in range(len(errors))])
        v[f"{variant}/err_hardest"] = float(np.mean(errors))
        v[f"{variant}/max_abs_err_hardest"] = float(np.max(np.abs(errors)))
    heavy = "t_d10_m100_s0p50"
    heavy_unfitted = [-70.0 - j for j in range(len(heavy_mc))]
    for variant, errors in (("baseline", heavy_mc), ("method", heavy_is), ("control_unfitted", heavy_unfitted)):
        metrics.add_units("heavy_err_hardest", variant, errors, [f"repeat{j}" for j in range(len(errors))])
    for name in cfg.data.real.datasets:
        splits = [f"split{j}" for j in range(cfg.data.real.splits)]
        metrics.add_units(f"real_err_{name}", "method", list(real_is[: cfg.data.real.splits]), splits)
    v.update(
        {
            f"heavy/{heavy}/delta": 90.0,
            "heavy/delta_hardest": 90.0,
            f"heavy/{heavy}/kl_star_to_family": 1e-4,
            f"heavy/{heavy}/method/delta_r": 0.01,
            f"heavy/{heavy}/method/min_std_over_tail_floor": 1.1,
            "check/heavy_kl_star_to_family_min": 1e-4,
            "check/heavy_quadrature_change_max": 1e-10,
            "real/snr_checked": 2.0,
            "real/snr_max_rel_dev": 0.03,
            "real/err_max_z": 0.5,
            "real/delta_max": 50.0,
            "real/mc_err_min": -3.0,
            "real/is_abs_err_max": float(np.max(np.abs(real_is))),
            f"problem/delta_{hard}": 40.0,
            "problem/delta_hardest": 40.0,
            f"baseline/samples_{hard}": 2000.0,
            "baseline/sweep_err_Kmax": -20.0,
            f"method/ess_frac_{hard}": 0.9,
            f"baseline/ess_frac_{hard}": 1e-4,
            "snr/max_rel_dev": 0.02,
            "snr/checked": 3.0,
            "snr/max_rel_se": 0.02,
            "baseline/err_max_z": 0.0,
            "check/optimal_logw_spread": 0.0,
            "check/optimal_abs_err": 0.0,
            "check/delta_expfam_max_rel_err": 0.0,
        }
    )
    return metrics


def _claim_cfg():
    return Config.for_scale(
        "smoke", {"data.replicates": 4, "estimate_repeats": 4, "heavy_repeats": 4, "data.real.splits": 3}
    )


def test_claim_holds_when_every_interval_clears_its_threshold():
    from models.ppd_snr.pipeline import claim

    result = claim(_claim_cfg(), _claim_metrics(_claim_cfg(), [-80.0, -75.0, -90.0, -85.0], [0.01, -0.02, 0.0, 0.01]))
    assert len(result.criteria) == 13 and result.verdict == "holds", [c.describe() for c in result.criteria]
    delta = result.criterion("delta_increases_m")
    assert delta.estimate == pytest.approx(40.0) and delta.low == delta.high == pytest.approx(
        40.0
    )  # identical replicates
    mc = result.criterion("mc_err_hardest")
    assert mc.estimate == pytest.approx(-82.5) and mc.high < -50 and mc.n_units == 4


def test_claim_is_inconclusive_when_the_is_error_interval_straddles_minus_one_nat():
    from models.ppd_snr.pipeline import claim

    # Mean -0.75 nats: within 1 nat on average, but 4 repeats with sd 0.77 leave -1 inside the t interval.
    result = claim(_claim_cfg(), _claim_metrics(_claim_cfg(), [-80.0, -75.0, -90.0, -85.0], [-1.5, -0.5, 0.2, -1.2]))
    low_side = result.criterion("is_err_hardest_gt_minus1")
    assert low_side.estimate == pytest.approx(-0.75) and low_side.low < -1 < low_side.high
    assert low_side.state == "inconclusive" and result.criterion("is_err_hardest_lt_plus1").state == "holds"
    assert result.verdict == "inconclusive"


def test_claim_fails_when_simple_mc_is_close_or_delta_does_not_rise():
    from models.ppd_snr.pipeline import claim

    cfg = _claim_cfg()
    close = claim(cfg, _claim_metrics(cfg, [-3.0, -4.0, -2.0, -5.0], [0.0, 0.0, 0.01, -0.01]))
    assert close.criterion("mc_err_hardest").state == "fails" and close.verdict == "fails"


def test_sweep_criterion_is_inconclusive_when_replicates_disagree_on_the_step():
    from models.ppd_snr.pipeline import claim

    # Each step is 3x its size in half the replicates and -1x in the others: the replicate means rise along every
    # sweep (today's boolean says "monotone"), but resampling replicates puts 0 inside the interval.
    cfg = _claim_cfg()
    result = claim(cfg, _claim_metrics(cfg, [-80.0, -75.0, -90.0, -85.0], [0.0, 0.0, 0.01, -0.01], step_noise=2.0))
    for axis, smallest_step in (("d", 4.0), ("m", 40.0), ("shift", 4.0)):
        delta = result.criterion(f"delta_increases_{axis}")
        assert delta.estimate == pytest.approx(smallest_step) and delta.low < 0 < delta.high, delta.describe()
        assert delta.state == "inconclusive"
    assert result.criterion("snr_decreases_d").state == "holds" and result.verdict == "inconclusive"


def test_claim_fails_when_the_hard_case_is_not_hard_and_is_inconclusive_when_real_splits_straddle():
    from models.ppd_snr.pipeline import claim

    cfg = _claim_cfg()
    good = ([-80.0, -75.0, -90.0, -85.0], [0.01, -0.02, 0.0, 0.01])
    easy = claim(cfg, _claim_metrics(cfg, *good, heavy_mc=(-10.0, -12.0, -11.0, -9.0)))
    assert easy.criterion("heavy_mc_err_hardest").state == "fails" and easy.verdict == "fails"
    # Real IS errors 0.2, 1.9, 0.1 nats on three splits: mean 0.73 < 1, but resampling splits reaches 1.9.
    straddle = claim(cfg, _claim_metrics(cfg, *good, real_is=(0.2, 1.9, 0.1)))
    worst = straddle.criterion("real_is_worst_abs_err")
    assert worst.estimate == pytest.approx(0.7333, abs=1e-3) and worst.low < 1 < worst.high
    assert worst.state == "inconclusive" and straddle.verdict == "inconclusive"
    assert (
        claim(cfg, _claim_metrics(cfg, *good, real_is=(2.0, 2.1, 1.9))).criterion("real_is_worst_abs_err").state
        == "fails"
    )


# ----------------------------------------------------------------------------- regression and heavy-tailed targets


def _regression(d=3, n=30, m=20, rho=0.0, seed=0, sigma=0.7, tau=1.3):
    rng = np.random.default_rng(seed)
    cov = (1 - rho) * np.eye(d) + rho * np.ones((d, d))
    x = rng.multivariate_normal(np.zeros(d), cov, n + m)
    y = x @ rng.standard_normal(d) + sigma * rng.standard_normal(n + m)
    return alg.RegressionTarget(x[:n], y[:n], x[n:], y[n:], sigma, tau)


def test_regression_log_ppd_and_moments_match_the_marginal_of_the_test_set():
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((50, 3)), rng.standard_normal(50)
    sigma, tau = 0.7, 1.3
    t = alg.RegressionTarget(x[:30], y[:30], x[30:], y[30:], sigma, tau)
    cov = sigma**2 * np.eye(20) + x[30:] @ t.q_cov @ x[30:].T
    assert t.log_ppd == pytest.approx(stats.multivariate_normal(x[30:] @ t.q_mean, cov).logpdf(y[30:]), abs=1e-9)
    # The posterior matches a direct computation, and p(D*|beta)^2 is the likelihood of D* twice over.
    direct = np.linalg.inv(np.eye(3) / tau**2 + x[:30].T @ x[:30] / sigma**2)
    assert np.allclose(t.q_cov, direct) and np.allclose(t.q_mean, direct @ x[:30].T @ y[:30] / sigma**2)
    twice = alg.RegressionTarget(x[:30], y[:30], np.vstack([x[30:]] * 2), np.concatenate([y[30:]] * 2), sigma, tau)
    assert t.log_moment(2) == pytest.approx(twice.log_ppd, abs=1e-9)
    log_w = alg.TargetSampler(t, cost_per_draw=9).draw(400_000, _gen(2))
    assert float(alg.log_mean_exp(log_w)) == pytest.approx(t.log_ppd, abs=4 * math.sqrt(math.expm1(t.delta) / 4e5))


def test_full_gaussian_chi2_and_kl_reduce_to_the_diagonal_forms_and_r_star_has_zero_variance():
    mean_r, std_r, mean_s, var_s = np.array([0.1, -0.2]), np.array([0.9, 1.2]), np.array([0.0, 0.3]), 0.8
    full = alg.full_gaussian_log_chi2(mean_r, np.diag(std_r**2), mean_s, var_s * np.eye(2))
    assert full == pytest.approx(alg.gaussian_log_chi2(mean_r, std_r, mean_s, var_s), abs=1e-10)
    kl = alg.full_gaussian_kl(mean_r, np.diag(std_r**2), mean_s, var_s * np.eye(2))
    assert kl == pytest.approx(alg.gaussian_kl(mean_r, std_r, mean_s, var_s), abs=1e-10)
    assert alg.full_gaussian_log_chi2(mean_s, np.eye(2) * 0.3, mean_s, np.eye(2)) == math.inf  # r too narrow
    t = _regression(rho=0.9)
    tril = np.linalg.cholesky(t.star_cov)
    log_w = alg.TargetSampler(t, alg.GaussianDensity(t.star_mean, tril=tril), 9).draw(200, _gen(3)).numpy()
    assert np.ptp(log_w) < 1e-8 and abs(log_w[0] - t.log_ppd) < 1e-8
    assert t.diagnostics(t.star_mean, tril)["val/delta_r_exact"] == pytest.approx(0.0, abs=1e-9)


def test_heavy_tailed_quadrature_matches_scipy_and_r_star_is_not_gaussian():
    rng = np.random.default_rng(4)
    scale, nu = 0.6, 3.0
    x_train, x_test = scale * rng.standard_t(nu, (40, 2)), 0.5 + scale * rng.standard_t(nu, (15, 2))
    t = alg.HeavyTailTarget(x_train, x_test, scale, nu, sigma0=1.0)
    # Laplace: the gradient of the log posterior vanishes at q's mean.
    grad = -t.q_mean + ((nu + 1) * (x_train - t.q_mean) / (nu * scale**2 + (x_train - t.q_mean) ** 2)).sum(0)
    assert np.abs(grad).max() < 1e-8
    reference = 0.0
    for k in range(2):

        def integrand(z, k=k):
            log_lik = stats.t.logpdf(x_test[:, k], nu, loc=z, scale=scale).sum() - t.quadrature.log_z_coord[k]
            return stats.norm.pdf(z, t.q_mean[k], t.q_std[k]) * math.exp(log_lik)

        reference += (
            math.log(
                integrate.quad(
                    integrand,
                    t.q_mean[k] - 15 * t.q_std[k],
                    t.q_mean[k] + 15 * t.q_std[k],
                    epsabs=1e-13,
                    epsrel=1e-12,
                    limit=200,
                )[0]
            )
            + t.quadrature.log_z_coord[k]
        )
    assert t.log_ppd == pytest.approx(reference, abs=1e-7)
    assert t.quadrature.kl_star_to_family > 1e-6  # far above quadrature error: r* is not Gaussian
    log_w = alg.TargetSampler(t, cost_per_draw=30).draw(200_000, _gen(5))
    se = math.sqrt(math.expm1(t.quadrature.delta) / 2e5)
    assert float(alg.log_mean_exp(log_w)) == pytest.approx(t.log_ppd, abs=4 * se)
    # The exact Delta_r of a proposal equals the Monte-Carlo log second-moment ratio of its weights.
    mean, std = t.quadrature.star_mean, 1.2 * t.quadrature.star_std
    w = alg.TargetSampler(t, alg.GaussianDensity(mean, std=std), 30).draw(200_000, _gen(6))
    empirical = float(torch.logsumexp(2 * w, 0) - 2 * torch.logsumexp(w, 0) + math.log(len(w)))
    assert empirical == pytest.approx(t.quadrature.delta_r(mean, std), abs=0.02)


def test_large_nu_makes_r_star_gaussian():
    rng = np.random.default_rng(8)
    x_train, x_test = rng.standard_normal((40, 2)), 0.3 + rng.standard_normal((15, 2))
    heavy = alg.HeavyTailTarget(x_train, x_test, 1.0, 3.0, 1.0).quadrature.kl_star_to_family
    light = alg.HeavyTailTarget(x_train, x_test, 1.0, 1e6, 1.0).quadrature.kl_star_to_family
    assert light < 1e-8 < heavy


# ----------------------------------------------------------------------------- posteriordb data


def test_posteriordb_designs_and_splits():
    from models.ppd_snr.data import load_stan_data, regression_design, split_regression

    x, y, names = regression_design("radon_mn", load_stan_data("radon_mn"))
    assert x.shape == (919, 87) and names[:2] == ["floor", "log_uppm"] and np.allclose(x[:, 2:].sum(1), 1)
    x, y, _ = regression_design("kidiq", load_stan_data("kidiq"))
    split = split_regression(x, y, 0.5, np.random.default_rng(0))
    assert split["x_test"].shape == (217, 3) and split["x_train"].shape == (217, 3)
    assert np.allclose(split["x_train"][:, 0], 1) and np.allclose(split["x_train"][:, 1:].mean(0), 0)
    assert split["y_train"].mean() == pytest.approx(0, abs=1e-12) and 0.5 < split["sigma"] < 1.0


def test_altered_posteriordb_file_is_a_raw_data_error(tmp_path, monkeypatch):
    import zipfile

    from models.common.raw_data import RawDataError
    from models.ppd_snr.data import load_stan_data

    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    (tmp_path / "data" / "raw" / "posteriordb").mkdir(parents=True)
    with pytest.raises(RawDataError, match="missing"):
        load_stan_data("kidiq")
    path = tmp_path / "data" / "raw" / "posteriordb" / "kidiq.json.zip"
    with zipfile.ZipFile(path, "w") as archive:  # the official layout (one JSON), but not the pinned bytes
        archive.writestr("kidiq.json", json.dumps({"N": 1, "kid_score": [1], "mom_hs": [0], "mom_iq": [90.0]}))
    with pytest.raises(RawDataError, match="sha256"):
        load_stan_data("kidiq")


def test_full_rank_proposal_density_matches_scipy_in_the_whitened_parameterisation():
    from models.ppd_snr.networks import FullRankGaussianProposal

    base = torch.tensor([[0.5, 0.0, 0.0], [0.2, 0.01, 0.0], [-0.3, 0.004, 2.0]], dtype=torch.float64)
    r = FullRankGaussianProposal(torch.tensor([1.0, -2.0, 0.3]), base)
    with torch.no_grad():
        r.shift.copy_(torch.tensor([0.1, -0.4, 0.2]))
        r.log_diag.copy_(torch.tensor([0.2, -0.1, 0.05]))
        r.off_diagonal.copy_(torch.randn(3, 3, generator=_gen(10), dtype=torch.float64))
    z = r.sample(6, _gen(11))
    cov = (r.tril @ r.tril.T).detach().numpy()
    reference = stats.multivariate_normal(r.mean.detach().numpy(), cov).logpdf(z.numpy())
    assert np.allclose(r(z).detach().numpy(), reference, atol=1e-10)
    fresh = FullRankGaussianProposal(torch.zeros(3), base)  # r = q at initialisation
    assert torch.allclose(fresh.tril, base) and torch.allclose(fresh.mean, torch.zeros(3, dtype=torch.float64))
