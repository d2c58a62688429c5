"""The synthetic tabletop: scenes, captions, the scripted expert and the seen / held-out splits.

Objects sit at the centres of patch cells of the encoder's grid (so the target location is the
centre of the patch an ideal word->patch attention picks); the agent moves continuously.
"""

from __future__ import annotations

import numpy as np

COLOURS = ("red", "green", "blue", "yellow")
SHAPES = ("square", "circle", "triangle", "cross")
WORDS = COLOURS + SHAPES  # token id = index: colour c -> c, shape s -> 4 + s
RGB = np.array([(220, 40, 40), (40, 180, 60), (50, 80, 220), (230, 210, 40)], np.uint8)
TABLE, AGENT = 128, 255
OBJECT_PX = 6  # objects are 6 x 6 px
HELDOUT_PAIRS = ((0, 1), (1, 2), (2, 3), (3, 0))  # red circle, green triangle, blue cross, yellow square
HELDOUT_COLOUR = 3  # yellow
N_OBJECTS = 3


def _masks() -> np.ndarray:
    y, x = np.mgrid[0:OBJECT_PX, 0:OBJECT_PX] + 0.5
    c = OBJECT_PX / 2
    square = np.ones((OBJECT_PX, OBJECT_PX), bool)
    circle = (x - c) ** 2 + (y - c) ** 2 <= (OBJECT_PX / 2) ** 2
    triangle = np.abs(x - c) <= y / 2
    cross = (np.abs(x - c) < 1.01) | (np.abs(y - c) < 1.01)
    return np.stack([square, circle, triangle, cross])


SHAPE_MASKS = _masks()


def caption(pair: np.ndarray) -> np.ndarray:
    """(..., 2) [colour, shape] -> (..., 2) token ids."""
    return np.stack([pair[..., 0], pair[..., 1] + len(COLOURS)], -1)


def is_heldout(pair: np.ndarray, split: str) -> np.ndarray:
    """Whether a (colour, shape) pair is outside the behaviour-cloning targets."""
    if split == "colour":
        return pair[..., 0] == HELDOUT_COLOUR
    return np.any([(pair[..., 0] == c) & (pair[..., 1] == s) for c, s in HELDOUT_PAIRS], axis=0)


def sample_layouts(rng: np.random.Generator, n: int, grid: int) -> np.ndarray:
    """(n, 3, 2) distinct patch cells (row, col), away from the border, Chebyshev distance >= 2."""
    out = np.zeros((n, N_OBJECTS, 2), np.int64)
    for i in range(n):
        cells: list[np.ndarray] = []
        while len(cells) < N_OBJECTS:
            cell = rng.integers(1, grid - 1, size=2)
            if all(np.abs(cell - c).max() >= 2 for c in cells):
                cells.append(cell)
        out[i] = cells
    return out


def sample_task_pairs(rng: np.random.Generator, n: int, split: str, heldout: bool | None) -> np.ndarray:
    """(n, 3, 2) pairs; object 0 is the target. Distractors share no attribute with the target.

    ``heldout`` True/False restricts the target to held-out / seen pairs; None = any pair."""
    pairs = np.zeros((n, N_OBJECTS, 2), np.int64)
    for i in range(n):
        while True:
            target = rng.integers(0, 4, size=2)
            if heldout is None or bool(is_heldout(target, split)) == heldout:
                break
        pairs[i, 0] = target
        for k in range(1, N_OBJECTS):
            pairs[i, k] = [
                rng.choice([c for c in range(4) if c != target[0]]),
                rng.choice([s for s in range(4) if s != target[1]]),
            ]
    return pairs


def cell_centre(cells: np.ndarray, grid: int) -> np.ndarray:
    """Patch cell (row, col) -> continuous (x, y) position in [0, 1]."""
    return (cells[..., ::-1] + 0.5) / grid


def render_background(cells: np.ndarray, pairs: np.ndarray, size: int, grid: int, noise: np.ndarray) -> np.ndarray:
    """(n, size, size, 3) uint8 table with the objects (no agent)."""
    n = len(cells)
    images = np.clip(TABLE + noise, 0, 255).astype(np.uint8)
    patch = size // grid
    for i in range(n):
        for (row, col), (colour, shape) in zip(cells[i], pairs[i]):
            top = row * patch + patch // 2 - OBJECT_PX // 2
            left = col * patch + patch // 2 - OBJECT_PX // 2
            region = images[i, top : top + OBJECT_PX, left : left + OBJECT_PX]
            region[SHAPE_MASKS[shape]] = RGB[colour]
    return images


def draw_agent(background: np.ndarray, agent: np.ndarray) -> np.ndarray:
    """Copy of the backgrounds with a 2 x 2 white agent at continuous (x, y) positions."""
    images = background.copy()
    size = images.shape[1]
    px = np.clip((agent * size).astype(np.int64), 0, size - 2)
    for dy in (0, 1):
        for dx in (0, 1):
            images[np.arange(len(images)), px[:, 1] + dy, px[:, 0] + dx] = AGENT
    return images


def expert_action(agent: np.ndarray, target: np.ndarray, step_size: float) -> np.ndarray:
    """clip(target - agent, +-step) rescaled to [-1, 1]: lands exactly on the target."""
    return np.clip(target - agent, -step_size, step_size) / step_size


def step(agent: np.ndarray, action: np.ndarray, step_size: float) -> np.ndarray:
    return np.clip(agent + step_size * np.clip(action, -1, 1), 0.0, 1.0)


def make_scenes(
    rng: np.random.Generator, n: int, size: int, grid: int, split: str, heldout: bool | None
) -> dict[str, np.ndarray]:
    """Scenes with a target (object 0), 2 distractors and a random agent start."""
    cells = sample_layouts(rng, n, grid)
    pairs = sample_task_pairs(rng, n, split, heldout)
    noise = rng.normal(0, 4, size=(n, size, size, 3))
    return {
        "cells": cells,
        "pairs": pairs,
        "background": render_background(cells, pairs, size, grid, noise),
        "agent": rng.uniform(0.05, 0.95, size=(n, 2)),
    }


def make_pretraining(rng: np.random.Generator, n: int, size: int, grid: int) -> dict[str, np.ndarray]:
    """Captioned scenes over all 16 pairs (objects may share attributes) for the contrastive pretraining."""
    cells = sample_layouts(rng, n, grid)
    pairs = rng.integers(0, 4, size=(n, N_OBJECTS, 2))
    noise = rng.normal(0, 4, size=(n, size, size, 3))
    images = draw_agent(render_background(cells, pairs, size, grid, noise), rng.uniform(0.05, 0.95, size=(n, 2)))
    return {"images": images, "patch": cells[..., 0] * grid + cells[..., 1], "pairs": pairs}


def make_demos(scenes: dict[str, np.ndarray], steps: int, step_size: float, grid: int) -> dict[str, np.ndarray]:
    """Roll the expert for up to ``steps`` steps in every scene: one image/instruction/proprio/action row per step
    until the agent reaches its target, where the demonstration ends (as a teleoperated one ends at success).

    Rows after arrival would all say "stay" (action 0): they were ~70 % of the rows, which made 0 the L1-optimal
    prediction for any head that has not yet found the target, and stalled the all-tokens head at predicting it."""
    agent = scenes["agent"].copy()
    target = cell_centre(scenes["cells"][:, 0], grid)
    tokens = caption(scenes["pairs"][:, 0])
    rows: dict[str, list[np.ndarray]] = {k: [] for k in ("images", "proprio", "actions", "tokens", "target_pair")}
    for _ in range(steps):
        moving = np.flatnonzero(np.abs(target - agent).max(1) > 1e-9)
        if not len(moving):
            break
        action = expert_action(agent[moving], target[moving], step_size)
        rows["images"].append(draw_agent(scenes["background"][moving], agent[moving]))
        rows["proprio"].append(agent[moving].astype(np.float32))
        rows["actions"].append(action.astype(np.float32))
        rows["tokens"].append(tokens[moving])
        rows["target_pair"].append(scenes["pairs"][moving, 0])
        agent[moving] = step(agent[moving], action, step_size)
    return {k: np.concatenate(v) for k, v in rows.items()}


def rollout(
    act, scenes: dict[str, np.ndarray], grid: int, max_steps: int, step_size: float, radius: float
) -> np.ndarray:
    """Closed-loop episodes from the scenes' start states; per-episode success (within ``radius`` of the target).

    ``act(images, tokens, agent, target) -> actions`` is called on the still-running episodes only (an episode
    ends when it reaches the target), all of them in one batch per step."""
    agent = scenes["agent"].copy()
    target = cell_centre(scenes["cells"][:, 0], grid)
    tokens = caption(scenes["pairs"][:, 0])
    reached = np.zeros(len(agent), bool)
    for _ in range(max_steps):
        running = np.flatnonzero(~reached)
        if not len(running):
            break
        images = draw_agent(scenes["background"][running], agent[running])
        action = act(images, tokens[running], agent[running], target[running])
        agent[running] = step(agent[running], action, step_size)
        reached[running] = np.linalg.norm(agent[running] - target[running], axis=1) <= radius
    return reached
