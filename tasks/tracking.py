"""MLflow tracking: explicit URIs, one experiment per method, a parent run per pipeline.

Everything goes through an ``MlflowClient`` with explicit run ids (MLflow's active run is
thread-local, and Prefect runs tasks in worker threads).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import socket
import sqlite3
import subprocess
import warnings
from pathlib import Path

from models.base import ClaimResult, DatasetRef, MethodConfig, MethodSpec, Metrics, TrainedArtifacts
from tasks import host

TAG = "paperline"


_INVALID = re.compile(r"[^A-Za-z0-9_\-. /]")


def metric_name(name: str) -> str:
    """An MLflow-legal key: letters, digits and ``_ - . / space``; anything else becomes ``_``."""
    return _INVALID.sub("_", name)


def local_uri(root: Path) -> str:
    return f"sqlite:///{(root / 'mlflow' / 'mlflow.db').resolve()}"


def tracking_uri(root: Path) -> str:
    """``$MLFLOW_TRACKING_URI``, else the server ``paperline up`` started, else the local SQLite DB."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    from tasks import servers

    running = servers.running(root)
    if "mlflow" in running:
        return running["mlflow"]["url"]
    return local_uri(root)


def _enable_wal(db: Path) -> None:
    # WAL lets readers (the UI) and a writer work at once; busy_timeout waits instead of failing.
    with sqlite3.connect(db, timeout=30) as conn:
        conn.execute("PRAGMA journal_mode=WAL")


def client(root: Path):
    from mlflow.tracking import MlflowClient

    import mlflow

    uri = tracking_uri(root)
    if uri.startswith("sqlite:///"):
        from filelock import FileLock

        db = Path(uri.removeprefix("sqlite:///"))
        db.parent.mkdir(parents=True, exist_ok=True)
        mlflow.set_tracking_uri(uri)
        # Opening a store migrates a fresh DB; two processes migrating one SQLite file at once corrupt it
        # (parallel methods on Dask workers start together), so the first open in each process holds a lock.
        with FileLock(str(db) + ".lock"):
            fresh = not db.exists()
            try:
                c = MlflowClient(tracking_uri=uri, registry_uri=uri)
                c.search_experiments(max_results=1)  # opens the store: runs the migrations on a fresh DB
            except Exception as exc:
                if fresh:
                    raise
                raise TrackingStoreError(db, exc) from None
            if fresh:
                _enable_wal(db)
        return c
    mlflow.set_tracking_uri(uri)
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


class TrackingStoreError(RuntimeError):
    """The local MLflow SQLite store exists but cannot be opened (corrupt, not a database, unreadable)."""

    def __init__(self, db: Path, exc: BaseException) -> None:
        first = (str(getattr(exc, "orig", None) or exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        super().__init__(
            f"the MLflow store {db} cannot be opened ({first}); move it aside (mv {db} {db}.broken) and a new "
            "one is created on the next run, or restore it from a backup"
        )


def experiment_name(spec: MethodSpec) -> str:
    return f"paperline/{spec.slug}"


def ensure_experiment(c, spec: MethodSpec, root: Path) -> str:
    exp = c.get_experiment_by_name(experiment_name(spec))
    if exp is not None:
        return exp.experiment_id
    location = None
    if c.tracking_uri.startswith("sqlite:"):
        # Without an explicit location, artifacts land relative to whatever the CWD is.
        location = (root / "mlflow" / "artifacts" / spec.slug).resolve().as_uri()
    try:
        return c.create_experiment(
            experiment_name(spec),
            artifact_location=location,
            # The UI then opens on the training-runs view, not MLflow 3's GenAI overview.
            tags={"paperline.title": spec.title, "mlflow.experimentKind": "custom_model_development"},
        )
    except Exception:  # created concurrently by another flow
        return c.get_experiment_by_name(experiment_name(spec)).experiment_id


def git_commit(root: Path) -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "") if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def close_dead_runs(c, experiment_id: str) -> list[str]:
    """Mark KILLED the RUNNING runs whose process on this host has died (SIGKILL, power loss), children
    (variant runs) included, and every RUNNING child whose parent is no longer RUNNING (a crash or a full
    disk half-way through logging): the next run of the method says what happened instead of leaving them
    open. Returns the ids it closed."""
    from tasks import env

    hostname = socket.gethostname()
    running = list(all_runs(c, experiment_id, "attributes.status = 'RUNNING'"))
    closed = []
    for run in running:
        tags = run.data.tags
        pid = tags.get(f"{TAG}.pid", "")
        if tags.get(f"{TAG}.host") != hostname or not pid.isdigit() or env.pid_alive(int(pid)):
            continue
        c.set_tag(run.info.run_id, f"{TAG}.failure", f"process {pid} died before the run finished")
        c.set_terminated(run.info.run_id, status="KILLED")
        closed.append(run.info.run_id)
    for run in running:
        parent = run.data.tags.get("mlflow.parentRunId")
        if not parent or run.info.run_id in closed:
            continue
        try:
            parent_status = c.get_run(parent).info.status
        except Exception:  # the parent was deleted
            parent_status = "DELETED"
        if parent_status != "RUNNING":
            c.set_tag(run.info.run_id, f"{TAG}.failure", f"its pipeline run ended {parent_status} before it closed")
            c.set_terminated(run.info.run_id, status="KILLED" if parent_status == "KILLED" else "FAILED")
            closed.append(run.info.run_id)
    return closed


def close_children(c, run_id: str, status: str = "FAILED") -> None:
    """End every child run of ``run_id`` still RUNNING with ``status`` (the parent is ending)."""
    experiment = c.get_run(run_id).info.experiment_id
    flt = f"tags.mlflow.parentRunId = '{run_id}' and attributes.status = 'RUNNING'"
    for child in list(all_runs(c, experiment, flt)):
        c.set_terminated(child.info.run_id, status=status)


def all_runs(c, experiment_id: str, filter_string: str = "", order_by: list[str] | None = None):
    """Every run of an experiment matching ``filter_string``, page by page (no ``max_results`` cut-off)."""
    token = None
    while True:
        page = c.search_runs([experiment_id], filter_string, max_results=1000, order_by=order_by, page_token=token)
        yield from page
        token = page.token
        if not token:
            return


def start_pipeline_run(spec: MethodSpec, cfg: MethodConfig, root: Path, flow_run_id: str = "") -> str:
    """Open the parent run before any work, so a crash is recorded as a FAILED run."""
    c = client(root)
    exp = ensure_experiment(c, spec, root)
    closed = close_dead_runs(c, exp)
    if closed:
        print(f"{spec.slug}: closed {len(closed)} run(s) a dead process had left open: {', '.join(closed)}", flush=True)
    tags = {
        f"{TAG}.pid": str(os.getpid()),
        f"{TAG}.host": socket.gethostname(),
        "mlflow.runName": f"{spec.slug}-{cfg.scale.value}",
        f"{TAG}.method": spec.slug,
        f"{TAG}.scale": cfg.scale.value,
        f"{TAG}.git_commit": git_commit(root),
        f"{TAG}.prefect_flow_run_id": flow_run_id,
        f"{TAG}.paper": spec.paper,
        f"{TAG}.run_kind": "pipeline",
        **host.tags(f"{TAG}.host."),
    }
    run = c.create_run(exp, tags=tags)
    params = {k: json.dumps(v) if not isinstance(v, str) else v for k, v in cfg.flat().items()}
    from mlflow.entities import Param

    c.log_batch(run.info.run_id, params=[Param(metric_name(k), v[:6000]) for k, v in params.items()])
    return run.info.run_id


def fail_run(root: Path, run_id: str, reason: str) -> None:
    c = client(root)
    c.set_tag(run_id, f"{TAG}.failure", reason[:5000])
    try:
        close_children(c, run_id)
    finally:
        c.set_terminated(run_id, status="FAILED")


def _metric_batches(records: list[dict[str, float]], prefix: str, timestamp: int):
    from mlflow.entities import Metric

    batch = []
    for i, rec in enumerate(records):
        step = int(rec.get("step", i))
        for key, value in rec.items():
            if key == "step" or value is None or not math.isfinite(float(value)):
                continue
            name = key if "/" in key else f"{prefix}/{key}"
            batch.append(Metric(metric_name(name), float(value), timestamp, step))
            if len(batch) == 900:
                yield batch
                batch = []
    if batch:
        yield batch


def log_results(
    root: Path,
    run_id: str,
    spec: MethodSpec,
    data: DatasetRef,
    artifacts: TrainedArtifacts,
    metrics: Metrics,
    claim: ClaimResult,
    out_dir: Path,
) -> None:
    """Learning curves as nested runs per variant; eval/ and claim/ metrics, figures, results."""
    import time

    c = client(root)
    run = c.get_run(run_id)
    now = int(time.time() * 1000)
    for key, value in dataset_tags(data).items():
        c.set_tag(run_id, key, value)
    dvc_md5 = dvc_data_hash(root, spec)
    if dvc_md5:
        c.set_tag(run_id, f"{TAG}.dvc_md5", dvc_md5)
    # A retried publish after a crash half-way re-logs the variants: drop the half-logged ones first.
    for old in list(all_runs(c, run.info.experiment_id, f"tags.mlflow.parentRunId = '{run_id}'")):
        if old.info.status == "RUNNING":
            c.set_terminated(old.info.run_id, status="FAILED")
        c.delete_run(old.info.run_id)
    for variant, records in artifacts.history.items():
        child = c.create_run(
            run.info.experiment_id,
            tags={
                "mlflow.parentRunId": run_id,
                "mlflow.runName": f"{spec.slug}/{variant}",
                f"{TAG}.variant": variant,
                f"{TAG}.method": spec.slug,
                # So the next run can tell a child of a dead process from one being logged right now.
                f"{TAG}.pid": str(os.getpid()),
                f"{TAG}.host": socket.gethostname(),
            },
        )
        for batch in _metric_batches(records, "train", now):
            c.log_batch(child.info.run_id, metrics=batch)
        c.set_terminated(child.info.run_id, status="FINISHED")
    from mlflow.entities import Metric

    def batch(prefix: str, items: dict[str, float]) -> list[Metric]:
        return [
            Metric(metric_name(f"{prefix}/{k}"), float(v), now, 0) for k, v in items.items() if math.isfinite(float(v))
        ]

    values = batch("train", artifacts.summary) + batch("eval", metrics.values) + batch("claim", claim.figures)
    values += claim_metrics(claim, now)
    for i in range(0, len(values), 900):
        c.log_batch(run_id, metrics=values[i : i + 900])
    for key, value in claim_tags(claim).items():
        c.set_tag(run_id, key, value)
    spine_figures = sorted((out_dir / "plots").glob("diagnostics_*.png")) if (out_dir / "plots").is_dir() else []
    for fig in dict.fromkeys([*map(Path, metrics.figures), *spine_figures]):
        c.log_artifact(run_id, str(fig), "plots")
    for name in ("metrics.json", "claim.json"):
        if (out_dir / name).exists():
            c.log_artifact(run_id, str(out_dir / name), "results")


STATE_CODE = {"holds": 1.0, "inconclusive": 0.0, "fails": -1.0}  # claim/<name>/state and claim/verdict as numbers
CRITERION_TAG = f"{TAG}.criterion."


def claim_metrics(claim: ClaimResult, timestamp: int) -> list:
    """``claim/<criterion>/{estimate,low,high,threshold,state}``, ``claim/verdict`` and ``claim/sane``."""
    from mlflow.entities import Metric

    out = [
        Metric("claim/verdict", STATE_CODE[claim.verdict], timestamp, 0),
        Metric("claim/sane", float(claim.sane), timestamp, 0),
        Metric("claim/flags", float(len(claim.diagnostics)), timestamp, 0),
        Metric("claim/decided_by_method", float(not claim.diagnostics), timestamp, 0),
    ]
    for criterion in claim.criteria:
        fields = {
            "estimate": criterion.estimate,
            "low": criterion.low,
            "high": criterion.high,
            "threshold": criterion.threshold,
            "state": STATE_CODE[criterion.state],
        }
        out += [
            Metric(metric_name(f"claim/{criterion.name}/{k}"), float(v), timestamp, 0)
            for k, v in fields.items()
            if math.isfinite(float(v))
        ]  # an infinite end (one unit) stays in the tag
    return out


def claim_tags(claim: ClaimResult) -> dict[str, str]:
    """The verdict, the claim and one JSON tag per criterion (``paperline.criterion.<name>``), in order."""
    tags = {
        f"{TAG}.verdict": claim.verdict,
        f"{TAG}.claim": claim.statement[:5000],
        f"{TAG}.criteria": ",".join(c.name for c in claim.criteria)[:5000],
        f"{TAG}.decided_by": claim.decided_by[:5000],
        f"{TAG}.flags": _json_within([f.to_dict() for f in claim.diagnostics], 7000),
        f"{TAG}.power": json.dumps(claim.power, default=float)[:5000],
    }
    for criterion in claim.criteria:
        payload = criterion.to_dict()
        text = json.dumps(payload, default=float)
        if len(text) > 7000:  # many units: the per-unit numbers stay in claim.json, the rest in the tag
            text = json.dumps({**payload, "unit_values": [], "labels": []}, default=float)
        tags[metric_name(CRITERION_TAG + criterion.name)] = text[:7000]
    return tags


def _json_within(items: list[dict], limit: int) -> str:
    """``items`` as JSON, dropping explanations and then trailing items until it fits MLflow's tag limit."""
    text = json.dumps(items)
    if len(text) <= limit:
        return text
    items = [{**f, "explanation": "(see claim.json)" if f.get("explanation") else ""} for f in items]
    while items and len(json.dumps(items)) > limit:
        items = items[:-1]
    return json.dumps(items)


def flags_from_tags(tags: dict[str, str]) -> list[dict]:
    try:
        return json.loads(tags.get(f"{TAG}.flags", "[]"))
    except json.JSONDecodeError:
        return []


def criteria_from_tags(tags: dict[str, str]) -> list[dict]:
    """The criteria a run's tags hold (``claim_tags``), in the claim's order."""
    order = [n for n in tags.get(f"{TAG}.criteria", "").split(",") if n]
    out = []
    for name in order:
        raw = tags.get(metric_name(CRITERION_TAG + name))
        if raw:
            try:
                out.append(json.loads(raw))
            except json.JSONDecodeError:  # a tag cut at MLflow's length limit
                out.append({"name": name, "state": "unreadable"})
    return out


def dataset_tags(data: DatasetRef) -> dict[str, str]:
    """Which data a run (or a registered version) was trained on: name, content hash, real/synthetic, provenance."""
    return {
        f"{TAG}.dataset": data.name,
        f"{TAG}.data_sha256": data.sha256,
        f"{TAG}.data_source": data.source,
        f"{TAG}.data_provenance": data.provenance[:5000],
    }


def dvc_data_hash(root: Path, spec: MethodSpec) -> str | None:
    """The dataset's md5 as DVC recorded it in dvc.lock (prepare@<slug>), if it did."""
    import yaml

    lock = root / "dvc.lock"
    if not lock.is_file():
        return None
    try:
        stage = (yaml.safe_load(lock.read_text()) or {}).get("stages", {}).get(f"prepare@{spec.slug}", {})
    except yaml.YAMLError:
        return None
    for out in stage.get("outs", []):
        if out.get("path") == f"data/{spec.dataset}":
            return out.get("md5")
    return None


PIP_REQUIREMENTS = ["torch==2.13.0", "numpy"]
MODEL_CODE = Path(__file__).with_name("registered_model.py")


def log_model(root: Path, run_id: str, spec: MethodSpec, cfg: MethodConfig, model_dir: Path) -> str:
    """Log ``model_dir`` + ``cfg`` into ``run_id`` as a models-from-code pyfunc (``tasks/registered_model.py``:
    rebuilt by the method's own loader, no pickle) and register it as ``paperline.<slug>``; returns the version."""
    import tempfile

    import mlflow

    client(root)  # sets the tracking URI
    expected = input_spec(spec.module().load_model(cfg, Path(model_dir)))
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "config.json"
        config.write_text(cfg.model_dump_json(indent=1))
        with _quiet_model_logging(), mlflow.start_run(run_id=run_id, nested=False, log_system_metrics=False):
            info = mlflow.pyfunc.log_model(
                name="model",
                python_model=str(MODEL_CODE),
                model_config={"method": spec.slug, **({"input": expected} if expected else {})},
                artifacts={"model_dir": str(model_dir), "config": str(config)},
                signature=_signature(expected),
                pip_requirements=PIP_REQUIREMENTS,
                registered_model_name=registered_name(spec),
            )
    # log_model's start_run context ended the run FINISHED: reopen it, so a process killed before publish
    # decides stays RUNNING and the next run marks it KILLED; publish sets the final status.
    client(root).update_run(run_id, status="RUNNING")
    return str(info.registered_model_version)


def input_spec(model) -> dict | None:
    """The one array a registered model's ``predict`` takes, ``{"dtype", "shape"}`` (-1: any length), read
    from what the method's model exposes; None where it takes no single fixed-shape array."""
    declared = getattr(model, "input_spec", None)
    if declared is not None:  # a model declares it as (dtype, shape), e.g. sleeping_rl's GreedyPolicy
        dtype, shape = declared
        return {"dtype": str(dtype), "shape": [int(n) for n in shape]}
    return None


def _signature(expected: dict | None):
    """An MLflow signature enforcing ``expected`` before ``predict`` runs (shape and exact dtype)."""
    if expected is None:
        return None
    import numpy as np
    from mlflow.models import ModelSignature
    from mlflow.types import Schema, TensorSpec

    return ModelSignature(inputs=Schema([TensorSpec(np.dtype(expected["dtype"]), tuple(expected["shape"]))]))


@contextlib.contextmanager
def _quiet_model_logging():
    """Silence MLflow's advice that does not apply here (signatures, type hints), and skip its check that
    ``PIP_REQUIREMENTS`` match the installed packages: they are this environment's own pins, and the check
    scans every installed distribution (~1.4 s of each publish)."""
    from unittest import mock

    loggers = [logging.getLogger(n) for n in ("mlflow.pyfunc", "mlflow.models.model")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with (
            warnings.catch_warnings(),
            mock.patch("mlflow.utils.environment.warn_dependency_requirement_mismatches", lambda requirements: None),
        ):
            warnings.filterwarnings("ignore", message=".*type hints.*")
            warnings.filterwarnings("ignore", category=UserWarning, module="mlflow")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def registered_name(spec: MethodSpec) -> str:
    return f"paperline.{spec.slug}"
