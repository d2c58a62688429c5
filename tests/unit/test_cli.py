"""The CLI's error paths: one clear line, exit 2, nothing written."""

import os
import subprocess
import sys

import pytest

from models.registry import METHODS
from tests.conftest import ROOT

SLUG = next(iter(METHODS))


def paperline(*args, root=None, check_empty=True, extra_env=None):
    env = dict(os.environ, **(extra_env or {}))
    if root is not None:
        env["PAPERLINE_ROOT"] = str(root)
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True)


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "nosuch"], f"unknown method 'nosuch'; choose from: {', '.join(METHODS)}"),
        (["run", SLUG, "--set", "nosuch_key=1"], f"invalid config for {SLUG}: unknown key 'nosuch_key'"),
        (["run", SLUG, "--set", "seed=abc"], "seed='abc'"),
        (["run", SLUG, "--set", "seed"], "bad override 'seed': expected key=value"),
        (["run", SLUG, "--scale", "huge"], "unknown scale 'huge'"),
        (["run"], "name a method or use --all"),
        (["run", SLUG, "--all"], "give method names or --all, not both"),
        (["run", SLUG, "nosuch"], "unknown method 'nosuch'"),
        (["run", SLUG, "--runner", "dask"], "name two or more, or use --all"),
        (["stage", "train", "nosuch"], "unknown method 'nosuch'"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(args, message, tmp_path):
    proc = paperline(*args, root=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("paperline: error: ") and message in lines[0], proc.stderr
    assert list(tmp_path.iterdir()) == [], "an error path wrote files"


@pytest.mark.parametrize(
    "var, value, allowed",
    [
        ("PAPERLINE_CHECKPOINT_SECONDS", "abc", "expected a number of seconds >= 0"),
        ("PAPERLINE_ACCELERATOR", "tpu9", "expected one of auto, cpu, gpu, cuda, mps, tpu"),
        ("PAPERLINE_DEVICES", "-1", "expected a positive integer, 'auto' or a device list like '0,1'"),
        ("PAPERLINE_DEVICES", "0,x", "expected a positive integer, 'auto' or a device list like '0,1'"),
        ("PAPERLINE_THREADS", "0", "expected a positive integer"),
        ("PAPERLINE_NUM_NODES", "zero", "expected a positive integer"),
    ],
)
def test_bad_environment_is_refused_before_any_run(var, value, allowed, tmp_path):
    proc = paperline("run", SLUG, "--scale", "smoke", root=tmp_path, extra_env={var: value})
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert lines == [f"paperline: error: {var}={value!r}: {allowed}"], proc.stderr[-2000:]
    assert list(tmp_path.iterdir()) == [], "an error path wrote files"


def test_bad_environment_stops_a_dvc_stage_too(tmp_path):
    from tasks.config import render_params

    (tmp_path / "params.yaml").write_text(render_params())
    proc = paperline("stage", "prepare", SLUG, root=tmp_path, extra_env={"PAPERLINE_THREADS": "many"})
    assert proc.returncode == 2 and "PAPERLINE_THREADS='many'" in proc.stderr, proc.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


def test_good_environment_passes_the_check(monkeypatch):
    from models.common.runtime import check_environment

    for var, value in {
        "PAPERLINE_ACCELERATOR": "gpu",
        "PAPERLINE_DEVICES": "0,1",
        "PAPERLINE_THREADS": "2",
        "PAPERLINE_CHECKPOINT_SECONDS": "0",
        "PAPERLINE_NUM_NODES": "2",
    }.items():
        monkeypatch.setenv(var, value)
    check_environment()
    monkeypatch.setenv("PAPERLINE_DEVICES", "auto")
    check_environment()


def test_help_and_list_are_fast_imports():
    proc = paperline("--help")
    assert proc.returncode == 0 and "run" in proc.stdout and "stage" in proc.stdout
    code = "import sys, flows.cli; flows.cli.build_parser(); print([m for m in ('torch','mlflow','prefect') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    listing = paperline("list")
    for spec in METHODS.values():
        assert spec.slug in listing.stdout and spec.title in listing.stdout


def test_stage_train_without_data_says_how_to_recreate(tmp_path):
    from tasks.config import render_params

    (tmp_path / "params.yaml").write_text(render_params())
    proc = paperline("stage", "train", SLUG, root=tmp_path)
    assert proc.returncode == 1
    assert f"dvc repro prepare@{SLUG}" in proc.stderr and f"paperline stage prepare {SLUG}" in proc.stderr


def test_stage_with_malformed_params_names_the_file(tmp_path):
    (tmp_path / "params.yaml").write_text(f"{SLUG}: {{seed: [\n")
    proc = paperline("stage", "prepare", SLUG, root=tmp_path)
    assert proc.returncode == 2 and "params.yaml is not valid YAML" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


def test_run_with_malformed_params_stops_before_work(tmp_path):
    (tmp_path / "params.yaml").write_text("nosuch: {}\n")
    proc = paperline("run", SLUG, root=tmp_path)
    assert proc.returncode == 2 and "unknown method section 'nosuch'" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


@pytest.mark.sync
def test_readme_lists_every_method():
    readme = (ROOT / "README.md").read_text()
    for slug in METHODS:
        assert f"| `{slug}` |" in readme, f"README's methods table lacks {slug} (paste `paperline list --markdown`)"


def test_run_from_a_fresh_checkout_creates_the_state_folders(tmp_path, monkeypatch):
    # Regression: Prefect's temporary server could not open its DB in a missing PREFECT_HOME.
    from flows import cli

    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / ".paperline" / "prefect"))
    calls = []
    monkeypatch.setattr("flows.cli._validate_run", lambda args: calls.append("validated") or ["x"])
    monkeypatch.setattr("tasks.servers.use_running_servers", lambda root: (_ for _ in ()).throw(SystemExit(0)))
    try:
        cli.main(["run", "x"])
    except SystemExit:
        pass
    assert calls == ["validated"] and (tmp_path / ".paperline" / "prefect").is_dir()


def test_a_thread_that_never_ends_cannot_hold_an_interrupted_cli():
    """After the signal, cleanup gets a grace period; then every thread's stack is printed and the CLI exits
    with the signal's code, even with a non-daemon thread that would block interpreter shutdown forever."""
    code = (
        "import threading, flows.cli as cli\n"
        "cli.EXIT_GRACE_SECONDS = 1.0\n"
        "threading.Thread(target=threading.Event().wait, name='stuck-worker').start()\n"
        "cli._arm_exit_watchdog(130)\n"
        "raise SystemExit(0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 130, done.stderr
    assert "not exited 1 s after the signal" in done.stderr
    assert "Thread 0x" in done.stderr and "in wait" in done.stderr  # the stuck thread's stack is shown


def test_the_console_script_flushes_everything_and_keeps_the_exit_code(tmp_path):
    """``paperline`` ends with os._exit after atexit (no interpreter teardown): piped output stays whole."""
    listed = paperline("list", "--markdown", root=tmp_path)
    assert listed.returncode == 0 and all(f"| `{slug}` |" in listed.stdout for slug in METHODS), listed.stdout[-500:]
    assert listed.stdout.endswith("|\n")
    script = "import atexit, sys; atexit.register(lambda: print('atexit ran', file=sys.stderr)); " + (
        "sys.argv = ['paperline', 'run', 'nosuch']; from flows.cli import entry; entry()"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown method 'nosuch'" in proc.stderr and "atexit ran" in proc.stderr


@pytest.mark.parametrize("text", ["010", "0x10", "1:30", "0777", "yes", "on", "True", "NO", "[010]"])
def test_yaml_1_1_number_forms_in_set_are_not_read_as_other_numbers(text):
    """--set episodes=010 was read as 8 (octal), seed=0x10 as 16, yes as True: a typo became another valid
    value. Only plain forms are numbers and booleans now; the rest stay strings, which the configs refuse."""
    from tasks.config import parse_value

    value = parse_value(text)
    assert not isinstance(value, (bool, int, float)), value
    assert parse_value("10") == 10 and parse_value("1e-3") == 0.001 and parse_value("true") is True


def test_an_octal_looking_seed_is_refused_with_its_key():
    from models.registry import get
    from tasks.config import ConfigError, build_config, parse_overrides

    with pytest.raises((ConfigError, ValueError), match="seed"):
        build_config(get("sleeping_rl"), "smoke", parse_overrides(["seed=0x10"]))


def test_a_corrupt_mlflow_store_is_one_line_naming_the_file_and_the_fix(tmp_path):
    (tmp_path / "mlflow").mkdir()
    (tmp_path / "mlflow" / "mlflow.db").write_bytes(b"this is not an SQLite database" * 100)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "PREFECT_API"))}
    env["PAPERLINE_ROOT"] = str(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "flows.cli", "status"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 1, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "mlflow.db cannot be opened" in lines[0] and "mv " in lines[0], out.stderr[-2000:]


def test_the_strict_loader_leaves_every_other_yaml_reader_in_the_process_alone():
    """The strict loader once edited SafeLoader's own resolver table, so after tasks.config was imported dask
    read its TLS version 1.2 as the string '1.2' and no Dask cluster could start."""
    import yaml

    from tasks.config import parse_value

    assert parse_value("0x10") == "0x10"
    assert yaml.safe_load("a: 1.2\nb: 0x10\nc: yes") == {"a": 1.2, "b": 16, "c": True}
