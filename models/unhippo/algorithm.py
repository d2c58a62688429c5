"""The mathematics of HiPPO-LegS and UnHiPPO, all in float64 torch.

HiPPO-LegS (Gu et al. 2020) projects the history f(0..t) on the N scaled Legendre
polynomials; UnHiPPO (Lienen et al. 2025) reads the same coefficients as the latent state of
a linear dynamical system observed through y_k = B_H^T c_k + noise and uses the Kalman
filter's posterior-mean recursion as the state-space model.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

import numpy as np
import torch
from numpy.polynomial import legendre

F64 = torch.float64
UnHiPPODiscretisation = Literal["expm", "bilinear", "forward", "backward"]
HiPPODiscretisation = Literal["bilinear", "bilinear-lssl", "forward", "backward"]


# ----------------------------------------------------------------------------- matrices


def hippo_legs(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A_H[i,k] = sqrt(2i+1) sqrt(2k+1) below the diagonal, i+1 on it; B_H[i] = sqrt(2i+1)."""
    b = torch.sqrt(2 * torch.arange(n, dtype=F64) + 1)
    a = torch.tril(torch.outer(b, b)) - torch.diag(torch.arange(n, dtype=F64))
    return a, b


def legendre_endpoint_q(n: int) -> torch.Tensor:
    """Q_i = sqrt(2i+1) i(i+1)/2 = sqrt(2i+1) P_i'(1): the endpoint slope of the scaled basis."""
    i = torch.arange(n, dtype=F64)
    return torch.sqrt(2 * i + 1) * i * (i + 1) / 2


def data_free_matrix(n: int) -> torch.Tensor:
    """A_0 = A_H^T - I: HiPPO-LegS fed with its own reconstruction f = B_H^T c."""
    a, _ = hippo_legs(n)
    return a.T - torch.eye(n, dtype=F64)


def regularized_matrix(n: int) -> torch.Tensor:
    """A_R: least-squares solution of [I; B_H^T; Q^T] A_R = [A_0; 2 Q^T; Q^T] (float64).

    The first two blocks hold exactly for A_0 (B_H^T A_0 = 2 Q^T); the last asks that the
    data-free flow leaves the endpoint derivative alone, which pulls the spectrum of A_0
    (max real eigenvalue N-1) down to a stable one (max real eigenvalue 1).
    """
    _, b = hippo_legs(n)
    q = legendre_endpoint_q(n)
    lhs = torch.cat([torch.eye(n, dtype=F64), b[None], q[None]])
    rhs = torch.cat([data_free_matrix(n), 2 * q[None], q[None]])
    return torch.linalg.lstsq(lhs, rhs, driver="gelsd").solution


# ----------------------------------------------------------------------------- discretisation


def step_times(steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(t0, t1) = (k, k+1) for k = 0..steps-1, with the first step moved to k = 1 (no 1/0)."""
    k = torch.arange(steps, dtype=F64)
    k[0] = 1.0
    return k, k + 1


def discretize_unhippo(
    a: torch.Tensor, t0: torch.Tensor, t1: torch.Tensor, method: UnHiPPODiscretisation
) -> torch.Tensor:
    """Transition matrices of dc/dt = (1/t) A c from t0 to t1, shape (k, n, n)."""
    eye = torch.eye(a.shape[0], dtype=a.dtype)
    dt = (t1 - t0)[:, None, None]
    t0, t1 = t0[:, None, None], t1[:, None, None]
    if method == "expm":  # exact: c(t1) = exp(log(t1/t0) A) c(t0)
        return torch.linalg.matrix_exp(torch.log(t1 / t0) * a)
    if method == "bilinear":
        # Trapezoidal rule for the + sign of this ODE. (The official ``bilinear`` option reuses
        # HiPPO's (I + .A)^-1 (I - .A), i.e. the flow of -A; only its discretisation ablation uses it.)
        return torch.linalg.solve(eye - dt / (2 * t1) * a, eye + dt / (2 * t0) * a)
    if method == "forward":
        return eye + dt / t0 * a
    if method == "backward":
        return torch.linalg.inv(eye - dt / t1 * a)
    raise ValueError(f"unknown UnHiPPO discretisation {method!r}")


def discretize_hippo(
    a: torch.Tensor, b: torch.Tensor, t0: torch.Tensor, t1: torch.Tensor, method: HiPPODiscretisation
) -> tuple[torch.Tensor, torch.Tensor]:
    """(A_bar (k,n,n), B_bar (k,n)) of dc/dt = -(1/t) A c + (1/t) B f between t0 and t1."""
    eye = torch.eye(a.shape[0], dtype=a.dtype)
    dt = (t1 - t0)[:, None, None]
    t0, t1 = t0[:, None, None], t1[:, None, None]
    if method in ("bilinear", "bilinear-lssl"):
        left = eye + dt / (2 * t1) * a
        # LSSL's bilinear rule uses t1 on both sides; the textbook one t0 on the right.
        right = eye - dt / (2 * (t1 if method == "bilinear-lssl" else t0)) * a
        a_bar = torch.linalg.solve(left, right)
        b_bar = torch.linalg.solve(left, (dt / t1) * b[None, :, None])[..., 0]
        return a_bar, b_bar
    if method == "forward":
        return eye - dt / t0 * a, (dt / t0)[..., 0] * b
    if method == "backward":
        inv = torch.linalg.inv(eye + dt / t1 * a)
        return inv, (inv @ ((dt / t1) * b[None, :, None]))[..., 0]
    raise ValueError(f"unknown HiPPO discretisation {method!r}")


def lssl_parameters(
    n: int, timescales: torch.Tensor, method: HiPPODiscretisation = "bilinear-lssl"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed LSSL baseline: HiPPO-LegS frozen at time t_c per channel, one step dt = 1."""
    a, b = hippo_legs(n)
    t = timescales.to(F64)
    return discretize_hippo(a, b, t, t + 1, method)


# ----------------------------------------------------------------------------- Kalman filter


def kalman_filter(
    transitions: torch.Tensor, b: torch.Tensor, obs_sigma2: float, trans_sigma2: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Data-independent Kalman filter of c_k = A_k c_{k-1} + w, y_k = b^T c_k + e.

    Returns the posterior-mean recursion m_k = A_bar_k m_{k-1} + K_k y_k as
    (A_bar (k,n,n), K (k,n)) and the posterior covariances P (k,n,n) (Joseph form, P_0 = I).
    """
    n = b.shape[0]
    eye = torch.eye(n, dtype=F64)
    process = trans_sigma2 * eye
    p = eye
    a_bars, gains, covs = [], [], []
    for a in transitions:
        p_minus = a @ p @ a.T + process
        p_minus = 0.5 * (p_minus + p_minus.T)
        s = b @ p_minus @ b + obs_sigma2
        k = p_minus @ b / s
        keep = eye - torch.outer(k, b)  # I - K B^T
        p = keep @ p_minus @ keep.T + obs_sigma2 * torch.outer(k, k)
        a_bars.append(keep @ a)
        gains.append(k)
        covs.append(p)
    return torch.stack(a_bars), torch.stack(gains), torch.stack(covs)


@lru_cache(maxsize=8)
def _transitions_cached(n: int, steps: int, method: str) -> torch.Tensor:
    t0, t1 = step_times(steps)
    return discretize_unhippo(regularized_matrix(n), t0, t1, method)  # type: ignore[arg-type]


@lru_cache(maxsize=16)
def _unhippo_cached(n: int, steps: int, obs_sigma2: float, trans_sigma2: float, method: str):
    _, b = hippo_legs(n)
    return kalman_filter(_transitions_cached(n, steps, method), b, obs_sigma2, trans_sigma2)


def unhippo_parameters(
    n: int, steps: int, obs_sigma2: float, trans_sigma2: float = 1.0, method: UnHiPPODiscretisation = "expm"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Time-varying UnHiPPO SSM (A_bar_k, K_k) for k = 0..steps-1 plus covariances (cached)."""
    return tuple(x.clone() for x in _unhippo_cached(n, steps, float(obs_sigma2), float(trans_sigma2), method))


def channel_steps(min_t: float, max_t: float, channels: int) -> torch.Tensor:
    """Per-channel timescale, log-spaced in [min_t, max_t] (float64; LSSL uses it as is)."""
    return torch.logspace(np.log10(min_t), np.log10(max_t), channels, dtype=F64)


def kalman_steps(min_t: float, max_t: float, channels: int) -> torch.Tensor:
    """UnLSSL's per-channel Kalman step: the log-spaced timescales truncated to integers.

    The official ``torch.logspace(log10 min_t, log10 max_t, H, dtype=long)`` equals this whenever
    both exponents are integers (every official config; the default's [1, 100]); for fractional
    ones torch truncates the exponents themselves, which this does not copy.
    """
    return channel_steps(min_t, max_t, channels).floor().long()


def unlssl_parameters(
    n: int,
    min_t: float,
    max_t: float,
    channels: int,
    obs_sigma2: float,
    trans_sigma2: float = 1.0,
    method: UnHiPPODiscretisation = "expm",
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed UnLSSL layer: channel c frozen at Kalman step s_c = floor(logspace(min_t, max_t))."""
    steps = kalman_steps(min_t, max_t, channels)
    a_bar, gain, _ = unhippo_parameters(n, int(max_t) + 1, obs_sigma2, trans_sigma2, method)
    return a_bar[steps], gain[steps]


# ----------------------------------------------------------------------------- SSM kernels


def krylov(length: int, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """[b, A b, A^2 b, ..., A^{L-1} b] along the last axis: (..., n, L), by repeated squaring."""
    x = b[..., None]
    power = a
    while x.shape[-1] < length:
        x = torch.cat([x, power @ x[..., : length - x.shape[-1]]], dim=-1)
        power = power @ power
    return x


def causal_conv(kernel: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """y_t = sum_{l<=t} kernel_l x_{t-l} along the last axis, via zero-padded FFTs."""
    length = x.shape[-1]
    n_fft = 1 << (2 * length - 1).bit_length()  # >= 2L (no wrap-around), a power of two (fast FFT)
    spectrum = torch.fft.rfft(kernel, n=n_fft) * torch.fft.rfft(x, n=n_fft)
    return torch.fft.irfft(spectrum, n=n_fft)[..., :length]


def unroll(a_bar: torch.Tensor, b_bar: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Reference recurrence c_t = A_bar_t c_{t-1} + B_bar_t x_t over the last axis of x.

    ``a_bar``/``b_bar`` are (n,n)/(n) for a time-invariant system or (T,n,n)/(T,n) for a
    time-varying one; x is (..., T). Returns states (..., T, n).
    """
    varying = a_bar.dim() == 3
    c = x.new_zeros(*x.shape[:-1], b_bar.shape[-1])
    states = []
    for t in range(x.shape[-1]):
        a, b = (a_bar[t], b_bar[t]) if varying else (a_bar, b_bar)
        c = c @ a.T + x[..., t, None] * b
        states.append(c)
    return torch.stack(states, dim=-2)


# ----------------------------------------------------------------------------- reconstruction (E1)


def legendre_reconstruct(coefficients: np.ndarray, length: int) -> np.ndarray:
    """f_hat(tau) = sum_n c_n sqrt(2n+1) P_n(2 tau/T - 1) on the window [0, T = length].

    Sample j is read during the step from t = j to j+1, so it is compared at tau_j = j + 1/2.
    """
    n = coefficients.shape[-1]
    x = 2 * (np.arange(length) + 0.5) / length - 1
    scaled = np.asarray(coefficients) * np.sqrt(2 * np.arange(n) + 1)
    return legendre.legval(x, np.moveaxis(scaled, -1, 0))  # (..., length)


def hippo_legs_final_state(signals: torch.Tensor, n: int, method: HiPPODiscretisation = "bilinear") -> torch.Tensor:
    """Time-varying HiPPO-LegS (t = k) over signals (batch, T): final coefficients (batch, n)."""
    a, b = hippo_legs(n)
    t0, t1 = step_times(signals.shape[-1])
    a_bar, b_bar = discretize_hippo(a, b, t0, t1, method)
    return unroll(a_bar, b_bar, signals.to(F64))[..., -1, :]


def unhippo_final_state(signals: torch.Tensor, n: int, obs_sigma2: float, trans_sigma2: float = 1.0) -> torch.Tensor:
    """Time-varying UnHiPPO posterior mean over signals (batch, T): final coefficients (batch, n)."""
    a_bar, gain, _ = unhippo_parameters(n, signals.shape[-1], obs_sigma2, trans_sigma2)
    return unroll(a_bar, gain, signals.to(F64))[..., -1, :]


def e1_signal(length: int) -> np.ndarray:
    """The brief's E1 test signal f(t) = sin(6 pi t/T) exp(-t/T) on t = 0..T-1."""
    t = np.arange(length)
    return np.sin(6 * np.pi * t / length) * np.exp(-t / length)
