"""Learning curves of single-pass kernel SGD with an exponentially decaying step size (S^1 and S^{d-1})."""

from models.base import MethodSpec
from models.kernel_sgd.config import Config

SPEC = MethodSpec(
    slug="kernel_sgd",
    title="Learning Curves of Stochastic Gradient Descent in Kernel Regression",
    paper="ICML 2025 (PMLR v267 zhang25av); arXiv:2505.22048; OpenReview U3RtBk95d1",
    claim=(
        "Last-iterate kernel SGD with an exponentially decaying step size does not saturate, in fixed and in high "
        "dimension: on S^1 with a very smooth target (top eigenfunction) its excess risk at n = 2^15 is <= 0.75x "
        "that of averaged constant-step SGD and of tuned KRR and its log-log slope is at least 0.1 steeper than "
        "KRR's; on S^9 with n ~ d^gamma and a source-s = 2 target its excess risk is <= 0.75x each baseline's "
        "(geometric mean over gamma in [1.5, 2.5])"
    ),
    config=Config,
    impl="models.kernel_sgd.pipeline",
    dataset="kernel_sgd_synthetic",
    primary_metric="method/excess_risk",
    higher_is_better=False,
)
