"""The claim table: one row per method, as text for the console and markdown for Prefect.

A row's verdict is the claim's three-state verdict; its key figures are the claim's criteria, each
``estimate [low, high] <direction> threshold -> state`` (``criterion_line``), the same text the
report and ``paperline status`` show.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

# The decision comes before the long figures, so narrow views (the Prefect UI) show it unscrolled.
COLUMNS = (
    "method",
    "verdict",
    "decided by",
    "must-pass",
    "version",
    "champion",
    "decision",
    "criteria",
    "data",
    "MLflow run",
)
TEXT_COLUMNS = ("method", "verdict", "decided by", "must-pass", "version", "champion", "data")
VERDICT_WORDS = {"holds": "holds", "fails": "FAILS", "inconclusive": "inconclusive"}


def number(x: float, digits: int = 3) -> str:
    if not isinstance(x, (int, float)) or math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}g}"


def interval_text(c: Mapping[str, Any]) -> str:
    """``0.93 [0.91, 0.95]`` (just ``0.93`` for a deterministic criterion)."""
    est, low, high = c.get("estimate", math.nan), c.get("low", math.nan), c.get("high", math.nan)
    if low == high == est:
        return number(est)
    return f"{number(est)} [{number(low)}, {number(high)}]"


def criterion_line(c: Mapping[str, Any]) -> str:
    """``name: 0.93 [0.91, 0.95] >= 0.9 -> holds (5 paired seeds)``."""
    if "estimate" not in c:
        return f"{c.get('name', '?')}: {c.get('state', '?')}"
    return (
        f"{c['name']}: {interval_text(c)} {c['direction']} {number(c['threshold'])} -> {c['state']}"
        f" ({c.get('units', '')})"
    )


def flag_line(f: Mapping[str, Any]) -> str:
    """``budget: otter/fine-tuned still improving ... (explained: ...)``."""
    text = f"{f.get('kind', '?')}: {f.get('text', '?')}"
    return text + (f" (explained: {f['explanation']})" if f.get("explanation") else "")


def decided_by_short(flags: Iterable[Mapping[str, Any]]) -> str:
    """``method`` when no flag was raised, else the flag kinds with counts: ``budget x2, set-up``."""
    kinds: dict[str, int] = {}
    for f in flags:
        kinds[f.get("kind", "?")] = kinds.get(f.get("kind", "?"), 0) + 1
    if not kinds:
        return "method"
    return ", ".join(k if n == 1 else f"{k} x{n}" for k, n in kinds.items())


def rows(results: Iterable[dict[str, Any]]) -> list[tuple[str, ...]]:
    out = []
    for r in results:
        if "error" in r:
            out.append(
                (r["method"], "-", "-", "ERROR", "-", "-", "run failed", r["error"][:80], "-", r.get("run_id") or "-")
            )
            continue
        checks = "pass" if r["sane"] else "FAIL: " + ", ".join(r["failed_checks"])
        out.append(
            (
                r["method"],
                VERDICT_WORDS.get(r["verdict"], r["verdict"]),
                decided_by_short(r.get("flags", [])),
                checks,
                f"v{r['version']}" if r["version"] else "-",
                f"v{r['champion_version']}" if r["champion_version"] else "-",
                ("promoted" if r["promoted"] else "kept") + ": " + r["reason"],
                "; ".join(criterion_line(c) for c in r["criteria"]),
                f"{r.get('dataset', '')} ({r.get('data_source', '?')})",
                r["run_id"],
            )
        )
    return out


def text_table(results: Iterable[dict[str, Any]]) -> str:
    """The console table: one line per method, then its criteria indented beneath it."""
    results = list(results)
    body = rows(results)
    order = [COLUMNS.index(c) for c in TEXT_COLUMNS]
    shown = [TEXT_COLUMNS] + [tuple(row[i] for i in order) for row in body]
    widths = [max(len(str(row[i])) for row in shown) for i in range(len(shown[0]))]

    def line(row) -> str:
        return "  ".join(str(cell).ljust(w) for cell, w in zip(row, widths)).rstrip()

    lines = [line(shown[0]), "  ".join("-" * w for w in widths)]
    for result, row in zip(results, shown[1:]):
        lines.append(line(row))
        if "error" in result:
            lines.append(f"    error: {result['error'][:300]}")
            continue
        lines += [f"    {criterion_line(c)}" for c in result["criteria"]]
        lines += [f"    flag {flag_line(f)}" for f in result.get("flags", [])]
    return "\n".join(lines)


def markdown_table(results: Iterable[dict[str, Any]], claims: dict[str, str] | None = None) -> str:
    results = list(results)
    body = rows(results)
    md = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    md += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in body]
    flagged = [r for r in results if r.get("flags")]
    if flagged:
        md += ["", "**What else may decide a verdict (diagnostics)**", ""]
        md += [f"- `{r['method']}`: " + "; ".join(flag_line(f) for f in r["flags"]) for r in flagged]
    if claims:
        md += ["", "**Claims checked**", ""] + [f"- `{m}`: {c}" for m, c in claims.items()]
    return "\n".join(md)
