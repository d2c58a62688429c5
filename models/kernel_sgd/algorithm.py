"""Core maths of the kernel-SGD study (numpy/torch, no Lightning): the circle S^1 and the sphere S^{d-1}.

Circle (fixed dimension d = 2). Kernel k(a, b) = sum_{k<=K} 2 lambda_k cos(k (a - b)), lambda_k = k^-beta, under the uniform law on
[0, 2 pi). Its Mercer eigenfunctions are sqrt(2) cos(k theta), sqrt(2) sin(k theta) (eigenvalue
lambda_k each), so the primal feature map

    phi(theta) = ( sqrt(2 lambda_k) cos(k theta), sqrt(2 lambda_k) sin(k theta) )_{k=1..K}

reproduces the kernel exactly (phi(a) . phi(b) = k(a, b)) and ||phi(theta)||^2 = 2 sum_k lambda_k for
every theta (= sup_x K(x, x)). A model f(theta) = w . phi(theta) has L^2 coordinates sqrt(lambda_k) w
in that orthonormal basis, so the excess risk ||f - f*||^2_{L^2} is an exact finite sum.

Sphere S^{d-1} (high dimension, n ~ d^gamma). Inner-product kernel K(x, x') = Phi(<x, x'>) with
Phi(t) = sum_{k<=L} mu_k N(d, k) P_k(t): P_k the Gegenbauer polynomial of degree k normalised to
P_k(1) = 1, N(d, k) the number of degree-k spherical harmonics, mu_k = d^-k the eigenvalue of all of
them (the large-d picture: N(d, k) ~ d^k, mu_k ~ d^-k). The addition theorem
sum_m Y_km(x) Y_km(x') = N(d, k) P_k(<x, x'>) gives everything in closed form, with no explicit
harmonic basis: SGD and KRR run in the dual (f = sum_i a_i K(x_i, .)), and for a target made of zonal
harmonics f_k(x) = c_k sqrt(N(d, k)) P_k(<x, v_k>) (||f_k||_{L^2} = c_k) the excess risk is
a' M a - 2 a' b + sum_k c_k^2 with M_ij = E_x K(x_i, x) K(x, x_j) = sum_k mu_k^2 N(d, k) P_k(<x_i, x_j>)
and b_i = E_x K(x_i, x) f*(x) = sum_k mu_k f_k(x_i).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

ESTIMATORS = ("exp_sgd", "avg_sgd", "krr")
LABEL = {"exp_sgd": "exp-decay SGD (last iterate)", "avg_sgd": "const-step SGD (averaged)", "krr": "KRR (tuned ridge)"}

# ----------------------------------------------------------------------------- spectral set-up


def eigenvalues(harmonics: int, beta: float) -> np.ndarray:
    """lambda_k = k^-beta for k = 1..K."""
    return np.arange(1, harmonics + 1, dtype=np.float64) ** -beta


def feature_norm_sq(lam: np.ndarray) -> float:
    """||phi(theta)||^2 = K(theta, theta) = 2 sum_k lambda_k, the same for every theta."""
    return float(2.0 * lam.sum())


def kernel(a: np.ndarray, b: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """The kernel matrix k(a_i, b_j) evaluated directly (reference for the feature map)."""
    k = np.arange(1, len(lam) + 1)
    diff = a[:, None, None] - b[None, :, None]
    return (2.0 * lam * np.cos(k * diff)).sum(-1)


def features(theta: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """phi(theta) with shape theta.shape + (2K,): [cos block | sin block]."""
    k = torch.arange(1, len(lam) + 1, dtype=theta.dtype, device=theta.device)
    angle = theta.unsqueeze(-1) * k
    scale = torch.sqrt(2.0 * lam)
    return torch.cat([scale * torch.cos(angle), scale * torch.sin(angle)], dim=-1)


def target_coefficients(source: float | None, harmonics: int, beta: float) -> np.ndarray:
    """c_k of f* = sum_k c_k sqrt(2) cos(k theta).

    ``None``: the top eigenfunction (c = e_1, in [H]^s for every s). Otherwise the power law
    c_k = k^-(s beta + 1)/2, for which sum_k c_k^2 / lambda_k^s = sum_k 1/k: f* sits at the edge of [H]^s.
    """
    c = np.zeros(harmonics)
    if source is None:
        c[0] = 1.0
    else:
        c = np.arange(1, harmonics + 1, dtype=np.float64) ** (-(source * beta + 1.0) / 2.0)
    return c


def tail_energy(source: float | None, harmonics: int, beta: float) -> float:
    """sum_{k>K} c_k^2: the target energy the K-harmonic truncation drops."""
    if source is None:
        return 0.0
    from scipy.special import zeta  # Hurwitz zeta: sum_{k>=q} k^-x

    return float(zeta(source * beta + 1.0, harmonics + 1))


def target_function(theta: np.ndarray, coef: np.ndarray) -> np.ndarray:
    """f*(theta) = sqrt(2) sum_k c_k cos(k theta) by Clenshaw's recurrence (cos(k theta) = T_k(cos theta)):
    O(K) vector operations instead of K cosines per point (streams hold millions of points)."""
    x = np.cos(np.asarray(theta, dtype=np.float64))
    b1 = np.zeros_like(x)  # b_{k+1}
    b2 = np.zeros_like(x)  # b_{k+2}
    for c in coef[::-1]:
        b1, b2 = c + 2.0 * x * b1 - b2, b1
    return math.sqrt(2.0) * (x * b1 - b2)


def function_target(coef: np.ndarray) -> np.ndarray:
    """f*'s L^2 coordinates in the [cos | sin] basis (no sine part)."""
    return np.concatenate([coef, np.zeros_like(coef)])


def excess_risk(w: np.ndarray, coef: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """Closed form ||w . phi - f*||^2_{L^2} = sum_k (sqrt(l_k) w_k^cos - c_k)^2 + l_k (w_k^sin)^2."""
    root = np.sqrt(np.concatenate([lam, lam]))
    return ((root * w - function_target(coef)) ** 2).sum(-1)


def quadrature_risk(w: np.ndarray, coef: np.ndarray, lam: np.ndarray) -> float:
    """||f - f*||^2_{L^2} by the equispaced rule on 4K+2 points: exact for trigonometric
    polynomials of degree <= 2K, hence exact here (checks the closed form independently)."""
    m = 4 * len(lam) + 2
    theta = 2.0 * np.pi * np.arange(m) / m
    f_hat = features(torch.from_numpy(theta), torch.from_numpy(lam)).numpy() @ w
    return float(np.mean((f_hat - target_function(theta, coef)) ** 2))


@dataclass
class SpectralEstimator:
    """A function estimate f(theta) = w . phi(theta) (the registered model)."""

    weights: np.ndarray  # (2K,) primal coefficients
    eigenvalues: np.ndarray  # (K,)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """f at angles x (shape (m,)) or at points of S^1 (shape (m, 2))."""
        x = np.asarray(x, dtype=np.float64)
        theta = np.arctan2(x[..., 1], x[..., 0]) if x.ndim == 2 and x.shape[-1] == 2 else x
        return features(torch.from_numpy(theta), torch.from_numpy(self.eigenvalues)).numpy() @ self.weights

    def coefficients(self) -> np.ndarray:
        """L^2 coordinates in the orthonormal [sqrt(2) cos | sqrt(2) sin] basis."""
        return np.sqrt(np.concatenate([self.eigenvalues, self.eigenvalues])) * self.weights


# ----------------------------------------------------------------------------- step sizes


def stage_length(n: int) -> int:
    """m = ceil(n / log2 n): about log2 n stages of equal length."""
    return math.ceil(n / math.log2(n))


def step_decay(t: np.ndarray | torch.Tensor, n: int, eta0):
    """Exponentially decaying (step-decay) schedule at 0-based steps t of an n-step run:
    eta_t = eta0 * 2^-(l-1) in stage l = floor(t / m) + 1."""
    return eta0 * 0.5 ** (t // stage_length(n))


# ----------------------------------------------------------------------------- single-pass SGD


@contextmanager
def one_thread():
    """Run torch single-threaded. Every op here touches 1e4-1e6 numbers, so an OpenMP fork/join per op
    costs more than it saves; on the shared 2-core machine under load, 2 threads made the SGD recursion
    and the KRR path 10-30x slower in wall time (threads waiting on descheduled siblings)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@dataclass
class SGDCurves:
    """Excess risks of every SGD run, indexed (batch, n, eta0) or (batch, trace step, eta0)."""

    exp_risk: np.ndarray  # last iterate of the step-decay run of length n
    avg_risk: np.ndarray  # uniform average of the first n constant-step iterates
    exp_trace: np.ndarray  # risk along the longest step-decay run, at trace_steps
    avg_trace: np.ndarray  # risk of the running average, at trace_steps
    exp_final: np.ndarray  # (batch, eta0, 2K) weights of the longest step-decay run
    avg_final: np.ndarray  # (batch, eta0, 2K) averaged weights at n_max


def run_sgd(
    theta: torch.Tensor,
    y: torch.Tensor,
    coef: torch.Tensor,
    lam: torch.Tensor,
    eta0: torch.Tensor,
    ns: Sequence[int],
    trace_steps: Sequence[int] = (),
    chunk: int = 256,
    progress: bool = False,
) -> SGDCurves:
    """Single-pass SGD w_t = w_{t-1} - eta_t (w_{t-1} . phi_t - y_t) phi_t for many runs at once.

    theta, y: (B, N) data streams (B = targets x seeds); coef: (B, K) target coefficients; eta0: (E,).
    Every run sees the same first n samples of its stream (common random numbers). Rows of the
    state tensor are the step-decay runs for each (n, eta0), sorted by n, then the constant-step runs
    (one per eta0) whose running sum gives the averaged iterate at every n. A step-decay run of
    length n stops after n samples, so at step t only the suffix of rows with n > t is updated.
    """
    with one_thread():
        return _sgd_recursion(theta, y, coef, lam, eta0, ns, trace_steps, chunk, progress)


def _sgd_recursion(theta, y, coef, lam, eta0, ns, trace_steps, chunk, progress) -> SGDCurves:
    ns = sorted(int(n) for n in ns)
    batch, total = theta.shape
    if ns[-1] > total:
        raise ValueError(f"largest n {ns[-1]} exceeds the stream length {total}")
    n_eta, n_len, dim = len(eta0), len(ns), 2 * len(lam)
    avg_row = n_len * n_eta
    dtype, device = theta.dtype, theta.device
    weights = torch.zeros(batch, avg_row + n_eta, dim, dtype=dtype, device=device)
    running_sum = torch.zeros(batch, n_eta, dim, dtype=dtype, device=device)
    root = torch.sqrt(torch.cat([lam, lam]))
    goal = torch.cat([coef, torch.zeros_like(coef)], dim=-1).unsqueeze(1)  # (B, 1, 2K)

    def risk(w: torch.Tensor) -> np.ndarray:
        return ((root * w - goal) ** 2).sum(-1).cpu().numpy()

    exp_risk = np.zeros((batch, n_len, n_eta))
    avg_risk = np.zeros((batch, n_len, n_eta))
    trace_steps = sorted(set(int(t) for t in trace_steps if 1 <= t <= ns[-1]))
    exp_trace = np.zeros((batch, len(trace_steps), n_eta))
    avg_trace = np.zeros((batch, len(trace_steps), n_eta))
    trace_index = {t: i for i, t in enumerate(trace_steps)}
    end_index = {n: j for j, n in enumerate(ns)}
    first_active = np.searchsorted(np.asarray(ns), np.arange(ns[-1]), side="right") * n_eta

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=ns[-1], desc="kernel SGD", unit="step", mininterval=1.0)
    for start in range(0, ns[-1], chunk):
        stop = min(start + chunk, ns[-1])
        phi = features(theta[:, start:stop], lam)  # (B, C, 2K)
        steps = torch.arange(start, stop, dtype=dtype, device=device)[:, None]
        # (C, J * E) step-decay sizes (zero once a run has ended), then the (C, E) constant ones.
        decayed = torch.cat([step_decay(steps, n, eta0) * (steps < n) for n in ns], dim=1)
        eta = torch.cat([decayed, eta0.expand(len(steps), -1)], dim=1)
        for local, t in enumerate(range(start, stop)):
            first = int(first_active[t])
            active = weights[:, first:]
            p = phi[:, local]
            # multiply-and-sum: ~3x faster than bmm's batched gemv on these shapes
            residual = (active * p.unsqueeze(1)).sum(-1) - y[:, t : t + 1]
            active.baddbmm_((eta[local, first:] * residual).unsqueeze(-1), p.unsqueeze(1), alpha=-1.0)
            running_sum += weights[:, avg_row:]
            seen = t + 1
            if seen in end_index:
                j = end_index[seen]
                exp_risk[:, j] = risk(weights[:, j * n_eta : (j + 1) * n_eta])
                avg_risk[:, j] = risk(running_sum / seen)
            if seen in trace_index:
                i = trace_index[seen]
                exp_trace[:, i] = risk(weights[:, avg_row - n_eta : avg_row])
                avg_trace[:, i] = risk(running_sum / seen)
        if bar is not None:
            bar.update(stop - start)
    if bar is not None:
        bar.close()
    return SGDCurves(
        exp_risk,
        avg_risk,
        exp_trace,
        avg_trace,
        weights[:, avg_row - n_eta : avg_row].cpu().numpy(),
        (running_sum / ns[-1]).cpu().numpy(),
    )


# ----------------------------------------------------------------------------- kernel ridge regression


def trig_powers(theta: torch.Tensor, order: int) -> torch.Tensor:
    """exp(i j theta) for j = 1..order, shape (len(theta), order), by cumulative product (error ~ j eps)."""
    z = torch.polar(torch.ones_like(theta), theta)
    return torch.cumprod(z.unsqueeze(1).expand(-1, order), dim=1)


def trig_moments(theta: torch.Tensor, order: int) -> torch.Tensor:
    """m_j = sum_i exp(i j theta_i) for j = 0..order."""
    head = torch.full((1,), len(theta), dtype=torch.complex128, device=theta.device)
    return torch.cat([head, trig_powers(theta, order).sum(0)])


def gram_from_moments(moments: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """Phi^T Phi from the trigonometric moments m_0..m_2K, in O(K^2) instead of O(n K^2):
    2 cos(ka) cos(la) = cos((k-l)a) + cos((k+l)a), 2 sin sin = cos(-) - cos(+), 2 cos(ka) sin(la) =
    sin((k+l)a) - sin((k-l)a), each scaled by sqrt(lambda_k lambda_l)."""
    k = torch.arange(1, len(lam) + 1, device=lam.device)
    diff, total = k[:, None] - k[None, :], k[:, None] + k[None, :]
    re_diff, re_sum = moments.real[diff.abs()], moments.real[total]
    im_diff, im_sum = torch.sign(diff) * moments.imag[diff.abs()], moments.imag[total]
    scale = torch.sqrt(lam[:, None] * lam[None, :])
    cos_sin = scale * (im_sum - im_diff)
    return torch.cat(
        [torch.cat([scale * (re_diff + re_sum), cos_sin], 1), torch.cat([cos_sin.T, scale * (re_diff - re_sum)], 1)], 0
    )


def ridge_path(
    theta: torch.Tensor,
    y: torch.Tensor,
    coef: torch.Tensor,
    lam: torch.Tensor,
    ridges: torch.Tensor,
    ns: Sequence[int],
    chunk: int = 256,
) -> tuple[np.ndarray, np.ndarray]:
    """KRR on the first n samples for every n and ridge, in the primal (exactly KRR: phi reproduces k).

    w = (Phi^T Phi / n + lambda I)^-1 Phi^T y / n via one eigendecomposition per n; Phi^T Phi and
    Phi^T y are built from (y-weighted) trigonometric moments. theta: (N,) one stream; y: (N, T) its
    targets; coef: (T, K). Returns risk (T, L, J) and the weights at the largest n, (T, L, 2K).
    """
    with one_thread():
        return _ridge_path(theta, y, coef, lam, ridges, ns, chunk)


def _ridge_path(theta, y, coef, lam, ridges, ns, chunk) -> tuple[np.ndarray, np.ndarray]:
    ns = sorted(int(n) for n in ns)
    harmonics, n_targets = len(lam), y.shape[1]
    moments = torch.zeros(2 * harmonics + 1, dtype=torch.complex128, device=theta.device)
    weighted = torch.zeros(harmonics, n_targets, dtype=torch.complex128, device=theta.device)  # sum_i y_i z_i^k
    root = torch.sqrt(torch.cat([lam, lam]))
    scale = torch.sqrt(2.0 * lam)
    goal = torch.cat([coef, torch.zeros_like(coef)], dim=-1)  # (T, 2K)
    risks = np.zeros((n_targets, len(ridges), len(ns)))
    bounds = sorted(set(range(0, ns[-1], chunk)) | set(ns))
    final = None
    for start, stop in zip(bounds[:-1], bounds[1:]):
        powers = trig_powers(theta[start:stop], 2 * harmonics)
        moments[0] += stop - start
        moments[1:] += powers.sum(0)
        weighted += powers[:, :harmonics].T @ y[start:stop].to(powers.dtype)
        if stop in ns:
            gram = gram_from_moments(moments, lam) / stop
            moment = torch.cat([scale[:, None] * weighted.real, scale[:, None] * weighted.imag]) / stop  # (2K, T)
            evals, evecs = torch.linalg.eigh(gram)
            rotated = evecs.T @ moment
            w = torch.einsum("de,elt->tld", evecs, rotated[:, None, :] / (evals[:, None, None] + ridges[None, :, None]))
            risks[:, :, ns.index(stop)] = ((root * w - goal[:, None]) ** 2).sum(-1).cpu().numpy()
            final = w
    return risks, final.cpu().numpy()


# ----------------------------------------------------------------------------- the sphere S^{d-1}


def harmonic_dimension(dim: int, degree: int) -> int:
    """N(d, k) = C(d+k-1, k) - C(d+k-3, k-2): the dimension of the degree-k spherical harmonics on S^{d-1}."""
    if dim < 2 or degree < 0:
        raise ValueError(f"harmonic_dimension needs dim >= 2 and degree >= 0, got dim={dim}, degree={degree}")
    lower = math.comb(dim + degree - 3, degree - 2) if degree >= 2 else 0
    return math.comb(dim + degree - 1, degree) - lower


def harmonic_dimensions(dim: int, degree: int) -> np.ndarray:
    """N(d, k) for k = 0..L."""
    return np.array([harmonic_dimension(dim, k) for k in range(degree + 1)], dtype=np.float64)


def sphere_eigenvalues(dim: int, degree: int) -> np.ndarray:
    """mu_k = d^-k for k = 0..L: every degree carries a trace N(d, k) mu_k ~ 1/k!, bounded in d."""
    return float(dim) ** -np.arange(degree + 1, dtype=np.float64)


def sphere_kernel_diagonal(mu: np.ndarray, dim: int) -> float:
    """K(x, x) = Phi(1) = sum_k mu_k N(d, k), the same for every x (= sup_x K(x, x))."""
    return float((mu * harmonic_dimensions(dim, len(mu) - 1)).sum())


def gegenbauer(t: torch.Tensor, dim: int, degree: int) -> torch.Tensor:
    """P_0..P_L at t, shape (L+1,) + t.shape, normalised to P_k(1) = 1 (Legendre for d = 3,
    cos(k arccos t) for d = 2): P_{k+1} = ((2k + d - 2) t P_k - k P_{k-1}) / (k + d - 2)."""
    out = [torch.ones_like(t), t]
    for k in range(1, degree):
        out.append(((2 * k + dim - 2) * t * out[k] - k * out[k - 1]) / (k + dim - 2))
    return torch.stack(out[: degree + 1])


def zonal(t: torch.Tensor, weights: torch.Tensor, dim: int) -> torch.Tensor:
    """sum_k weights_k P_k(t) at every entry of t (t clipped to [-1, 1] against round-off)."""
    polys = gegenbauer(t.clamp(-1.0, 1.0), dim, len(weights) - 1)
    return torch.tensordot(weights, polys, dims=1)


def sphere_kernel(x: torch.Tensor, z: torch.Tensor, mu: torch.Tensor, dim: int) -> torch.Tensor:
    """K(x_i, z_j) = Phi(<x_i, z_j>), Phi = sum_k mu_k N(d, k) P_k."""
    counts = torch.as_tensor(harmonic_dimensions(dim, len(mu) - 1), dtype=mu.dtype, device=mu.device)
    return zonal(x @ z.T, mu * counts, dim)


def sphere_kernel_square(x: torch.Tensor, z: torch.Tensor, mu: torch.Tensor, dim: int) -> torch.Tensor:
    """M(x_i, z_j) = E_u K(x_i, u) K(u, z_j) = sum_k mu_k^2 N(d, k) P_k(<x_i, z_j>) (Funk-Hecke)."""
    return sphere_kernel(x, z, mu**2, dim)


def zonal_target(
    x: torch.Tensor, directions: torch.Tensor, amplitude: torch.Tensor, dim: int, filt: torch.Tensor | None = None
) -> torch.Tensor:
    """f*(x) = sum_k filt_k c_k sqrt(N(d, k)) P_k(<x, v_k>): ``amplitude`` c (L+1,), ``directions`` v (L+1, d).

    With ``filt = mu`` this is b(x) = E_u K(x, u) f*(u), since each f_k is an eigenfunction (eigenvalue mu_k)."""
    degree = len(amplitude) - 1
    counts = torch.as_tensor(harmonic_dimensions(dim, degree), dtype=x.dtype, device=x.device)
    polys = gegenbauer((x @ directions.T).clamp(-1.0, 1.0), dim, degree)  # (L+1, ..., L+1)
    own = torch.stack([polys[k, ..., k] for k in range(degree + 1)], dim=-1)  # P_k(<x, v_k>)
    scale = amplitude * counts.sqrt() * (1.0 if filt is None else filt)
    return own @ scale


def source_amplitudes(source: float, mu: np.ndarray) -> np.ndarray:
    """c_k = mu_k^(s/2): every degree sits on the edge of the [H]^s ball (sum_k c_k^2 / mu_k^s = L + 1)."""
    return mu ** (source / 2.0)


def dual_risk(coef: torch.Tensor, msq: torch.Tensor, b: torch.Tensor, f_norm_sq: torch.Tensor) -> torch.Tensor:
    """||sum_i a_i K(x_i, .) - f*||^2_{L^2} = a' M a - 2 a' b + ||f*||^2 for coef (..., n); msq (n, n), b (..., n)."""
    return ((coef @ msq) * coef).sum(-1) - 2.0 * (coef * b).sum(-1) + f_norm_sq


def averaged_coefficients(coef: torch.Tensor, n: int) -> torch.Tensor:
    """Dual coefficients of (1/n) sum_{t<=n} f_t from those of the constant-step run: f_t = sum_{i<=t} a_i K_i,
    so sample i (0-based) enters n - i of the n iterates."""
    weights = (n - torch.arange(n, dtype=coef.dtype, device=coef.device)) / n
    return coef[..., :n] * weights


@dataclass
class DualSGDRuns:
    """Dual coefficients of every single-pass SGD run on one stream, shape (targets, runs, n_max).

    Rows: the step-decay run of length n for each (n, eta0), ordered n-major (row j * E + e), then the
    constant-step runs, one per eta0 (row J * E + e), whose averaged iterates come from
    ``averaged_coefficients``."""

    coef: torch.Tensor
    ns: list[int]
    n_eta: int

    def step_decay(self, j: int) -> torch.Tensor:
        """(targets, E, n_j): the step-decay runs of length ns[j]."""
        n = self.ns[j]
        return self.coef[:, j * self.n_eta : (j + 1) * self.n_eta, :n]

    def averaged(self, j: int) -> torch.Tensor:
        """(targets, E, n_j): the uniform average of the first ns[j] constant-step iterates."""
        start = len(self.ns) * self.n_eta
        return averaged_coefficients(self.coef[:, start : start + self.n_eta], self.ns[j])


def dual_sgd(gram: torch.Tensor, y: torch.Tensor, eta0: torch.Tensor, ns: Sequence[int]) -> DualSGDRuns:
    """Single-pass kernel SGD f_t = f_{t-1} - eta_t (f_{t-1}(x_t) - y_t) K(x_t, .), f_0 = 0, in the dual.

    f_t = sum_{i<=t} a_i K(x_i, .) and step t only sets a_t = eta_t (y_t - f_{t-1}(x_t)): earlier
    coefficients never change, so one pass costs O(n^2) kernel products. gram: (N, N) on the stream's
    points; y: (T, N) targets sharing the stream; eta0: (E,). Every run sees the same first n samples.
    A finished step-decay run has eta_t = 0, so its later coefficients stay 0."""
    with one_thread():
        ns = sorted(int(n) for n in ns)
        n_targets, total = y.shape
        if ns[-1] > total or gram.shape != (total, total):
            raise ValueError(f"largest n {ns[-1]} / gram {tuple(gram.shape)} do not fit a stream of length {total}")
        steps = torch.arange(ns[-1], dtype=y.dtype, device=y.device)
        decayed = [step_decay(steps[None, :], n, eta0[:, None]) * (steps < n) for n in ns]
        eta = torch.cat([*decayed, eta0[:, None].expand(-1, ns[-1])])  # (R, N)
        # Layout (step, target, run): the prefix [:t] is contiguous, so each step is one gemv.
        coef = torch.zeros(ns[-1], n_targets, eta.shape[0], dtype=y.dtype, device=y.device)
        flat = coef.view(ns[-1], -1)
        for t in range(ns[-1]):
            prediction = (gram[t, :t] @ flat[:t]).view(n_targets, -1)
            coef[t] = eta[:, t] * (y[:, t : t + 1] - prediction)
        return DualSGDRuns(coef.permute(1, 2, 0).contiguous(), ns, len(eta0))


def dual_ridge_path(gram: torch.Tensor, y: torch.Tensor, ridges: torch.Tensor, n: int) -> torch.Tensor:
    """KRR on the first n samples for every ridge: a = (K_n + n lambda I)^-1 y_n, argmin of
    (1/n) sum (f(x_i) - y_i)^2 + lambda ||f||_H^2, by one eigendecomposition. y: (T, N). Returns (T, L, n)."""
    with one_thread():
        evals, evecs = torch.linalg.eigh(gram[:n, :n])
        rotated = y[:, :n] @ evecs  # (T, n)
        scaled = rotated[:, None, :] / (evals.clamp_min(0.0) + n * ridges[:, None])  # (T, L, n)
        return scaled @ evecs.T


@dataclass
class SphereEstimator:
    """A function estimate f(x) = sum_i a_i K(x_i, x) on S^{d-1} (a tuned sphere model)."""

    support: np.ndarray  # (n, d) the training points
    coef: np.ndarray  # (n,) dual coefficients
    eigenvalues: np.ndarray  # (L+1,) mu_k

    def predict(self, x: np.ndarray) -> np.ndarray:
        """f at points of S^{d-1}, shape (m, d)."""
        dim = self.support.shape[1]
        gram = sphere_kernel(
            torch.as_tensor(np.asarray(x, dtype=np.float64)),
            torch.from_numpy(self.support),
            torch.from_numpy(self.eigenvalues),
            dim,
        )
        return gram.numpy() @ self.coef


# ----------------------------------------------------------------------------- tuning, slopes, theory


def oracle_tune(risk: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-n oracle choice on a grid. risk: (grid, n, seed). The grid value with the lowest
    seed-mean risk is chosen for each n (one choice for all seeds, not one per seed).
    Returns (index per n, mean risk per n, standard error per n)."""
    mean = risk.mean(-1)
    best = mean.argmin(0)
    chosen = risk[best, np.arange(risk.shape[1])]  # (n, seed)
    sem = chosen.std(-1, ddof=1) / np.sqrt(chosen.shape[-1]) if chosen.shape[-1] > 1 else np.zeros(len(best))
    return best, chosen.mean(-1), sem


def fit_slope(ns: Sequence[int], risk: np.ndarray, lo: int, hi: int) -> tuple[float, float]:
    """Least-squares slope and intercept of log risk against log n over n in [lo, hi]."""
    ns = np.asarray(ns, dtype=np.float64)
    keep = (ns >= lo) & (ns <= hi)
    slope, intercept = np.polyfit(np.log(ns[keep]), np.log(risk[keep]), 1)
    return float(slope), float(intercept)


def theory_slope(estimator: str, source: float | None, beta: float) -> float:
    """Exponent of the excess-risk rate n^-r (fixed dimension, up to log factors).

    Minimax for f* in [H]^s with lambda_k ~ k^-beta: s beta / (s beta + 1) (-> 1 as s -> inf).
    Step-decay SGD attains it for every s (the paper's no-saturation claim); KRR and averaged
    constant-step SGD have qualification 1 and saturate at s = 2 in fixed dimension.
    """
    if estimator not in ("exp_sgd", "avg_sgd", "krr"):
        raise ValueError(f"unknown estimator {estimator!r}")
    s = math.inf if source is None else source
    if estimator != "exp_sgd":
        s = min(s, 2.0)
    return -1.0 if math.isinf(s) else -s * beta / (s * beta + 1.0)
