"""The networks of multi-task SAC, for an ensemble of independent learners: every parameter has a leading
member axis, so all arms, seeds and grid points train in one batched pass (``algorithm.py``)."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


class EnsembleLinear(nn.Module):
    """E independent affine maps applied as one batched matmul: x [E, B, in] -> [E, B, out]."""

    def __init__(self, n_members: int, d_in: int, d_out: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_members, d_in, d_out))
        self.bias = nn.Parameter(torch.empty(n_members, 1, d_out))
        for e in range(n_members):
            self.reset_member(e)

    @torch.no_grad()
    def reset_member(self, e: int) -> None:
        bound = 1.0 / math.sqrt(self.weight.shape[1])  # nn.Linear's default initialisation
        self.weight[e].uniform_(-bound, bound)
        self.bias[e].uniform_(-bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleMLP(nn.Module):
    def __init__(self, n_members: int, d_in: int, hidden: tuple[int, ...], d_out: int, activation=F.relu):
        super().__init__()
        sizes = (d_in, *hidden, d_out)
        self.layers = nn.ModuleList(EnsembleLinear(n_members, a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.activation = activation

    def reset_member(self, e: int) -> None:
        for layer in self.layers:
            layer.reset_member(e)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        return self.layers[-1](x)


LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # the paper's code floors log-std at -5


class Actor(nn.Module):
    """Tanh-squashed Gaussian policy over [obs, one-hot task]; ``forward`` is the deterministic action.

    With ``n_members=1`` this is the registered ARS actor: input [B, obs+tasks] -> action [B, act_dim].
    """

    def __init__(self, n_members: int, obs_dim: int, act_dim: int, hidden: tuple[int, ...]):
        super().__init__()
        self.n_members, self.obs_dim, self.act_dim, self.hidden = n_members, obs_dim, act_dim, tuple(hidden)
        self.net = EnsembleMLP(n_members, obs_dim, hidden, 2 * act_dim)

    def dist_params(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.net(obs).chunk(2, dim=-1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised action and its log-probability (tanh change of variables, stable form)."""
        mean, log_std = self.dist_params(obs)
        u = mean + log_std.exp() * torch.randn_like(mean)
        log_prob = (-0.5 * ((u - mean) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        log_prob = log_prob - (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1)
        return torch.tanh(u), log_prob

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        squeeze = obs.dim() == 2
        if squeeze:  # a single member called with [B, d]
            obs = obs.unsqueeze(0).expand(self.n_members, -1, -1)
        action = torch.tanh(self.dist_params(obs)[0])
        return action[0] if squeeze and self.n_members == 1 else action

    def member(self, e: int) -> Actor:
        """A stand-alone single-member copy of member ``e`` (what gets registered)."""
        single = Actor(1, self.obs_dim, self.act_dim, self.hidden)
        single.load_state_dict({k: v[e : e + 1].clone() for k, v in self.state_dict().items()})
        return single


class TwinCritic(nn.Module):
    def __init__(self, n_members: int, obs_dim: int, act_dim: int, hidden: tuple[int, ...]):
        super().__init__()
        self.q1 = EnsembleMLP(n_members, obs_dim + act_dim, hidden, 1)
        self.q2 = EnsembleMLP(n_members, obs_dim + act_dim, hidden, 1)

    def reset_member(self, e: int) -> None:
        self.q1.reset_member(e)
        self.q2.reset_member(e)

    def forward(self, obs, act) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([obs, act], dim=-1)
        return self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)
