"""Configuration of OTTER on the synthetic tabletop (defaults = the ``default`` scale). No torch here."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from models.base import MethodConfig, RelPath, StrictModel


class EncoderConfig(StrictModel):
    """The tiny CLIP-layout encoder pretrained in ``prepare`` (stand-in for the frozen CLIP)."""

    width: int = Field(64, ge=8, le=1000)  # transformer width (vision and text)
    head_width: int = Field(16, ge=1, le=200)  # channels per attention head (OpenAI CLIP: 64)
    layers: int = Field(1, ge=1, le=20)
    embed_dim: int = Field(32, ge=4, le=500)  # joint image-text space
    patch: int = Field(4, ge=1, le=50)  # 32 px / 4 = an 8 x 8 grid of patch tokens
    stem_channels: int = Field(32, ge=0, le=500)  # 3x3 conv before the patch embedding (0 = plain CLIP)


class PretrainConfig(StrictModel):
    steps: int = Field(300, ge=1, le=50_000)
    batch_size: int = Field(32, ge=2, le=1000)
    lr: float = Field(1e-3, gt=0, le=10)
    tau: float = Field(0.07, gt=0, le=100)  # fixed temperature of the grounded contrastive loss


class DataConfig(StrictModel):
    """Everything ``prepare`` makes: scenes, demonstrations, evaluation episodes and the pretrained encoder."""

    # 'colour': yellow is never a behaviour-cloning target; 'pairs': 4 colour-shape pairs never are.
    split: Literal["colour", "pairs"] = "colour"
    image_size: int = Field(32, ge=16, le=500)
    n_pretrain: int = Field(4000, ge=8, le=200_000)  # captioned scenes for the contrastive pretraining
    n_demos: int = Field(300, ge=2, le=20_000)
    demo_steps: int = Field(12, ge=1, le=200)
    n_eval: int = Field(200, ge=1, le=2000)  # closed-loop episodes per split (seen / held-out)
    max_steps: int = Field(15, ge=1, le=200)  # episode length
    step_size: float = Field(0.1, gt=0, le=0.5)  # agent displacement per unit action
    success_radius: float = Field(0.1, gt=0, le=10)
    encoder: EncoderConfig = EncoderConfig()
    pretrain: PretrainConfig = PretrainConfig()


class PolicyConfig(StrictModel):
    """OTTER head: text-aware selection, then a policy transformer over the selected tokens + proprio."""

    tau: float = Field(0.07, gt=0, le=100)  # initial selection temperature (PyTorch code: 0.07; JAX: 0.01)
    learn_tau: bool = True
    tau_min: float = Field(0.01, gt=0, le=100)  # JAX clip: inverse temperature at most 100
    d_model: int = Field(64, ge=4, le=1000)
    layers: int = Field(1, ge=0, le=20)  # 0 = MLP over the tokens only
    hidden: int = Field(128, ge=4, le=2000)  # action MLP


class BaselineConfig(StrictModel):
    """All-tokens head: every patch token (+PE), the words and proprio through a transformer, CLS readout."""

    d_model: int = Field(32, ge=4, le=500)
    layers: int = Field(1, ge=1, le=20)
    hidden: int = Field(128, ge=4, le=2000)


class BCConfig(StrictModel):
    steps: int = Field(600, ge=1, le=50_000)
    batch_size: int = Field(64, ge=1, le=2000)
    lr: float = Field(1e-3, gt=0, le=10)  # heads
    encoder_lr: float = Field(3e-4, gt=0, le=10)  # encoder, fine-tuned arm only
    weight_decay: float = Field(0.01, ge=0, le=1)
    grad_clip: float = Field(1.0, gt=0, le=1e3)


class Config(MethodConfig):
    SCALES: ClassVar[dict[str, dict]] = {
        "smoke": {
            "n_seeds": 1,
            "data.n_pretrain": 64,
            "data.n_demos": 16,
            "data.n_eval": 4,
            "data.pretrain.steps": 10,
            "data.pretrain.batch_size": 16,
            "bc.steps": 10,
            "bc.batch_size": 32,
        },
        "paper": {
            # The brief's CPU-prototype budget on the same toy (no CLIP weights exist offline);
            # the paper's 224 px, 8-layer causal policy needs real data and weights (data.encoder + clip_weights).
            "data.n_pretrain": 20000,
            "data.n_demos": 2000,
            "data.pretrain.steps": 3000,
            "data.pretrain.batch_size": 64,
            "bc.steps": 4000,
            "bc.batch_size": 128,
            "n_seeds": 3,
        },
    }

    data: DataConfig = DataConfig()
    policy: PolicyConfig = PolicyConfig()
    baseline: BaselineConfig = BaselineConfig()
    bc: BCConfig = BCConfig()
    n_seeds: int = Field(3, ge=1, le=50)  # behaviour-cloning seeds seed, seed+1, ... (all arms share them); brief: 3
    # Real CLIP weights (an OpenAI-layout state dict, .pt) under data/; "" = the encoder pretrained in prepare.
    clip_weights: RelPath = ""
    clip_head_width: int = Field(64, ge=1, le=1000)  # OpenAI CLIP: heads = width / 64
    # CLIP token ids of the 8 words (red green blue yellow square circle triangle cross) for real weights.
    clip_word_ids: tuple[Annotated[int, Field(ge=0, le=1_000_000)], ...] = ()  # CLIP vocab: 49408

    @model_validator(mode="after")
    def _check(self) -> Config:
        if self.data.image_size % self.data.encoder.patch:
            raise ValueError("data.image_size must be a multiple of data.encoder.patch")
        if self.data.encoder.width % self.data.encoder.head_width:
            raise ValueError("data.encoder.width must be a multiple of data.encoder.head_width")
        if self.clip_word_ids and len(self.clip_word_ids) != 8:
            raise ValueError("clip_word_ids needs one id per word (8)")
        if self.policy.tau < self.policy.tau_min:
            raise ValueError("policy.tau must be >= policy.tau_min")
        return self
