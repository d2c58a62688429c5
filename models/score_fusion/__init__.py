"""Score-Fusion (ICML 2025): 3-D volume translation by fusing three perpendicular 2-D diffusion models in score space."""

from models.base import MethodSpec

from .config import Config

SPEC = MethodSpec(
    slug="score_fusion",
    title="Introducing 3D Representation for Medical Image Volume-to-Volume Translation via Score Fusion",
    paper="ICML 2025, arXiv:2501.07430",
    claim=(
        "A zero-initialised 3-D net that fuses the epsilon fields of three frozen perpendicular 2-D diffusion "
        "models per voxel (starting exactly at their average, the TOSM/MADM 'merge' baseline) and is fine-tuned "
        "lowers the held-out epsilon-MSE to <= 0.95x merge's and below a residual-only fusion ablation's, and "
        "does not lower the PSNR of DDIM samples (and beats the ablation's), over paired seeds, on 2x "
        "super-resolution of 16^3 crops of the real MNI152 brain template"
    ),
    config=Config,
    impl="models.score_fusion.pipeline",
    dataset="score_fusion",
    primary_metric="method/eps_mse",
    higher_is_better=False,
)
