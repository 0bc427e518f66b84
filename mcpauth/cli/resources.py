"""``mcpauth resources add|list|remove|edit``: the protected MCP servers tokens are issued
for."""

from __future__ import annotations

import argparse
from typing import Any

from mcpauth.cli._shared import record_group, run_record_action

COMMANDS = ("resources",)  # the commands add_parser adds
# tokens.issuance.PERSON_CLAIMS, which building the parser must not import (the server); a test
# keeps the two equal
CLAIMS = ("email", "email_verified", "name", "groups")


def add_parser(sub: Any) -> None:
    with record_group(
        sub,
        "resources",
        "manage protected resources",
        cmd_resources,
        add_help="register a resource (an MCP server URL)",
        noun="resource",
        key="uri",
        more=_edit_parser,
    ) as p:
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
            choices=CLAIMS,
            help="a claim about the person its access tokens carry (repeatable; none by default)",
        )
        p.add_argument("--require-mfa", action="store_true", help=_REQUIRE_MFA)


_REQUIRE_MFA = "people sign in with a second factor (passkey or app code) before authorizing it"


def _edit_parser(actions: Any) -> None:
    edit = actions.add_parser("edit", help="change a resource")
    edit.add_argument("uri")
    edit.add_argument(
        "--require-mfa", action=argparse.BooleanOptionalAction, default=None, help=_REQUIRE_MFA
    )
    edit.add_argument(
        "--scope",
        action="append",
        default=None,
        metavar="S[=DESCRIPTION]",
        help="its scopes, replacing them all (repeatable)",
    )


def cmd_resources(args: argparse.Namespace) -> int:
    from mcpauth.server import admin

    return run_record_action(
        args,
        add=lambda ctx: admin.add_resource(
            ctx,
            args.uri,
            name=args.name or "",
            scopes=args.scope,
            default_scopes=args.default_scope,
            is_default=args.default,
            dpop_required=args.dpop_required,
            token_claims=args.claim,
            require_mfa=args.require_mfa,
        ),
        listing=admin.list_resources,
        remove=lambda ctx: admin.remove_resource(ctx, args.uri),
        others={
            "edit": lambda ctx: admin.edit_resource(
                ctx, args.uri, require_mfa=args.require_mfa, scopes=args.scope
            )
        },
    )
