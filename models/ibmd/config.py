"""Configuration of Inverse Bridge Matching Distillation (defaults = the ``default`` scale).

No torch here: the registry imports this module to list methods and validate overrides.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from models.base import MethodConfig, RelPath, StrictModel

ToyVariant = Literal["cond", "uncond"]
NFE = Annotated[int, Field(ge=1, le=10_000)]  # sampler steps (at most bridge.steps - 1)


class DataConfig(StrictModel):
    """Everything that shapes the prepared datasets (the DVC prepare stage depends on it only)."""

    # 2-D toy: x0 from 8 Gaussians on a circle; x1 = (x0_1 + noise, 0) hides the second coordinate.
    toy_train: int = Field(20_000, ge=64, le=2_000_000)
    toy_test: int = Field(4096, ge=64, le=200_000)
    toy_radius: float = Field(2.0, gt=0, le=1e3)
    toy_std: float = Field(0.1, gt=0, le=1e3)
    toy_x1_noise: float = Field(0.05, ge=0, le=1e3)
    # Digits restoration: x1 = nearest-upsampled 2x average pool of x0 (in [-1, 1]) plus Gaussian noise.
    digits: bool = True
    digits_test_fraction: float = Field(0.2, gt=0, lt=1)
    digits_train_copies: int = Field(8, ge=1, le=100)  # corruption draws per training image
    digits_test_copies: int = Field(4, ge=1, le=50)
    digits_noise: float = Field(0.1, ge=0, le=100)
    # A user-supplied paired set replacing the toy: npz with x0 (n, d) and x1 (n, d), relative to data/.
    pairs_npz: RelPath = ""
    pairs_test_fraction: float = Field(0.2, gt=0, lt=1)


class BridgeConfig(StrictModel):
    """I2SB's bridge: 1000 steps, symmetric sqrt-linear beta schedule, network time = linspace(t0, T) * steps."""

    steps: int = Field(1000, ge=4, multiple_of=2, le=10_000)
    beta_max: float = Field(0.3, gt=0, le=100)  # 0.3 for SR/JPEG in the paper (1.0 for inpainting)
    beta_min: float = Field(1e-4, gt=0, le=100)
    t0: float = Field(1e-4, ge=0, lt=1)
    T: float = Field(1.0, gt=0, le=1)


class TeacherConfig(StrictModel):
    """Bridge-matching teacher: MLP x0_hat(x_t, t [, x1]) with a sinusoidal time embedding."""

    hidden: int = Field(128, ge=4, le=5000)
    layers: int = Field(3, ge=1, le=50)
    time_dim: int = Field(32, ge=2, le=500)
    steps: int = Field(3000, ge=1, le=500_000)
    batch_size: int = Field(512, ge=2, le=10_000)
    lr: float = Field(1e-3, gt=0, le=10)
    ema: float = Field(0.999, ge=0, lt=1)  # the student, fake bridge and baseline start from the EMA weights


class DistillConfig(StrictModel):
    """IBMD: min over the generator G, max over the fake bridge phi (Theorem 3.2)."""

    generator_steps: int = Field(800, ge=1, le=100_000)
    bridge_loop: int = Field(5, ge=1, le=50)  # fake-bridge Adam steps per generator step (n_bridge_loop)
    batch_size: int = Field(256, ge=2, le=10_000)
    lr: float = Field(1e-3, gt=0, le=10)
    student_ema: float = Field(0.99, ge=0, lt=1)  # the evaluated and registered student is its EMA
    noise_dim: int = Field(2, ge=1, le=1000)  # zero-initialised noise inputs of G (the paper's extra channels)
    t_power_ten_coeff: float = Field(0.0, ge=0, le=10)  # weight 10^(c (1 - step/steps)) of both loss terms


class Config(MethodConfig):
    SCALES: ClassVar[dict[str, dict]] = {
        "smoke": {
            "data.toy_train": 2048,
            "data.toy_test": 512,
            "data.digits_train_copies": 1,
            "data.digits_test_copies": 1,
            "toy_variants": ("cond",),
            "teacher.steps": 200,
            "teacher.batch_size": 256,
            "digits_teacher.steps": 50,
            "digits_teacher.batch_size": 128,
            "distill.generator_steps": 20,
            "distill.batch_size": 128,
            "digits_distill.generator_steps": 5,
            "digits_distill.batch_size": 128,
            "eval_nfe": (1, 10),
            "many_nfe": 10,
        },
        "paper": {
            # The paper distils ImageNet-256 I2SB / DDBM teachers on 4 GPUs; the closest CPU-sized
            # setting is a larger toy and digits run with the README's 5 fake steps per generator step.
            "data.toy_train": 200_000,
            "data.toy_test": 16_384,
            "teacher.hidden": 256,
            "teacher.steps": 30_000,
            "distill.generator_steps": 10_000,
            "distill.batch_size": 512,
            "distill.lr": 1e-4,
            "digits_teacher.steps": 30_000,
            "digits_distill.generator_steps": 10_000,
            "digits_distill.lr": 1e-4,
        },
    }

    data: DataConfig = DataConfig()
    bridge: BridgeConfig = BridgeConfig()
    toy_variants: tuple[ToyVariant, ...] = Field(("cond", "uncond"), min_length=1)
    teacher: TeacherConfig = TeacherConfig()
    distill: DistillConfig = DistillConfig()
    # Digits restoration uses the conditional teacher only (x1 concatenated), a wider MLP, shorter runs.
    digits_teacher: TeacherConfig = TeacherConfig(hidden=256, steps=1500, batch_size=256)
    digits_distill: DistillConfig = DistillConfig(generator_steps=300, batch_size=128, noise_dim=64)

    eval_nfe: tuple[NFE, ...] = Field((1, 2, 5, 10, 20, 50, 100), min_length=1)  # teacher NFE curve
    many_nfe: int = Field(100, ge=2, le=1000)  # "teacher at many NFE" (the brief's NFE = 100)
    bimodal_threshold: float = Field(0.5, gt=0, le=1e3)  # |x0_2| above it counts as a recovered mode

    @model_validator(mode="after")
    def _check(self) -> Config:
        top = self.bridge.steps - 1
        if not all(1 <= n <= top for n in (*self.eval_nfe, self.many_nfe)):
            raise ValueError(f"eval_nfe and many_nfe must lie in [1, bridge.steps - 1 = {top}]")
        if len(set(self.toy_variants)) != len(self.toy_variants) or "cond" not in self.toy_variants:
            raise ValueError("toy_variants must not repeat and must include 'cond' (the primary metric's setup)")
        return self
