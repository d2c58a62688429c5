"""CPU seconds per paired unit at default scale, before and after, in one run (a measurement, not a test).

    python benchmarks/units_per_second.py [--before REV] [--methods hpde_gnn unhippo ...] [--scale default]

A verdict's strength is its paired units (seeds, splits, pre-trainings); what a method costs per unit says
how much evidence a CPU-second buys. For each method this runs prepare -> train -> evaluate once with the
code of ``--before`` (a git worktree, default the landed head before the batching work, 2e1fb90) and once
with the checkout's own code, each single-threaded in a scratch project, and prints the CPU seconds (user +
system of the process), the paired units of its claim (the largest ``n_units`` among its criteria) and the
seconds per unit. Where the two runs measure different claims (the defaults changed), the per-unit figure is
the comparable one. Runs one method at a time; leave the machine otherwise idle.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BATCHED = ("hpde_gnn", "unhippo", "sta", "ibmd", "sbg", "zo_natural", "self_ref", "otter", "sdp")

RUN = r"""
import json, os, resource, sys
from pathlib import Path
os.environ["PAPERLINE_THREADS"] = "1"; os.environ["PAPERLINE_PROGRESS"] = "0"
from tasks import env
env.configure()
from models.registry import METHODS
from tasks import steps
slug, scale, root = sys.argv[1], sys.argv[2], Path(sys.argv[3])
spec = METHODS[slug]; cfg = spec.make_config(scale)
steps.prepare(spec, cfg, root); steps.train(spec, cfg, root); steps.evaluate(spec, cfg, root)
use = resource.getrusage(resource.RUSAGE_SELF)
claim = json.loads((root / "outputs" / slug / "claim.json").read_text())
units = max([int(c.get("n_units", 1)) for c in claim["criteria"]] or [1])
print("RESULT", json.dumps({"cpu": use.ru_utime + use.ru_stime, "units": units, "verdict": claim["verdict"]}))
"""


def measure(code_root: Path, slug: str, scale: str) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"ups-{slug}-") as project:
        env = {**os.environ, "PAPERLINE_ROOT": project, "PYTHONPATH": str(code_root)}
        out = subprocess.run(
            [sys.executable, "-c", RUN, slug, scale, project], cwd=code_root, env=env, capture_output=True, text=True
        )
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line.removeprefix("RESULT "))
    return {"error": (out.stderr or out.stdout).strip().splitlines()[-1:] or ["failed"]}


def worktree(rev: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix="ups-before-")) / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", str(path), rev], cwd=ROOT, check=True, capture_output=True)
    raw = ROOT / "data" / "raw"
    if raw.is_dir():  # the fetched benchmark files (wheels, .deb) are not in git
        for item in raw.iterdir():
            target = path / "data" / "raw" / item.name
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(item)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="2e1fb90", help="the git revision to compare against")
    parser.add_argument("--methods", nargs="*", default=list(BATCHED))
    parser.add_argument("--scale", default="default")
    args = parser.parse_args()
    before = worktree(args.before)
    print(
        f"| method | before ({args.before}): CPU s / units / s per unit | now: CPU s / units / s per unit | per-unit speed-up |"
    )
    print("|---|---|---|---|")
    try:
        for slug in args.methods:
            old, new = measure(before, slug, args.scale), measure(ROOT, slug, args.scale)
            cells = []
            for r in (old, new):
                if "error" in r:
                    cells.append(f"error: {r['error'][0][:60]}")
                else:
                    cells.append(f"{r['cpu']:.0f} / {r['units']} / {r['cpu'] / r['units']:.1f}")
            ratio = (
                f"{(old['cpu'] / old['units']) / (new['cpu'] / new['units']):.2f}x"
                if "error" not in old and "error" not in new
                else "-"
            )
            print(f"| `{slug}` | {cells[0]} | {cells[1]} | {ratio} |", flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, capture_output=True)


if __name__ == "__main__":
    main()
