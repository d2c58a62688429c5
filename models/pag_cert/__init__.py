"""Probably Approximately Global robustness certification (Blohm et al., ICML 2025)."""

from models.base import MethodSpec
from models.pag_cert.config import Config

SPEC = MethodSpec(
    slug="pag_cert",
    title="Probably Approximately Global Robustness Certification",
    paper="ICML 2025 (PMLR 267, blohm25a); arXiv 2511.06495; OpenReview UKHlXpiFMy",
    claim=(
        "An eps-net of s(eps*p_min, delta/2) noisy samples, s independent of input dimension, certifies "
        "'conf >= kappa => rob >= rho' so that a 400k held-out resample shows relative error <= eps in >= 19/20 "
        "runs (median <= eps/2) at d = 64, 256 and 1024, and the MLP-PGD certificate passes in >= 90% of runs"
    ),
    config=Config,
    impl="models.pag_cert.pipeline",
    dataset="pag_cert_digits",
    primary_metric="method/pass_rate",
    higher_is_better=True,
)
