"""``mcpauth users add|list|remove|reset-mfa|admin|grants|revoke|sessions|sign-out``: the people
who sign in, the administrators among them, and what they have authorized."""

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
        p.add_argument(
            "--admin", action="store_true", help="an administrator (may use the admin console)"
        )


def _reset_parser(actions: Any) -> None:
    reset = actions.add_parser(
        "reset-mfa",
        help="remove a user's second factors (authenticator app, recovery codes, passkeys)",
    )
    reset.add_argument("name")
    admin = actions.add_parser("admin", help="make a user an administrator, or no longer one")
    admin.add_argument("name")
    either = admin.add_mutually_exclusive_group(required=True)
    either.add_argument("--grant", action="store_true", help="may use the admin console")
    either.add_argument("--drop", action="store_true", help="may no longer use it")
    actions.add_parser(
        "disable", help="refuse a user's sign-ins, end her sessions and revoke her grants"
    ).add_argument("name")
    actions.add_parser("enable", help="let a disabled user sign in again").add_argument("name")
    actions.add_parser("grants", help="a user's live grants").add_argument("name")
    revoke = actions.add_parser(
        "revoke", help="revoke a user's grants (her refresh tokens stop working at once)"
    )
    revoke.add_argument("name")
    revoke.add_argument("--client", metavar="CLIENT_ID", help="only this client's grants")
    revoke.add_argument("--grant-id", metavar="ID", help="only this grant")
    actions.add_parser("sessions", help="a user's signed-in browser sessions").add_argument("name")
    actions.add_parser("sign-out", help="end every browser session of a user").add_argument("name")


def cmd_users(args: argparse.Namespace) -> int:
    from mcpauth.server import admin

    return run_record_action(
        args,
        add=lambda ctx: admin.add_user(ctx, args.name, _read_password(args), admin=args.admin),
        listing=admin.list_users,
        remove=lambda ctx: admin.remove_user(ctx, args.name),
        others={
            "reset-mfa": lambda ctx: admin.reset_mfa(ctx, args.name),
            "admin": lambda ctx: admin.set_admin(ctx, args.name, args.grant),
            "disable": lambda ctx: admin.disable_user(ctx, args.name, True),
            "enable": lambda ctx: admin.disable_user(ctx, args.name, False),
            "grants": lambda ctx: admin.user_grants(ctx, args.name),
            "revoke": lambda ctx: {
                "revoked": admin.revoke_grants(
                    ctx, args.name, client_id=args.client, grant_id=args.grant_id
                )
            },
            "sessions": lambda ctx: admin.user_sessions(ctx, args.name),
            "sign-out": lambda ctx: {"ended": admin.end_sessions(ctx, args.name)},
        },
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
