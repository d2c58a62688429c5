"""kernel_sgd on the sphere S^{d-1}: harmonic dimensions and Gegenbauer polynomials against references,
the addition theorem and Funk-Hecke by Monte Carlo, the d = 2 sphere code against the circle's primal
code, dual SGD against a naive loop, dual KRR against scikit-learn, the data generator and the config."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

os.environ.setdefault("PAPERLINE_PROGRESS", "0")

from models.base import ValidationError  # noqa: E402
from models.kernel_sgd import SPEC  # noqa: E402
from models.kernel_sgd import algorithm as alg  # noqa: E402
from models.kernel_sgd import data as D  # noqa: E402


def _t(x):
    return torch.as_tensor(x, dtype=torch.float64)


def _points(n, dim, seed=0):
    return D.uniform_sphere(np.random.default_rng(seed), (n,), dim)


# ----------------------------------------------------------------------------- harmonics


def test_harmonic_dimensions_match_closed_forms():
    assert [alg.harmonic_dimension(3, k) for k in range(6)] == [2 * k + 1 for k in range(6)]
    assert [alg.harmonic_dimension(2, k) for k in range(5)] == [1, 2, 2, 2, 2]
    for d in (4, 10, 20):
        assert alg.harmonic_dimension(d, 1) == d
        assert alg.harmonic_dimension(d, 2) == d * (d + 1) // 2 - 1  # traceless symmetric matrices
        # Polynomials of degree <= L on S^{d-1} are the degree-L harmonics of S^d: sum_k N(d, k) = N(d + 1, L).
        for L in range(5):
            assert alg.harmonic_dimensions(d, L).sum() == alg.harmonic_dimension(d + 1, L)
    with pytest.raises(ValueError):
        alg.harmonic_dimension(1, 2)


@pytest.mark.parametrize("dim", [3, 5, 10])
def test_gegenbauer_matches_scipy(dim):
    from scipy.special import eval_gegenbauer

    t = np.linspace(-1, 1, 41)
    polys = alg.gegenbauer(_t(t), dim, 6).numpy()
    alpha = (dim - 2) / 2
    for k in range(7):
        np.testing.assert_allclose(polys[k], eval_gegenbauer(k, alpha, t) / eval_gegenbauer(k, alpha, 1.0), atol=1e-12)
    np.testing.assert_allclose(polys[:, -1], 1.0)  # P_k(1) = 1


def test_gegenbauer_in_two_dimensions_is_chebyshev():
    theta = np.linspace(0, np.pi, 17)
    polys = alg.gegenbauer(_t(np.cos(theta)), 2, 5).numpy()
    np.testing.assert_allclose(polys, np.cos(np.arange(6)[:, None] * theta), atol=1e-12)


def test_addition_theorem_and_funk_hecke_by_monte_carlo():
    """E_x[N_k P_k(<x,u>) N_j P_j(<x,w>)] = delta_kj N_k P_k(<u,w>) (so the zonal functions of one degree
    reproduce that degree and different degrees are orthogonal), hence M = E K K and the target norms."""
    dim, degree = 5, 3
    x = _t(_points(200_000, dim, seed=1))
    u, w = _t(_points(2, dim, seed=2))
    counts = alg.harmonic_dimensions(dim, degree)
    pu = alg.gegenbauer(x @ u, dim, degree) * _t(counts)[:, None]
    pw = alg.gegenbauer(x @ w, dim, degree) * _t(counts)[:, None]
    inner = float(u @ w)
    expected = np.diag(counts * alg.gegenbauer(_t([inner]), dim, degree).numpy()[:, 0])
    products = (pu[:, None, :] * pw[None, :, :]).numpy()  # (k, j, points)
    estimate = products.mean(-1)
    stderr = products.std(-1) / math.sqrt(x.shape[0])
    assert np.all(np.abs(estimate - expected) < 5 * stderr + 1e-12), (estimate, expected)

    mu = _t(alg.sphere_eigenvalues(dim, degree))
    pair = _t(_points(2, dim, seed=3))
    through = alg.sphere_kernel(pair[:1], x, mu, dim)[0] * alg.sphere_kernel(pair[1:], x, mu, dim)[0]
    msq = float(alg.sphere_kernel_square(pair[:1], pair[1:], mu, dim))
    assert abs(float(through.mean()) - msq) < 5 * float(through.std()) / math.sqrt(x.shape[0])


def test_zonal_target_norms_and_kernel_filtered_target():
    dim, degree = 6, 3
    rng = np.random.default_rng(4)
    directions = _t(D.uniform_sphere(rng, (degree + 1,), dim))
    amplitude = _t([0.0, 0.7, 0.4, 0.2])
    x = _t(_points(100_000, dim, seed=5))
    f = alg.zonal_target(x, directions, amplitude, dim).numpy()
    sq = f**2
    assert abs(sq.mean() - float((amplitude**2).sum())) < 5 * sq.std() / math.sqrt(len(sq))  # ||f*||^2 = sum c_k^2
    # b(a) = E_x K(a, x) f*(x) = sum_k mu_k f_k(a) (each f_k an eigenfunction).
    mu = _t(alg.sphere_eigenvalues(dim, degree))
    a = _t(_points(3, dim, seed=6))
    products = (alg.sphere_kernel(a, x, mu, dim) * _t(f)).numpy()
    b = alg.zonal_target(a, directions, amplitude, dim, filt=mu).numpy()
    assert np.all(np.abs(products.mean(1) - b) < 5 * products.std(1) / math.sqrt(x.shape[0]))
    assert alg.source_amplitudes(2.0, mu.numpy()) == pytest.approx(mu.numpy())  # c_k^2 = mu_k^s at s = 2


# ----------------------------------------------------------------------------- d = 2: the circle's primal code


def _circle_as_sphere(harmonics=8, n=48, seed=0):
    """The circle set-up with mu_0 = 0 and mu_k = lambda_k: the sphere code at d = 2 is the circle's kernel."""
    rng = np.random.default_rng(seed)
    theta = rng.uniform(0, 2 * np.pi, n)
    lam = alg.eigenvalues(harmonics, 1.5)
    coef = alg.target_coefficients(1.0, harmonics, 1.5)
    y = alg.target_function(theta, coef) + 0.3 * rng.standard_normal(n)
    points = np.stack([np.cos(theta), np.sin(theta)], 1)
    mu = np.concatenate([[0.0], lam])
    directions = np.tile([1.0, 0.0], (harmonics + 1, 1))
    amplitude = np.concatenate([[0.0], coef])
    return theta, y, lam, coef, _t(points), _t(mu), _t(directions), _t(amplitude)


def test_sphere_code_in_two_dimensions_equals_the_circle_primal_code():
    theta, y, lam, coef, x, mu, directions, amplitude = _circle_as_sphere()
    np.testing.assert_allclose(alg.sphere_kernel(x, x, mu, 2).numpy(), alg.kernel(theta, theta, lam), atol=1e-12)
    np.testing.assert_allclose(alg.zonal_target(x, directions, amplitude, 2).numpy(), alg.target_function(theta, coef))
    assert alg.sphere_kernel_diagonal(mu.numpy(), 2) == pytest.approx(alg.feature_norm_sq(lam))

    eta0 = np.array([0.1, 0.5]) / alg.feature_norm_sq(lam)
    ns = [16, 48]
    primal = alg.run_sgd(_t(theta)[None], _t(y)[None], _t(coef)[None], _t(lam), _t(eta0), ns)
    gram, msq = alg.sphere_kernel(x, x, mu, 2), alg.sphere_kernel_square(x, x, mu, 2)
    b = alg.zonal_target(x, directions, amplitude, 2, filt=mu)
    norm_sq = float((amplitude**2).sum())
    dual = alg.dual_sgd(gram, _t(y)[None], _t(eta0), ns)
    for j, n in enumerate(ns):
        exp = alg.dual_risk(dual.step_decay(j)[0], msq[:n, :n], b[:n], norm_sq).numpy()
        avg = alg.dual_risk(dual.averaged(j)[0], msq[:n, :n], b[:n], norm_sq).numpy()
        np.testing.assert_allclose(exp, primal.exp_risk[0, j], rtol=1e-9)
        np.testing.assert_allclose(avg, primal.avg_risk[0, j], rtol=1e-9)
    # KRR: the dual path against the circle's moment-based primal path.
    ridges = np.array([1e-4, 1e-2])
    primal_krr, _ = alg.ridge_path(_t(theta), _t(y)[:, None], _t(coef)[None], _t(lam), _t(ridges), ns)
    for j, n in enumerate(ns):
        coefs = alg.dual_ridge_path(gram, _t(y)[None], _t(ridges), n)
        risk = alg.dual_risk(coefs[0], msq[:n, :n], b[:n], norm_sq).numpy()
        np.testing.assert_allclose(risk, primal_krr[0, :, j], rtol=1e-7)


# ----------------------------------------------------------------------------- dual SGD and KRR


def _naive_kernel_sgd(gram, y, etas, average=False):
    """Reference: f_t = f_{t-1} - eta_t (f_{t-1}(x_t) - y_t) K(x_t, .), kept as all n coefficients each step."""
    n = len(y)
    alpha, total = np.zeros(n), np.zeros(n)
    for t in range(n):
        residual = alpha @ gram[:, t] - y[t]
        alpha = alpha.copy()
        alpha[t] -= etas[t] * residual
        total += alpha
    return total / n if average else alpha


def test_dual_sgd_equals_a_naive_loop_for_every_run():
    dim, degree, n = 5, 3, 40
    x = _t(_points(n, dim, seed=7))
    mu = _t(alg.sphere_eigenvalues(dim, degree))
    gram = alg.sphere_kernel(x, x, mu, dim)
    y = np.random.default_rng(8).standard_normal((2, n))
    eta0 = np.array([0.2, 0.7]) / alg.sphere_kernel_diagonal(mu.numpy(), dim)
    ns = [10, 25, 40]
    runs = alg.dual_sgd(gram, _t(y), _t(eta0), ns)
    g = gram.numpy()
    for target in range(2):
        for j, m in enumerate(ns):
            for e, e0 in enumerate(eta0):
                exp = _naive_kernel_sgd(g[:m, :m], y[target, :m], alg.step_decay(np.arange(m), m, e0))
                avg = _naive_kernel_sgd(g[:m, :m], y[target, :m], np.full(m, e0), average=True)
                np.testing.assert_allclose(runs.step_decay(j)[target, e].numpy(), exp, atol=1e-13)
                np.testing.assert_allclose(runs.averaged(j)[target, e].numpy(), avg, atol=1e-13)
    with pytest.raises(ValueError):
        alg.dual_sgd(gram, _t(y), _t(eta0), [50])


def test_dual_ridge_path_equals_sklearn_kernel_ridge():
    from sklearn.kernel_ridge import KernelRidge

    dim, degree, n = 6, 3, 50
    x = _t(_points(n, dim, seed=9))
    mu = _t(alg.sphere_eigenvalues(dim, degree))
    gram = alg.sphere_kernel(x, x, mu, dim)
    y = np.random.default_rng(10).standard_normal((1, n))
    ridges = np.array([1e-4, 1e-2, 1.0])
    coefs = alg.dual_ridge_path(gram, _t(y), _t(ridges), 30)
    for i, r in enumerate(ridges):
        reference = KernelRidge(alpha=30 * r, kernel="precomputed").fit(gram.numpy()[:30, :30], y[0, :30])
        np.testing.assert_allclose(coefs[0, i].numpy(), reference.dual_coef_, atol=1e-9)
    model = alg.SphereEstimator(x.numpy()[:30], coefs[0, 1].numpy(), mu.numpy())
    grid = _points(7, dim, seed=11)
    np.testing.assert_allclose(
        model.predict(grid), alg.sphere_kernel(_t(grid), x[:30], mu, dim).numpy() @ coefs[0, 1].numpy()
    )


def test_dual_risk_equals_monte_carlo_and_is_the_null_risk_at_zero():
    dim, degree, n = 6, 3, 30
    x = _t(_points(n, dim, seed=12))
    mu = _t(alg.sphere_eigenvalues(dim, degree))
    directions = _t(D.uniform_sphere(np.random.default_rng(13), (degree + 1,), dim))
    amplitude = _t(alg.source_amplitudes(1.0, mu.numpy()))
    msq, b = alg.sphere_kernel_square(x, x, mu, dim), alg.zonal_target(x, directions, amplitude, dim, filt=mu)
    norm_sq = float((amplitude**2).sum())
    assert float(alg.dual_risk(torch.zeros(n, dtype=torch.float64), msq, b, norm_sq)) == pytest.approx(norm_sq)
    coef = _t(np.random.default_rng(14).standard_normal(n) * 0.3)
    closed = float(alg.dual_risk(coef, msq, b, norm_sq))
    test = _t(_points(100_000, dim, seed=15))
    sq = (
        (alg.sphere_kernel(test, x, mu, dim) @ coef - alg.zonal_target(test, directions, amplitude, dim)) ** 2
    ).numpy()
    assert abs(sq.mean() - closed) < 4 * sq.std() / math.sqrt(len(sq))


# ----------------------------------------------------------------------------- data and config


def test_sphere_sample_sizes_points_and_streams():
    cfg = SPEC.make_config("default")
    assert D.sphere_sample_sizes(cfg.data.sphere) == [10, 18, 32, 56, 100, 178, 316, 562, 1000]
    pts = D.uniform_sphere(np.random.default_rng(0), (500,), 7)
    np.testing.assert_allclose(np.linalg.norm(pts, axis=1), 1.0)
    assert abs(pts.mean(0)).max() < 0.15  # no preferred direction
    smoke = SPEC.make_config("smoke")
    arrays, meta = D.sphere_arrays(smoke)
    assert arrays["sphere_x"].shape == (2, 88, 6) and meta["claim_target"] == "sphere_s2"
    # y = f* + noise with the recorded directions and amplitudes; both targets share the inputs and noise.
    clean = {
        t["name"]: alg.zonal_target(
            _t(arrays["sphere_x"][1]),
            _t(arrays["sphere_directions"][1]),
            _t(arrays[f"{t['name']}_amplitude"]),
            6,
        ).numpy()
        for t in meta["targets"]
    }
    residuals = [arrays[f"{name}_y"][1] - f for name, f in clean.items()]
    np.testing.assert_allclose(residuals[0], residuals[1], atol=1e-12)
    assert meta["targets"][0]["norm_sq"] == pytest.approx(float((arrays["sphere_s2_amplitude"] ** 2).sum()))
    # The circle's streams do not depend on the sphere's settings.
    other = SPEC.make_config("smoke", {"data.sphere.dim": 7})
    np.testing.assert_array_equal(D.circle_arrays(other)[0]["theta"], D.circle_arrays(smoke)[0]["theta"])


@pytest.mark.parametrize(
    "override",
    [
        {"data.sphere.claim_source": 3.0},  # not among the sources
        {"data.sphere.gamma_min": 3.0},  # not below gamma_max
        {"data.sphere.gamma_max": 4.5},  # n = 10^4.5 > 20000
        {"data.sphere.gamma_min": 0.5},  # n = round(10^0.5) = 3 < 4
        {"sphere.judged_gamma": [2.5, 3.5]},  # outside the data's gamma range
        {"sphere.eta_log10_range": [-2.0, 0.1]},  # eta0 K(x, x) > 1: unstable
        {"sphere.ridge_log10_range": [1.0, -1.0]},
    ],
)
def test_sphere_config_refuses_bad_values(override):
    with pytest.raises(ValidationError):
        SPEC.make_config("default", override)
