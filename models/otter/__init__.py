"""OTTER: text-aware visual feature extraction on a frozen vision-language encoder (Huang et al., ICML 2025)."""

from models.base import MethodSpec

from .config import Config

SPEC = MethodSpec(
    slug="otter",
    title="OTTER: A Vision-Language-Action Model with Text-Aware Visual Feature Extraction",
    paper="ICML 2025, arXiv 2503.03734",
    claim=(
        "On a frozen contrastively pretrained encoder, selecting one visual token per instruction word "
        "(softmax of patch-word cosine / tau) generalises to an unseen target colour: OTTER's held-out "
        "success >= 0.5, >= the fine-tuned-encoder OTTER + 0.2, >= the all-tokens frozen head + 0.3 and "
        ">= 0.8 x its seen success, every arm's learning rates chosen on seen-target validation"
    ),
    config=Config,
    impl="models.otter.pipeline",
    dataset="tabletop",
    primary_metric="method/success_heldout",
    higher_is_better=True,
)
