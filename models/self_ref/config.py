"""Configuration of the Self-REF reproduction (defaults = the ``default`` scale).

No torch here: the registry imports this module to list methods and validate overrides.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from models.base import MethodConfig, RelPath, StrictModel

LearningRate = Annotated[float, Field(gt=0, le=1)]


class LMSize(StrictModel):
    """The tiny GPT-2 "local LLM"."""

    n_embd: int = Field(64, ge=4, le=1024)
    n_layer: int = Field(2, ge=1, le=24)
    n_head: int = Field(4, ge=1, le=32)

    @model_validator(mode="after")
    def _divisible(self) -> LMSize:
        if self.n_embd % self.n_head:
            raise ValueError("n_embd must be divisible by n_head")
        return self


class DataConfig(StrictModel):
    """The synthetic QA splits, the simulated large model, and the pretrained small LM
    (all written by ``prepare``; the DVC prepare stage depends on this section only)."""

    # Arithmetic QA: "a+b=" with operands of 1..max_add_width digits, "a*b=" with 1..max_mul_width.
    max_add_width: int = Field(2, ge=1, le=4)
    max_mul_width: int = Field(2, ge=1, le=3)
    mul_fraction: float = Field(0.3, ge=0, le=1)
    # The model writes answers least-significant digit first ("37+58=" -> "59"), which a 2-layer
    # model can learn (carries flow left to right) within the CPU budget.
    reverse_answers: bool = True
    # Splits: A trains the small LM, B builds the Self-REF data, V sets thresholds, C tests,
    # U holds unanswerable items (operands one digit wider than ever seen) for rejection.
    n_a: int = Field(1000, ge=10, le=200_000)
    n_b: int = Field(3000, ge=10, le=50_000)
    n_v: int = Field(1000, ge=10, le=20_000)
    n_c: int = Field(2000, ge=10, le=50_000)
    n_u: int = Field(500, ge=10, le=20_000)
    # B, V, C and U hold only questions that A (the small LM's training data: the brief's "held out from its
    # training") and the other splits do not hold; B, V and C are cut from one shuffled pool (exchangeable).
    held_out_distinct: bool = True
    # The "large LLM" (the paper's Llama3-70B): a calculator that answers correctly with this probability.
    large_accuracy: float = Field(0.95, ge=0, le=1)
    # Small-LM pretraining on split A: deliberately long (overfit, overconfident), no label smoothing.
    lm: LMSize = LMSize()
    pretrain_epochs: int = Field(75, ge=1, le=1000)
    pretrain_batch: int = Field(128, ge=1, le=10_000)
    pretrain_lr: float = Field(3e-3, gt=0, le=1)
    # User-supplied replacements, relative to the project's data/ folder ("" = synthesise):
    # QA records in JSONL ({"prompt"|"question", "answer", "split"}; GSM8K answers "... #### 42" work)
    # and a Hugging Face GPT-2 folder (config.json + weights + vocab.json) as the small LM.
    questions_jsonl: RelPath = ""
    base_lm: RelPath = ""


class Config(MethodConfig):
    SCALES: ClassVar[dict[str, dict]] = {
        "smoke": {
            "data.max_add_width": 1,
            "data.max_mul_width": 1,
            # Smoke only: its 1-epoch LM answers no unseen question, so every held-out question would be
            # wrong and the Self-REF / fine-tuned-logits data empty; 1-digit questions (200) are all in A anyway.
            "data.held_out_distinct": False,
            "data.n_a": 2000,
            "data.n_b": 500,
            "data.n_v": 200,
            "data.n_c": 500,
            "data.n_u": 50,
            "data.lm.n_embd": 16,
            "data.lm.n_layer": 1,
            "data.lm.n_head": 2,
            "data.pretrain_epochs": 1,
            "epochs": 1,
            "lr_grid": (1e-2,),
            "n_seeds": 1,
            "verbalized": False,
        },
        "paper": {
            # The paper: LoRA on Llama3-8B / Mistral-7B, routing to Llama3-70B, on MMLU, OpenBookQA,
            # GSM8K, MedQA (supply them through data.questions_jsonl / data.base_lm). Without them:
            # the brief's 20k/5k/5k splits, a bigger small model and 3 seeds.
            "data.n_a": 20000,
            "data.n_b": 5000,
            "data.n_v": 2000,
            "data.n_c": 5000,
            "data.n_u": 2000,
            "data.lm.n_embd": 128,
            "data.lm.n_layer": 4,
            "data.pretrain_epochs": 100,
            "epochs": 20,
            "n_seeds": 3,
        },
    }

    data: DataConfig = DataConfig()

    # Self-REF fine-tuning (and the fine-tuned-logits / verbalised baselines: same adapter, data, budget, seeds,
    # and the same selection: each arm's learning rate is chosen on split V from lr_grid, every fit early-stopped
    # on its split-V loss with a patience and ended on its best epoch's weights).
    n_seeds: int = Field(3, ge=1, le=16)  # the brief: 3 seeds
    epochs: int = Field(10, ge=1, le=100)  # the epoch cap; early stopping usually ends a fit sooner
    patience: int = Field(2, ge=1, le=100)
    batch_size: int = Field(64, ge=1, le=10_000)
    lr_grid: tuple[LearningRate, ...] = Field((3e-3, 1e-2, 3e-2), min_length=1, max_length=8)
    lora_rank: int = Field(8, ge=1, le=256)
    lora_alpha: float = Field(16.0, gt=0, le=1e4)
    # The paper adapts Q, K, V, the token embedding and the LM head. Translated to this GPT-2: LoRA on every
    # projection of every block (its Q, K, V are one fused c_attn, so the whole block is adapted) and a LoRA
    # update of the tied embedding / output matrix (embedding_lora), plus full rows for the tokens an arm
    # introduces (<CN>, <UN>; ';' for the verbalised digit).
    lora_targets: tuple[Literal["attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"], ...] = (
        "attn.c_attn",
        "attn.c_proj",
        "mlp.c_fc",
        "mlp.c_proj",
    )
    embedding_lora: bool = True
    # Algorithm 1 subsamples the unconfident set: keep at most un_ratio <UN> samples per <CN> sample.
    un_ratio: float = Field(1.0, gt=0, le=100)
    mask_un_answers: bool = True  # the paper's gradient masking of the wrong answers on <UN> samples
    # The paper also trains the answer tokens of <CN> samples. Our small model is undertrained on the task,
    # so those ~1.7k correct answers act as extra task data (+5 pts accuracy at the default scale, breaking
    # the brief's "accuracy preserved" check). Off by default: the answer positions are distilled from
    # the frozen base model instead (answers unchanged, <CN>/<UN> kept out of them).
    cn_answer_loss: bool = False
    verbalized: bool = True  # also train the "verbalised confidence digit" baseline
    # Evaluation.
    routing_levels: int = Field(21, ge=2, le=1001)
    rejection_coverage: float = Field(0.7, gt=0, lt=1)
    ece_bins: int = Field(10, ge=1, le=100)
    random_routing_draws: int = Field(20, ge=1, le=1000)
