"""Volumes for 3-D super-resolution: synthetic phantoms, the degradation, and a BraTS NIfTI loader.

Arrays are float32 (n, D, H, W) in [-1, 1]. The task is the paper's ``flair_poolxF -> flair``:
low-resolution input = F-fold 3-D average pool, nearest-upsampled back to (D, H, W); the diffusion
target is the residual HR - up(LR) (``--residual_training``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .config import DataConfig

# ----------------------------------------------------------------------------- degradation


def pool_upsample(volumes: np.ndarray, factor: int) -> np.ndarray:
    """(..., D, H, W) -> factor^3 block average -> nearest upsample back to (D, H, W)."""
    *lead, d, h, w = volumes.shape
    blocks = volumes.reshape(*lead, d // factor, factor, h // factor, factor, w // factor, factor)
    pooled = blocks.mean(axis=(-5, -3, -1))
    for axis in (-3, -2, -1):
        pooled = np.repeat(pooled, factor, axis=axis)
    return pooled.astype(volumes.dtype, copy=False)


def minmax(volume: np.ndarray) -> np.ndarray:
    """Min-max to [-1, 1] (the official ``mri_data_norm``); a constant volume maps to -1."""
    lo, hi = float(volume.min()), float(volume.max())
    return (2 * (volume - lo) / max(hi - lo, 1e-12) - 1).astype(np.float32)


# ----------------------------------------------------------------------------- phantoms


def random_rotation(rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((3, 3)))
    return q * np.sign(np.diag(r))


def phantom(cfg: DataConfig, rng: np.random.Generator) -> np.ndarray:
    """One (D, H, W) phantom: random rotated ellipsoids (some subtracted) plus thin tubes along random
    axes (so the three slice directions see different structure), Gaussian-smoothed, scaled to [-1, 1]."""
    from scipy.ndimage import gaussian_filter

    shape = np.array(cfg.shape, dtype=float)
    grid = np.stack(np.meshgrid(*[np.arange(s) + 0.5 for s in cfg.shape], indexing="ij"), -1)  # (D, H, W, 3)
    volume = np.zeros(cfg.shape)
    for _ in range(rng.integers(cfg.ellipsoids[0], cfg.ellipsoids[1] + 1)):
        centre = rng.uniform(0.2, 0.8, 3) * shape
        axes = rng.uniform(*cfg.ellipsoid_axes, 3) * shape
        local = (grid - centre) @ random_rotation(rng)
        inside = ((local / axes) ** 2).sum(-1) <= 1
        sign = -1.0 if rng.random() < cfg.negative_fraction else 1.0
        volume += sign * rng.uniform(0.3, 1.0) * inside
    for _ in range(rng.integers(cfg.tubes[0], cfg.tubes[1] + 1)):
        axis = int(rng.integers(3))
        others = [a for a in range(3) if a != axis]
        centre = rng.uniform(0.2, 0.8, 2) * shape[others]
        radius = rng.uniform(*cfg.tube_radius)
        start, stop = np.sort(rng.uniform(0, 1, 2)) * shape[axis]
        stop = max(stop, start + 0.5 * shape[axis])
        dist2 = ((grid[..., others] - centre) ** 2).sum(-1)
        along = grid[..., axis]
        volume += rng.uniform(0.5, 1.0) * ((dist2 <= radius**2) & (along >= start) & (along <= stop))
    if cfg.smooth_sigma > 0:
        volume = gaussian_filter(volume, cfg.smooth_sigma, mode="nearest")
    return minmax(volume)


def make_phantoms(cfg: DataConfig, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([seed, 0])
    hr = np.stack([phantom(cfg, rng) for _ in range(cfg.n_train + cfg.n_test)])
    return split(hr, cfg.n_train, cfg.pool)


def split(hr: np.ndarray, n_train: int, pool: int) -> dict[str, np.ndarray]:
    hr = np.ascontiguousarray(hr, dtype=np.float32)
    lr = pool_upsample(hr, pool)
    return {"hr_train": hr[:n_train], "lr_train": lr[:n_train], "hr_test": hr[n_train:], "lr_test": lr[n_train:]}


# ----------------------------------------------------------------------------- NIfTI (BraTS)


def centre_crop(volume: np.ndarray, size: tuple[int, ...]) -> np.ndarray:
    """The official ``center_crop``: start = (edge - size) // 2 on every axis."""
    if any(e < s for e, s in zip(volume.shape, size)):
        raise ValueError(f"volume {volume.shape} is smaller than the crop {size}")
    starts = [(e - s) // 2 for e, s in zip(volume.shape, size)]
    return volume[tuple(slice(a, a + s) for a, s in zip(starts, size))]


def load_nifti(path: Path, shape: tuple[int, int, int]) -> np.ndarray:
    """One NIfTI volume -> (D, H, W) float32 in [-1, 1].

    nibabel's array order is (x, y, z) = (H, W, D) for BraTS; like ``dataset_brats.py`` it is
    centre-cropped to (H, W, D), min-max scaled to [-1, 1], then moved to (D, H, W).
    """
    import nibabel as nib

    data = np.asarray(nib.load(str(path)).get_fdata(), dtype=np.float64)
    if data.ndim == 4 and data.shape[-1] == 1:
        data = data[..., 0]
    if data.ndim != 3:
        raise ValueError(f"{path}: expected a 3-D volume, got shape {data.shape}")
    d, h, w = shape
    data = centre_crop(data, (h, w, d))
    return np.ascontiguousarray(np.moveaxis(minmax(data), -1, 0))


def find_modality(folder: Path, modality: str) -> Path:
    hits = sorted(p for p in folder.iterdir() if p.name.endswith((f"{modality}.nii.gz", f"{modality}.nii")))
    if len(hits) != 1:
        raise ValueError(f"{folder}: expected one *{modality}.nii(.gz) file, found {[p.name for p in hits]}")
    return hits[0]


def load_brats(root: Path, cfg: DataConfig) -> dict[str, np.ndarray]:
    """BraTS 2021 layout: ``root/<subject>/<subject>_<modality>.nii.gz``; subjects sorted, the first
    ``nifti_train_fraction`` train (the official 80/20 split), the rest test."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"NIfTI folder {root} does not exist (data.nifti_dir is relative to data/)")
    subjects = sorted(p for p in root.iterdir() if p.is_dir())
    if len(subjects) < 2:
        raise ValueError(f"{root}: need at least two subject folders, found {len(subjects)}")
    hr = np.stack([load_nifti(find_modality(s, cfg.nifti_modality), cfg.shape) for s in subjects])
    n_train = min(max(1, int(cfg.nifti_train_fraction * len(subjects))), len(subjects) - 1)
    return split(hr, n_train, cfg.pool)
