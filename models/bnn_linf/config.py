"""Configuration of the L_{1,inf}-constrained binary network (defaults = the ``default`` scale).

No torch here: the registry imports this module to list methods and validate overrides.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from models.base import MethodConfig, RelPath, StrictModel

EcgNoise = Literal["white", "powerline", "baseline", "motion"]
DigitsNoise = Literal["gaussian", "salt_pepper"]
BeatsPerMinute = Annotated[float, Field(gt=0, le=300)]
NoiseLevel = Annotated[float, Field(gt=0, le=100)]  # in units of the signal std
Fraction = Annotated[float, Field(gt=0, le=1)]


class DataConfig(StrictModel):
    """Everything that shapes the prepared dataset (the DVC prepare stage depends on it only)."""

    # Synthetic ECG (neurokit2 ecgsyn): one heart-rate band per class, split by record.
    sampling_rate: int = Field(125, ge=50, le=1000)
    heart_rate_bands: tuple[tuple[BeatsPerMinute, BeatsPerMinute], ...] = ((55.0, 70.0), (85.0, 100.0), (115.0, 130.0))
    records_per_class: int = Field(30, ge=2, le=5000)
    record_seconds: float = Field(12.0, gt=0, le=3600)
    window_seconds: float = Field(4.0, gt=0, le=600)
    hop_seconds: float = Field(0.5, gt=0, le=600)
    test_records_fraction: float = Field(1 / 3, gt=0, lt=1)
    amplitude_jitter: float = Field(0.3, ge=0, lt=1)  # record gain drawn from U(1 - j, 1 + j)
    # Test-time environmental noise (neurokit2.signal_distort), amplitude in units of the signal std.
    ecg_noise_types: tuple[EcgNoise, ...] = ("white", "powerline", "baseline", "motion")
    ecg_noise_levels: tuple[NoiseLevel, ...] = (0.25, 0.5, 1.0)  # SNR 12, 6 and 0 dB
    noise_chunk_windows: int = Field(20, ge=1, le=200)  # windows concatenated per signal_distort call
    # A user-supplied ECG window set in the project's npz layout (X (n, length), y (n,)), relative to
    # the project's data/ folder; "" = simulate.
    ecg_npz: RelPath = ""

    # Second modality: scikit-learn digits (8x8), normalised, test-time Gaussian / salt-and-pepper noise.
    digits: bool = True
    digits_max_samples: int = Field(1797, ge=30, le=1797)
    digits_test_fraction: float = Field(0.3, gt=0, lt=1)
    digits_noise_types: tuple[DigitsNoise, ...] = ("gaussian", "salt_pepper")
    digits_gaussian_sigmas: tuple[NoiseLevel, ...] = (0.05, 0.1, 0.2)
    digits_salt_pepper_fractions: tuple[Fraction, ...] = (0.05, 0.1, 0.2)

    @model_validator(mode="after")
    def _check(self) -> DataConfig:
        if self.window_seconds > self.record_seconds:
            raise ValueError("window_seconds must not exceed record_seconds")
        if any(lo >= hi or lo <= 0 for lo, hi in self.heart_rate_bands) or len(self.heart_rate_bands) < 2:
            raise ValueError("heart_rate_bands: at least two (low, high) bands with 0 < low < high")
        if not self.ecg_noise_types or not self.ecg_noise_levels or min(self.ecg_noise_levels) <= 0:
            raise ValueError("ecg noise: at least one type and positive levels")
        if min(self.digits_gaussian_sigmas + self.digits_salt_pepper_fractions, default=1) <= 0:
            raise ValueError("digits noise levels must be positive")
        levels = {"gaussian": self.digits_gaussian_sigmas, "salt_pepper": self.digits_salt_pepper_fractions}
        if self.digits and len({len(levels[k]) for k in self.digits_noise_types}) != 1:
            raise ValueError("digits noise: give at least one type, each with the same number of levels")
        if max(self.digits_salt_pepper_fractions, default=0) > 1:
            raise ValueError("salt-and-pepper fractions must be <= 1")
        return self


class NetConfig(StrictModel):
    """A binary residual CNN: full-precision stem and head, ``blocks`` binary conv layers."""

    channels: int = Field(32, ge=2, le=1000)
    blocks: int = Field(4, ge=1, le=100)
    kernel: int = Field(5, ge=1, le=50)
    stem_kernel: int = Field(9, ge=1, le=100)
    stem_stride: int = Field(4, ge=1, le=50)


class Config(MethodConfig):
    SCALES: ClassVar[dict[str, dict]] = {
        "smoke": {
            "data.records_per_class": 4,
            "data.record_seconds": 8.0,
            "data.hop_seconds": 1.0,
            "data.ecg_noise_types": ("white",),
            "data.ecg_noise_levels": (0.5,),
            "data.noise_chunk_windows": 5,
            "data.digits_max_samples": 200,
            "data.digits_noise_types": ("gaussian",),
            "data.digits_gaussian_sigmas": (0.2,),
            "ecg_net.channels": 8,
            "ecg_net.blocks": 2,
            "digits_net.channels": 8,
            "epochs": 2,
            "digits_epochs": 2,
            "n_seeds": 1,
        },
        "paper": {
            # The paper trains ResNet-18/34 BNNs on CIFAR/ImageNet/MRI on GPUs; the closest this
            # project can run is a much larger synthetic ECG set, a wider, deeper binary net and more seeds.
            "data.records_per_class": 300,
            "data.record_seconds": 30.0,
            "ecg_net.channels": 64,
            "ecg_net.blocks": 8,
            "digits_net.channels": 64,
            "digits_net.blocks": 4,
            "epochs": 60,
            "digits_epochs": 60,
            "n_seeds": 5,
        },
    }

    data: DataConfig = DataConfig()
    ecg_net: NetConfig = NetConfig()
    digits_net: NetConfig = NetConfig(channels=16, blocks=2, kernel=3, stem_kernel=3, stem_stride=1)

    epochs: int = Field(12, ge=1, le=1000)  # brief: 15; the training loss is flat (~0.005) by epoch 8, so 12 saves time
    digits_epochs: int = Field(10, ge=1, le=1000)
    batch_size: int = Field(64, ge=1, le=10_000)
    lr: float = Field(3e-3, gt=0, le=10)
    n_seeds: int = Field(3, ge=1, le=50)  # seeds seed, seed+1, ...; every variant sees the same seeds

    # The method: lambda * sum_l smoothmax_i ||(alpha_l * B_l)_i||_1 (the L_{1,inf} norm of each binary layer).
    lambda_linf: float = Field(1e-3, ge=0, le=1e3)
    smooth_max_tau: float = Field(0.5, gt=0, le=1e3)
    # The SOTA-style comparator: lambda * sum_l ||alpha_l * B_l||_2 (spectral norm, an l2 Lipschitz proxy).
    lambda_spectral: float = Field(1e-3, ge=0, le=1e3)
