"""What the command groups share: the error for bad input, the ``--database``/``--config``
options and the settings and admin context they give, JSON output, and commands whose extra
is not installed. Cheap to import: the server is imported by the functions that use it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from mcpauth.errors import MCPAuthError

Handler = Callable[[argparse.Namespace], int]


class CommandError(MCPAuthError):
    """Bad input to an admin command (a file, stdin); printed as one line, exit status 2."""


def add_database_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--database", metavar="URL", help="database URL (MCPAUTH_DATABASE_URL)")
    parser.add_argument("--config", metavar="FILE", help="TOML settings file (MCPAUTH_CONFIG)")


def admin_actions(group: argparse.ArgumentParser, actions: Any, handler: Handler) -> None:
    """Every action of an admin command ``group`` (its ``actions`` subparsers) reads the
    database options and runs ``handler``."""
    group.set_defaults(handler=handler)
    for child in actions.choices.values():
        add_database_options(child)
        child.set_defaults(handler=handler)


def settings(args: argparse.Namespace, **flags: Any) -> Any:
    """The server's settings: ``flags``, then the environment, then the ``--config`` file."""
    from mcpauth.server.config import load_settings

    flags["database_url"] = args.database
    return load_settings(flags, config_file=args.config)


def open_admin(args: argparse.Namespace) -> Any:
    """The server context an admin command works on (:func:`mcpauth.server.admin.open_context`)."""
    from mcpauth.server.admin import open_context

    return open_context(settings(args))


def print_json(data: object) -> None:
    from mcpauth.server.admin import dump

    print(dump(data))


def missing_extra(sub: Any, commands: Sequence[str], extra: str, error: ImportError) -> None:
    """Commands whose extra is not installed still exist, and say what to install."""

    def explain(args: argparse.Namespace) -> int:
        print(
            f"mcpauth {args.command} needs the {extra} extra ({error.name or error}): "
            f"pip install 'mcpauth-kit[{extra}]'",
            file=sys.stderr,
        )
        return 2

    for command in commands:
        parser = sub.add_parser(command, help=f"(needs mcpauth-kit[{extra}])", add_help=False)
        parser.add_argument("rest", nargs=argparse.REMAINDER)
        parser.set_defaults(handler=explain)
