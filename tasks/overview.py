"""What the tracking server knows, per method: ``paperline status`` and ``paperline report``.

Both read MLflow only (never the outputs/ folder), so they describe what was published: the
latest pipeline run of every registered method, its claim, and the registered versions that
hold the ``champion`` and ``challenger`` aliases.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from models.base import MethodSpec
from tasks import promotion, report, tracking

REPORT_EXPERIMENT = "paperline/report"


@dataclass
class MethodStatus:
    method: str
    title: str
    claim: str
    run_id: str | None = None
    experiment_id: str | None = None
    status: str | None = None  # MLflow run status: FINISHED, FAILED, RUNNING, KILLED
    started: str | None = None
    scale: str | None = None
    verdict: str | None = None  # holds | fails | inconclusive
    sane: bool | None = None
    criteria: list[dict] = field(default_factory=list)  # Criterion.to_dict() each, in the claim's order
    figures: dict[str, float] = field(default_factory=dict)  # further claim/ numbers (not criteria)
    dataset: str | None = None
    data_source: str | None = None  # real | synthetic
    data_provenance: str | None = None
    data_sha256: str | None = None
    failure: str | None = None
    decided_by: str | None = None  # "method", or the diagnostics' flags (tasks.diagnostics)
    flags: list[dict] = field(default_factory=list)  # Flag.to_dict() each
    power: dict[str, float | None] = field(default_factory=dict)  # units that would decide each inconclusive criterion
    host: dict[str, str] = field(default_factory=dict)  # the run's host fingerprint (tasks.host)
    decision: str | None = None
    version: str | None = None
    champion: str | None = None
    challenger: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def latest_pipeline_run(c, spec: MethodSpec):
    """The newest top-level (not per-variant) MLflow run of ``spec``, or None."""
    exp = c.get_experiment_by_name(tracking.experiment_name(spec))
    if exp is None:
        return None
    # Only pipeline (parent) runs carry the scale tag; a filter, not a scan of the newest N runs, so a
    # method with hundreds of nested runs is still found.
    runs = c.search_runs(
        [exp.experiment_id],
        f"tags.`{tracking.TAG}.scale` LIKE '%'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return runs[0] if runs else None


def latest(c, spec: MethodSpec) -> MethodStatus:
    """The latest top-level pipeline run of ``spec`` and its model aliases."""
    out = MethodStatus(spec.slug, spec.title, spec.claim)
    run = latest_pipeline_run(c, spec)
    if run is None:
        return out
    tags, metrics = run.data.tags, run.data.metrics
    out.run_id, out.experiment_id, out.status = run.info.run_id, run.info.experiment_id, run.info.status
    out.started = dt.datetime.fromtimestamp(run.info.start_time / 1000).strftime("%Y-%m-%d %H:%M")
    out.scale = tags.get("paperline.scale")
    out.verdict = tags.get("paperline.verdict")
    if "claim/sane" in metrics:
        out.sane = bool(metrics["claim/sane"])
    out.claim = tags.get("paperline.claim", spec.claim)
    out.criteria = tracking.criteria_from_tags(tags)
    criterion_keys = {f"claim/{c['name']}/" for c in out.criteria}
    out.figures = {
        k.removeprefix("claim/"): v
        for k, v in sorted(metrics.items())
        if k.startswith("claim/")
        and k not in ("claim/verdict", "claim/sane", "claim/flags", "claim/decided_by_method")
        and not any(k.startswith(p) for p in criterion_keys)
    }
    out.dataset, out.data_source = tags.get("paperline.dataset"), tags.get("paperline.data_source")
    out.data_provenance, out.data_sha256 = tags.get("paperline.data_provenance"), tags.get("paperline.data_sha256")
    out.failure = tags.get("paperline.failure")
    out.decided_by = tags.get(f"{tracking.TAG}.decided_by")
    out.flags = tracking.flags_from_tags(tags)
    try:
        out.power = json.loads(tags.get(f"{tracking.TAG}.power", "{}"))
    except json.JSONDecodeError:
        out.power = {}
    prefix = f"{tracking.TAG}.host."
    out.host = {k.removeprefix(prefix): v for k, v in tags.items() if k.startswith(prefix)}
    out.decision = tags.get("paperline.decision_reason")
    out.version = tags.get("paperline.model_version")
    out.champion = promotion.alias_version(c, spec, promotion.CHAMPION)
    out.challenger = promotion.alias_version(c, spec, promotion.CHALLENGER)
    return out


def collect(root: Path, specs: list[MethodSpec] | None = None) -> list[MethodStatus]:
    from models.registry import METHODS

    c = tracking.client(root)
    return [latest(c, spec) for spec in (specs or list(METHODS.values()))]


def _verdict(value: str | None) -> str:
    return "-" if value is None else report.VERDICT_WORDS.get(value, value)


def status_table(items: list[MethodStatus], criteria: bool = True) -> str:
    """One line per method; with ``criteria``, each criterion (estimate [interval] vs threshold) beneath it."""
    header = (
        "method",
        "last run",
        "status",
        "scale",
        "verdict",
        "decided by",
        "must-pass",
        "data",
        "champion",
        "challenger",
    )
    body = [
        (
            s.method,
            s.started or "never",
            s.status or "-",
            s.scale or "-",
            _verdict(s.verdict),
            decided_by_short(s),
            "-" if s.sane is None else ("pass" if s.sane else "FAIL"),
            f"{s.dataset} ({s.data_source})" if s.dataset else "-",
            f"v{s.champion}" if s.champion else "-",
            f"v{s.challenger}" if s.challenger else "-",
        )
        for s in items
    ]
    rows = [header, *body]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]

    def line(r) -> str:
        return "  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip()

    lines = [line(header), "  ".join("-" * w for w in widths)]
    for s, r in zip(items, body):
        lines.append(line(r))
        if criteria:
            lines += [f"    {report.criterion_line(c)}" for c in s.criteria]
            lines += [f"    flag {report.flag_line(f)}" for f in s.flags]
    return "\n".join(lines)


def decided_by_short(s: MethodStatus) -> str:
    """``method``, or the flag kinds with counts (``budget x2, set-up``); ``-`` before any run."""
    if s.decided_by is None:
        return "-"
    return report.decided_by_short(s.flags)


# ----------------------------------------------------------------------------------- the report


def mlflow_ui_base(root: Path) -> str:
    """Where the MLflow UI is: the server ``paperline up`` started, else ``mlflow ui``'s default."""
    from tasks import servers

    running = servers.running(root)
    return running["mlflow"]["url"] if "mlflow" in running else "http://127.0.0.1:5000"


def _download_plots(c, run_id: str, dest: Path) -> list[Path]:
    import mlflow.artifacts

    try:
        names = [a.path for a in c.list_artifacts(run_id, "plots")]
    except Exception:  # no artifacts logged (a run that failed early)
        return []
    if not names:
        return []
    dest.mkdir(parents=True, exist_ok=True)
    local = mlflow.artifacts.download_artifacts(
        run_id=run_id, artifact_path="plots", dst_path=str(dest), tracking_uri=c.tracking_uri
    )
    return sorted(p for p in Path(local).rglob("*") if p.suffix.lower() in (".png", ".svg", ".jpg"))


_STYLE = """
body{font-family:system-ui,sans-serif;margin:2rem;max-width:1200px;color:#222}
table{border-collapse:collapse;width:100%;font-size:.9rem;margin:.5rem 0}th,td{border:1px solid #ccc;
padding:.35rem .5rem;vertical-align:top;text-align:left}th{background:#f3f3f3}
.badge{display:inline-block;padding:.1rem .5rem;border-radius:.8rem;font-weight:600;font-size:.85rem;color:#fff}
.holds{background:#1a7f37}.fails{background:#b42318}.inconclusive{background:#9a6700}.none{background:#888}
.FAIL{color:#a11;font-weight:600}.real{color:#0a5;font-weight:600}.synthetic{color:#a60;font-weight:600}
figure{display:inline-block;margin:.5rem;max-width:45%}figure img{max-width:100%;border:1px solid #ddd}
figcaption{font-size:.8rem;color:#555}.method{color:#1a7f37;font-weight:600}.top{font-size:1.1rem}
.flags li{margin:.2rem 0}.host{font-size:.85rem;color:#555}section{margin-top:2.5rem;border-top:1px solid #ddd}code{font-size:.85rem}
.index{display:flex;flex-wrap:wrap;gap:.4rem;margin:1rem 0}.index a{text-decoration:none;border:1px solid #ddd;
padding:.3rem .6rem;border-radius:.4rem;color:#222}.claim{font-size:1.05rem}
"""


def _cell(value: str, css: str = "") -> str:
    return f'<td class="{css}">{html.escape(value)}</td>' if css else f"<td>{html.escape(value)}</td>"


def _badge(verdict: str | None) -> str:
    css = verdict if verdict in ("holds", "fails", "inconclusive") else "none"
    return f'<span class="badge {css}" data-verdict="{css}">{html.escape(verdict or "not run")}</span>'


def _criteria_table(criteria: list[dict]) -> str:
    if not criteria:
        return "<p>No criteria recorded.</p>"
    head = ("criterion", "what it compares", "estimate [95 % interval]", "threshold", "state", "units", "paper reports")
    body = []
    for c in criteria:
        if "estimate" not in c:
            body.append(
                "<tr>" + _cell(c.get("name", "?")) + f'<td colspan="6">{html.escape(c.get("state", "?"))}</td></tr>'
            )
            continue
        why = f" ({c['reason']})" if c.get("reason") else ""
        body.append(
            "<tr>"
            + "".join(
                [
                    f"<td><code>{html.escape(c['name'])}</code></td>",
                    _cell(c.get("statement", "")),
                    _cell(report.interval_text(c)),
                    _cell(f"{c['direction']} {report.number(c['threshold'])}"),
                    f"<td>{_badge(c['state'])}{html.escape(why)}</td>",
                    _cell(f"{c.get('units', '')}, {c.get('interval', '')} interval"),
                    _cell(c.get("paper") or "-"),
                ]
            )
            + "</tr>"
        )
    return (
        '<table class="criteria"><thead><tr>'
        + "".join(f"<th>{h}</th>" for h in head)
        + "</tr></thead><tbody>"
        + "".join(body)
        + "</tbody></table>"
    )


def _diagnostics_html(s: MethodStatus) -> str:
    """The run's diagnostics: decided by the method, or each flag (with the claim's explanation); the units
    that would decide each inconclusive criterion; the host it ran on."""
    if s.decided_by is None:
        return ""
    if s.flags:
        flags = "".join(f"<li>{html.escape(report.flag_line(f))}</li>" for f in s.flags)
        body = f"<p><b>Decided by:</b> not the method alone &mdash;</p><ul class='flags'>{flags}</ul>"
    else:
        body = "<p><b>Decided by:</b> the method (no diagnostic flag).</p>"
    power = [
        f"{name}: {'unknown' if n is None else ('never at this effect' if n == float('inf') else f'~{int(n)} units')}"
        for name, n in s.power.items()
    ]
    if power:
        body += f"<p><b>Units that would decide the inconclusive criteria:</b> {html.escape('; '.join(power))}</p>"
    if s.host:
        from tasks import host

        body += f"<p class='host'><b>Host:</b> {html.escape(host.describe(s.host))}</p>"
    return f"<div class='diagnostics'>{body}</div>"


def render_html(items: list[MethodStatus], figures: dict[str, list[Path]], out_dir: Path, ui_base: str) -> str:
    def run_link(s: MethodStatus) -> str:
        if not s.run_id:
            return "-"
        url = f"{ui_base}/#/experiments/{s.experiment_id}/runs/{s.run_id}"
        return f'<a href="{html.escape(url)}">{html.escape(s.run_id[:12])}</a>'

    index = "".join(
        f'<a href="#{html.escape(s.method)}">{html.escape(s.method)} {_badge(s.verdict)}</a>' for s in items
    )
    counts = {v: sum(s.verdict == v for s in items) for v in ("holds", "fails", "inconclusive")}
    rows = []
    for s in items:
        sane = "-" if s.sane is None else ("pass" if s.sane else "FAIL")
        rows.append(
            "<tr>"
            + "".join(
                [
                    f'<td><a href="#{s.method}">{html.escape(s.method)}</a></td>',
                    f"<td>{_badge(s.verdict)}</td>",
                    _cell(decided_by_short(s), "method" if s.decided_by == "method" else ""),
                    _cell(sane, sane),
                    _cell(f"{s.dataset or '-'} ({s.data_source or '-'})", s.data_source or ""),
                    _cell(s.status or "never run"),
                    _cell(f"v{s.champion}" if s.champion else "-"),
                    f"<td>{run_link(s)}</td>",
                ]
            )
            + "</tr>"
        )
    sections = []
    for s in items:
        imgs = "".join(
            f'<figure><img src="{html.escape(p.relative_to(out_dir).as_posix())}" alt="{html.escape(p.stem)}">'
            f"<figcaption>{html.escape(p.name)}</figcaption></figure>"
            for p in figures.get(s.method, [])
        )
        extra = "".join(f"<li><code>{html.escape(k)}</code> = {v:.6g}</li>" for k, v in s.figures.items())
        notes = []
        if s.sane is False or s.failure:
            notes.append(f"<p class='FAIL'>Run failed: {html.escape(s.failure or 'a must-pass check failed')}</p>")
        if s.decision:
            notes.append(f"<p><b>Promotion:</b> {html.escape(s.decision)}</p>")
        notes.append(_diagnostics_html(s))
        data = (
            f"<p><b>Data:</b> <code>{html.escape(s.dataset)}</code> "
            f"<span class='{html.escape(s.data_source or '')}'>{html.escape(s.data_source or 'unspecified')}</span>"
            f" &mdash; {html.escape(s.data_provenance or 'no provenance recorded')}"
            f" (sha256 <code>{html.escape((s.data_sha256 or '')[:12])}</code>, scale {html.escape(s.scale or '-')})</p>"
            if s.dataset
            else "<p>Never run.</p>"
        )
        sections.append(
            f'<section id="{s.method}"><h2>{html.escape(s.method)} {_badge(s.verdict)}</h2>'
            f"<p><i>{html.escape(s.title)}</i></p><p class='claim'><b>Claim:</b> {html.escape(s.claim)}</p>"
            f"{data}{''.join(notes)}{_criteria_table(s.criteria)}"
            + (f"<details><summary>Other measured numbers</summary><ul>{extra}</ul></details>" if extra else "")
            + f"{imgs or '<p>No figures.</p>'}<p>MLflow run: {run_link(s)}</p></section>"
        )
    stamp = dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    summary = ", ".join(f"{n} {v}" for v, n in counts.items())
    ran = [s for s in items if s.decided_by is not None]
    by_method = sum(s.decided_by == "method" for s in ran)
    top = (
        f"<p class='top'><b>{by_method} of {len(ran)} verdicts decided by the method</b> (no diagnostic flag); "
        f"{len(ran) - by_method} flagged: the set-up, the budget, a check or the units may decide them "
        "(each flag is listed under its method).</p>"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>paperline report</title>"
        f"<style>{_STYLE}</style></head><body><h1>paperline report</h1>"
        f"<p>Latest pipeline run of every method, read from MLflow on {stamp}: {summary}. A verdict holds when every "
        "criterion's 95 % interval lies on its passing side, fails when any lies wholly on the failing side, and is "
        "inconclusive otherwise.</p>"
        f"{top}<nav class='index'>{index}</nav>"
        "<table class='overview'><thead><tr><th>method</th><th>verdict</th><th>decided by</th><th>must-pass</th>"
        "<th>data</th>"
        "<th>run status</th><th>champion</th><th>MLflow run</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
        + "".join(sections)
        + "</body></html>"
    )


def write_report(root: Path, out_dir: Path | None = None, log_to_mlflow: bool = True) -> Path:
    """Write ``outputs/report/index.html`` (+ figures) and log it to MLflow; returns the HTML path."""
    out_dir = out_dir or root / "outputs" / "report"
    staging = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    c = tracking.client(root)
    items = collect(root)
    figures = {s.method: _download_plots(c, s.run_id, staging / "figures" / s.method) for s in items if s.run_id}
    page = render_html(items, figures, staging, mlflow_ui_base(root))
    (staging / "index.html").write_text(page)
    (staging / "status.json").write_text(json.dumps([s.to_dict() for s in items], indent=1))
    shutil.rmtree(out_dir, ignore_errors=True)
    staging.rename(out_dir)
    if log_to_mlflow:
        exp = c.get_experiment_by_name(REPORT_EXPERIMENT)
        exp_id = (
            exp.experiment_id
            if exp
            else c.create_experiment(
                REPORT_EXPERIMENT,
                artifact_location=(root / "mlflow" / "artifacts" / "report").resolve().as_uri()
                if c.tracking_uri.startswith("sqlite:")
                else None,
                tags={"mlflow.experimentKind": "custom_model_development"},
            )
        )
        run = c.create_run(exp_id, tags={"mlflow.runName": f"report-{dt.datetime.now():%Y%m%d-%H%M%S}"})
        c.log_artifacts(run.info.run_id, str(out_dir), "report")
        c.set_terminated(run.info.run_id, status="FINISHED")
    return out_dir / "index.html"
