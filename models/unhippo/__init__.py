"""UnHiPPO: uncertainty-aware initialisation of state space models (Lienen et al., ICML 2025)."""

from models.base import MethodSpec

from .config import Config

SPEC = MethodSpec(
    slug="unhippo",
    title="UnHiPPO: Uncertainty-aware Initialization for State Space Models",
    paper="ICML 2025, arXiv 2506.05065 (OpenReview U8GUmxnzXn)",
    claim=(
        "Replacing the frozen HiPPO-LegS matrices of an LSSL layer by the Kalman posterior-mean recursion "
        "(UnHiPPO) makes it noise-robust on the Free Spoken Digits: trained at a noisy level, mean test accuracy "
        "at that and every higher eval noise is >= 2 pt above LSSL, and on clean data it is no more than 3 pt below"
    ),
    config=Config,
    impl="models.unhippo.pipeline",
    dataset="fsdd_digits",
    primary_metric="method/acc_noisy",
    higher_is_better=True,
)
