"""``mcpauth db upgrade|prune``: the schema (the one explicit upgrade) and expired state."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from mcpauth.cli._shared import admin_group, open_admin, print_json, settings

COMMANDS = ("db",)  # the commands add_parser adds


def add_parser(sub: Any) -> None:
    with admin_group(sub, "db", "database schema", cmd_db) as db:
        db.add_parser("upgrade", help="apply migrations")
        db.add_parser("prune", help="delete expired state now (serve also does it periodically)")


def cmd_db(args: argparse.Namespace) -> int:
    if args.action == "prune":
        return _prune(args)
    from mcpauth.server.storage import migrate
    from mcpauth.server.storage.database import make_engine

    engine = make_engine(settings(args).database_url)
    migrate.ensure_schema(engine, upgrades="always")
    print(f"database at revision {migrate.current_revision(engine)}", file=sys.stderr)
    engine.dispose()
    return 0


def _prune(args: argparse.Namespace) -> int:
    from mcpauth.server.storage.prune import prune, table_rows

    ctx = open_admin(args)
    started = time.monotonic()
    counts = prune(ctx.db, ctx.settings, ctx.now())
    seconds = round(time.monotonic() - started, 3)
    rows = table_rows(ctx.db)
    ctx.db.dispose()
    print_json({"pruned": counts, "skipped": counts is None, "seconds": seconds, "rows": rows})
    return 0
