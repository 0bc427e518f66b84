"""What the command groups share: the error for bad input, the ``--database``/``--config``
options and the settings and admin context they give, an admin group's parser (and the
``add|list|remove`` one, with its dispatch), JSON output, and commands whose extra is not
installed. Cheap to import: the server is imported by the functions that use it."""

from __future__ import annotations

import argparse
import functools
import gc
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from mcpauth.errors import MCPAuthError

Handler = Callable[[argparse.Namespace], int]


class CommandError(MCPAuthError):
    """Bad input to an admin command (a file, stdin); printed as one line, exit status 2."""


def add_database_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--database", metavar="URL", help="database URL (MCPAUTH_DATABASE_URL)")
    parser.add_argument("--config", metavar="FILE", help="TOML settings file (MCPAUTH_CONFIG)")


@contextmanager
def collection_paused() -> Iterator[None]:
    """The cyclic garbage collector paused for the block (and as it was after it): starting
    imports hundreds of modules and builds the server's objects, freeing next to nothing, so
    the collections that growth sets off find no garbage yet cost about a tenth of the CPU
    time of a command's or a server's start."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _collection_paused(handler: Handler) -> Handler:
    """``handler`` run with :func:`collection_paused`: an admin command is all start-up."""

    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        with collection_paused():
            return handler(args)

    return run


@contextmanager
def admin_group(sub: Any, name: str, help: str, handler: Handler) -> Iterator[Any]:
    """``mcpauth NAME ACTION``: the block adds the actions (to the subparsers it is given);
    then each reads the database options and runs ``handler`` (the garbage collector paused:
    :func:`collection_paused`)."""
    handler = _collection_paused(handler)
    group = sub.add_parser(name, help=help)
    actions = group.add_subparsers(dest="action", required=True)
    yield actions
    group.set_defaults(handler=handler)
    for child in actions.choices.values():
        add_database_options(child)
        child.set_defaults(handler=handler)


@contextmanager
def record_group(
    sub: Any,
    name: str,
    help: str,
    handler: Handler,
    *,
    add_help: str,
    noun: str,
    key: str,
    more: Callable[[Any], None] | None = None,
) -> Iterator[argparse.ArgumentParser]:
    """``mcpauth NAME add|list|remove`` over one kind of record (a ``noun``, removed by its
    ``key``): the block adds the ``add`` action's arguments to the parser it is given;
    ``more`` adds the group's other actions (to the subparsers)."""
    with admin_group(sub, name, help, handler) as actions:
        yield actions.add_parser("add", help=add_help)
        actions.add_parser("list", help=f"list {name}")
        actions.add_parser("remove", help=f"remove a {noun}").add_argument(key)
        if more is not None:
            more(actions)


def run_record_action(
    args: argparse.Namespace,
    *,
    add: Callable[[Any], object],
    listing: Callable[[Any], object],
    remove: Callable[[Any], None],
    others: dict[str, Callable[[Any], object]] | None = None,
) -> int:
    """Run a :func:`record_group` action on the admin context: ``add``, ``listing`` and the
    ``others`` (by action name) print what they return as JSON; ``remove`` prints nothing."""
    ctx = open_admin(args)
    if others and args.action in others:
        print_json(others[args.action](ctx))
    elif args.action == "add":
        print_json(add(ctx))
    elif args.action == "list":
        print_json(listing(ctx))
    else:
        remove(ctx)
    return 0


def settings(args: argparse.Namespace, **flags: Any) -> Any:
    """The server's settings: ``flags``, then the environment, then the ``--config`` file."""
    from mcpauth.server.config import load_settings

    flags["database_url"] = args.database
    return load_settings(flags, config_file=args.config)


def open_admin(args: argparse.Namespace) -> Any:
    """The server context an admin command works on (:func:`mcpauth.server.admin.open_context`);
    what it changes is audited as done on the command line."""
    from mcpauth.server.admin import acting_admin, open_context

    acting_admin.set("command line")
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
