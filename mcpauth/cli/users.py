"""``mcpauth users add|list|remove``: the people who sign in with a password."""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from mcpauth.cli._shared import CommandError, admin_actions, open_admin, print_json


def add_parser(sub: Any) -> None:
    group = sub.add_parser("users", help="manage users")
    users = group.add_subparsers(dest="action", required=True)
    p = users.add_parser("add", help="add a user")
    p.add_argument("name")
    p.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    users.add_parser("list", help="list users")
    users.add_parser("remove", help="remove a user").add_argument("name")
    admin_actions(group, users, cmd_users)


def cmd_users(args: argparse.Namespace) -> int:
    from mcpauth.server import admin

    ctx = open_admin(args)
    if args.action == "add":
        print_json(admin.add_user(ctx, args.name, _read_password(args)))
    elif args.action == "list":
        print_json(admin.list_users(ctx))
    else:
        admin.remove_user(ctx, args.name)
    return 0


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
