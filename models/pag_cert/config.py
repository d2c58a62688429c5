"""Configuration of pag_cert. Field defaults are the ``default`` scale (about 1 min on 2 CPU cores)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from models.base import MethodConfig, RelPath, StrictModel

Width = Annotated[int, Field(ge=1, le=5000)]
Side = Annotated[int, Field(ge=1, le=256)]  # pixels per side of an upsampled image


class DataConfig(StrictModel):
    """Which images, and how they are split (this section alone drives the DVC prepare stage)."""

    source: Literal["digits", "mnist"] = "digits"  # "mnist": read idx files from mnist_dir
    # Folder holding MNIST idx files (torchvision raw layout), relative to data/, when source="mnist".
    mnist_dir: RelPath = ""
    train_frac: float = Field(0.5, gt=0, lt=1)  # classifier training split
    pool_frac: float = Field(0.25, gt=0, lt=1)  # the "validation" split the sampler resamples; the rest is test

    @model_validator(mode="after")
    def _leaves_a_test_split(self) -> DataConfig:
        if self.train_frac + self.pool_frac >= 1:
            raise ValueError("train_frac + pool_frac must leave a test split (< 1)")
        if self.source == "mnist" and not self.mnist_dir:
            raise ValueError("data.source='mnist' needs data.mnist_dir")
        return self


class TrainConfig(StrictModel):
    """SGD recipe of the official network_training.py (momentum, weight decay, cosine schedule)."""

    epochs: int = Field(30, ge=1, le=2000)
    batch_size: int = Field(64, ge=1, le=5000)
    lr: float = Field(0.1, gt=0, le=10)
    momentum: float = Field(0.9, ge=0, lt=1)
    weight_decay: float = Field(5e-4, ge=0, le=1)


class GuaranteeConfig(StrictModel):
    """The PAG statement: Pr(rob < rho | conf >= kappa) <= epsilon for all kappa <= kappa_max, w.p. >= 1 - delta."""

    epsilon: float = Field(0.05, gt=0, lt=1)  # bound on the conditional counterexample rate
    p_min: float = Field(0.1, gt=0, le=1)  # certified minimum mass Pr(conf >= kappa_max)
    delta: float = Field(0.01, gt=0, lt=1)  # total failure probability; eps-net and Chernoff get delta/2 each
    vc_dim: int = Field(2, ge=1, le=20)  # VC dimension of the quality-space counterexample regions
    control_divisor: int = Field(50, ge=2, le=500)  # the under-sampled control draws s // control_divisor points


class SamplingConfig(StrictModel):
    """Approximate i.i.d. draws from D: resample a split with replacement, add Gaussian noise, clip to [0,1]."""

    noise_std: float = Field(1 / 32, ge=0, le=10)  # SAMPLING_GN_STD of the official code
    repetitions: int = Field(20, ge=1, le=500)  # independent certification samples (sampling seeds)
    test_resamples: int = Field(
        400_000, ge=100, le=50_000_000
    )  # held-out resample of the test split (the paper's check)
    pool_resamples: int = Field(100_000, ge=100, le=50_000_000)  # fresh held-out resample of the pool split: D itself
    chunk: int = Field(32_768, ge=64, le=500_000)  # points per oracle batch


class MLPConfig(StrictModel):
    """The MLP certified with a PGD (optimistic) and an interval-bound (conservative) oracle."""

    hidden: tuple[Width, ...] = (32,)
    train: TrainConfig = TrainConfig()
    repetitions: int = Field(10, ge=1, le=500)
    test_resamples: int = Field(100_000, ge=100, le=50_000_000)
    pool_resamples: int = Field(50_000, ge=100, le=50_000_000)
    pgd_eps: float = Field(0.5, gt=0, le=100)  # l_inf ball of the attack; rob = +inf when it never flips
    pgd_alpha: float = Field(0.005, gt=0, le=100)
    pgd_steps: int = Field(100, ge=1, le=10_000)
    ibp_max_radius: float = Field(0.25, gt=0, le=100)
    ibp_steps: int = Field(6, ge=1, le=100)  # bisection halvings


class Config(MethodConfig):
    SCALES = {
        "smoke": {
            "guarantee.epsilon": 0.1,
            "guarantee.p_min": 0.5,  # net e = 0.05 -> s = 1,205
            "sampling.repetitions": 2,
            "sampling.test_resamples": 20_000,
            "sampling.pool_resamples": 5_000,
            "upsample_sides": (16,),
            "linear.epochs": 2,
            "mlp.train.epochs": 2,
            "mlp.repetitions": 2,
            "mlp.test_resamples": 4_000,
            "mlp.pool_resamples": 2_000,
            "mlp.pgd_steps": 20,
            "mlp.pgd_alpha": 0.025,
        },
        "paper": {  # the official MNIST feed-forward PGD setting (784-50-10-10 when data.source="mnist")
            "guarantee.epsilon": 0.01,
            "guarantee.p_min": 0.01,  # net e = 1e-4 -> s = 989,533
            "sampling.repetitions": 25,
            "sampling.test_resamples": 4_000_000,
            "sampling.pool_resamples": 4_000_000,
            "linear.epochs": 120,
            "linear.batch_size": 256,
            "mlp.hidden": (50, 10),
            "mlp.train.epochs": 120,
            "mlp.train.batch_size": 256,
            "mlp.repetitions": 25,
            "mlp.test_resamples": 4_000_000,
            "mlp.pool_resamples": 4_000_000,
            "mlp.pgd_eps": 1.0,
            "mlp.pgd_alpha": 0.5 / 256,
            "mlp.pgd_steps": 512,
        },
    }

    data: DataConfig = DataConfig()
    guarantee: GuaranteeConfig = GuaranteeConfig()
    sampling: SamplingConfig = SamplingConfig()
    upsample_sides: tuple[Side, ...] = (16, 32)  # dimension-independence study: same s at d = side**2
    linear: TrainConfig = TrainConfig()
    mlp: MLPConfig = MLPConfig()
