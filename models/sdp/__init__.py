"""SE(3)-Equivariant Diffusion Policy in Spherical Fourier Space (SDP, ICML 2025) on a synthetic 3-D reach-and-align task."""

from models.base import MethodSpec

from .config import Config

SPEC = MethodSpec(
    slug="sdp",
    title="SE(3)-Equivariant Diffusion Policy in Spherical Fourier Space",
    paper="ICML 2025, arXiv:2507.01723",
    claim=(
        "With the same demonstrations, budget and lr selection, the SE(3)-equivariant SDP-lite (l <= 1 irreps, "
        "per-degree temporal U-net, Spherical FiLM) beats a Diffusion Policy trained with SO(3) rotation "
        "augmentation and one trained on SO(3)-varied scenes on SO(3)-rotated scenes, keeps >= 0.8x its "
        "in-distribution success there, and SFiLM >= flattened FiLM; SDP-lite's equivariance error < 1e-4 (float32)"
    ),
    config=Config,
    impl="models.sdp.pipeline",
    dataset="sdp",
    primary_metric="method/success_so3",
    higher_is_better=True,
)
