"""Champion/challenger: every new version becomes ``challenger``; ``champion`` moves only when the new
version was trained on the same dataset (content hash) and scale as the champion, its primary metric
beats the champion's and its must-pass checks hold. Like for like: a model trained on a user's real
file is never ranked against a champion trained on the synthetic set."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from models.base import ClaimResult, DatasetRef, MethodSpec, Metrics
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


def version_tags(data: DatasetRef, scale: str, claim: ClaimResult) -> dict[str, str]:
    """What a registered version records: its dataset (name, hash, real/synthetic), scale and verdict."""
    tags = {k: v for k, v in tracking.dataset_tags(data).items() if not k.endswith("data_provenance")}
    return {**tags, f"{tracking.TAG}.scale": scale, f"{tracking.TAG}.verdict": claim.verdict}


def comparable(champion_tags: dict[str, str], new_tags: dict[str, str]) -> str | None:
    """None when the champion can be ranked against the new version, else why not."""
    for key, what in (
        (f"{tracking.TAG}.data_sha256", "dataset"),
        (f"{tracking.TAG}.data_source", "dataset"),
        (f"{tracking.TAG}.scale", "scale"),
    ):
        old, new = champion_tags.get(key), new_tags.get(key)
        if old is None:
            return f"the champion records no {what}"
        if old != new:
            if what == "dataset":
                name = champion_tags.get(f"{tracking.TAG}.dataset", "?")
                return (
                    f"trained on another dataset (champion: {name} {old[:12]}, "
                    f"{champion_tags.get(f'{tracking.TAG}.data_source', '?')}; this version: "
                    f"{new_tags.get(f'{tracking.TAG}.dataset', '?')} {new[:12]}, "
                    f"{new_tags.get(f'{tracking.TAG}.data_source', '?')})"
                )
            return f"trained at another scale (champion: {old}; this version: {new})"
    return None


def decide_and_alias(
    root: Path, spec: MethodSpec, version: str, metrics: Metrics, claim: ClaimResult, data: DatasetRef, scale: str
) -> Decision:
    """Tag ``version`` with its dataset and scale, set ``challenger`` on it and move ``champion`` if it earned it."""
    c = tracking.client(root)
    name = tracking.registered_name(spec)
    decided = dict(c.get_model_version(name, version).tags)
    if decided.get("paperline.decision") in ("promoted", "kept", "not compared"):  # a retried publish: same answer
        return Decision(
            version,
            decided["paperline.decision"] == "promoted",
            decided.get("paperline.reason", ""),
            alias_version(c, spec, CHAMPION),
        )
    tags = version_tags(data, scale, claim)
    for key, value in tags.items():
        c.set_model_version_tag(name, version, key, value)
    c.set_registered_model_alias(name, CHALLENGER, version)
    new = metrics.values[spec.primary_metric]
    old_version, old = champion_metric(c, spec)
    arrow = "higher" if spec.higher_is_better else "lower"
    mismatch = None
    if old_version is not None:
        champion = c.get_model_version(name, old_version)
        mismatch = comparable(dict(champion.tags), tags)
    if not claim.sane:
        failed = ", ".join(k for k, ok in claim.sanity.items() if not ok)
        promoted, reason = False, f"must-pass checks failed ({failed}); champion stays v{old_version}"
    elif old_version is None:
        promoted, reason = True, f"first version with passing checks ({spec.primary_metric}={new:.4g})"
    elif mismatch:
        promoted, reason = False, f"not compared with champion v{old_version}: {mismatch}; champion stays"
    elif is_better(spec, new, old):
        promoted, reason = (
            True,
            f"{spec.primary_metric} {new:.4g} beats champion v{old_version} ({old:.4g}, {arrow} is better)",
        )
    else:
        promoted, reason = (
            False,
            f"{spec.primary_metric} {new:.4g} does not beat champion v{old_version} ({old:.4g}, {arrow} is better)",
        )
    if promoted:
        c.set_registered_model_alias(name, CHAMPION, version)
    c.set_model_version_tag(
        name, version, "paperline.decision", "promoted" if promoted else ("not compared" if mismatch else "kept")
    )
    c.set_model_version_tag(name, version, "paperline.reason", reason)
    return Decision(version, promoted, reason, version if promoted else old_version)
