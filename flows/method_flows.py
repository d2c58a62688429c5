"""The Prefect flows: ``method_flow``, ``all_methods`` and ``nightly_retrain``.

Parameters are typed (a ``Literal`` of method names, the ``Scale`` enum), so the Prefect UI
shows a form with dropdowns. ``all_methods`` runs the methods one after another (each as a
sub-flow) or, with ``runner="dask"``, in parallel on a Dask cluster through ``prefect-dask``.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Annotated, Literal

from pydantic import Field

from tasks import env

env.configure()

from prefect import flow, get_run_logger, task  # noqa: E402
from prefect.artifacts import create_markdown_artifact  # noqa: E402
from prefect.runtime import flow_run  # noqa: E402

from models.base import Scale  # noqa: E402
from models.common import runtime  # noqa: E402
from models.registry import get, names  # noqa: E402
from tasks import prefect_tasks as t  # noqa: E402
from tasks import report, steps, tracking  # noqa: E402
from tasks.config import build_config, check_override_targets, overrides_for, parse_overrides  # noqa: E402

MethodName = Literal[tuple(names())]  # type: ignore[valid-type]


def _artifact_key(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text.lower())


@contextlib.contextmanager
def _step(slug: str, name: str, started: float):
    """One progress line per step: which method, which step, elapsed (console and Prefect UI)."""
    logger = get_run_logger()
    logger.info("%s: %s ...", slug, name)
    t0 = time.perf_counter()
    yield
    logger.info(
        "%s: %s done in %.1f s (%.1f s since the method started)",
        slug,
        name,
        time.perf_counter() - t0,
        time.perf_counter() - started,
    )


@flow(name="method", log_prints=True)
def method_flow(method: MethodName, scale: Scale = Scale.default, overrides: list[str] | None = None) -> dict:
    """prepare -> train -> evaluate -> publish for one method, tracked in one MLflow run."""
    spec = get(method)
    cfg = build_config(spec, scale, parse_overrides(overrides or []))
    root = env.project_root()
    env.make_state_dirs(root)
    run_id = t.open_run(spec.slug, cfg, root, str(flow_run.id or ""))
    started = time.perf_counter()
    try:
        with steps.method_lock(spec, root):
            runtime.raise_if_stop_requested()
            with _step(spec.slug, "prepare", started):
                t.prepare(spec.slug, cfg, root)
                t.version_dataset(spec.slug, cfg, root)
            runtime.raise_if_stop_requested()
            with _step(spec.slug, "train", started):
                t.train(spec.slug, cfg, root)
            runtime.raise_if_stop_requested()
            with _step(spec.slug, "evaluate", started):
                t.evaluate(spec.slug, cfg, root)
            runtime.raise_if_stop_requested()
            with _step(spec.slug, "publish", started):
                result = t.publish(spec.slug, cfg, root, run_id)
        result = {**result, "seconds": round(time.perf_counter() - started, 1)}
    except BaseException as exc:
        # A stop the supervisor asked for says so, whatever exception it surfaced as inside the libraries.
        stop = runtime.stop_reason()
        tracking.fail_run(root, run_id, f"StopRequested: {stop}" if stop else f"{type(exc).__name__}: {exc}")
        raise
    create_markdown_artifact(
        key=_artifact_key(f"claim-{spec.slug}"),
        markdown=f"## {spec.title}\n\n" + report.markdown_table([result], {spec.slug: result["claim"]}),
        description=f"claim table for {spec.slug}",
    )
    return result


def _failure(slug: str, exc: BaseException | None, message: str | None = None) -> dict:
    text = message or (f"{type(exc).__name__}: {exc}" if exc else "failed")
    return {"method": slug, "error": text, "run_id": None}


def finished_line(result: dict, done: int, total: int, elapsed: float) -> str:
    """``[3/19] sdp: FAILS, decided by budget x2, 184 s; 16 remain, 9 min 40 s elapsed``."""
    slug = result["method"]
    if "error" in result:
        outcome = f"ERROR ({result['error'][:120]})"
    else:
        verdict = report.VERDICT_WORDS.get(result["verdict"], result["verdict"])
        checks = "" if result["sane"] else ", must-pass FAILED"
        outcome = f"{verdict}{checks}, decided by {report.decided_by_short(result.get('flags', []))}"
    seconds = f", {result['seconds']:.0f} s" if "seconds" in result else ""
    return (
        f"[{done}/{total}] {slug}: {outcome}{seconds}; {total - done} remain, {int(elapsed // 60)} min "
        f"{int(elapsed % 60):02d} s elapsed"
    )


def _run_many(methods: list[str], scale: Scale, overrides: list[str] | None) -> list[dict]:
    logger = get_run_logger()
    results, started = [], time.perf_counter()
    for i, slug in enumerate(methods, 1):
        logger.info(
            "[%d/%d] %s (%s scale), %.0f s elapsed", i, len(methods), slug, scale.value, time.perf_counter() - started
        )
        state = method_flow(slug, scale, overrides_for(slug, overrides), return_state=True)
        if state.is_completed():
            results.append(state.result())
        else:
            try:
                state.result()
                results.append(_failure(slug, None, state.message))
            except Exception as exc:  # the failure is reported in the table, the others go on
                results.append(_failure(slug, exc))
        logger.info(finished_line(results[-1], i, len(methods), time.perf_counter() - started))
    return results


@task(name="method", task_run_name="method-{slug}")
def _method_task(slug: str, scale: Scale, overrides: list[str] | None) -> dict:
    """One method's whole pipeline as a task, so a distributed task runner can place it."""
    return method_flow.fn(slug, scale, overrides)


# Default-scale times of each method: the parallel runner starts the longest first, so two workers do not end
# on one long method alone.
MEASURED_DEFAULT_SECONDS = {  # wall seconds of each method in the clean-clone `make run` (two at a time), 2026-12-02
    "sdp": 151,
    "otter": 133,
    "hpde_gnn": 94,
    "pag_cert": 88,
    "sta": 78,
    "ibmd": 75,
    "self_ref": 74,
    "ars": 68,
    "bnn_linf": 65,
    "unhippo": 64,
    "sdcib": 64,
    "score_fusion": 61,
    "zo_natural": 55,
    "ppd_snr": 49,
    "fair_icp": 49,
    "sbg": 40,
    "win_rate": 28,
    "kernel_sgd": 23,
    "sleeping_rl": 21,
}


# tasks.speed.reference() on the host where the methods' default_cpu_seconds were measured.
RECORDED_REFERENCE = {"gemm": 0.150, "conv": 0.065, "adam": 0.18, "python": 0.047}


def method_costs() -> dict:
    """Each method's recorded default cost (``MethodSpec.default_cpu_seconds``; the measured wall time of a
    make run where none is recorded yet) and its mix of kinds of work."""
    from models.registry import METHODS
    from tasks.speed import MethodCost

    return {
        slug: MethodCost(spec.default_cpu_seconds or MEASURED_DEFAULT_SECONDS.get(slug, 0.0), dict(spec.work_mix))
        for slug, spec in METHODS.items()
    }


def longest_first(methods: list[str]) -> list[str]:
    """``methods`` ordered by their recorded default cost, longest first (unknown ones last, in order)."""
    costs = method_costs()
    return sorted(methods, key=lambda slug: -(costs[slug].seconds if slug in costs else 0.0))


def predicted_wall_time(methods: list[str], workers: int) -> str:
    """One line: what running ``methods`` at default on ``workers`` workers should take on this machine."""
    from tasks import speed

    here = speed.reference(rounds=1)
    p = speed.predict(method_costs(), RECORDED_REFERENCE, here, methods, workers)
    longest = max(p.per_method, key=p.per_method.get)
    return (
        f"predicted: ~{speed.minutes(p.wall_seconds)} for {len(methods)} methods on {workers} worker(s) "
        f"(this machine's reference workload takes {p.speed_ratio:.2f}x the recording host's; longest "
        f"{longest} ~{p.per_method[longest]:.0f} s)"
    )


def _run_parallel(methods: list[str], scale: Scale, overrides: list[str] | None) -> list[dict]:
    from prefect.futures import as_completed

    logger, started = get_run_logger(), time.perf_counter()
    futures = {slug: _method_task.submit(slug, scale, overrides) for slug in longest_first(methods)}
    slug_of = {id(f): slug for slug, f in futures.items()}
    by_slug: dict[str, dict] = {}
    for done, future in enumerate(as_completed(list(futures.values())), 1):
        slug = slug_of[id(future)]
        try:
            by_slug[slug] = future.result()
        except Exception as exc:
            by_slug[slug] = _failure(slug, exc)
        logger.info(finished_line(by_slug[slug], done, len(methods), time.perf_counter() - started))
    return [by_slug[slug] for slug in methods]  # the table keeps the caller's order


Runner = Literal["sequential", "dask"]
# Bounds a served deployment's form and API enforce too (its parameter schema carries them).
DaskWorkers = Annotated[int, Field(ge=1, le=max(4, 4 * (os.cpu_count() or 1)))]


def dask_runner(address: str | None = None, workers: int = 2):
    """A ``DaskTaskRunner``: a scheduler at ``address`` (a real cluster), else a LocalCluster of
    ``workers`` single-threaded processes."""
    from prefect_dask import DaskTaskRunner

    if address:
        return DaskTaskRunner(address=address)
    if not 1 <= workers <= max(4, 4 * (os.cpu_count() or 1)):
        raise ValueError(f"dask_workers={workers}: expected 1 to {max(4, 4 * (os.cpu_count() or 1))} local workers")
    import logging

    for name in ("distributed", "distributed.http.proxy"):  # cluster start-up chatter
        logging.getLogger(name).setLevel(logging.WARNING)
    from prefect.settings import get_current_settings

    # Worker processes report to this flow's Prefect API when there is one (else each starts a
    # temporary server on the same database).
    api = get_current_settings().api.url
    # Loopback only, the dashboard included (a LocalCluster's dashboard binds every address otherwise).
    return DaskTaskRunner(
        cluster_kwargs={
            "n_workers": workers,
            "threads_per_worker": 1,
            "processes": True,
            "host": "127.0.0.1",
            "dashboard_address": "127.0.0.1:0",
            "env": {"PREFECT_API_URL": str(api)} if api else {},
        }
    )


@contextlib.contextmanager
def dask_worker_malloc_defaults():
    """Local Dask workers get glibc's own malloc settings, as a method run in this process does.

    Dask's nanny sets ``MALLOC_TRIM_THRESHOLD_=65536`` for its workers; any malloc tunable turns off
    glibc's adaptive mmap threshold, so every tensor over 128 KB is mmap'd, page-faulted and unmapped
    again: 40-50 s of system time in a minute-long method (strace: ~500 mmap/munmap pairs a second).
    """
    import dask
    import distributed  # noqa: F401 (registers the distributed.* config defaults)

    with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
        yield


@flow(name="all-methods-parallel", log_prints=True)
def _all_methods_parallel(methods: list[str], scale: Scale) -> list[dict]:
    return _run_parallel(methods, scale, None)


def _publish_table(results: list[dict], key: str) -> None:
    claims = {r["method"]: r["claim"] for r in results if "claim" in r}
    create_markdown_artifact(key=key, markdown=report.markdown_table(results, claims), description="claim table")
    get_run_logger().info("claim table (artifact %r):\n%s", key, report.text_table(results))


def _publish_report() -> None:
    """The HTML report of the latest runs, logged to MLflow and linked from a Prefect artifact."""
    from prefect.artifacts import create_link_artifact

    from tasks import overview

    logger = get_run_logger()
    try:
        path = overview.write_report(env.project_root())
    except Exception as exc:  # a report problem must not fail the runs it describes
        logger.warning("report not written: %s: %s", type(exc).__name__, exc)
        return
    create_link_artifact(
        key="report",
        link=path.resolve().as_uri(),
        link_text="paperline report (index.html)",
        description="claim table, figures and MLflow links of the latest runs",
    )
    logger.info("report: %s", path)


@flow(name="all-methods", log_prints=True)
def all_methods(
    methods: list[MethodName] | None = None,
    scale: Scale = Scale.default,
    runner: Runner = "sequential",
    dask_address: str | None = None,
    dask_workers: DaskWorkers = 2,
) -> list[dict]:
    """Every (or the chosen) registered method; a failure does not stop the rest.

    ``runner="dask"`` runs methods in parallel on a Dask cluster (``dask_address``, or a local one
    with ``dask_workers`` processes); the default runs them one after another.
    """
    chosen = list(methods or names())
    tracking.client(env.project_root())  # a fresh MLflow DB is migrated here once, before parallel workers open it
    if runner == "dask":
        parallel = _all_methods_parallel.with_options(task_runner=dask_runner(dask_address, dask_workers))
        with dask_worker_malloc_defaults():
            results = parallel(chosen, scale)
    else:
        results = _run_many(chosen, scale, None)
    _publish_table(results, "claim-table")
    _publish_report()
    return results


@flow(name="nightly-retrain", log_prints=True)
def nightly_retrain(
    methods: list[MethodName] | None = None, scale: Scale = Scale.default, overrides: list[str] | None = None
) -> list[dict]:
    """Retrain, register a challenger per method, and move champions that earned it.

    ``overrides`` apply to every method (``key=value``) or to one (``slug:key=value``).
    """
    chosen = list(methods or names())
    check_override_targets(overrides, chosen)
    results = _run_many(chosen, scale, overrides)
    _publish_table(results, "nightly-decisions")
    return results
