"""Alembic migrations are the only way the schema changes: ``upgrade head`` on an empty
database yields exactly the models' schema, on SQLite and on PostgreSQL, a database filled at
the first revision keeps every row (and every credential keeps working) through the upgrade,
and one policy (``migrate.ensure_schema``) decides when a database behind is upgraded."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Engine, text

from mcpauth.errors import ConfigurationError
from mcpauth.server import AdminError, Settings, create_app
from mcpauth.server.admin import open_context
from mcpauth.server.crypto import digest
from mcpauth.server.identity.passwords import hash_password
from mcpauth.server.storage import migrate, models
from mcpauth.server.storage.database import make_engine

from ..conftest import ISSUER, TEST_SECRET

ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
RESOURCE = "http://127.0.0.1:8000/mcp"
CLIENT_ID = "client-from-0001"
REFRESH_TOKEN = "refresh-token-written-at-revision-0001-" + "x" * 20


@pytest.fixture(params=ENGINES)
def empty_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """An engine on a database without any table, on each engine."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'empty.db'}"
    else:
        url = str(request.getfixturevalue("empty_postgres_url"))
    engine = make_engine(url)
    yield engine
    engine.dispose()


def test_upgrade_head_on_an_empty_database_matches_the_models(empty_engine: Engine) -> None:
    migrate.upgrade(empty_engine)
    with empty_engine.connect() as conn:
        diff = compare_metadata(
            MigrationContext.configure(conn, opts={"compare_type": True}), models.metadata
        )
    assert diff == []


def test_a_fresh_database_is_behind_and_an_upgraded_one_is_current(empty_engine: Engine) -> None:
    assert not migrate.is_current(empty_engine)
    migrate.upgrade(empty_engine)
    assert migrate.is_current(empty_engine)
    assert migrate.current_revision(empty_engine) == migrate.head_revision()


def test_head_is_the_newest_migration() -> None:
    newest = ScriptDirectory.from_config(migrate.alembic_config()).get_current_head()
    assert newest == migrate.HEAD, "a new migration also moves migrate.HEAD"


# what the version table holds -> the revision the database is at
VERSION_ROWS = {
    "no version table": (None, None),
    "no row": ([], None),
    "an older revision": (["0001"], "0001"),
    "a revision this version does not know": (["9999"], "9999"),
    "the newest revision": ([migrate.HEAD], migrate.HEAD),
}


def _version_table(engine: Engine, versions: list[str]) -> None:
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)"))
        for version in versions:
            conn.execute(text("INSERT INTO alembic_version VALUES (:v)"), {"v": version})


@pytest.mark.parametrize("rows", VERSION_ROWS)
def test_the_revision_is_read_as_alembic_reads_it(empty_engine: Engine, rows: str) -> None:
    versions, revision = VERSION_ROWS[rows]
    if versions is not None:
        _version_table(empty_engine, versions)
    with empty_engine.connect() as conn:
        assert MigrationContext.configure(conn).get_current_revision() == revision
    assert migrate.current_revision(empty_engine) == revision
    assert migrate.is_current(empty_engine) is (revision == migrate.HEAD)


def test_a_version_table_with_two_rows_is_refused_as_alembic_refuses_it(
    empty_engine: Engine,
) -> None:
    _version_table(empty_engine, ["0001", migrate.HEAD])
    with pytest.raises(CommandError, match="more than one head"):
        migrate.is_current(empty_engine)


# (engine, policy) -> whether a database that is behind is upgraded (else it is refused)
UPGRADED = {
    ("sqlite", "always"): True,
    ("sqlite", "embedded"): True,
    ("sqlite", "never"): False,
    ("postgresql", "always"): True,
    ("postgresql", "embedded"): False,
    ("postgresql", "never"): False,
}


@pytest.mark.parametrize("upgrades", ["always", "embedded", "never"])
def test_a_database_behind_is_upgraded_only_where_the_policy_says(
    empty_engine: Engine, upgrades: migrate.Upgrades
) -> None:
    migrate.upgrade(empty_engine, "0001")
    if UPGRADED[empty_engine.dialect.name, upgrades]:
        migrate.ensure_schema(empty_engine, upgrades=upgrades)
        assert migrate.is_current(empty_engine)
        return
    with pytest.raises(ConfigurationError) as refused:
        migrate.ensure_schema(empty_engine, upgrades=upgrades)
    assert str(refused.value) == (
        f"the database schema is at revision '0001' but this version needs "
        f"{migrate.head_revision()!r}: run `mcpauth db upgrade` first"
    )
    assert migrate.current_revision(empty_engine) == "0001"


@pytest.mark.parametrize("upgrade", [True, False])
def test_the_admin_context_follows_the_same_policy(empty_engine: Engine, upgrade: bool) -> None:
    migrate.upgrade(empty_engine, "0001")
    url = empty_engine.url.render_as_string(hide_password=False)
    settings = Settings(issuer=ISSUER, database_url=url, secret_key=TEST_SECRET)
    if upgrade and empty_engine.dialect.name == "sqlite":
        open_context(settings, upgrade=upgrade).db.dispose()
        assert migrate.is_current(empty_engine)
        return
    with pytest.raises(AdminError, match=r"run `mcpauth db upgrade` first$"):
        open_context(settings, upgrade=upgrade)
    assert migrate.current_revision(empty_engine) == "0001"


def _fill_at_revision_0001(engine: Engine, now: int) -> dict[str, str]:
    """One row of each kind a running server depends on, written with plain SQL as a server of
    revision 0001 would have written them."""
    ids = {"user": "user-0001", "grant": "grant-0001"}
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO users (id, username, password_hash, created_at) "
                "VALUES (:id, 'alice', :hash, :now)"
            ),
            {"id": ids["user"], "hash": hash_password("correct horse battery"), "now": now},
        )
        conn.execute(
            text(
                "INSERT INTO clients (client_id, secret_expires_at, client_name, redirect_uris, "
                "grant_types, response_types, token_endpoint_auth_method, application_type, "
                "scope, client_metadata, first_party, introspect, source, created_at) VALUES "
                "(:id, 0, 'Old client', :redirects, :grants, :responses, 'none', 'native', "
                "'mcp:tools', '{}', false, false, 'dcr', :now)"
            ),
            {
                "id": CLIENT_ID,
                "redirects": json.dumps(["http://127.0.0.1/callback"]),
                "grants": json.dumps(["authorization_code", "refresh_token"]),
                "responses": json.dumps(["code"]),
                "now": now,
            },
        )
        conn.execute(
            text(
                "INSERT INTO resources (uri, name, scopes, default_scopes, is_default, "
                "created_at) VALUES (:uri, 'Demo', :scopes, :defaults, true, :now)"
            ),
            {
                "uri": RESOURCE,
                "scopes": json.dumps({"mcp:tools": "Use the tools"}),
                "defaults": json.dumps(["mcp:tools"]),
                "now": now,
            },
        )
        conn.execute(
            text(
                "INSERT INTO grants (id, user_id, client_id, resource, scope, created_at, "
                "last_used_at) VALUES (:id, :user, :client, :resource, 'mcp:tools', :now, :now)"
            ),
            {
                "id": ids["grant"],
                "user": ids["user"],
                "client": CLIENT_ID,
                "resource": RESOURCE,
                "now": now,
            },
        )
        conn.execute(
            text(
                "INSERT INTO refresh_tokens (digest, grant_id, client_id, scope, resource, "
                "created_at, expires_at) VALUES (:digest, :grant, :client, 'mcp:tools', "
                ":resource, :now, :expires)"
            ),
            {
                "digest": digest(REFRESH_TOKEN),
                "grant": ids["grant"],
                "client": CLIENT_ID,
                "resource": RESOURCE,
                "now": now,
                "expires": now + 3600,
            },
        )
    return ids


def _rows(engine: Engine) -> dict[str, list[tuple[object, ...]]]:
    queries = {
        "users": "SELECT id, username, created_at FROM users",
        "clients": "SELECT client_id, client_name, redirect_uris, grant_types FROM clients",
        "resources": "SELECT uri, name, scopes, default_scopes, is_default FROM resources",
        "grants": "SELECT id, user_id, client_id, resource, scope, revoked_at FROM grants",
        "refresh_tokens": "SELECT digest, grant_id, expires_at, rotated_at FROM refresh_tokens",
    }
    with engine.connect() as conn:
        return {
            table: [tuple(row) for row in conn.execute(text(sql))] for table, sql in queries.items()
        }


@pytest.mark.anyio
async def test_a_database_filled_at_revision_0001_upgrades_to_head_without_losing_data(
    empty_engine: Engine,
) -> None:
    migrate.upgrade(empty_engine, "0001")
    assert migrate.current_revision(empty_engine) == "0001"
    now = int(time.time())
    ids = _fill_at_revision_0001(empty_engine, now)
    before = _rows(empty_engine)
    assert all(len(rows) == 1 for rows in before.values()), before

    migrate.upgrade(empty_engine)

    assert migrate.is_current(empty_engine)
    assert _rows(empty_engine) == before
    # the old rows are usable: the refresh token written at 0001 rotates through the server
    settings = Settings(
        issuer=ISSUER,
        database_url=empty_engine.url.render_as_string(hide_password=False),
        secret_key=TEST_SECRET,
        refresh_token_reuse_grace=0,  # strict single use: the replay below revokes the grant
    )
    app = create_app(settings, engine=empty_engine)
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as http:
        form = {
            "grant_type": "refresh_token",
            "refresh_token": REFRESH_TOKEN,
            "client_id": CLIENT_ID,
        }
        response = await http.post("/token", data=form)
        assert response.status_code == 200, response.text
        assert response.json()["scope"] == "mcp:tools"
        replay = await http.post("/token", data=form)
        assert replay.status_code == 400
        assert replay.json()["error"] == "invalid_grant"
    with empty_engine.connect() as conn:
        revoked = conn.execute(
            text("SELECT revoked_at FROM grants WHERE id = :id"), {"id": ids["grant"]}
        ).scalar()
    assert revoked is not None


def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'wal.db'}")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
    engine.dispose()
