"""A fresh project's Prefect DB is seeded from the first migrated one, and the server serves it."""

import contextlib
import json
import sqlite3
import urllib.request

import pytest

from tasks import prefect_db, servers


def _alembic_version(db) -> str:
    with contextlib.closing(sqlite3.connect(db)) as con:
        return con.execute("SELECT version_num FROM alembic_version").fetchone()[0]


def _block_type(api_url: str, slug: str) -> dict:
    with urllib.request.urlopen(f"{api_url}/block_types/slug/{slug}", timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv(prefect_db.TEMPLATE_DIR_VAR, str(tmp_path / "templates"))
    for var in (*prefect_db.DATABASE_URL_VARS, "PREFECT_API_URL"):
        monkeypatch.delenv(var, raising=False)

    def project(name: str):
        root = tmp_path / name
        monkeypatch.setenv("PREFECT_HOME", str(root / ".paperline" / "prefect"))
        return root

    return project


def test_first_server_leaves_a_template_and_the_next_project_starts_from_it(isolated):
    first = servers.TemporaryPrefect(isolated("first"))
    assert first.migrates_new_db
    try:
        first.wait_ready(timeout=300)
    finally:
        first.stop()
    template = prefect_db.template()
    assert template.is_file(), "the first migrated DB must leave a template"
    assert _alembic_version(template) == _alembic_version(prefect_db.project_db())
    with contextlib.closing(sqlite3.connect(template)) as con:
        assert con.execute("SELECT count(*) FROM flow_run").fetchone()[0] == 0

    second_root = isolated("second")
    second = servers.TemporaryPrefect(second_root)
    assert not second.migrates_new_db, "a fresh project must be seeded from the template"
    assert prefect_db.project_db().is_file()
    try:
        second.wait_ready(timeout=300)
        assert _block_type(second.api_url, "secret")["slug"] == "secret"  # the seeded DB answers the API
    finally:
        second.stop()


def test_seed_never_replaces_a_db_nor_a_configured_database(isolated, monkeypatch):
    isolated("template-source")
    db = prefect_db.project_db()
    db.parent.mkdir(parents=True)
    with contextlib.closing(sqlite3.connect(db)) as con:
        con.execute("CREATE TABLE alembic_version (version_num TEXT)")
        con.execute("INSERT INTO alembic_version VALUES ('v1')")
        con.commit()
    prefect_db.save_template(db)
    assert _alembic_version(prefect_db.template()) == "v1"

    isolated("existing")
    existing = prefect_db.project_db()
    existing.parent.mkdir(parents=True)
    existing.write_bytes(b"the project's own DB")
    assert not prefect_db.seed()
    assert existing.read_bytes() == b"the project's own DB"

    isolated("configured")
    monkeypatch.setenv("PREFECT_API_DATABASE_CONNECTION_URL", "postgresql+asyncpg://db/prefect")
    assert prefect_db.project_db() is None and not prefect_db.seed()

    monkeypatch.delenv("PREFECT_API_DATABASE_CONNECTION_URL")
    assert prefect_db.seed() and _alembic_version(prefect_db.project_db()) == "v1"
    assert not list(prefect_db.project_db().parent.glob("*.partial")), "no half-written copy left"
