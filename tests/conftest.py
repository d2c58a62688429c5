"""Test-wide settings: set before any project or library module is imported."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ["PAPERLINE_PROGRESS"] = "0"
sys.path.insert(0, str(ROOT))
from models.common.triton_mode import use_interpreter_without_gpu  # noqa: E402

use_interpreter_without_gpu()  # before any @triton.jit module (or Lightning) imports triton.language
os.environ.setdefault("PAPERLINE_THREADS", "1")
os.environ["PAPERLINE_CHECKPOINT_SECONDS"] = "0"  # checkpoint every epoch: the crash tests kill within seconds
os.environ.setdefault("OMP_NUM_THREADS", "1")  # torch reads it at import: no oversubscription on 2 cores
os.environ.setdefault("PAPERLINE_ROOT", str(ROOT))
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "600")

from tasks import env  # noqa: E402

env.configure(ROOT)
env.make_state_dirs(ROOT)
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
