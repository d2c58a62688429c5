"""UCBVI (availability-agnostic baseline) and SleepingUCBVI, vectorised over a batch of runs.

Each run is one (environment, seed) pair; runs with fewer states are zero-padded to the largest
state count, which is harmless because padded states are never reached and have zero counts.
Planning (backward induction on the optimistic Q-table) is vectorised over runs, states,
actions and the 2^A availability sets; acting is vectorised over runs.

Equations follow docs/methods/sleeping_rl.md (from the official ``agents.py`` / ``sleepingagents.py``):

    Q_h(s,a) <- min(Q_h(s,a), R(s,a) + P^(.|s,a) V_{h+1} + beta * b(s,a))     for N(s,a) > 0
    b(s,a)    = c1 H L / N + sqrt(c2 L Var / N) + sqrt(c3 sum_s' P^(s'|s,a) min(H^2, c / max(1, N_{h+1}(s'))) / N)
    UCBVI:         V_h(s) = max_a Q_h(s,a)
    SleepingUCBVI: V_h(s) = min(H, sum_{B != 0} C^(B|s) max_{a in B} Q_h(s,a) + beta * b_V(s))
    b_V(s)    = sqrt(4 L Var_C^ / N(s)) + 7 H L / N(s) + sqrt(4 sum_B C^(B|s) min(H^2, c_V / N(s, argmax_B Q)) / N(s))
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .data import SleepingMDP, subset_masks


@dataclass
class RunBatch:
    """Several environments stacked (and zero-padded) along a leading run axis."""

    P: np.ndarray  # (R, S, A, S)
    R: np.ndarray  # (R, S, A)
    C: np.ndarray  # (R, S, 2^A)
    start: np.ndarray  # (R,)
    n_states: np.ndarray  # (R,) true state count of each run
    horizon: int

    @classmethod
    def stack(cls, mdps: list[SleepingMDP]) -> RunBatch:
        horizons = {m.horizon for m in mdps}
        actions = {m.n_actions for m in mdps}
        if len(horizons) != 1 or len(actions) != 1:
            raise ValueError("all runs of a batch need the same horizon and action count")
        n_runs, n_actions = len(mdps), actions.pop()
        size = max(m.n_states for m in mdps)
        P = np.zeros((n_runs, size, n_actions, size))
        R = np.zeros((n_runs, size, n_actions))
        C = np.zeros((n_runs, size, 2**n_actions))
        C[:, :, 1] = 1.0  # padded states: only "action 0" available (never reached anyway)
        for i, m in enumerate(mdps):
            n = m.n_states
            P[i, :n, :, :n], R[i, :n], C[i, :n] = m.P, m.R, m.C
            P[i, n:, :, n:] = np.eye(size - n)[:, None, :]
        starts = np.array([m.start for m in mdps])
        return cls(P, R, C, starts, np.array([m.n_states for m in mdps]), horizons.pop())

    @property
    def n_runs(self) -> int:
        return self.P.shape[0]

    @property
    def size(self) -> tuple[int, int]:
        return self.P.shape[1], self.P.shape[2]


def sample_index(probs: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF sampling of one index per row of ``probs`` from uniforms ``u`` in [0, 1).

    The CDF is renormalised so its last entry is exactly 1: a zero-probability index is never returned.
    """
    cdf = np.cumsum(probs, axis=-1)
    cdf /= cdf[..., -1:]
    return (cdf <= u[..., None]).sum(axis=-1)


def env_step(batch: RunBatch, state: np.ndarray, action: np.ndarray, mask: np.ndarray, u: np.ndarray):
    """One stage of every run: an available action moves by P and earns R; an unavailable one is
    a no-op with reward 0 (as in ``env.py``). Returns (next_state, reward)."""
    runs = np.arange(batch.n_runs)
    available = (mask >> action) & 1 == 1
    moved = sample_index(batch.P[runs, state, action], u)
    next_state = np.where(available, moved, state)
    reward = np.where(available, batch.R[runs, state, action], 0.0)
    return next_state, reward


# ----------------------------------------------------------------------------- agents


class OptimisticAgent:
    """Counts, empirical model and the optimistic Q backup shared by UCBVI and SleepingUCBVI."""

    uses_availability = False
    # constants of the three Q-bonus terms: c1 H L / N, sqrt(c2 L Var / N), sqrt(c3 .. / N)
    q_constants = (14.0 / 3.0, 8.0, 8.0)

    def __init__(
        self, batch: RunBatch, episodes: int, bonus_scale: float | np.ndarray, variance_quirk: bool = False
    ) -> None:
        self.batch = batch
        self.H = batch.horizon
        n_runs, (S, A) = batch.n_runs, batch.size
        self.S_true = batch.n_states.astype(float)  # (R,)
        self.A = A
        self.K = episodes
        # beta per run (one value for all, or one per run: the beta sweep batches every beta in one loop)
        self.beta = np.broadcast_to(np.asarray(bonus_scale, dtype=float), (n_runs,)).copy()
        self.variance_quirk = variance_quirk
        self.R_known = batch.R  # rewards are given to the agents
        self.Q = np.full((n_runs, self.H, S, A), float(self.H))
        self.N_sas = np.zeros((n_runs, S, A, S))
        self.N_sa = np.zeros((n_runs, S, A))
        self.N_stage = np.zeros((n_runs, self.H + 1, S))  # visits of s at stage h (sum_a Nxah)
        self.L = self.log_term()
        self.c_q = self.q_tail_constant()

    # constants (per run: S differs between runs)
    def log_term(self) -> np.ndarray:
        S, A, K, H = self.S_true, self.A, self.K, self.H
        return np.log(5.0 * S * A * K * H)

    def q_tail_constant(self) -> np.ndarray:
        return 1e4 * self.H**3 * self.S_true**2 * self.A * self.L**2

    # planning
    def p_hat(self) -> np.ndarray:
        return self.N_sas / np.maximum(self.N_sa, 1.0)[..., None]

    def q_backup(self, h: int, p_hat: np.ndarray, v_next: np.ndarray) -> None:
        """Q_h <- min(Q_h, R + P^ V_{h+1} + beta b) on visited (s, a); v_next is (R, S)."""
        c1, c2, c3 = self.q_constants
        H, L = self.H, self.L[:, None, None]
        n = np.maximum(self.N_sa, 1.0)
        weighted = p_hat * v_next[:, None, None, :]  # (R, S, A, S')
        mean = weighted.sum(axis=-1)
        if self.variance_quirk:
            # np.std(P^[s,a,:] * V) over the S real next states, squared (official code)
            S = self.S_true[:, None, None]
            var = (weighted**2).sum(axis=-1) / S - (mean / S) ** 2
        else:
            var = (p_hat * v_next[:, None, None, :] ** 2).sum(axis=-1) - mean**2
        var = np.maximum(var, 0.0)
        tail = np.minimum(H**2, self.c_q[:, None] / np.maximum(1.0, self.N_stage[:, h + 1]))  # (R, S')
        tail = (p_hat * tail[:, None, None, :]).sum(axis=-1)
        bonus = c1 * H * L / n + np.sqrt(c2 * L * var / n) + np.sqrt(c3 * tail / n)
        candidate = self.R_known + mean + self.beta[:, None, None] * bonus
        self.Q[:, h] = np.where(self.N_sa > 0, np.minimum(self.Q[:, h], candidate), self.Q[:, h])

    def state_value(self, h: int) -> np.ndarray:
        return self.Q[:, h].max(axis=-1)

    def plan(self) -> None:
        """Backward induction at the start of an episode (V_{H} = 0)."""
        p_hat = self.p_hat()
        v_next = np.zeros(self.Q.shape[:1] + self.Q.shape[2:3])
        for h in reversed(range(self.H)):
            self.q_backup(h, p_hat, v_next)
            v_next = self.state_value(h)

    # acting
    def act(self, h: int, state: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Greedy on Q over all actions (first index on ties, like np.argmax)."""
        runs = np.arange(self.Q.shape[0])
        return self.Q[runs, h, state].argmax(axis=-1)

    def observe(self, h: int, state: np.ndarray, action: np.ndarray, next_state: np.ndarray) -> None:
        runs = np.arange(self.Q.shape[0])
        self.N_sas[runs, state, action, next_state] += 1
        self.N_sa[runs, state, action] += 1
        self.N_stage[runs, h, state] += 1


class UCBVI(OptimisticAgent):
    """Bernstein UCBVI (Azar et al., 2017) as in ``agents.py``: ignores availability, so an
    unavailable choice is learned as a lazy (self-loop) transition."""


class SleepingUCBVI(OptimisticAgent):
    """SleepingUCBVI (``sleepingagents.py``): also learns C(B | s) and acts over the revealed set."""

    uses_availability = True
    q_constants = (7.0 / 3.0, 4.0, 4.0)

    def __init__(
        self, batch: RunBatch, episodes: int, bonus_scale: float | np.ndarray, variance_quirk: bool = False
    ) -> None:
        super().__init__(batch, episodes, bonus_scale, variance_quirk)
        n_runs, (S, A) = batch.n_runs, batch.size
        self.masks = subset_masks(A)  # (2^A, A)
        self.N_s = np.zeros((n_runs, S))
        self.N_sB = np.zeros((n_runs, S, 2**A))
        self.c_v = 1350.0**2 * self.H**3 * self.S_true**3 * A * 2.0**A * self.L**3

    def log_term(self) -> np.ndarray:
        S, A, K, H = self.S_true, self.A, self.K, self.H
        return np.log(80.0 * S**2 * A * K**2 * H**3)

    def q_tail_constant(self) -> np.ndarray:
        return 2900.0**2 * self.H**3 * self.S_true**3 * self.A * 2.0**self.A * self.L**3

    def c_hat(self) -> np.ndarray:
        """Empirical availability distribution C^(B | s) = N(s, B) / N(s) (all zero if unvisited)."""
        return self.N_sB / np.maximum(self.N_s, 1.0)[..., None]

    def state_value(self, h: int) -> np.ndarray:
        q = self.Q[:, h]  # (R, S, A)
        masked = np.where(self.masks, q[:, :, None, :], -np.inf)  # (R, S, 2^A, A)
        best = masked.argmax(axis=-1)  # first argmax in each set
        best_q = np.take_along_axis(masked, best[..., None], axis=-1)[..., 0]
        best_q[..., 0] = 0.0  # the empty set is excluded
        c_hat = self.c_hat()
        mean = (c_hat * best_q).sum(axis=-1)
        if self.variance_quirk:
            var = np.var(c_hat[..., 1:] * best_q[..., 1:], axis=-1)  # np.std(C^ * maxQ)^2 (official)
        else:
            var = np.maximum((c_hat * best_q**2).sum(axis=-1) - mean**2, 0.0)
        H, L, n = self.H, self.L[:, None], np.maximum(self.N_s, 1.0)
        n_best = np.take_along_axis(self.N_sa, best, axis=-1)  # N(s, argmax_{a in B} Q)
        tail = np.minimum(H**2, self.c_v[:, None, None] / np.maximum(1.0, n_best))
        tail[..., 0] = 0.0
        bonus = np.sqrt(4.0 * L * var / n) + 7.0 * H * L / n + np.sqrt(4.0 * (c_hat * tail).sum(axis=-1) / n)
        return np.minimum(H, mean + self.beta[:, None] * bonus)

    def act(self, h: int, state: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Record the revealed set, then pick the first argmax of Q over it."""
        runs = np.arange(self.Q.shape[0])
        self.N_s[runs, state] += 1
        self.N_sB[runs, state, mask] += 1
        q = np.where(self.masks[mask], self.Q[runs, h, state], -np.inf)
        return q.argmax(axis=-1)


AGENTS = {"method": SleepingUCBVI, "baseline": UCBVI}
VARIANTS = tuple(AGENTS)  # ("method", "baseline")


# ----------------------------------------------------------------------------- training loop


def run_episode(agent: OptimisticAgent, batch: RunBatch, uniforms: np.ndarray) -> np.ndarray:
    """Plan, then play one episode in every run. ``uniforms`` is (R, H, 2): availability and
    transition draws per stage. Returns the episode reward of each run."""
    agent.plan()
    state = batch.start.copy()
    total = np.zeros(batch.n_runs)
    runs = np.arange(batch.n_runs)
    for h in range(batch.horizon):
        mask = sample_index(batch.C[runs, state], uniforms[:, h, 0])
        action = agent.act(h, state, mask)
        next_state, reward = env_step(batch, state, action, mask, uniforms[:, h, 1])
        agent.observe(h, state, action, next_state)
        total += reward
        state = next_state
    return total


def run_uniforms(seeds: list[np.random.SeedSequence], episodes: int, horizon: int, chunk: int = 1000):
    """Per-run random streams, drawn in chunks of episodes: each run's draws depend only on its
    own seed, so a run's outcome does not depend on which other runs share its batch."""
    rngs = [np.random.default_rng(s) for s in seeds]
    for first in range(0, episodes, chunk):
        n = min(chunk, episodes - first)
        yield np.stack([rng.random((n, horizon, 2)) for rng in rngs], axis=1)  # (n, R, H, 2)


def train_agent(agent: OptimisticAgent, batch: RunBatch, seeds, episodes: int, progress=None) -> np.ndarray:
    """Run ``episodes`` episodes; returns the (R, K) matrix of episode rewards."""
    rewards = np.zeros((batch.n_runs, episodes))
    k = 0
    for block in run_uniforms(seeds, episodes, batch.horizon):
        for uniforms in block:
            rewards[:, k] = run_episode(agent, batch, uniforms)
            k += 1
            if progress is not None:
                progress.update(1)
    return rewards


# ----------------------------------------------------------------------------- registered model


class GreedyPolicy:
    """The learned greedy policy of an optimistic Q-table (the registered model).

    ``predict(x)`` maps rows ``(stage, state, availability bitmask)`` to actions. The sleeping
    policy maximises Q over the available actions (all, if the mask is empty); the agnostic
    (UCBVI) one ignores the mask.
    """

    # What predict takes, for the registered version's MLflow signature: integer rows of width 3
    # (a float would be truncated to a state index, a wrong width reshaped).
    input_spec = ("int64", (-1, 3))

    def __init__(self, q_table: np.ndarray, uses_availability: bool, name: str = "") -> None:
        self.q_table = np.asarray(q_table, dtype=float)  # (H, S, A)
        self.uses_availability = bool(uses_availability)
        self.name = name

    def predict(self, x) -> np.ndarray:
        rows = np.asarray(x, dtype=np.int64).reshape(-1, 3)
        stage, state, mask = rows[:, 0], rows[:, 1], rows[:, 2]
        H, S, A = self.q_table.shape
        if (stage < 0).any() or (stage >= H).any() or (state < 0).any() or (state >= S).any():
            raise ValueError(f"stage must be in [0, {H}) and state in [0, {S})")
        q = self.q_table[stage, state]
        if self.uses_availability:
            available = (mask[:, None] >> np.arange(A)[None, :]) & 1 == 1
            available[~available.any(axis=1)] = True
            q = np.where(available, q, -np.inf)
        return q.argmax(axis=1)
