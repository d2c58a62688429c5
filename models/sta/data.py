"""Synthetic moving-shapes videos (the offline stand-in for video latents) and a loader for user videos.

Each video holds 1..max_shapes coloured discs or squares on black, moving at constant speed and
bouncing off the borders; later shapes paint over earlier ones. Stored as uint8
(n, channels, frames, size, size) in ``videos.npz`` with "train" and "test" arrays.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.base import DatasetRef, dataset_meta, user_data_path, write_manifest
from models.common.arrays import save_npz  # noqa: F401 (re-exported for tests and pipeline)

FILE = "videos.npz"


def _bounce(position: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Reflect free motion into [low, high] (a triangle wave): a shape bouncing off the walls."""
    span = high - low
    phase = np.mod(position - low, 2 * span)
    return low + np.where(phase <= span, phase, 2 * span - phase)


def moving_shapes(n: int, cfg, rng: np.random.Generator) -> np.ndarray:
    """(n, channels, frames, size, size) uint8 videos."""
    F, S, C = cfg.frames, cfg.size, cfg.channels
    videos = np.zeros((n, F, S, S, C), dtype=np.uint8)
    yy, xx = np.meshgrid(np.arange(S) + 0.5, np.arange(S) + 0.5, indexing="ij")
    t = np.arange(F, dtype=np.float64)
    n_shapes = rng.integers(1, cfg.max_shapes + 1, size=n)
    for s in range(cfg.max_shapes):
        present = n_shapes > s
        radius = rng.uniform(cfg.min_radius, cfg.max_radius, size=n)
        start = rng.uniform(radius[:, None], S - radius[:, None], size=(n, 2))
        speed = rng.uniform(cfg.min_speed, cfg.max_speed, size=n)
        angle = rng.uniform(0, 2 * np.pi, size=n)
        velocity = speed[:, None] * np.stack([np.sin(angle), np.cos(angle)], 1)
        is_square = rng.random(n) < 0.5
        hue = rng.integers(0, 6, size=n)  # six saturated colours, dimmed or not
        colour = np.array(
            [[255, 64, 64], [64, 255, 64], [64, 64, 255], [255, 255, 64], [64, 255, 255], [255, 64, 255]]
        )[hue]
        colour = (colour * rng.uniform(0.6, 1.0, size=(n, 1))).astype(np.uint8)
        if C == 1:
            colour = colour.mean(1, keepdims=True).astype(np.uint8)
        colour = colour[:, :C]
        # Centre per video and frame, bounced inside [r, S - r].
        centre = _bounce(
            start[:, None, :] + velocity[:, None, :] * t[None, :, None],
            radius[:, None, None],
            S - radius[:, None, None],
        )
        dy = yy[None, None] - centre[:, :, 0, None, None]
        dx = xx[None, None] - centre[:, :, 1, None, None]
        r = radius[:, None, None, None]
        inside = np.where(
            is_square[:, None, None, None], np.maximum(np.abs(dx), np.abs(dy)) <= r, dx**2 + dy**2 <= r**2
        )
        inside &= present[:, None, None, None]
        videos = np.where(inside[..., None], colour[:, None, None, None, :], videos)
    return np.ascontiguousarray(videos.transpose(0, 4, 1, 2, 3))


def prepare(cfg, data_dir: Path) -> DatasetRef:
    d = cfg.data
    if d.videos_npz:
        source = user_data_path(d.videos_npz)
        train, test = load_videos(source, d)
        meta = {
            **dataset_meta("real", f"user-supplied video set data/{d.videos_npz}"),
            "generator": f"user videos {d.videos_npz}",
            "synthetic": False,
        }
    else:
        rng = np.random.default_rng(cfg.seed)
        train, test = moving_shapes(d.n_train, d, rng), moving_shapes(d.n_test, d, rng)
        provenance = (
            f"generated from seed {cfg.seed}: moving shapes (1-{d.max_shapes} discs/squares, radius "
            f"{d.min_radius:g}-{d.max_radius:g}, speed {d.min_speed:g}-{d.max_speed:g} px/frame), "
            f"{d.frames} frames of {d.size}x{d.size}x{d.channels}, {d.n_train} train / {d.n_test} test videos"
        )
        meta = {
            **dataset_meta("synthetic", provenance),
            "generator": "moving shapes (discs and squares bouncing off the borders)",
            "synthetic": True,
        }
    save_npz(Path(data_dir) / FILE, train=train, test=test)
    meta.update(seed=cfg.seed, n_train=int(len(train)), n_test=int(len(test)), shape=list(train.shape[1:]))
    return write_manifest(data_dir, meta=meta)


def load_videos(path: Path, d) -> tuple[np.ndarray, np.ndarray]:
    """A user's video set: npz with uint8 "train"/"test" of shape (n, channels, frames, size, size)."""
    with np.load(path) as archive:
        missing = {"train", "test"} - set(archive.files)
        if missing:
            raise ValueError(f"{path}: missing arrays {sorted(missing)} (need 'train' and 'test')")
        train, test = archive["train"], archive["test"]
    expected = (d.channels, d.frames, d.size, d.size)
    for name, arr in (("train", train), ("test", test)):
        if arr.dtype != np.uint8 or arr.ndim != 5 or arr.shape[1:] != expected:
            raise ValueError(
                f"{path}: '{name}' must be uint8 (n, {', '.join(map(str, expected))}); got {arr.dtype} {arr.shape}"
            )
    return train, test


def load(data: DatasetRef) -> dict[str, np.ndarray]:
    with np.load(data.file(FILE)) as archive:
        return {k: archive[k] for k in ("train", "test")}


def to_float(videos: np.ndarray):
    """uint8 videos -> float32 torch tensor in [-1, 1]."""
    import torch

    return torch.from_numpy(videos.astype(np.float32) / 127.5 - 1.0)
