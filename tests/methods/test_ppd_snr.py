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

    # A smaller step than the pipeline's 0.05, so that Adam's noise floor sits well below the tolerance.
    cfg = Config.for_scale("smoke", {"proposal.steps": 300, "proposal.val_every": 100, "proposal.lr": 0.01})
    p = alg.make_problem(_data(d=4, m=40, shift=0.5, n=40))
    proposal, records = fit_proposal(cfg, p, "elbo", _gen(6), seed=0)
    start, final = records[0], exact_diagnostics(proposal, alg.optimal_proposal(p))
    assert start["val/delta_r_exact"] == pytest.approx(alg.delta(p), rel=1e-9)  # r = q at the start
    assert final["val/kl_exact"] < 0.02 * start["val/kl_exact"] and final["val/delta_r_exact"] < 0.1
    assert all(math.isfinite(v) for r in records for v in r.values())


# ----------------------------------------------------------------------------- data and config


def test_config_rejects_bad_values():
    for override in (
        {"data.sweep_d": [5, 1]},
        {"proposal.proxies": ["chi2"]},
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
    cfg = Config.for_scale("smoke", {"data.user_npz": "mine.npz"})
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
        prepare(Config.for_scale("smoke", {"data.user_npz": "bad.npz"}), tmp_path / "out2")


# ----------------------------------------------------------------------------- pipeline


def test_smoke_pipeline_end_to_end(tmp_path):
    from tasks import steps

    cfg = SPEC.make_config("smoke")
    steps.prepare(SPEC, cfg, tmp_path)
    artifacts = steps.train(SPEC, cfg, tmp_path)
    metrics, result = steps.evaluate(SPEC, cfg, tmp_path)
    v = metrics.values
    assert not metrics.non_finite() and len(metrics.figures) == 3
    assert all(result.sanity.values()), result.sanity
    hard = "d10_m100_s0p50"
    assert v["baseline/samples_" + hard] == cfg.estimate_samples + artifacts.summary["training_evaluations"]
    # Delta ~ 40 here: simple MC is many nats low, learned IS is close, with far better ESS.
    assert v["problem/delta_hardest"] > 20 and v["baseline/err_hardest"] < -5
    assert v["method/abs_err_hardest"] < 0.5 and v[f"method/ess_frac_{hard}"] > 100 * v[f"baseline/ess_frac_{hard}"]
    assert v["snr/checked"] >= 3 and v["snr/max_rel_dev"] <= 0.1
    claim = json.loads((tmp_path / "outputs" / "ppd_snr" / "claim.json").read_text())
    mc = next(c for c in claim["criteria"] if c["name"] == "mc_err_hardest")
    assert mc["estimate"] == pytest.approx(v["baseline/err_hardest"]) and mc["n_units"] == cfg.estimate_repeats
    assert result.criterion("is_err_hardest_lt_plus1").estimate == pytest.approx(v["method/err_hardest"])
    # One data replicate at smoke: the sweep criteria have no interval, so they can at best be inconclusive.
    assert result.criterion("delta_increases_d").state == "inconclusive" and result.verdict != "holds"
    bank = SPEC.module().load_model(cfg, tmp_path / "outputs" / "ppd_snr" / "model")
    z = bank.get(bank.primary).sample(5, _gen())
    assert bank(z).shape == (5,) and torch.isfinite(bank(z)).all()


# ----------------------------------------------------------------------------- claim from hand-built metrics


def _claim_metrics(cfg, mc_errors, is_errors, step_noise=0.0) -> Metrics:
    """Every key claim() reads: Delta = d + m + 10 shift (SNR = 100 minus it) on every sweep point, each replicate's
    Delta scaled by 1 +- step_noise (alternating), plus the hardest setting's repeats."""
    from models.ppd_snr.data import tag
    from models.ppd_snr.pipeline import sweep_axes

    v = {}
    for _, points in sweep_axes(cfg).values():
        for d, m, shift in points:  # the base point lies on all three sweeps: its values depend on it alone
            for r in range(cfg.data.replicates):
                key = f"snr/{tag(d, m, shift)}_r{r}"
                v[f"{key}/delta"] = (1 + step_noise * (-1) ** r) * (d + m + 10 * shift)
                v[f"{key}/snr_empirical"], v[f"{key}/snr_rel_se"] = 100.0 - (d + m + 10 * shift), 0.01
    hard = "d10_m100_s0p50"
    for variant, errors in (("baseline", mc_errors), ("method", is_errors)):
        for j, err in enumerate(errors):
            v[f"{variant}/repeat{j}/err_hardest"] = err
        v[f"{variant}/err_hardest"] = float(np.mean(errors))
        v[f"{variant}/max_abs_err_hardest"] = float(np.max(np.abs(errors)))
    v.update(
        {
            f"problem/delta_{hard}": 40.0,
            "problem/delta_hardest": 40.0,
            f"baseline/samples_{hard}": 2000.0,
            "baseline/sweep_err_Kmax": -20.0,
            f"method/ess_frac_{hard}": 0.9,
            "snr/max_rel_dev": 0.02,
            "snr/checked": 3.0,
            "snr/max_rel_se": 0.02,
            "baseline/err_max_z": 0.0,
            "check/optimal_logw_spread": 0.0,
            "check/optimal_abs_err": 0.0,
            "check/delta_expfam_max_rel_err": 0.0,
        }
    )
    return Metrics(v)


def _claim_cfg():
    return Config.for_scale("smoke", {"data.replicates": 4, "estimate_repeats": 4})


def test_claim_holds_when_every_interval_clears_its_threshold():
    from models.ppd_snr.pipeline import claim

    result = claim(_claim_cfg(), _claim_metrics(_claim_cfg(), [-80.0, -75.0, -90.0, -85.0], [0.01, -0.02, 0.0, 0.01]))
    assert len(result.criteria) == 9 and result.verdict == "holds", [c.describe() for c in result.criteria]
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
