"""Configuration of the win-rate study (defaults = the ``default`` scale).

No torch here: the registry imports this module to list methods and validate overrides.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field, model_validator

from models.base import MethodConfig, RelPath, StrictModel

KLCoefficient = Annotated[float, Field(gt=0, le=100)]


class LMSize(StrictModel):
    """The tiny GPT-2 policy (the anchor q, the reference and every trained policy)."""

    n_embd: int = Field(32, ge=4, le=1024)
    n_layer: int = Field(2, ge=1, le=24)
    n_head: int = Field(4, ge=1, le=32)

    @model_validator(mode="after")
    def _divisible(self) -> LMSize:
        if self.n_embd % self.n_head:
            raise ValueError("n_embd must be divisible by n_head")
        return self


class DataConfig(StrictModel):
    """Everything ``prepare`` writes: the synthetic language, the anchor LM pretrained on it,
    the oracle reward table and the preference pairs (the DVC prepare stage depends on this only)."""

    n_prompts: int = Field(4, ge=1, le=64)
    n_symbols: int = Field(8, ge=2, le=26)
    response_length: int = Field(4, ge=1, le=6)  # n_symbols ** length responses per prompt are enumerated
    # The hidden "language": per prompt a first-order Markov chain with Dirichlet(concentration) rows.
    concentration: float = Field(0.5, gt=0, le=100)
    corpus_size: int = Field(8000, ge=16, le=500_000)
    # Oracle reward r(x, y) = liked_weight sqrt(#liked symbols) + bigram_bonus [liked bigram in y]
    #                         - run_penalty (longest run - 1)   (pattern counts, diminishing returns)
    liked_weight: float = Field(1.5, ge=0, le=10)
    bigram_bonus: float = Field(1.0, ge=0, le=10)
    run_penalty: float = Field(0.5, ge=0, le=10)
    train_pairs: int = Field(2000, ge=8, le=100_000)
    heldout_pairs: int = Field(500, ge=8, le=20_000)
    # Anchor pretraining (MLE on the corpus); the checkpoint is part of the versioned dataset.
    lm: LMSize = LMSize()
    pretrain_epochs: int = Field(6, ge=1, le=100)
    pretrain_batch: int = Field(128, ge=1, le=10_000)
    pretrain_lr: float = Field(3e-3, gt=0, le=1)
    # User-supplied replacements, relative to the project's data/ folder ("" = synthesise):
    # a Hugging Face GPT-2 folder (config.json + model.safetensors/pytorch_model.bin + vocab.json)
    # to use as the anchor, and pairwise records in JSONL ({"prompt", "chosen", "rejected"} or HH-RLHF style).
    anchor_lm: RelPath = ""
    pairs_jsonl: RelPath = ""

    @model_validator(mode="after")
    def _enumerable(self) -> DataConfig:
        if self.n_symbols**self.response_length > 50_000:
            raise ValueError("n_symbols ** response_length must stay <= 50000 (responses are enumerated exactly)")
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
        if not self.betas or min(self.betas) <= 0:
            raise ValueError("betas must be positive")
        if self.reward_high <= self.reward_low:
            raise ValueError("reward_high must exceed reward_low")
        return self


class Config(MethodConfig):
    SCALES: ClassVar[dict[str, dict]] = {
        "smoke": {
            "data.n_prompts": 2,
            "data.response_length": 3,
            "data.corpus_size": 400,
            "data.train_pairs": 200,
            "data.heldout_pairs": 50,
            "data.lm.n_embd": 16,
            "data.lm.n_layer": 1,
            "data.lm.n_head": 2,
            "data.pretrain_epochs": 1,
            "tabular.n_pairs": 2000,
            "tabular.steps": 300,
            "steps": 10,
            "checkpoints": 2,
            "reward_epochs": 1,
            "n_seeds": 1,
        },
        "paper": {
            # The paper: Pythia-2.8B on HH-RLHF / OASST with a trained oracle judge (weights and data
            # can be supplied through data.anchor_lm / data.pairs_jsonl). Without them: a bigger policy,
            # longer responses, 10k pairs, the brief's 300 steps and 3 seeds.
            "data.n_prompts": 16,
            "data.response_length": 5,
            "data.corpus_size": 50000,
            "data.train_pairs": 10000,
            "data.heldout_pairs": 2000,
            "data.lm.n_embd": 128,
            "data.lm.n_layer": 4,
            "data.pretrain_epochs": 10,
            "steps": 1000,
            "n_seeds": 3,
            "group_size": 8,
        },
    }

    data: DataConfig = DataConfig()
    tabular: TabularConfig = TabularConfig()

    # Sequence-level experiment (B): every variant gets the same steps, batch and seeds.
    steps: int = Field(300, ge=2, le=10_000)  # the brief: 3 seeds x 300 steps
    checkpoints: int = Field(10, ge=1, le=100)  # exact win-rate evaluations during training (plus the start)
    n_seeds: int = Field(3, ge=1, le=16)
    batch_prompts: int = Field(16, ge=1, le=10_000)  # on-policy variants: prompts per step (x group_size samples)
    group_size: int = Field(4, ge=2, le=100)  # RLOO samples per prompt
    batch_pairs: int = Field(64, ge=1, le=10_000)  # offline variants (SFT, DPO): pairs per step
    lr: float = Field(1e-3, gt=0, le=1)
    dpo_betas: tuple[KLCoefficient, ...] = (0.1, 0.5)
    kl_beta: float = Field(
        0.1, gt=0, le=100
    )  # RLHF's KL coefficient (= the first DPO beta: same optimum under the oracle reward)
    # The learned Bradley-Terry reward model that RLHF uses (trained on the same pairs as DPO).
    reward_epochs: int = Field(8, ge=1, le=100)
    reward_lr: float = Field(1e-3, gt=0, le=1)

    @model_validator(mode="after")
    def _check(self) -> Config:
        if not self.dpo_betas or min(self.dpo_betas) <= 0:
            raise ValueError("dpo_betas must be positive")
        if self.checkpoints > self.steps:
            raise ValueError("checkpoints must not exceed steps")
        return self
