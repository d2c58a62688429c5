"""Per-method wall times of the latest pipeline runs in MLflow (a measurement, not a test).

    python benchmarks/method_times.py            # after `make run`: the README's per-method table

Each row is the parent MLflow run of a method's latest pipeline (open-run to publish, as the flow
ran it), with the train step's own seconds and the claim/must-pass outcome.
"""

from __future__ import annotations

from tasks import env

env.configure()


def main() -> None:
    from models.registry import METHODS
    from tasks import overview, tracking

    root = env.project_root()
    c = tracking.client(root)
    print("| method | scale | wall time through the flow (s) | train step (s) | verdict | must-pass |")
    print("|---|---|---|---|---|---|")
    total = 0.0
    for spec in METHODS.values():
        run = overview.latest_pipeline_run(c, spec)
        if run is None:
            print(f"| `{spec.slug}` | - | never run | - | - | - |")
            continue
        wall = ((run.info.end_time or run.info.start_time) - run.info.start_time) / 1000
        total += wall
        m = run.data.metrics
        holds = run.data.tags.get("paperline.verdict", "-")
        sane = "-" if "claim/sane" not in m else ("pass" if m["claim/sane"] else "FAIL")
        train = m.get("train/seconds")
        print(
            f"| `{spec.slug}` | {run.data.tags.get('paperline.scale', '-')} | {wall:.0f} | "
            f"{'-' if train is None else f'{train:.0f}'} | {holds} | {sane} |"
        )
    print(f"| **all** | | **{total / 60:.1f} min** | | | |")


if __name__ == "__main__":
    main()
