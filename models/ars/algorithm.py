"""Multi-task SAC for an ensemble of independent learners, plus the ARS pieces (Eq. 6, raw per-task buffers,
scales applied at sampling time, full resets).

Every experimental arm (and seed, and the control) is one *member*: its own actor, critics, targets,
temperatures, Adam state and buffers, stored along a leading member axis so all arms train in one batched
pass (on a busy 2-core CPU this is ~E times cheaper than a loop over arms). Members never share anything:
losses are summed over members and Adam is element-wise, so each member's update equals a separate run's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

# ----------------------------------------------------------------------------- Eq. (6)


def compute_scales(
    stats: np.ndarray, rule: str = "mean", floor: float = 0.01, c_min: float | None = None, c_max: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Reward-scale factors from per-task raw-reward statistics (last axis = tasks).

    ``mean`` (Eq. 6): c_i = max_j stat_j / max(stat_i, floor); the best-rewarded task keeps c = 1.
    ``std`` (the paper's ablation): c_i = 1 / max(stat_i, floor) with stat = reward std.
    Returns (c before the optional clip, c after it).
    """
    stats = np.asarray(stats, dtype=np.float64)
    if rule == "mean":
        raw = stats.max(axis=-1, keepdims=True) / np.maximum(stats, floor)
    elif rule == "std":
        raw = 1.0 / np.maximum(stats, floor)
    else:
        raise ValueError(f"unknown scale rule {rule!r}")
    clipped = np.clip(raw, c_min if c_min is not None else -np.inf, c_max if c_max is not None else np.inf)
    return raw, clipped


# ----------------------------------------------------------------------------- buffers


class ReplayBuffers:
    """One FIFO buffer per (member, task) holding the environment's *raw* rewards.

    Scales are applied only in ``sample``: re-estimating c_i from the buffer therefore never compounds
    previous scales (the third-party pitfall the brief warns about).
    """

    def __init__(self, n_members: int, n_tasks: int, capacity: int, obs_dim: int, act_dim: int, seed: int):
        shape = (n_members, n_tasks, capacity)
        self.obs = np.zeros(shape + (obs_dim,), np.float32)
        self.act = np.zeros(shape + (act_dim,), np.float32)
        self.rew = np.zeros(shape, np.float32)
        self.next_obs = np.zeros(shape + (obs_dim,), np.float32)
        self.done = np.zeros(shape, np.float32)
        self.capacity, self.ptr, self.size = capacity, 0, 0
        self.rng = np.random.default_rng(seed)

    def add(self, obs, act, rew, next_obs, done) -> None:
        """One transition per (member, task): arrays shaped [E, N, ...]."""
        i = self.ptr
        self.obs[:, :, i], self.act[:, :, i], self.rew[:, :, i] = obs, act, rew
        self.next_obs[:, :, i], self.done[:, :, i] = next_obs, done
        self.ptr = (self.ptr + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def reward_stats(self, rule: str) -> np.ndarray:
        """Per-(member, task) statistic of all raw rewards currently stored: [E, N]."""
        rewards = self.rew[:, :, : self.size].astype(np.float64)
        return rewards.mean(axis=-1) if rule == "mean" else rewards.std(axis=-1)

    def sample(self, batch_per_task: int, scales: np.ndarray) -> dict[str, torch.Tensor]:
        """``batch_per_task`` transitions from each task's own buffer; rewards multiplied by c[e, i] here.

        Returns tensors shaped [E, N * B, ...] plus ``task`` (the task index of every row).
        """
        E, N = self.rew.shape[:2]
        idx = self.rng.integers(0, self.size, size=(E, N, batch_per_task))
        e_ix, n_ix = np.arange(E)[:, None, None], np.arange(N)[None, :, None]

        def take(array):
            picked = array[e_ix, n_ix, idx]
            return torch.from_numpy(picked.reshape(E, N * batch_per_task, *array.shape[3:]))

        scaled = self.rew[e_ix, n_ix, idx] * np.asarray(scales, np.float32)[:, :, None]
        return {
            "obs": take(self.obs),
            "act": take(self.act),
            "rew": torch.from_numpy(scaled.reshape(E, N * batch_per_task).astype(np.float32)),
            "next_obs": take(self.next_obs),
            "done": take(self.done),
            "task": torch.arange(N).repeat_interleave(batch_per_task),
        }


# ----------------------------------------------------------------------------- networks


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


# ----------------------------------------------------------------------------- optimiser


class MemberAdam:
    """Adam whose moments *and step counts* are kept per member, so one member can be reset (fresh Adam,
    bias correction restarting at step 1) or frozen (masked) without touching the others."""

    def __init__(self, params: list[torch.Tensor], n_members: int, lr: float, betas=(0.9, 0.999), eps=1e-8):
        self.params, self.lr, self.betas, self.eps = list(params), lr, betas, eps
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]
        self.t = torch.zeros(n_members)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def reset_member(self, e: int) -> None:
        for m, v in zip(self.m, self.v):
            m[e].zero_()
            v[e].zero_()
        self.t[e] = 0

    @torch.no_grad()
    def step(self, mask: torch.Tensor) -> None:
        """Update the members where ``mask`` (bool [E]) is True."""
        b1, b2 = self.betas
        live_all = bool(mask.all())
        self.t += mask.float()
        t = self.t.clamp(min=1)
        step_size = self.lr / (1 - b1**t)  # [E]: per-member bias corrections
        root_bc2 = (1 - b2**t).sqrt()
        for p, m, v in zip(self.params, self.m, self.v):
            if p.grad is None:
                continue
            shape = (-1,) + (1,) * (p.dim() - 1)
            g = p.grad if live_all else p.grad * mask.view(shape)  # masked members: zero gradient ...
            keep = None if live_all else (m.clone(), v.clone())
            m.lerp_(g, 1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            if keep is not None:  # ... and untouched moments
                live = mask.view(shape)
                m.copy_(torch.where(live, m, keep[0]))
                v.copy_(torch.where(live, v, keep[1]))
            update = m * step_size.view(shape) / (v.sqrt() / root_bc2.view(shape) + self.eps)
            p.sub_(update if live_all else update * mask.view(shape))


# ----------------------------------------------------------------------------- SAC learner


@dataclass
class UpdateInfo:
    critic_loss: np.ndarray  # [E]
    actor_loss: np.ndarray
    alpha: np.ndarray  # [E, N]


class MultiTaskSAC:
    """E independent multi-task SAC learners (shared network per member, task one-hot in the input)."""

    def __init__(self, n_members, n_tasks, obs_dim, act_dim, hidden, lr, gamma, tau, alpha_init, shared_alpha, seed):
        torch.manual_seed(seed)
        self.E, self.N, self.act_dim = n_members, n_tasks, act_dim
        self.gamma, self.tau, self.alpha_init, self.shared_alpha = gamma, tau, alpha_init, shared_alpha
        self.target_entropy = -float(act_dim)
        self.actor = Actor(n_members, obs_dim, act_dim, hidden)
        self.critic = TwinCritic(n_members, obs_dim, act_dim, hidden)
        self.target = TwinCritic(n_members, obs_dim, act_dim, hidden)
        self.target.load_state_dict(self.critic.state_dict())
        self.log_alpha = torch.full(
            (n_members, 1 if shared_alpha else n_tasks), math.log(alpha_init), requires_grad=True
        )
        self.actor_opt = MemberAdam(list(self.actor.parameters()), n_members, lr)
        self.critic_opt = MemberAdam(list(self.critic.parameters()), n_members, lr)
        self.alpha_opt = MemberAdam([self.log_alpha], n_members, lr)

    def alpha(self) -> torch.Tensor:
        """Temperatures [E, N]."""
        return self.log_alpha.exp().expand(self.E, self.N)

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        """obs [E, N, d] -> actions [E, N, act_dim]."""
        x = torch.from_numpy(np.asarray(obs, np.float32))
        action = self.actor(x) if deterministic else self.actor.sample(x)[0]
        return action.numpy()

    @torch.no_grad()
    def reset_member(self, e: int) -> None:
        """Re-initialise actor, critics, target critics, temperature and all Adam states of member ``e``."""
        self.actor.net.reset_member(e)
        self.critic.reset_member(e)
        for p_t, p in zip(self.target.parameters(), self.critic.parameters()):
            p_t[e].copy_(p[e])
        self.log_alpha[e].fill_(math.log(self.alpha_init))
        for opt in (self.actor_opt, self.critic_opt, self.alpha_opt):
            opt.reset_member(e)

    def update(self, batch: dict[str, torch.Tensor], mask: torch.Tensor | None = None) -> UpdateInfo:
        """One SAC step for every member where ``mask`` is True (others untouched)."""
        mask = torch.ones(self.E, dtype=torch.bool) if mask is None else mask
        obs, act, rew, next_obs, done, task = (batch[k] for k in ("obs", "act", "rew", "next_obs", "done", "task"))
        alpha_rows = self.alpha()[:, task]  # [E, B]: each row's own task temperature

        with torch.no_grad():  # Eq. (7): the TD target uses c_i * r (already scaled by the sampler)
            next_act, next_logp = self.actor.sample(next_obs)
            q1_t, q2_t = self.target(next_obs, next_act)
            target = rew + self.gamma * (1 - done) * (torch.min(q1_t, q2_t) - alpha_rows.detach() * next_logp)
        q1, q2 = self.critic(obs, act)
        critic_loss = ((q1 - target) ** 2).mean(-1) + ((q2 - target) ** 2).mean(-1)  # [E]
        self.critic_opt.zero_grad()
        critic_loss.sum().backward()
        self.critic_opt.step(mask)

        new_act, logp = self.actor.sample(obs)
        self.critic.requires_grad_(False)  # the actor loss differentiates through Q's input only (saves the
        q1_pi, q2_pi = self.critic(obs, new_act)  # critic weight-gradient matmuls; results are unchanged)
        self.critic.requires_grad_(True)
        actor_loss = (alpha_rows.detach() * logp - torch.min(q1_pi, q2_pi)).mean(-1)
        self.actor_opt.zero_grad()
        actor_loss.sum().backward()
        self.actor_opt.step(mask)

        log_alpha_rows = self.log_alpha[:, task] if not self.shared_alpha else self.log_alpha[:, :1].expand_as(logp)
        alpha_loss = -(log_alpha_rows * (logp.detach() + self.target_entropy)).mean(-1)
        self.alpha_opt.zero_grad()
        alpha_loss.sum().backward()
        self.alpha_opt.step(mask)

        with torch.no_grad():  # Polyak averaging, only for the members that were updated
            live = mask.float()
            for p_t, p in zip(self.target.parameters(), self.critic.parameters()):
                w = (self.tau * live).view((-1,) + (1,) * (p.dim() - 1))
                p_t.mul_(1 - w).add_(w * p)
        return UpdateInfo(
            critic_loss.detach().numpy(), actor_loss.detach().numpy(), self.alpha().detach().numpy().copy()
        )

    def snapshot(self, e: int) -> dict[str, torch.Tensor]:
        """Member ``e``'s learner state (for reset checks)."""
        out = {f"actor.{k}": v[e].clone() for k, v in self.actor.state_dict().items()}
        out.update({f"critic.{k}": v[e].clone() for k, v in self.critic.state_dict().items()})
        out.update({f"target.{k}": v[e].clone() for k, v in self.target.state_dict().items()})
        return out
