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
from tasks import promotion, tracking

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
    holds: bool | None = None
    sane: bool | None = None
    figures: dict[str, float] = field(default_factory=dict)
    failure: str | None = None
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
    runs = c.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"], max_results=50)
    return next((r for r in runs if "mlflow.parentRunId" not in r.data.tags), None)


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
    if "claim/holds" in metrics:
        out.holds = bool(metrics["claim/holds"])
        out.sane = bool(metrics.get("claim/sane", 0.0))
    out.figures = {k.removeprefix("claim/"): v for k, v in sorted(metrics.items())
                   if k.startswith("claim/") and k not in ("claim/holds", "claim/sane")}
    out.failure = tags.get("paperline.failure")
    out.decision = tags.get("paperline.decision_reason")
    out.version = tags.get("paperline.model_version")
    out.champion = promotion.alias_version(c, spec, promotion.CHAMPION)
    out.challenger = promotion.alias_version(c, spec, promotion.CHALLENGER)
    return out


def collect(root: Path, specs: list[MethodSpec] | None = None) -> list[MethodStatus]:
    from models.registry import METHODS

    c = tracking.client(root)
    return [latest(c, spec) for spec in (specs or list(METHODS.values()))]


def _yes_no(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "NO")


def status_table(items: list[MethodStatus]) -> str:
    header = ("method", "last run", "status", "scale", "claim holds", "must-pass", "champion", "challenger")
    body = [(s.method, s.started or "never", s.status or "-", s.scale or "-", _yes_no(s.holds),
             "-" if s.sane is None else ("pass" if s.sane else "FAIL"),
             f"v{s.champion}" if s.champion else "-", f"v{s.challenger}" if s.challenger else "-") for s in items]
    rows = [header, *body]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


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
    local = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="plots", dst_path=str(dest),
                                                tracking_uri=c.tracking_uri)
    return sorted(p for p in Path(local).rglob("*") if p.suffix.lower() in (".png", ".svg", ".jpg"))


_STYLE = """
body{font-family:system-ui,sans-serif;margin:2rem;max-width:1200px;color:#222}
table{border-collapse:collapse;width:100%;font-size:.9rem}th,td{border:1px solid #ccc;padding:.35rem .5rem;
vertical-align:top;text-align:left}th{background:#f3f3f3}.yes{color:#0a6b2b;font-weight:600}
.NO,.FAIL{color:#a11;font-weight:600}figure{display:inline-block;margin:.5rem;max-width:45%}
figure img{max-width:100%;border:1px solid #ddd}figcaption{font-size:.8rem;color:#555}
section{margin-top:2.5rem;border-top:1px solid #ddd}code{font-size:.85rem}
"""


def _cell(value: str, css: str = "") -> str:
    return f'<td class="{css}">{html.escape(value)}</td>' if css else f"<td>{html.escape(value)}</td>"


def render_html(items: list[MethodStatus], figures: dict[str, list[Path]], out_dir: Path, ui_base: str) -> str:
    def run_link(s: MethodStatus) -> str:
        if not s.run_id:
            return "<td>-</td>"
        url = f"{ui_base}/#/experiments/{s.experiment_id}/runs/{s.run_id}"
        return f'<td><a href="{html.escape(url)}">{html.escape(s.run_id[:12])}</a></td>'

    rows = []
    for s in items:
        holds, sane = _yes_no(s.holds), "-" if s.sane is None else ("pass" if s.sane else "FAIL")
        figs = ", ".join(f"{k}={v:.4g}" for k, v in list(s.figures.items())[:6])
        rows.append("<tr>" + "".join([
            f'<td><a href="#{s.method}">{html.escape(s.method)}</a></td>', _cell(s.claim),
            _cell(figs), _cell(holds, holds), _cell(sane, sane), _cell(s.status or "never run"),
            _cell(f"v{s.champion}" if s.champion else "-"), run_link(s)]) + "</tr>")
    sections = []
    for s in items:
        imgs = "".join(
            f'<figure><img src="{html.escape(p.relative_to(out_dir).as_posix())}" alt="{html.escape(p.stem)}">'
            f"<figcaption>{html.escape(p.name)}</figcaption></figure>" for p in figures.get(s.method, []))
        detail = "".join(f"<li><code>{html.escape(k)}</code> = {v:.6g}</li>" for k, v in s.figures.items())
        notes = []
        if s.failure:
            notes.append(f"<p><b>Run failed:</b> {html.escape(s.failure)}</p>")
        if s.decision:
            notes.append(f"<p><b>Promotion:</b> {html.escape(s.decision)}</p>")
        sections.append(
            f'<section id="{s.method}"><h2>{html.escape(s.method)}: {html.escape(s.title)}</h2>'
            f"<p>{html.escape(s.claim)}</p>{''.join(notes)}<ul>{detail}</ul>{imgs or '<p>No figures.</p>'}</section>")
    stamp = dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>paperline report</title>"
        f"<style>{_STYLE}</style></head><body><h1>paperline report</h1>"
        f"<p>Latest pipeline run of every method, read from MLflow on {stamp}.</p>"
        "<table><thead><tr><th>method</th><th>claim</th><th>measured</th><th>claim holds</th><th>must-pass</th>"
        "<th>run status</th><th>champion</th><th>MLflow run</th></tr></thead><tbody>"
        + "".join(rows) + "</tbody></table>" + "".join(sections) + "</body></html>"
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
        exp_id = exp.experiment_id if exp else c.create_experiment(
            REPORT_EXPERIMENT, artifact_location=(root / "mlflow" / "artifacts" / "report").resolve().as_uri()
            if c.tracking_uri.startswith("sqlite:") else None, tags={"mlflow.experimentKind": "custom_model_development"})
        run = c.create_run(exp_id, tags={"mlflow.runName": f"report-{dt.datetime.now():%Y%m%d-%H%M%S}"})
        c.log_artifacts(run.info.run_id, str(out_dir), "report")
        c.set_terminated(run.info.run_id, status="FINISHED")
    return out_dir / "index.html"
