"""One OpenMP/BLAS thread per process unless PAPERLINE_THREADS says more, in every process that runs a step."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import os, sys
from tasks import env
env.configure()
import torch
torch.set_num_threads(2)  # what an earlier import (or torch's own default) may have left
from models.registry import get
from tasks import steps
spec = get("sleeping_rl")
steps.prepare(spec, spec.make_config("smoke"), __import__("pathlib").Path(sys.argv[1]))
print(os.environ["OMP_NUM_THREADS"], os.environ["OPENBLAS_NUM_THREADS"], torch.get_num_threads())
"""


def _probe(tmp_path, **extra):
    clean = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS") and k != "PAPERLINE_THREADS"}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path)],
        cwd=ROOT,
        env={**clean, "PAPERLINE_ROOT": str(tmp_path), **extra},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.split()


def test_a_step_runs_on_one_thread_by_default(tmp_path):
    assert _probe(tmp_path) == ["1", "1", "1"]


def test_paperline_threads_sets_every_pool(tmp_path):
    assert _probe(tmp_path, PAPERLINE_THREADS="3") == ["3", "3", "3"]
