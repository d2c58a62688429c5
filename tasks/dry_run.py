"""Paper-scale dry runs: the paper's networks and data shapes, two optimiser steps, on any machine.

No machine of the project has ever run ``--scale paper`` (it is meant for a GPU). A dry run builds each
method at ``paper`` scale with ``MethodSpec.dry_run``'s overrides, which cut the data to a few items and
every plain loop to a couple of steps while keeping the network and data shapes, and runs prepare and
train with ``PAPERLINE_DRY_RUN=1``: every Lightning fit takes two optimiser steps and one validation batch,
and every validation grid keeps its first point. It reports each fit's parameter count and first batch's
shapes and dtypes, the time, the peak memory, and a memory estimate for training at full scale, so a user
with a GPU does not meet a shape error an hour in. ``paperline dry-run METHOD|--all [--json FILE]``.
"""

from __future__ import annotations

import contextlib
import os
import resource
import tempfile
import time
from pathlib import Path

from models.base import MethodSpec
from models.common import runtime


@contextlib.contextmanager
def _dry_run_env(root: Path):
    saved = {k: os.environ.get(k) for k in (runtime.DRY_RUN_VAR, "PAPERLINE_ROOT")}
    os.environ[runtime.DRY_RUN_VAR] = "1"
    os.environ.setdefault("PAPERLINE_ROOT", str(root))
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def dry_run(spec: MethodSpec, root: Path | None = None) -> dict:
    """Prepare and train ``spec`` at paper scale with its dry-run overrides; returns what it met."""
    from tasks import steps

    overrides = dict(spec.dry_run)
    cfg = spec.make_config("paper", overrides)
    with contextlib.ExitStack() as stack:
        if root is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"dry-{spec.slug}-")))
        stack.enter_context(_dry_run_env(root))
        runtime.DRY_RUN_LOG.fits.clear()
        started, rss_before = time.perf_counter(), _peak_rss_mb()
        steps.prepare(spec, cfg, root)
        prepared = time.perf_counter()
        steps.train(spec, cfg, root)
        fits = list(runtime.DRY_RUN_LOG.fits)
    largest = max((f["parameters"] for f in fits), default=0)
    return {
        "method": spec.slug,
        "overrides": overrides,
        "prepare_seconds": round(prepared - started, 2),
        "train_seconds": round(time.perf_counter() - prepared, 2),
        "peak_rss_mb": round(max(_peak_rss_mb(), rss_before), 1),
        "fits": len(fits),
        "largest_network_parameters": largest,
        # weights + gradients + Adam's two moments in float32: what the largest network needs before activations
        "largest_network_training_mb": round(16 * largest / 2**20, 1),
        "first_fits": fits[:4],
    }


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def describe(report: dict) -> str:
    lines = [
        f"{report['method']}: paper scale, {report['fits']} fit(s), prepare {report['prepare_seconds']:.1f} s, "
        f"train {report['train_seconds']:.1f} s, peak RSS {report['peak_rss_mb']:.0f} MB; largest network "
        f"{report['largest_network_parameters']:,} parameters (~{report['largest_network_training_mb']:.0f} MB "
        "to train with Adam, before activations)"
    ]
    for fit in report["first_fits"]:
        lines.append(
            f"    {fit['variant']}: {fit['parameters']:,} {fit['dtype']} parameters; first batch {fit['first_batch']}"
        )
    return "\n".join(lines)


__all__ = ["describe", "dry_run"]
