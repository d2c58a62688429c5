"""Configuration of the Sleeping RL reproduction (defaults = the ``default`` scale)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from models.base import MethodConfig, RelPath, StrictModel


class Setting(StrictModel):
    """One StochasticFrozenLake instance: a g x g grid whose cells are safe with probability p."""

    name: str = Field(min_length=1, pattern=r"^[a-z0-9_]+$")
    grid: int = Field(ge=2, le=6)
    safe_prob: float = Field(gt=0.0, le=1.0)
    # "main"/"second" are where the paper's claim is checked; "control" is p = 1 (plain RL).
    role: Literal["main", "second", "control", "extra"] = "extra"


MAIN = Setting(name="g2_p025", grid=2, safe_prob=0.25, role="main")
SECOND = Setting(name="g3_p05", grid=3, safe_prob=0.5, role="second")
CONTROL = Setting(name="g2_p1", grid=2, safe_prob=1.0, role="control")


class DataConfig(StrictModel):
    """What ``prepare`` writes: the environments (official config format) and their exact DP values."""

    settings: tuple[Setting, ...] = (MAIN, SECOND, CONTROL)
    horizon: int = Field(default=10, ge=1, le=50)
    # Optional folder of the official repo's ``configs/*.json``, relative to the project's data/
    # folder; when set, its files define the settings instead of ``settings`` (grid, no_hole_prob
    # and H are read; K and trials are noted).
    official_config_dir: RelPath = ""

    @model_validator(mode="after")
    def _unique_names(self) -> DataConfig:
        names = [s.name for s in self.settings]
        if len(set(names)) != len(names):
            raise ValueError(f"setting names must be unique, got {names}")
        if not self.settings and not self.official_config_dir:
            raise ValueError("at least one setting (or an official_config_dir) is required")
        return self


class Config(MethodConfig):
    SCALES = {
        "smoke": {
            "data.settings": [MAIN.model_dump(), CONTROL.model_dump()],
            "episodes": 300,
            # Two seeds: one unit gives no interval (and no power estimate for an inconclusive criterion).
            "n_seeds": 2,
            "beta_sweep": (0.1, 1.0),
        },
        "paper": {
            # The repository's grid: g in {2,3,4} x p in {0.25, 0.5, 1}, K = 200k, 4 trials, theory constants.
            "data.settings": [
                {
                    "name": f"g{g}_p{str(p).replace('.', '')}",
                    "grid": g,
                    "safe_prob": p,
                    "role": {(2, 0.25): "main", (3, 0.5): "second", (2, 1.0): "control"}.get((g, p), "extra"),
                }
                for g in (2, 3, 4)
                for p in (0.25, 0.5, 1.0)
            ],
            "episodes": 200_000,
            "n_seeds": 4,
            "bonus_scale": 1.0,
            "smooth_window": 1000,
        },
    }

    data: DataConfig = DataConfig()
    episodes: int = Field(default=5000, ge=10, le=2_000_000)  # K
    # 5 paired seeds (docs/methods/sleeping_rl.md: 5 where a run is cheap; 2 left every criterion undecided at t_{0.975,1} = 12.7).
    n_seeds: int = Field(default=5, ge=1, le=16)  # runs use seeds seed, seed+1, ...
    bonus_scale: float = Field(default=0.1, gt=0.0, le=10.0)  # beta: multiplies every exploration bonus
    # Every beta here runs too (both algorithms, every setting and seed, the same random streams); the claim's verdict
    # is decided at bonus_scale and states the betas of the sweep where it holds (regret curves per beta).
    beta_sweep: tuple[Annotated[float, Field(gt=0.0, le=10.0)], ...] = (0.01, 0.03, 0.1, 0.3, 1.0)
    # False: Var_P(V) = P.V^2 - (P.V)^2 (correct). True: the official code's np.std(P * V)^2 quirk.
    variance_quirk: bool = False
    smooth_window: int = Field(default=100, ge=1, le=10_000)  # episodes in the plotted moving average

    @model_validator(mode="after")
    def _sweep(self) -> Config:
        if self.bonus_scale not in self.beta_sweep:
            raise ValueError(
                f"bonus_scale {self.bonus_scale} (the deciding beta) must be one of beta_sweep {self.beta_sweep}"
            )
        if len(set(self.beta_sweep)) != len(self.beta_sweep):
            raise ValueError(f"beta_sweep {self.beta_sweep}: no repeats")
        return self
