"""Criteria with 95 % intervals over paired units: the one place a claim's uncertainty is computed.

A criterion compares an estimate with a threshold. Its interval is over *paired* units (seeds,
splits, repeats) that every compared arm shares, so a difference is computed per unit first and
the interval is taken over those per-unit differences. Pass per-unit values as ``UnitValues``
(``Metrics.paired``): the criterion then records which units it is over, and values of different
units cannot be combined. The interval builders, each checked for coverage by simulation at 3, 5
and 10 units (``tests/unit/test_interval_coverage.py``):

- ``mean_criterion`` / ``difference_criterion``: the mean of per-unit values, Student-t interval (one
  unit gives an infinite interval, so at best ``inconclusive``);
- ``ratio_of_means_criterion``: ``mean(a) / mean(b)``, delta-method (linearised) t interval;
- ``extremum_criterion``: the smallest (or largest) of several per-unit means ("every step of a sweep
  rises"), from Bonferroni-adjusted t intervals of each mean;
- ``median_criterion``: a median with its distribution-free order-statistic interval (ends the units
  cannot reach at 95 % are the metric's support, or infinite);
- ``bootstrap_criterion``: any smooth statistic of paired per-unit arrays: a jackknife t interval below
  ``BOOTSTRAP_MIN_UNITS`` units (a percentile bootstrap under-covers there), a percentile bootstrap from it on;
- ``proportion_criterion``: a pass rate k/n with its Clopper-Pearson interval;
- ``exact_criterion``: a deterministic number (a kernel error, a closed form): zero width.

``models.base.Criterion.state`` turns the interval into holds / fails / inconclusive;
``units_to_decide`` says how many paired units would decide an inconclusive one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from models.base import Criterion, Direction
from models.common.units import UnitValues, labels_of

CONFIDENCE = 0.95
BOOTSTRAP_SAMPLES = 4000
BOOTSTRAP_MIN_UNITS = 20  # below this a percentile bootstrap under-covers; the jackknife-t interval serves

Values = Sequence[float] | np.ndarray | UnitValues


def _finite_array(values: Values) -> np.ndarray:
    return np.asarray(values, dtype=float).reshape(-1)


def _t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.5 + confidence / 2, df=df))


def t_interval(values: Values, confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """``(mean, low, high)``: Student-t interval of the mean of independent per-unit values.

    One unit gives ``(-inf, inf)``; identical units a zero-width interval; a NaN among them NaN."""
    x = _finite_array(values)
    if x.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if not np.isfinite(x).all():
        return mean, math.nan, math.nan
    if x.size == 1:
        return mean, -math.inf, math.inf
    half = _t_quantile(x.size - 1, confidence) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return mean, mean - half, mean + half


def jackknife_interval(
    statistic: Callable[..., float], *paired: Values, confidence: float = CONFIDENCE
) -> tuple[float, float, float]:
    """``(statistic(*paired), low, high)``: the estimate +- t(n-1) x the leave-one-unit-out standard error."""
    arrays = _paired_arrays(paired)
    n = arrays[0].size
    estimate = float(statistic(*arrays))
    if not all(np.isfinite(a).all() for a in arrays) or not math.isfinite(estimate):
        return estimate, math.nan, math.nan
    if n == 1:
        return estimate, -math.inf, math.inf
    keep = ~np.eye(n, dtype=bool)
    leave_one_out = np.array([statistic(*(a[keep[i]] for a in arrays)) for i in range(n)], dtype=float)
    if not np.isfinite(leave_one_out).all():
        return estimate, math.nan, math.nan
    se = math.sqrt((n - 1) / n * float(((leave_one_out - leave_one_out.mean()) ** 2).sum()))
    half = _t_quantile(n - 1, confidence) * se
    return estimate, estimate - half, estimate + half


def _paired_arrays(paired: Sequence[Values]) -> list[np.ndarray]:
    labels_of(*paired)  # UnitValues among them must name the same units
    arrays = [_finite_array(a) for a in paired]
    n = arrays[0].size if arrays else 0
    if n == 0 or any(a.size != n for a in arrays):
        raise ValueError(f"paired arrays of one non-zero length needed; got lengths {[a.size for a in arrays]}")
    return arrays


def bootstrap_interval(
    statistic: Callable[..., float],
    *paired: Values,
    confidence: float = CONFIDENCE,
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``(statistic(*paired), low, high)``: percentile bootstrap resampling the paired units.

    ``paired`` are arrays of equal length, one entry per unit (unit i of every array is the same
    seed/split); each resample draws units with replacement and keeps them paired. Use it from
    ``BOOTSTRAP_MIN_UNITS`` units on (``bootstrap_criterion`` switches to the jackknife below)."""
    arrays = _paired_arrays(paired)
    n = arrays[0].size
    estimate = float(statistic(*arrays))
    if not all(np.isfinite(a).all() for a in arrays) or not math.isfinite(estimate):
        return estimate, math.nan, math.nan
    if n == 1:
        return estimate, -math.inf, math.inf
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(samples, n))
    draws = np.array([statistic(*(a[i] for a in arrays)) for i in idx], dtype=float)
    draws = draws[np.isfinite(draws)]
    if draws.size == 0:
        return estimate, math.nan, math.nan
    alpha = (1 - confidence) / 2
    return estimate, float(np.quantile(draws, alpha)), float(np.quantile(draws, 1 - alpha))


def ratio_interval(
    numerator: Values, denominator: Values, confidence: float = CONFIDENCE
) -> tuple[float, float, float]:
    """``(mean(a) / mean(b), low, high)``: the delta-method t interval, i.e. the t interval of the
    linearised per-unit terms ``(a_i - r b_i) / mean(b)`` around ``r``."""
    a, b = _paired_arrays([numerator, denominator])
    if not (np.isfinite(a).all() and np.isfinite(b).all()) or b.mean() == 0:
        return math.nan, math.nan, math.nan
    ratio = float(a.mean() / b.mean())
    _, low, high = t_interval((a - ratio * b) / b.mean(), confidence)
    return ratio, ratio + low, ratio + high


def median_interval(
    values: Values, support: tuple[float, float] = (-math.inf, math.inf), confidence: float = CONFIDENCE
) -> tuple[float, float, float]:
    """``(median, low, high)``: the distribution-free interval ``[x_(k), x_(n-k+1)]`` with the largest
    ``k`` whose binomial coverage is at least ``confidence``; with too few units for any such ``k`` the
    interval is the whole ``support`` (5 units: 94 % at most, so [support])."""
    from scipy import stats

    x = np.sort(_finite_array(values))
    if x.size == 0 or not np.isfinite(x).all():
        return math.nan, math.nan, math.nan
    n, median = x.size, float(np.median(x))
    best = 0
    for k in range(1, n // 2 + 1):  # coverage of [x_(k), x_(n-k+1)] is 1 - 2 P(Bin(n, 1/2) <= k - 1)
        if 1 - 2 * float(stats.binom.cdf(k - 1, n, 0.5)) >= confidence:
            best = k
    if best == 0:
        return median, float(support[0]), float(support[1])
    return median, float(x[best - 1]), float(x[n - best])


def clopper_pearson(successes: int, trials: int, confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """``(k/n, low, high)``: the exact binomial interval of a pass rate."""
    if trials <= 0 or not 0 <= successes <= trials:
        raise ValueError(f"pass rate {successes}/{trials}: need 0 <= successes <= trials and trials > 0")
    from scipy import stats

    alpha = 1 - confidence
    low = 0.0 if successes == 0 else float(stats.beta.ppf(alpha / 2, successes, trials - successes + 1))
    high = 1.0 if successes == trials else float(stats.beta.ppf(1 - alpha / 2, successes + 1, trials - successes))
    return successes / trials, low, high


def _units(n: int, units: str) -> str:
    if not units or units[0].isdigit():
        return units
    return f"{n} {units[:-1] if n == 1 and units.endswith('s') else units}"


def _criterion(
    name: str,
    statement: str,
    interval: tuple[float, float, float],
    threshold: float,
    direction: Direction,
    units: str,
    n: int,
    kind: str,
    paper: str,
    reason: str,
    labels: Sequence[str],
    unit_values: Sequence[float],
    covers: Sequence[str],
    not_covered: Sequence[str],
) -> Criterion:
    estimate, low, high = interval
    if not reason and n == 1 and kind != "exact":
        reason = "one unit: no interval, so at best inconclusive"
    return Criterion(
        name,
        statement,
        estimate,
        low,
        high,
        float(threshold),
        direction,
        _units(n, units),
        int(n),
        kind,
        paper,
        reason,
        tuple(labels),
        tuple(unit_values),
        tuple(covers),
        tuple(not_covered),
    )


def mean_criterion(
    name: str,
    statement: str,
    values: Values,
    threshold: float,
    direction: Direction,
    units: str = "paired seeds",
    paper: str = "",
    reason: str = "",
    covers: Sequence[str] = (),
    not_covered: Sequence[str] = (),
) -> Criterion:
    """The mean of per-unit values (e.g. per-seed method-minus-baseline differences) vs ``threshold``."""
    x = _finite_array(values)
    return _criterion(
        name,
        statement,
        t_interval(x),
        threshold,
        direction,
        units,
        x.size,
        "t",
        paper,
        reason,
        labels_of(values),
        x,
        covers,
        not_covered,
    )


def difference_criterion(
    name: str,
    statement: str,
    method: Values,
    baseline: Values,
    threshold: float,
    direction: Direction,
    units: str = "paired seeds",
    paper: str = "",
    scale: float = 1.0,
    covers: Sequence[str] = (),
    not_covered: Sequence[str] = (),
) -> Criterion:
    """``scale * (method - baseline)`` per paired unit, its mean and t-interval vs ``threshold``."""
    labels = labels_of(method, baseline)
    a, b = _finite_array(method), _finite_array(baseline)
    if a.size != b.size:
        raise ValueError(
            f"criterion {name!r}: {a.size} method units vs {b.size} baseline units; the units must be paired"
        )
    diff = UnitValues(labels, scale * (a - b)) if labels else scale * (a - b)
    return mean_criterion(name, statement, diff, threshold, direction, units, paper, "", covers, not_covered)


def ratio_of_means_criterion(
    name: str,
    statement: str,
    numerator: Values,
    denominator: Values,
    threshold: float,
    direction: Direction,
    units: str = "paired seeds",
    paper: str = "",
    covers: Sequence[str] = (),
    not_covered: Sequence[str] = (),
) -> Criterion:
    """``mean(numerator) / mean(denominator)`` with its delta-method t interval over the paired units."""
    n = _finite_array(numerator).size
    return _criterion(
        name,
        statement,
        ratio_interval(numerator, denominator),
        threshold,
        direction,
        units,
        n,
        "delta-t",
        paper,
        "",
        labels_of(numerator, denominator),
        (),
        covers,
        not_covered,
    )


def extremum_criterion(
    name: str,
    statement: str,
    per_part: Sequence[Values],
    threshold: float,
    direction: Direction,
    extremum: str = "min",
    units: str = "paired seeds",
    paper: str = "",
    covers: Sequence[str] = (),
    not_covered: Sequence[str] = (),
) -> Criterion:
    """The smallest (``extremum="min"``) or largest of several per-unit means, e.g. every step of a sweep:
    each part's t interval at level ``1 - 0.05/K`` (Bonferroni), and the interval of the extremum is
    ``[extremum of the lows, extremum of the highs]``, which covers the true extremum at >= 95 %."""
    if extremum not in ("min", "max"):
        raise ValueError(f"extremum {extremum!r}: expected 'min' or 'max'")
    labels = labels_of(*per_part)
    parts = [_finite_array(p) for p in per_part]
    if not parts or any(p.size != parts[0].size for p in parts):
        raise ValueError(f"criterion {name!r}: parts of one length needed, got {[p.size for p in parts]}")
    level = 1 - (1 - CONFIDENCE) / len(parts)
    intervals = np.array([t_interval(p, level) for p in parts])
    pick = np.min if extremum == "min" else np.max
    estimate, low, high = (float(pick(intervals[:, i])) for i in range(3))
    return _criterion(
        name,
        statement,
        (estimate, low, high),
        threshold,
        direction,
        units,
        parts[0].size,
        f"bonferroni-t ({len(parts)} parts)",
        paper,
        "",
        labels,
        (),
        covers,
        not_covered,
    )


def median_criterion(
    name: str,
    statement: str,
    values: Values,
    threshold: float,
    direction: Direction,
    units: str = "paired seeds",
    paper: str = "",
    support: tuple[float, float] = (-math.inf, math.inf),
    covers: Sequence[str] = (),
    not_covered: Sequence[str] = (),
) -> Criterion:
    """The median of per-unit values with its distribution-free order-statistic interval."""
    x = _finite_array(values)
    interval = median_interval(x, support)
    reason = ""
    if x.size and (interval[1], interval[2]) == (float(support[0]), float(support[1])):
        reason = f"{x.size} units are too few for a 95 % interval of a median (6 are needed)"
    return _criterion(
        name,
        statement,
        interval,
        threshold,
        direction,
        units,
        x.size,
        "order-statistic",
        paper,
        reason,
        labels_of(values),
        (),
        covers,
        not_covered,
    )


def bootstrap_criterion(
    name: str,
    statement: str,
    statistic: Callable[..., float],
    paired: Sequence[Values],
    threshold: float,
    direction: Direction,
    units: str = "paired seeds",
    paper: str = "",
    seed: int = 0,
    covers: Sequence[str] = (),
    not_covered: Sequence[str] = (),
) -> Criterion:
    """Any smooth statistic of paired per-unit arrays: a jackknife t interval below ``BOOTSTRAP_MIN_UNITS``
    units, a percentile bootstrap over the units from there on. (For a min or max of means use
    ``extremum_criterion``; for a median ``median_criterion``: the jackknife is wrong for both.)"""
    arrays = _paired_arrays(paired)
    n = arrays[0].size
    if n < BOOTSTRAP_MIN_UNITS:
        interval, kind = jackknife_interval(statistic, *arrays), "jackknife-t"
    else:
        interval, kind = bootstrap_interval(statistic, *arrays, seed=seed), "bootstrap"
    return _criterion(
        name,
        statement,
        interval,
        threshold,
        direction,
        units,
        n,
        kind,
        paper,
        "",
        labels_of(*paired),
        (),
        covers,
        not_covered,
    )


def proportion_criterion(
    name: str,
    statement: str,
    successes: int,
    trials: int,
    threshold: float,
    direction: Direction = ">=",
    units: str = "runs",
    paper: str = "",
    covers: Sequence[str] = (),
    not_covered: Sequence[str] = (),
) -> Criterion:
    """A pass rate ``successes / trials`` with its Clopper-Pearson interval vs ``threshold``."""
    return _criterion(
        name,
        statement,
        clopper_pearson(int(successes), int(trials)),
        threshold,
        direction,
        units,
        int(trials),
        "clopper-pearson",
        paper,
        "",
        (),
        (),
        covers,
        not_covered,
    )


def exact_criterion(
    name: str,
    statement: str,
    value: float,
    threshold: float,
    direction: Direction,
    units: str = "deterministic",
    paper: str = "",
    reason: str = "",
    covers: Sequence[str] = (),
    not_covered: Sequence[str] = (),
) -> Criterion:
    """A deterministic number (a kernel error, a closed form, a count): a zero-width interval."""
    value = float(value)
    return _criterion(
        name,
        statement,
        (value, value, value),
        threshold,
        direction,
        units,
        1,
        "exact",
        paper,
        reason,
        (),
        (),
        covers,
        not_covered,
    )


MAX_UNITS_TO_DECIDE = 100_000


def units_to_decide(c: Criterion) -> float:
    """How many paired units would decide an inconclusive criterion at its observed effect and spread.

    The interval's half-width ``h`` at ``n`` units is read as ``q(n) s / sqrt(n)`` (``q`` the t quantile at
    n - 1 degrees of freedom, the normal one for bootstrap and Clopper-Pearson intervals), which gives the
    per-unit spread ``s``; the answer is the smallest ``n'`` with ``q(n') s / sqrt(n') < |estimate -
    threshold|``. ``inf`` when the estimate sits on the threshold (no number of units decides it) or above
    ``MAX_UNITS_TO_DECIDE``; NaN when the interval says nothing about the spread (one unit, an interval
    cut at the metric's support, a deterministic criterion)."""
    if c.state != "inconclusive":
        return 0.0 if c.state in ("holds", "fails") else math.nan
    low, high, n = c.low, c.high, c.n_units
    if n < 2 or not (math.isfinite(low) and math.isfinite(high)) or c.interval in ("exact", "order-statistic"):
        return math.nan
    gap = abs(c.estimate - c.threshold)
    if gap == 0:
        return math.inf
    from scipy import stats

    def q(units: int) -> float:
        if c.interval in ("t", "delta-t", "jackknife-t") or c.interval.startswith("bonferroni"):
            return _t_quantile(units - 1)
        return float(stats.norm.ppf(0.5 + CONFIDENCE / 2))

    half = max(c.estimate - low, high - c.estimate)
    spread = half * math.sqrt(n) / q(n)

    def decided(units: int) -> bool:
        return q(units) * spread / math.sqrt(units) < gap

    undecided, units = n, 2 * n  # double until decided, then bisect to the smallest such count
    while not decided(units):
        undecided, units = units, 2 * units
        if units > MAX_UNITS_TO_DECIDE:
            return math.inf
    while units - undecided > 1:
        middle = (units + undecided) // 2
        undecided, units = (undecided, middle) if decided(middle) else (middle, units)
    return float(units)


__all__ = [
    "BOOTSTRAP_MIN_UNITS",
    "bootstrap_criterion",
    "bootstrap_interval",
    "clopper_pearson",
    "difference_criterion",
    "exact_criterion",
    "extremum_criterion",
    "jackknife_interval",
    "mean_criterion",
    "median_criterion",
    "median_interval",
    "proportion_criterion",
    "ratio_interval",
    "ratio_of_means_criterion",
    "t_interval",
    "units_to_decide",
]
