"""ARS's environments and its versioned dataset.

- ``PointMassTasks``: the toy on which the claim is judged, stepped as arrays over (member, task, copy);
- ``MetaWorldTasks``: real Meta-World v3 tasks (``metaworld`` from PyPI), one seeded env per (member, task),
  with ``speed_up_env``'s exact replacements for metaworld's two per-step hot spots;
- the Meta-World log format (``schema_version`` 2), one folder per arm ``mt<N>_<arm>_seed<s>/``, written by
  ``prepare`` into ``data/metaworld_logs/`` (DVC-versioned) and read back by ``read_metaworld_run``:
  - ``meta.json``: schema_version, metaworld/mujoco/gymnasium versions, suite, tasks, seed, max_episode_steps,
    scale rule, floor, clip, T_init, T_reset, steps, SAC settings, alpha (per task or shared), config hash and
    the run's own checks (Eq. 6 identity, idempotent recomputation, raw buffers, batches = raw x c_i);
  - ``episodes.csv``: task, task_idx, episode (per task), env_step_end (per-task steps), phase (random/policy),
    n_resets, c_i (scale in force), return_raw, return_scaled, success_any, success_final, length;
  - ``scales.csv``: env_step, task, task_idx, event (init/reset), rule, stat (raw-reward statistic of D_i),
    c_raw (Eq. 6 before the optional clip), c_i (in force; 1 for arms that do not scale);
  - ``resets.csv``: env_step, reset_idx, reinit (what was re-initialised), params_changed_frac, alpha_reset,
    adam_reset, buffer_size_before, buffer_size_after, catchup_updates.
  CSV rather than Parquet: readable without extra packages. Version 1 (before the restated check (iv) added
  its checks to ``meta.json``) is rejected, not misread.
"""

from __future__ import annotations

import csv
import json
import math
import types
from importlib import metadata
from pathlib import Path

import numpy as np

SCHEMA_VERSION = 2
EPISODE_COLUMNS = [
    "task",
    "task_idx",
    "episode",
    "env_step_end",
    "phase",
    "n_resets",
    "c_i",
    "return_raw",
    "return_scaled",
    "success_any",
    "success_final",
    "length",
]
SCALE_COLUMNS = ["env_step", "task", "task_idx", "event", "rule", "stat", "c_raw", "c_i"]
RESET_COLUMNS = [
    "env_step",
    "reset_idx",
    "reinit",
    "params_changed_frac",
    "alpha_reset",
    "adam_reset",
    "buffer_size_before",
    "buffer_size_after",
    "catchup_updates",
]
TABLES = {"episodes": EPISODE_COLUMNS, "scales": SCALE_COLUMNS, "resets": RESET_COLUMNS}


class PointMassTasks:
    """N goal-reaching tasks (goals at the corners of [-1,1]^2) for E members, K parallel copies each.

    Reward of task i for member e: kappa[e, i] * (1 - tanh(4 * distance to goal)); success = final
    distance < radius. Observations are [state, one-hot task] shaped [E, N * K, 2 + N]. Members with the
    same entry in ``groups`` start every episode from the same states (common random numbers); by default
    each member draws its own.
    """

    CORNERS = np.array([[1.0, 1.0], [-1.0, -1.0], [1.0, -1.0], [-1.0, 1.0]])

    def __init__(
        self,
        kappa: np.ndarray,
        episode_len: int,
        radius: float,
        seed: int,
        copies: int = 1,
        groups: np.ndarray | None = None,
    ):
        self.kappa = np.asarray(kappa, np.float64)  # [E, N]
        self.E, self.N = self.kappa.shape
        if self.N > len(self.CORNERS):
            raise ValueError(f"the point-mass toy has at most 4 tasks (one per corner), got {self.N}")
        self.K, self.episode_len, self.radius = copies, episode_len, radius
        self.groups = np.arange(self.E) if groups is None else np.asarray(groups, int)
        if self.groups.shape != (self.E,) or self.groups.min() < 0:
            raise ValueError(f"groups {self.groups}: one non-negative group id per member ({self.E})")
        self.goals = self.CORNERS[: self.N]
        self.rng = np.random.default_rng(seed)
        self.onehot = np.repeat(np.eye(self.N, dtype=np.float32), self.K, axis=0)  # [N*K, N]

    def _obs(self) -> np.ndarray:
        flat = self.state.reshape(self.E, self.N * self.K, 2).astype(np.float32)
        return np.concatenate([flat, np.broadcast_to(self.onehot, (self.E, self.N * self.K, self.N))], axis=-1)

    def distance(self) -> np.ndarray:
        return np.linalg.norm(self.state - self.goals[None, :, None, :], axis=-1)  # [E, N, K]

    def reset(self) -> np.ndarray:
        starts = self.rng.uniform(-0.5, 0.5, size=(self.groups.max() + 1, self.N, self.K, 2))
        self.state = starts[self.groups]
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


# Meta-World's two per-step hot spots, replaced per env instance by exact equivalents (bit-identical
# observations, rewards and infos: tests/methods/test_ars.py). The frame whose orientation each task reports in
# its observation through ``scipy.spatial.transform.Rotation.from_matrix`` (~0.3 ms a call):
QUAT_FRAMES = {
    "reach-v3": ("geom", "objGeom"),
    "push-v3": ("geom", "objGeom"),
    "pick-place-v3": ("geom", "objGeom"),
    "door-open-v3": ("geom", "handle"),
    "peg-insert-side-v3": ("site", "pegGrasp"),
}


def quat_from_matrix(matrix) -> np.ndarray:
    """scipy's ``Rotation.from_matrix(m).as_quat()`` (x, y, z, w) for one 3x3 rotation, in scalar arithmetic:
    the same operations in the same order (Markley's method, then the Euclidean normalisation), ~100x faster.
    A matrix scipy would first re-orthogonalise (or reject) goes to scipy itself."""
    (a, b, c), (d, e, f), (g, h, i) = np.asarray(matrix, np.float64).reshape(3, 3).tolist()
    rows = ((a, b, c), (d, e, f), (g, h, i))
    gram_off = max(abs(sum(x * y for x, y in zip(rows[p], rows[q]))) for p, q in ((0, 1), (0, 2), (1, 2)))
    gram_diag = max(abs(sum(x * x for x in row) - 1.0) for row in rows)
    det = a * (e * i - f * h) - b * (d * i - f * g) + c * (d * h - e * g)
    if gram_off > 1e-13 or gram_diag > 1e-7 or det < 0.5:  # scipy's gate is 1e-12 / 1e-5: stay well inside
        from scipy.spatial.transform import Rotation

        return Rotation.from_matrix(np.asarray(matrix, np.float64).reshape(3, 3)).as_quat()
    trace = a + e + i
    decision = (a, e, i, trace)
    choice = decision.index(max(decision))
    if choice == 3:
        q = [h - f, c - g, d - b, 1 + trace]
    else:
        j, k = (choice + 1) % 3, (choice + 2) % 3
        q = [0.0] * 4
        q[choice] = 1 - trace + 2 * rows[choice][choice]
        q[j] = rows[j][choice] + rows[choice][j]
        q[k] = rows[k][choice] + rows[choice][k]
        q[3] = rows[k][j] - rows[j][k]
    norm = math.sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3])
    return np.array([q[0] / norm, q[1] / norm, q[2] / norm, q[3] / norm])


def _touching_object(self, object_geom_id: int) -> bool:
    """``SawyerXYZEnv.touching_object`` (both finger pads press on the object) without its Python loop over
    every MuJoCo contact: the matching contacts are selected with array masks, their forces summed in the
    same order."""
    contact, force = self.data.contact, self.data.efc_force
    geom1, geom2 = contact.geom1, contact.geom2
    on_object = (geom1 == object_geom_id) | (geom2 == object_geom_id)
    pressed = []
    for pad in self._pad_geom_ids:
        total = 0
        for row in np.flatnonzero(on_object & ((geom1 == pad) | (geom2 == pad))).tolist():
            total += force[contact.efc_address[row]]
        pressed.append(0 < total)
    return pressed[0] and pressed[1]


def speed_up_env(env, task: str):
    """Install the exact fast paths above on one Meta-World env (its unwrapped instance only)."""
    raw = env.unwrapped
    raw._pad_geom_ids = (raw.data.geom("leftpad_geom").id, raw.data.geom("rightpad_geom").id)
    raw.touching_object = types.MethodType(_touching_object, raw)
    if task in QUAT_FRAMES:
        kind, name = QUAT_FRAMES[task]
        raw._get_quat_objects = lambda: quat_from_matrix(getattr(raw.data, kind)(name).xmat)
    return env


class MetaWorldTasks:
    """Meta-World v3 tasks, one seeded env per (member, task); obs = 39-d state + one-hot task.

    Every member's env of task i is built from the same benchmark and seed and reset with the same seeds, so
    all arms face the same goal sequence (common random numbers). Termination on success is off; episodes
    end at ``max_episode_steps``.
    """

    def __init__(self, tasks: tuple[str, ...], n_members: int, seed: int, max_episode_steps: int, fast: bool = True):
        """``fast``: install ``speed_up_env``'s exact fast paths (False: metaworld as shipped, for the tests)."""
        import metaworld

        self.E, self.N, self.max_steps = n_members, len(tasks), max_episode_steps
        self.envs = [[None] * self.N for _ in range(self.E)]
        for i, name in enumerate(tasks):
            bench = metaworld.MT1(name, seed=seed + i)  # samples the goal variations (the slow part)
            for e in range(self.E):
                # metaworld's own single-env builder (as gym.make("Meta-World/MT1") uses), reusing the benchmark.
                env = metaworld._init_each_env(
                    env_cls=bench.train_classes[name],
                    tasks=list(bench.train_tasks),
                    seed=seed + i,
                    max_episode_steps=max_episode_steps,
                    terminate_on_success=False,
                )
                self.envs[e][i] = speed_up_env(env, name) if fast else env
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


# ----------------------------------------------------------------------------- the Meta-World log format


def package_versions() -> dict[str, str]:
    return {pkg: metadata.version(pkg) for pkg in ("metaworld", "mujoco", "gymnasium")}


def run_dir_name(n_tasks: int, arm: str, seed: int) -> str:
    return f"mt{n_tasks}_{arm}_seed{seed}"


def _write_csv(path: Path, rows: list[dict], columns: list[str]) -> None:
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def write_metaworld_run(folder: Path, meta: dict, episodes: list[dict], scales: list[dict], resets: list[dict]):
    """One arm's log folder; ``meta`` gets the schema version. No timings or commit ids: the dataset must be
    byte-identical for the same seed and config."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("episodes", episodes), ("scales", scales), ("resets", resets)):
        _write_csv(folder / f"{name}.csv", rows, TABLES[name])
    (folder / "meta.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION, **meta}, indent=1))


def read_metaworld_run(folder: Path) -> dict:
    """Load one Meta-World log folder, rejecting other schema versions and missing or renamed columns."""
    folder = Path(folder)
    meta = json.loads((folder / "meta.json").read_text())
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{folder}: schema_version {meta.get('schema_version')!r}, expected {SCHEMA_VERSION}")
    tables = {}
    for name, columns in TABLES.items():
        with open(folder / f"{name}.csv", newline="") as fh:
            reader = csv.DictReader(fh)
            if reader.fieldnames != columns:
                raise ValueError(f"{folder}/{name}.csv: columns {reader.fieldnames}, expected {columns}")
            tables[name] = list(reader)
    return {"meta": meta, **tables}
