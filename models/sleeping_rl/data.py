"""Environments of the paper: StochasticFrozenLake as a tabular MDP whose available-action set
B is drawn afresh at every stage from a distribution C(B | s) that depends on the state only,
plus its exact dynamic-programming values and a reader for the official ``configs/*.json``.

An availability set B is an A-bit mask (bit a set <=> action a available), as in the official
code's ``list_to_int``. Every environment here is a :class:`SleepingMDP`: transition kernel P,
known reward table R, availability distribution C and a start state. An unavailable action
is a no-op (the agent stays) with reward 0, as in ``env.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ACTIONS = ("stay", "up", "down", "left", "right")
# Row/column displacement of each FrozenLake action.
MOVES = np.array([(0, 0), (-1, 0), (1, 0), (0, -1), (0, 1)])


def subset_masks(n_actions: int) -> np.ndarray:
    """(2^A, A) boolean matrix: row B lists the actions in the set with bitmask B."""
    sets = np.arange(2**n_actions)[:, None]
    return (sets >> np.arange(n_actions)[None, :]) & 1 == 1


@dataclass(frozen=True)
class SleepingMDP:
    """Tabular episodic MDP with state-dependent, per-stage action availability."""

    P: np.ndarray  # (S, A, S) transition probabilities of an available action
    R: np.ndarray  # (S, A) reward of an available action (known to the agents)
    C: np.ndarray  # (S, 2^A) probability of each availability set in each state
    start: int
    horizon: int

    @property
    def n_states(self) -> int:
        return self.P.shape[0]

    @property
    def n_actions(self) -> int:
        return self.P.shape[1]

    def avail_prob(self) -> np.ndarray:
        """(S, A) marginal probability that each action is available."""
        return self.C @ subset_masks(self.n_actions)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"P": self.P, "R": self.R, "C": self.C, "start": np.array(self.start), "horizon": np.array(self.horizon)}

    @classmethod
    def from_arrays(cls, arrays) -> SleepingMDP:
        return cls(arrays["P"], arrays["R"], arrays["C"], int(arrays["start"]), int(arrays["horizon"]))


# ----------------------------------------------------------------------------- FrozenLake


def frozen_lake(grid: int, safe_prob: float, horizon: int) -> SleepingMDP:
    """``StochasticFrozenLake(grid, no_hole_prob=safe_prob, horizon)`` of the official ``env.py``.

    After every step each cell is re-drawn safe with probability p; the start, the goal and the
    agent's own cell are always safe. A move is available iff its target is an in-grid safe
    cell, "stay" always is; so the moves of cell s are independent with probability 1 (target
    = start or goal), p (other in-grid target) or 0 (off-grid).
    """
    n_states, n_actions = grid * grid, len(ACTIONS)
    goal = n_states - 1
    rows, cols = np.divmod(np.arange(n_states), grid)
    target_r = rows[:, None] + MOVES[None, :, 0]
    target_c = cols[:, None] + MOVES[None, :, 1]
    in_grid = (target_r >= 0) & (target_r < grid) & (target_c >= 0) & (target_c < grid)
    target = np.where(in_grid, target_r * grid + target_c, np.arange(n_states)[:, None])  # (S, A)

    q = np.where(in_grid, safe_prob, 0.0)
    q[(target == 0) | (target == goal)] = 1.0
    q[~in_grid] = 0.0
    q[:, 0] = 1.0  # stay
    masks = subset_masks(n_actions)
    C = np.prod(np.where(masks[None], q[:, None, :], 1.0 - q[:, None, :]), axis=2)  # (S, 2^A)

    P = np.zeros((n_states, n_actions, n_states))
    P[np.arange(n_states)[:, None], np.arange(n_actions)[None, :], target] = 1.0
    R = (target == goal).astype(float)  # stay-on-goal, right-into-goal, down-into-goal
    R[~in_grid] = 0.0
    return SleepingMDP(P=P, R=R, C=C, start=0, horizon=horizon)


def sample_lake_masks(grid: int, safe_prob: float, positions: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Availability bitmasks drawn literally as ``env.py`` does: regenerate the lake, then list
    the in-grid safe neighbours. Vectorised over agent ``positions`` (cell indices)."""
    positions = np.asarray(positions)
    n = positions.shape[0]
    lake = rng.random((n, grid, grid)) < safe_prob
    lake[:, 0, 0] = True
    lake[:, -1, -1] = True
    rows, cols = np.divmod(positions, grid)
    lake[np.arange(n), rows, cols] = True
    masks = np.ones(n, dtype=np.int64)  # stay
    for action in range(1, len(ACTIONS)):
        r, c = rows + MOVES[action, 0], cols + MOVES[action, 1]
        inside = (r >= 0) & (r < grid) & (c >= 0) & (c < grid)
        safe = np.zeros(n, dtype=bool)
        safe[inside] = lake[np.flatnonzero(inside), r[inside], c[inside]]
        masks |= safe.astype(np.int64) << action
    return masks


# ----------------------------------------------------------------------------- random MDPs


def random_mdp(
    n_states: int, n_actions: int, horizon: int, rng: np.random.Generator, alpha: float = 1.0
) -> SleepingMDP:
    """Random MDP: P(.|s,a) ~ Dirichlet(alpha), R ~ U[0,1], each action available independently
    with a state-dependent probability, conditioned on at least one action being available."""
    P = rng.dirichlet(alpha * np.ones(n_states), size=(n_states, n_actions))
    R = rng.random((n_states, n_actions))
    q = rng.uniform(0.2, 0.9, size=(n_states, n_actions))
    masks = subset_masks(n_actions)
    C = np.prod(np.where(masks[None], q[:, None, :], 1.0 - q[:, None, :]), axis=2)
    C[:, 0] = 0.0
    C /= C.sum(axis=1, keepdims=True)
    return SleepingMDP(P=P, R=R, C=C, start=0, horizon=horizon)


# ----------------------------------------------------------------------------- exact values


def masked_max(q: np.ndarray, masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Max and first argmax of q[..., a] over each set's actions: (..., 2^A). The empty set gets 0."""
    masked = np.where(masks, q[..., None, :], -np.inf)
    best = masked.argmax(axis=-1)
    value = np.take_along_axis(masked, best[..., None], axis=-1)[..., 0]
    return np.where(masks.any(axis=1), value, 0.0), best


def optimal_values(mdp: SleepingMDP) -> tuple[np.ndarray, np.ndarray]:
    """V*_h(s) = E_{B ~ C(.|s)} max_{a in B} [R + P V*_{h+1}](s, a). Returns V (H+1, S), Q (H, S, A)."""
    masks = subset_masks(mdp.n_actions)
    V = np.zeros((mdp.horizon + 1, mdp.n_states))
    Q = np.zeros((mdp.horizon, mdp.n_states, mdp.n_actions))
    for h in reversed(range(mdp.horizon)):
        Q[h] = mdp.R + mdp.P @ V[h + 1]
        V[h] = (mdp.C * masked_max(Q[h], masks)[0]).sum(axis=1)
    return V, Q


def agnostic_q(mdp: SleepingMDP, v_next: np.ndarray) -> np.ndarray:
    """Q of committing to a before seeing B: if a is unavailable the agent stays with reward 0."""
    q = mdp.avail_prob()
    return q * (mdp.R + mdp.P @ v_next) + (1.0 - q) * v_next[:, None]


def agnostic_values(mdp: SleepingMDP) -> tuple[np.ndarray, np.ndarray]:
    """Value of the best Markov policy that ignores the revealed set (UCBVI's target)."""
    V = np.zeros((mdp.horizon + 1, mdp.n_states))
    Q = np.zeros((mdp.horizon, mdp.n_states, mdp.n_actions))
    for h in reversed(range(mdp.horizon)):
        Q[h] = agnostic_q(mdp, V[h + 1])
        V[h] = Q[h].max(axis=1)
    return V, Q


def sleeping_policy_value(mdp: SleepingMDP, q_table: np.ndarray) -> np.ndarray:
    """Exact value (H+1, S) of acting greedily on q_table[h, s, :] over the revealed set."""
    masks = subset_masks(mdp.n_actions)
    V = np.zeros((mdp.horizon + 1, mdp.n_states))
    for h in reversed(range(mdp.horizon)):
        q_true = mdp.R + mdp.P @ V[h + 1]
        chosen = masked_max(q_table[h], masks)[1]  # (S, 2^A)
        V[h] = (mdp.C * np.take_along_axis(q_true, chosen, axis=1)).sum(axis=1)
    return V


def agnostic_policy_value(mdp: SleepingMDP, actions: np.ndarray) -> np.ndarray:
    """Exact value (H+1, S) of the availability-blind policy ``actions[h, s]`` (no-op if unavailable)."""
    V = np.zeros((mdp.horizon + 1, mdp.n_states))
    for h in reversed(range(mdp.horizon)):
        V[h] = np.take_along_axis(agnostic_q(mdp, V[h + 1]), actions[h][:, None], axis=1)[:, 0]
    return V


# ----------------------------------------------------------------------------- official configs


@dataclass(frozen=True)
class OfficialConfig:
    """One ``configs/*.json`` file of marcomussi/SleepingRL."""

    grid: int
    horizon: int
    episodes: int
    no_hole_prob: float
    algorithms: tuple[str, ...] = ("SleUCBVI", "UCBVI")
    n_trials: int = 4
    n_cores: int = 4


def official_config_name(grid: int, horizon: int, episodes: int, no_hole_prob: float) -> str:
    """The repository's naming, e.g. ``g2h10k200000prob025.json``."""
    return f"g{grid}h{horizon}k{episodes}prob{f'{no_hole_prob:g}'.replace('.', '')}.json"


def read_official_config(path: Path) -> OfficialConfig:
    """Parse an official config; keys ``grid``, ``H``, ``K``, ``no_hole_prob`` are required."""
    raw = json.loads(Path(path).read_text())
    missing = [k for k in ("grid", "H", "K", "no_hole_prob") if k not in raw]
    if missing:
        raise ValueError(f"{path}: not a StochasticFrozenLake config (missing keys {missing})")
    config = OfficialConfig(
        grid=int(raw["grid"]),
        horizon=int(raw["H"]),
        episodes=int(raw["K"]),
        no_hole_prob=float(raw["no_hole_prob"]),
        algorithms=tuple(raw.get("alg_lst", ("SleUCBVI", "UCBVI"))),
        n_trials=int(raw.get("n_trials", 4)),
        n_cores=int(raw.get("n_cores", 4)),
    )
    if config.grid < 2 or not 0.0 < config.no_hole_prob <= 1.0 or config.horizon < 1 or config.episodes < 1:
        raise ValueError(f"{path}: out-of-range values {config}")
    return config


def write_official_config(path: Path, config: OfficialConfig) -> None:
    payload = {
        "grid": config.grid,
        "H": config.horizon,
        "K": config.episodes,
        "no_hole_prob": config.no_hole_prob,
        "alg_lst": list(config.algorithms),
        "n_trials": config.n_trials,
        "n_cores": config.n_cores,
    }
    Path(path).write_text(json.dumps(payload) + "\n")
