"""The networks of multi-task SAC, for an ensemble of independent learners: every parameter has a leading
member axis, so all arms, seeds and grid points train in one batched pass (``algorithm.py``)."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


class EnsembleLinear(nn.Module):
    """E independent affine maps applied as one batched matmul: x [E, B, in] -> [E, B, out].

    With ``heads=H`` every member holds H maps (weight [E, H, in, out]) applied to the same input in the
    same matmul: x [E, B, in] -> [E * H, B, out], head-major within a member (the twin critics)."""

    def __init__(self, n_members: int, d_in: int, d_out: int, heads: int | None = None):
        super().__init__()
        shape = (n_members,) if heads is None else (n_members, heads)
        self.weight = nn.Parameter(torch.empty(*shape, d_in, d_out))
        self.bias = nn.Parameter(torch.empty(*shape, 1, d_out))
        if heads is None:
            for e in range(n_members):
                self.reset_member(e)

    @torch.no_grad()
    def reset_member(self, e: int, head: int | None = None) -> None:
        bound = 1.0 / math.sqrt(self.weight.shape[-2])  # nn.Linear's default initialisation
        rows = (e,) if head is None else (e, head)
        self.weight[rows].uniform_(-bound, bound)
        self.bias[rows].uniform_(-bound, bound)

    def forward(self, x: torch.Tensor, detach: bool = False) -> torch.Tensor:
        """``detach``: the weights as constants (gradients flow to ``x`` only)."""
        weight, bias = (self.weight.detach(), self.bias.detach()) if detach else (self.weight, self.bias)
        if weight.dim() == 4:  # heads: one [E * H] batch of matmuls
            weight, bias = weight.flatten(0, 1), bias.flatten(0, 1)
        return torch.baddbmm(bias, x, weight)


class EnsembleMLP(nn.Module):
    """E independent MLPs (``heads=H``: H per member sharing the input; output [E * H, B, d_out])."""

    def __init__(self, n_members: int, d_in: int, hidden: tuple[int, ...], d_out: int, activation=F.relu, heads=None):
        super().__init__()
        sizes = (d_in, *hidden, d_out)
        self.layers = nn.ModuleList(EnsembleLinear(n_members, a, b, heads) for a, b in zip(sizes[:-1], sizes[1:]))
        self.stack = list(self.layers)  # plain list: slicing a ModuleList builds a new module on every call
        self.activation, self.heads = activation, heads
        if heads is not None:  # the draw order of separate MLPs: head by head, layer by layer, member by member
            for head in range(heads):
                for layer in self.stack:
                    for e in range(n_members):
                        layer.reset_member(e, head)

    def reset_member(self, e: int) -> None:
        for head in [None] if self.heads is None else range(self.heads):
            for layer in self.stack:
                layer.reset_member(e, head)

    def forward(self, x: torch.Tensor, detach: bool = False) -> torch.Tensor:
        if self.heads is not None:  # [E, B, in] -> [E * H, B, in]: every head sees its member's input
            x = x.unsqueeze(1).expand(-1, self.heads, -1, -1).flatten(0, 1)
        for layer in self.stack[:-1]:
            x = self.activation(layer(x, detach))
        return self.stack[-1](x, detach)


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
    """Q1 and Q2 of every member as two heads of one ensemble: one batched matmul per layer for both (the
    same numbers as two separate MLPs, initialised in the same order: all of Q1, then all of Q2)."""

    def __init__(self, n_members: int, obs_dim: int, act_dim: int, hidden: tuple[int, ...]):
        super().__init__()
        self.n_members = n_members
        self.q = EnsembleMLP(n_members, obs_dim + act_dim, hidden, 1, heads=2)

    def reset_member(self, e: int) -> None:
        self.q.reset_member(e)

    def forward(self, obs, act, detach: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Q1, Q2 [E, B]; ``detach``: gradients flow to ``act`` only (the actor loss)."""
        q = self.q(torch.cat([obs, act], dim=-1), detach).view(self.n_members, 2, -1)
        return q[:, 0], q[:, 1]
