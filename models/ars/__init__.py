"""ARS: Adaptive Reward Scaling for Multi-Task RL (ICML 2025) on multi-task SAC."""

from models.base import MethodSpec

from .config import Config

SPEC = MethodSpec(
    slug="ars",
    title="ARS: Adaptive Reward Scaling for Multi-Task Reinforcement Learning",
    paper="ICML 2025, OpenReview U0mI6M7lvI",
    claim=(
        "On 4 point-mass tasks whose rewards are scaled by 1, 0.1, 0.01, 0.001, multi-task SAC with ARS "
        "scaling (Eq. 6 history-based scales from the raw per-task buffers) - at T_init only (b) and as the "
        "paper's full method with resets (c) - beats plain MT-SAC by >= 0.25 in mean success over tasks, and its "
        "worst task reaches success >= 0.6 (3 paired seeds, lr chosen on validation per arm)"
    ),
    config=Config,
    impl="models.ars.pipeline",
    dataset="metaworld_logs",
    primary_metric="method/mean_success",
    higher_is_better=True,
)
