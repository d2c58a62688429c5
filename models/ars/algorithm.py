"""Algorithm 1 of ARS on multi-task SAC, for an ensemble of independent learners.

Pieces: Eq. (6) (``compute_scales``) and its identity, per-task FIFO buffers of *raw* rewards scaled only when a
batch is sampled (Eq. 7), per-member Adam, full resets, and ``run_ars``, the loop of Algorithm 1 with the
checks of the restated check (iv)(a) built in and validation-based early stopping.

Every experimental arm (and seed, grid point, control) is one *member*: its own actor, critics, targets,
temperatures, Adam state and buffers, stored along a leading member axis so all members train in one batched
pass (on a busy 2-core CPU this is ~E times cheaper than a loop). Members never share anything: losses are
summed over members and Adam is element-wise with per-member step counts and learning rates, so each
member's update equals a separate run's. Adam and the Polyak update run as fused ``torch._foreach_*`` ops
(the same element-wise arithmetic as a loop over the parameters, far fewer calls).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from models.common.runtime import show_progress
from models.common.selection import Patience

from .networks import Actor, TwinCritic

ARM_FLAGS = {  # arm -> (scales rewards, resets)
    "mtsac": (False, False),
    "scale_only": (True, False),
    "ars": (True, True),
    "reset_only": (False, True),
}

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
        raise ValueError(f"unknown scale rule {rule!r}; expected 'mean' or 'std'")
    clipped = np.clip(raw, c_min if c_min is not None else -np.inf, c_max if c_max is not None else np.inf)
    return raw, clipped


def eq6_identity_error(stats: np.ndarray, c_raw: np.ndarray, rule: str, floor: float) -> np.ndarray:
    """Relative error of Eq. (6)'s identity per member (max over tasks): c_i * max(r̄_i, floor) = max_j r̄_j
    for ``mean``, c_i * max(std_i, floor) = 1 for ``std``."""
    stats, c_raw = np.asarray(stats, np.float64), np.asarray(c_raw, np.float64)
    target = stats.max(axis=-1, keepdims=True) if rule == "mean" else np.ones_like(stats)
    return (np.abs(c_raw * np.maximum(stats, floor) - target) / np.abs(target)).max(axis=-1)


# ----------------------------------------------------------------------------- buffers


class ReplayBuffers:
    """One FIFO buffer per (member, task) holding the environment's *raw* rewards (one packed float32 row
    per transition; ``obs``, ``act``, ``rew``, ``next_obs`` and ``done`` are views of its columns).

    Scales are applied only in ``sample``: re-estimating c_i from the buffer therefore never compounds
    previous scales (the third-party pitfall the brief warns about).
    """

    def __init__(self, n_members: int, n_tasks: int, capacity: int, obs_dim: int, act_dim: int, seed: int):
        # One packed row per transition [obs, act, rew, next_obs, done], so a batch is a single gather; the
        # fields are views into it.
        fields = {"obs": obs_dim, "act": act_dim, "rew": 1, "next_obs": obs_dim, "done": 1}
        self.columns, start = {}, 0
        for name, width in fields.items():
            self.columns[name] = slice(start, start + width)
            start += width
        self.rows = np.zeros((n_members, n_tasks, capacity, start), np.float32)
        self.obs, self.act, self.next_obs = (self.rows[..., self.columns[k]] for k in ("obs", "act", "next_obs"))
        self.rew, self.done = self.rows[..., self.columns["rew"].start], self.rows[..., self.columns["done"].start]
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

    def sample(self, batch_per_task: int, scales: np.ndarray) -> dict:
        """``batch_per_task`` transitions from each task's own buffer; rewards multiplied by c[e, i] here.

        Returns tensors shaped [E, N * B, ...], ``task`` (the task index of every row) and ``index`` (the
        buffer slots drawn, [E, N, B], so a caller can check the rewards against the raw buffer).
        """
        E, N = self.rew.shape[:2]
        idx = self.rng.integers(0, self.size, size=(E, N, batch_per_task))
        picked = self.rows[np.arange(E)[:, None, None], np.arange(N)[None, :, None], idx]  # [E, N, B, row]

        def take(name):
            column = np.ascontiguousarray(picked[..., self.columns[name]])
            return torch.from_numpy(column.reshape(E, N * batch_per_task, -1))

        scaled = picked[..., self.columns["rew"].start] * np.asarray(scales, np.float32)[:, :, None]
        return {
            "obs": take("obs"),
            "act": take("act"),
            "rew": torch.from_numpy(scaled.reshape(E, N * batch_per_task).astype(np.float32)),
            "next_obs": take("next_obs"),
            "done": torch.from_numpy(np.ascontiguousarray(picked[..., self.columns["done"].start]).reshape(E, -1)),
            "task": torch.arange(N).repeat_interleave(batch_per_task),
            "index": idx,
        }


# ----------------------------------------------------------------------------- optimiser


class MemberAdam:
    """Adam whose moments, step counts *and learning rates* are kept per member, so one member can be reset
    (fresh Adam, bias correction restarting at step 1) or frozen (masked) without touching the others, and
    the members of a learning-rate grid train side by side."""

    def __init__(
        self, params: list[torch.Tensor], n_members: int, lr: float | Sequence[float], betas=(0.9, 0.999), eps=1e-8
    ):
        self.params, self.betas, self.eps = list(params), betas, eps
        self.lr = torch.as_tensor(lr, dtype=torch.float32).expand(n_members).clone()  # [E]
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
        """Update the members where ``mask`` (bool [E]) is True.

        One fused (``torch._foreach_*``) op per Adam line over all parameters: the same element-wise
        arithmetic, in the same order, as a loop over the parameters (bit-identical), with far fewer calls."""
        b1, b2 = self.betas
        live_all = bool(mask.all())
        self.t += mask.float()
        t = self.t.clamp(min=1)
        step_size = self.lr / (1 - b1**t)  # [E]: per-member learning rates and bias corrections
        root_bc2 = (1 - b2**t).sqrt()
        active = [i for i, p in enumerate(self.params) if p.grad is not None]
        params = [self.params[i] for i in active]
        m, v = [self.m[i] for i in active], [self.v[i] for i in active]
        shape = lambda p: (-1,) + (1,) * (p.dim() - 1)  # noqa: E731 - a member-axis broadcast
        live, weight = [mask.view(shape(p)) for p in params], [mask.float().view(shape(p)) for p in params]
        grads = [p.grad for p in params] if live_all else torch._foreach_mul([p.grad for p in params], weight)
        keep = None if live_all else ([x.clone() for x in m], [x.clone() for x in v])
        torch._foreach_lerp_(m, grads, 1 - b1)
        torch._foreach_mul_(v, b2)
        torch._foreach_addcmul_(v, grads, grads, value=1 - b2)
        if keep is not None:  # masked members: zero gradient and untouched moments
            for i, flag in enumerate(live):
                m[i].copy_(torch.where(flag, m[i], keep[0][i]))
                v[i].copy_(torch.where(flag, v[i], keep[1][i]))
        denom = torch._foreach_sqrt(v)
        torch._foreach_div_(denom, [root_bc2.view(shape(p)) for p in params])
        torch._foreach_add_(denom, self.eps)
        update = torch._foreach_mul(m, [step_size.view(shape(p)) for p in params])
        torch._foreach_div_(update, denom)
        if not live_all:
            torch._foreach_mul_(update, weight)
        torch._foreach_sub_(params, update)


# ----------------------------------------------------------------------------- SAC learner


@dataclass
class UpdateInfo:
    critic_loss: np.ndarray  # [E]
    actor_loss: np.ndarray
    alpha: np.ndarray  # [E, N]


class MultiTaskSAC:
    """E independent multi-task SAC learners (shared network per member, task one-hot in the input)."""

    def __init__(
        self, n_members, n_tasks, obs_dim, act_dim, hidden, lr, gamma, tau, alpha_init, shared_alpha, seed, groups=None
    ):
        """``lr``: one learning rate or one per member; members with the same entry in ``groups`` start from
        identical networks (common random numbers across arms); by default every member draws its own."""
        torch.manual_seed(seed)
        self.E, self.N, self.act_dim = n_members, n_tasks, act_dim
        self.gamma, self.tau, self.alpha_init, self.shared_alpha = gamma, tau, alpha_init, shared_alpha
        self.target_entropy = -float(act_dim)
        self.actor = Actor(n_members, obs_dim, act_dim, hidden)
        self.critic = TwinCritic(n_members, obs_dim, act_dim, hidden)
        self.target = TwinCritic(n_members, obs_dim, act_dim, hidden)
        if groups is not None:
            for e, group in enumerate(groups):
                torch.manual_seed(seed + 1 + int(group))
                self.actor.net.reset_member(e)
                self.critic.reset_member(e)
            torch.manual_seed(seed + 1 + int(max(groups)) + 1)  # the learners' own noise from here on
        self.target.load_state_dict(self.critic.state_dict())
        self.log_alpha = torch.full(
            (n_members, 1 if shared_alpha else n_tasks), math.log(alpha_init), requires_grad=True
        )
        self.critic_params, self.target_params = list(self.critic.parameters()), list(self.target.parameters())
        self.actor_opt = MemberAdam(list(self.actor.parameters()), n_members, lr)
        self.critic_opt = MemberAdam(self.critic_params, n_members, lr)
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

    def update(self, batch: dict, mask: torch.Tensor | None = None) -> UpdateInfo:
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
        # The actor loss differentiates through Q's input only (no critic weight-gradient matmuls).
        q1_pi, q2_pi = self.critic(obs, new_act, detach=True)
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
            tau = self.tau * mask.float()
            w = [tau.view((-1,) + (1,) * (p.dim() - 1)) for p in self.critic_params]
            torch._foreach_mul_(self.target_params, [1 - x for x in w])
            torch._foreach_add_(self.target_params, torch._foreach_mul(w, self.critic_params))
        return UpdateInfo(
            critic_loss.detach().numpy(), actor_loss.detach().numpy(), self.alpha().detach().numpy().copy()
        )

    def snapshot(self, e: int) -> dict[str, torch.Tensor]:
        """Member ``e``'s learner state (for reset checks)."""
        out = {f"actor.{k}": v[e].clone() for k, v in self.actor.state_dict().items()}
        out.update({f"critic.{k}": v[e].clone() for k, v in self.critic.state_dict().items()})
        out.update({f"target.{k}": v[e].clone() for k, v in self.target.state_dict().items()})
        return out


# ----------------------------------------------------------------------------- Algorithm 1


@dataclass(frozen=True)
class Schedule:
    """Rounds of one environment step per task (+ one update after T_init); resets at the multiples of
    ``reset_every`` after T_init and before the end (T_reset = T_total / (n_reset + 1) in the paper's code)."""

    t_init: int
    total: int
    reset_every: int

    def reset_rounds(self) -> list[int]:
        return [t for t in range(self.reset_every, self.total, self.reset_every) if t > self.t_init]


@dataclass(frozen=True)
class Validation:
    """Validation during training: ``evaluate(sac) -> success [E, N]`` every ``every`` rounds. Each member's
    best actor is tracked over its *final period* (after its last reset: Algorithm 1's output is the learner
    the last reset left; a pre-reset snapshot would be another algorithm) and restored at the end; with
    ``patience``, a member whose validation mean success has not improved for that many evaluations there
    stops updating (and the run ends once every member has stopped)."""

    evaluate: Callable
    every: int
    patience: int | None = None


@dataclass
class RunLog:
    """What a run records: per-episode rows, scale computations, resets, the validation curve, the best
    rounds, and the checks of (iv)(a) as worst relative errors over the whole run."""

    episodes: list[dict] = field(default_factory=list)
    scales: list[dict] = field(default_factory=list)
    resets: list[dict] = field(default_factory=list)
    curve: list[dict] = field(default_factory=list)
    losses_finite: bool = True
    scale_recompute_identical: bool = True  # recomputing Eq. (6) from the same buffers gives the same c_i
    eq6_max_error: float = 0.0  # c_i * max(r̄_i, floor) vs max_j r̄_j, every computation, every scaling member
    buffer_raw_max_error: float = 0.0  # buffer reward sums vs the environment's raw rewards, every computation
    batch_scale_max_error: float = 0.0  # every sampled batch's rewards vs raw buffer x the c_i last recorded
    rounds_run: int = 0
    best_round: list[int] = field(default_factory=list)
    best_score: list[float] = field(default_factory=list)
    stopped_round: list[int] = field(default_factory=list)  # -1: ran to the end
    patience: list[Patience] = field(default_factory=list)  # each member's early stopping (with validation)

    def checks(self) -> dict:
        keys = ("losses_finite", "scale_recompute_identical", "eq6_max_error")
        return {k: getattr(self, k) for k in (*keys, "buffer_raw_max_error", "batch_scale_max_error")}


def _relative_error(got: np.ndarray, expected: np.ndarray, scale: np.ndarray | None = None) -> float:
    scale = np.abs(expected) if scale is None else scale
    return float((np.abs(got - expected) / np.maximum(scale, 1e-300)).max(initial=0.0))


def run_ars(
    env,
    arms: Sequence[str],
    sac_cfg,
    lr: float | Sequence[float],
    scaling,
    schedule: Schedule,
    obs_dim: int,
    act_dim: int,
    seed: int,
    validation: Validation | None = None,
    groups: np.ndarray | None = None,
    capacity: int | None = None,
    desc: str = "ars",
):
    """Algorithm 1 for every member at once (member e runs arm ``arms[e]`` at learning rate ``lr[e]``).

    Rounds 1..T_init: random actions, the same for the members of one of ``groups`` (which also start from
    identical networks; give the environment the same groups for common start states); at T_init
    the scales are computed (Eq. 6, raw buffers); afterwards one policy step per task and one SAC update per
    round, with the resets of ``schedule`` for the resetting arms. ``capacity``: transitions per (member, task)
    buffer (FIFO; default: the whole run, so Eq. 6 sees all history). Returns the learner (each member's best
    final-period actor where ``validation`` is given), the buffers and the ``RunLog``.
    """
    E, N = len(arms), env.N
    groups = np.arange(E) if groups is None else np.asarray(groups, int)
    scales_on = np.array([ARM_FLAGS[a][0] for a in arms])
    resets_on = np.array([ARM_FLAGS[a][1] for a in arms])
    sac = MultiTaskSAC(
        E,
        N,
        obs_dim,
        act_dim,
        sac_cfg.hidden,
        lr,
        sac_cfg.gamma,
        sac_cfg.tau,
        sac_cfg.alpha_init,
        sac_cfg.shared_alpha,
        seed,
        groups,
    )
    buffers = ReplayBuffers(E, N, capacity or schedule.total, obs_dim, act_dim, seed + 1)
    rng = np.random.default_rng(seed + 2)
    c = np.ones((E, N))  # the scales in force
    c_recorded = np.ones((E, N))  # the same, read back from the logged rows (what the batches are checked against)
    n_resets = np.zeros(E, int)
    env_reward_sum, env_reward_abs = np.zeros((E, N)), np.zeros((E, N))
    log = RunLog(best_round=[-1] * E, best_score=[math.nan] * E, stopped_round=[-1] * E)
    resets = schedule.reset_rounds()
    final_start = np.where(resets_on & bool(resets), resets[-1] if resets else 0, schedule.t_init)
    live = np.ones(E, bool)
    patience = [Patience(validation.patience, higher_is_better=True) for _ in range(E)] if validation else []
    log.patience = patience
    best_actor = {k: v.clone() for k, v in sac.actor.state_dict().items()}

    def record_scales(step: int, event: str, members: np.ndarray) -> None:
        stats = buffers.reward_stats(scaling.rule)
        if step <= buffers.capacity:  # nothing evicted yet: the buffer must hold exactly the env's raw rewards
            stored = buffers.rew[:, :, : buffers.size].astype(np.float64).sum(-1)
            log.buffer_raw_max_error = max(
                log.buffer_raw_max_error, _relative_error(stored, env_reward_sum, env_reward_abs)
            )
        raw, clipped = compute_scales(stats, scaling.rule, scaling.floor, scaling.c_min, scaling.c_max)
        again = compute_scales(
            buffers.reward_stats(scaling.rule), scaling.rule, scaling.floor, scaling.c_min, scaling.c_max
        )[1]
        log.scale_recompute_identical &= bool(np.array_equal(clipped, again))  # raw storage: no compounding
        scaling_members = members & scales_on
        if scaling_members.any():
            error = eq6_identity_error(stats, raw, scaling.rule, scaling.floor)[scaling_members]
            log.eq6_max_error = max(log.eq6_max_error, float(error.max()))
        for e in np.flatnonzero(members):
            c[e] = clipped[e] if scales_on[e] else 1.0
            for i in range(N):
                row = dict(
                    member=int(e),
                    env_step=step,
                    task_idx=i,
                    event=event,
                    rule=scaling.rule,
                    stat=float(stats[e, i]),
                    c_raw=float(raw[e, i]),
                    c_i=float(c[e, i]),
                )
                log.scales.append(row)
                c_recorded[e, i] = row["c_i"]

    def update(mask: np.ndarray) -> None:
        batch = buffers.sample(sac_cfg.batch_per_task, c)
        idx = batch["index"]
        raw = buffers.rew[np.arange(E)[:, None, None], np.arange(N)[None, :, None], idx].astype(np.float64)
        got = batch["rew"].numpy().reshape(idx.shape)
        log.batch_scale_max_error = max(log.batch_scale_max_error, _relative_error(got, raw * c_recorded[:, :, None]))
        info = sac.update(batch, torch.from_numpy(mask))
        log.losses_finite &= bool(np.isfinite(info.critic_loss).all() and np.isfinite(info.actor_loss).all())

    ep_return, ep_scaled = np.zeros((E, N)), np.zeros((E, N))
    ep_success_any = np.zeros((E, N), bool)
    ep_index = 0
    obs = env.reset()
    bar = range(1, schedule.total + 1)
    if show_progress():
        from tqdm import tqdm

        bar = tqdm(bar, desc=desc, leave=False)
    for t in bar:
        log.rounds_run = t
        if t <= schedule.t_init:  # random policy
            action = rng.uniform(-1, 1, size=(groups.max() + 1, N, act_dim))[groups]
        else:
            action = sac.act(obs)
        next_obs, reward, terminated, success, over = env.step(action)
        buffers.add(obs, action, reward, next_obs, terminated)
        env_reward_sum += reward
        env_reward_abs += np.abs(reward)
        ep_return += reward
        ep_scaled += reward * c
        ep_success_any |= success
        obs = next_obs
        if over:
            for e in range(E):
                for i in range(N):
                    log.episodes.append(
                        dict(
                            member=e,
                            task_idx=i,
                            episode=ep_index,
                            env_step_end=t,
                            phase="random" if t <= schedule.t_init else "policy",
                            n_resets=int(n_resets[e]),
                            c_i=float(c[e, i]),
                            return_raw=float(ep_return[e, i]),
                            return_scaled=float(ep_scaled[e, i]),
                            success_any=int(ep_success_any[e, i]),
                            success_final=int(success[e, i]),
                            length=int(env.t),
                        )
                    )
            ep_index += 1
            ep_return[:], ep_scaled[:], ep_success_any[:] = 0, 0, False
            obs = env.reset()
        if t == schedule.t_init:  # Algorithm 1, line 4: initial scales from the random-phase history
            record_scales(t, "init", np.ones(E, bool))
        if t > schedule.t_init:
            update(live)
            if t in resets and resets_on.any():
                _reset(sac, buffers, log, t, resets_on, n_resets, record_scales, sac_cfg.catchup_updates, update)
        if validation is not None and (t % validation.every == 0 or t == schedule.total) and t >= schedule.t_init:
            success_rate = validation.evaluate(sac)  # [E, N]
            log.curve.append(
                {"step": t, "success": success_rate, "alpha": sac.alpha().detach().numpy().copy(), "c": c.copy()}
            )
            _track_best(sac, log, success_rate.mean(-1), t, final_start, live, patience, validation, best_actor)
            if validation.patience is not None and not live.any():
                break
    if validation is not None:
        with torch.no_grad():
            for e in np.flatnonzero(np.array(log.best_round) >= 0):
                for k, v in sac.actor.state_dict().items():
                    v[e].copy_(best_actor[k][e])
    return sac, buffers, log


def _track_best(sac, log, score, t, final_start, live, patience, validation, best_actor) -> None:
    """Best final-period actor per member (a copy of its rows); stop members whose patience ran out."""
    state = sac.actor.state_dict()
    for e in range(len(live)):
        if not live[e] or t < final_start[e]:
            continue
        if patience[e].update(float(score[e])):
            log.best_round[e], log.best_score[e] = t, float(score[e])
            for k, v in state.items():
                best_actor[k][e].copy_(v[e])
        elif validation.patience is not None and patience[e].stop:
            live[e] = False
            log.stopped_round[e] = t


def _reset(sac, buffers, log, t, resets_on, n_resets, record_scales, catchup_updates, update) -> None:
    """Recompute the scales (ARS arms) and re-initialise the resetting members, then catch-up updates."""
    record_scales(t, "reset", resets_on)
    size_before = buffers.size
    for e in np.flatnonzero(resets_on):
        before = sac.snapshot(e)
        sac.reset_member(e)
        after = sac.snapshot(e)
        changed = np.mean([not torch.equal(before[k], after[k]) for k in before])
        n_resets[e] += 1
        alpha_reset = bool(torch.allclose(sac.log_alpha[e].detach(), torch.tensor(math.log(sac.alpha_init))))
        adam_reset = all(
            float(opt.t[e]) == 0 and all(float(m[e].abs().sum()) == 0 for m in opt.m)
            for opt in (sac.actor_opt, sac.critic_opt, sac.alpha_opt)
        )
        log.resets.append(
            dict(
                member=int(e),
                env_step=t,
                reset_idx=int(n_resets[e]),
                reinit="actor;critics;target_critics;alpha;adam_states",
                params_changed_frac=float(changed),
                alpha_reset=int(alpha_reset),
                adam_reset=int(adam_reset),
                buffer_size_before=int(size_before),
                buffer_size_after=int(buffers.size),
                catchup_updates=catchup_updates,
            )
        )
    for _ in range(catchup_updates):  # re-fit the fresh learners on the kept buffers, with the new scales
        update(resets_on)
