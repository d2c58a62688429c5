"""The registered model: learned importance-sampling proposals r(z), one Gaussian per problem."""

from __future__ import annotations

import math

import torch
from torch import nn

LOG_2PI = math.log(2 * math.pi)


class GaussianProposal(nn.Module):
    """r(z) = N(mean, diag(exp(log_std))^2), reparameterised as z = mean + std * eps."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        super().__init__()
        self.mean = nn.Parameter(torch.as_tensor(mean, dtype=torch.float64).clone())
        self.log_std = nn.Parameter(torch.log(torch.as_tensor(std, dtype=torch.float64)).clone())

    @property
    def std(self) -> torch.Tensor:
        return self.log_std.exp()

    def reparameterise(self, eps: torch.Tensor) -> torch.Tensor:
        return self.mean + self.std * eps

    def log_prob(self, z: torch.Tensor) -> torch.Tensor:
        return (-0.5 * ((z - self.mean) / self.std) ** 2 - self.log_std - 0.5 * LOG_2PI).sum(-1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """log r(z) for a batch of latents (..., d)."""
        return self.log_prob(z)

    def numpy_params(self) -> dict:
        """What the exact diagnostics take: ``{"mean": ..., "std": ...}``."""
        return {"mean": self.mean.detach().cpu().numpy(), "std": self.std.detach().cpu().numpy()}

    @torch.no_grad()
    def sample(self, count: int, generator: torch.Generator | None = None) -> torch.Tensor:
        eps = torch.randn(count, len(self.mean), generator=generator, dtype=torch.float64)
        return self.reparameterise(eps)


class FullRankGaussianProposal(nn.Module):
    """r(z) = N(base_mean + B shift, (B W)(B W)^T) for a fixed base factor B (q's Cholesky factor) and learned
    ``shift`` and lower-triangular W (positive, exp-parameterised diagonal), initialised at r = q.

    Learning in q's whitened frame makes Adam's steps scale-free: a posterior whose standard deviations span
    orders of magnitude (standardised regressions with near-collinear columns) is as easy as an isotropic one."""

    def __init__(self, base_mean: torch.Tensor, base_tril: torch.Tensor) -> None:
        super().__init__()
        d = len(base_mean)
        self.register_buffer("base_mean", torch.as_tensor(base_mean, dtype=torch.float64).clone())
        self.register_buffer("base_tril", torch.as_tensor(base_tril, dtype=torch.float64).clone())
        self.shift = nn.Parameter(torch.zeros(d, dtype=torch.float64))
        self.log_diag = nn.Parameter(torch.zeros(d, dtype=torch.float64))
        self.off_diagonal = nn.Parameter(torch.zeros(d, d, dtype=torch.float64))

    @property
    def mean(self) -> torch.Tensor:
        return self.base_mean + self.base_tril @ self.shift

    @property
    def tril(self) -> torch.Tensor:
        whitened = torch.tril(self.off_diagonal, -1) + torch.diag(self.log_diag.exp())
        return self.base_tril @ whitened

    def reparameterise(self, eps: torch.Tensor) -> torch.Tensor:
        return self.mean + eps @ self.tril.T

    def log_prob(self, z: torch.Tensor) -> torch.Tensor:
        tril = self.tril
        white = torch.linalg.solve_triangular(tril, (z - self.mean).T, upper=False).T
        log_det = torch.log(torch.abs(torch.diagonal(tril))).sum()
        return -0.5 * (white**2).sum(-1) - log_det - 0.5 * len(self.shift) * LOG_2PI

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.log_prob(z)

    def numpy_params(self) -> dict:
        return {"mean": self.mean.detach().cpu().numpy(), "tril": self.tril.detach().cpu().numpy()}

    @torch.no_grad()
    def sample(self, count: int, generator: torch.Generator | None = None) -> torch.Tensor:
        eps = torch.randn(count, len(self.shift), generator=generator, dtype=torch.float64)
        return self.reparameterise(eps)


KINDS = {"diag": GaussianProposal, "full": FullRankGaussianProposal}


class ProposalBank(nn.Module):
    """Every learned proposal of a run, keyed ``<dataset>__<proxy>``; ``primary`` names the claim's one
    (the hardest setting, proxy (A)). ``forward(z)`` is log r(z) under the primary proposal."""

    def __init__(self, shapes: dict[str, int], primary: str, kinds: dict[str, str] | None = None) -> None:
        super().__init__()
        kinds = kinds or {}
        self.proposals = nn.ModuleDict(
            {
                k: KINDS[kinds.get(k, "diag")](
                    torch.zeros(d), torch.ones(d) if kinds.get(k) != "full" else torch.eye(d)
                )
                for k, d in shapes.items()
            }
        )
        self.primary = primary

    def get(self, key: str) -> GaussianProposal | FullRankGaussianProposal:
        return self.proposals[key]

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.proposals[self.primary](z)
