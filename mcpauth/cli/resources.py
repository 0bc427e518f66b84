"""``mcpauth resources add|list|remove``: the protected MCP servers tokens are issued for."""

from __future__ import annotations

import argparse
from typing import Any

from mcpauth.cli._shared import admin_actions, open_admin, print_json


def add_parser(sub: Any) -> None:
    group = sub.add_parser("resources", help="manage protected resources")
    resources = group.add_subparsers(dest="action", required=True)
    p = resources.add_parser("add", help="register a resource (an MCP server URL)")
    p.add_argument("uri")
    p.add_argument("--name")
    p.add_argument("--scope", action="append", default=[], metavar="S[=DESCRIPTION]")
    p.add_argument("--default-scope", action="append", default=[], metavar="S")
    p.add_argument("--default", action="store_true", help="used when a client omits `resource`")
    p.add_argument(
        "--dpop-required", action="store_true", help="issue only DPoP-bound tokens for it"
    )
    p.add_argument(
        "--claim",
        action="append",
        default=[],
        choices=("email", "email_verified", "name", "groups"),
        help="a claim about the person its access tokens carry (repeatable; none by default)",
    )
    resources.add_parser("list", help="list resources")
    resources.add_parser("remove", help="remove a resource").add_argument("uri")
    admin_actions(group, resources, cmd_resources)


def cmd_resources(args: argparse.Namespace) -> int:
    from mcpauth.server import admin

    ctx = open_admin(args)
    if args.action == "add":
        print_json(
            admin.add_resource(
                ctx,
                args.uri,
                name=args.name or "",
                scopes=args.scope,
                default_scopes=args.default_scope,
                is_default=args.default,
                dpop_required=args.dpop_required,
                token_claims=args.claim,
            )
        )
    elif args.action == "list":
        print_json(admin.list_resources(ctx))
    else:
        admin.remove_resource(ctx, args.uri)
    return 0
