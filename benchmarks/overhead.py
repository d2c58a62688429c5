"""Orchestration overhead and start-up times (a measurement, never a test assertion).

    python benchmarks/overhead.py [--method sleeping_rl] [--scale smoke]

Prints: `paperline --help` start-up, one method's steps called directly vs through the Prefect flow
(with MLflow publish) in a fresh project (first run: the MLflow and Prefect DBs are created and
migrated) and again in the same project (a later run: both DBs exist), and a no-op `dvc repro` here.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def timed(cmd: list[str], **kw) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, **kw)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--method", default="sleeping_rl")
    parser.add_argument("--scale", default="smoke")
    args = parser.parse_args()
    os.environ["PAPERLINE_PROGRESS"] = "0"

    help_s = min(timed([str(BIN / "paperline"), "--help"]) for _ in range(3))

    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PAPERLINE_ROOT=tmp)
        direct = (
            "from tasks import env; env.configure();"
            "from models.registry import get; from tasks import steps; from pathlib import Path;"
            f"s=get('{args.method}'); c=s.make_config('{args.scale}'); r=Path('{tmp}');"
            "steps.prepare(s,c,r); steps.train(s,c,r); steps.evaluate(s,c,r)"
        )
        direct_s = timed([sys.executable, "-c", direct], env=env, cwd=ROOT)
        run = [str(BIN / "paperline"), "run", args.method, "--scale", args.scale]
        first_s = timed(run, env=env, cwd=ROOT)
        later_s = timed(run, env=env, cwd=ROOT)

    env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}")
    noop_s = (
        timed([sys.executable, "-m", "dvc", "repro"], env=env, cwd=ROOT)
        if (ROOT / "dvc.lock").exists()
        else float("nan")
    )

    print("| measurement | seconds |\n|---|---|")
    print(f"| `paperline --help` (best of 3) | {help_s:.2f} |")
    print(f"| {args.method} @ {args.scale}: steps called directly (new process) | {direct_s:.1f} |")
    print(f"| {args.method} @ {args.scale}: first `paperline run` in a fresh project | {first_s:.1f} |")
    print(f"| {args.method} @ {args.scale}: a later `paperline run` (DBs exist) | {later_s:.1f} |")
    print(
        f"| fixed overhead over direct calls: first / later run | {first_s - direct_s:.1f} / {later_s - direct_s:.1f} |"
    )
    print(f"| no-op `dvc repro` (after a full repro) | {noop_s:.1f} |")


if __name__ == "__main__":
    main()
