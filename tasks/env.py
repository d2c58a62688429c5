"""Process environment: project root, telemetry off, state folders inside the project.

Call :func:`configure` before importing prefect, mlflow or dvc: several of them read their
settings at import time.
"""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_MARKERS = ("pyproject.toml", "dvc.yaml")


def project_root() -> Path:
    """``$PAPERLINE_ROOT``, else the nearest folder above the CWD holding the project files,
    else the folder this package was installed from."""
    if os.environ.get("PAPERLINE_ROOT"):
        return Path(os.environ["PAPERLINE_ROOT"]).resolve()
    cwd = Path.cwd().resolve()
    for folder in (cwd, *cwd.parents):
        if all((folder / marker).exists() for marker in PROJECT_MARKERS) and (folder / "models").is_dir():
            return folder
    return Path(__file__).resolve().parents[1]


def state_dir(root: Path | None = None) -> Path:
    return (root or project_root()) / ".paperline"


TELEMETRY_OFF = {
    "DO_NOT_TRACK": "true",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DVC_NO_ANALYTICS": "1",
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "600",
    "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore",
    "GIT_PYTHON_REFRESH": "quiet",
    "TF_CPP_MIN_LOG_LEVEL": "3",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
}

SERVER_HARDENING = {
    # Every Prefect server this project starts (temporary ones included) wants a CSRF token for state
    # changes; Prefect's client and UI fetch one, a foreign web page cannot read it.
    "PREFECT_SERVER_CSRF_PROTECTION_ENABLED": "true",
}

THREAD_POOL_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")

ALLOWED_HOSTS_VAR = "PAPERLINE_PREFECT_ALLOWED_HOSTS"
LOOPBACK_NAMES = ("127.0.0.1", "localhost")


def prefect_server_env(host: str, port: int) -> dict[str, str]:
    """Settings for a Prefect server at ``host:port``: cross-origin calls only from its own UI's origin,
    CSRF tokens, and (read by ``tasks.servers.prefect_app``) the Host names it answers. The user's own
    values win. A non-loopback bind (``--allow-remote``) answers any Host: its names are unknown here."""
    names = LOOPBACK_NAMES if host == "127.0.0.1" else (host,)
    defaults = {
        "PREFECT_SERVER_CORS_ALLOWED_ORIGINS": ",".join(f"http://{name}:{port}" for name in names),
        "PREFECT_SERVER_CSRF_PROTECTION_ENABLED": "true",
        ALLOWED_HOSTS_VAR: ",".join(LOOPBACK_NAMES) if host == "127.0.0.1" else "*",
    }
    return {key: os.environ.get(key, value) for key, value in defaults.items()}


def configure(root: Path | None = None) -> Path:
    """Set telemetry switches and state folders (without overriding the user's own values)."""
    root = root or project_root()
    state = state_dir(root)
    for key, value in {**TELEMETRY_OFF, **SERVER_HARDENING}.items():
        os.environ.setdefault(key, value)
    folders = {
        "PREFECT_HOME": state / "prefect",
        "DVC_SITE_CACHE_DIR": state / "dvc-site",
        "MPLCONFIGDIR": state / "mpl",
        "TORCHINDUCTOR_CACHE_DIR": state / "torchinductor",
    }
    for key, folder in folders.items():
        os.environ.setdefault(key, str(folder))
    os.environ.setdefault("PAPERLINE_ROOT", str(root))
    # OpenMP/BLAS pools read these when torch/numpy load (here and in Dask workers and DVC stages, which
    # inherit them): one thread each unless PAPERLINE_THREADS says more. Two methods at a time with two
    # spinning threads each on a 2-core machine cost 1.5-3x their CPU time (much of it system time).
    threads = os.environ.get("PAPERLINE_THREADS", "1").strip()
    for key in THREAD_POOL_VARS:
        os.environ.setdefault(key, threads if threads.isdigit() and int(threads) > 0 else "1")
    from models.common.triton_mode import use_interpreter_without_gpu

    use_interpreter_without_gpu()  # before anything (Lightning included) imports triton.language
    return root


def make_state_dirs(root: Path | None = None) -> None:
    """Create the state folders (only once work is about to start: errors must write nothing)."""
    for key in ("PREFECT_HOME", "DVC_SITE_CACHE_DIR", "MPLCONFIGDIR"):
        if os.environ.get(key):
            Path(os.environ[key]).mkdir(parents=True, exist_ok=True)


def pid_alive(pid: int) -> bool:
    """Whether a process with this PID exists (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
