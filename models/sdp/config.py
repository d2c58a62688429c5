"""Configuration of the SDP reproduction (defaults = the ``default`` scale, ~6.5 min on 2 CPU cores).

No torch here: the registry imports this module to list methods and validate overrides.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from models.base import MethodConfig, StrictModel

Width = Annotated[int, Field(ge=1, le=5000)]
Metres = Annotated[float, Field(gt=0, le=10)]
AdamBeta = Annotated[float, Field(ge=0, lt=1)]


class DataConfig(StrictModel):
    """The synthetic 3-D reach-and-align task (this section alone drives the DVC prepare stage).

    A rigid asymmetric object of ``n_points`` points stands on a table below the end-effector (EE);
    a demonstration is a ``horizon``-step absolute-pose trajectory from the EE to one of two grasp
    points (chosen at random: multimodal), turning the EE axes onto the object's axes (R e_x, R e_y)
    and closing the gripper for the last steps. Scenes are rotated about the EE by a yaw (train and
    the in-distribution test) or by a uniform SO(3) rotation (the "tilted table" test).
    """

    n_train: int = Field(2000, ge=8, le=20_000)
    n_val: int = Field(256, ge=2, le=5000)  # held-out yaw demos for the validation loss
    n_test: int = Field(200, ge=4, le=2000)  # per test set (yaw and SO(3))
    n_points: int = Field(32, ge=8, le=500)
    horizon: int = Field(16, ge=4, multiple_of=4, le=200)  # the U-net halves it twice at most
    close_steps: int = Field(4, ge=1, le=50)  # the gripper is closed (+1) over the last close_steps actions
    object_size: float = Field(0.12, gt=0, le=10)  # length of the object's body along its x-axis
    grasp_offset: float = Field(0.06, gt=0, le=10)  # grasp points at +-offset along the object's x-axis (top face)
    reach_radius: tuple[Metres, Metres] = (0.10, 0.30)  # horizontal EE-object distance in the table frame
    reach_depth: tuple[Metres, Metres] = (0.15, 0.30)  # how far the table lies below the EE
    # The object's yaw relative to the EE's, uniform in [-relative_yaw, relative_yaw] degrees (the EE's own
    # yaw and the scene's yaw are uniform on the circle, so the object's world yaw is too). 180 would let the
    # shortest-arc slerp flip direction near 180 deg (a spurious mode) and slowed the baseline further
    # (median orientation error 95 vs 73 deg after 1000 steps in a trial run).
    relative_yaw: float = Field(45.0, ge=0, le=180)
    point_noise: float = Field(0.002, ge=0, le=10)  # per-scene jitter of the object's points
    ee_box: float = Field(
        0.3, ge=0, le=10
    )  # world EE position uniform in [-box, box]^2 x [0.3, 0.5] (removed by canonicalisation)

    @model_validator(mode="after")
    def _check(self) -> DataConfig:
        for name in ("reach_radius", "reach_depth"):
            lo, hi = getattr(self, name)
            if not 0 <= lo <= hi:
                raise ValueError(f"data.{name} must satisfy 0 <= low <= high")
        if self.close_steps >= self.horizon:
            raise ValueError("data.close_steps must be smaller than data.horizon")
        return self


class DiffusionConfig(StrictModel):
    """DDPM as in SDP's config: 100 train steps, squaredcos_cap_v2, epsilon prediction; DDIM at inference."""

    train_steps: int = Field(100, ge=2, le=1000)
    ddim_steps: int = Field(16, ge=1, le=500)
    eta: float = Field(1.0, ge=0, le=1)  # 1: stochastic (DDPM-like) DDIM, as SDP's DDPM sampler; 0: deterministic
    # diffusers' DDIM default "leading" spacing (0, 6, ..., 90 for 16 of 100) never starts at the last
    # step, where squaredcos_cap_v2 has alpha_bar = 2e-7 and x0_hat = (x - sqrt(1 - ab) eps_hat) / sqrt(ab)
    # amplifies epsilon errors ~190x (diffusers relies on clip_sample there); "trailing" = common's default.
    spacing: Literal["leading", "trailing"] = "leading"
    # SDP's config has clip_sample=True; it clips each coordinate and breaks equivariance, so it is off
    # (None) by default. A value c clamps x0_hat to [-c, c] in both policies (for the pitfall's demo).
    clip_sample: float | None = Field(None, gt=0, le=100)

    @model_validator(mode="after")
    def _check(self) -> DiffusionConfig:
        if self.ddim_steps > self.train_steps:
            raise ValueError("diffusion.ddim_steps must not exceed diffusion.train_steps")
        return self


class SDPNetConfig(StrictModel):
    """SDP-lite: l <= 1 point encoder + irreps temporal U-net (channels per irreps field)."""

    down_dims: tuple[Width, ...] = Field((32, 64), min_length=1, max_length=3)
    res_blocks: int = Field(1, ge=1, le=20)  # residual blocks per U-net level and in the middle (SDP and DP: 2)
    kernel_size: int = Field(5, ge=1, le=50)
    time_dim: int = Field(32, ge=2, le=1000)  # sinusoidal embedding -> MLP, placed in the l=0 slot
    enc_channels: int = Field(32, ge=2, le=1000)  # encoder output fields (l=0 and l=1 each)
    enc_hidden: int = Field(64, ge=4, le=2000)  # per-point invariant MLP width


class DPNetConfig(StrictModel):
    """Diffusion Policy baseline: PointNet embedding + Chi et al.'s conditional 1-D U-net with FiLM."""

    down_dims: tuple[Width, ...] = Field((64, 128), min_length=1, max_length=3)
    res_blocks: int = Field(1, ge=1, le=20)
    kernel_size: int = Field(5, ge=1, le=50)
    time_dim: int = Field(32, ge=2, le=1000)
    enc_channels: int = Field(64, ge=2, le=2000)  # PointNet feature size
    enc_hidden: int = Field(64, ge=4, le=2000)
    n_groups: int = Field(8, ge=1, le=100)


class TrainConfig(StrictModel):
    """Identical for every policy (same budget and seeds). SDP: AdamW lr 1e-4, betas (0.95, 0.999),
    wd 1e-6, cosine schedule with 500 warm-up steps, EMA power 0.75, batch 32, ~50k steps."""

    steps: int = Field(2000, ge=1, le=500_000)  # the brief's default budget: ~2000 steps at batch 128
    batch_size: int = Field(128, ge=2, le=2000)
    lr: float = Field(3e-3, gt=0, le=10)
    weight_decay: float = Field(1e-6, ge=0, le=1)
    betas: tuple[AdamBeta, AdamBeta] = (0.95, 0.999)
    warmup_steps: int = Field(50, ge=0, le=5000)
    ema_power: float = Field(0.75, gt=0, le=10)  # diffusers EMAModel: decay = 1 - (1 + step)^-power, capped
    ema_max_decay: float = Field(0.9999, ge=0, lt=1)
    steps_per_epoch: int = Field(100, ge=1, le=10_000)  # Lightning epoch = this many batches (one validation each)


class EvalConfig(StrictModel):
    success_pos: float = Field(0.05, gt=0, le=10)  # final position within this of either grasp point
    success_deg: float = Field(15.0, gt=0, le=180)  # and orientation error below this
    equivariance_rotations: int = Field(16, ge=1, le=200)  # random rotations in the equivariance error
    equivariance_batch: int = Field(32, ge=1, le=10_000)
    equivariance_tol: float = Field(1e-4, gt=0)  # the brief's float32 threshold for SDP-lite
    baseline_nonequivariance: float = Field(1e-2, gt=0)  # "O(1)": the baseline's error must exceed this
    n_plot_scenes: int = Field(3, ge=1, le=50)
    samples_per_plot_scene: int = Field(6, ge=1, le=100)


class Config(MethodConfig):
    SCALES: ClassVar[dict[str, dict]] = {
        "smoke": {
            "film_ablation": True,  # exercised at smoke scale (cheap); opt-in at default for the time budget
            "data.n_train": 64,
            "data.n_test": 8,
            "sdp.down_dims": (8, 16),
            "sdp.enc_channels": 8,
            "sdp.enc_hidden": 16,
            "sdp.time_dim": 8,
            "dp.down_dims": (8, 16),
            "dp.enc_channels": 8,
            "dp.enc_hidden": 16,
            "dp.time_dim": 8,
            "train.steps": 30,
            "train.batch_size": 32,
            "train.steps_per_epoch": 15,
            "train.warmup_steps": 5,
            "data.n_val": 16,
            "diffusion.ddim_steps": 4,
            "eval.equivariance_rotations": 4,
            "eval.equivariance_batch": 8,
            "eval.n_plot_scenes": 2,
            "eval.samples_per_plot_scene": 3,
        },
        "paper": {
            # SDP trains ~50k steps at batch 32 with lr 1e-4 and 500 warm-up steps, U-net [200, 400, 800] with
            # two residual blocks per level, DDPM 100 steps at inference; a GPU-sized stand-in, with the ablation.
            "sdp.down_dims": (64, 128, 256),
            "sdp.enc_channels": 64,
            "sdp.enc_hidden": 128,
            "sdp.time_dim": 64,
            "dp.down_dims": (96, 192, 384),
            "dp.enc_channels": 128,
            "dp.enc_hidden": 128,
            "dp.time_dim": 64,
            "sdp.res_blocks": 2,
            "dp.res_blocks": 2,
            "film_ablation": True,
            "train.steps": 50_000,
            "train.batch_size": 32,
            "train.lr": 1e-4,
            "train.warmup_steps": 500,
            "train.steps_per_epoch": 1000,
            # 50 of 100 (leading spacing: 0, 2, ..., 98); all 100 would start at alpha_bar = 2e-7 (see spacing)
            "diffusion.ddim_steps": 50,
        },
    }

    data: DataConfig = DataConfig()
    diffusion: DiffusionConfig = DiffusionConfig()
    sdp: SDPNetConfig = SDPNetConfig()
    dp: DPNetConfig = DPNetConfig()
    train: TrainConfig = TrainConfig()
    eval: EvalConfig = EvalConfig()
    # The brief's ablation: SDP-lite with conventional FiLM on the flattened irreps (non-equivariant). A
    # third policy at SDP-lite's cost (~+2 min at default scale), so opt-in there; on at smoke and paper.
    film_ablation: bool = False

    @model_validator(mode="after")
    def _check(self) -> Config:
        levels = max(len(self.sdp.down_dims), len(self.dp.down_dims)) - 1
        if self.data.horizon % (2**levels):
            raise ValueError(f"data.horizon must be divisible by 2^{levels} (the U-nets' downsampling)")
        return self
