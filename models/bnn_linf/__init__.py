"""L_{1,inf}-norm constrained deep binary neural networks against environmental noise (ICML 2025)."""

from models.base import MethodSpec

from .config import Config

SPEC = MethodSpec(
    slug="bnn_linf",
    title="Can DBNNs Robust to Environmental Noise for Resource-constrained Scenarios?",
    paper="ICML 2025 (PMLR 267:78095-78114), OpenReview UKX0k1cWfL",
    claim=(
        "Penalising each binary layer's L_{1,inf} norm ||alpha*B||_{1,inf} raises mean accuracy under "
        "test-time ECG noise by >= 2 points over a plain BNN, costs <= 1 point of clean accuracy, and gives "
        "a lower empirical noise gain and a lower prod_l ||alpha_l*B_l||_{1,inf} than the plain BNN and a "
        "spectral-norm (LCR-style) penalty"
    ),
    config=Config,
    impl="models.bnn_linf.pipeline",
    dataset="bnn_linf",
    primary_metric="method/ecg_acc_noisy",
    higher_is_better=True,
)
