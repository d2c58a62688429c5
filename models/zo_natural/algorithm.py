"""The algorithm: block Fisher, the natural perturbation sampler, the ZO estimate, queries to a target.

Natural perturbation (the ICML paper, as reconstructed in the brief): probes delta ~ N(0, Sigma)
maximise the entropy (1/2) log det Sigma at a bounded expected change of the network's predictive
distribution, E KL(p(y|x, theta) || p(y|x, theta + delta)) ~ (1/2) tr(F Sigma); hence
Sigma ∝ (F + rho I)^-1 with F the (block-diagonal, trace-normalised, damped) Fisher. With the
precursor's estimate g_hat = lambda_S / (N Q) sum_q (L_q - L_0) / mu' delta_q, E g_hat ∝ Sigma grad L:
a natural-gradient direction from forward queries only.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from models.zo_natural.networks import ChipNetwork

# ----------------------------------------------------------------------------- Fisher


def block_fisher(twin: ChipNetwork, theta: torch.Tensor, x: torch.Tensor) -> list[torch.Tensor]:
    """Per-block categorical Fisher E_x E_{y ~ p(y|x)} [grad log p(y|x) grad log p(y|x)^T] of the twin.

    The expectation over y is exact: with J the logit Jacobian and p the softmax,
    F = E_x J^T (diag p - p p^T) J = E_x G^T G with G = diag(sqrt p) (J - 1 p^T J).
    """
    theta = theta.detach()
    jac = twin.logit_jacobian(theta, x)  # (B, C, N)
    with torch.no_grad():
        p = torch.softmax(twin.batched_logits(theta[None], x)[0], dim=-1)  # (B, C)
        centred = jac - torch.einsum("bc,bcn->bn", p, jac)[:, None, :]
        rows = (p.sqrt()[..., None] * centred).reshape(-1, jac.shape[-1])  # (B C, N)
        return [rows[:, a:b].T @ rows[:, a:b] / x.shape[0] for a, b in twin.blocks]


def run_block_fisher(twin: ChipNetwork, thetas: torch.Tensor, x: torch.Tensor) -> list[list[torch.Tensor]]:
    """``block_fisher`` for R parameter vectors (R, N), each on its own minibatch x (R, B, d): one batched closed-form
    Jacobian where the network has one (the mesh), else one run after another."""
    if not hasattr(twin, "run_logit_jacobian"):
        return [block_fisher(twin, theta, xr) for theta, xr in zip(thetas, x)]
    thetas = thetas.detach()
    jac = twin.run_logit_jacobian(thetas, x)  # (R, B, C, N)
    with torch.no_grad():
        defects = {k: v[None].expand(len(thetas), *v.shape) for k, v in twin.defects().items()}
        p = torch.softmax(twin.run_logits(defects, thetas[:, None], x)[:, 0], dim=-1)  # (R, B, C)
        centred = jac - torch.einsum("rbc,rbcn->rbn", p, jac)[:, :, None, :]
        rows = (p.sqrt()[..., None] * centred).reshape(len(thetas), -1, jac.shape[-1])  # (R, B C, N)
        blocks = [rows[..., a:b].mT @ rows[..., a:b] / x.shape[1] for a, b in twin.blocks]
        return [[block[r] for block in blocks] for r in range(len(thetas))]


# ----------------------------------------------------------------------------- sampler


class PerturbationSampler:
    """Probes for ZO: isotropic N(0, I) (ZO-I) or natural N(0, Sigma), Sigma_m = (1+rho)(C_m + rho I)^-1.

    C_m is an EMA of the trace-normalised block Fisher F_m / (tr F_m / n_m), so rho is relative
    to the Fisher's mean eigenvalue. Sampling: delta_m = sqrt(1+rho) L_m^-T z, L_m L_m^T = C_m + rho I.
    ``sample`` then rescales (precursor's conventions): each natural block to unit RMS when
    ``normalize_blocks``, and every probe to norm sqrt(N).
    """

    def __init__(
        self,
        blocks: list[tuple[int, int]],
        *,
        natural: bool,
        rho: float,
        ema: float = 1.0,
        normalize_blocks: bool = True,
    ) -> None:
        self.blocks, self.natural, self.rho, self.ema = blocks, natural, rho, ema
        self.normalize_blocks = normalize_blocks
        self.n_params = blocks[-1][1]
        self.curvature: list[torch.Tensor] | None = None  # C_m
        self.cholesky: list[torch.Tensor] | None = None

    def update(self, fishers: list[torch.Tensor]) -> None:
        """Fold a new block-Fisher estimate into C_m (the first estimate initialises it)."""
        normalised = [f * (f.shape[0] / torch.trace(f).clamp_min(1e-300)) for f in fishers]
        if self.curvature is None:
            self.curvature = normalised
        else:
            self.curvature = [(1 - self.ema) * c + self.ema * f for c, f in zip(self.curvature, normalised)]
        self.set_curvature(self.curvature)

    def set_curvature(self, curvature: list[torch.Tensor]) -> None:
        """Install C_m as it is (a checkpoint's) and factorise C_m + rho I."""
        self.curvature = curvature
        self.cholesky = [
            torch.linalg.cholesky(c + self.rho * torch.eye(len(c), dtype=c.dtype, device=c.device)) for c in curvature
        ]

    def covariance_blocks(self) -> list[torch.Tensor]:
        """Closed form of the raw probes' covariance per block: (1 + rho)(C_m + rho I)^-1 (or I)."""
        if not self.natural:
            return [torch.eye(b - a, dtype=torch.float64) for a, b in self.blocks]
        return [(1 + self.rho) * torch.cholesky_inverse(chol) for chol in self.cholesky]

    def precondition(self, vector: torch.Tensor) -> torch.Tensor:
        """Sigma v with the closed-form block covariance (the direction E g_hat points to)."""
        out = vector.clone()
        for (a, b), cov in zip(self.blocks, self.covariance_blocks()):
            out[a:b] = cov.to(vector) @ vector[a:b]
        return out

    def sample_raw(self, n_probes: int, generator: torch.Generator) -> torch.Tensor:
        """(Q, N) Gaussian probes with the closed-form covariance, before any rescaling."""
        z = torch.randn(n_probes, self.n_params, generator=generator, dtype=torch.float64)
        if not self.natural:
            return z
        if self.cholesky is None:
            raise RuntimeError("natural sampler used before its first Fisher update")
        device = self.cholesky[0].device
        z = z.to(device)
        parts = [
            math.sqrt(1 + self.rho) * torch.linalg.solve_triangular(chol.mT, z[:, a:b].T, upper=True).T
            for (a, b), chol in zip(self.blocks, self.cholesky)
        ]
        return torch.cat(parts, dim=1)

    def sample(self, n_probes: int, generator: torch.Generator) -> torch.Tensor:
        """(Q, N) probes, each of norm exactly sqrt(N)."""
        delta = self.sample_raw(n_probes, generator)
        if self.natural and self.normalize_blocks:
            delta = torch.cat(
                [delta[:, a:b] * math.sqrt(b - a) / delta[:, a:b].norm(dim=1, keepdim=True) for a, b in self.blocks],
                dim=1,
            )
        return delta * math.sqrt(self.n_params) / delta.norm(dim=1, keepdim=True)


def zo_gradient(losses: torch.Tensor, deltas: torch.Tensor, mu_prime: float, lambda_s: float) -> torch.Tensor:
    """g_hat = lambda_S / (N Q) sum_q (L_q - L_0) / mu' delta_q, with losses = [L_0, L_1, ..., L_Q]."""
    n_probes, n_params = deltas.shape
    slopes = (losses[1:] - losses[0]) / mu_prime
    return lambda_s / (n_params * n_probes) * slopes @ deltas


def make_sampler(zo_cfg, net: ChipNetwork, natural: bool) -> PerturbationSampler:
    return PerturbationSampler(
        net.blocks, natural=natural, rho=zo_cfg.rho, ema=zo_cfg.fisher_ema, normalize_blocks=zo_cfg.normalize_blocks
    )


def chip_metrics(
    net: ChipNetwork, thetas: torch.Tensor, x: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-setting mean cross-entropy (float64) and accuracy of the network at each of thetas."""
    logits = net.batched_logits(thetas, x)  # (P, B, C)
    losses = F.cross_entropy(logits.transpose(1, 2), y.expand(len(thetas), -1), reduction="none").mean(1)
    accuracy = (logits.argmax(-1) == y).double().mean(1)
    return losses, accuracy


# ----------------------------------------------------------------------------- sampler check


def sampler_check(cfg, chip: ChipNetwork, x: torch.Tensor, y: torch.Tensor, seed: int) -> dict[str, float]:
    """The brief's must-pass sampler test on the nominal model at a fixed theta.

    With the block Fisher F at theta and Q = ``check_probes`` probes: cos(g_hat_NP, Sigma grad L)
    and cos(g_hat_I, grad L); the empirical covariance of raw natural probes against the closed form
    (1 + rho)(F + rho I)^-1, relative Frobenius error next to its Monte-Carlo expectation; probe norms.
    """
    twin = chip.nominal()
    theta = twin.theta.detach()
    natural = make_sampler(cfg.zo, twin, natural=True)
    natural.ema = 1.0
    natural.update(block_fisher(twin, theta, x))
    isotropic = make_sampler(cfg.zo, twin, natural=False)
    # Exact gradient of the nominal loss (allowed: this is the software twin, not the chip).
    theta_req = theta.clone().requires_grad_(True)
    loss = chip_metrics(twin, theta_req[None], x, y)[0][0]
    grad = torch.autograd.grad(loss, theta_req)[0].detach()
    mu_prime = cfg.zo.mu / math.sqrt(twin.n_params)
    out: dict[str, float] = {}
    generator = torch.Generator().manual_seed(30_000 + seed)
    for name, sampler, target in (("np", natural, natural.precondition(grad)), ("iso", isotropic, grad)):
        estimate = torch.zeros_like(theta)
        deltas_all = []
        for chunk in torch.split(torch.arange(cfg.check_probes), 512):
            deltas = sampler.sample(len(chunk), generator)
            with torch.no_grad():
                losses = chip_metrics(twin, torch.cat([theta[None], theta + mu_prime * deltas]), x, y)[0]
            estimate += zo_gradient(losses, deltas, mu_prime, cfg.zo.lambda_s) * len(chunk)
            deltas_all.append(deltas)
        deltas = torch.cat(deltas_all)
        out[f"sampler/cos_{name}"] = float(F.cosine_similarity(estimate, target, dim=0))
        out[f"sampler/cos_{name}_predicted"] = predicted_cosine(sampler, grad, cfg.check_probes)
        out[f"sampler/probe_norm_err_{name}"] = float(((mu_prime * deltas).norm(dim=1) / cfg.zo.mu - 1).abs().max())
    raw = natural.sample_raw(cfg.check_probes, generator)
    errors, expected = [], []
    for (a, b), cov in zip(natural.blocks, natural.covariance_blocks()):
        empirical = raw[:, a:b].T @ raw[:, a:b] / len(raw)
        errors.append(float((empirical - cov).norm() / cov.norm()))
        # E||S - Sigma||_F^2 = (tr(Sigma)^2 + tr(Sigma^2)) / Q for Q zero-mean Gaussian samples.
        expected.append(float(torch.sqrt((torch.trace(cov) ** 2 + torch.trace(cov @ cov)) / len(raw)) / cov.norm()))
    out["sampler/cov_rel_err"] = max(errors)
    out["sampler/cov_rel_err_expected"] = max(expected)
    out["sampler/cov_anisotropy"] = float(max(torch.linalg.cond(c) for c in natural.covariance_blocks()))
    return out


def predicted_cosine(sampler: PerturbationSampler, grad: torch.Tensor, n_probes: int) -> float:
    """Monte-Carlo expectation of cos(g_hat, Sigma g) for Q Gaussian probes N(0, Sigma) (Isserlis):
    E||g_hat - Sigma g||^2 = ((g^T Sigma g) tr Sigma + ||Sigma g||^2) / Q, so cos ~ (1 + that / ||Sigma g||^2)^-1/2.
    Ignores the probes' norm rescaling; large when g lies where Sigma is small (natural probes)."""
    target = sampler.precondition(grad)
    trace = sum(float(torch.trace(c)) for c in sampler.covariance_blocks())
    relative = (float(grad @ target) * trace + float(target @ target)) / (n_probes * float(target @ target))
    return 1 / math.sqrt(1 + relative)


# ----------------------------------------------------------------------------- queries to a target loss


def target_loss(start: float, curves: list[np.ndarray], fraction: float) -> float:
    """The level ``start - fraction * (start - common)``, with ``common`` the higher of the curves' minima:
    the loss reduction every arm reaches, of which the target asks ``fraction``. NaN when some arm never
    got below ``start`` (no common reduction to measure speed on)."""
    common = max(float(np.min(c)) for c in curves)
    if not common < start:
        return math.nan
    return start - fraction * (start - common)


def queries_to_reach(queries: np.ndarray, curve: np.ndarray, level: float) -> float:
    """Queries at which ``curve`` first reaches ``level``, interpolated linearly between evaluation points.

    ``curve[i]`` is the loss after ``queries[i]`` queries (``queries[0] = 0``: the starting point).
    NaN if the curve never reaches ``level``."""
    queries, curve = np.asarray(queries, float), np.asarray(curve, float)
    hits = np.nonzero(curve <= level)[0]
    if not len(hits) or not math.isfinite(level):
        return math.nan
    i = int(hits[0])
    if i == 0:
        return float(queries[0])
    drop = curve[i - 1] - curve[i]
    return float(queries[i - 1] + (queries[i] - queries[i - 1]) * (curve[i - 1] - level) / drop)
