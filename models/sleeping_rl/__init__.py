"""Sleeping Reinforcement Learning (ICML 2025): SleepingUCBVI vs UCBVI on StochasticFrozenLake."""

from models.base import MethodSpec

from .config import Config

SPEC = MethodSpec(
    slug="sleeping_rl",
    title="Sleeping Reinforcement Learning",
    paper="ICML 2025 (PMLR 267:14439-14498), OpenReview U7c1DqiPTl",
    claim=(
        "With per-stage, state-dependent action availability, SleepingUCBVI's last-10% reward is within 0.3 of the "
        "exact optimum V* while availability-agnostic UCBVI stays <= V*_agnostic + 0.3, and the gap is >= "
        "0.5 (V* - V*_agnostic) on FrozenLake g=2,p=0.25 and g=3,p=0.5 (K=5000, beta=0.1, 5 seeds)"
    ),
    config=Config,
    impl="models.sleeping_rl.pipeline",
    dataset="frozenlake",
    primary_metric="method/last10_reward_main",
    higher_is_better=True,
)
