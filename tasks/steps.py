"""The four steps as plain typed functions: the one core both Prefect and DVC call.

Paths follow one layout under the project root::

    data/<dataset>/            prepare (DVC out)
    outputs/<slug>/model/      train   (weights, train.json)
    outputs/<slug>/metrics.json, claim.json, plots/   evaluate
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from models.base import (
    ClaimResult,
    DatasetError,
    DatasetRef,
    MethodConfig,
    MethodSpec,
    Metrics,
    TrainedArtifacts,
    read_dataset,
    write_manifest,
)
from models.common import evidence, runtime
from tasks import diagnostics


@dataclass(frozen=True)
class Layout:
    """Where one method's data and outputs live under a project root."""

    root: Path
    spec: MethodSpec

    @property
    def data_dir(self) -> Path:
        return self.root / "data" / self.spec.dataset

    @property
    def out_dir(self) -> Path:
        return self.root / "outputs" / self.spec.slug

    @property
    def model_dir(self) -> Path:
        return self.out_dir / "model"

    @property
    def metrics_file(self) -> Path:
        return self.out_dir / "metrics.json"

    @property
    def claim_file(self) -> Path:
        return self.out_dir / "claim.json"

    @property
    def plots_dir(self) -> Path:
        return self.out_dir / "plots"


def lock_path(spec: MethodSpec, root: Path) -> Path:
    """The file ``method_lock`` holds for ``spec`` in the workspace ``root``."""
    return Path(root) / ".paperline" / "locks" / f"{spec.slug}.lock"


@contextlib.contextmanager
def method_lock(spec: MethodSpec, root: Path, wait_message: bool = True) -> Iterator[None]:
    """One pipeline per method and workspace at a time: the steps share ``data/<dataset>`` and
    ``outputs/<slug>``, so a second run of the same method waits here instead of mixing files.
    Different methods never wait for each other. The OS drops the lock if the holder dies."""
    from filelock import FileLock, Timeout

    path = lock_path(spec, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if wait_message:
            print(f"{spec.slug}: another run of this method is using the workspace; waiting for it", flush=True)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _fresh_dir(path: Path) -> Path:
    """Empty ``path`` so a step never mixes its outputs with a previous run's."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


@contextlib.contextmanager
def _dropped_on_failure(staging: Path) -> Iterator[None]:
    """A step that fails (or is interrupted) leaves no half-written ``*.partial`` folder behind."""
    try:
        yield
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def data_params(cfg: MethodConfig) -> dict:
    """The part of a config that shapes the dataset: ``seed`` and the ``data`` section."""
    dumped = cfg.model_dump(mode="json")
    if "data" not in dumped:
        dumped.pop("scale", None)
        return dumped
    return {"seed": dumped["seed"], "data": dumped["data"]}


def data_params_hash(cfg: MethodConfig) -> str:
    return hashlib.sha256(json.dumps(data_params(cfg), sort_keys=True).encode()).hexdigest()[:16]


def prepare(spec: MethodSpec, cfg: MethodConfig, root: Path, reuse: bool = False) -> DatasetRef:
    """Write the dataset (atomically). With ``reuse``, keep an intact one made from the same params."""
    layout = Layout(Path(root), spec)
    if reuse:
        try:
            existing = read_dataset(layout.data_dir)
            if existing.meta.get("paperline_params") == data_params_hash(cfg):
                return existing
        except DatasetError:
            pass
    staging = layout.data_dir.with_name(layout.data_dir.name + ".partial")
    _fresh_dir(staging)
    runtime.set_threads()
    with _dropped_on_failure(staging):
        ref = spec.module().prepare(cfg, staging)
        write_manifest(staging, {**ref.meta, "paperline_params": data_params_hash(cfg)})
    # Written under a temporary name and renamed: a crash never leaves a half dataset behind.
    if layout.data_dir.exists():
        shutil.rmtree(layout.data_dir)
    staging.rename(layout.data_dir)
    return read_dataset(layout.data_dir)


def load_data(spec: MethodSpec, root: Path) -> DatasetRef:
    layout = Layout(Path(root), spec)
    try:
        return read_dataset(layout.data_dir)
    except DatasetError as exc:
        raise DatasetError(
            f"{exc}. Recreate it with `dvc repro prepare@{spec.slug}` or `paperline stage prepare {spec.slug}`."
        ) from None


def train(spec: MethodSpec, cfg: MethodConfig, root: Path) -> TrainedArtifacts:
    layout = Layout(Path(root), spec)
    data = load_data(spec, root)
    layout.out_dir.mkdir(parents=True, exist_ok=True)
    staging = _fresh_dir(layout.out_dir / "model.partial")
    # Checkpoints of an interrupted run with the same config and data are resumed, then dropped.
    key = hashlib.sha256(f"{cfg.model_dump_json()}|{data.sha256}".encode()).hexdigest()[:16]
    checkpoints = layout.out_dir / "checkpoints" / key
    started = time.perf_counter()
    module = spec.module()
    runtime.set_threads()
    runtime.seed_everything(cfg.seed)
    with _dropped_on_failure(staging), runtime.checkpointing(checkpoints), evidence.recording() as recorded:
        artifacts = module.train(cfg, data, staging)
    # What the selection and early-stopping helpers recorded, for the verdict diagnostics.
    own = evidence.Evidence.from_dict(artifacts.evidence)
    artifacts.evidence = evidence.Evidence(own.fits + recorded.fits, own.selections + recorded.selections).to_dict()
    artifacts.summary.setdefault("seconds", time.perf_counter() - started)
    artifacts.model_dir = staging
    artifacts.save()
    if layout.model_dir.exists():
        shutil.rmtree(layout.model_dir)
    staging.rename(layout.model_dir)
    shutil.rmtree(layout.out_dir / "checkpoints", ignore_errors=True)
    artifacts.model_dir = layout.model_dir
    return artifacts


def evaluate(spec: MethodSpec, cfg: MethodConfig, root: Path) -> tuple[Metrics, ClaimResult]:
    """Evaluate and measure the claim. Figures are drawn into ``outputs/<slug>/evaluate.partial/plots`` and
    the results replace ``plots/``, ``metrics.json`` and ``claim.json`` only once all of them are complete: a
    kill half-way leaves the previous evaluation whole."""
    layout = Layout(Path(root), spec)
    data = load_data(spec, root)
    artifacts = TrainedArtifacts.load(layout.model_dir)
    staging = _fresh_dir(layout.out_dir / "evaluate.partial")
    (staging / "plots").mkdir()
    module = spec.module()
    runtime.set_threads()
    runtime.seed_everything(cfg.seed)
    with _dropped_on_failure(staging):
        metrics = module.evaluate(cfg, data, artifacts, staging)
        result = module.claim(cfg, metrics)
        recorded = evidence.Evidence.from_dict(artifacts.evidence)
        diagnostics.diagnose(result, recorded)
        # The spine's own figures sit beside the method's in plots/ (tracking logs both); metrics.figures stays
        # the method's list, which its tests may compare exactly.
        diagnostics.figures(recorded, staging / "plots")
        # A NaN estimate already fails its criterion (models.base.Criterion.state); figures must be finite too.
        bad = metrics.non_finite() + [k for k, v in result.figures.items() if not math.isfinite(float(v))]
        result.sanity.setdefault("finite_metrics", not bad)
        # The per-unit values join the flat keys (<arm>/<label>/<metric>) that metrics.json and MLflow hold.
        metrics.values = metrics.flat()
        (staging / "metrics.json").write_text(json.dumps(metrics.values, indent=2, sort_keys=True, default=float))
        (staging / "claim.json").write_text(json.dumps(result.to_dict(), indent=2, default=float))
        stray = [p for p in metrics.figures if Path(p).parent != staging / "plots"]
        if stray:
            raise ValueError(f"{spec.slug}: evaluate wrote figures outside out_dir/plots: {stray[:3]}")
    # Swap in the complete evaluation: the plots folder by rename, the two files by atomic replace.
    old = layout.out_dir / "plots.old"
    shutil.rmtree(old, ignore_errors=True)
    if layout.plots_dir.exists():
        layout.plots_dir.rename(old)
    (staging / "plots").rename(layout.plots_dir)
    for entry in staging.iterdir():  # metrics.json, claim.json and what else evaluate wrote beside them
        if entry.is_dir():
            shutil.rmtree(layout.out_dir / entry.name, ignore_errors=True)
        os.replace(entry, layout.out_dir / entry.name)
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(staging, ignore_errors=True)
    metrics.figures = [layout.plots_dir / Path(p).name for p in metrics.figures]
    return metrics, result


def load_results(spec: MethodSpec, root: Path) -> tuple[Metrics, ClaimResult]:
    """Read back what ``evaluate`` wrote (for publish and reports)."""
    layout = Layout(Path(root), spec)
    values = json.loads(layout.metrics_file.read_text())
    figures = sorted(layout.plots_dir.glob("*.png")) if layout.plots_dir.exists() else []
    claim = ClaimResult.from_dict(json.loads(layout.claim_file.read_text()))
    return Metrics(values, figures), claim
