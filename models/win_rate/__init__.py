"""Preference learning made easy: everything should be understood through win rate (ICML 2025)."""

from models.base import MethodSpec

from .config import Config

SPEC = MethodSpec(
    slug="win_rate",
    title="Preference Learning Made Easy: Everything Should Be Understood Through Win Rate",
    paper="ICML 2025, arXiv 2502.10505 (OpenReview OxxbqZBJxx)",
    claim=(
        "WRO objectives track their win rate under their own preference model (MC, held-out samples; mean rho "
        ">= 0.9) better than DPO's held-out loss tracks its own; within the RLHF and DPO families the fraction of "
        "the optimum reached ranks final win rates better than the optimum's win rate (synthetic, ~1e9 responses)"
    ),
    config=Config,
    impl="models.win_rate.pipeline",
    dataset="win_rate",
    primary_metric="method/win_rate",
    higher_is_better=True,
)
