"""Three-state criteria: intervals over paired units, the state rule of REVIEW.md §1, the verdict."""

import math

import numpy as np
import pytest
from scipy import stats

from models.base import ClaimResult, Criterion, verdict_of
from models.common import verdicts as V


def test_interval_straddling_its_threshold_is_inconclusive():
    # Per-seed gains 0.5, 3, 4 points: mean 2.5 >= 2, but the interval reaches below 2.
    c = V.mean_criterion("gain", "method minus baseline, points", [0.5, 3.0, 4.0], 2.0, ">=", units="seeds")
    assert c.estimate == pytest.approx(2.5) and c.low < 2.0 < c.high
    assert c.state == "inconclusive" and "straddles" in c.why
    claim = ClaimResult("toy", [c, V.exact_criterion("kernel_error", "max abs error", 1e-7, 1e-4, "<")])
    assert claim.verdict == "inconclusive" and not claim.holds


def test_states_follow_the_whole_interval():
    assert V.mean_criterion("a", "s", [2.5, 2.6, 2.7], 2.0, ">=").state == "holds"
    assert V.mean_criterion("b", "s", [0.1, 0.2, 0.3], 2.0, ">=").state == "fails"
    assert V.mean_criterion("c", "s", [0.1, 0.2, 0.3], 2.0, "<=").state == "holds"
    # A strict inequality at a zero-width interval on the threshold fails; the non-strict one holds.
    assert V.exact_criterion("d", "s", 1.0, 1.0, ">").state == "fails"
    assert V.exact_criterion("e", "s", 1.0, 1.0, ">=").state == "holds"


def test_t_interval_matches_scipy():
    x = np.array([0.1, 0.4, 0.35, 0.8, 0.2])
    mean, low, high = V.t_interval(x)
    ref = stats.t.interval(0.95, df=4, loc=x.mean(), scale=stats.sem(x))
    assert (low, high) == pytest.approx(ref) and mean == pytest.approx(x.mean())


def test_one_unit_is_never_decisive():
    c = V.mean_criterion("single", "one seed", [5.0], 2.0, ">=")
    assert (c.low, c.high) == (-math.inf, math.inf) and c.state == "inconclusive" and "one unit" in c.why


def test_nan_estimate_fails_with_the_reason():
    c = V.mean_criterion("broken", "a diverged arm", [float("nan"), 1.0, 2.0], 0.0, ">=")
    assert c.state == "fails" and "not a finite number" in c.why
    assert Criterion("x", "s", math.nan, 0.0, 1.0, 0.5, ">=").state == "fails"
    claim = ClaimResult("c", [V.exact_criterion("ok", "s", 1.0, 0.0, ">"), c])
    assert claim.verdict == "fails"


def test_verdict_rules():
    holds = V.exact_criterion("h", "s", 1.0, 0.0, ">")
    fails = V.exact_criterion("f", "s", -1.0, 0.0, ">")
    unsure = V.mean_criterion("u", "s", [-1.0, 2.0], 0.0, ">")
    assert verdict_of([holds, holds]) == "holds"
    assert verdict_of([holds, unsure]) == "inconclusive"
    assert verdict_of([unsure, fails, holds]) == "fails"
    assert verdict_of([]) == "inconclusive"


def test_differences_are_paired_per_unit():
    method = [0.80, 0.70, 0.90]
    baseline = [0.78, 0.68, 0.88]  # seeds vary a lot, the per-seed difference does not
    c = V.difference_criterion("gain", "s", method, baseline, 1.0, ">=", scale=100)
    assert c.estimate == pytest.approx(2.0) and c.state == "holds"
    with pytest.raises(ValueError, match="paired"):
        V.difference_criterion("gain", "s", [1, 2], [1, 2, 3], 0, ">=")


def test_ratio_keeps_units_paired_and_is_reproducible():
    num, den = [0.9, 0.5, 1.8], [1.0, 0.55, 2.0]  # every unit's ratio is 0.9 or 0.909
    c = V.ratio_of_means_criterion("ratio", "s", num, den, 0.95, "<=")
    assert c.high < 0.95 and c.state == "holds" and c.interval == "delta-t"
    assert V.ratio_of_means_criterion("ratio", "s", num, den, 0.95, "<=") == c
    shuffled = V.ratio_of_means_criterion("ratio", "s", num, den[::-1], 0.95, "<=")
    assert shuffled.high > c.high + 0.1  # unpaired, the per-unit ratios spread: the interval widens


def test_bootstrap_only_from_twenty_units_on():
    rng = np.random.default_rng(0)
    few, many = rng.normal(1, 1, 10), rng.normal(1, 1, 20)
    assert V.bootstrap_criterion("m", "s", np.mean, [few], 0, ">").interval == "jackknife-t"
    c = V.bootstrap_criterion("m", "s", np.mean, [many], 0, ">")
    assert c.interval == "bootstrap" and V.bootstrap_criterion("m", "s", np.mean, [many], 0, ">") == c
    # For a mean the jackknife-t interval is exactly the t interval.
    jk = V.bootstrap_criterion("m", "s", np.mean, [few], 0, ">")
    assert (jk.low, jk.high) == pytest.approx(V.t_interval(few)[1:])


def test_clopper_pearson_pass_rate():
    rate, low, high = V.clopper_pearson(19, 20)
    assert rate == 0.95 and low == pytest.approx(0.7513, abs=1e-4) and high == pytest.approx(0.99874, abs=1e-4)
    assert V.proportion_criterion("p", "s", 20, 20, 0.5).state == "holds"
    with pytest.raises(ValueError, match="21/20"):
        V.clopper_pearson(21, 20)


def test_claim_round_trips_through_json():
    import json

    claim = ClaimResult(
        "c",
        [V.mean_criterion("a", "s", [1.0], 0.0, ">="), V.exact_criterion("b", "s", 2, 1, ">")],
        {"gate": True},
        {"extra": 3.0},
        "notes",
    )
    again = ClaimResult.from_dict(json.loads(json.dumps(claim.to_dict())))
    assert again.to_dict() == claim.to_dict() and again.verdict == "inconclusive"
    assert claim.to_dict()["criteria"][0]["state"] == "inconclusive"


def test_bad_criteria_are_refused():
    with pytest.raises(ValueError, match="direction"):
        Criterion("x", "s", 1.0, 1.0, 1.0, 0.0, "=>")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no '/'"):
        V.exact_criterion("a/b", "s", 1.0, 0.0, ">")
    with pytest.raises(ValueError, match="repeat"):
        ClaimResult("c", [V.exact_criterion("a", "s", 1, 0, ">"), V.exact_criterion("a", "s", 1, 0, ">")])
