"""Probably Approximately Global robustness certification (Blohm et al., ICML 2025)."""

from models.base import MethodSpec
from models.pag_cert.config import Config

SPEC = MethodSpec(
    slug="pag_cert",
    title="Probably Approximately Global Robustness Certification",
    paper="ICML 2025 (PMLR 267, blohm25a); arXiv 2511.06495; OpenReview UKHlXpiFMy",
    claim=(
        "On MNIST, an eps-net of s(eps*p_min, delta/2) noisy samples, s independent of input dimension, certifies "
        "'conf >= kappa => rob >= rho' with relative error <= eps on fresh draws from the sampling distribution "
        "in >= 95% of 75 runs (3 split seeds) at d = 196, 784 and 3136, and in >= 90% of 39 runs for an MLP "
        "certified with a PGD oracle"
    ),
    config=Config,
    impl="models.pag_cert.pipeline",
    dataset="pag_cert_mnist",
    primary_metric="method/pass_rate",
    higher_is_better=True,
)
