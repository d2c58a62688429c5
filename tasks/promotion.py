"""Champion/challenger: every new version becomes ``challenger``; ``champion`` moves only when
the new version's primary metric beats the champion's and its must-pass checks hold."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from models.base import ClaimResult, MethodSpec, Metrics
from tasks import tracking

CHAMPION = "champion"
CHALLENGER = "challenger"


@dataclass(frozen=True)
class Decision:
    version: str | None
    promoted: bool
    reason: str
    champion_version: str | None


def _by_alias(c, spec: MethodSpec, alias: str):
    from mlflow.exceptions import MlflowException

    try:
        return c.get_model_version_by_alias(tracking.registered_name(spec), alias)
    except MlflowException:
        return None


def alias_version(c, spec: MethodSpec, alias: str) -> str | None:
    """The version holding ``alias`` (``champion``/``challenger``), or None."""
    mv = _by_alias(c, spec, alias)
    return None if mv is None else str(mv.version)


def champion_metric(c, spec: MethodSpec) -> tuple[str | None, float | None]:
    """The current champion's version and primary metric, or (None, None)."""
    mv = _by_alias(c, spec, CHAMPION)
    if mv is None:
        return None, None
    key = tracking.metric_name(f"eval/{spec.primary_metric}")
    value = c.get_run(mv.run_id).data.metrics.get(key) if mv.run_id else None
    return str(mv.version), value


def is_better(spec: MethodSpec, new: float, old: float | None) -> bool:
    if old is None:
        return True
    return new > old if spec.higher_is_better else new < old


def decide_and_alias(root: Path, spec: MethodSpec, version: str, metrics: Metrics, claim: ClaimResult) -> Decision:
    """Set ``challenger`` on ``version`` and move ``champion`` if it earned it."""
    c = tracking.client(root)
    name = tracking.registered_name(spec)
    c.set_registered_model_alias(name, CHALLENGER, version)
    new = metrics.values[spec.primary_metric]
    old_version, old = champion_metric(c, spec)
    arrow = "higher" if spec.higher_is_better else "lower"
    if not claim.sane:
        failed = ", ".join(k for k, ok in claim.sanity.items() if not ok)
        promoted, reason = False, f"must-pass checks failed ({failed}); champion stays v{old_version}"
    elif old_version is None:
        promoted, reason = True, f"first version with passing checks ({spec.primary_metric}={new:.4g})"
    elif is_better(spec, new, old):
        promoted, reason = True, f"{spec.primary_metric} {new:.4g} beats champion v{old_version} ({old:.4g}, {arrow} is better)"
    else:
        promoted, reason = False, f"{spec.primary_metric} {new:.4g} does not beat champion v{old_version} ({old:.4g}, {arrow} is better)"
    if promoted:
        c.set_registered_model_alias(name, CHAMPION, version)
    c.set_model_version_tag(name, version, "paperline.decision", "promoted" if promoted else "kept")
    c.set_model_version_tag(name, version, "paperline.reason", reason)
    return Decision(version, promoted, reason, version if promoted else old_version)
