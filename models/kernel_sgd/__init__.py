"""Learning curves of single-pass kernel SGD with an exponentially decaying step size."""

from models.base import MethodSpec
from models.kernel_sgd.config import Config

SPEC = MethodSpec(
    slug="kernel_sgd",
    title="Learning Curves of Stochastic Gradient Descent in Kernel Regression",
    paper="ICML 2025 (PMLR v267 zhang25av); arXiv:2505.22048; OpenReview U3RtBk95d1",
    claim=(
        "Last-iterate kernel SGD with an exponentially decaying step size does not saturate: on a very smooth "
        "target (top eigenfunction) its excess risk at n = 2^15 is <= 0.75x that of averaged constant-step SGD "
        "and tuned KRR, and its log-log slope is at least 0.1 steeper than KRR's"
    ),
    config=Config,
    impl="models.kernel_sgd.pipeline",
    dataset="kernel_sgd_circle",
    primary_metric="method/excess_risk",
    higher_is_better=False,
)
