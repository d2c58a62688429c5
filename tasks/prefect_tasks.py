"""Thin Prefect ``@task`` wrappers over the plain steps: retries, names, logs.

Tasks pass the method slug, a config and the project root (paths and small values, never
tensors or clients), so Prefect can hash their inputs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from prefect import get_run_logger, task

from models.base import MethodConfig
from models.registry import get
from tasks import publish as publish_mod
from tasks import steps, tracking


@task(name="prepare", task_run_name="prepare-{slug}")
def prepare(slug: str, cfg: MethodConfig, root: Path) -> dict:
    ref = steps.prepare(get(slug), cfg, root, reuse=True)
    get_run_logger().info("dataset %s ready: %d files, sha256 %s", ref.name, len(ref.files), ref.sha256[:12])
    return {"name": ref.name, "sha256": ref.sha256, "path": str(ref.path)}


@task(name="version-dataset", task_run_name="version-{slug}", retries=2, retry_delay_seconds=3)
def version_dataset(slug: str, cfg: MethodConfig, root: Path) -> bool:
    """Put the dataset into the local DVC cache when it was made from params.yaml's values."""
    from tasks.config import ConfigError, config_from_params

    logger = get_run_logger()
    if not (root / ".dvc").is_dir():
        logger.info("no DVC repository at %s: dataset not versioned", root)
        return False
    try:
        tracked = config_from_params(root, slug)
    except ConfigError as exc:
        logger.warning("params.yaml unusable (%s): dataset not versioned", exc)
        return False
    if steps.data_params(tracked) != steps.data_params(cfg):
        logger.info("data params differ from params.yaml: dataset not committed to DVC")
        return False
    proc = subprocess.run(
        [sys.executable, "-m", "dvc", "commit", "--force", "--quiet", f"prepare@{slug}"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        message = proc.stderr.strip() or proc.stdout.strip()
        if "lock" in message.lower():
            # Another DVC process (a `dvc repro`) holds the repository lock: the data are fine, only
            # their copy in the cache waits; failing here would lose the run for nothing.
            logger.warning(
                "DVC is busy (%s); run `dvc commit prepare@%s` later to version this dataset",
                message.splitlines()[-1],
                slug,
            )
            return False
        raise RuntimeError(f"dvc commit prepare@{slug} failed: {message}")
    logger.info("dataset committed to the DVC cache (prepare@%s)", slug)
    return True


@task(name="train", task_run_name="train-{slug}")
def train(slug: str, cfg: MethodConfig, root: Path) -> dict:
    artifacts = steps.train(get(slug), cfg, root)
    get_run_logger().info("trained %s: %s", slug, {k: round(v, 4) for k, v in artifacts.summary.items()})
    return {"model_dir": str(artifacts.model_dir), "summary": artifacts.summary}


@task(name="evaluate", task_run_name="evaluate-{slug}")
def evaluate(slug: str, cfg: MethodConfig, root: Path) -> dict:
    from tasks.report import criterion_line

    metrics, claim = steps.evaluate(get(slug), cfg, root)
    criteria = "".join(f"\n  {criterion_line(c.to_dict())}" for c in claim.criteria)
    get_run_logger().info("claim %s; must-pass checks: %s%s", claim.verdict, claim.sanity, criteria)
    return {"verdict": claim.verdict, "sane": claim.sane}


@task(name="publish", task_run_name="publish-{slug}", retries=2, retry_delay_seconds=5)
def publish(slug: str, cfg: MethodConfig, root: Path, run_id: str) -> dict:
    result = publish_mod.publish(get(slug), cfg, root, run_id)
    get_run_logger().info("published %s: version %s, %s", slug, result.version, result.reason)
    return result.to_dict()


@task(name="open-mlflow-run", task_run_name="open-run-{slug}", retries=2, retry_delay_seconds=3)
def open_run(slug: str, cfg: MethodConfig, root: Path, flow_run_id: str) -> str:
    return tracking.start_pipeline_run(get(slug), cfg, root, flow_run_id)
