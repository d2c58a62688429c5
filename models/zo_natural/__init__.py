"""Natural perturbations for zeroth-order black-box training (Sawada et al., ICML 2025)."""

from models.base import MethodSpec
from models.zo_natural.config import Config

SPEC = MethodSpec(
    slug="zo_natural",
    title="Natural Perturbations for Black-box Training of Neural Networks by Zeroth-Order Optimization",
    paper="ICML 2025, PMLR 267:53063-53079 (OpenReview ULAQ9GmJlo)",
    claim=(
        "ZO probes ~ N(0, (F + rho I)^-1) (block Fisher) train a deficient chip faster than isotropic ZO-I: "
        "the target training loss in <= 70 % of ZO-I's queries (paired seeds, MNIST)"
    ),
    config=Config,
    impl="models.zo_natural.pipeline",
    dataset="zo_natural",
    primary_metric="method/test_acc",
    higher_is_better=True,
)
