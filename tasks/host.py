"""The host a run ran on: CPU, instruction set, library versions, BLAS/oneDNN backend, threads.

Results at the same commit and seeds differ across hosts at float rounding (kernels pick another
summation order under another instruction set or BLAS); a verdict's state should not. Every pipeline
run records this fingerprint as ``paperline.host.*`` tags, and the report shows it beside the verdict.
"""

from __future__ import annotations

import functools
import os
import platform
import re


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _blas(config: str) -> str:
    """torch's BLAS and oneDNN (from ``torch.__config__.show()``) and numpy's BLAS."""
    import numpy as np

    parts = []
    match = re.search(r"BLAS_INFO=(\w+)", config)
    if match:
        parts.append(f"torch {match.group(1)}")
    match = re.search(r"(?:oneDNN|MKL-DNN)[^\n]*?v([\d.]+)", config)
    if match:
        parts.append(f"oneDNN {match.group(1)}")
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        parts.append(f"numpy {blas.get('name', '?')} {blas.get('version', '')}".rstrip())
    except Exception:  # the layout of numpy's build report is not a stable API
        pass
    return ", ".join(parts) or "unknown"


@functools.cache
def fingerprint() -> dict[str, str]:
    """``{cpu, isa, torch, numpy, blas, threads, python, isa_limits}`` of this process (cached)."""
    import numpy as np
    import torch

    limits = {
        k: os.environ[k]
        for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")
        if os.environ.get(k)
    }
    return {
        "cpu": f"{_cpu_model()} ({os.cpu_count()} cores)",
        "isa": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "blas": _blas(torch.__config__.show()),
        "threads": f"torch {torch.get_num_threads()}, interop {torch.get_num_interop_threads()}, "
        f"OMP {os.environ.get('OMP_NUM_THREADS', '-')}",
        "python": platform.python_version(),
        "isa_limits": ", ".join(f"{k}={v}" for k, v in limits.items()) or "none",
    }


def tags(prefix: str = "paperline.host.") -> dict[str, str]:
    return {f"{prefix}{k}": v for k, v in fingerprint().items()}


def describe(values: dict[str, str] | None = None) -> str:
    """One line: ``AMD EPYC ... (2 cores), AVX2, torch 2.13.0+cpu, numpy 2.x, blas ..., threads ...``."""
    v = values or fingerprint()
    keys = ("cpu", "isa", "torch", "numpy", "blas", "threads")
    text = "; ".join(f"{k} {v[k]}" if k not in ("cpu", "isa") else v[k] for k in keys if v.get(k))
    if v.get("isa_limits") and v["isa_limits"] != "none":
        text += f"; ISA limited by {v['isa_limits']}"
    return text


__all__ = ["describe", "fingerprint", "tags"]
