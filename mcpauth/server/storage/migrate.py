"""Schema migrations with Alembic: the only way the schema changes, and the one policy for when
they run (:func:`ensure_schema`). Alembic is imported only when a migration runs: which
revision a database is at is one SQL read of Alembic's version table, compared with
:data:`HEAD`, so every start and readiness check of a current database runs without it."""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Literal

from sqlalchemy import Engine, inspect, text

from mcpauth.errors import ConfigurationError

if TYPE_CHECKING:
    from alembic.config import Config

SCRIPT_LOCATION = "mcpauth.server:migrations"
# The newest revision in migrations/versions, so that a current database is recognised without
# loading Alembic and its scripts; tests/server/test_migrations.py checks it is Alembic's head.
# The development revisions were squashed into 0001 before 0.1.0: its schema is theirs.
HEAD = "0004"


def alembic_config(engine: Engine | None = None) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    if engine is not None:
        config.set_main_option(
            "sqlalchemy.url", engine.url.render_as_string(hide_password=False).replace("%", "%%")
        )
    return config


@functools.cache
def head_revision() -> str | None:
    """The newest revision of the migrations shipped with the package, as Alembic reads it from
    the scripts (read once: loading them costs tens of milliseconds); :data:`HEAD` says the
    same without loading them."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (``None``: no schema yet), read from Alembic's version
    table with SQL alone, as Alembic reads it; a table with several rows (branches, which
    mcpauth never makes) is left to Alembic, which refuses it.

    Raises:
        alembic.util.CommandError: the version table holds several revisions.
    """
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):  # Alembic's default, kept by env.py
            return None
        versions = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    if len(versions) <= 1:
        return str(versions[0]) if versions else None
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def _refuse_unknown(engine: Engine) -> None:
    """Refuse a database whose revision this version does not ship: one made by a pre-release
    (its migrations were squashed into ``0001`` for 0.1.0) or by a newer version.

    Raises:
        ConfigurationError: the database's revision is not one of this version's.
    """
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    current = current_revision(engine)
    if current is None:
        return
    try:
        ScriptDirectory.from_config(alembic_config()).get_revision(current)
    except CommandError:
        raise ConfigurationError(
            f"the database schema is at revision {current!r}, which this version does not "
            f"have: a database made by a pre-release of mcpauth (before 0.1.0) must be "
            f"recreated, one made by a newer version needs that version"
        ) from None


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the database to ``revision`` (default: the newest).

    Raises:
        ConfigurationError: the database is at a revision this version does not have.
    """
    from alembic import command

    _refuse_unknown(engine)
    config = alembic_config(engine)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)


def is_current(engine: Engine) -> bool:
    """Whether the schema is at the newest revision (:data:`HEAD`)."""
    return current_revision(engine) == HEAD


Upgrades = Literal["always", "embedded", "never"]


def ensure_schema(engine: Engine, *, upgrades: Upgrades = "embedded") -> None:
    """Bring the database to the schema this version needs, or refuse to use it. The one
    policy every entry point follows (docs/architecture.md, "The database schema"):

    - ``"always"``: ``mcpauth db upgrade``, the operator's explicit upgrade of any database;
    - ``"embedded"``: ``create_app`` (``mcpauth serve``), the admin commands and ``Admin``
      upgrade an embedded SQLite database on their own (one process owns it) and refuse a
      shared one (PostgreSQL) that is behind: replicas of an older version may still use it;
    - ``"never"``: ``Admin.open(settings, upgrade=False)`` only refuses.

    Raises:
        ConfigurationError: the schema is behind and this policy does not upgrade it.
    """
    if is_current(engine):
        return
    if upgrades == "always" or (upgrades == "embedded" and engine.dialect.name == "sqlite"):
        upgrade(engine)
        return
    raise ConfigurationError(
        f"the database schema is at revision {current_revision(engine)!r} but this "
        f"version needs {HEAD!r}: run `mcpauth db upgrade` first"
    )
