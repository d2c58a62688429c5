"""Images in [0, 1] with integer labels, split into train / sampling pool / test.

The paper uses MNIST and CIFAR-10; offline we use scikit-learn's 8x8 digits. A user-supplied MNIST
in the torchvision raw layout (idx files, optionally gzipped) is read by :func:`load_mnist_idx`.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

SPLITS = {"train": 0, "pool": 1, "test": 2}
_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: Path) -> np.ndarray:
    """Parse one idx file (the MNIST format): zero bytes, dtype code, rank, big-endian sizes, data."""
    path = Path(path)
    raw = (gzip.open if path.suffix == ".gz" else open)(path, "rb").read()
    if raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise ValueError(f"{path} is not an idx file (magic {raw[:4].hex()})")
    rank = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(rank))
    data = np.frombuffer(raw, dtype=np.dtype(_IDX_DTYPES[raw[2]]), offset=4 + 4 * rank)
    if data.size != int(np.prod(shape)):
        raise ValueError(f"{path}: header says {shape} but holds {data.size} values")
    return data.reshape(shape)


def _find(folder: Path, stem: str) -> Path | None:
    for candidate in (
        folder / stem,
        folder / f"{stem}.gz",
        folder / "MNIST" / "raw" / stem,
        folder / "MNIST" / "raw" / f"{stem}.gz",
    ):
        if candidate.is_file():
            return candidate
    return None


def load_mnist_idx(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """All MNIST images found in ``folder`` (train and/or t10k) as float32 in [0, 1], labels int64."""
    images, labels = [], []
    for part in ("train", "t10k"):
        img, lab = _find(Path(folder), f"{part}-images-idx3-ubyte"), _find(Path(folder), f"{part}-labels-idx1-ubyte")
        if img is not None and lab is not None:
            images.append(read_idx(img).astype(np.float32) / 255.0)
            labels.append(read_idx(lab).astype(np.int64))
    if not images:
        raise FileNotFoundError(f"no MNIST idx files (train-images-idx3-ubyte, ...) under {folder}")
    return np.concatenate(images), np.concatenate(labels)


def load_digits01() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn digits as (n, 8, 8) float32 in [0, 1] (pixel values are 0..16)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    return (digits.images / 16.0).astype(np.float32), digits.target.astype(np.int64)


def split_labels(n: int, train_frac: float, pool_frac: float, seed: int) -> np.ndarray:
    """A seeded random assignment of n points to train (0), pool (1) and test (2)."""
    order = np.random.default_rng(seed).permutation(n)
    n_train, n_pool = int(round(train_frac * n)), int(round(pool_frac * n))
    split = np.full(n, SPLITS["test"], dtype=np.int64)
    split[order[:n_train]] = SPLITS["train"]
    split[order[n_train : n_train + n_pool]] = SPLITS["pool"]
    return split


def resize_nearest(images: np.ndarray, side: int) -> np.ndarray:
    """Nearest-neighbour resize of (n, h, w) images to (n, side, side): upsampling copies pixels."""
    h, w = images.shape[1:]
    rows = np.arange(side) * h // side
    cols = np.arange(side) * w // side
    return images[:, rows][:, :, cols]


def write_images(folder: Path, images: np.ndarray, labels: np.ndarray, split: np.ndarray) -> None:
    """Plain .npy files: byte-identical for the same seed (an .npz zip would stamp the time)."""
    for name, array in (("images", images.astype(np.float32)), ("labels", labels.astype(np.int64)), ("split", split)):
        np.save(Path(folder) / f"{name}.npy", array)


def read_split(folder: Path, name: str, side: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Flattened images (n, side*side) and labels of one split, optionally resized to ``side``."""
    mask = np.load(Path(folder) / "split.npy") == SPLITS[name]
    images, labels = np.load(Path(folder) / "images.npy")[mask], np.load(Path(folder) / "labels.npy")[mask]
    if side is not None and side != images.shape[1]:
        images = resize_nearest(images, side)
    return images.reshape(len(images), -1), labels
