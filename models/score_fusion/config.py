"""Configuration of Score-Fusion (defaults = the ``default`` scale).

No torch here: the registry imports this module to list methods and validate overrides.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from models.base import MethodConfig, RelPath, StrictModel

Edge = Annotated[int, Field(ge=1, le=1024)]  # voxels along one axis of a volume
Count = Annotated[int, Field(ge=0, le=100)]
Fraction = Annotated[float, Field(ge=0, le=1)]
Voxels = Annotated[float, Field(gt=0, le=100)]
LearningRate = Annotated[float, Field(gt=0, le=10)]

Arch = Literal["conv", "unet"]
Source = Literal["mni152", "synthetic", "nifti"]
Template = Literal["t1", "gm", "wm"]


class DataConfig(StrictModel):
    """Everything that shapes the prepared dataset (the DVC prepare stage depends on it only).

    ``source``:
    * ``mni152`` (default): real brain MRI, nilearn's MNI152 2009a template (1 mm, skull-stripped) read
      from the pinned nilearn wheel, min-max scaled to [-1, 1] and cut into ``shape`` crops. The
      anterior-posterior axis is cut into slabs of ``mni_slab`` voxels assigned train / val / train /
      test in turn; every crop lies inside one slab of its split (the template is left-right symmetric,
      so a left/right split would leak), with at least ``mni_min_brain`` of its voxels inside the brain.
    * ``synthetic``: random ellipsoids plus thin axis-aligned tubes, Gaussian-smoothed, min-max scaled.
    * ``nifti``: BraTS-layout NIfTI volumes under ``data/<nifti_dir>`` (one sub-folder per subject holding
      ``*<modality>.nii.gz``), the official centre crop and min-max.
    The low-resolution input is the ``pool``-fold 3-D average pool, nearest-upsampled back to ``shape``.
    """

    source: Source = "mni152"
    n_train: int = Field(256, ge=2, le=5000)
    # Early stopping and every grid selection use these, never the test set; 64 volumes x 4 (t, noise) copies
    # = 256 fusion validation items (docs/methods/score_fusion.md: 32 items were noisier than the effect).
    n_val: int = Field(64, ge=1, le=200)
    n_test: int = Field(16, ge=1, le=200)
    shape: tuple[Edge, Edge, Edge] = (16, 16, 16)  # (D, H, W) = (axial, coronal, sagittal) slice counts
    pool: int = Field(4, ge=2, le=50)  # super-resolution factor (along D only for a through-plane acquisition)
    # "through_plane" (default): thick axial slices, ``pool`` x along D and full in-plane resolution, so the
    # axial 2-D model sees sharp slices while the coronal and sagittal ones see the blur (they disagree);
    # "isotropic": ``pool`` x along every axis (the earlier task, on which the slice models barely disagreed).
    acquisition: Literal["through_plane", "isotropic"] = "through_plane"
    # MNI152 crops
    mni_template: Template = "t1"  # t1 = the T1 template; gm / wm = the tissue probability maps
    mni_slab: int = Field(24, ge=1, le=1024)  # slab thickness (voxels) along the anterior-posterior axis
    mni_min_brain: float = Field(0.5, ge=0, le=1)  # least fraction of a crop's voxels inside the brain
    # Synthetic phantoms
    ellipsoids: tuple[Count, Count] = (3, 6)  # min, max per volume
    tubes: tuple[Count, Count] = (1, 2)
    ellipsoid_axes: tuple[Fraction, Fraction] = (0.1, 0.35)  # semi-axes as fractions of the edge
    tube_radius: tuple[Voxels, Voxels] = (0.5, 1.0)  # voxels
    negative_fraction: float = Field(0.25, ge=0, le=1)  # ellipsoids subtracted instead of added
    smooth_sigma: float = Field(0.7, ge=0, le=100)
    # BraTS-layout NIfTI volumes under the project's data/ folder (source = "nifti")
    nifti_dir: RelPath = ""
    nifti_modality: str = "flair"
    nifti_train_fraction: float = Field(0.8, gt=0, lt=1)  # the official split: first 80% of sorted subjects
    nifti_val_fraction: float = Field(0.1, gt=0, lt=1)  # of the training subjects (at least one) for validation

    @property
    def pool_factors(self) -> tuple[int, int, int]:
        """The average pool's factor along (D, H, W)."""
        return (self.pool, 1, 1) if self.acquisition == "through_plane" else (self.pool,) * 3

    @model_validator(mode="after")
    def _check(self) -> DataConfig:
        if any(s % f for s, f in zip(self.shape, self.pool_factors)):
            raise ValueError(f"shape {self.shape} must be divisible by the pool factors {self.pool_factors}")
        if not (1 <= self.ellipsoids[0] <= self.ellipsoids[1] and 0 <= self.tubes[0] <= self.tubes[1]):
            raise ValueError("ellipsoids and tubes are (min, max) counts with min <= max (at least one ellipsoid)")
        if self.source == "nifti" and not self.nifti_dir:
            raise ValueError("data.source='nifti' needs data.nifti_dir (a folder under data/)")
        if self.source == "mni152" and self.mni_slab < self.shape[2]:
            raise ValueError(f"data.mni_slab={self.mni_slab} must hold a whole crop (>= shape[2]={self.shape[2]})")
        return self


class DiffusionConfig(StrictModel):
    """One DDPM schedule shared by the 2-D models and the 3-D fusion (the brief's time-mapping pitfall)."""

    steps: int = Field(1000, ge=2, le=10_000)
    beta_start: float = Field(1e-4, gt=0, lt=1)
    beta_end: float = Field(0.02, gt=0, lt=1)


class NetConfig(StrictModel):
    """An epsilon network: a FiLM-conditioned conv stack ("conv") or a guided-diffusion U-Net ("unet")."""

    arch: Arch = "conv"
    width: int = Field(16, ge=2, le=1000)  # conv channels; the U-Net's inner_channel
    layers: int = Field(4, ge=2, le=50)  # conv: number of conv layers (the last one is the output)
    time_dim: int = Field(32, ge=2, le=1000)
    mults: tuple[Annotated[int, Field(ge=1, le=64)], ...] = (1, 2, 4, 8)  # unet only
    res_blocks: int = Field(2, ge=1, le=20)  # unet only
    dropout: float = Field(0.0, ge=0, lt=1)  # unet only


class SliceNetConfig(NetConfig):
    """The 2-D (2.5-D) slice models: input = noisy slice, 2k+1 neighbouring LR slices, 3 coordinates."""

    neighbours: int = Field(1, ge=0, le=20)  # k: LR slices on each side (1 -> 3 slices; the paper's 5SSR: 2 -> 5)
    slice_batch: int = Field(0, ge=0, le=100)  # slices per forward pass when running on volumes (0 = all at once)


class TrainConfig(StrictModel):
    """One training stage: at most ``steps`` optimiser steps, one validation every ``epoch_steps``, early
    stopping after ``patience`` validations without improvement (ending on the best one's weights), and the
    learning rate chosen on validation from ``lr_grid``."""

    steps: int = Field(800, ge=1, le=5_000_000)
    batch_size: int = Field(32, ge=1, le=1000)
    # Four points: at (1e-3, 3e-3) the 2-D model and the ablation chose the top, the method the bottom.
    lr_grid: tuple[LearningRate, ...] = Field((3e-4, 1e-3, 3e-3, 1e-2), min_length=1, max_length=10)
    ema: float = Field(0.99, ge=0, lt=1)  # the evaluated weights are the EMA (0 = last weights)
    epoch_steps: int = Field(100, ge=1, le=50_000)  # optimiser steps per Lightning epoch (one validation each)
    patience: int = Field(3, ge=1, le=1000)  # validations without improvement before stopping


class FusionTrainConfig(TrainConfig):
    loss: Literal["hybrid", "mse"] = "hybrid"  # official 3-D loss: 5 L1 + 150 L2
    l1_weight: float = Field(5.0, ge=0, le=1e6)
    l2_weight: float = Field(150.0, ge=0, le=1e6)
    crop: int = Field(0, ge=0, le=1000)  # random cubic crops for training (official phase 1: 64); 0 = whole volumes
    grad_accum: int = Field(1, ge=1, le=50)
    # The official 3-D Trainer's EMA (step_start_ema = 2000, update_ema_every = 10): the "EMA" is a copy of the
    # model until ema_start optimiser steps, then an average updated every ema_every steps.
    ema_start: int = Field(2000, ge=0, le=20_000)
    ema_every: int = Field(10, ge=1, le=100)
    val_repeats: int = Field(4, ge=1, le=100)  # copies of the validation volumes (each its own fixed t and noise)


class EvalConfig(StrictModel):
    t_points: int = Field(16, ge=1, le=500)  # stratified diffusion steps per held-out volume for the eps-MSE
    low_t_fraction: float = Field(0.25, gt=0, le=1)  # "low noise" band [0, f T) reported separately
    sample_steps: int = Field(25, ge=1, le=10_000)  # DDIM steps
    eta: float = Field(0.0, ge=0, le=1)
    sample_volumes: int = Field(8, ge=1, le=200)  # held-out volumes super-resolved by sampling (<= n_test)
    self_consistency: bool = True  # project x0_hat so its average pool is 0 (applied to every sampler)
    tpdm_probs: tuple[Fraction, Fraction, Fraction] = (0.1, 0.6, 0.3)  # TPDM's per-step axis probabilities
    ssim_window: int = Field(7, ge=3, le=100)
    chunk: int = Field(32, ge=1, le=500)  # volumes per forward batch in evaluation

    @model_validator(mode="after")
    def _check(self) -> EvalConfig:
        if min(self.tpdm_probs) < 0 or abs(sum(self.tpdm_probs) - 1) > 1e-6:
            raise ValueError("tpdm_probs must be non-negative and sum to 1")
        return self


class Config(MethodConfig):
    SCALES: ClassVar[dict[str, dict]] = {
        "smoke": {
            "data.n_train": 16,
            "data.n_val": 2,
            "data.n_test": 4,
            "data.shape": (8, 8, 8),
            "data.mni_slab": 12,
            "n_seeds": 2,
            "slice_net.width": 8,
            "slice_net.layers": 2,
            "slice_train.steps": 40,
            "slice_train.lr_grid": (1e-3, 3e-3),  # two points keep smoke within seconds
            "fusion_train.lr_grid": (1e-3, 3e-3),
            "slice_train.batch_size": 32,
            "slice_train.epoch_steps": 20,
            "slice_train.patience": 1,
            "fusion_net.width": 8,
            "fusion_train.steps": 10,
            "fusion_train.batch_size": 2,
            "fusion_train.epoch_steps": 5,
            "fusion_train.patience": 1,
            "fusion_train.val_repeats": 1,
            "eval.t_points": 4,
            "eval.sample_steps": 4,
            "eval.sample_volumes": 2,
            "eval.ssim_window": 3,
        },
        "paper": {
            # BraTS 2021 FLAIR (user-supplied under data/brats2021), 4x average-pool super-resolution,
            # 152 x 192 x 192 centre crops; MADM-style 2.5-D Palette models (5 LR slices, inner_channel 64,
            # channel_mults [1,2,4,8], 2 res-blocks, dropout 0.2) and a 3-D U-Net fusion trained on 64^3
            # crops (phase 1) with the 5 L1 + 150 L2 loss, lr 1e-5, EMA 0.995, fp16, accumulation 4, batch 1;
            # the 3-D code's linear schedule 1e-4 -> 0.09 over 1000 steps. GPU only (days per 2-D model):
            # run with the spine's hardware switch, e.g. PAPERLINE_ACCELERATOR=gpu.
            "data.source": "nifti",
            "data.nifti_dir": "brats2021",
            "data.shape": (152, 192, 192),
            "data.pool": 4,
            "data.acquisition": "isotropic",  # the paper's 4x average pool on every axis
            "stage1_per_seed": True,
            "diffusion.beta_end": 0.09,
            "slice_net.arch": "unet",
            "slice_net.width": 64,
            "slice_net.neighbours": 2,
            "slice_net.dropout": 0.2,
            "slice_net.time_dim": 64,
            "slice_net.slice_batch": 8,
            "slice_train.steps": 400_000,
            "slice_train.batch_size": 16,
            "slice_train.lr_grid": (5e-5,),
            "slice_train.ema": 0.9999,
            "slice_train.epoch_steps": 5000,
            "slice_train.patience": 10,
            "fusion_net.arch": "unet",
            "fusion_net.width": 32,
            "fusion_net.mults": (1, 2, 4),
            "fusion_net.time_dim": 64,
            "fusion_train.steps": 100_000,
            "fusion_train.batch_size": 1,
            "fusion_train.lr_grid": (1e-5,),
            "fusion_train.ema": 0.995,
            "fusion_train.crop": 64,
            "fusion_train.grad_accum": 4,
            "fusion_train.epoch_steps": 1000,
            "fusion_train.patience": 10,
            "fusion_train.val_repeats": 1,
            "eval.sample_steps": 1000,
            "eval.eta": 1.0,
            "eval.sample_volumes": 16,
            "eval.chunk": 1,
            "precision": "16-mixed",
        },
    }

    data: DataConfig = DataConfig()
    n_seeds: int = Field(3, ge=1, le=20)  # paired seeds of the fusion stage: the claim's intervals are over them
    # False: one set of 2-D models (stage 1, trained on the first seed) is shared by every seed, as the paper
    # fine-tunes on fixed pretrained 2-D models; True: stage 1 is retrained on every seed (its variability
    # enters the intervals too, at n_seeds times the stage-1 cost).
    stage1_per_seed: bool = False
    diffusion: DiffusionConfig = DiffusionConfig()
    slice_net: SliceNetConfig = SliceNetConfig(width=12)
    slice_train: TrainConfig = TrainConfig(steps=1600)  # at 800 every 2-D model was still improving
    fusion_net: NetConfig = NetConfig(width=16, layers=3)
    fusion_train: FusionTrainConfig = FusionTrainConfig(steps=300, batch_size=2, epoch_steps=50, patience=2)
    eval: EvalConfig = EvalConfig()
    precision: Literal["32-true", "16-mixed", "bf16-mixed"] = "32-true"

    @model_validator(mode="after")
    def _check(self) -> Config:
        if self.eval.sample_volumes > self.data.n_test:
            raise ValueError(
                f"eval.sample_volumes={self.eval.sample_volumes} must not exceed data.n_test={self.data.n_test}"
            )
        if self.fusion_train.crop and (
            self.fusion_train.crop % max(self.data.pool_factors) or self.fusion_train.crop > min(self.data.shape)
        ):
            raise ValueError("fusion_train.crop must be a multiple of data.pool and fit inside data.shape")
        for name, net in (("slice_net", self.slice_net), ("fusion_net", self.fusion_net)):
            if net.arch == "unet":
                factor = 2 ** (len(net.mults) - 1)
                edge = self.fusion_train.crop or min(self.data.shape)
                if any(s % factor for s in self.data.shape) or edge % factor:
                    raise ValueError(f"{name}: a U-Net with {len(net.mults)} levels needs edges divisible by {factor}")
        return self
