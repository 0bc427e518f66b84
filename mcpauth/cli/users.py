"""``mcpauth users add|list|remove|reset-mfa``: the people who sign in with a password."""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from mcpauth.cli._shared import CommandError, record_group, run_record_action

COMMANDS = ("users",)  # the commands add_parser adds


def add_parser(sub: Any) -> None:
    with record_group(
        sub,
        "users",
        "manage users",
        cmd_users,
        add_help="add a user",
        noun="user",
        key="name",
        more=_reset_parser,
    ) as p:
        p.add_argument("name")
        p.add_argument("--password-stdin", action="store_true", help="read the password from stdin")


def _reset_parser(actions: Any) -> None:
    reset = actions.add_parser(
        "reset-mfa",
        help="remove a user's second factors (authenticator app, recovery codes, passkeys)",
    )
    reset.add_argument("name")


def cmd_users(args: argparse.Namespace) -> int:
    from mcpauth.server import admin

    return run_record_action(
        args,
        add=lambda ctx: admin.add_user(ctx, args.name, _read_password(args)),
        listing=admin.list_users,
        remove=lambda ctx: admin.remove_user(ctx, args.name),
        others={"reset-mfa": lambda ctx: admin.reset_mfa(ctx, args.name)},
    )


def _read_password(args: argparse.Namespace) -> str:
    """The new user's password, from stdin (``--password-stdin``) or the terminal.

    Raises:
        CommandError: stdin is not UTF-8 text.
    """
    if args.password_stdin:
        line = sys.stdin.buffer.readline() if hasattr(sys.stdin, "buffer") else None
        try:
            text = line.decode("utf-8") if line is not None else sys.stdin.readline()
        except UnicodeDecodeError as exc:
            raise CommandError("the password on stdin is not valid UTF-8") from exc
        return text.rstrip("\r\n")
    return getpass.getpass(f"Password for {args.name}: ")
