"""Data for SDCIB: the official ``.npz`` multi-view layout, its loader, and an ESP-shaped generator.

Official layout (``dataloader.py`` of ShizheHu/ICML25_Code_SDCIB reads ``Dataset/<name>.npz``):

    n_views   int scalar, V
    labels    (N,) class labels (any integer coding; remapped to 0..K-1 here)
    view_0 .. view_{V-1}   (N, d_v) features, cast to float32

The ESP-Game image-tag set cannot be downloaded here. ``make_esp_like`` writes a two-view set of
that shape: view 0 is a dense nonnegative image descriptor, view 1 a sparse bag of tag counts.
Both views are driven by a shared latent code carrying the class plus a nuisance code private to
each view (independent across views), which is what cross-view contrast is supposed to discard.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .config import DataConfig


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


def class_sizes(n_samples: int, n_clusters: int, rng: np.random.Generator) -> np.ndarray:
    """Moderately imbalanced class sizes (ratio ~2:1 largest to smallest, like Event's 250:137)."""
    weights = rng.permutation(np.linspace(0.67, 1.33, n_clusters))
    sizes = np.floor(weights / weights.sum() * n_samples).astype(int)
    sizes[: n_samples - sizes.sum()] += 1
    return sizes


def make_esp_like(cfg: DataConfig, seed: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Two views (image features, tag counts) of ``n_samples`` items in ``n_clusters`` classes."""
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
