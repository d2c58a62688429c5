"""L_{1,inf}-norm constrained deep binary neural networks against environmental noise (ICML 2025)."""

from models.base import MethodSpec

from .config import Config

SPEC = MethodSpec(
    slug="bnn_linf",
    title="Can DBNNs Robust to Environmental Noise for Resource-constrained Scenarios?",
    paper="ICML 2025 (PMLR 267:78095-78114), OpenReview UKX0k1cWfL",
    claim=(
        "Penalising the L_{1,inf} norm of every layer's effective weights (the stem, each binary layer's "
        "alpha*B, the head) raises mean accuracy on real ECG (UCR ECG5000) under test-time environmental "
        "noise by >= 2 points over a plain BNN, costs <= 1 point of clean accuracy, and gives a lower "
        "empirical noise gain and a lower l_inf bound than the plain BNN and a spectral-norm penalty"
    ),
    config=Config,
    impl="models.bnn_linf.pipeline",
    dataset="bnn_linf",
    primary_metric="method/acc_noisy",
    higher_is_better=True,
)
