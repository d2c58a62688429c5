"""Configuration of the posterior-predictive SNR study (defaults = the ``default`` scale).

Model: latent z in R^d with prior N(0, sigma0^2 I), observations x | z ~ N(z, sigma^2 I); n training
points from z = 0, m test points from a mean shifted by ``shift`` in every coordinate.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from models.base import MethodConfig, RelPath, StrictModel

Dimension = Annotated[int, Field(ge=1, le=10_000)]
TestSize = Annotated[int, Field(ge=1, le=1_000_000)]
Shift = Annotated[float, Field(ge=0.0, le=100.0)]  # also rejects nan


class Setting(StrictModel):
    """One conjugate-Gaussian problem: latent dimension, test-set size, train/test mean shift."""

    d: Dimension
    m: TestSize
    shift: Shift


class DataConfig(StrictModel):
    """What ``prepare`` writes: every (setting, replicate) dataset of both parts."""

    n_train: int = Field(default=100, ge=1, le=1_000_000)
    sigma: float = Field(default=1.0, gt=0.0, le=1e6)  # observation noise
    sigma0: float = Field(default=1.0, gt=0.0, le=1e6)  # prior scale
    # Part 1 (theory vs simulation): one-factor sweeps around ``base``. The replicates of a sweep share
    # their noise (common random numbers), so a sweep changes one factor and nothing else.
    base: Setting = Setting(d=5, m=10, shift=0.0)
    sweep_d: tuple[Dimension, ...] = (1, 2, 5, 10, 20)
    sweep_m: tuple[TestSize, ...] = (5, 10, 20, 50, 100)
    sweep_shift: tuple[Shift, ...] = (0.0, 0.2, 0.4, 0.6)
    replicates: int = Field(default=5, ge=1, le=1000)
    # Part 2 (estimation error, MC vs learned IS); the setting with the largest Delta is "the hardest".
    estimate_settings: tuple[Setting, ...] = (
        Setting(d=10, m=10, shift=0.0),
        Setting(d=50, m=100, shift=0.0),
        Setting(d=10, m=100, shift=0.5),
        Setting(d=100, m=100, shift=0.3),
    )
    # Optional user-supplied .npz (x_train (n, d), x_test (m, d), sigma, sigma0) under data/, added to part 2.
    user_npz: RelPath = ""

    @model_validator(mode="after")
    def _check(self) -> DataConfig:
        for name in ("sweep_d", "sweep_m", "sweep_shift"):
            values = getattr(self, name)
            if len(values) < 2 or list(values) != sorted(set(values)):
                raise ValueError(f"data.{name} needs at least two strictly increasing values, got {values}")
        if not self.estimate_settings:
            raise ValueError("data.estimate_settings must name at least one setting")
        if len(set(self.estimate_settings)) != len(self.estimate_settings):
            raise ValueError("data.estimate_settings must be distinct")
        return self


class ProposalConfig(StrictModel):
    """The IS proposal r(z): a diagonal Gaussian initialised at q, fitted by Adam at test time."""

    steps: int = Field(default=300, ge=1, le=1_000_000)
    lr: float = Field(default=0.05, gt=0.0, le=10.0)
    batch: int = Field(default=16, ge=2, le=1_000_000)  # reparameterised samples per step
    val_every: int = Field(default=30, ge=1, le=10_000)
    val_batch: int = Field(default=256, ge=2, le=1_000_000)
    # "elbo": proxy (A), E_r[log q + log p(D*|z) - log r] (the claim's method). "chi2": proxy (B),
    # log mean(w^2) - 2 log mean(w) on the batch (reported next to it).
    proxies: tuple[Literal["elbo", "chi2"], ...] = ("elbo", "chi2")

    @model_validator(mode="after")
    def _check(self) -> ProposalConfig:
        if "elbo" not in self.proxies or len(set(self.proxies)) != len(self.proxies):
            raise ValueError(f"proposal.proxies must contain 'elbo' once (the claim's method), got {self.proxies}")
        return self


class Config(MethodConfig):
    SCALES = {
        "smoke": {
            "data.sweep_d": [1, 5, 20],
            "data.sweep_m": [10, 50],
            "data.sweep_shift": [0.0, 0.4],
            "data.replicates": 1,
            "data.estimate_settings": [{"d": 10, "m": 100, "shift": 0.5}],
            "snr_repeats": 4000,  # the 10 % theory check needs a few % standard error
            "estimate_samples": 1000,
            "estimate_repeats": 3,
            "sweep_max_samples": 10_000,
            "sweep_repeats": 1,
            "proposal.steps": 50,
            "proposal.val_every": 25,
            "proposal.proxies": ["elbo"],
        },
        "paper": {
            "data.sweep_d": [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000],
            "data.sweep_m": [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000],
            "data.sweep_shift": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0],
            "data.replicates": 20,
            "snr_repeats": 100_000,
            "estimate_repeats": 20,
            "sweep_max_samples": 1_000_000,
            "sweep_repeats": 20,
            "proposal.steps": 1000,
            "device": "auto",
        },
    }

    data: DataConfig = DataConfig()
    snr_samples: int = Field(default=10, ge=1, le=1_000_000)  # K of part 1
    snr_repeats: int = Field(default=20_000, ge=10, le=10_000_000)  # M estimates per dataset
    estimate_samples: int = Field(default=10_000, ge=1, le=100_000_000)  # K of the final IS estimate
    estimate_repeats: int = Field(default=10, ge=2, le=10_000)
    sweep_max_samples: int = Field(default=1_000_000, ge=10, le=1_000_000_000)  # simple-MC K sweep, hardest setting
    sweep_repeats: int = Field(default=2, ge=1, le=1000)
    proposal: ProposalConfig = ProposalConfig()
    chunk: int = Field(default=1 << 18, ge=1024, le=1 << 26)  # latent draws held in memory at once
    device: Literal["cpu", "cuda", "auto"] = "cpu"
