"""Schema migrations with Alembic: the only way the schema changes, and the one policy for when
they run (:func:`ensure_schema`)."""

from __future__ import annotations

import functools
import logging
from typing import Literal

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from mcpauth.errors import ConfigurationError

SCRIPT_LOCATION = "mcpauth.server:migrations"


def alembic_config(engine: Engine | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    if engine is not None:
        config.set_main_option(
            "sqlalchemy.url", engine.url.render_as_string(hide_password=False).replace("%", "%%")
        )
    return config


@functools.cache
def head_revision() -> str | None:
    """The newest revision of the migrations shipped with the package (read once: loading the
    scripts costs tens of milliseconds, and ``ensure_schema`` asks on every ``create_app``)."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the database to ``revision`` (default: the newest)."""
    config = alembic_config(engine)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)


def is_current(engine: Engine) -> bool:
    return current_revision(engine) == head_revision()


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
        f"version needs {head_revision()!r}: run `mcpauth db upgrade` first"
    )
