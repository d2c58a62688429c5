"""Configuration of the posterior-predictive SNR study (defaults = the ``default`` scale).

Parts 1-2: latent z in R^d with prior N(0, sigma0^2 I), observations x | z ~ N(z, sigma^2 I); n training
points from z = 0, m test points from a mean shifted by ``shift`` in every coordinate. Part 3 (``heavy``):
the same design with Student-t observations, whose optimal proposal is not Gaussian. Part 4 (``real``):
Bayesian linear regression on posteriordb data sets, random train/test splits.
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


REAL_DATASETS = ("kidiq", "earnings", "radon_mn", "mesquite", "kilpisjarvi_mod", "diamonds")
RealDataset = Literal["kidiq", "earnings", "radon_mn", "mesquite", "kilpisjarvi_mod", "diamonds"]


class HeavyConfig(StrictModel):
    """Part 3: Student-t observations (nu degrees of freedom) with the noise variance of the Gaussian model
    (scale sigma sqrt((nu - 2) / nu)), so only the tails differ; q = the Laplace approximation of p(z|D)."""

    nu: float = Field(default=3.0, gt=2.0, le=1000.0)  # > 2: the matched variance must exist
    settings: tuple[Setting, ...] = (Setting(d=10, m=100, shift=0.5), Setting(d=100, m=100, shift=0.3))
    quadrature_points: int = Field(default=2001, ge=101, le=100_001)

    @model_validator(mode="after")
    def _check(self) -> HeavyConfig:
        if len(set(self.settings)) != len(self.settings):
            raise ValueError("data.heavy.settings must be distinct")
        return self


class RealConfig(StrictModel):
    """Part 4: conjugate Bayesian linear regression on posteriordb data (standardised columns, beta ~ N(0, tau^2 I),
    sigma fixed at the training residual sd), ``splits`` random train/test splits per data set."""

    datasets: tuple[RealDataset, ...] = REAL_DATASETS
    splits: int = Field(default=3, ge=1, le=100)
    test_fraction: float = Field(default=0.5, gt=0.0, lt=1.0)
    prior_scale: float = Field(default=1.0, gt=0.0, le=1e6)  # tau, on standardised columns

    @model_validator(mode="after")
    def _check(self) -> RealConfig:
        if not self.datasets or len(set(self.datasets)) != len(self.datasets):
            raise ValueError(f"data.real.datasets must be distinct and non-empty, got {self.datasets}")
        return self


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
    # 20: at 5 the real m/n and shift trends were decided only 31-43 % of the time (docs/methods/ppd_snr.md)
    replicates: int = Field(default=20, ge=1, le=1000)
    # Part 2 (estimation error, MC vs learned IS); the setting with the largest Delta is "the hardest".
    estimate_settings: tuple[Setting, ...] = (
        Setting(d=10, m=10, shift=0.0),
        Setting(d=50, m=100, shift=0.0),
        Setting(d=10, m=100, shift=0.5),
        Setting(d=100, m=100, shift=0.3),
    )
    # "real": parts 1-3 plus the posteriordb regressions of part 4 (the default); "synthetic": parts 1-3 only.
    source: Literal["real", "synthetic"] = "real"
    heavy: HeavyConfig = HeavyConfig()
    real: RealConfig = RealConfig()
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
    """The IS proposal r(z): a Gaussian initialised at q (diagonal; full-rank for the regressions), fitted by
    Adam at test time; the learning rate is chosen from ``lr_grid`` on the validation loss."""

    steps: int = Field(default=1000, ge=1, le=1_000_000)  # most steps per fit (early stopping may end sooner)
    # 0.003 and 0.001 added below: at (0.01, 0.03, 0.1) every search chose the bottom point, at
    # (0.003, ..., 0.1) most still did (grid edges)
    lr_grid: tuple[Annotated[float, Field(gt=0.0, le=10.0)], ...] = (0.001, 0.003, 0.01, 0.03, 0.1)
    patience: int = Field(default=3, ge=1, le=1000)  # validation checks without improvement
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
        if not self.lr_grid or list(self.lr_grid) != sorted(set(self.lr_grid)):
            raise ValueError(f"proposal.lr_grid needs strictly increasing learning rates, got {self.lr_grid}")
        return self


class Config(MethodConfig):
    SCALES = {
        "smoke": {
            "data.sweep_d": [1, 5, 20],
            "data.sweep_m": [10, 50],
            "data.sweep_shift": [0.0, 0.4],
            "data.replicates": 2,  # >= 2 units: an interval with a spread (power is then defined)
            "data.estimate_settings": [{"d": 10, "m": 100, "shift": 0.5}],
            "data.heavy.settings": [{"d": 10, "m": 100, "shift": 0.5}],
            "data.heavy.quadrature_points": 801,
            "data.real.datasets": ["kidiq", "kilpisjarvi_mod"],
            "data.real.splits": 2,
            "snr_repeats": 4000,  # the 10 % theory check needs a few % standard error
            "estimate_samples": 1000,
            "estimate_repeats": 3,
            "sweep_max_samples": 10_000,
            "sweep_repeats": 1,
            "proposal.steps": 50,
            "proposal.val_every": 25,
            "proposal.lr_grid": [0.05],
            "proposal.proxies": ["elbo"],
        },
        "paper": {
            "data.sweep_d": [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000],
            "data.sweep_m": [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000],
            "data.sweep_shift": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0],
            "data.replicates": 20,
            "data.real.splits": 20,
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
    # M estimates per dataset; 40 000 so that the 10 % theory check reaches every Delta <= 2 replicate (at
    # 20 000, 3 of 214 such replicates had a predicted relative se just above 2.5 %)
    snr_repeats: int = Field(default=40_000, ge=10, le=10_000_000)
    estimate_samples: int = Field(default=10_000, ge=1, le=100_000_000)  # K of the final IS estimate
    estimate_repeats: int = Field(default=10, ge=2, le=10_000)
    heavy_repeats: int = Field(default=5, ge=2, le=10_000)  # part 3: each draw costs m * d t-densities
    sweep_max_samples: int = Field(default=1_000_000, ge=10, le=1_000_000_000)  # simple-MC K sweep, hardest setting
    sweep_repeats: int = Field(default=2, ge=1, le=1000)
    proposal: ProposalConfig = ProposalConfig()
    chunk: int = Field(default=1 << 18, ge=1024, le=1 << 26)  # latent draws held in memory at once
    device: Literal["cpu", "cuda", "auto"] = "cpu"
