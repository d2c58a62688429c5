"""Volumes for 3-D super-resolution: real MNI152 brain crops, synthetic phantoms, a BraTS NIfTI loader.

Arrays are float32 (n, D, H, W) in [-1, 1], split into train / val / test. The task is the paper's
``flair_poolxF -> flair``: low-resolution input = F-fold 3-D average pool, nearest-upsampled back to
(D, H, W); the diffusion target is the residual HR - up(LR) (``--residual_training``).

* ``load_mni152`` (default): nilearn's MNI152 2009a symmetric template (197 x 233 x 189 at 1 mm,
  skull-stripped; T1 or the GM/WM probability maps), read with nibabel straight out of the pinned nilearn
  wheel. Crops are cut from disjoint slabs along the anterior-posterior axis (``SPLIT_CYCLE``), so no
  test voxel is ever seen in training; the symmetric template rules out a left/right split.
* ``make_phantoms``: random ellipsoids + thin tubes (``data.source="synthetic"``, controlled runs).
* ``load_brats``: the official BraTS 2021 layout (``data.source="nifti"``; the paper's data, not here).
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from models.common import raw_data

from .config import DataConfig

NILEARN_WHEEL = "nilearn-0.14.1-py3-none-any.whl"
MNI_MEMBERS = {
    "t1": "nilearn/datasets/data/mni_icbm152_t1_tal_nlin_sym_09a_converted.nii.gz",
    "gm": "nilearn/datasets/data/mni_icbm152_gm_tal_nlin_sym_09a_converted.nii.gz",
    "wm": "nilearn/datasets/data/mni_icbm152_wm_tal_nlin_sym_09a_converted.nii.gz",
}
# Slab k along the anterior-posterior axis belongs to SPLIT_CYCLE[k % 4]: half the slabs train, and the
# validation and test slabs alternate along the brain (neither sits at one end of it).
SPLIT_CYCLE = ("train", "val", "train", "test")
SPLITS = ("train", "val", "test")
MAX_DRAWS_PER_CROP = 1000  # crop positions tried per wanted crop before giving up

# ----------------------------------------------------------------------------- degradation


def pool_upsample(volumes: np.ndarray, factor: int | tuple[int, int, int]) -> np.ndarray:
    """(..., D, H, W) -> block average (``factor`` per axis, or the same on all three) -> nearest upsample
    back to (D, H, W). ``(4, 1, 1)``: an anisotropic acquisition, thick slices along D only."""
    fd, fh, fw = (factor,) * 3 if isinstance(factor, int) else factor
    *lead, d, h, w = volumes.shape
    blocks = volumes.reshape(*lead, d // fd, fd, h // fh, fh, w // fw, fw)
    pooled = blocks.mean(axis=(-5, -3, -1))
    for axis, f in zip((-3, -2, -1), (fd, fh, fw)):
        pooled = np.repeat(pooled, f, axis=axis)
    return pooled.astype(volumes.dtype, copy=False)


def minmax(volume: np.ndarray) -> np.ndarray:
    """Min-max to [-1, 1] (the official ``mri_data_norm``); a constant volume maps to -1."""
    lo, hi = float(volume.min()), float(volume.max())
    return (2 * (volume - lo) / max(hi - lo, 1e-12) - 1).astype(np.float32)


def with_lr(hr: dict[str, np.ndarray], pool: int | tuple[int, int, int]) -> dict[str, np.ndarray]:
    """{"train": hr, ...} -> {"hr_train", "lr_train", "hr_val", ...} float32 arrays."""
    out = {}
    for split in SPLITS:
        volumes = np.ascontiguousarray(hr[split], dtype=np.float32)
        out[f"hr_{split}"], out[f"lr_{split}"] = volumes, pool_upsample(volumes, pool)
    return out


# ----------------------------------------------------------------------------- NIfTI


def nifti_array(image, name: str) -> np.ndarray:
    """A nibabel image -> its 3-D float64 array (a trailing singleton 4th axis dropped)."""
    data = np.asarray(image.get_fdata(), dtype=np.float64)
    if data.ndim == 4 and data.shape[-1] == 1:
        data = data[..., 0]
    if data.ndim != 3:
        raise ValueError(f"{name}: expected a 3-D volume, got shape {data.shape}")
    return data


def to_dhw(data: np.ndarray) -> np.ndarray:
    """nibabel's (x, y, z) order -> (D, H, W) = (z, x, y), as ``dataset_brats.py`` stacks axial slices."""
    return np.ascontiguousarray(np.moveaxis(data, -1, 0))


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

    data = nifti_array(nib.load(str(path)), str(path))
    d, h, w = shape
    return to_dhw(minmax(centre_crop(data, (h, w, d))))


def find_modality(folder: Path, modality: str) -> Path:
    hits = sorted(p for p in folder.iterdir() if p.name.endswith((f"{modality}.nii.gz", f"{modality}.nii")))
    if len(hits) != 1:
        raise ValueError(f"{folder}: expected one *{modality}.nii(.gz) file, found {[p.name for p in hits]}")
    return hits[0]


def load_brats(root: Path, cfg: DataConfig) -> dict[str, np.ndarray]:
    """BraTS 2021 layout: ``root/<subject>/<subject>_<modality>.nii.gz``; subjects sorted, the first
    ``nifti_train_fraction`` for training (the official 80/20 split) of which the last
    ``nifti_val_fraction`` (at least one) validate, the rest test."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"NIfTI folder {root} does not exist (data.nifti_dir is relative to data/)")
    subjects = sorted(p for p in root.iterdir() if p.is_dir())
    if len(subjects) < 3:
        raise ValueError(f"{root}: need at least three subject folders (train, val, test), found {len(subjects)}")
    hr = np.stack([load_nifti(find_modality(s, cfg.nifti_modality), cfg.shape) for s in subjects])
    n_fit = min(max(2, int(cfg.nifti_train_fraction * len(subjects))), len(subjects) - 1)
    n_val = min(max(1, round(cfg.nifti_val_fraction * n_fit)), n_fit - 1)
    return with_lr(
        {"train": hr[: n_fit - n_val], "val": hr[n_fit - n_val : n_fit], "test": hr[n_fit:]}, cfg.pool_factors
    )


# ----------------------------------------------------------------------------- MNI152 (real brain MRI)


def volume_from_nifti_gz(blob: bytes, name: str) -> np.ndarray:
    """Gzipped NIfTI-1 bytes -> (D, H, W) = (z, x, y) float32 in [-1, 1] (whole-volume min-max: the
    template's background, 0 in the file, maps to -1); anything else is a ``RawDataError`` naming ``name``."""
    import nibabel as nib
    from nibabel.spatialimages import HeaderDataError
    from nibabel.wrapstruct import WrapStructError

    try:
        image = nib.Nifti1Image.from_bytes(gzip.decompress(blob))
        data = nifti_array(image, name)
    except (OSError, EOFError, ValueError, HeaderDataError, WrapStructError) as error:
        raise raw_data.RawDataError(f"{name} is not a gzipped 3-D NIfTI-1 image ({error})") from None
    return to_dhw(minmax(data))


def read_mni152(template: str = "t1") -> np.ndarray:
    """The MNI152 2009a template (``MNI_MEMBERS``) from the pinned nilearn wheel, as (D, H, W) in [-1, 1]."""
    member = MNI_MEMBERS[template]
    return volume_from_nifti_gz(raw_data.archive_member(NILEARN_WHEEL, member), f"{NILEARN_WHEEL}:{member}")


def slab_splits(length: int, slab: int) -> dict[str, list[tuple[int, int]]]:
    """The [start, stop) slabs of ``slab`` voxels along an axis of ``length``, per split (``SPLIT_CYCLE``);
    a last, shorter slab is kept."""
    out: dict[str, list[tuple[int, int]]] = {split: [] for split in SPLITS}
    for k, start in enumerate(range(0, length, slab)):
        out[SPLIT_CYCLE[k % len(SPLIT_CYCLE)]].append((start, min(start + slab, length)))
    return out


def brain_crops(
    volume: np.ndarray,
    slabs: list[tuple[int, int]],
    n: int,
    shape: tuple[int, int, int],
    min_brain: float,
    rng: np.random.Generator,
    split: str = "",
) -> np.ndarray:
    """``n`` random ``shape`` crops of ``volume`` (D, H, W), each inside one of ``slabs`` along W and with at
    least ``min_brain`` of its voxels above the background (-1)."""
    d, h, w = shape
    fits = [(a, b) for a, b in slabs if b - a >= w]
    if not fits:
        raise ValueError(f"{split} split: no slab of {slabs} holds a crop {w} voxels wide")
    crops = []
    for _ in range(n * MAX_DRAWS_PER_CROP):
        a, b = fits[int(rng.integers(len(fits)))]
        z, x = int(rng.integers(volume.shape[0] - d + 1)), int(rng.integers(volume.shape[1] - h + 1))
        y = int(rng.integers(a, b - w + 1))
        crop = volume[z : z + d, x : x + h, y : y + w]
        if (crop > -1).mean() >= min_brain:
            crops.append(crop)
            if len(crops) == n:
                return np.stack(crops)
    raise ValueError(
        f"{split} split: found {len(crops)} of {n} crops with brain fraction >= {min_brain} in {n * MAX_DRAWS_PER_CROP} "
        "draws; lower data.mni_min_brain or the crop count"
    )


def load_mni152(cfg: DataConfig, seed: int) -> dict[str, np.ndarray]:
    """Train / val / test crops of the MNI152 template, from disjoint anterior-posterior slabs."""
    volume = read_mni152(cfg.mni_template)
    if any(v < s for v, s in zip(volume.shape, cfg.shape)):
        raise ValueError(f"crop {cfg.shape} does not fit the template {volume.shape}")
    slabs = slab_splits(volume.shape[2], cfg.mni_slab)
    counts = {"train": cfg.n_train, "val": cfg.n_val, "test": cfg.n_test}
    hr = {
        split: brain_crops(
            volume, slabs[split], counts[split], cfg.shape, cfg.mni_min_brain, np.random.default_rng([seed, i]), split
        )
        for i, split in enumerate(SPLITS)
    }
    return with_lr(hr, cfg.pool_factors)


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
    hr = np.stack([phantom(cfg, rng) for _ in range(cfg.n_train + cfg.n_val + cfg.n_test)])
    a, b = cfg.n_train, cfg.n_train + cfg.n_val
    return with_lr({"train": hr[:a], "val": hr[a:b], "test": hr[b:]}, cfg.pool_factors)
