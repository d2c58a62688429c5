"""Noisy sequence classification data: the Free Spoken Digit recordings, or synthetic waveforms.

FSD (``load_fsd_archive`` for the committed ``recordings.tar``, ``load_fsd`` for a release folder):
16-bit 8 kHz clips looped or cropped to a fixed length (official), optionally decimated with an
anti-aliasing polyphase filter (the ``default`` scale's 8x down-sampling), and split 60/20/20
stratified by speaker.

Noise follows the official pipeline: Gaussian noise of std sigma is added to the *raw*
waveform (one seeded draw per noise level), and every split is then z-normalised with the
mean and std of the training split *at that same noise level*. The prepared files hold the
clean splits; the noise is a deterministic function of (seed, split, sigma) drawn when a split
is read, so one prepared dataset serves any noise grid (the paper's 14 levels included).
"""

from __future__ import annotations

import io
import re
import tarfile
import wave
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from .config import DataConfig

# (shape, cycles per sequence) of the ten synthetic classes; chirps sweep between two rates.
WAVEFORM_CLASSES: tuple[tuple[str, float, float], ...] = (
    ("sine", 3, 3),
    ("square", 3, 3),
    ("sawtooth", 3, 3),
    ("sine", 6, 6),
    ("square", 6, 6),
    ("sawtooth", 6, 6),
    ("sine", 10, 10),
    ("square", 10, 10),
    ("chirp", 2, 10),
    ("chirp", 10, 2),
)
SPLITS = ("train", "val", "test")
FSD_RATE = 8000


# ----------------------------------------------------------------------------- synthetic waveforms


def waveforms(labels: np.ndarray, length: int, rng: np.random.Generator, jitter: float) -> np.ndarray:
    """One waveform per label: random phase, amplitude in [0.5, 1.5], cycle count jittered by +-jitter."""
    n = len(labels)
    u = np.arange(length) / length  # time in sequence lengths
    phase = rng.uniform(0, 1, n)[:, None]
    amplitude = rng.uniform(0.5, 1.5, n)[:, None]
    scale = rng.uniform(1 - jitter, 1 + jitter, n)[:, None]
    start = np.array([WAVEFORM_CLASSES[y][1] for y in labels])[:, None] * scale
    end = np.array([WAVEFORM_CLASSES[y][2] for y in labels])[:, None] * scale
    cycles = start * u + 0.5 * (end - start) * u**2 + phase  # integral of a linear rate sweep
    frac = cycles % 1.0
    shapes = np.array([WAVEFORM_CLASSES[y][0] for y in labels])[:, None]
    x = np.where(
        shapes == "square",
        np.sign(np.sin(2 * np.pi * cycles)),
        np.where(shapes == "sawtooth", 2 * frac - 1, np.sin(2 * np.pi * cycles)),
    )
    return amplitude * x


def make_waveforms(cfg: DataConfig, seed: int) -> dict[str, np.ndarray]:
    """Clean splits, scaled so that the clean training set has unit variance."""
    rng = np.random.default_rng(seed)
    sizes = {"train": cfg.n_train, "val": cfg.n_val, "test": cfg.n_test}
    out: dict[str, np.ndarray] = {}
    for split in SPLITS:
        labels = rng.permutation(np.arange(sizes[split]) % cfg.n_classes)
        out[f"y_{split}"] = labels.astype(np.int64)
        out[f"X_{split}"] = waveforms(labels, cfg.length, rng, cfg.frequency_jitter)
    scale = out["X_train"].std()
    for split in SPLITS:
        out[f"X_{split}"] = out[f"X_{split}"] / scale
    return out


# ----------------------------------------------------------------------------- Free Spoken Digits


FSD_NAME = re.compile(r"^(\d)_([A-Za-z]+)_(\d+)\.wav$")


def read_wav(source: Path | bytes, name: str = "") -> np.ndarray:
    """Mono 16-bit PCM .wav (a path or its bytes) as float in [-1, 1) (what torchaudio's normalize=True returns)."""
    name = name or str(source)
    with wave.open(io.BytesIO(source) if isinstance(source, bytes) else str(source), "rb") as fh:
        if fh.getsampwidth() != 2:
            raise ValueError(f"{name}: only 16-bit PCM is supported")
        if fh.getframerate() != FSD_RATE:
            raise ValueError(f"{name}: sample rate {fh.getframerate()} != {FSD_RATE}")
        audio = np.frombuffer(fh.readframes(fh.getnframes()), dtype="<i2").astype(np.float64) / 32768.0
        if audio.size == 0:
            raise ValueError(f"{name}: no samples")
        return audio.reshape(-1, fh.getnchannels())[:, 0]


def loop_or_crop(audio: np.ndarray, length: int) -> np.ndarray:
    """Short clips are repeated, long ones cut, to exactly ``length`` samples (official)."""
    return np.tile(audio, -(-length // len(audio)))[:length]


def fsd_clips(
    clips: Iterable[tuple[str, bytes | Path]], length: int, every_nth: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X (n, length), digit labels, speaker names) from (file name, wav) pairs, in sorted name order."""
    named = sorted((Path(name).name, wav) for name, wav in clips if FSD_NAME.match(Path(name).name))
    named = named[::every_nth]
    if not named:
        raise FileNotFoundError("no <digit>_<speaker>_<index>.wav recordings found")
    X, y, speakers = [], [], []
    for name, wav in named:
        X.append(loop_or_crop(read_wav(wav if isinstance(wav, bytes) else Path(wav), name), length))
        digit, speaker, _ = FSD_NAME.match(name).groups()
        y.append(int(digit))
        speakers.append(speaker)
    return np.stack(X), np.array(y, dtype=np.int64), np.array(speakers)


def load_fsd(folder: Path, length: int = FSD_RATE, every_nth: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The FSD release folder (``recordings/<digit>_<speaker>_<index>.wav``), clips looped/cropped to ``length``."""
    paths = list(Path(folder).rglob("*.wav"))
    if not any(FSD_NAME.match(p.name) for p in paths):
        raise FileNotFoundError(f"no <digit>_<speaker>_<index>.wav files under {folder}")
    return fsd_clips(((p.name, p) for p in paths), length, every_nth)


def load_fsd_archive(
    archive: Path, length: int = FSD_RATE, every_nth: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The same from a tar of the release's ``recordings/`` folder (the committed ``fsdd/recordings.tar``)."""
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.isfile() and FSD_NAME.match(Path(m.name).name)]
        clips = [(m.name, tar.extractfile(m).read()) for m in members]
    if not clips:
        raise FileNotFoundError(f"no <digit>_<speaker>_<index>.wav members in {archive}")
    return fsd_clips(clips, length, every_nth)


def downsample(X: np.ndarray, factor: int) -> np.ndarray:
    """Decimate along time by ``factor`` with scipy's anti-aliasing polyphase FIR (identity for 1)."""
    if factor == 1:
        return X
    from scipy.signal import resample_poly

    return resample_poly(X, 1, factor, axis=-1)


def split_fsd(X: np.ndarray, y: np.ndarray, speakers: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """60/20/20 split stratified by speaker (official protocol; our seeds)."""
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(y))
    train, rest = train_test_split(idx, train_size=0.6, stratify=speakers, random_state=seed)
    val, test = train_test_split(rest, train_size=0.5, stratify=speakers[rest], random_state=seed + 1)
    return {
        f"{k}_{split}": arr[ids] for split, ids in zip(SPLITS, (train, val, test)) for k, arr in (("X", X), ("y", y))
    }


# ----------------------------------------------------------------------------- noise and normalisation


def noisy(arrays: dict[str, np.ndarray], split: str, sigma: float, seed: int) -> np.ndarray:
    """Raw split plus Gaussian noise of std sigma; the draw is fixed by (seed, split, sigma)."""
    x = arrays[f"X_{split}"].astype(np.float64)
    if sigma == 0:
        return x
    rng = np.random.default_rng([seed, 7919, SPLITS.index(split), int(round(sigma * 1e9))])
    return x + sigma * rng.standard_normal(x.shape)


def normalised(arrays: dict[str, np.ndarray], split: str, sigma: float, seed: int) -> np.ndarray:
    """Split at noise sigma, z-normalised with the training split's statistics at the same noise (official)."""
    train = noisy(arrays, "train", sigma, seed)
    x = train if split == "train" else noisy(arrays, split, sigma, seed)
    return ((x - train.mean()) / train.std()).astype(np.float32)
