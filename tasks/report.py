"""The claim table: one row per method, as text for the console and markdown for Prefect."""

from __future__ import annotations

from typing import Any, Iterable

# The decision comes before the long figures, so narrow views (the Prefect UI) show it unscrolled.
COLUMNS = ("method", "claim holds", "must-pass", "version", "champion", "decision", "key figures", "MLflow run")
TEXT_COLUMNS = ("method", "claim holds", "must-pass", "key figures", "version", "champion")


def _figures(figures: dict[str, float], limit: int = 4) -> str:
    items = list(figures.items())[:limit]
    return ", ".join(f"{k}={v:.3g}" for k, v in items) + (" ..." if len(figures) > limit else "")


def rows(results: Iterable[dict[str, Any]]) -> list[tuple[str, ...]]:
    out = []
    for r in results:
        if "error" in r:
            out.append((r["method"], "-", "ERROR", "-", "-", "run failed", r["error"][:80], r.get("run_id") or "-"))
            continue
        checks = "pass" if r["sane"] else "FAIL: " + ", ".join(r["failed_checks"])
        out.append((
            r["method"], "yes" if r["holds"] else "NO", checks,
            f"v{r['version']}" if r["version"] else "-",
            f"v{r['champion_version']}" if r["champion_version"] else "-",
            ("promoted" if r["promoted"] else "kept") + ": " + r["reason"], _figures(r["figures"]), r["run_id"],
        ))
    return out


def text_table(results: Iterable[dict[str, Any]]) -> str:
    body = rows(results)
    order = [COLUMNS.index(c) for c in TEXT_COLUMNS]
    shown = [TEXT_COLUMNS] + [tuple(row[i] for i in order) for row in body]
    widths = [max(len(str(row[i])) for row in shown) for i in range(len(shown[0]))]
    lines = ["  ".join(str(cell).ljust(w) for cell, w in zip(row, widths)) for row in shown]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(results: Iterable[dict[str, Any]], claims: dict[str, str] | None = None) -> str:
    body = rows(results)
    md = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    md += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in body]
    if claims:
        md += ["", "**Claims checked**", ""] + [f"- `{m}`: {c}" for m, c in claims.items()]
    return "\n".join(md)
