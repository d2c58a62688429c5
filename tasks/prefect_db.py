"""A fresh project's Prefect DB starts as a copy of one already migrated.

Prefect's server spends ~12 s of its first start creating and migrating its SQLite DB (the first
`paperline run` in a project, every test's temporary project). The first server that migrates a DB
leaves a consistent copy (SQLite's backup API, taken as soon as it answers, before any flow ran) next
to the installed Prefect, keyed by its version; a later fresh project's DB starts from that copy.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import sys
from pathlib import Path

TEMPLATE_DIR_VAR = "PAPERLINE_PREFECT_TEMPLATE_DIR"
DATABASE_URL_VARS = ("PREFECT_API_DATABASE_CONNECTION_URL", "PREFECT_SERVER_DATABASE_CONNECTION_URL")


def project_db() -> Path | None:
    """The SQLite file Prefect's server uses here, or None where the user configured another database."""
    if any(os.environ.get(var) for var in DATABASE_URL_VARS) or not os.environ.get("PREFECT_HOME"):
        return None
    return Path(os.environ["PREFECT_HOME"]) / "prefect.db"


def template() -> Path:
    from importlib.metadata import version

    folder = Path(os.environ.get(TEMPLATE_DIR_VAR) or Path(sys.prefix) / "share" / "paperline")
    return folder / f"prefect-{version('prefect')}.db"


def seed() -> bool:
    """Start a missing project DB from the template; True if it did. Never replaces an existing DB."""
    db, source = project_db(), template()
    if db is None or db.exists() or not source.is_file():
        return False
    db.parent.mkdir(parents=True, exist_ok=True)
    partial = db.with_name(f".{db.name}.{os.getpid()}.partial")
    try:
        shutil.copyfile(source, partial)
        os.link(partial, db)  # atomic, and fails where another process created the DB meanwhile
    except OSError:
        return False
    finally:
        partial.unlink(missing_ok=True)
    return True


def save_template(db: Path | None) -> None:
    """Keep a consistent copy of ``db`` (just migrated, no runs yet) as the template, once."""
    target = template()
    if db is None or not db.is_file() or target.exists():
        return
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.closing(sqlite3.connect(db)) as src, contextlib.closing(sqlite3.connect(partial)) as dst:
            src.backup(dst)
        os.replace(partial, target)
    except (OSError, sqlite3.Error):
        pass  # a read-only install or a busy DB: later fresh projects just migrate their own
    finally:
        partial.unlink(missing_ok=True)
