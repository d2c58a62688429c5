"""The Prefect flows: ``method_pipeline``, ``all_methods`` and ``nightly_retrain``.

Parameters are typed (a ``Literal`` of method names, the ``Scale`` enum), so the Prefect UI
shows a form with dropdowns.
"""

from __future__ import annotations

from typing import Literal

from tasks import env

env.configure()

from prefect import flow, get_run_logger  # noqa: E402
from prefect.artifacts import create_markdown_artifact  # noqa: E402
from prefect.runtime import flow_run  # noqa: E402

from models.base import Scale  # noqa: E402
from models.registry import get, names  # noqa: E402
from tasks import prefect_tasks as t  # noqa: E402
from tasks import report, tracking  # noqa: E402
from tasks.config import build_config, parse_overrides  # noqa: E402

MethodName = Literal[tuple(names())]  # type: ignore[valid-type]


def _artifact_key(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text.lower())


@flow(name="method-pipeline", log_prints=True)
def method_pipeline(method: MethodName, scale: Scale = Scale.default, overrides: list[str] | None = None) -> dict:
    """prepare -> train -> evaluate -> publish for one method, tracked in one MLflow run."""
    spec = get(method)
    cfg = build_config(spec, scale, parse_overrides(overrides or []))
    root = env.project_root()
    env.make_state_dirs(root)
    run_id = t.open_run(spec.slug, cfg, root, str(flow_run.id or ""))
    try:
        t.prepare(spec.slug, cfg, root)
        t.version_dataset(spec.slug, cfg, root)
        t.train(spec.slug, cfg, root)
        t.evaluate(spec.slug, cfg, root)
        result = t.publish(spec.slug, cfg, root, run_id)
    except BaseException as exc:
        tracking.fail_run(root, run_id, f"{type(exc).__name__}: {exc}")
        raise
    create_markdown_artifact(
        key=_artifact_key(f"claim-{spec.slug}"),
        markdown=f"## {spec.title}\n\n" + report.markdown_table([result], {spec.slug: result["claim"]}),
        description=f"claim table for {spec.slug}",
    )
    return result


def _run_many(methods: list[str], scale: Scale, overrides: list[str] | None) -> list[dict]:
    logger = get_run_logger()
    results = []
    for i, slug in enumerate(methods, 1):
        logger.info("[%d/%d] %s (%s scale)", i, len(methods), slug, scale.value)
        state = method_pipeline(slug, scale, overrides, return_state=True)
        if state.is_completed():
            results.append(state.result())
        else:
            try:
                state.result()
                message = state.message or "failed"
            except BaseException as exc:  # the failure is reported in the table, the others go on
                message = f"{type(exc).__name__}: {exc}"
            results.append({"method": slug, "error": message, "run_id": None})
    return results


def _publish_table(results: list[dict], key: str) -> None:
    claims = {r["method"]: r["claim"] for r in results if "claim" in r}
    create_markdown_artifact(key=key, markdown=report.markdown_table(results, claims), description="claim table")
    get_run_logger().info("claim table (artifact %r):\n%s", key, report.text_table(results))


@flow(name="all-methods", log_prints=True)
def all_methods(methods: list[MethodName] | None = None, scale: Scale = Scale.default) -> list[dict]:
    """Every (or the chosen) registered method, one after another; a failure does not stop the rest."""
    results = _run_many(list(methods or names()), scale, None)
    _publish_table(results, "claim-table")
    return results


@flow(name="nightly-retrain", log_prints=True)
def nightly_retrain(methods: list[MethodName] | None = None, scale: Scale = Scale.default,
                    overrides: list[str] | None = None) -> list[dict]:
    """Retrain, register a challenger per method, and move champions that earned it."""
    results = _run_many(list(methods or names()), scale, overrides)
    _publish_table(results, "nightly-decisions")
    return results
