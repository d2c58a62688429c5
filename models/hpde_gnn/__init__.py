"""Hyperbolic-PDE GNN (ICML 2025): polynomial spectral GNNs vs their wave-equation (leapfrog) versions on the real
benchmark graphs (Cora, Citeseer, Chameleon, Texas, ...), with a CSBM homophily sweep as a secondary
figure (paper scale, or ``data.csbm_sweep=true``)."""

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
        "On the real node-classification benchmarks (default: Cora, de-duplicated Chameleon, Texas, Cornell, Wisconsin; "
        "3 random 60/20/20 splits), the Hyperbolic-PDE version of a polynomial spectral GNN (T=4, dt=1, "
        "per-step order 2) matches or beats its base filter (order 10), each arm's lr (and, at paper scale, dropout) chosen on validation and "
        "trained with early stopping: for >= 2 of GPR-GNN, ChebNetII, BernNet the mean paired gain is >= -0.5 pt and "
        "the PDE version wins more than half of the untied (graph x split) runs"
    ),
    config=Config,
    impl="models.hpde_gnn.pipeline",
    dataset="hpde_graphs",
    primary_metric="method/acc_mean",
    higher_is_better=True,
)
