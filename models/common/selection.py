"""Fair arms: every compared arm gets the same selection protocol (REVIEW.md §2).

- ``select_on_validation``: try each point of a small declared grid, score it on a validation split
  (never on test), keep the best; the chosen values and the whole table are logged.
- ``BestWeights`` + Lightning's ``EarlyStopping`` (``early_stopping_callbacks``): train to
  convergence with a patience on a validation metric and end on the best epoch's weights;
  ``Patience`` does the same bookkeeping for plain loops.
- ``learns_task``: the must-pass "this arm learns the task in distribution" (a baseline that never
  learns makes a comparison vacuous).

``Selection.summary()`` and ``BestWeights.summary()`` give ``select/<arm>/...`` figures for
``TrainedArtifacts.summary`` (the spine logs them under ``train/``). Every selection and every fit
that names its arm is also recorded for the verdict diagnostics (``models.common.evidence``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lightning.pytorch.callbacks import Callback

from models.common import evidence


def grid(**axes: Sequence[Any]) -> list[dict[str, Any]]:
    """The Cartesian product of named value lists: ``grid(lr=(1e-3, 3e-4), dropout=(0.0, 0.5))``."""
    if not axes:
        return [{}]
    for name, values in axes.items():
        if len(values) == 0:
            raise ValueError(f"grid axis {name!r} has no values")
    names = list(axes)
    return [dict(zip(names, combo)) for combo in itertools.product(*(axes[n] for n in names))]


@dataclass
class Selection:
    """The outcome of a validation grid search for one arm."""

    arm: str
    chosen: dict[str, Any]
    score: float
    metric: str
    higher_is_better: bool
    table: list[dict[str, Any]] = field(default_factory=list)  # every grid point with its validation score
    unit: str = ""  # the unit the grid was searched on ("" when the choice serves every unit)
    eligible: bool = True  # False when no grid point had a finite validation score

    def record(self, limits: Mapping[str, Sequence[float]] | None = None) -> evidence.SelectionRecord:
        return evidence.SelectionRecord(
            self.arm,
            self.unit,
            self.metric,
            dict(self.chosen),
            [dict(row) for row in self.table],
            self.eligible,
            {k: [float(x) for x in v] for k, v in (limits or {}).items()},
        )

    def summary(self) -> dict[str, float]:
        out = {f"select/{self.arm}/val_{self.metric}": float(self.score)}
        for key, value in self.chosen.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[f"select/{self.arm}/{key}"] = float(value)
        return out

    def describe(self) -> str:
        chosen = ", ".join(f"{k}={v}" for k, v in self.chosen.items())
        return f"{self.arm}: {chosen} (validation {self.metric} {self.score:.4g} over {len(self.table)} grid points)"


def select_on_validation(
    arm: str,
    points: Sequence[Mapping[str, Any]],
    fit_and_score: Callable[[dict[str, Any]], tuple[float, Any]],
    metric: str = "score",
    higher_is_better: bool = True,
    unit: str = "",
    limits: Mapping[str, Sequence[float]] | None = None,
) -> tuple[Selection, Any]:
    """Fit one candidate per grid point and keep the one with the best validation score.

    ``fit_and_score(point) -> (validation score, fitted object)``. Non-finite scores never win
    (a diverged candidate, or one the method declares ineligible by scoring it NaN); if no point is
    eligible the first one is returned and the selection is marked ``eligible=False``, which the
    diagnostics flag as an error. Ties keep the earlier point, so the grid's order is the tie-break.
    ``unit`` names the unit the search ran on; ``limits`` the ends of an axis's domain (a penalty
    weight of 0), where a choice is not a grid edge."""
    if not points:
        raise ValueError(f"arm {arm!r}: the selection grid is empty")
    from models.common.runtime import dry_run

    if dry_run():  # a paper-scale dry run checks shapes, not the choice: the first point only
        points = points[:1]
    best_score, best_obj, best_point, table = None, None, None, []
    for point in points:
        score, obj = fit_and_score(dict(point))
        score = float(score)
        table.append({**point, f"val_{metric}": score})
        if best_point is None or _better(score, best_score, higher_is_better):
            best_score, best_obj, best_point = score, obj, dict(point)
    eligible = any(math.isfinite(float(row[f"val_{metric}"])) for row in table)
    selection = Selection(arm, best_point, best_score, metric, higher_is_better, table, unit, eligible)
    evidence.record_selection(selection.record(limits))
    return selection, best_obj


def _better(new: float, old: float | None, higher_is_better: bool) -> bool:
    if not math.isfinite(new):
        return False
    if old is None or not math.isfinite(old):
        return True
    return new > old if higher_is_better else new < old


class Patience:
    """Early stopping for plain loops: ``update(score)`` each evaluation, ``stop`` once ``patience``
    evaluations passed without an improvement of more than ``min_delta``."""

    def __init__(self, patience: int, higher_is_better: bool = False, min_delta: float = 0.0) -> None:
        if patience < 1:
            raise ValueError(f"patience {patience}: expected at least 1")
        # ``record(arm, unit)`` once the loop ends hands the fit to the verdict diagnostics.
        self.patience, self.higher_is_better, self.min_delta = patience, higher_is_better, min_delta
        self.best: float | None = None
        self.best_step = -1
        self.step = -1
        self.waited = 0

    def update(self, score: float) -> bool:
        """Record one evaluation; True when it is the best so far."""
        self.step += 1
        improved = self.best is None or _better(
            score - self.min_delta if self.higher_is_better else score + self.min_delta,
            self.best,
            self.higher_is_better,
        )
        if improved and math.isfinite(score):
            self.best, self.best_step, self.waited = float(score), self.step, 0
            return True
        self.waited += 1
        return False

    @property
    def stop(self) -> bool:
        return self.waited >= self.patience

    def record(self, arm: str, unit: str) -> None:
        """Record the finished loop for the verdict diagnostics (call it once the loop has ended)."""
        evidence.record_fit(arm, unit, self.best_step, self.step + 1, self.stop, self.patience)


def early_stopping_callbacks(
    monitor: str, patience: int, mode: str = "min", min_delta: float = 0.0, arm: str = "", unit: str = ""
) -> list:
    """Lightning's ``EarlyStopping`` on ``monitor`` plus ``BestWeights``, which ends the fit on the best
    validation epoch's weights; pass them as ``fit(..., callbacks=...)``. Read the best epoch from
    the ``BestWeights`` (last element). With ``arm`` (and ``unit``) the fit is recorded for the diagnostics."""
    from lightning.pytorch.callbacks import EarlyStopping

    stopper = EarlyStopping(
        monitor=monitor, patience=patience, mode=mode, min_delta=min_delta, check_finite=True, verbose=False
    )
    return [stopper, BestWeights(monitor, mode, arm=arm, unit=unit, patience=patience)]


class BestWeights(Callback):
    """Keeps a copy of the weights at the best value of ``monitor`` and restores them when the fit ends.

    Its state (best value, best epoch, the weights) travels with the epoch checkpoint, so a resumed
    fit ends on the same weights as an uninterrupted one. With an ``arm`` it records the fit (best
    evaluation, evaluations run, whether Lightning's ``EarlyStopping`` ended it) for the diagnostics."""

    def __init__(
        self, monitor: str, mode: str = "min", arm: str = "", unit: str = "", patience: int | None = None
    ) -> None:
        if mode not in ("min", "max"):
            raise ValueError(f"mode {mode!r}: expected 'min' or 'max'")
        self.monitor, self.mode = monitor, mode
        self.arm, self.unit, self.patience = arm, unit, patience
        self.best: float | None = None
        self.best_epoch = -1
        self.epochs_seen = 0
        self.evaluations = 0  # validation runs seen (epochs, or checks within a step budget)
        self.best_evaluation = -1
        self.stopped_early = False
        self.weights: dict[str, Any] | None = None

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            raise KeyError(
                f"BestWeights: validation metric {self.monitor!r} was not logged; "
                f"logged: {sorted(trainer.callback_metrics)}"
            )
        value = float(value)
        self.epochs_seen = trainer.current_epoch + 1
        self.evaluations += 1
        if _better(value, self.best, self.mode == "max"):
            self.best, self.best_epoch, self.best_evaluation = value, trainer.current_epoch, self.evaluations - 1
            self.weights = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}

    def on_fit_end(self, trainer, pl_module) -> None:
        if self.weights is not None:
            pl_module.load_state_dict(self.weights)
        from lightning.pytorch.callbacks import EarlyStopping

        stoppers = [c for c in trainer.callbacks if isinstance(c, EarlyStopping)]
        self.stopped_early = any(c.wait_count >= c.patience for c in stoppers)
        if self.arm:
            self.record(self.arm, self.unit)

    def record(self, arm: str, unit: str) -> None:
        """Record the finished fit for the verdict diagnostics, e.g. a grid point's fit that became a
        compared one (the callback records by itself when it was given an ``arm``)."""
        evidence.record_fit(arm, unit, self.best_evaluation, self.evaluations, self.stopped_early, self.patience)

    def state_dict(self) -> dict[str, Any]:
        return {
            "best": self.best,
            "best_epoch": self.best_epoch,
            "epochs_seen": self.epochs_seen,
            "evaluations": self.evaluations,
            "best_evaluation": self.best_evaluation,
            "weights": self.weights,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.best_epoch = state["best"], state["best_epoch"]
        self.epochs_seen, self.weights = state["epochs_seen"], state["weights"]
        self.evaluations = state.get("evaluations", self.epochs_seen)
        self.best_evaluation = state.get("best_evaluation", self.best_epoch)

    def summary(self, arm: str) -> dict[str, float]:
        return {
            f"select/{arm}/best_epoch": float(self.best_epoch),
            f"select/{arm}/epochs_trained": float(self.epochs_seen),
            f"select/{arm}/best_val_{self.monitor.replace('/', '_')}": float(
                self.best if self.best is not None else math.nan
            ),
        }


def learns_task(arm: str, score: float, threshold: float, higher_is_better: bool = True) -> tuple[str, bool]:
    """The must-pass "``arm`` learns the task in distribution": ``(check name, passed)`` for
    ``ClaimResult.sanity``. ``threshold`` is the declared bar (e.g. chance + a margin)."""
    ok = math.isfinite(score) and (score >= threshold if higher_is_better else score <= threshold)
    op = ">=" if higher_is_better else "<="
    return f"{arm}_learns_task_{op}{threshold:g}", bool(ok)


__all__ = [
    "BestWeights",
    "Patience",
    "Selection",
    "early_stopping_callbacks",
    "grid",
    "learns_task",
    "select_on_validation",
]
