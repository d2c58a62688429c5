"""FairICP (Lai & Guan, ICML 2025): equalized odds via inverse conditional permutation."""

from models.base import MethodSpec
from models.fair_icp.config import Config

SPEC = MethodSpec(
    slug="fair_icp",
    title="FairICP: Encouraging Equalized Odds via Inverse Conditional Permutation",
    paper="ICML 2025 (PMLR v267 lai25b); arXiv 2404.05678; OpenReview TzTb1h2nsk",
    claim=(
        "Communities & Crime (3-d A): the KPC-1NN equalized-odds test rejects the mu=0 predictor and accepts "
        "FairICP at mu=0.9, and FairICP's MSE-KPC frontier over the mu grid lies below the CRT baseline's "
        "at matched MSE (3 paired splits)"
    ),
    config=Config,
    impl="models.fair_icp.pipeline",
    dataset="fair_icp",
    primary_metric="method/frontier_kpc_gap_vs_crt",
    higher_is_better=False,
)
