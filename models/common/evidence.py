"""What the verdict diagnostics read from training: every validation selection and every fit.

The shared helpers record here as they run: ``select_on_validation`` each grid search (the grid,
every point's validation score, the chosen point), ``BestWeights`` and ``Patience`` each fit (best
epoch, epochs trained, the cap, the patience). The train step opens a ``recording()``; what was
recorded is saved with the trained artifacts (``train.json``) and the platform's diagnostics
(``tasks.diagnostics``) turn it into flags: a choice on a grid edge, a grid with no eligible point,
a fit still improving at its cap. Outside a recording (a unit test calling a helper) nothing is kept.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class FitRecord:
    """One training run of one arm on one unit: where its validation score peaked and how it ended.

    ``best`` and ``trained`` count validation evaluations (epochs, or validation checks of a step budget)
    from 0; ``stopped_early`` says whether the patience ended it before its budget did."""

    arm: str
    unit: str
    best: int  # the evaluation with the best validation score, from 0
    trained: int  # evaluations run
    stopped_early: bool  # the patience fired before the budget ran out
    patience: int | None = None  # evaluations without improvement that stop it; None for a fixed schedule

    @property
    def window(self) -> int:
        """How close to the end the best may lie before a fit that ran its whole budget counts as improving."""
        return self.patience if self.patience else max(1, self.trained // 10)

    @property
    def still_improving(self) -> bool:
        """It ran its whole budget and its best score came within the patience (a tenth of a fixed schedule)
        of the end: more budget might still have improved it."""
        return not self.stopped_early and (self.trained - 1 - self.best) < self.window


@dataclass(frozen=True)
class SelectionRecord:
    """One validation grid search of one arm (on one unit, or once for all units: ``unit=""``)."""

    arm: str
    unit: str
    metric: str
    chosen: dict[str, Any]
    table: list[dict[str, Any]]  # every grid point with its validation score (``val_<metric>``)
    eligible: bool = True  # False when no point had a finite (eligible) score
    limits: dict[str, list[float]] = field(default_factory=dict)  # axis -> ends of its domain (not edges)

    def axes(self) -> dict[str, list[float]]:
        """Each numeric grid axis with two or more values, sorted."""
        out: dict[str, list[float]] = {}
        for key in self.chosen:
            values = {row[key] for row in self.table if key in row}
            if len(values) >= 2 and all(_numeric(v) for v in values):
                out[key] = sorted(float(v) for v in values)
        return out

    def edges(self) -> dict[str, str]:
        """``{axis: "bottom" | "top"}`` for every axis whose chosen value is its grid's first or last point
        (an end declared in ``limits``, such as a penalty weight of 0, is the domain's, not the grid's)."""
        out = {}
        for axis, values in self.axes().items():
            value = float(self.chosen[axis])
            limits = [float(x) for x in self.limits.get(axis, [])]
            if value in limits:
                continue
            if value == values[0]:
                out[axis] = "bottom"
            elif value == values[-1]:
                out[axis] = "top"
        return out


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value))


@dataclass
class Evidence:
    """Everything one train step recorded."""

    fits: list[FitRecord] = field(default_factory=list)
    selections: list[SelectionRecord] = field(default_factory=list)

    def to_dict(self) -> dict[str, list[dict[str, Any]]]:
        return {"fits": [asdict(f) for f in self.fits], "selections": [asdict(s) for s in self.selections]}

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any] | None) -> Evidence:
        payload = payload or {}
        return cls(
            [FitRecord(**f) for f in payload.get("fits", [])],
            [SelectionRecord(**s) for s in payload.get("selections", [])],
        )


_current: contextvars.ContextVar[Evidence | None] = contextvars.ContextVar("paperline_evidence", default=None)


@contextlib.contextmanager
def recording() -> Iterator[Evidence]:
    """Collect what the helpers record inside the block (the train step wraps ``train`` in one)."""
    evidence = Evidence()
    token = _current.set(evidence)
    try:
        yield evidence
    finally:
        _current.reset(token)


def record_fit(arm: str, unit: str, best: int, trained: int, stopped_early: bool, patience: int | None = None) -> None:
    """Record a finished fit (``BestWeights`` and ``Patience.record`` call this; plain loops may too)."""
    evidence = _current.get()
    if evidence is not None and arm:
        evidence.fits.append(FitRecord(arm, unit, int(best), int(trained), bool(stopped_early), patience))


def record_selection(record: SelectionRecord) -> None:
    evidence = _current.get()
    if evidence is not None:
        evidence.selections.append(record)


__all__ = ["Evidence", "FitRecord", "SelectionRecord", "record_fit", "record_selection", "recording"]
