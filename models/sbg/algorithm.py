"""The sampling side of SBG: proposal energy (Prop. 1), SNIS, continuous-time SMC, and metrics.

Everything works in standardised coordinates ``x`` of shape (batch, atoms, 3) (nm / ``scale``).
``E_source(x) = -log q(x) + log rho_c(c) [+ log rho_R(R)]`` is the proposal's energy on the
extended space; ``E_target(x) = U(x * scale) / kT`` comes from OpenMM. Importance log-weights
are ``E_source - E_target``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

# ----------------------------------------------------------------------------- Prop. 1 and rotations


def com_log_density(x: torch.Tensor, sigma: float, kind: str = "chi3") -> torch.Tensor:
    """log rho(c) of the centre of mass c = mean_i x_i, the density the target is extended with.

    ``chi3`` is the paper's Prop. 1 term as written: the log-density of the chi_3 law of |c|
    (scale sigma), ``-|c|^2/(2 sigma^2) + log(|c|^2 / (sqrt2 sigma^3 Gamma(3/2)))``. ``gaussian`` is
    the 3-D Gaussian density N(c; 0, sigma^2 I) the training augmentation actually draws from.
    Either makes a proper extended target (the CoM-free marginal is unchanged); they differ in
    weight variance.
    """
    r2 = (x.mean(1) ** 2).sum(-1)
    if kind == "chi3":
        return -r2 / (2 * sigma**2) + torch.log(r2 / (math.sqrt(2) * sigma**3 * math.gamma(1.5)))
    if kind == "gaussian":
        return -r2 / (2 * sigma**2) - 1.5 * math.log(2 * math.pi * sigma**2)
    raise ValueError(f"unknown CoM density {kind!r}")


def kabsch_rotation(x: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """The proper rotation R (batch, 3, 3) minimising sum_i |x_i - c - R ref_i|^2 (differentiable)."""
    xc = x - x.mean(1, keepdim=True)
    h = reference.T.unsqueeze(0) @ xc  # (batch, 3, 3) = sum_i ref_i x_i^T
    u, _, vt = torch.linalg.svd(h)
    d = torch.sign(torch.linalg.det(vt.transpose(1, 2) @ u.transpose(1, 2)))
    fix = torch.diag_embed(torch.stack([torch.ones_like(d), torch.ones_like(d), d], -1))
    return vt.transpose(1, 2) @ fix @ u.transpose(1, 2)


def rotation_log(rot: torch.Tensor) -> torch.Tensor:
    """Axis-angle vector omega (batch, 3) with exp(omega^) = R, angle in [0, pi)."""
    v = 0.5 * torch.stack([rot[:, 2, 1] - rot[:, 1, 2], rot[:, 0, 2] - rot[:, 2, 0], rot[:, 1, 0] - rot[:, 0, 1]], -1)
    sin = v.norm(dim=-1).clamp_min(1e-12)
    cos = 0.5 * (rot.diagonal(dim1=1, dim2=2).sum(-1) - 1)
    theta = torch.atan2(sin, cos)
    return v * (theta / sin).unsqueeze(-1)


def rotation_exp(omega: torch.Tensor) -> torch.Tensor:
    """Rodrigues' formula: axis-angle (batch, 3) -> rotation matrices (batch, 3, 3)."""
    theta = omega.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    k = omega / theta
    zero = torch.zeros_like(k[:, 0])
    skew = torch.stack([zero, -k[:, 2], k[:, 1], k[:, 2], zero, -k[:, 0], -k[:, 1], k[:, 0], zero], -1).view(-1, 3, 3)
    eye = torch.eye(3, dtype=omega.dtype, device=omega.device).expand_as(skew)
    s, c = torch.sin(theta)[..., None], torch.cos(theta)[..., None]
    return eye + s * skew + (1 - c) * skew @ skew


def so3_log_density(rot: torch.Tensor, sigma: float) -> torch.Tensor:
    """log density, w.r.t. the Haar measure (up to a constant), of R = exp(omega^) with
    omega ~ N(0, sigma^2 I): N(omega) divided by the Haar density 2(1 - cos t)/t^2 in exponential
    coordinates (mass beyond t = pi neglected: sigma << pi)."""
    omega = rotation_log(rot)
    theta = omega.norm(dim=-1)
    haar = torch.where(theta > 1e-4, 2 * (1 - torch.cos(theta)) / theta.clamp_min(1e-4) ** 2, 1 - theta**2 / 12)
    return -(omega**2).sum(-1) / (2 * sigma**2) - 1.5 * math.log(2 * math.pi * sigma**2) - torch.log(haar)


# ----------------------------------------------------------------------------- SNIS and SMC


def normalized_ess(logw: torch.Tensor) -> float:
    """Kish effective sample size over N: exp(2 LSE(logw) - LSE(2 logw)) / N, in (0, 1]."""
    logw = logw.double()
    return float(torch.exp(2 * torch.logsumexp(logw, 0) - torch.logsumexp(2 * logw, 0)) / len(logw))


def multinomial_resample(logw: torch.Tensor, generator: torch.Generator, n: int | None = None) -> torch.Tensor:
    probs = torch.softmax(logw.double(), 0)
    return torch.multinomial(probs, n or len(logw), replacement=True, generator=generator)


def logw_quantile_keep(logw: torch.Tensor, fraction: float) -> torch.Tensor:
    """Mask dropping the top ``fraction`` of log-weights (the official ``logw_quantile_filter``)."""
    if fraction <= 0:
        return torch.ones_like(logw, dtype=torch.bool)
    return logw <= torch.quantile(logw.double(), 1 - fraction).to(logw.dtype)


EnergyFn = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]  # x -> (energy (B,), grad (B, n, 3))


@dataclass
class SNISResult:
    samples: torch.Tensor  # resampled, (N, atoms, 3)
    energies: torch.Tensor  # E_target of the resampled set
    ess: float
    unique_fraction: float


def snis(x: torch.Tensor, e_source: torch.Tensor, e_target: torch.Tensor, generator: torch.Generator) -> SNISResult:
    logw = e_source - e_target
    idx = multinomial_resample(logw, generator)
    return SNISResult(x[idx], e_target[idx], normalized_ess(logw), idx.unique().numel() / len(idx))


@dataclass
class SMCResult:
    samples: torch.Tensor
    energies: torch.Tensor
    ess_final: float  # ESS at t = 1 before the final resampling
    n_resampling: int
    unique_fraction: float  # distinct proposal lineages among the final particles
    acceptance: float
    trace: dict[str, list[float]] = field(default_factory=dict)


def interpolate(source: torch.Tensor, target: torch.Tensor, t: float) -> torch.Tensor:
    return (1 - t) * source + t * target


def smc(
    x: torch.Tensor,
    source: EnergyFn,
    target: EnergyFn,
    *,
    steps: int,
    eps: float,
    ess_threshold: float,
    metropolis: bool,
    generator: torch.Generator,
    progress: Callable | None = None,
) -> SMCResult:
    """Continuous-time SMC from E_source to E_target along E_t = (1 - t) E_source + t E_target.

    At each of ``steps`` levels t_k = k / steps (through t = 1, not the refactored code's 0.99):
    log w += -(E_target - E_source)(x) dt at the current particles, then one Langevin step
    x' = x - h grad E_t(x) + sqrt(2h) xi with h = eps dt (optionally Metropolis-adjusted), then
    multinomial resampling when the normalised ESS < ``ess_threshold``, and always at the end.
    One particle set; ``smc_batched`` runs several independent ones (sampling seeds) together.
    """
    kwargs = dict(steps=steps, eps=eps, ess_threshold=ess_threshold, metropolis=metropolis, progress=progress)
    return smc_batched([x], source, target, generators=[generator], **kwargs)[0]


def smc_batched(
    xs: list[torch.Tensor],
    source: EnergyFn,
    target: EnergyFn,
    *,
    steps: int,
    eps: float,
    ess_threshold: float,
    metropolis: bool,
    generators: list[torch.Generator],
    progress: Callable | None = None,
) -> list[SMCResult]:
    """``smc`` on several independent particle sets at once (the paired sampling seeds as a batch dimension).

    The sets may differ in size (each seed keeps its own filtered proposals): they are concatenated, so
    every energy and gradient call sees all particles of all sets, while each set keeps its own random
    stream (``generators[s]`` draws its Langevin noise, Metropolis tests and resampling in the order the
    one-set sampler draws them), its own weights, ESS and resampling decisions. Each result therefore
    equals ``smc`` on that set alone up to float rounding of the batched energy calls
    (tests/methods/test_sbg_batched.py).
    """
    if len(xs) != len(generators):
        raise ValueError(f"{len(xs)} particle sets but {len(generators)} generators")
    sizes = [len(x) for x in xs]
    bounds = [(a, a + n) for a, n in zip(np.cumsum([0, *sizes[:-1]]).tolist(), sizes)]
    x = torch.cat(xs)
    n = len(x)
    es, gs = source(x)
    et, gt = target(x)
    logw = torch.zeros(n, dtype=torch.float64)
    lineage = torch.cat([torch.arange(m) for m in sizes])
    times = torch.linspace(0.0, 1.0, steps + 1, dtype=torch.float64)
    traces = [{"t": [], "ess": [], "median_energy": [], "acceptance": []} for _ in xs]
    resamplings, accepted, final_ess = [0] * len(xs), [0.0] * len(xs), [1.0] * len(xs)
    levels = range(1, steps + 1)
    for k in progress(levels) if progress else levels:
        t, dt = float(times[k]), float(times[k] - times[k - 1])
        logw = logw + torch.nan_to_num(-(et - es) * dt, nan=-math.inf)  # a broken particle gets weight 0
        h = eps * dt
        grad = interpolate(gs, gt, t)
        noise = torch.cat([torch.randn(xi.shape, generator=g, dtype=x.dtype) for xi, g in zip(xs, generators)])
        proposal = x - h * grad + math.sqrt(2 * h) * noise
        es_p, gs_p = source(proposal)
        et_p, gt_p = target(proposal)
        if metropolis:
            # log alpha = -E_t(x') + E_t(x) + log k(x | x') - log k(x' | x), k = N(. - h grad E_t, 2h I)
            forward = ((proposal - x + h * grad) ** 2).flatten(1).sum(1)
            backward = ((x - proposal + h * interpolate(gs_p, gt_p, t)) ** 2).flatten(1).sum(1)
            log_alpha = -interpolate(es_p, et_p, t) + interpolate(es, et, t) - (backward - forward) / (4 * h)
            log_alpha = torch.nan_to_num(log_alpha, nan=-math.inf)
            uniform = torch.cat([torch.rand(m, generator=g, dtype=torch.float64) for m, g in zip(sizes, generators)])
            accept = torch.log(uniform) < log_alpha
        else:
            accept = torch.ones(
                n, dtype=torch.bool
            )  # ULA: always move (a non-finite energy zeroes the weight next step)
        a = accept.view(-1, *([1] * (x.dim() - 1)))
        x, gs, gt = torch.where(a, proposal, x), torch.where(a, gs_p, gs), torch.where(a, gt_p, gt)
        es, et = torch.where(accept, es_p, es), torch.where(accept, et_p, et)
        order, resampled = torch.arange(n), []
        for s, ((lo, hi), g) in enumerate(zip(bounds, generators)):
            w, acc = logw[lo:hi], accept[lo:hi].double().mean()
            accepted[s] += float(acc) / steps
            ess = normalized_ess(w) if torch.isfinite(w).any() else 0.0
            traces[s]["t"].append(t)
            traces[s]["ess"].append(ess)
            traces[s]["median_energy"].append(float(et[lo:hi].median()))
            traces[s]["acceptance"].append(float(acc))
            if ess < ess_threshold or k == steps:
                final_ess[s] = ess
                order[lo:hi] = lo + multinomial_resample(w, g)
                resamplings[s] += int(k != steps)
                resampled.append((lo, hi))
        x, es, et, gs, gt, lineage = x[order], es[order], et[order], gs[order], gt[order], lineage[order]
        for lo, hi in resampled:  # a resampled set starts again from equal weights
            logw[lo:hi] = 0.0
    return [
        SMCResult(
            x[lo:hi],
            et[lo:hi],
            final_ess[s],
            resamplings[s],
            lineage[lo:hi].unique().numel() / (hi - lo),
            accepted[s],
            traces[s],
        )
        for s, (lo, hi) in enumerate(bounds)
    ]


# ----------------------------------------------------------------------------- metrics


def wasserstein_1d(a: np.ndarray, b: np.ndarray, p: int = 2) -> float:
    """Exact W_p between two empirical 1-D distributions (uniform weights, any sizes).

    W_p^p = int_0^1 |F_a^-1(u) - F_b^-1(u)|^p du, integrated exactly over the merged quantile steps.
    """
    a, b = np.sort(np.asarray(a, np.float64)), np.sort(np.asarray(b, np.float64))
    cuts = np.union1d(np.arange(1, len(a) + 1) / len(a), np.arange(1, len(b) + 1) / len(b))
    widths = np.diff(np.concatenate([[0.0], cuts]))
    mid = cuts - widths / 2
    qa = a[np.minimum((mid * len(a)).astype(int), len(a) - 1)]
    qb = b[np.minimum((mid * len(b)).astype(int), len(b) - 1)]
    return float((widths * np.abs(qa - qb) ** p).sum() ** (1 / p))


def torus_w2(a: np.ndarray, b: np.ndarray, max_points: int, rng: np.random.Generator) -> float:
    """W2 between angle sets (n, k) on the k-torus with wrapped distance; exact OT (assignment)
    on equal-size random subsets of ``max_points``."""
    from scipy.optimize import linear_sum_assignment

    n = min(len(a), len(b), max_points)
    a = a[rng.choice(len(a), n, replace=False)]
    b = b[rng.choice(len(b), n, replace=False)]
    diff = np.abs(a[:, None, :] - b[None, :, :])
    cost = (np.minimum(diff, 2 * np.pi - diff) ** 2).sum(-1)
    rows, cols = linear_sum_assignment(cost)
    return float(np.sqrt(cost[rows, cols].mean()))


def histogram_jsd(a: np.ndarray, b: np.ndarray, bins: int) -> float:
    """Jensen-Shannon divergence (nats) between 2-D (phi, psi) histograms on [-pi, pi)^2."""
    edges = np.linspace(-np.pi, np.pi, bins + 1)
    pa = np.histogram2d(a[:, 0], a[:, 1], bins=(edges, edges))[0].ravel() + 1e-10
    pb = np.histogram2d(b[:, 0], b[:, 1], bins=(edges, edges))[0].ravel() + 1e-10
    pa, pb = pa / pa.sum(), pb / pb.sum()
    m = 0.5 * (pa + pb)
    return float(0.5 * (pa * np.log(pa / m)).sum() + 0.5 * (pb * np.log(pb / m)).sum())


def chirality_signs(x: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """Sign of det[N - CA, C - CA, CB - CA] at each chiral centre: (batch, centres)."""
    n, ca, c, cb = (x[:, centres[:, j]] for j in range(4))
    return np.sign(np.einsum("bki,bki->bk", np.cross(n - ca, c - ca), cb - ca))


def fix_chirality(
    x: np.ndarray, centres: np.ndarray, reference: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mirror (x -> -x) samples whose every centre is inverted; flag mixed ones as unfixable.

    Returns (fixed samples, mask of samples that were wrong, mask of unfixable samples).
    """
    if len(centres) == 0:
        none = np.zeros(len(x), bool)
        return x, none, none
    agree = chirality_signs(x, centres) == reference[None]
    wrong = ~agree.all(1)
    flip = (~agree).all(1)
    fixed = np.where(flip[:, None, None], -x, x)
    return fixed, wrong, wrong & ~flip
