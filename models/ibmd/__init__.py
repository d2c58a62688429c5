"""Inverse Bridge Matching Distillation (ICML 2025): a diffusion-bridge teacher distilled into a one-step generator."""

from models.base import MethodSpec

from .config import Config

SPEC = MethodSpec(
    slug="ibmd",
    title="Inverse Bridge Matching Distillation",
    paper="ICML 2025 (PMLR 267:21471-21496), arXiv:2502.01362",
    claim=(
        "Distilling a converged I2SB bridge teacher by inverse bridge matching, from corrupted inputs x1 only, "
        "gives a one-step generator that matches the many-step teacher on the 2-D bimodal bridge, over paired "
        "training seeds: its fraction of samples with |x0_hat_2| > 0.5 is within 0.1 of the teacher's own NFE-100 "
        "samples (the teacher's one-step mean collapses it), and its joint (x0_hat, x1) energy-distance excess over "
        "the noise floor is <= 1.5x the NFE-100 teacher's plus one floor and <= 0.5x the one-step teacher's"
    ),
    config=Config,
    impl="models.ibmd.pipeline",
    dataset="ibmd",
    primary_metric="method/toy_cond_ed",
    higher_is_better=False,
)
