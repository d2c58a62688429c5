"""Preference learning made easy: everything should be understood through win rate (ICML 2025)."""

from models.base import MethodSpec

from .config import Config

SPEC = MethodSpec(
    slug="win_rate",
    title="Preference Learning Made Easy: Everything Should Be Understood Through Win Rate",
    paper="ICML 2025, arXiv 2502.10505 (OpenReview OxxbqZBJxx)",
    claim=(
        "Win-rate-optimising objectives (RLHF, NLHF, direct h-WRO) track the exact win rate vs the anchor "
        "(mean Spearman rho across checkpoints >= 0.9, DPO's held-out loss weaker), and the fraction of each "
        "objective's optimum reached ranks final win rates better than the win rate at the optimum; tabular "
        "closed forms (SFT 0.592, WRO 0.819, DPO -> beta-optimum +-0.02) hold"
    ),
    config=Config,
    impl="models.win_rate.pipeline",
    dataset="win_rate",
    primary_metric="method/win_rate",
    higher_is_better=True,
)
