"""Learning to route LLMs with confidence tokens (Self-REF, ICML 2025)."""

from models.base import MethodSpec

from .config import Config

SPEC = MethodSpec(
    slug="self_ref",
    title="Learning to Route LLMs with Confidence Tokens",
    paper="ICML 2025 (PMLR 267:10859-10878), arXiv 2410.13284, OpenReview U08mUogGDM",
    claim=(
        "Self-REF confidence tokens (<CN>/<UN> learned from the model's own errors) predict correctness better "
        "than answer-token probability: AUROC >= baseline + 0.03 and a larger area under the accuracy-vs-routing-rate "
        "curve, with answer accuracy preserved within 1 pt"
    ),
    config=Config,
    impl="models.self_ref.pipeline",
    dataset="self_ref",
    primary_metric="method/auroc",
    higher_is_better=True,
)
