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
    try:
        raw = [1.0] + [math.exp(log_normalised_moment(p, j)) for j in (2, 3, 4)]
    except OverflowError:
        return math.inf
    mu2 = raw[1] - 1
    mu3 = raw[2] - 3 * raw[1] + 2
    mu4 = raw[3] - 4 * raw[2] + 6 * raw[1] - 3
    k = k_samples
    c2, c3, c4 = mu2 / k, mu3 / k**2, (mu4 + 3 * (k - 1) * mu2**2) / k**3
    var_log = c2 + (c4 - c2**2) / (4 * c2**2) - c3 / c2
    return math.sqrt(max(var_log, 0.0) / repeats)


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
