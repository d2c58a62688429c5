"""Criteria with 95 % intervals over paired units: the one place a claim's uncertainty is computed.

A criterion compares an estimate with a threshold. Its interval is over *paired* units (seeds,
splits, repeats) that every compared arm shares, so a difference is computed per unit first and
the interval is taken over those per-unit differences. Three kinds of interval:

- ``mean_criterion``: the mean of per-unit values with a Student-t interval (the default; one unit
  gives an infinite interval, so at best ``inconclusive``);
- ``bootstrap_criterion``: any statistic of paired per-unit arrays (a ratio of means, a median),
  percentile bootstrap over units with a fixed seed;
- ``proportion_criterion``: a pass rate k/n with its Clopper-Pearson interval;
- ``exact_criterion``: a deterministic number (a kernel error, a closed form): zero width.

``models.base.Criterion.state`` turns the interval into holds / fails / inconclusive.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from models.base import Criterion, Direction

CONFIDENCE = 0.95
BOOTSTRAP_SAMPLES = 4000


def _finite_array(values: Sequence[float] | np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=float).reshape(-1)


def t_interval(values: Sequence[float] | np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float, float]:
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
    from scipy import stats

    sem = float(x.std(ddof=1)) / math.sqrt(x.size)
    half = float(stats.t.ppf(0.5 + confidence / 2, df=x.size - 1)) * sem
    return mean, mean - half, mean + half


def bootstrap_interval(
    statistic: Callable[..., float],
    *paired: Sequence[float] | np.ndarray,
    confidence: float = CONFIDENCE,
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``(statistic(*paired), low, high)``: percentile bootstrap resampling the paired units.

    ``paired`` are arrays of equal length, one entry per unit (unit i of every array is the same
    seed/split); each resample draws units with replacement and keeps them paired."""
    arrays = [_finite_array(a) for a in paired]
    n = arrays[0].size
    if n == 0 or any(a.size != n for a in arrays):
        raise ValueError(
            f"bootstrap needs paired arrays of one non-zero length; got lengths {[a.size for a in arrays]}"
        )
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


def mean_criterion(
    name: str,
    statement: str,
    values: Sequence[float] | np.ndarray,
    threshold: float,
    direction: Direction,
    units: str = "paired seeds",
    paper: str = "",
    reason: str = "",
) -> Criterion:
    """The mean of per-unit values (e.g. per-seed method-minus-baseline differences) vs ``threshold``."""
    x = _finite_array(values)
    mean, low, high = t_interval(x)
    if not reason and x.size == 1:
        reason = "one unit: no interval, so at best inconclusive"
    return Criterion(
        name,
        statement,
        mean,
        low,
        high,
        float(threshold),
        direction,
        _units(x.size, units),
        int(x.size),
        "t",
        paper,
        reason,
    )


def difference_criterion(
    name: str,
    statement: str,
    method: Sequence[float] | np.ndarray,
    baseline: Sequence[float] | np.ndarray,
    threshold: float,
    direction: Direction,
    units: str = "paired seeds",
    paper: str = "",
    scale: float = 1.0,
) -> Criterion:
    """``scale * (method - baseline)`` per paired unit, its mean and t-interval vs ``threshold``."""
    a, b = _finite_array(method), _finite_array(baseline)
    if a.size != b.size:
        raise ValueError(
            f"criterion {name!r}: {a.size} method units vs {b.size} baseline units; the units must be paired"
        )
    return mean_criterion(name, statement, scale * (a - b), threshold, direction, units, paper)


def ratio_of_means_criterion(
    name: str,
    statement: str,
    numerator: Sequence[float] | np.ndarray,
    denominator: Sequence[float] | np.ndarray,
    threshold: float,
    direction: Direction,
    units: str = "paired seeds",
    paper: str = "",
    seed: int = 0,
) -> Criterion:
    """``mean(numerator) / mean(denominator)`` with a paired bootstrap interval over units."""
    return bootstrap_criterion(
        name,
        statement,
        lambda a, b: float(np.mean(a) / np.mean(b)),
        (numerator, denominator),
        threshold,
        direction,
        units,
        paper,
        seed,
    )


def bootstrap_criterion(
    name: str,
    statement: str,
    statistic: Callable[..., float],
    paired: Sequence[Sequence[float] | np.ndarray],
    threshold: float,
    direction: Direction,
    units: str = "paired seeds",
    paper: str = "",
    seed: int = 0,
) -> Criterion:
    """Any statistic of paired per-unit arrays with a percentile-bootstrap interval over the units."""
    arrays = [_finite_array(a) for a in paired]
    estimate, low, high = bootstrap_interval(statistic, *arrays, seed=seed)
    n = arrays[0].size
    reason = "one unit: no interval, so at best inconclusive" if n == 1 else ""
    return Criterion(
        name,
        statement,
        estimate,
        low,
        high,
        float(threshold),
        direction,
        _units(n, units),
        n,
        "bootstrap",
        paper,
        reason,
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
) -> Criterion:
    """A pass rate ``successes / trials`` with its Clopper-Pearson interval vs ``threshold``."""
    rate, low, high = clopper_pearson(int(successes), int(trials))
    return Criterion(
        name,
        statement,
        rate,
        low,
        high,
        float(threshold),
        direction,
        _units(int(trials), units),
        int(trials),
        "clopper-pearson",
        paper,
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
) -> Criterion:
    """A deterministic number (a kernel error, a closed form, a count): a zero-width interval."""
    value = float(value)
    return Criterion(
        name, statement, value, value, value, float(threshold), direction, units, 1, "exact", paper, reason
    )


__all__ = [
    "bootstrap_criterion",
    "bootstrap_interval",
    "clopper_pearson",
    "difference_criterion",
    "exact_criterion",
    "mean_criterion",
    "proportion_criterion",
    "ratio_of_means_criterion",
    "t_interval",
]
