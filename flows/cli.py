"""``paperline``: list, run, stage, params, status, report, serve, up, down.

Only argparse, pydantic and the registry are imported at start-up; Prefect, MLflow and
torch load when a command needs them, so ``paperline --help`` stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import os
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path

from tasks import env

EXIT_USAGE = 2


def _fail(message: str, code: int = EXIT_USAGE) -> int:
    print(f"paperline: error: {message}", file=sys.stderr)
    return code


def cmd_list(args: argparse.Namespace) -> int:
    from models.registry import METHODS

    if args.markdown:
        print("| method | paper | claim checked |\n|---|---|---|")
        for spec in METHODS.values():
            cells = [f"`{spec.slug}`", f"{spec.title} ({spec.paper})", spec.claim]
            print("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        return 0
    for spec in METHODS.values():
        print(f"{spec.slug}\n  paper: {spec.title} ({spec.paper})")
        print(textwrap.fill(spec.claim, 96, initial_indent="  claim: ", subsequent_indent="         "))
    return 0


def _validate_run(args: argparse.Namespace):
    """Every check that can fail on bad input, before anything is written."""
    from models.registry import get, names
    from tasks.config import build_config, config_from_params, parse_overrides

    if args.all and args.methods:
        raise ValueError("give method names or --all, not both")
    if not args.all and not args.methods:
        raise ValueError(f"name a method or use --all; methods: {', '.join(names())}")
    methods = names() if args.all else list(dict.fromkeys(args.methods))
    specs = [get(m) for m in methods]
    overrides = parse_overrides(args.set or [])
    if len(specs) > 1 and overrides:
        raise ValueError("--set applies to one method; use `paperline run METHOD --set ...`")
    if args.runner != "sequential" and len(specs) < 2:
        raise ValueError("--runner dask runs several methods in parallel; name two or more, or use --all")
    if args.workers < 1:
        raise ValueError(f"--workers {args.workers}: expected at least 1")
    from models.common import runtime

    runtime.check_environment()  # a bad PAPERLINE_* variable would otherwise fail inside an opened run
    root = env.project_root()
    for spec in specs:
        build_config(spec, args.scale, overrides)
        if (root / "params.yaml").exists():
            # A broken params.yaml would break `dvc repro` and dataset versioning: stop now.
            config_from_params(root, spec.slug)
    return [s.slug for s in specs]


def cmd_run(args: argparse.Namespace) -> int:
    from models.registry import UnknownMethodError
    from tasks.config import ConfigError

    try:
        methods = _validate_run(args)
    except (ConfigError, UnknownMethodError, ValueError) as exc:
        return _fail(str(exc))
    root = env.project_root()
    env.make_state_dirs(root)  # Prefect's temporary server keeps its DB under PREFECT_HOME
    from tasks import servers

    up = servers.use_running_servers(root)
    if up:
        print("using servers: " + ", ".join(f"{n} {i['url']}" for n, i in up.items()))
    started = time.perf_counter()
    # One temporary Prefect server in its own session, shared with local Dask workers, unless one runs
    # (a remote Dask cluster cannot reach this machine's loopback: Prefect's own per-process default).
    # It starts first, so its start-up runs alongside the imports and the MLflow DB check below.
    temporary = None
    if not args.dask_address and not os.environ.get("PREFECT_API_URL"):
        temporary = servers.TemporaryPrefect(root)
    try:
        from flows.method_flows import all_methods, method_flow
        from models.base import Scale
        from tasks import report, tracking

        tracking.client(root)  # opens (on a fresh project: migrates) the MLflow DB while the server starts
    except BaseException:
        if temporary is not None:
            temporary.stop()
        raise
    if len(methods) > 1 and args.scale == "default":
        from flows.method_flows import predicted_wall_time

        print(predicted_wall_time(methods, args.workers if args.runner == "dask" else 1), flush=True)
    shared = servers.shared_temporary_prefect(temporary) if temporary is not None else contextlib.nullcontext()
    try:
        with _terminate_as_exit(), shared:
            if len(methods) > 1:
                results = all_methods(
                    methods,
                    Scale(args.scale),
                    runner=args.runner,
                    dask_address=args.dask_address,
                    dask_workers=args.workers,
                )
            else:
                try:
                    results = [method_flow(methods[0], Scale(args.scale), args.set or [])]
                except Exception as exc:
                    results = [{"method": methods[0], "error": f"{type(exc).__name__}: {exc}", "run_id": None}]
    except (KeyboardInterrupt, SystemExit):
        _drop_staging(root, methods)
        raise
    print("\n" + report.text_table(results))
    print(f"\n{len(results)} method(s) in {time.perf_counter() - started:.1f} s; MLflow: {_mlflow_hint(root)}")
    crashed = [r["method"] for r in results if "error" in r]
    insane = [r["method"] for r in results if "error" not in r and not r["sane"]]
    if insane:
        # Reported, not fatal: the MLflow run is FAILED and nothing was promoted for these.
        print(f"must-pass checks failed (run marked FAILED, not promoted): {', '.join(insane)}", file=sys.stderr)
    if crashed:
        print(f"pipeline errors: {', '.join(crashed)}", file=sys.stderr)
        return 1
    return 0


class Terminated(SystemExit):
    """SIGTERM as an exception: the flow records its failure and the temporary server stops."""


EXIT_GRACE_SECONDS = 30.0  # cleanup after Ctrl-C/SIGTERM takes a few seconds; this is the hard stop
_watchdog: threading.Timer | None = None


def _arm_exit_watchdog(code: int) -> None:
    """Give the cleanup after a signal ``EXIT_GRACE_SECONDS``. Whatever still holds the process then (a
    library's non-daemon thread, a lock the signal landed inside) cannot keep it alive: every thread's
    stack goes to stderr, so the cause can be read, and the process exits with the signal's code. The
    temporary Prefect server watches its parent and stops by itself."""
    global _watchdog
    if _watchdog is not None:
        return

    def expire() -> None:
        print(
            f"paperline: not exited {EXIT_GRACE_SECONDS:.0f} s after the signal; every thread's stack follows, "
            f"then exit {code}",
            file=sys.stderr,
            flush=True,
        )
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        os._exit(code)

    _watchdog = threading.Timer(EXIT_GRACE_SECONDS, expire)
    _watchdog.daemon = True
    _watchdog.start()


@contextlib.contextmanager
def _terminate_as_exit():
    """While a run is in progress: SIGTERM becomes ``Terminated`` (Python's default ends the process at
    once, leaving the temporary Prefect server running and the MLflow run open), Ctrl-C stays
    ``KeyboardInterrupt``; both arm the exit watchdog."""

    def on_term(signum, frame):
        _arm_exit_watchdog(128 + signum)
        raise Terminated(128 + signum)

    def on_interrupt(signum, frame):
        _arm_exit_watchdog(130)
        raise KeyboardInterrupt

    try:
        previous = {sig: signal.signal(sig, h) for sig, h in ((signal.SIGTERM, on_term), (signal.SIGINT, on_interrupt))}
    except ValueError:  # not the main thread: leave signals to whoever owns them
        yield
        return
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _drop_staging(root: Path, methods: list[str]) -> None:
    """Remove the half-written ``*.partial`` folders an interrupted run left (unless another run of
    the method holds its lock and may be writing them right now)."""
    import shutil

    from filelock import FileLock, Timeout

    from models.registry import get
    from tasks.steps import Layout, lock_path

    for slug in methods:
        layout = Layout(root, get(slug))
        lock = FileLock(str(lock_path(get(slug), root)))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            continue
        try:
            for staging in (
                layout.data_dir.with_name(layout.data_dir.name + ".partial"),
                layout.out_dir / "model.partial",
            ):
                shutil.rmtree(staging, ignore_errors=True)
        finally:
            lock.release()


def _mlflow_hint(root: Path) -> str:
    from tasks import tracking

    return tracking.tracking_uri(root)


def cmd_stage(args: argparse.Namespace) -> int:
    """What a DVC stage runs: one step of one method with params.yaml's config."""
    from models.base import DatasetError
    from models.common import runtime
    from models.registry import UnknownMethodError, get
    from tasks.config import ConfigError, config_from_params

    root = env.project_root()
    try:
        spec = get(args.method)
        cfg = config_from_params(root, spec.slug)
        runtime.check_environment()
    except (ConfigError, UnknownMethodError, ValueError) as exc:
        return _fail(str(exc))
    env.make_state_dirs(root)
    from tasks import steps

    started = time.perf_counter()
    try:
        with steps.method_lock(spec, root):
            _run_stage(args.step, spec, cfg, root)
    except (DatasetError, FileNotFoundError) as exc:
        return _fail(str(exc), 1)
    print(f"{spec.slug}: {args.step} took {time.perf_counter() - started:.1f} s")
    return 0


def _run_stage(step: str, spec, cfg, root: Path) -> None:
    from tasks import steps

    if step == "prepare":
        ref = steps.prepare(spec, cfg, root)
        print(f"{spec.slug}: dataset {ref.name} ({len(ref.files)} files, sha256 {ref.sha256[:12]})")
    elif step == "train":
        art = steps.train(spec, cfg, root)
        print(f"{spec.slug}: trained -> {art.model_dir}")
    else:
        from tasks.report import criterion_line

        _, claim = steps.evaluate(spec, cfg, root)
        print(f"{spec.slug}: claim {claim.verdict}; must-pass={claim.sanity}")
        for criterion in claim.criteria:
            print(f"  {criterion_line(criterion.to_dict())}")


def cmd_params(args: argparse.Namespace) -> int:
    from models.registry import names
    from tasks.config import ConfigError, config_from_params, render_params
    from tasks.dvc_pipeline import render_dvc_yaml

    root = env.project_root()
    if args.write:
        (root / "params.yaml").write_text(render_params())
        (root / "dvc.yaml").write_text(render_dvc_yaml())
        print("wrote params.yaml and dvc.yaml")
        return 0
    try:
        for slug in names():
            config_from_params(root, slug)
    except ConfigError as exc:
        return _fail(str(exc))
    print("params.yaml is valid for: " + ", ".join(names()))
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    from tasks import servers

    root = env.project_root()
    if args.host != servers.LOOPBACK and not args.allow_remote:
        return _fail(f"--host {args.host} exposes the servers beyond this machine; add --allow-remote to confirm")
    try:
        servers.check_ports(args.prefect_port, args.mlflow_port)
    except ValueError as exc:
        return _fail(str(exc))
    try:
        info = servers.up(root, args.host, args.prefect_port, args.mlflow_port)
    except (RuntimeError, TimeoutError) as exc:
        return _fail(str(exc), 1)
    for name, item in info.items():
        print(f"{name}: {item['url']} (pid {item['pid']}, log {item['log']})")
    print("`paperline run ...` now logs to these servers; stop them with `paperline down`.")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    from tasks import servers

    stopped = servers.down(env.project_root())
    print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from tasks import servers

    root = env.project_root()
    env.make_state_dirs(root)
    servers.use_running_servers(root)
    from flows.serve import serve

    serve()
    return 0


def _skip_dead_servers(root: Path) -> None:
    """Read the local store when the recorded MLflow server is stale or does not answer (its records
    are the same SQLite file), and bound every MLflow call: status never waits on a dead server."""
    from tasks import servers, tracking

    for name, state in servers.check(root).items():
        if state != "up":
            print(
                f"paperline: the {name} server in .paperline/servers.json is {state}; ignoring it "
                "(`paperline down` clears the record)",
                file=sys.stderr,
            )
            if name == "mlflow":
                os.environ.setdefault("MLFLOW_TRACKING_URI", tracking.local_uri(root))
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")


def cmd_status(args: argparse.Namespace) -> int:
    from tasks import overview

    root = env.project_root()
    _skip_dead_servers(root)
    items = overview.collect(root)
    if args.json:
        import json

        print(json.dumps([s.to_dict() for s in items], indent=1))
        return 0
    print(overview.status_table(items))
    print(f"\nMLflow: {_mlflow_hint(root)}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from tasks import overview

    root = env.project_root()
    _skip_dead_servers(root)
    path = overview.write_report(root, log_to_mlflow=not args.no_mlflow)
    print(f"report: {path}")
    return 0


def cmd_dry_run(args: argparse.Namespace) -> int:
    import json

    from models.registry import UnknownMethodError, get, names

    try:
        specs = [get(m) for m in (names() if args.all else args.methods)]
    except UnknownMethodError as exc:
        return _fail(str(exc))
    if not specs:
        return _fail(f"name a method or use --all; methods: {', '.join(names())}")
    from tasks import dry_run

    reports, failed = [], []
    for spec in specs:
        try:
            report = dry_run.dry_run(spec)
            print(dry_run.describe(report), flush=True)
        except Exception as exc:  # a shape error is the finding: report it and go on
            report = {"method": spec.slug, "error": f"{type(exc).__name__}: {exc}"}
            failed.append(spec.slug)
            print(f"{spec.slug}: FAILED at paper scale: {report['error'][:500]}", flush=True)
        reports.append(report)
    if args.json:
        Path(args.json).write_text(json.dumps(reports, indent=1, default=str))
    return 1 if failed else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="paperline",
        description="ICML 2025 methods as tracked, versioned pipelines: prepare -> train -> evaluate -> publish.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", help="the registered methods, their papers and claims")
    p.add_argument("--markdown", action="store_true", help="as a markdown table (the README's)")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("run", help="run one method (several, or --all) through the Prefect flow, tracked in MLflow")
    p.add_argument("methods", nargs="*", metavar="METHOD", help="method slug(s) (see `paperline list`)")
    p.add_argument("--all", action="store_true", help="every registered method")
    p.add_argument("--scale", default="default", help="smoke | default | paper (default: default)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="config override, repeatable (dotted keys)")
    p.add_argument(
        "--runner",
        choices=["sequential", "dask"],
        default="sequential",
        help="with several methods or --all: one after another, or in parallel on Dask (default: sequential)",
    )
    p.add_argument("--dask-address", default=None, help="scheduler of a running Dask cluster (default: a local one)")
    p.add_argument("--workers", type=int, default=2, help="local Dask worker processes (default: 2)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("stage", help="one step with params.yaml's config (what DVC stages call)")
    p.add_argument("step", choices=["prepare", "train", "evaluate"])
    p.add_argument("method")
    p.set_defaults(func=cmd_stage)

    p = sub.add_parser("params", help="validate params.yaml (or --write it and dvc.yaml from the configs)")
    p.add_argument("--write", action="store_true")
    p.set_defaults(func=cmd_params)

    p = sub.add_parser("status", help="last run per method: its claim, must-pass checks, champion and challenger")
    p.add_argument("--json", action="store_true", help="as JSON")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("dry-run", help="paper scale with the data cut to a few items: shapes, memory, two steps")
    p.add_argument("methods", nargs="*", metavar="METHOD")
    p.add_argument("--all", action="store_true", help="every registered method")
    p.add_argument("--json", default="", help="also write the reports to this JSON file")
    p.set_defaults(func=cmd_dry_run)

    p = sub.add_parser("report", help="write outputs/report/index.html (claim table, figures, MLflow links)")
    p.add_argument("--no-mlflow", action="store_true", help="do not log the report to MLflow")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("up", help="start the Prefect (4200) and MLflow (5000) servers on loopback")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--allow-remote", action="store_true", help="required to bind anything but 127.0.0.1")
    p.add_argument("--prefect-port", type=int, default=4200)
    p.add_argument("--mlflow-port", type=int, default=5000)
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("down", help="stop the servers `paperline up` started")
    p.set_defaults(func=cmd_down)

    p = sub.add_parser("serve", help="serve the deployments (nightly retraining at 02:00)")
    p.set_defaults(func=cmd_serve)
    return parser


def _stop_with_supervisor() -> None:
    """In the run a supervisor started: should the supervisor die (SIGKILL), stop as if it had asked, and
    end the whole process group (Dask workers included) if that has not ended the run within the grace."""
    from pathlib import Path

    from models.common import runtime

    supervisor, stop_file = os.getppid(), os.environ.get(runtime.STOP_FILE_VAR, "")

    def watch() -> None:
        while os.getppid() == supervisor:
            time.sleep(0.5)
        with contextlib.suppress(OSError):
            Path(stop_file).write_text("the paperline process that started this run died")
        with contextlib.suppress(ProcessLookupError):
            os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(STOP_GRACE_SECONDS)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="paperline-supervisor-watch", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    env.configure()
    if os.environ.get(SUPERVISED_VAR):
        _stop_with_supervisor()
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except Exception as exc:
        if type(exc).__name__ == "TrackingStoreError":  # tasks.tracking, not imported on every command
            return _fail(str(exc), 1)
        raise
    except KeyboardInterrupt:  # the run is already marked FAILED and the temporary server stopped
        _arm_exit_watchdog(130)  # interpreter shutdown joins threads: bound it too
        print("paperline: interrupted", file=sys.stderr)
        return 130
    except Terminated as exc:
        _arm_exit_watchdog(exc.code)
        print("paperline: terminated", file=sys.stderr)
        return exc.code
    except SystemExit as exc:  # a stop the supervisor asked for, surfacing through a library
        from models.common import runtime

        if isinstance(exc, runtime.StopRequested) or runtime.stop_reason():
            _arm_exit_watchdog(143)
            return 143
        raise


SUPERVISED_VAR = "PAPERLINE_SUPERVISED"
STOP_GRACE_SECONDS = 25.0  # from the signal to SIGKILL of the run's process group, if it has not ended


def supervise(argv: list[str]) -> int:
    """``paperline run`` as a supervisor: the run itself is a child process in its own session, and only this
    small process (no torch, Prefect or MLflow imported) receives Ctrl-C and SIGTERM.

    Inside the run, Lightning and Prefect install and swap SIGTERM/SIGINT handlers around every fit and task;
    a signal that landed at the wrong moment was lost (the run finished and registered a model) or became
    ``SystemExit(1)``. Here a signal is never lost: it writes the stop file the run checks between steps,
    between training batches and before registering a model, forwards SIGTERM to the run, and, should the
    run not end within ``STOP_GRACE_SECONDS``, kills its process group. The exit code is 130 (Ctrl-C) or 143
    (SIGTERM) with one line saying so."""
    import subprocess
    import tempfile
    from pathlib import Path

    from models.common import runtime

    stop_dir = Path(tempfile.mkdtemp(prefix="paperline-stop-"))
    stop_file = stop_dir / "stop"
    child = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", *argv],
        env={**os.environ, SUPERVISED_VAR: "1", runtime.STOP_FILE_VAR: str(stop_file)},
        start_new_session=True,
    )
    received: list[int] = []
    deadline = [float("inf")]

    def on_signal(signum, frame) -> None:
        if received:  # a second Ctrl-C: do not wait for the cleanup
            deadline[0] = 0.0
            return
        received.append(signum)
        what = "interrupted by the user (Ctrl-C)" if signum == signal.SIGINT else f"terminated (signal {signum})"
        stop_file.write_text(what)
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signal.SIGTERM)
        deadline[0] = time.monotonic() + STOP_GRACE_SECONDS

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    try:
        while True:
            try:
                code = child.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() > deadline[0]:
                    print(
                        f"paperline: the run did not stop within {STOP_GRACE_SECONDS:.0f} s; killing it "
                        "(the next run marks its MLflow run KILLED)",
                        file=sys.stderr,
                        flush=True,
                    )
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(child.pid, signal.SIGKILL)
                    deadline[0] = float("inf")
    finally:
        import shutil

        shutil.rmtree(stop_dir, ignore_errors=True)
    if received:
        signum = received[0]
        print("paperline: interrupted" if signum == signal.SIGINT else "paperline: terminated", file=sys.stderr)
        return 130 if signum == signal.SIGINT else 128 + signum
    return code


def entry() -> None:
    """The ``paperline`` console script: ``main``, then an exit without the interpreter's teardown.

    Tearing down the libraries a run loads (torch, Prefect, MLflow, Lightning) took ~1.3 s after every
    command. What must happen at exit is registered with ``atexit`` (Prefect's log and event queues,
    MLflow, temporary folders, logging): it runs, output is flushed, and the process ends with main's code.
    """
    import atexit

    argv = sys.argv[1:]
    if argv[:1] == ["run"] and not os.environ.get(SUPERVISED_VAR) and "-h" not in argv and "--help" not in argv:
        code = supervise(argv)
    else:
        code = main()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
