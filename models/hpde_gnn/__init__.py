"""Hyperbolic-PDE GNN (ICML 2025): polynomial spectral GNNs vs their wave-equation (leapfrog) versions on CSBMs."""

from models.base import MethodSpec

from .config import Config

SPEC = MethodSpec(
    slug="hpde_gnn",
    title=(
        "Hyperbolic-PDE GNN: Spectral Graph Neural Networks in the Perspective of A System of "
        "Hyperbolic Partial Differential Equations"
    ),
    paper="ICML 2025 (PMLR 267:73810-73827), arXiv 2505.23014",
    claim=(
        "On contextual SBMs at edge homophily h in {0.1, 0.3, 0.5, 0.7, 0.9} (3 splits), the Hyperbolic-PDE version "
        "of a polynomial spectral GNN (T=4, dt=1, per-step order 2) matches or beats its base filter (order 10): for "
        ">= 2 of GPR-GNN, ChebNetII, BernNet its mean test accuracy is >= base - 0.5 pt and it is strictly better "
        "on >= 3 of the 5 levels"
    ),
    config=Config,
    impl="models.hpde_gnn.pipeline",
    dataset="csbm",
    primary_metric="method/acc_mean",
    higher_is_better=True,
)
