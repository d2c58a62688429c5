"""FairICP (Lai & Guan, ICML 2025): equalized odds via inverse conditional permutation."""

from models.base import MethodSpec
from models.fair_icp.config import Config

SPEC = MethodSpec(
    slug="fair_icp",
    title="FairICP: Encouraging Equalized Odds via Inverse Conditional Permutation",
    paper="ICML 2025 (PMLR v267 lai25b); arXiv 2404.05678; OpenReview TzTb1h2nsk",
    claim=(
        "SIM1 (k=5, alpha=0.9, 5-d A): at mu=0.8 FairICP halves pdcor(Y_hat, A | Y) vs mu=0 with MSE <= 1.3x, "
        "passes the EO test (median p >= 0.05) where mu=0 fails (< 0.05), and beats the Gaussian-CRT baseline's pdcor"
    ),
    config=Config,
    impl="models.fair_icp.pipeline",
    dataset="fair_icp",
    primary_metric="method/pdcor_mu0.8",
    higher_is_better=False,
)
