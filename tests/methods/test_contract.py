"""Every registered method runs prepare -> train -> evaluate -> claim at smoke scale."""

import json
import math
import re

import pytest

from models.base import DATA_SOURCES, STATES, ClaimResult, Criterion, Metrics, TrainedArtifacts, read_dataset
from models.registry import METHODS
from tasks import steps
from tasks.diagnostics import FLAG_CODES


@pytest.mark.parametrize("slug", list(METHODS))
def test_smoke_pipeline(slug, smoke_run, tmp_path):
    spec = METHODS[slug]
    run = smoke_run(slug)
    cfg, layout, ref, artifacts, metrics, claim = (
        run.cfg,
        run.layout,
        run.dataset,
        run.artifacts,
        run.metrics,
        run.claim,
    )

    assert ref.path == layout.data_dir and ref.files, "prepare wrote no files"
    assert read_dataset(layout.data_dir).sha256 == ref.sha256
    assert not list((run.root / "data").glob("*.partial")), "a staging folder was left behind"
    # Deterministic from the seed: preparing again (into a fresh root) gives byte-identical files.
    assert steps.prepare(spec, cfg, tmp_path).sha256 == ref.sha256

    assert isinstance(artifacts, TrainedArtifacts) and artifacts.model_dir == layout.model_dir
    assert TrainedArtifacts.load(layout.model_dir).history == json.loads(json.dumps(artifacts.history))
    assert artifacts.history, "no learning curve recorded"
    for variant, records in artifacts.history.items():
        assert records, f"variant {variant} has an empty history"
        assert all(math.isfinite(float(v)) for r in records for v in r.values()), variant

    assert isinstance(metrics, Metrics) and isinstance(claim, ClaimResult)
    assert spec.primary_metric in metrics.values, f"primary metric {spec.primary_metric!r} missing"
    assert not metrics.non_finite(), metrics.non_finite()
    assert not any(k.startswith(("eval/", "train/")) for k in metrics.values), "the spine adds the eval/ prefix"
    assert any(k.startswith("method/") for k in metrics.values) and any(
        k.startswith("baseline/") for k in metrics.values
    )
    assert metrics.figures and all(f.suffix == ".png" and f.stat().st_size > 1000 for f in metrics.figures)
    assert all(f.parent == layout.plots_dir for f in metrics.figures)
    assert claim.statement and claim.criteria and claim.verdict in STATES
    for criterion in claim.criteria:
        assert isinstance(criterion, Criterion) and criterion.statement and criterion.units, criterion
        assert criterion.low <= criterion.estimate <= criterion.high or criterion.state == "fails", criterion
    assert all(isinstance(v, bool) for v in claim.sanity.values()) and "finite_metrics" in claim.sanity
    on_disk = json.loads(layout.claim_file.read_text())
    assert on_disk["verdict"] == claim.verdict and ClaimResult.from_dict(on_disk).to_dict() == claim.to_dict()
    assert {c["name"] for c in on_disk["criteria"]} == {c.name for c in claim.criteria}
    assert all({"estimate", "low", "high", "threshold", "direction", "state"} <= c.keys() for c in on_disk["criteria"])
    # Every result says which data it came from.
    assert ref.source in DATA_SOURCES and ref.provenance, f"{slug}: prepare's meta lacks source/provenance ({ref.meta})"

    model = spec.module().load_model(cfg, layout.model_dir)
    import torch

    assert isinstance(model, torch.nn.Module) or callable(getattr(model, "predict", None))
    # What a registered version is (tasks/registered_model.py): the model folder + the config as JSON, rebuilt
    # by the method's own loader, exactly as MLflow's pyfunc loader calls it.
    from types import SimpleNamespace

    from tasks.tracking import MODEL_CODE

    config = tmp_path / "registered_config.json"
    config.write_text(cfg.model_dump_json())
    namespace: dict = {}
    exec(compile(MODEL_CODE.read_text(), str(MODEL_CODE), "exec"), namespace)  # noqa: S102 (our own file)
    served = namespace["PaperlineModel"]()
    served.load_context(
        SimpleNamespace(
            model_config={"method": slug}, artifacts={"model_dir": str(layout.model_dir), "config": str(config)}
        )
    )
    assert type(served.model) is type(model)
    if isinstance(model, torch.nn.Module):
        for (name, a), (_, b) in zip(model.state_dict().items(), served.model.state_dict().items()):
            assert torch.equal(a, b), name


@pytest.mark.parametrize("slug", ["pag_cert", "sdp"])  # the two whose numbers once drew on global RNGs
def test_results_do_not_depend_on_the_process_rng_state(slug, smoke_run, tmp_path):
    """The shared smoke run against one made after seeding every global RNG differently."""
    import random

    import numpy as np
    import torch

    spec = METHODS[slug]
    cfg = spec.make_config("smoke")
    reference = smoke_run(slug).metrics
    random.seed(12345), np.random.seed(12345), torch.manual_seed(12345)
    steps.prepare(spec, cfg, tmp_path)
    steps.train(spec, cfg, tmp_path)
    random.seed(999), np.random.seed(999), torch.manual_seed(999)
    metrics, _ = steps.evaluate(spec, cfg, tmp_path)

    def without_timings(values):
        return {k: v for k, v in values.items() if "seconds" not in k}

    assert without_timings(metrics.values) == without_timings(reference.values)


# Per-unit keys built by hand (``arm/seed3/acc``, ``acc_seed3``, ``split2``, ``_r4/``) instead of Metrics.add_units.
_UNIT_KEY = re.compile(r"(^|[/_])(seed|split|rep|replicate|fold|run|unit)\d+($|[/_])|_r\d+($|/)")


@pytest.mark.parametrize("slug", list(METHODS))
def test_claim_declares_what_the_diagnostics_read(slug, smoke_run):
    """Paired units are first-class, every claim declares a negative control and where its arms sit, and every
    criterion over units names the random draws they cover (tasks/diagnostics.py reads all of it)."""
    run = smoke_run(slug)
    metrics, claim = run.metrics, run.claim
    assert metrics.units, f"{slug}: no per-unit values recorded (Metrics.add_units)"
    flattened = set(metrics.unit_values())
    hand_built = sorted(k for k in metrics.values if _UNIT_KEY.search(k) and k not in flattened)
    hand_built = [k for k in hand_built if not k.startswith("select/")]  # the selection helpers' own summaries
    assert not hand_built, f"{slug}: per-unit keys built by hand: {hand_built[:8]}"
    assert claim.controls, f"{slug}: no negative control declared"
    assert claim.separations, f"{slug}: no Separation declared (where the compared arms sit on a bounded metric)"
    for criterion in claim.criteria:
        if criterion.interval != "exact":
            assert criterion.covers, f"{slug}/{criterion.name}: the random draws its units cover are not named"
            assert criterion.labels or criterion.interval == "clopper-pearson", (
                f"{slug}/{criterion.name}: built from bare arrays; pass the UnitValues of Metrics.paired/unit"
            )
    assert claim.diagnostics is not None and all(f.code in FLAG_CODES for f in claim.diagnostics)
    explained = {f.key for f in claim.diagnostics} | {f.code for f in claim.diagnostics}
    stale = [k for k in claim.explained if k not in explained and run.cfg.scale == "default"]
    assert not stale, f"{slug}: explanations for flags that were not raised: {stale}"
    on_disk = json.loads(run.layout.claim_file.read_text())
    assert on_disk["decided_by"] == claim.decided_by
