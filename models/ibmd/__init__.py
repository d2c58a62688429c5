"""Inverse Bridge Matching Distillation (ICML 2025): a diffusion-bridge teacher distilled into a one-step generator."""

from models.base import MethodSpec

from .config import Config

SPEC = MethodSpec(
    slug="ibmd",
    title="Inverse Bridge Matching Distillation",
    paper="ICML 2025 (PMLR 267:21471-21496), arXiv:2502.01362",
    claim=(
        "Distilling an I2SB bridge teacher by inverse bridge matching, from corrupted inputs x1 only, gives a "
        "one-step generator that matches the many-step teacher: on the 2-D bimodal bridge (conditional and "
        "unconditional teachers) the joint (x0_hat, x1) energy distance of IBMD at NFE 1 is <= 1.5x the "
        "teacher's at NFE 100 and <= 0.5x the teacher's at NFE 1, and the fraction of samples with "
        "|x0_hat_2| > 0.5 is within 0.1 of the truth (the teacher's one-step mean collapses it)"
    ),
    config=Config,
    impl="models.ibmd.pipeline",
    dataset="ibmd",
    primary_metric="method/toy_cond_ed",
    higher_is_better=False,
)
