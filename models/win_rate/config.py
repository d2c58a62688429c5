"""Configuration of the win-rate study (defaults = the ``default`` scale).

No torch here: the registry imports this module to list methods and validate overrides.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field, model_validator

from models.base import MethodConfig, RelPath, StrictModel

KLCoefficient = Annotated[float, Field(gt=0, le=100)]
LearningRate = Annotated[float, Field(gt=0, le=10)]
Ridge = Annotated[float, Field(ge=0, le=100)]
ENUMERABLE = 50_000  # below this many responses per prompt a space could be enumerated; the study stays above


class DataConfig(StrictModel):
    """Everything ``prepare`` writes: the anchor language, the oracle reward and the preference pairs
    (the DVC prepare stage depends on this section and the seed only)."""

    n_prompts: int = Field(4, ge=1, le=64)
    n_symbols: int = Field(8, ge=2, le=26)
    # n_symbols ** response_length responses per prompt: 8 ** 10 ~ 1e9 at the default, never enumerated.
    response_length: int = Field(10, ge=2, le=64)
    # The anchor q: per prompt a first-order Markov chain with Dirichlet(concentration) rows.
    concentration: float = Field(0.5, gt=0, le=100)
    # Oracle reward, additive over positions: liked_weight [y_t liked] + bigram_bonus [(y_t-1, y_t) liked]
    #                                         - run_penalty [y_t = y_t-1]
    liked_weight: float = Field(0.4, ge=0, le=10)
    bigram_bonus: float = Field(0.6, ge=0, le=10)
    run_penalty: float = Field(0.4, ge=0, le=10)
    train_pairs: int = Field(2000, ge=8, le=100_000)
    heldout_pairs: int = Field(500, ge=8, le=20_000)  # the validation split of every arm
    # A user-supplied JSONL of pairwise records ({"prompt", "chosen", "rejected"} or HH-RLHF transcripts),
    # relative to data/, replacing the generated training pairs ("" = generate).
    pairs_jsonl: RelPath = ""

    @model_validator(mode="after")
    def _not_enumerable(self) -> DataConfig:
        if self.n_symbols**self.response_length <= ENUMERABLE:
            raise ValueError(
                f"n_symbols ** response_length = {self.n_symbols**self.response_length}: the study needs a response "
                f"space too large to enumerate (> {ENUMERABLE}); raise response_length or n_symbols"
            )
        return self


class TabularConfig(StrictModel):
    """The closed-form bandit: M responses, BT rewards linspace(low, high, M)."""

    n_responses: int = Field(8, ge=2, le=256)
    reward_low: float = Field(-2.0, ge=-20, le=20)
    reward_high: float = Field(2.0, ge=-20, le=20)
    betas: tuple[KLCoefficient, ...] = (0.1, 0.5, 1.0, 2.0)
    n_pairs: int = Field(20000, ge=10, le=200_000)  # the "large dataset" SFT and DPO learn from
    steps: int = Field(3000, ge=1, le=50_000)
    lr: float = Field(0.1, gt=0, le=10)
    nontransitive_strength: float = Field(1.5, ge=0, le=20)  # cyclic term added to the BT logits

    @model_validator(mode="after")
    def _check(self) -> TabularConfig:
        if not self.betas:
            raise ValueError("tabular.betas must not be empty")
        if self.reward_high <= self.reward_low:
            raise ValueError(f"reward_high {self.reward_high} must exceed reward_low {self.reward_low}")
        return self


class Config(MethodConfig):
    SCALES: ClassVar[dict[str, dict]] = {
        "smoke": {
            "data.n_prompts": 2,
            "data.response_length": 6,
            "data.train_pairs": 300,
            "data.heldout_pairs": 100,
            "tabular.n_pairs": 2000,
            "tabular.steps": 300,
            "steps": 20,
            "checkpoints": 4,
            "n_seeds": 1,
            "lr_grid": (0.1,),
            "betas": (0.1, 1.0),
            "eval_samples": 32,
            "test_samples": 200,
            "reference_samples": 2000,
        },
        "paper": {
            # The paper: Pythia-2.8B on HH-RLHF / OASST with a trained oracle judge; neither is available
            # offline. The same synthetic study, longer responses, more pairs and steps.
            "data.n_prompts": 16,
            "data.response_length": 16,
            "data.train_pairs": 10000,
            "data.heldout_pairs": 2000,
            "steps": 1000,
            "checkpoints": 20,
            "n_seeds": 5,
            "group_size": 8,
            "test_samples": 4000,
        },
    }

    data: DataConfig = DataConfig()
    tabular: TabularConfig = TabularConfig()

    # One budget for every arm: the same optimiser steps, samples or pairs per step, lr grid, patience, seeds.
    steps: int = Field(300, ge=2, le=20_000)
    checkpoints: int = Field(10, ge=2, le=200)  # Monte-Carlo evaluations during training (plus the start)
    patience: int = Field(3, ge=1, le=200)  # checkpoints without a validation improvement before a run stops
    n_seeds: int = Field(5, ge=1, le=16)
    batch_prompts: int = Field(16, ge=1, le=4096)  # on-policy arms: prompts per step (x group_size samples)
    group_size: int = Field(4, ge=2, le=64)  # RLOO samples per prompt
    batch_pairs: int = Field(64, ge=1, le=4096)  # offline arms (SFT, DPO): pairs per step
    lr_grid: tuple[LearningRate, ...] = (0.03, 0.1, 0.3)  # Adam on the policy logits, chosen per arm and seed
    # The KL coefficient of the two families whose solution depends on it: RLHF (learned judge) and DPO.
    betas: tuple[KLCoefficient, ...] = (0.1, 0.3, 1.0)
    judge_ridge_grid: tuple[Ridge, ...] = (1e-4, 1e-3, 1e-2)  # the learned judge's L2 weight, chosen on validation
    # Monte-Carlo sizes: samples per prompt at each checkpoint (objective and win rate drawn independently),
    # at the final test, and for each objective's start/optimum reference values.
    eval_samples: int = Field(128, ge=4, le=100_000)
    test_samples: int = Field(1000, ge=4, le=1_000_000)
    reference_samples: int = Field(20000, ge=100, le=10_000_000)

    @model_validator(mode="after")
    def _check(self) -> Config:
        for name in ("lr_grid", "betas", "judge_ridge_grid"):
            if not getattr(self, name):
                raise ValueError(f"{name} must not be empty")
        if self.checkpoints > self.steps:
            raise ValueError(f"checkpoints {self.checkpoints} must not exceed steps {self.steps}")
        return self
