"""The ``mcpauth`` command. Each subcommand imports its part lazily, so a machine with only
the client or middleware extra installed can run its own commands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from mcpauth.cli import (
    audit,
    clients,
    db,
    demo,
    idps,
    keys,
    login,
    proxy,
    resources,
    serve,
    users,
)
from mcpauth.cli._shared import Handler
from mcpauth.errors import MCPAuthError

# in the order `mcpauth --help` lists them
GROUPS = (serve, users, resources, clients, idps, keys, audit, db, proxy, login, demo)


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser of every group, or only of the group whose command ``argv`` starts with:
    building a group's parser can import its part, and `mcpauth token` should not wait for
    the proxy's (help and unknown commands get every group)."""
    parser = argparse.ArgumentParser(prog="mcpauth", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    named = [group for group in GROUPS if argv and argv[0] in group.COMMANDS]
    for group in named or GROUPS:
        group.add_parser(sub)
    return parser


def _database_problem(exc: Exception) -> str | None:
    """One line for a database that cannot be used (a bad URL, a server that does not answer),
    or ``None`` for any other error. The URL itself is not repeated: it may hold a password."""
    errors = sys.modules.get("sqlalchemy.exc")
    if errors is None or not isinstance(exc, errors.SQLAlchemyError):
        return None
    if isinstance(exc, errors.ArgumentError | errors.NoSuchModuleError):
        return (
            "not a database URL mcpauth can use (sqlite:///PATH or "
            f"postgresql://USER:PASSWORD@HOST/DB): {exc}"
        )
    detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return f"cannot use the database: {detail[0] if detail else type(exc).__name__}"


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv).parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except MCPAuthError as exc:
        print(f"mcpauth: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except OSError as exc:  # a file or directory the command needs
        where = f": {exc.filename}" if exc.filename else ""
        print(f"mcpauth: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2
    except Exception as exc:
        problem = _database_problem(exc)
        if problem is None:
            raise
        print(f"mcpauth: {problem}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
