"""``mcpauth keys list|rotate``: the server's signing keys."""

from __future__ import annotations

import argparse
from typing import Any

from mcpauth.cli._shared import admin_group, open_admin, print_json

COMMANDS = ("keys",)  # the commands add_parser adds


def add_parser(sub: Any) -> None:
    with admin_group(sub, "keys", "signing keys", cmd_keys) as keys:
        keys.add_parser("list", help="list signing keys")
        keys.add_parser("rotate", help="publish a new signing key")


def cmd_keys(args: argparse.Namespace) -> int:
    from mcpauth.server import admin

    ctx = open_admin(args)
    print_json(admin.rotate_keys(ctx) if args.action == "rotate" else admin.list_keys(ctx))
    return 0
