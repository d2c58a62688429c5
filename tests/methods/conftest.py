"""One smoke run per method for the whole session: the contract test and each method's own pipeline test
read the same prepare -> train -> evaluate results instead of training the method again."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@dataclass(frozen=True)
class SmokeRun:
    root: Path  # a project root holding data/, outputs/ of this run only; treat it as read-only
    cfg: Any
    layout: Any  # tasks.steps.Layout
    dataset: Any  # DatasetRef from prepare
    artifacts: Any  # TrainedArtifacts from train
    metrics: Any  # Metrics from evaluate
    claim: Any  # ClaimResult from evaluate


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """``smoke_run(slug)``: that method's smoke-scale run, made on first use and shared afterwards."""
    from models.registry import METHODS
    from tasks import steps

    runs: dict[str, SmokeRun] = {}

    def get(slug: str) -> SmokeRun:
        if slug not in runs:
            spec = METHODS[slug]
            cfg = spec.make_config("smoke")
            root = tmp_path_factory.mktemp(f"smoke_{slug}")
            dataset = steps.prepare(spec, cfg, root)
            artifacts = steps.train(spec, cfg, root)
            metrics, claim = steps.evaluate(spec, cfg, root)
            runs[slug] = SmokeRun(root, cfg, steps.Layout(root, spec), dataset, artifacts, metrics, claim)
        return runs[slug]

    return get
