"""The two multi-task environments, both stepped as arrays over (member, task): the point-mass toy and
real Meta-World (one env per member and task, so every arm interacts with its own copy)."""

from __future__ import annotations

import numpy as np


class PointMassTasks:
    """N goal-reaching tasks (goals at the corners of [-1,1]^2) for E members, K parallel copies each.

    Reward of task i for member e: kappa[e, i] * (1 - tanh(4 * distance to goal)); success = final
    distance < radius. Observations are [state, one-hot task] shaped [E, N * K, 2 + N].
    """

    CORNERS = np.array([[1.0, 1.0], [-1.0, -1.0], [1.0, -1.0], [-1.0, 1.0]])

    def __init__(self, kappa: np.ndarray, episode_len: int, radius: float, seed: int, copies: int = 1):
        self.kappa = np.asarray(kappa, np.float64)  # [E, N]
        self.E, self.N = self.kappa.shape
        if self.N > len(self.CORNERS):
            raise ValueError("the point-mass toy has at most 4 tasks (one per corner)")
        self.K, self.episode_len, self.radius = copies, episode_len, radius
        self.goals = self.CORNERS[: self.N]
        self.rng = np.random.default_rng(seed)
        self.onehot = np.repeat(np.eye(self.N, dtype=np.float32), self.K, axis=0)  # [N*K, N]

    def _obs(self) -> np.ndarray:
        flat = self.state.reshape(self.E, self.N * self.K, 2).astype(np.float32)
        return np.concatenate([flat, np.broadcast_to(self.onehot, (self.E, self.N * self.K, self.N))], axis=-1)

    def distance(self) -> np.ndarray:
        return np.linalg.norm(self.state - self.goals[None, :, None, :], axis=-1)  # [E, N, K]

    def reset(self) -> np.ndarray:
        self.state = self.rng.uniform(-0.5, 0.5, size=(self.E, self.N, self.K, 2))
        self.t = 0
        return self._obs()

    def step(self, action: np.ndarray):
        """action [E, N*K, 2] in [-1, 1] -> obs, reward [E, N*K], terminated, success, episode_over."""
        step = 0.1 * np.clip(action, -1, 1).reshape(self.E, self.N, self.K, 2)
        self.state = np.clip(self.state + step, -1.0, 1.0)
        self.t += 1
        d = self.distance()
        reward = self.kappa[:, :, None] * (1.0 - np.tanh(4.0 * d))
        flat = lambda x: x.reshape(self.E, self.N * self.K)
        return self._obs(), flat(reward), flat(np.zeros_like(d)), flat(d < self.radius), self.t >= self.episode_len


class MetaWorldTasks:
    """Meta-World v3 tasks (``metaworld`` from PyPI), one seeded env per (member, task); obs = 39-d + one-hot.

    Every member's env of task i is built from the same benchmark and seed, so all arms face the same goal
    sequence (common random numbers). Termination on success is off; episodes end at ``max_episode_steps``.
    """

    def __init__(self, tasks: tuple[str, ...], n_members: int, seed: int, max_episode_steps: int):
        import metaworld

        self.E, self.N, self.max_steps = n_members, len(tasks), max_episode_steps
        self.envs = [[None] * self.N for _ in range(self.E)]
        for i, name in enumerate(tasks):
            bench = metaworld.MT1(name, seed=seed + i)  # samples the goal variations (the slow part)
            for e in range(self.E):
                # metaworld's own single-env builder (as gym.make("Meta-World/MT1") uses), reusing the benchmark.
                self.envs[e][i] = metaworld._init_each_env(
                    env_cls=bench.train_classes[name],
                    tasks=list(bench.train_tasks),
                    seed=seed + i,
                    max_episode_steps=max_episode_steps,
                    terminate_on_success=False,
                )
        self.onehot = np.eye(self.N, dtype=np.float32)
        self.episode = 0
        self.seed = seed

    def _with_task(self, raw: np.ndarray) -> np.ndarray:
        return np.concatenate([raw.astype(np.float32), np.broadcast_to(self.onehot, (self.E, self.N, self.N))], -1)

    def reset(self) -> np.ndarray:
        raw = np.stack(
            [
                np.stack([env.reset(seed=self.seed * 100_003 + self.episode * 101 + i)[0] for i, env in enumerate(row)])
                for row in self.envs
            ]
        )
        self.episode += 1
        self.t = 0
        return self._with_task(raw)

    def step(self, action: np.ndarray):
        obs = np.zeros((self.E, self.N, 39))
        rew, term, succ = (np.zeros((self.E, self.N)) for _ in range(3))
        for e, row in enumerate(self.envs):
            for i, env in enumerate(row):
                obs[e, i], rew[e, i], term[e, i], _, info = env.step(action[e, i].astype(np.float64))
                succ[e, i] = float(info["success"])
        self.t += 1
        return self._with_task(obs), rew, term, succ > 0, self.t >= self.max_steps
