"""Alembic migrations are the only way the schema changes: ``upgrade head`` on an empty
database yields exactly the models' schema, on SQLite and on PostgreSQL, one policy
(``migrate.ensure_schema``) decides when a database behind is upgraded, and a database at a
revision this version does not have (a pre-release's, squashed into ``0001``) is refused with
a message, never a traceback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Engine, inspect, text

from mcpauth.cli import main
from mcpauth.errors import ConfigurationError
from mcpauth.server import AdminError, Settings
from mcpauth.server.admin import open_context
from mcpauth.server.storage import migrate, models
from mcpauth.server.storage.database import make_engine

from ..conftest import ISSUER, TEST_SECRET

ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
PRE_RELEASE = "0013"  # the newest of the development revisions squashed into 0001


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
    "a pre-release revision": ([PRE_RELEASE], PRE_RELEASE),
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
    _version_table(empty_engine, [PRE_RELEASE, migrate.HEAD])
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
    # behind: no schema yet (0001 is the only revision)
    if UPGRADED[empty_engine.dialect.name, upgrades]:
        migrate.ensure_schema(empty_engine, upgrades=upgrades)
        assert migrate.is_current(empty_engine)
        return
    with pytest.raises(ConfigurationError) as refused:
        migrate.ensure_schema(empty_engine, upgrades=upgrades)
    assert str(refused.value) == (
        f"the database schema is at revision None but this version needs "
        f"{migrate.head_revision()!r}: run `mcpauth db upgrade` first"
    )
    assert migrate.current_revision(empty_engine) is None
    assert not inspect(empty_engine).get_table_names()


@pytest.mark.parametrize("upgrade", [True, False])
def test_the_admin_context_follows_the_same_policy(empty_engine: Engine, upgrade: bool) -> None:
    url = empty_engine.url.render_as_string(hide_password=False)
    settings = Settings(issuer=ISSUER, database_url=url, secret_key=TEST_SECRET)
    if upgrade and empty_engine.dialect.name == "sqlite":
        open_context(settings, upgrade=upgrade).db.dispose()
        assert migrate.is_current(empty_engine)
        return
    with pytest.raises(AdminError, match=r"run `mcpauth db upgrade` first$"):
        open_context(settings, upgrade=upgrade)
    assert migrate.current_revision(empty_engine) is None


UNKNOWN = (
    f"the database schema is at revision {PRE_RELEASE!r}, which this version does not have: a "
    "database made by a pre-release of mcpauth (before 0.1.0) must be recreated, one made by a "
    "newer version needs that version"
)


@pytest.mark.parametrize("upgrades", ["always", "embedded"])
def test_a_database_of_a_pre_release_is_refused_with_what_to_do(
    empty_engine: Engine, upgrades: migrate.Upgrades
) -> None:
    migrate.upgrade(empty_engine)
    with empty_engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": PRE_RELEASE})
    with pytest.raises(ConfigurationError) as refused:
        migrate.upgrade(empty_engine)
    assert str(refused.value) == UNKNOWN
    # a shared database is not upgraded by a start: that refusal says to run `db upgrade`
    upgraded = upgrades == "always" or empty_engine.dialect.name == "sqlite"
    expected = "which this version does not have" if upgraded else "run `mcpauth db upgrade` first"
    with pytest.raises(ConfigurationError, match=expected):
        migrate.ensure_schema(empty_engine, upgrades=upgrades)
    assert migrate.current_revision(empty_engine) == PRE_RELEASE


def test_db_upgrade_on_a_pre_release_database_exits_2_with_the_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'pre-release.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": PRE_RELEASE})
    engine.dispose()
    assert main(["db", "upgrade", "--database", url]) == 2
    assert capsys.readouterr().err == f"mcpauth: {UNKNOWN}\n"


def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'wal.db'}")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
    engine.dispose()
