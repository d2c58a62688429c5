"""A tiny method implementing the contract, for testing the spine's failure paths quickly."""

from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field

from models.base import (
    ClaimResult,
    MethodConfig,
    MethodSpec,
    Metrics,
    StrictModel,
    TrainedArtifacts,
    dataset_meta,
    write_manifest,
)


class Data(StrictModel):
    n: int = Field(64, gt=0)
    source: Literal["synthetic", "real"] = "synthetic"  # lets a test stand in a "real" dataset


class Config(MethodConfig):
    data: Data = Data()
    quality: float = 0.9  # becomes the primary metric: lets a test make a worse model on purpose
    spread: float = 0.0  # per-seed scatter of the score around ``quality``: lets a test make a claim inconclusive
    fail: Literal["none", "nan", "sanity", "prepare", "evaluate"] = "none"


SEEDS = 3


SPEC = MethodSpec("toy", "Toy method", "tests", "quality >= 0.5", Config, "tests.toy_method", "toy", "method/score")


class Predictor:
    def __init__(self, w: float) -> None:
        self.w = w

    def predict(self, x):
        return np.asarray(x, dtype=float) * self.w


def prepare(cfg: Config, data_dir: Path):
    x = np.random.default_rng(cfg.seed).normal(size=cfg.data.n)
    np.save(data_dir / "x.npy", x)
    if cfg.fail == "prepare":
        raise OSError("disk full while writing the dataset")
    provenance = "numpy normal draws" if cfg.data.source == "synthetic" else "a stand-in for a real file (tests)"
    return write_manifest(data_dir, dataset_meta(cfg.data.source, provenance, n=cfg.data.n))


def train(cfg: Config, data, out_dir: Path) -> TrainedArtifacts:
    loss = [1.0 / (k + 1) for k in range(5)]
    if cfg.fail == "nan":
        raise FloatingPointError("non-finite training loss nan at epoch 2, batch 0")
    np.save(out_dir / "w.npy", np.array([cfg.quality]))
    history = {v: [{"step": k, "train/loss": l} for k, l in enumerate(loss)] for v in ("method", "baseline")}
    return TrainedArtifacts(out_dir, history, {"final_loss": loss[-1]})


def load_model(cfg: Config, model_dir: Path):
    return Predictor(float(np.load(model_dir / "w.npy")[0]))


def evaluate(cfg: Config, data, artifacts, out_dir: Path) -> Metrics:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([r["train/loss"] for r in artifacts.history["method"]])
    path = out_dir / "plots" / "loss.png"
    fig.savefig(path)
    plt.close(fig)
    if cfg.fail == "evaluate":
        raise RuntimeError("killed half-way through evaluate")
    offsets = np.linspace(-cfg.spread, cfg.spread, SEEDS)
    per_seed = {f"method/seed{i}/score": cfg.quality + offsets[i] for i in range(SEEDS)}
    return Metrics({"method/score": cfg.quality, "baseline/score": 0.5, **per_seed}, [path])


def claim(cfg: Config, metrics: Metrics) -> ClaimResult:
    from models.common.verdicts import mean_criterion

    scores = [metrics[f"method/seed{i}/score"] for i in range(SEEDS)]
    criterion = mean_criterion("score", "mean score over seeds >= 0.5", scores, 0.5, ">=", units="seeds")
    return ClaimResult(
        "quality >= 0.5", [criterion], {"sane": cfg.fail != "sanity"}, {"score": metrics["method/score"]}
    )
