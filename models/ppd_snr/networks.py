"""The registered model: learned importance-sampling proposals r(z), one diagonal Gaussian per problem."""

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

    @torch.no_grad()
    def sample(self, count: int, generator: torch.Generator | None = None) -> torch.Tensor:
        eps = torch.randn(count, len(self.mean), generator=generator, dtype=torch.float64)
        return self.reparameterise(eps)


class ProposalBank(nn.Module):
    """Every learned proposal of a run, keyed ``<dataset>__<proxy>``; ``primary`` names the claim's one
    (the hardest setting, proxy (A)). ``forward(z)`` is log r(z) under the primary proposal."""

    def __init__(self, shapes: dict[str, int], primary: str) -> None:
        super().__init__()
        self.proposals = nn.ModuleDict({k: GaussianProposal(torch.zeros(d), torch.ones(d)) for k, d in shapes.items()})
        self.primary = primary

    def get(self, key: str) -> GaussianProposal:
        return self.proposals[key]

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.proposals[self.primary](z)
