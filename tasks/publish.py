"""Publish: log a finished pipeline to MLflow, register the model, decide champion/challenger.

Never inside a DVC stage: DVC's run cache can restore a stage without running it, and a
registration must happen every time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from models.base import MethodConfig, MethodSpec, TrainedArtifacts
from tasks import steps, tracking


@dataclass(frozen=True)
class PublishResult:
    method: str
    run_id: str
    claim: str
    verdict: str  # holds | fails | inconclusive
    criteria: list[dict]  # Criterion.to_dict() each
    figures: dict[str, float]
    sane: bool
    failed_checks: tuple[str, ...]
    version: str | None
    promoted: bool
    champion_version: str | None
    reason: str
    dataset: str = ""
    data_source: str = ""
    decided_by: str = "method"  # or the diagnostics' flags (tasks.diagnostics)
    flags: tuple[dict, ...] = ()  # Flag.to_dict() each

    def to_dict(self) -> dict:
        return asdict(self)


RESULTS_LOGGED = f"{tracking.TAG}.results_logged"


def version_of_run(c, spec: MethodSpec, run_id: str) -> str | None:
    """The registered version made from ``run_id``, if a (retried or killed) publish already made one."""
    from mlflow.exceptions import MlflowException

    try:
        versions = c.search_model_versions(f"name='{tracking.registered_name(spec)}' and run_id='{run_id}'")
    except MlflowException:
        return None
    return str(min(int(v.version) for v in versions)) if versions else None


def mark_orphans(c, spec: MethodSpec, run_id: str) -> list[str]:
    """Versions a killed publish registered but never decided on (no decision tag): tagged ``orphaned``,
    so the registry says what they are; they never hold an alias."""
    from mlflow.exceptions import MlflowException

    try:
        versions = c.search_model_versions(f"name='{tracking.registered_name(spec)}'")
    except MlflowException:
        return []
    orphans = []
    for v in versions:
        if "paperline.decision" in v.tags or v.run_id == run_id:
            continue
        c.set_model_version_tag(v.name, v.version, "paperline.decision", "orphaned")
        c.set_model_version_tag(
            v.name,
            v.version,
            "paperline.reason",
            "its publish step was interrupted before a decision; not compared, never champion",
        )
        orphans.append(str(v.version))
    return orphans


def publish(spec: MethodSpec, cfg: MethodConfig, root: Path, run_id: str) -> PublishResult:
    """Idempotent: a retry (Prefect retries this step) reuses the results and version its run id already has."""
    from tasks import promotion

    layout = steps.Layout(root, spec)
    metrics, claim = steps.load_results(spec, root)
    data = steps.load_data(spec, root)
    artifacts = TrainedArtifacts.load(layout.model_dir)
    c = tracking.client(root)
    if c.get_run(run_id).data.tags.get(RESULTS_LOGGED) != "1":
        tracking.log_results(root, run_id, spec, data, artifacts, metrics, claim, layout.out_dir)
        c.set_tag(run_id, RESULTS_LOGGED, "1")
    failed = tuple(k for k, ok in claim.sanity.items() if not ok)
    common = dict(
        method=spec.slug,
        run_id=run_id,
        claim=claim.statement,
        verdict=claim.verdict,
        criteria=[c.to_dict() for c in claim.criteria],
        figures=claim.figures,
        sane=claim.sane,
        failed_checks=failed,
        dataset=data.name,
        data_source=data.source,
        decided_by=claim.decided_by,
        flags=tuple(f.to_dict() for f in claim.diagnostics),
    )
    if failed:
        reason = f"must-pass checks failed: {', '.join(failed)}; no version registered"
        tracking.fail_run(root, run_id, reason)
        champion, _ = promotion.champion_metric(tracking.client(root), spec)
        return PublishResult(**common, version=None, promoted=False, champion_version=champion, reason=reason)
    mark_orphans(c, spec, run_id)
    version = version_of_run(c, spec, run_id)
    from models.common import runtime

    runtime.raise_if_stop_requested()  # a run asked to stop never registers a model
    if version is None:
        spec.module().load_model(cfg, layout.model_dir)  # a model its own loader cannot rebuild is never registered
        version = tracking.log_model(root, run_id, spec, cfg, layout.model_dir)
    decision = promotion.decide_and_alias(root, spec, version, metrics, claim, data, cfg.scale.value)
    c.set_tag(run_id, "paperline.decision", "promoted" if decision.promoted else "kept")
    c.set_tag(run_id, "paperline.decision_reason", decision.reason)
    c.set_tag(run_id, "paperline.model_version", version)
    c.set_terminated(run_id, status="FINISHED")
    return PublishResult(
        **common,
        version=version,
        promoted=decision.promoted,
        champion_version=decision.champion_version,
        reason=decision.reason,
    )
