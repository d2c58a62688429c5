"""Synthetic moving-shapes videos (the offline stand-in for video latents) and a loader for user videos.

Each video holds 1..max_shapes coloured discs or squares moving at constant speed and bouncing off
the borders (later shapes paint over earlier ones) in front of a static background: a smooth random
colour field whose correlation length spans a few tiles (``background_field``), so that denoising a
pixel draws on its neighbourhood beyond one tile. Stored as uint8 (n, channels, frames, size, size)
in ``videos.npz`` with "train", "val" and "test" arrays (validation: early stopping and the lr grid).
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
    videos = np.ascontiguousarray(videos.transpose(0, 4, 1, 2, 3))
    if cfg.background_contrast > 0:
        background = background_field(n, cfg, rng)
        videos = np.where(videos.any(1, keepdims=True), videos, background[:, :, None])
    return videos


def background_field(n: int, cfg, rng: np.random.Generator) -> np.ndarray:
    """(n, channels, size, size) uint8 static backgrounds: white noise smoothed by a periodic Gaussian of
    ``background_sigma`` px (0: one uniform colour per video), scaled to std ``background_contrast`` (in
    units of half the pixel range) around mid-grey."""
    from scipy.ndimage import gaussian_filter

    C, S = cfg.channels, cfg.size
    if cfg.background_sigma == 0:
        field = np.broadcast_to(rng.standard_normal((n, C, 1, 1)), (n, C, S, S))
    else:
        white = rng.standard_normal((n, C, S, S))
        field = gaussian_filter(white, sigma=(0, 0, cfg.background_sigma, cfg.background_sigma), mode="wrap")
        field = field / field.std(axis=(1, 2, 3), keepdims=True)
    return np.clip(127.5 + 127.5 * cfg.background_contrast * field, 0, 255).astype(np.uint8)


SPLITS = ("train", "val", "test")


def prepare(cfg, data_dir: Path) -> DatasetRef:
    d = cfg.data
    if d.videos_npz:
        source = user_data_path(d.videos_npz)
        splits = load_videos(source, d)
        meta = {
            **dataset_meta("real", f"user-supplied video set data/{d.videos_npz}"),
            "generator": f"user videos {d.videos_npz}",
            "synthetic": False,
        }
    else:
        rng = np.random.default_rng(cfg.seed)
        splits = {name: moving_shapes(size, d, rng) for name, size in zip(SPLITS, (d.n_train, d.n_val, d.n_test))}
        provenance = (
            f"generated from seed {cfg.seed}: moving shapes (1-{d.max_shapes} discs/squares, radius "
            f"{d.min_radius:g}-{d.max_radius:g}, speed {d.min_speed:g}-{d.max_speed:g} px/frame) over a static "
            f"smooth background (contrast {d.background_contrast:g}, sigma {d.background_sigma:g} px), "
            f"{d.frames} frames of {d.size}x{d.size}x{d.channels}, {d.n_train} train / {d.n_val} val / "
            f"{d.n_test} test videos"
        )
        meta = {
            **dataset_meta("synthetic", provenance),
            "generator": "moving shapes (discs and squares bouncing off the borders) over a smooth static background",
            "synthetic": True,
        }
    save_npz(Path(data_dir) / FILE, **splits)
    meta.update(
        seed=cfg.seed, shape=list(splits["train"].shape[1:]), **{f"n_{k}": int(len(v)) for k, v in splits.items()}
    )
    return write_manifest(data_dir, meta=meta)


def load_videos(path: Path, d) -> dict[str, np.ndarray]:
    """A user's video set: npz with uint8 "train"/"test" (and optionally "val") arrays of shape
    (n, channels, frames, size, size). Without "val", the last ``n_val`` training videos become it."""
    with np.load(path) as archive:
        missing = {"train", "test"} - set(archive.files)
        if missing:
            raise ValueError(f"{path}: missing arrays {sorted(missing)} (need 'train' and 'test', optionally 'val')")
        splits = {k: archive[k] for k in SPLITS if k in archive.files}
    expected = (d.channels, d.frames, d.size, d.size)
    for name, arr in splits.items():
        if arr.dtype != np.uint8 or arr.ndim != 5 or arr.shape[1:] != expected:
            raise ValueError(
                f"{path}: '{name}' must be uint8 (n, {', '.join(map(str, expected))}); got {arr.dtype} {arr.shape}"
            )
    if "val" not in splits:
        if len(splits["train"]) <= d.n_val:
            raise ValueError(f"{path}: {len(splits['train'])} training videos leave none after n_val={d.n_val}")
        splits["train"], splits["val"] = splits["train"][: -d.n_val], splits["train"][-d.n_val :]
    return {k: splits[k] for k in SPLITS}


def load(data: DatasetRef) -> dict[str, np.ndarray]:
    with np.load(data.file(FILE)) as archive:
        return {k: archive[k] for k in SPLITS}


def to_float(videos: np.ndarray):
    """uint8 videos -> float32 torch tensor in [-1, 1]."""
    import torch

    return torch.from_numpy(videos.astype(np.float32) / 127.5 - 1.0)
