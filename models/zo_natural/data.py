"""Data: K-dimensional digit features, from scikit-learn's digits or from MNIST/FMNIST IDX files.

Features follow the precursor's recipe in spirit (a K-dimensional linear transform of the image,
each input scaled to norm sqrt(K)): K-1 principal components, standardised, plus one constant
channel, which plays the part of the FFT's DC bin and breaks the x -> -x symmetry that an
intensity read-out of an odd network would otherwise have.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from models.base import DatasetRef, dataset_meta, user_data_path, write_manifest

FILE = "features.npz"
IDX_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}
_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: Path) -> np.ndarray:
    """One IDX file (the format torchvision reads for MNIST/FMNIST), plain or gzipped."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise ValueError(f"{path}: not an IDX file (bad magic number {raw[:4].hex()})")
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    data = np.frombuffer(raw, dtype=np.dtype(_IDX_DTYPES[raw[2]]), offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise ValueError(f"{path}: header says {shape} but holds {data.size} values")
    return data.reshape(shape)


def load_idx_dir(folder: Path) -> dict[str, np.ndarray]:
    """The four MNIST/FMNIST files of ``folder`` as flat float images and int labels."""
    folder = Path(folder)
    out = {}
    for key, stem in IDX_FILES.items():
        candidates = [folder / stem, folder / f"{stem}.gz", folder / stem.replace("-idx", ".idx")]
        path = next((p for p in candidates if p.is_file()), None)
        if path is None:
            raise FileNotFoundError(f"{folder}: missing {stem}[.gz] (MNIST/FMNIST IDX format expected)")
        array = read_idx(path)
        out[key] = array.reshape(len(array), -1).astype(np.float64) if key.startswith("x") else array.astype(np.int64)
    return out


def load_digits_split(test_fraction: float, seed: int) -> dict[str, np.ndarray]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        digits.data.astype(np.float64),
        digits.target.astype(np.int64),
        test_size=test_fraction,
        random_state=seed,
        stratify=digits.target,
    )
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}


def featurize(x_train: np.ndarray, x_test: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """K-1 standardised principal components (fitted on train) + a constant, scaled to norm sqrt(K)."""
    mean = x_train.mean(0)
    _, _, vt = np.linalg.svd(x_train - mean, full_matrices=False)
    components = vt[: k - 1]
    train_pc = (x_train - mean) @ components.T
    scale = train_pc.std(0) + 1e-12

    def transform(x: np.ndarray) -> np.ndarray:
        pcs = ((x - mean) @ components.T) / scale
        feats = np.concatenate([pcs, np.ones((len(x), 1))], axis=1)
        return feats * np.sqrt(k) / np.linalg.norm(feats, axis=1, keepdims=True)

    return transform(x_train), transform(x_test)


def prepare(cfg, data_dir: Path) -> DatasetRef:
    d = cfg.data
    if d.source == "digits":
        import sklearn

        split = load_digits_split(d.test_fraction, cfg.seed)
        generator = "sklearn.datasets.load_digits"
        provenance = (
            f"scikit-learn {sklearn.__version__} load_digits (bundled 8x8 digits), stratified "
            f"{d.test_fraction:g} test split with seed {cfg.seed}"
        )
    else:
        split = load_idx_dir(user_data_path(d.idx_dir))
        generator = f"IDX files from {d.idx_dir}"
        provenance = f"user-supplied MNIST/FMNIST IDX files in data/{d.idx_dir} (their own train/test split)"
    rng = np.random.default_rng(cfg.seed)
    for part, cap in (("train", d.max_train), ("test", d.max_test)):
        if cap and cap < len(split[f"y_{part}"]):
            keep = np.sort(rng.choice(len(split[f"y_{part}"]), cap, replace=False))
            split[f"x_{part}"], split[f"y_{part}"] = split[f"x_{part}"][keep], split[f"y_{part}"][keep]
    n_pixels = split["x_train"].shape[1]
    if d.n_features - 1 > min(n_pixels, len(split["x_train"])):
        raise ValueError(f"data.n_features={d.n_features} needs at least {d.n_features - 1} pixels and train images")
    x_train, x_test = featurize(split["x_train"], split["x_test"], d.n_features)
    np.savez(Path(data_dir) / FILE, x_train=x_train, y_train=split["y_train"], x_test=x_test, y_test=split["y_test"])
    caps = (
        f", subsampled to {d.max_train or 'all'} train / {d.max_test or 'all'} test"
        if d.max_train or d.max_test
        else ""
    )
    provenance += f"; {d.n_features}-d PCA features{caps}"
    # Both sources are a benchmark's own images; ``dataset`` keeps the config's name for which one.
    return write_manifest(
        data_dir,
        meta={
            "generator": generator,
            "synthetic": False,
            "dataset": d.source,
            "n_features": d.n_features,
            "n_train": int(len(x_train)),
            "n_test": int(len(x_test)),
            "n_classes": int(split["y_train"].max() + 1),
            **dataset_meta("real", provenance),
        },
    )


def load(data: DatasetRef) -> dict[str, np.ndarray]:
    with np.load(data.file(FILE)) as f:
        return {k: f[k] for k in f.files}
