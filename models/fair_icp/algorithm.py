"""The statistical core of FairICP: q(y|a), inverse conditional permutation, CRT, metrics.

Everything works on index vectors, never on the n x n matrix log q(Y_i | A_j) the official
code builds: a density here is a "pair log-likelihood" ``loglik(i, j) = log q(Y_i | A_j)``
evaluated elementwise, so memory stays O(n) (Adult, ACSIncome) and the MCMC is vectorised.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch import nn

# ----------------------------------------------------------------------------- q(y | a)


class PairLogLik(Protocol):
    def __call__(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """log q(Y_i | A_j) for each pair (i[k], j[k]), up to terms that cancel in the MCMC."""


@dataclass(frozen=True)
class GaussianPairLogLik:
    """q(y|a) = N(y; mean(a), sd^2). Terms in y or a alone cancel in a swap, so they are dropped."""

    y: np.ndarray
    mean: np.ndarray  # mean(A_j) for every row j
    sd: float

    def __call__(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        return -0.5 * ((self.y[i] - self.mean[j]) / self.sd) ** 2


@dataclass(frozen=True)
class MixturePairLogLik:
    """q(y|a) = sum_c w_c(a) N(y; m_c(a), s_c(a)^2) with per-row mixture parameters."""

    y: np.ndarray
    log_weight: np.ndarray  # [n, C]
    mean: np.ndarray  # [n, C]
    log_sd: np.ndarray  # [n, C]

    def __call__(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        z = (self.y[i, None] - self.mean[j]) * np.exp(-self.log_sd[j])
        terms = self.log_weight[j] - self.log_sd[j] - 0.5 * z**2
        top = terms.max(axis=1, keepdims=True)
        return (top + np.log(np.exp(terms - top).sum(axis=1, keepdims=True)))[:, 0]


@dataclass(frozen=True)
class CategoricalPairLogLik:
    """q(y|a) = P(Y = y | a) from a classifier: log_prob[j, c] = log P(Y = c | A_j)."""

    y: np.ndarray  # integer classes
    log_prob: np.ndarray  # [n, n_classes]

    def __call__(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        return self.log_prob[j, self.y[i]]


@dataclass(frozen=True)
class MatrixPairLogLik:
    """An explicit matrix log q(Y_i | A_j) (tests, tiny n)."""

    matrix: np.ndarray

    def __call__(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        return self.matrix[i, j]


def _standardise(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return a.mean(axis=0), np.where(a.std(axis=0) > 0, a.std(axis=0), 1.0)


@dataclass(frozen=True)
class LinearGaussianDensity:
    """Y | A ~ N(c + A b, s^2) by least squares (torch); exact in the paper's simulation."""

    coef: np.ndarray
    intercept: float
    sd: float

    @classmethod
    def fit(cls, y: np.ndarray, a: np.ndarray) -> LinearGaussianDensity:
        design = torch.from_numpy(np.column_stack([np.ones(len(a)), a])).double()
        target = torch.from_numpy(y).double()[:, None]
        beta = torch.linalg.lstsq(design, target).solution[:, 0]
        resid = target[:, 0] - design @ beta
        sd = float(torch.sqrt((resid**2).sum() / max(len(y) - design.shape[1], 1)))
        return cls(beta[1:].numpy(), float(beta[0]), sd)

    def pair_loglik(self, y: np.ndarray, a: np.ndarray) -> GaussianPairLogLik:
        return GaussianPairLogLik(y, self.intercept + a @ self.coef, self.sd)


class MixtureDensityNet(nn.Module):
    """q(y|a) as a Gaussian mixture whose parameters an MLP reads off a (stand-in for the MAF)."""

    def __init__(self, a_dim: int, components: int = 5, hidden: int = 64) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(a_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, 3 * components)

    def forward(self, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        logits, mean, log_sd = self.head(self.body(a)).chunk(3, dim=-1)
        return torch.log_softmax(logits, dim=-1), mean, log_sd.clamp(-7.0, 5.0)

    def log_prob(self, y: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        log_w, mean, log_sd = self(a)
        z = (y[:, None] - mean) * torch.exp(-log_sd)
        return torch.logsumexp(log_w - log_sd - 0.5 * z**2, dim=-1) - 0.5 * np.log(2 * np.pi)


def _fit_full_batch(model: nn.Module, loss_fn, steps: int, seed: int, val_loss_fn=None) -> nn.Module:
    """Full-batch Adam on a nuisance density; keeps the state with the best held-out loss."""
    torch.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    best, best_state = float("inf"), None
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        opt.step()
        with torch.no_grad():
            held_out = float((val_loss_fn or loss_fn)())
        if held_out < best:
            best, best_state = held_out, {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(best_state)
    return model


def _held_out_split(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.random.default_rng(seed).permutation(n)
    cut = max(int(0.8 * n), 1)
    return order[:cut], order[cut:] if n - cut > 0 else order[:cut]


def fit_mdn(
    y: np.ndarray, a: np.ndarray, steps: int, seed: int
) -> Callable[[np.ndarray, np.ndarray], MixturePairLogLik]:
    """Fit an MDN on 80% (early stopping on 20%, as the repo's MAF) and return a pair-loglik factory."""
    mean_a, scale_a = _standardise(a)
    mean_y, scale_y = float(y.mean()), float(y.std() or 1.0)
    torch.manual_seed(seed)
    net = MixtureDensityNet(a.shape[1])
    at = torch.from_numpy((a - mean_a) / scale_a).float()
    yt = torch.from_numpy((y - mean_y) / scale_y).float()
    fit_rows, held_rows = (torch.from_numpy(r) for r in _held_out_split(len(y), seed))
    _fit_full_batch(
        net,
        lambda: -net.log_prob(yt[fit_rows], at[fit_rows]).mean(),
        steps,
        seed,
        lambda: -net.log_prob(yt[held_rows], at[held_rows]).mean(),
    )

    def pair_loglik(y_new: np.ndarray, a_new: np.ndarray) -> MixturePairLogLik:
        with torch.no_grad():
            log_w, mean, log_sd = net(torch.from_numpy((a_new - mean_a) / scale_a).float())
        return MixturePairLogLik(
            (y_new - mean_y) / scale_y, log_w.double().numpy(), mean.double().numpy(), log_sd.double().numpy()
        )

    return pair_loglik


def fit_classifier_density(y: np.ndarray, a: np.ndarray, steps: int, seed: int, n_classes: int = 2):
    """P(Y = c | A) by a one-hidden-layer (64) softmax MLP, as the repo's Class_density_estimation."""
    mean_a, scale_a = _standardise(a)
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(a.shape[1], 64), nn.ReLU(), nn.Linear(64, n_classes))
    at = torch.from_numpy((a - mean_a) / scale_a).float()
    yt = torch.from_numpy(y.astype(np.int64))
    _fit_full_batch(net, lambda: nn.functional.cross_entropy(net(at), yt), steps, seed)

    def pair_loglik(y_new: np.ndarray, a_new: np.ndarray) -> CategoricalPairLogLik:
        with torch.no_grad():
            log_prob = torch.log_softmax(net(torch.from_numpy((a_new - mean_a) / scale_a).float()), dim=-1)
        return CategoricalPairLogLik(y_new.astype(np.int64), log_prob.double().numpy())

    return pair_loglik


# ----------------------------------------------------------------------------- ICP sampler


def swap_log_odds(loglik: PairLogLik, perm: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """l = log q(Y_pi(i)|A_j) + log q(Y_pi(j)|A_i) - log q(Y_pi(i)|A_i) - log q(Y_pi(j)|A_j)."""
    return loglik(perm[i], j) + loglik(perm[j], i) - loglik(perm[i], i) - loglik(perm[j], j)


def swap_probability(log_odds: np.ndarray) -> np.ndarray:
    """sigma(l) with l clipped at -500, as in Berrett et al.'s sampler."""
    return 1.0 / (1.0 + np.exp(-np.maximum(log_odds, -500.0)))


def permutation_sweeps(loglik: PairLogLik, perm: np.ndarray, sweeps: int, rng: np.random.Generator) -> np.ndarray:
    """``sweeps`` rounds of the pairwise-swap MCMC on a permutation of Y given A (returns a copy).

    Each round pairs the indices at random (disjoint pairs) and swaps perm[i] <-> perm[j] with
    probability sigma(l): a Gibbs step whose stationary law is prod_i q(Y_perm(i) | A_i).
    """
    perm = perm.copy()
    n = len(perm)
    half = n // 2
    for _ in range(sweeps):
        order = rng.permutation(n)
        i, j = order[:half], order[half : 2 * half]
        swap = rng.random(half) < swap_probability(swap_log_odds(loglik, perm, i, j))
        pi, pj = perm[i].copy(), perm[j].copy()
        perm[i] = np.where(swap, pj, pi)
        perm[j] = np.where(swap, pi, pj)
    return perm


def conditional_permutations(
    loglik: PairLogLik, n: int, copies: int, sweeps: int, rng: np.random.Generator
) -> np.ndarray:
    """``copies`` snapshots of one chain: burn-in of ``sweeps`` from the identity, then one
    snapshot every ``sweeps`` sweeps (the repo's generate_X_CPT). Returns [copies, n] int."""
    perm = permutation_sweeps(loglik, np.arange(n), sweeps, rng)
    out = np.empty((copies, n), dtype=np.int64)
    for c in range(copies):
        perm = permutation_sweeps(loglik, perm, sweeps, rng)
        out[c] = perm
    return out


def inverse_permutation_rows(perms: np.ndarray) -> np.ndarray:
    """Row indices of A-tilde: A_tilde[k] = A[perm^{-1}(k)], i.e. A[argsort(perm)]."""
    return np.argsort(perms, axis=-1)


def icp_copies(loglik: PairLogLik, n: int, copies: int, sweeps: int, rng: np.random.Generator) -> np.ndarray:
    """Row indices [copies, n] such that A[rows[c]] is the c-th inverse-conditional-permutation copy."""
    return inverse_permutation_rows(conditional_permutations(loglik, n, copies, sweeps, rng))


# ----------------------------------------------------------------------------- CRT baselines


@dataclass(frozen=True)
class GaussianConditional:
    """A | Y ~ N(c + b y, Sigma) fitted by least squares (the Fair-Dummies/CRT-style sampler)."""

    intercept: np.ndarray
    slope: np.ndarray
    chol: np.ndarray

    @classmethod
    def fit(cls, a: np.ndarray, y: np.ndarray) -> GaussianConditional:
        design = np.column_stack([np.ones(len(y)), y])
        beta, *_ = np.linalg.lstsq(design, a, rcond=None)
        resid = a - design @ beta
        cov = resid.T @ resid / max(len(y) - 2, 1) + 1e-9 * np.eye(a.shape[1])
        return cls(beta[0], beta[1], np.linalg.cholesky(cov))

    def sample(self, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        noise = rng.standard_normal((len(y), len(self.intercept)))
        return self.intercept + y[:, None] * self.slope + noise @ self.chol.T


def class_conditional_resample(a: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Draw A-tilde_i from the empirical law of A among rows with the same label (FDL, discrete Y)."""
    out = np.empty_like(a)
    for label in np.unique(y):
        rows = np.flatnonzero(y == label)
        out[rows] = a[rng.choice(rows, size=len(rows), replace=True)]
    return out


# ----------------------------------------------------------------------------- metrics


def u_centre(d: np.ndarray) -> np.ndarray:
    """U-centred distance matrix (Szekely & Rizzo 2014): zero diagonal, unbiased inner products."""
    n = d.shape[-1]
    rows = d.sum(axis=-1, keepdims=True) / (n - 2)
    cols = d.sum(axis=-2, keepdims=True) / (n - 2)
    total = d.sum(axis=(-2, -1), keepdims=True) / ((n - 1) * (n - 2))
    u = d - rows - cols + total
    idx = np.arange(n)
    u[..., idx, idx] = 0.0
    return u


def distance_matrix(x: np.ndarray) -> np.ndarray:
    x = x.reshape(len(x), -1)
    return np.sqrt(np.maximum(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1), 0.0))


def u_inner(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    n = u.shape[-1]
    return (u * v).sum(axis=(-2, -1)) / (n * (n - 3))


def _bias_corrected_dcor(uv, uu, vv):
    denom = np.sqrt(np.maximum(uu * vv, 0.0))
    return np.where(denom > 0, uv / np.where(denom > 0, denom, 1.0), 0.0)


def pdcor_from_inner(r_xy, r_xz, r_yz) -> np.ndarray:
    """pdcor from the three bias-corrected distance correlations (0 when degenerate, as dcor)."""
    denom = np.sqrt(np.maximum((1 - r_xz**2) * (1 - r_yz**2), 0.0))
    return np.where(denom > 1e-12, (r_xy - r_xz * r_yz) / np.where(denom > 1e-12, denom, 1.0), 0.0)


def partial_distance_correlation(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> float:
    """pdcor(x, y; z) of Szekely & Rizzo (2014): the dependence of x and y left after z."""
    ux, uy, uz = (u_centre(distance_matrix(v)) for v in (x, y, z))
    xx, yy, zz = u_inner(ux, ux), u_inner(uy, uy), u_inner(uz, uz)
    r_xy = _bias_corrected_dcor(u_inner(ux, uy), xx, yy)
    r_xz = _bias_corrected_dcor(u_inner(ux, uz), xx, zz)
    r_yz = _bias_corrected_dcor(u_inner(uy, uz), yy, zz)
    return float(pdcor_from_inner(r_xy, r_xz, r_yz))


def eo_statistics(
    y_hat: np.ndarray, a: np.ndarray, y: np.ndarray, copy_rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """pdcor(Y_hat_m, A | Y) for every predictor m and pdcor(Y_hat_m, A[rows_c] | Y) for every copy c.

    ``y_hat`` is [M, n]; copies reuse one U-centred distance matrix of A, permuted
    (U-centring commutes with a simultaneous row/column permutation).
    Returns (observed [M], null [M, C]).
    """
    u_y = u_centre(distance_matrix(y))
    u_a = u_centre(distance_matrix(a))
    yy, aa = u_inner(u_y, u_y), u_inner(u_a, u_a)
    copies_u_a = (u_a[np.ix_(rows, rows)] for rows in copy_rows)
    r_ay = [_bias_corrected_dcor(u_inner(u, u_y), aa, yy) for u in [u_a, *copies_u_a]]
    n = len(y)
    chunk = max(1, int(2e7 // (n * n)))  # bound the [chunk, n, n] stack of U-centred predictions
    observed, null = [], []
    for start in range(0, len(y_hat), chunk):
        u_h = np.stack([u_centre(distance_matrix(h)) for h in y_hat[start : start + chunk]])
        hh = u_inner(u_h, u_h)
        r_hy = _bias_corrected_dcor(u_inner(u_h, u_y[None]), hh, yy)

        def stat(u_a_copy: np.ndarray, r_ay_copy) -> np.ndarray:
            r_ha = _bias_corrected_dcor(u_inner(u_h, u_a_copy[None]), hh, aa)
            return pdcor_from_inner(r_ha, r_hy, r_ay_copy)

        observed.append(stat(u_a, r_ay[0]))
        null_stats = [stat(u_a[np.ix_(rows, rows)], r_ay[c + 1]) for c, rows in enumerate(copy_rows)]
        null.append(np.stack(null_stats, axis=1) if null_stats else np.zeros((len(hh), 0)))
    return np.concatenate(observed), np.concatenate(null)


def permutation_p_value(observed: np.ndarray, null: np.ndarray) -> np.ndarray:
    """(1 + #{T(A-tilde_c) >= T(A)}) / (C + 1), per row."""
    observed = np.asarray(observed, dtype=float)
    return (1.0 + (null >= observed[..., None]).sum(axis=-1)) / (null.shape[-1] + 1.0)


def deo(y_pred: np.ndarray, y: np.ndarray, a: np.ndarray) -> float:
    """Sum over y in {0,1} and A cells of |P(Y_hat=1 | Y=y, A=a) - P(Y_hat=1 | Y=y)|; empty cells add 0."""
    cells = np.array(np.meshgrid(*[[0.0, 1.0]] * a.shape[1], indexing="ij")).reshape(a.shape[1], -1).T
    total = 0.0
    for label in (0.0, 1.0):
        in_class = y == label
        if not in_class.any():
            continue
        base = y_pred[in_class].mean()
        for cell in cells:
            rows = in_class & np.all(a == cell, axis=1)
            if rows.any():
                total += abs(y_pred[rows].mean() - base)
    return float(total)
