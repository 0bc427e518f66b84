"""Schema migrations with Alembic: the only way the schema changes."""

from __future__ import annotations

import functools
import logging

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

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
