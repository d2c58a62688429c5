"""Per-unit values that keep their unit labels through arithmetic.

A claim compares arms on *paired* units: unit ``seed3`` of the method and unit ``seed3`` of the
baseline share a seed (a split, a data draw). ``UnitValues`` carries the labels with the numbers, so
``p["method"] - p["baseline"]`` is a per-unit difference and combining values of different units is
an error instead of a silent misalignment. ``Metrics.paired`` hands them out; the verdict helpers
(``models.common.verdicts``) read the labels into each criterion.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin


class UnitsNotAligned(ValueError):
    """Two sets of per-unit values do not name the same units in the same order."""


class UnitValues(NDArrayOperatorsMixin):
    """A 1-D array of per-unit values with one label per unit (``seed0``, ``split3``, ``cora_split2``)."""

    __slots__ = ("labels", "values")

    def __init__(self, labels: Sequence[str], values: Sequence[float] | np.ndarray) -> None:
        labels = tuple(str(x) for x in labels)
        values = np.asarray(values, dtype=float).reshape(-1)
        if len(labels) != values.size:
            raise ValueError(f"{len(labels)} unit labels for {values.size} values")
        if len(set(labels)) != len(labels):
            raise ValueError(f"unit labels repeat: {labels}")
        self.labels, self.values = labels, values

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        return self.values.astype(dtype) if dtype is not None else self.values

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        labels = aligned_labels(*inputs)
        arrays = [x.values if isinstance(x, UnitValues) else x for x in inputs]
        result = getattr(ufunc, method)(*arrays, **kwargs)
        if method == "__call__" and isinstance(result, np.ndarray) and result.shape == (len(labels),):
            return UnitValues(labels, result)
        return result

    def __len__(self) -> int:
        return len(self.labels)

    def __iter__(self) -> Iterator[float]:
        return iter(self.values.tolist())

    def __getitem__(self, index):
        return self.values[index]

    @property
    def size(self) -> int:
        return len(self.labels)

    def mean(self, *args, **kwargs):
        out = self.values.mean(*args, **kwargs)
        return float(out) if np.ndim(out) == 0 else out

    def as_dict(self) -> dict[str, float]:
        return dict(zip(self.labels, self.values.tolist()))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v:.4g}" for k, v in self.as_dict().items())
        return f"UnitValues({inner})"


def aligned_labels(*items) -> tuple[str, ...]:
    """The unit labels every ``UnitValues`` among ``items`` shares; an error when they differ."""
    labels: tuple[str, ...] | None = None
    for item in items:
        if isinstance(item, UnitValues):
            if labels is None:
                labels = item.labels
            elif item.labels != labels:
                raise UnitsNotAligned(f"per-unit values are not paired: units {labels} vs {item.labels}")
    if labels is None:
        raise TypeError("no UnitValues among the operands")
    return labels


def labels_of(*items) -> tuple[str, ...]:
    """The shared labels of the ``UnitValues`` among ``items``, or ``()`` when there are none."""
    if not any(isinstance(x, UnitValues) for x in items):
        return ()
    return aligned_labels(*items)


def unit_labels(prefix: str, n: int) -> tuple[str, ...]:
    """``("seed0", "seed1", ...)``: the labels of ``n`` units numbered from 0."""
    return tuple(f"{prefix}{k}" for k in range(n))


__all__ = ["UnitValues", "UnitsNotAligned", "aligned_labels", "labels_of", "unit_labels"]
