"""The mathematics: closed forms of the conjugate-Gaussian model and the Monte-Carlo estimators.

Model: z ~ N(0, sigma0^2 I_d), x_i | z ~ N(z, sigma^2 I_d). Posterior q = N(mu_n, s^2 I) with
1/s^2 = 1/sigma0^2 + n/sigma^2. With a = m/sigma^2 and x* the test mean,
p(D*|z) = C exp(-a ||z - x*||^2 / 2), so every moment E_q[p(D*|z)^k] is Gaussian in closed form:

    log E_q[p(D*|z)^k] = k log C - (d/2) log(1 + k a s^2) - k a ||mu_n - x*||^2 / (2 (1 + k a s^2)).

k = 1 is log p(D*|D); Delta = log E_q[p^2] - 2 log E_q[p] sets the SNR of simple MC,
SNR(R_K) = sqrt(K / (e^Delta - 1)). Closed forms are numpy float64; sampling is torch float64
(optionally on a GPU for the paper scale).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from models.ppd_snr.data import GaussianData

LOG_2PI = math.log(2 * math.pi)


# ----------------------------------------------------------------------------- closed forms


@dataclass(frozen=True)
class Problem:
    """Sufficient statistics of one dataset (everything the closed forms and estimators use)."""

    n: int
    m: int
    sigma: float
    sigma0: float
    post_mean: np.ndarray  # mu_n
    post_var: float  # s^2
    test_mean: np.ndarray  # x*
    log_c: float  # log C: p(D*|z) = C exp(-a ||z - x*||^2 / 2)

    @property
    def d(self) -> int:
        return len(self.post_mean)

    @property
    def a(self) -> float:
        return self.m / self.sigma**2

    @property
    def rho(self) -> float:
        """a s^2: the test/train precision ratio (about m/n when the prior is weak)."""
        return self.a * self.post_var

    @property
    def mismatch(self) -> float:
        """||mu_n - x*||^2."""
        return float(np.sum((self.post_mean - self.test_mean) ** 2))


def make_problem(data: GaussianData) -> Problem:
    n, m, d = len(data.x_train), len(data.x_test), data.d
    precision = 1 / data.sigma0**2 + n / data.sigma**2
    post_var = 1 / precision
    post_mean = post_var * data.x_train.sum(0) / data.sigma**2
    test_mean = data.x_test.mean(0)
    scatter = float(np.sum((data.x_test - test_mean) ** 2))
    log_c = -0.5 * m * d * (LOG_2PI + 2 * math.log(data.sigma)) - scatter / (2 * data.sigma**2)
    return Problem(n, m, data.sigma, data.sigma0, post_mean, post_var, test_mean, log_c)


def log_ppd(p: Problem) -> float:
    """Exact log p(D*|D)."""
    return p.log_c - 0.5 * p.d * math.log1p(p.rho) - p.a * p.mismatch / (2 * (1 + p.rho))


def delta(p: Problem) -> float:
    """Delta = log E_q[p(D*|z)^2] - 2 log E_q[p(D*|z)] (the brief's closed form)."""
    rho = p.rho
    return 0.5 * p.d * math.log((1 + rho) ** 2 / (1 + 2 * rho)) + p.a**2 * p.post_var * p.mismatch / (
        (1 + rho) * (1 + 2 * rho)
    )


def log_normalised_moment(p: Problem, k: int) -> float:
    """log E_q[(p(D*|z) / p(D*|D))^k]; k = 2 gives Delta."""
    log_moment = k * p.log_c - 0.5 * p.d * math.log1p(k * p.rho) - k * p.a * p.mismatch / (2 * (1 + k * p.rho))
    return log_moment - k * log_ppd(p)


def snr_theory(delta_value: float, k_samples: int) -> float:
    """SNR of the mean of K iid weights whose log second moment ratio is Delta."""
    return math.sqrt(k_samples / math.expm1(delta_value)) if delta_value > 0 else math.inf


def expected_delta(d: int, n: int, m: int, shift: float, sigma: float, sigma0: float) -> float:
    """E_data[Delta] when training data come from z = 0 and test data from shift * 1.

    Delta is linear in ||mu_n - x*||^2, whose expectation is d (shift^2 + s^4 n / sigma^2 + sigma^2 / m),
    so this is the exact mean over datasets: the analytical curve of the sweeps.
    """
    post_var = 1 / (1 / sigma0**2 + n / sigma**2)
    a = m / sigma**2
    rho = a * post_var
    mismatch = d * (shift**2 + post_var**2 * n / sigma**2 + sigma**2 / m)
    return 0.5 * d * math.log((1 + rho) ** 2 / (1 + 2 * rho)) + a**2 * post_var * mismatch / ((1 + rho) * (1 + 2 * rho))


def log_partition(eta: np.ndarray, precision: float) -> float:
    """Phi(eta, P) = log integral exp(eta.z - P ||z||^2 / 2) dz, the Gaussian log-normaliser."""
    return float(eta @ eta) / (2 * precision) + 0.5 * len(eta) * (LOG_2PI - math.log(precision))


def delta_exponential_family(p: Problem) -> float:
    """Delta as the second finite difference Phi(lam + 2 delta) - 2 Phi(lam + delta) + Phi(lam).

    lam = (mu_n / s^2, 1 / s^2) are the posterior's natural parameters, delta = (sum x*_j / sigma^2, m / sigma^2)
    the test data's sufficient statistics: an independent route to the same number.
    """
    lam = (p.post_mean / p.post_var, 1 / p.post_var)
    step = (p.m * p.test_mean / p.sigma**2, p.a)
    phi = [log_partition(lam[0] + j * step[0], lam[1] + j * step[1]) for j in range(3)]
    return phi[2] - 2 * phi[1] + phi[0]


def optimal_proposal(p: Problem) -> tuple[np.ndarray, float]:
    """r*(z) proportional to q(z) p(D*|z): the posterior given D and D* (mean, isotropic variance)."""
    var = 1 / (1 / p.post_var + p.a)
    return var * (p.post_mean / p.post_var + p.a * p.test_mean), var


def gaussian_log_chi2(mean_r, std_r, mean_star, var_star) -> float:
    """Exact Delta_r = log E_r[w^2] - 2 log E_r[w] of IS with a diagonal Gaussian r, w = Z r* / r.

    Per coordinate log integral N(x; mu1, v1)^2 / N(x; mu2, v2) dx with tau = 2 v2 - v1:
    log(sd2 / v1) + (1/2) log(v1 v2 / tau) + (mu1 - mu2)^2 / tau; infinite when tau <= 0 (r too narrow).
    """
    var_r = np.asarray(std_r, np.float64) ** 2
    tau = 2 * var_r - var_star
    if np.any(tau <= 0):
        return math.inf
    per_coord = (
        0.5 * np.log(var_r)
        - math.log(var_star)
        + 0.5 * np.log(var_star * var_r / tau)
        + (np.asarray(mean_r) - mean_star) ** 2 / tau
    )
    return float(per_coord.sum())


def gaussian_kl(mean_r, std_r, mean_star, var_star) -> float:
    """KL(r || r*): the gap log p(D*|D) - ELBO(r) of proxy (A)."""
    var_r = np.asarray(std_r, np.float64) ** 2
    offset = np.asarray(mean_r) - mean_star
    per_coord = 0.5 * (math.log(var_star) - np.log(var_r)) + (var_r + offset**2) / (2 * var_star) - 0.5
    return float(per_coord.sum())


def snr_estimate_rel_se(p: Problem, k_samples: int, repeats: int) -> float:
    """Predicted relative standard error of the empirical SNR (mean / sd over ``repeats`` estimates).

    Delta method on log(mean) - log(sd)/1 with the exact moments E[(R/Z)^j], j <= 4, of one weight,
    turned into the central moments of a mean of K weights. Large when Delta is: the sample sd of
    heavy-tailed weights is then unreliable (the brief's pitfall).
    """
    return _snr_rel_se([log_normalised_moment(p, j) for j in (2, 3, 4)], k_samples, repeats)


# ----------------------------------------------------------------------------- sampling


def _t(x, device) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x, np.float64), dtype=torch.float64, device=device)


class WeightSampler:
    """Draws z from a diagonal Gaussian (q itself for simple MC, or an IS proposal r) and returns
    log-weights: log p(D*|z) for simple MC, log q(z) + log p(D*|z) - log r(z) for IS."""

    def __init__(self, p: Problem, mean=None, std=None, device: str = "cpu") -> None:
        self.simple = mean is None
        self.device = device
        self.post_mean, self.test_mean = _t(p.post_mean, device), _t(p.test_mean, device)
        self.post_std = math.sqrt(p.post_var)
        self.a, self.log_c, self.d = p.a, p.log_c, p.d
        self.mean = self.post_mean if self.simple else _t(mean, device)
        self.std = torch.full_like(self.post_mean, self.post_std) if self.simple else _t(std, device)

    def log_weights_of(self, z: torch.Tensor) -> torch.Tensor:
        log_lik = self.log_c - 0.5 * self.a * ((z - self.test_mean) ** 2).sum(-1)
        if self.simple:
            return log_lik
        log_q = diag_normal_logpdf(z, self.post_mean, torch.full_like(self.post_mean, self.post_std))
        return log_q + log_lik - diag_normal_logpdf(z, self.mean, self.std)

    def draw(self, count: int, generator: torch.Generator) -> torch.Tensor:
        eps = torch.randn(count, self.d, generator=generator, dtype=torch.float64, device=self.device)
        return self.log_weights_of(self.mean + self.std * eps)

    def draw_chunked(self, count: int, generator: torch.Generator, chunk: int) -> torch.Tensor:
        """``count`` log-weights, holding at most about ``chunk`` latent coordinates in memory at once."""
        step = max(1, chunk // self.d)
        return torch.cat([self.draw(min(step, count - i), generator) for i in range(0, count, step)])

    def matrix(self, rows: int, cols: int, generator: torch.Generator, chunk: int) -> torch.Tensor:
        """(rows, cols) log-weights: ``rows`` independent estimates of ``cols`` samples each."""
        if cols * self.d > chunk:
            return torch.stack([self.draw_chunked(cols, generator, chunk) for _ in range(rows)])
        per_block = chunk // (cols * self.d)
        blocks = [
            self.draw(min(per_block, rows - r) * cols, generator).view(-1, cols) for r in range(0, rows, per_block)
        ]
        return torch.cat(blocks)

    def running_estimates(self, checkpoints: list[int], generator: torch.Generator, chunk: int) -> np.ndarray:
        """log (1/K) sum_{k <= K} w_k along one stream of draws, read at each K in ``checkpoints``."""
        out, total, done = [], torch.tensor(-math.inf, dtype=torch.float64, device=self.device), 0
        targets = sorted(checkpoints)
        per_block = max(1, chunk // self.d)
        while done < targets[-1]:
            count = min(per_block, targets[-1] - done)
            cumulative = torch.logaddexp(total, torch.logcumsumexp(self.draw(count, generator), 0))
            for k in targets:
                if done < k <= done + count:
                    out.append(float(cumulative[k - done - 1]) - math.log(k))
            total, done = cumulative[-1], done + count
        return np.array(out)


def diag_normal_logpdf(z: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    return (-0.5 * ((z - mean) / std) ** 2 - torch.log(std) - 0.5 * LOG_2PI).sum(-1)


def log_mean_exp(log_w: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.logsumexp(log_w, dim) - math.log(log_w.shape[dim])


# ----------------------------------------------------------------------------- diagnostics


def effective_sample_size(log_w: np.ndarray) -> float:
    """(sum w)^2 / sum w^2, computed in log space."""
    log_w = np.asarray(log_w, np.float64)
    return float(np.exp(2 * _logsumexp(log_w) - _logsumexp(2 * log_w)))


def _logsumexp(x: np.ndarray) -> float:
    top = np.max(x)
    return float(top + np.log(np.sum(np.exp(x - top))))


def pareto_k(log_w: np.ndarray) -> float:
    """Pareto-k-hat of the largest weights (PSIS diagnostic, Vehtari et al. 2024).

    Tail: the M = min(S/5, 3 sqrt(S)) largest weights, as exceedances over the next one; shape by
    the Zhang & Stephens (2009) profile-posterior estimator with PSIS's weak prior towards 0.5.
    k-hat > 0.7 flags an estimate that cannot be trusted.
    """
    log_w = np.sort(np.asarray(log_w, np.float64))
    size = len(log_w)
    tail = int(min(size / 5, 3 * math.sqrt(size)))
    if tail < 5:
        return math.nan
    w = np.exp(log_w - log_w[-1])  # scale-free: k-hat does not depend on a common factor
    exceed = w[-tail:] - w[-tail - 1]
    if exceed[-1] <= 0:
        return math.nan
    return gpd_shape(exceed)


def gpd_shape(x: np.ndarray) -> float:
    """Zhang & Stephens (2009) estimate of the generalised-Pareto shape xi of positive exceedances x."""
    x = np.sort(np.asarray(x, np.float64))
    n = len(x)
    grid = 30 + int(math.sqrt(n))
    quartile = x[max(int(n / 4 + 0.5) - 1, 0)]
    # Zhang & Stephens write F(x) = 1 - (1 - k x / sigma)^(1/k), k = -xi, theta = k / sigma; for a fixed
    # theta the profile MLE is k(theta) = -mean log(1 - theta x), with log-likelihood n (log(theta/k) + k - 1).
    theta = 1 / x[-1] + (1 - np.sqrt(grid / (np.arange(1, grid + 1) - 0.5))) / (3 * quartile)
    k_profile = -np.log1p(-theta[:, None] * x[None, :]).mean(1)
    log_lik = n * (np.log(theta / k_profile) + k_profile - 1)
    weights = np.exp(log_lik - log_lik.max())  # posterior over the theta grid (flat prior)
    theta_post = float(np.sum(theta * weights) / weights.sum())
    xi_hat = float(np.log1p(-theta_post * x).mean())
    return (n * xi_hat + 10 * 0.5) / (n + 10)  # PSIS's prior: 10 pseudo-observations at xi = 0.5


# ----------------------------------------------------------------------------- targets beyond the Gaussian mean
# A target bundles q(z) (a Gaussian: the exact posterior, or a Laplace approximation of it), the test-set
# log-likelihood log p(D*|z) and the exact answers the estimators are judged against. ``log_joint`` is
# log q(z) + log p(D*|z) - ``offset`` (a data constant that keeps the weights O(1) in training).


class GaussianDensity:
    """N(mean, S S^T) with S lower-triangular (full) or diag(std) (``tril`` None): draws and log density."""

    def __init__(self, mean, std=None, tril=None, device: str = "cpu") -> None:
        self.mean = _t(mean, device)
        self.tril = None if tril is None else _t(tril, device)
        self.std = None if std is None else _t(std, device)
        self.d = len(self.mean)

    def transform(self, eps: torch.Tensor) -> torch.Tensor:
        return self.mean + (eps * self.std if self.tril is None else eps @ self.tril.T)

    def log_prob(self, z: torch.Tensor) -> torch.Tensor:
        if self.tril is None:
            return diag_normal_logpdf(z, self.mean, self.std)
        white = torch.linalg.solve_triangular(self.tril, (z - self.mean).T, upper=False).T
        log_det = torch.log(torch.diagonal(self.tril)).sum()
        return -0.5 * (white**2).sum(-1) - log_det - 0.5 * self.d * LOG_2PI


class GaussianMeanTarget:
    """The conjugate Gaussian-mean ``Problem`` seen through the target interface (for the proposal fit)."""

    def __init__(self, p: Problem, device: str = "cpu") -> None:
        self.problem, self.d = p, p.d
        self.q = GaussianDensity(p.post_mean, std=np.full(p.d, math.sqrt(p.post_var)), device=device)
        self.test_mean = _t(p.test_mean, device)
        self.offset, self.log_ppd = p.log_c, log_ppd(p)
        self.optimal = optimal_proposal(p)

    def log_joint(self, z: torch.Tensor) -> torch.Tensor:
        return self.q.log_prob(z) - 0.5 * self.problem.a * ((z - self.test_mean) ** 2).sum(-1)

    def diagnostics(self, mean: np.ndarray, std: np.ndarray) -> dict[str, float]:
        out = {
            "val/kl_exact": gaussian_kl(mean, std, *self.optimal),
            "val/min_std_ratio": float(std.min() / math.sqrt(self.optimal[1])),
        }
        delta_r = gaussian_log_chi2(mean, std, *self.optimal)
        if math.isfinite(delta_r):
            out["val/delta_r_exact"] = delta_r
        return out


# ----------------------------------------------------------------------------- heavy-tailed likelihood


def student_t_logpdf(x, loc, scale: float, nu: float):
    """log density of a location-scale Student-t (numpy or torch, broadcasting)."""
    const = math.lgamma((nu + 1) / 2) - math.lgamma(nu / 2) - 0.5 * math.log(nu * math.pi) - math.log(scale)
    u = (x - loc) / scale
    log1p = torch.log1p if isinstance(u, torch.Tensor) else np.log1p
    return const - 0.5 * (nu + 1) * log1p(u * u / nu)


def laplace_posterior(x_train: np.ndarray, scale: float, nu: float, sigma0: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-coordinate Laplace approximation N(mode, -1/curvature) of p(z|D) under the Student-t likelihood.

    Newton from the coordinate-wise median (the posterior is unimodal there for n >> 1), halving any step
    that would lower the log posterior."""

    def log_post(z):
        return -0.5 * z**2 / sigma0**2 + student_t_logpdf(x_train, z, scale, nu).sum(0)

    def derivatives(z):
        r = x_train - z
        denom = nu * scale**2 + r**2
        grad = -z / sigma0**2 + ((nu + 1) * r / denom).sum(0)
        hess = -1 / sigma0**2 + ((nu + 1) * (r**2 - nu * scale**2) / denom**2).sum(0)
        return grad, hess

    z = np.median(x_train, 0)
    for _ in range(100):
        grad, hess = derivatives(z)
        step = np.where(hess < 0, -grad / np.minimum(hess, -1e-12), 0.1 * np.sign(grad))
        current = log_post(z)
        for _ in range(30):
            better = log_post(z + step) >= current
            if better.all():
                break
            step = np.where(better, step, step / 2)
        z = z + step
        if np.abs(step).max() < 1e-13:
            break
    grad, hess = derivatives(z)
    if np.any(hess >= 0) or np.abs(grad).max() > 1e-6 * (1 + np.abs(hess).max()):
        raise FloatingPointError("Laplace approximation: Newton did not reach a maximum")
    return z, 1 / np.sqrt(-hess)


class HeavyTailTarget:
    """Student-t observations x_jk = z_k + scale * t_nu; q = the Laplace approximation of p(z|D).

    Every coordinate is independent given the data, so r*(z) = prod_k q_k(z_k) L_k(z_k) / Z_k factorises
    (the diagonal family is the right one) but is not Gaussian: L_k is a product of t densities. Exact
    answers come from one-dimensional quadrature per coordinate (``HeavyQuadrature``)."""

    def __init__(self, x_train, x_test, scale: float, nu: float, sigma0: float, device: str = "cpu") -> None:
        self.x_train, self.x_test = np.asarray(x_train, np.float64), np.asarray(x_test, np.float64)
        self.scale, self.nu, self.sigma0 = scale, nu, sigma0
        self.d, self.m = self.x_test.shape[1], self.x_test.shape[0]
        self.q_mean, self.q_std = laplace_posterior(self.x_train, scale, nu, sigma0)
        self.q = GaussianDensity(self.q_mean, std=self.q_std, device=device)
        self._x_test = _t(self.x_test, device)
        self.offset = float(student_t_logpdf(self.x_test, self.q_mean, scale, nu).sum())  # log p(D*|z = E_q z)
        self.quadrature = HeavyQuadrature(self)
        self.log_ppd = self.quadrature.log_ppd

    def log_lik(self, z: torch.Tensor) -> torch.Tensor:
        """log p(D*|z) for z (S, d): sum over test points and coordinates."""
        return student_t_logpdf(self._x_test[None], z[:, None, :], self.scale, self.nu).sum((1, 2))

    def log_joint(self, z: torch.Tensor) -> torch.Tensor:
        return self.q.log_prob(z) + self.log_lik(z) - self.offset

    def diagnostics(self, mean: np.ndarray, std: np.ndarray) -> dict[str, float]:
        quad = self.quadrature
        out = {"val/kl_exact": quad.kl_r_to_star(mean, std), "val/min_std_ratio": float(np.min(std / quad.star_std))}
        out["val/delta_r_exact"] = quad.delta_r(mean, std)
        return out


class HeavyQuadrature:
    """Trapezoid quadrature of every per-coordinate integral on a grid wide enough for q, r* and q L^2.

    The grid of coordinate k is centred on q's mean, half-width ``width`` q-sds plus twice the distance to
    the test median, ``points`` nodes; log-space throughout. Everything returned sums over coordinates."""

    def __init__(self, target: HeavyTailTarget, points: int = 2001, width: float = 14.0, block: int = 1 << 22):
        t = target
        reach = width * t.q_std + 2 * np.abs(np.median(t.x_test, 0) - t.q_mean)
        u = np.linspace(-1.0, 1.0, points)
        self.grid = t.q_mean[:, None] + reach[:, None] * u[None, :]  # (d, G)
        trapezoid = np.full(points, 1.0)
        trapezoid[[0, -1]] = 0.5
        self.log_node = np.log(trapezoid)[None, :] + np.log(reach * (u[1] - u[0]))[:, None]
        self.log_q = -0.5 * ((self.grid - t.q_mean[:, None]) / t.q_std[:, None]) ** 2 - np.log(t.q_std)[:, None]
        self.log_q -= 0.5 * LOG_2PI
        self.log_lik = np.empty_like(self.grid)
        per_block = max(1, block // (points * t.m))
        for k in range(0, t.d, per_block):  # (m, coords, G) at a time
            sl = slice(k, k + per_block)
            self.log_lik[sl] = student_t_logpdf(t.x_test[:, sl, None], self.grid[None, sl], t.scale, t.nu).sum(0)
        self.log_z_coord = self.log_integral(self.log_q + self.log_lik)  # (d,)
        self.log_ppd = float(self.log_z_coord.sum())
        self.delta = float((self.log_integral(self.log_q + 2 * self.log_lik) - 2 * self.log_z_coord).sum())
        log_star = self.log_q + self.log_lik - self.log_z_coord[:, None]
        star = np.exp(log_star + self.log_node)
        self.star_mean = (star * self.grid).sum(1)
        self.star_std = np.sqrt((star * (self.grid - self.star_mean[:, None]) ** 2).sum(1))
        self.log_star = log_star
        # r*'s tails are q's Gaussian tails times a polynomial: E_r[w^2] is finite only for std(r) > std(q)/sqrt 2.
        self.tail_floor = t.q_std / math.sqrt(2)
        # The Gaussian closest to r* in KL(r* || g) matches its moments: this KL is how far r* is from the family.
        self.kl_star_to_family = self.kl_star_to(self.star_mean, self.star_std)

    def log_integral(self, log_f: np.ndarray) -> np.ndarray:
        a = log_f + self.log_node
        top = a.max(1)
        return top + np.log(np.exp(a - top[:, None]).sum(1))

    def _log_r(self, mean, std) -> np.ndarray:
        mean, std = np.asarray(mean)[:, None], np.asarray(std)[:, None]
        return -0.5 * ((self.grid - mean) / std) ** 2 - np.log(std) - 0.5 * LOG_2PI

    def kl_star_to(self, mean, std) -> float:
        """KL(r* || N(mean, diag std^2)): r*'s mass-covering distance to a Gaussian."""
        return float((np.exp(self.log_star + self.log_node) * (self.log_star - self._log_r(mean, std))).sum())

    def kl_r_to_star(self, mean, std) -> float:
        """KL(r || r*): the ELBO's gap."""
        log_r = self._log_r(mean, std)
        return float((np.exp(log_r + self.log_node) * (log_r - self.log_star)).sum())

    def delta_r(self, mean, std) -> float:
        """log E_r[w^2] - 2 log E_r[w] of IS with r, integrated over the grid (the far-tail divergence below
        ``tail_floor`` is reported separately: it sits where the integrand is below e^-1000)."""
        log_second = self.log_integral(2 * (self.log_q + self.log_lik) - self._log_r(mean, std))
        return float((log_second - 2 * self.log_z_coord).sum())


# ----------------------------------------------------------------------------- Bayesian linear regression


def gaussian_log_partition(precision: np.ndarray, eta: np.ndarray) -> float:
    """Phi(P, h) = log integral exp(h.z - z^T P z / 2) dz (inf unless P is positive definite)."""
    try:
        chol = np.linalg.cholesky(precision)
    except np.linalg.LinAlgError:
        return math.inf
    white = np.linalg.solve(chol, eta)
    return float(0.5 * white @ white - np.log(np.diag(chol)).sum() + 0.5 * len(eta) * LOG_2PI)


class RegressionTarget:
    """y | X, beta ~ N(X beta, sigma^2 I), beta ~ N(0, tau^2 I), sigma fixed: q = the exact posterior.

    In natural parameters q has precision Lam = I / tau^2 + X^T X / sigma^2 and eta = X^T y / sigma^2; the test
    set adds A = X*^T X* / sigma^2, b = X*^T y* / sigma^2, and log p(D*|beta) = -c - beta^T A beta / 2 + b.beta, so
    log E_q[p(D*|beta)^k] = -k c + Phi(Lam + k A, eta + k b) - Phi(Lam, eta): every moment, the log-PPD (k = 1) and
    Delta are closed forms, and r* = N((Lam + A)^-1 (eta + b), (Lam + A)^-1) is full-covariance Gaussian."""

    def __init__(self, x_train, y_train, x_test, y_test, sigma: float, tau: float, device: str = "cpu") -> None:
        self.d, self.m = x_train.shape[1], len(y_test)
        self.precision = np.eye(self.d) / tau**2 + x_train.T @ x_train / sigma**2
        self.eta = x_train.T @ y_train / sigma**2
        self.a = x_test.T @ x_test / sigma**2
        self.b = x_test.T @ y_test / sigma**2
        self.c = float(y_test @ y_test) / (2 * sigma**2) + 0.5 * self.m * (LOG_2PI + 2 * math.log(sigma))
        self.q_cov = np.linalg.inv(self.precision)
        self.q_mean = self.q_cov @ self.eta
        self.q = GaussianDensity(self.q_mean, tril=np.linalg.cholesky(self.q_cov), device=device)
        self._a, self._b = _t(self.a, device), _t(self.b, device)
        self.log_ppd = self.log_moment(1)
        self.delta = self.log_moment(2) - 2 * self.log_ppd
        self.star_cov = np.linalg.inv(self.precision + self.a)
        self.star_mean = self.star_cov @ (self.eta + self.b)
        self.offset = float(self.log_lik(_t(self.q_mean[None], "cpu").to(self._a.device))[0])

    def log_moment(self, k: int) -> float:
        """log E_q[p(D*|beta)^k]."""
        phi = gaussian_log_partition(self.precision + k * self.a, self.eta + k * self.b)
        return -k * self.c + phi - gaussian_log_partition(self.precision, self.eta)

    def log_lik(self, z: torch.Tensor) -> torch.Tensor:
        return -self.c - 0.5 * ((z @ self._a) * z).sum(-1) + z @ self._b

    def log_joint(self, z: torch.Tensor) -> torch.Tensor:
        return self.q.log_prob(z) + self.log_lik(z) - self.offset

    def diagnostics(self, mean: np.ndarray, tril: np.ndarray) -> dict[str, float]:
        cov = tril @ tril.T
        out = {
            "val/kl_exact": full_gaussian_kl(mean, cov, self.star_mean, self.star_cov),
            "val/min_std_ratio": float(np.min(np.sqrt(np.diag(cov) / np.diag(self.star_cov)))),
        }
        delta_r = full_gaussian_log_chi2(mean, cov, self.star_mean, self.star_cov)
        if math.isfinite(delta_r):
            out["val/delta_r_exact"] = delta_r
        return out

    def snr_rel_se(self, k_samples: int, repeats: int) -> float:
        """``snr_estimate_rel_se`` with this target's exact normalised moments."""
        return _snr_rel_se([self.log_moment(j) - j * self.log_ppd for j in (2, 3, 4)], k_samples, repeats)


def full_gaussian_kl(mean_r, cov_r, mean_star, cov_star) -> float:
    """KL(N(mean_r, cov_r) || N(mean_star, cov_star))."""
    d = len(mean_r)
    star_inv = np.linalg.inv(cov_star)
    offset = np.asarray(mean_r) - mean_star
    _, logdet_star = np.linalg.slogdet(cov_star)
    _, logdet_r = np.linalg.slogdet(cov_r)
    return float(0.5 * (np.trace(star_inv @ cov_r) + offset @ star_inv @ offset - d + logdet_star - logdet_r))


def full_gaussian_log_chi2(mean_r, cov_r, mean_star, cov_star) -> float:
    """log integral N(z; star)^2 / N(z; r) dz = Phi(2 P* - P_r, 2 h* - h_r) - 2 Phi(P*, h*) + Phi(P_r, h_r)
    in natural parameters (P = cov^-1, h = P mean); infinite when 2 P* - P_r is not positive definite."""
    p_star, p_r = np.linalg.inv(cov_star), np.linalg.inv(cov_r)
    h_star, h_r = p_star @ mean_star, p_r @ np.asarray(mean_r)
    joint = gaussian_log_partition(2 * p_star - p_r, 2 * h_star - h_r)
    if not math.isfinite(joint):
        return math.inf
    return joint - 2 * gaussian_log_partition(p_star, h_star) + gaussian_log_partition(p_r, h_r)


def _snr_rel_se(log_normalised: list[float], k_samples: int, repeats: int) -> float:
    """Relative standard error of mean/sd over ``repeats`` estimates from log E[(R/Z)^j], j = 2, 3, 4."""
    try:
        raw = [1.0] + [math.exp(v) for v in log_normalised]
    except OverflowError:
        return math.inf
    mu2 = raw[1] - 1
    mu3 = raw[2] - 3 * raw[1] + 2
    mu4 = raw[3] - 4 * raw[2] + 6 * raw[1] - 3
    k = k_samples
    c2, c3, c4 = mu2 / k, mu3 / k**2, (mu4 + 3 * (k - 1) * mu2**2) / k**3
    var_log = c2 + (c4 - c2**2) / (4 * c2**2) - c3 / c2
    return math.sqrt(max(var_log, 0.0) / repeats)


class TargetSampler:
    """Log-weights of a target: simple MC (z ~ q, w = p(D*|z)) or IS with a Gaussian proposal r
    (w = q p(D*|z) / r), in blocks of at most ``chunk`` likelihood terms."""

    def __init__(self, target, proposal: GaussianDensity | None = None, cost_per_draw: int = 1) -> None:
        self.target, self.proposal = target, proposal
        self.density = target.q if proposal is None else proposal
        self.cost = max(1, cost_per_draw)

    def draw(self, count: int, generator: torch.Generator) -> torch.Tensor:
        d = self.density
        eps = torch.randn(count, d.d, generator=generator, dtype=torch.float64, device=d.mean.device)
        z = d.transform(eps)
        log_lik = self.target.log_lik(z)
        if self.proposal is None:
            return log_lik
        return self.target.q.log_prob(z) + log_lik - self.proposal.log_prob(z)

    def matrix(self, rows: int, cols: int, generator: torch.Generator, chunk: int) -> torch.Tensor:
        """(rows, cols) log-weights: ``rows`` independent estimates of ``cols`` draws each."""
        step = max(1, chunk // self.cost)
        flat = torch.cat([self.draw(min(step, rows * cols - i), generator) for i in range(0, rows * cols, step)])
        return flat.view(rows, cols)
