"""Data for the DBNN noise-robustness study: synthetic ECG, digits, test-time environmental noise.

* ECG: ``neurokit2.ecg_simulate(method="ecgsyn")`` records, one heart-rate band per class, random
  heart-rate variability and record gain, cut into overlapping windows; train/test split by
  record (windows of one record never straddle the split).
* Environmental noise: ``neurokit2.signal_distort`` white (band-limited) noise, 50 Hz powerline,
  baseline wander and motion-artifact bursts, amplitude in units of the signal's std.
* Digits: scikit-learn's 8x8 digits in [0, 1] with Gaussian and salt-and-pepper noise added in
  [0, 1] units before the same normalisation as the clean images.
* Loaders for user-supplied data: ECG windows in the project's npz layout, and the image-folder
  layout of the paper's Kaggle brain-tumor MRI set (``Training/<class>/*.jpg``).
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np

from models.base import user_data_path

from .config import DataConfig

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp")


# ----------------------------------------------------------------------------- ECG


def simulate_ecg_records(cfg: DataConfig, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Records (n_records, n_samples), their class and heart rate; classes are heart-rate bands."""
    import neurokit2 as nk

    rng = np.random.default_rng(seed)
    records, labels, rates = [], [], []
    for label, (low, high) in enumerate(cfg.heart_rate_bands):
        for _ in range(cfg.records_per_class):
            heart_rate = rng.uniform(low, high)
            ecg = nk.ecg_simulate(
                duration=cfg.record_seconds,
                sampling_rate=cfg.sampling_rate,
                heart_rate=heart_rate,
                heart_rate_std=rng.uniform(1.0, 3.0),
                method="ecgsyn",
                random_state=int(rng.integers(2**31 - 1)),
            )
            gain = rng.uniform(1 - cfg.amplitude_jitter, 1 + cfg.amplitude_jitter)
            records.append(gain * np.asarray(ecg, dtype=np.float64))
            labels.append(label)
            rates.append(heart_rate)
    return np.stack(records), np.array(labels, dtype=np.int64), np.array(rates)


def cut_windows(records: np.ndarray, window: int, hop: int) -> tuple[np.ndarray, np.ndarray]:
    """Overlapping windows of every record and the index of the record each came from."""
    starts = np.arange(0, records.shape[1] - window + 1, hop)
    windows = np.stack([records[:, s : s + window] for s in starts], axis=1)  # (records, starts, window)
    record_of = np.repeat(np.arange(len(records)), len(starts))
    return windows.reshape(-1, window), record_of


def split_groups(groups: np.ndarray, labels: np.ndarray, test_fraction: float, seed: int) -> np.ndarray:
    """Boolean test mask that keeps every group (record) on one side, stratified by label."""
    rng = np.random.default_rng(seed)
    test = np.zeros(len(groups), dtype=bool)
    for label in np.unique(labels):
        members = np.unique(groups[labels == label])
        n_test = max(1, int(round(test_fraction * len(members))))
        if n_test >= len(members):
            raise ValueError(f"class {label}: {len(members)} records cannot be split into train and test")
        chosen = rng.choice(members, size=n_test, replace=False)
        test |= np.isin(groups, chosen)
    return test


def load_ecg_windows(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A user-supplied window set: npz with ``X`` (n, length) float, ``y`` (n,) int, optional ``record``."""
    with np.load(path) as archive:
        if "X" not in archive or "y" not in archive:
            raise ValueError(f"{path}: expected arrays 'X' (n, length) and 'y' (n,), found {sorted(archive)}")
        X = np.asarray(archive["X"], dtype=np.float32)
        y = np.asarray(archive["y"]).astype(np.int64)
        groups = np.asarray(archive["record"]) if "record" in archive else np.arange(len(y))
    if X.ndim != 2 or y.shape != (len(X),) or groups.shape != y.shape:
        raise ValueError(f"{path}: X must be (n, length) and y, record (n,); got {X.shape}, {y.shape}")
    return X, y, groups


def distort_ecg(X: np.ndarray, kind: str, level: float, sampling_rate: int, chunk: int, seed: int) -> np.ndarray:
    """``signal_distort`` noise of one kind at ``level`` x signal std, applied to chunks of windows.

    Chunks of consecutive windows are distorted as one signal so that slow noise (baseline
    wander) and motion bursts have realistic durations. neurokit2 only synthesises tones and
    noise up to fs / 10 (a 50 Hz powerline needs 500 Hz), so each chunk is linearly upsampled,
    distorted, and the noise is read back at the original samples (50 Hz is below the 62.5 Hz
    Nyquist limit of 125 Hz data: no aliasing).
    """
    import neurokit2 as nk

    factor = max(1, math.ceil(500 / sampling_rate))
    rng = np.random.default_rng(seed)
    out = np.empty_like(X)
    for start in range(0, len(X), chunk):
        block = X[start : start + chunk]
        signal = block.reshape(-1).astype(np.float64)
        fine = np.interp(np.arange((len(signal) - 1) * factor + 1) / factor, np.arange(len(signal)), signal)
        fine_rate = sampling_rate * factor
        kwargs: dict = dict(sampling_rate=fine_rate, silent=True, random_state=int(rng.integers(2**31 - 1)))
        if kind == "white":  # the broadest band neurokit2 synthesises: up to fs_fine / 10 (50 Hz)
            kwargs.update(noise_shape="gaussian", noise_amplitude=level, noise_frequency=fine_rate / 10)
        elif kind == "powerline":
            kwargs.update(powerline_amplitude=level, powerline_frequency=50)
        elif kind == "baseline":  # respiration-like wander around 0.5 Hz
            kwargs.update(noise_shape="gaussian", noise_amplitude=level, noise_frequency=0.5)
        elif kind == "motion":  # about one 10 Hz Laplace burst per window
            # neurokit2 uses artifacts_amplitude twice (Laplace scale and multiplier): sqrt keeps it linear in level.
            kwargs.update(artifacts_amplitude=math.sqrt(level), artifacts_frequency=10, artifacts_number=len(block))
        else:
            raise ValueError(f"unknown ECG noise {kind!r}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            noise = nk.signal_distort(fine, **kwargs) - fine
        # signal_distort scales by the std of what it is given: rescale to the original chunk's std.
        noise = noise[::factor] * (np.std(signal, ddof=1) / np.std(fine, ddof=1))
        out[start : start + chunk] = (signal + noise).astype(X.dtype).reshape(block.shape)
    return out


def make_ecg(cfg: DataConfig, seed: int) -> dict[str, np.ndarray]:
    """Normalised train/test windows and every noisy copy of the test set."""
    window = int(round(cfg.window_seconds * cfg.sampling_rate))
    if not cfg.ecg_npz:
        records, record_labels, _ = simulate_ecg_records(cfg, seed)
        X, record_of = cut_windows(records, window, max(1, int(round(cfg.hop_seconds * cfg.sampling_rate))))
        y, groups = record_labels[record_of], record_of
    else:
        X, y, groups = load_ecg_windows(user_data_path(cfg.ecg_npz))
    test = split_groups(groups, y, cfg.test_records_fraction, seed)
    # Normalise with the training windows' statistics: noise levels are then in units of signal std.
    mean, std = float(X[~test].mean()), float(X[~test].std())
    X = ((X - mean) / std).astype(np.float32)
    X_test = X[test]
    noisy = np.stack(
        [
            np.stack(
                [
                    distort_ecg(X_test, kind, level, cfg.sampling_rate, cfg.noise_chunk_windows, seed + 1000 * t + l)
                    for l, level in enumerate(cfg.ecg_noise_levels)
                ]
            )
            for t, kind in enumerate(cfg.ecg_noise_types)
        ]
    )
    return dict(
        X_train=X[~test],
        y_train=y[~test],
        X_test=X_test,
        y_test=y[test],
        X_test_noisy=noisy,
        record_train=groups[~test],
        record_test=groups[test],
        norm=np.array([mean, std]),
    )


# ----------------------------------------------------------------------------- digits


def add_image_noise(images: np.ndarray, kind: str, level: float, rng: np.random.Generator) -> np.ndarray:
    """Gaussian (std ``level``) or salt-and-pepper (fraction ``level`` of pixels) noise on [0, 1] images."""
    if kind == "gaussian":
        return images + rng.normal(0.0, level, images.shape)
    if kind == "salt_pepper":
        hit = rng.random(images.shape) < level
        salt = rng.random(images.shape) < 0.5
        return np.where(hit, salt.astype(images.dtype), images)
    raise ValueError(f"unknown image noise {kind!r}")


def make_digits(cfg: DataConfig, seed: int) -> dict[str, np.ndarray]:
    """Normalised 8x8 digits, stratified split, and noisy copies of the test set (noise in [0, 1] units)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images, y = digits.images / 16.0, digits.target.astype(np.int64)
    if cfg.digits_max_samples < len(y):
        keep, _ = train_test_split(np.arange(len(y)), train_size=cfg.digits_max_samples, stratify=y, random_state=seed)
        images, y = images[np.sort(keep)], y[np.sort(keep)]
    train, test = train_test_split(np.arange(len(y)), test_size=cfg.digits_test_fraction, stratify=y, random_state=seed)
    mean, std = float(images[train].mean()), float(images[train].std())
    rng = np.random.default_rng(seed + 7)
    levels = digits_noise_levels(cfg)
    noisy = np.stack(
        [
            np.stack([add_image_noise(images[test], kind, lv, rng) for lv in levels[kind]])
            for kind in cfg.digits_noise_types
        ]
    )

    def norm(a: np.ndarray) -> np.ndarray:
        return ((a - mean) / std).astype(np.float32)

    return dict(
        X_train=norm(images[train]),
        y_train=y[train],
        X_test=norm(images[test]),
        y_test=y[test],
        X_test_noisy=norm(noisy),
        norm=np.array([mean, std]),
    )


def digits_noise_levels(cfg: DataConfig) -> dict[str, tuple[float, ...]]:
    levels = {"gaussian": cfg.digits_gaussian_sigmas, "salt_pepper": cfg.digits_salt_pepper_fractions}
    n_levels = {len(levels[k]) for k in cfg.digits_noise_types}
    if len(n_levels) > 1:
        raise ValueError("digits noise: every noise type needs the same number of levels")
    return levels


# ----------------------------------------------------------------------------- official image layout


def load_image_folder(root: Path, size: int = 64) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Images under ``root/<class>/`` (the Kaggle brain-tumor MRI layout): grayscale in [0, 1], resized."""
    from PIL import Image

    root = Path(root)
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    if not classes:
        raise ValueError(f"{root}: expected one sub-folder of images per class")
    images, labels = [], []
    for label, name in enumerate(classes):
        for path in sorted((root / name).iterdir()):
            if path.suffix.lower() in IMAGE_SUFFIXES:
                with Image.open(path) as img:
                    gray = img.convert("L").resize((size, size), Image.BILINEAR)
                images.append(np.asarray(gray, dtype=np.float32) / 255.0)
                labels.append(label)
    return np.stack(images), np.array(labels, dtype=np.int64), classes
