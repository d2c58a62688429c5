"""Verdict diagnostics: whether a verdict is decided by the method or by the set-up around it.

Computed by the platform after every ``claim``, from what the training helpers recorded
(``models.common.evidence``: every validation selection and every fit) and what the claim declares
(negative controls, where the compared arms sit on bounded metrics, which random draws its units
cover). Each finding is a ``Flag``; a verdict with none is *decided by the method*.

=====================  ==========  =============================================================
flag                   kind        raised when
=====================  ==========  =============================================================
grid_edge              set-up      an arm's chosen value is the first or last point of a grid axis
no_eligible_point      error       a grid search had no point with a finite validation score
still_improving        budget      a compared fit ran its whole budget with its best score within
                                   the patience of the end (early stopping never fired)
saturated              set-up      every compared arm is within the declared margin of the
                                   metric's ceiling (or floor): the task cannot separate them
control_passes         check       a negative control holds its criterion: the claim cannot hold
control_inconclusive   check       a negative control's criterion is inconclusive, not failing
no_control             check       the claim declares no negative control
not_covered            units       a random draw the result depends on is shared by every unit
=====================  ==========  =============================================================

``power`` (not a flag) gives, for each inconclusive criterion, the paired units that would decide it
at the observed effect and spread (``models.common.verdicts.units_to_decide``).
"""

from __future__ import annotations

import math
from collections import defaultdict

from models.base import ClaimResult, Flag
from models.common.evidence import Evidence

FLAG_CODES = (
    "grid_edge",
    "no_eligible_point",
    "still_improving",
    "saturated",
    "control_passes",
    "control_inconclusive",
    "no_control",
    "not_covered",
)


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def selection_flags(evidence: Evidence) -> list[Flag]:
    """Grid edges (one flag per arm, axis and side, counting the searches) and searches with no eligible point."""
    edges: dict[tuple[str, str, str], list] = defaultdict(list)
    searches: dict[str, int] = defaultdict(int)
    flags = []
    for s in evidence.selections:
        searches[s.arm] += 1
        if not s.eligible:
            where = f" on {s.unit}" if s.unit else ""
            flags.append(
                Flag(
                    "error",
                    "no_eligible_point",
                    s.arm,
                    f"{s.arm}: no grid point had a finite validation {s.metric}{where}; the first point was kept",
                )
            )
            continue
        axes = s.axes()
        for axis, side in s.edges().items():
            edges[(s.arm, axis, side)].append((s.chosen[axis], axes[axis]))
    for (arm, axis, side), hits in edges.items():
        values = sorted({float(v) for v, _ in hits})
        grid = hits[0][1]
        count = f", {len(hits)} of {searches[arm]} searches" if searches[arm] > 1 else ""
        flags.append(
            Flag(
                "set-up",
                "grid_edge",
                f"{arm}/{axis}",
                f"grid edge: {arm} chose {axis}={'/'.join(_fmt(v) for v in values)} at the {side} of its grid "
                f"{_fmt(grid[0])}..{_fmt(grid[-1])} ({len(grid)} points{count})",
            )
        )
    return flags


def fit_flags(evidence: Evidence) -> list[Flag]:
    """One flag per arm with fits that ran their whole budget while still improving."""
    by_arm: dict[str, list] = defaultdict(list)
    for f in evidence.fits:
        by_arm[f.arm].append(f)
    flags = []
    for arm, fits in by_arm.items():
        improving = [f for f in fits if f.still_improving]
        if not improving:
            continue
        worst = max(improving, key=lambda f: f.best)
        flags.append(
            Flag(
                "budget",
                "still_improving",
                arm,
                f"{arm} still improving: {len(improving)} of {len(fits)} fits ran their whole budget with the best "
                f"validation score within {worst.window} evaluations of the end (best at {worst.best + 1} of "
                f"{worst.trained})",
            )
        )
    return flags


def claim_flags(claim: ClaimResult) -> list[Flag]:
    """Saturation, negative controls and random draws the units leave out, from what the claim declares."""
    flags = []
    for s in claim.separations:
        end = s.saturated
        if end:
            values = ", ".join(f"{arm} {_fmt(v)}" for arm, v in s.arms.items())
            bound = s.ceiling if end == "ceiling" else s.floor
            flags.append(
                Flag(
                    "set-up",
                    "saturated",
                    s.metric,
                    f"saturated: every arm within {_fmt(s.margin)} of the {end} {_fmt(bound)} of {s.metric} ({values})",
                )
            )
    if not claim.controls:
        flags.append(Flag("check", "no_control", "claim", "no negative control declared"))
    for c in claim.controls:
        state = c.criterion.state
        if state == "holds":
            flags.append(
                Flag(
                    "check",
                    "control_passes",
                    c.of,
                    f"control passes: {c.of} holds also with {c.broken} ({c.criterion.describe()}), so it cannot "
                    "tell the method from the broken variant",
                )
            )
        elif state == "inconclusive":
            flags.append(
                Flag(
                    "check",
                    "control_inconclusive",
                    c.of,
                    f"control not refuted: {c.of} is inconclusive with {c.broken} ({c.criterion.describe()})",
                )
            )
    missing: dict[str, list[str]] = defaultdict(list)
    for criterion in claim.criteria:
        for draw in criterion.not_covered:
            missing[draw].append(criterion.name)
    for draw, names in missing.items():
        flags.append(
            Flag(
                "units",
                "not_covered",
                draw,
                f"units do not cover the {draw}: every unit of {', '.join(names)} shares one",
            )
        )
    return flags


def _explanation(claim: ClaimResult, flag: Flag) -> str:
    for key in (flag.key, flag.code):
        if key in claim.explained:
            return claim.explained[key]
    return ""


def diagnose(claim: ClaimResult, evidence: Evidence | None = None) -> ClaimResult:
    """Fill in ``claim.diagnostics`` (the flags, each with the claim's explanation where it gives one) and
    ``claim.power`` (units that would decide each inconclusive criterion); returns ``claim``."""
    from models.common.verdicts import units_to_decide

    evidence = evidence or Evidence()
    flags = selection_flags(evidence) + fit_flags(evidence) + claim_flags(claim)
    explained = [Flag(f.kind, f.code, f.subject, f.text, _explanation(claim, f)) for f in flags]
    claim.diagnostics = explained
    # None where the units cannot say (no spread, one unit): NaN would not survive claim.json's round trip.
    claim.power = {c.name: _finite_or_none(units_to_decide(c)) for c in claim.criteria if c.state == "inconclusive"}
    return claim


def _finite_or_none(value):
    import math

    return value if value is None or math.isfinite(float(value)) else None


def figures(evidence: Evidence, plots_dir) -> list:
    """The diagnostics as figures every method gets: its validation grids and its fits' budgets."""
    from pathlib import Path

    from models.common import plotting

    out = []
    if evidence.selections:
        out.append(plotting.selection_grids(evidence.selections, Path(plots_dir) / "diagnostics_grids.png"))
    if evidence.fits:
        out.append(plotting.fit_budgets(evidence.fits, Path(plots_dir) / "diagnostics_fits.png"))
    return out


def power_text(claim: ClaimResult) -> str:
    """``query_ratio needs ~14 paired units`` for every inconclusive criterion, ``; ``-separated."""
    parts = []
    for name, units in claim.power.items():
        if units is None:
            parts.append(f"{name}: units needed unknown")
        elif math.isinf(units):
            parts.append(f"{name}: no number of units decides it at this effect")
        else:
            parts.append(f"{name} needs ~{int(units)} units (has {claim.criterion(name).n_units})")
    return "; ".join(parts)


__all__ = ["FLAG_CODES", "claim_flags", "diagnose", "figures", "fit_flags", "power_text", "selection_flags"]
