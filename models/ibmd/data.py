"""Paired (x0 clean, x1 corrupted) data: the 2-D bimodal toy bridge, digits restoration, user pairs.

Arrays are float32; every file is an ``.npz`` with ``x0_train, x1_train, x0_val, x1_val, x0_test,
x1_test`` (plus labels for digits). The distillation stage reads ``x1_train`` and ``x1_val`` only.
The toy's test pairs are ``toy_test_blocks`` disjoint blocks of ``toy_test`` rows, one per training seed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .config import DataConfig

# ----------------------------------------------------------------------------- 2-D toy


def circle_means(radius: float, k: int = 8) -> np.ndarray:
    angles = 2 * np.pi * np.arange(k) / k
    return radius * np.stack([np.cos(angles), np.sin(angles)], 1)


def sample_toy_x0(n: int, cfg: DataConfig, rng: np.random.Generator) -> np.ndarray:
    """8 Gaussians (std ``toy_std``) on a circle of radius ``toy_radius``."""
    means = circle_means(cfg.toy_radius)
    return means[rng.integers(0, len(means), n)] + cfg.toy_std * rng.standard_normal((n, 2))


def corrupt_toy(x0: np.ndarray, cfg: DataConfig, rng: np.random.Generator) -> np.ndarray:
    """x1 = (x0_1 + noise, 0): the second coordinate is lost, so p(x0_2 | x1) is bimodal for 6 of 8 modes."""
    x1 = np.zeros_like(x0)
    x1[:, 0] = x0[:, 0] + cfg.toy_x1_noise * rng.standard_normal(len(x0))
    return x1


def sample_toy_posterior(x1: np.ndarray, cfg: DataConfig, rng: np.random.Generator) -> np.ndarray:
    """Exact draws of x0 ~ p(x0 | x1) (a Gaussian mixture): the oracle the metrics are compared with."""
    means = circle_means(cfg.toy_radius)
    s2, n2 = cfg.toy_std**2, cfg.toy_x1_noise**2
    a = x1[:, :1]  # (n, 1)
    log_w = -0.5 * (a - means[None, :, 0]) ** 2 / (s2 + n2)  # (n, 8): p(k | x1_1)
    w = np.exp(log_w - log_w.max(1, keepdims=True))
    w /= w.sum(1, keepdims=True)
    k = (rng.random((len(x1), 1)) > np.cumsum(w, 1)).sum(1).clip(max=len(means) - 1)
    gain = s2 / (s2 + n2)
    first = means[k, 0] + gain * (a[:, 0] - means[k, 0]) + np.sqrt(s2 * n2 / (s2 + n2)) * rng.standard_normal(len(x1))
    second = means[k, 1] + cfg.toy_std * rng.standard_normal(len(x1))
    return np.stack([first, second], 1)


def make_toy(cfg: DataConfig, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([seed, 0])
    x0 = sample_toy_x0(cfg.toy_train + cfg.toy_val + cfg.toy_test * cfg.toy_test_blocks, cfg, rng)
    x1 = corrupt_toy(x0, cfg, rng)
    return split_pairs(x0, x1, cfg.toy_train, cfg.toy_val)


# ----------------------------------------------------------------------------- digits


def pool_upsample(images: np.ndarray) -> np.ndarray:
    """(n, 8, 8) -> 2x2 average pool -> nearest upsample back to (n, 8, 8)."""
    n, h, w = images.shape
    pooled = images.reshape(n, h // 2, 2, w // 2, 2).mean((2, 4))
    return pooled.repeat(2, 1).repeat(2, 2)


def corrupt_digits(x0: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    """x0: (n, 64) in [-1, 1] -> pooled, upsampled, plus N(0, noise^2) per pixel."""
    low = pool_upsample(x0.reshape(-1, 8, 8)).reshape(len(x0), 64)
    return low + noise * rng.standard_normal(low.shape)


def make_digits(cfg: DataConfig, seed: int) -> dict[str, np.ndarray]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = digits.data / 8.0 - 1.0  # 0..16 -> [-1, 1]
    rng = np.random.default_rng([seed, 1])
    order = rng.permutation(len(images))
    n_test = int(round(cfg.digits_test_fraction * len(images)))
    n_val = int(round(cfg.digits_val_fraction * len(images)))
    test, val, train = order[:n_test], order[n_test : n_test + n_val], order[n_test + n_val :]
    out = {"clean_train": images[train], "label_train": digits.target[train]}
    splits = (
        ("train", train, cfg.digits_train_copies),
        ("val", val, 1),
        ("test", test, cfg.digits_test_copies),
    )
    for split, idx, copies in splits:
        x0 = np.tile(images[idx], (copies, 1))
        out[f"x0_{split}"] = x0
        out[f"x1_{split}"] = corrupt_digits(x0, cfg.digits_noise, rng)
        out[f"label_{split}_pairs"] = np.tile(digits.target[idx], copies)
    return {k: (v.astype(np.float32) if v.dtype.kind == "f" else v.astype(np.int64)) for k, v in out.items()}


# ----------------------------------------------------------------------------- user pairs


def split_pairs(x0: np.ndarray, x1: np.ndarray, n_train: int, n_val: int) -> dict[str, np.ndarray]:
    """Rows [0, n_train) train, the next n_val validation, the rest test."""
    f32 = lambda a: np.ascontiguousarray(a, dtype=np.float32)
    cuts = {"train": slice(0, n_train), "val": slice(n_train, n_train + n_val), "test": slice(n_train + n_val, None)}
    return {f"{x}_{split}": f32(a[rows]) for split, rows in cuts.items() for x, a in (("x0", x0), ("x1", x1))}


def load_pairs(path: Path, test_fraction: float, seed: int) -> dict[str, np.ndarray]:
    """A user-supplied paired set: ``.npz`` with ``x0`` (n, d) clean and ``x1`` (n, d) corrupted.

    Rows are shuffled with ``seed`` and split into train/validation/test (validation as large as
    a tenth of the rows); images are flattened to vectors.
    """
    with np.load(path) as archive:
        missing = {"x0", "x1"} - set(archive.files)
        if missing:
            raise ValueError(f"{path}: missing arrays {sorted(missing)} (need x0 and x1 of equal shape)")
        x0, x1 = archive["x0"], archive["x1"]
    if x0.shape != x1.shape or len(x0) < 10:
        raise ValueError(f"{path}: x0 {x0.shape} and x1 {x1.shape} must have the same shape and >= 10 rows")
    x0, x1 = x0.reshape(len(x0), -1), x1.reshape(len(x1), -1)
    if not (np.isfinite(x0).all() and np.isfinite(x1).all()):
        raise ValueError(f"{path}: non-finite values")
    order = np.random.default_rng([seed, 2]).permutation(len(x0))
    n_test = max(1, int(round(test_fraction * len(x0))))
    n_val = max(1, len(x0) // 10)
    return split_pairs(x0[order], x1[order], len(x0) - n_test - n_val, n_val)
