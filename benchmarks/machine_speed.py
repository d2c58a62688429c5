"""How fast this machine is for the methods' kinds of work, and whether that predicts the methods.

    python benchmarks/machine_speed.py [--repeats 5]            # the reference workload (tasks/speed.py)
    python benchmarks/machine_speed.py --compare                 # + predicted vs measured per method, from the
                                                                 #   latest make run's MLflow runs in this project

The project's machines are shared hosts whose speed drifts (the same `make run` took 11-19 min on different
days with identical results). The reference workload times, on one core, the kinds of work the methods spend
their time in (GEMMs, convolutions, small-batch Adam, a Python loop); each method's recorded default cost
(``MethodSpec.default_cpu_seconds``, with its ``work_mix``) is scaled by this machine's ratio to the recording
host (``flows.method_flows.RECORDED_REFERENCE``). ``--compare`` puts that prediction beside the CPU time of each
method's latest run (MLflow ``train/seconds`` and the run's wall time) and prints the error.
"""

from __future__ import annotations

import argparse
import statistics

from tasks import env

env.configure()


def main() -> None:
    from tasks import speed

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--compare", action="store_true", help="predicted vs measured per method (MLflow)")
    args = parser.parse_args()
    runs = [speed.reference(rounds=1) for _ in range(args.repeats)]
    from flows.method_flows import RECORDED_REFERENCE

    print("| kind of work (one core) | best s | median s | worst s | recording host s |\n|---|---|---|---|---|")
    here = {}
    for kind in speed.KINDS:
        times = [r[kind] for r in runs]
        here[kind] = min(times)
        print(
            f"| {kind} | {min(times):.3f} | {statistics.median(times):.3f} | {max(times):.3f} | "
            f"{RECORDED_REFERENCE[kind]:.3f} |"
        )
    if args.compare:
        compare(here)


def compare(here: dict[str, float]) -> None:
    from flows.method_flows import RECORDED_REFERENCE, method_costs
    from models.registry import METHODS
    from tasks import overview, speed, tracking

    c = tracking.client(env.project_root())
    costs = method_costs()
    print("\n| method | predicted CPU s | latest run: train + evaluate s | error |\n|---|---|---|---|")
    errors = []
    for slug, spec in METHODS.items():
        predicted = speed.scaled_seconds(costs[slug], RECORDED_REFERENCE, here)
        run = overview.latest_pipeline_run(c, spec)
        measured = run.data.metrics.get("train/seconds") if run is not None else None
        if run is not None and run.data.metrics.get("eval/seconds") is not None:
            measured = (measured or 0.0) + run.data.metrics["eval/seconds"]
        if not measured:
            print(f"| `{slug}` | {predicted:.0f} | - | - |")
            continue
        error = predicted / measured - 1
        errors.append(abs(error))
        print(f"| `{slug}` | {predicted:.0f} | {measured:.0f} | {100 * error:+.0f} % |")
    if errors:
        print(f"\nwithin 25 %: {sum(e <= 0.25 for e in errors)} of {len(errors)} methods")


if __name__ == "__main__":
    main()
