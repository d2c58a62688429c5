"""Sequential vs two-at-a-time ``paperline run --all`` (a measurement, never a test assertion).

    python benchmarks/parallel_ratio.py [--scale smoke|default] [--workers 2]

Runs every method both ways, each in a fresh temporary project (own data/, outputs/, MLflow DB),
through the real CLI, and prints both wall times, their ratio and whether every claim.json agrees.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run(scale: str, runner: str, workers: int) -> tuple[float, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PAPERLINE_ROOT=tmp, PAPERLINE_PROGRESS="0")
        cmd = [str(BIN / "paperline"), "run", "--all", "--scale", scale, "--runner", runner, "--workers", str(workers)]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
        seconds = time.perf_counter() - start
        if proc.returncode != 0:  # the claim table and the failing methods are at the end of the output
            print(
                f"{runner} run exited {proc.returncode}:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}", file=sys.stderr
            )
        claims = {p.parent.name: json.loads(p.read_text()) for p in Path(tmp, "outputs").glob("*/claim.json")}
    return seconds, claims


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", default="smoke")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    sequential, a = run(args.scale, "sequential", 1)
    parallel, b = run(args.scale, "dask", args.workers)
    print(f"{len(a)} methods at {args.scale} scale")
    print(
        f"sequential: {sequential:.1f} s; dask x{args.workers}: {parallel:.1f} s; "
        f"sequential/parallel = {sequential / parallel:.2f}"
    )
    print("claims identical:", a == b)


if __name__ == "__main__":
    main()
