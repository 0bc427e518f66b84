"""``mcpauth clients add|list|remove|disable|enable``: clients an operator registers (printed
with their credentials once), and any client disabled or enabled again."""

from __future__ import annotations

import argparse
from typing import Any

from mcpauth.cli._shared import CommandError, record_group, run_record_action

COMMANDS = ("clients",)  # the commands add_parser adds


def add_parser(sub: Any) -> None:
    with record_group(
        sub,
        "clients",
        "manage clients",
        cmd_clients,
        add_help="pre-register a client; prints its credentials once",
        noun="client",
        key="client_id",
        more=_disable_parsers,
    ) as p:
        p.add_argument("--name", required=True)
        p.add_argument("--redirect-uri", action="append", default=[], metavar="U")
        p.add_argument("--grant-type", action="append", default=[], metavar="T")
        p.add_argument("--auth-method", metavar="M")
        jwks = p.add_mutually_exclusive_group()
        jwks.add_argument("--jwks-uri", metavar="U")
        jwks.add_argument("--jwks-file", metavar="F")
        p.add_argument("--scope", action="append", default=[], metavar="S")
        p.add_argument("--first-party", action="store_true", help="skip the consent page")
        p.add_argument(
            "--introspect", action="store_true", help="may call the introspection endpoint"
        )
        p.add_argument(
            "--dpop-bound",
            action="store_true",
            help="its tokens must be DPoP-bound (RFC 9449 §5.2)",
        )
        p.add_argument(
            "--exchange-from",
            action="append",
            default=[],
            metavar="URI",
            help="token exchange: a resource whose tokens it may exchange (usually its own URL)",
        )
        p.add_argument(
            "--exchange-to",
            action="append",
            default=[],
            metavar="URI",
            help="token exchange: a resource it may get tokens for, as its caller",
        )


def _disable_parsers(actions: Any) -> None:
    actions.add_parser(
        "disable", help="refuse a client everywhere (its grants are kept)"
    ).add_argument("client_id")
    actions.add_parser("enable", help="accept a disabled client again").add_argument("client_id")


def cmd_clients(args: argparse.Namespace) -> int:
    from mcpauth.server import admin

    return run_record_action(
        args,
        add=lambda ctx: admin.add_client(
            ctx,
            name=args.name,
            redirect_uris=args.redirect_uri,
            grant_types=args.grant_type,
            auth_method=args.auth_method,
            jwks_uri=args.jwks_uri,
            jwks=_read_jwks(args.jwks_file) if args.jwks_file else None,
            scopes=args.scope,
            first_party=args.first_party,
            introspect=args.introspect,
            dpop_bound=args.dpop_bound,
            exchange_from=args.exchange_from,
            exchange_to=args.exchange_to,
        ),
        listing=admin.list_clients,
        remove=lambda ctx: admin.remove_client(ctx, args.client_id),
        others={
            "disable": lambda ctx: admin.disable_client(ctx, args.client_id, True),
            "enable": lambda ctx: admin.disable_client(ctx, args.client_id, False),
        },
    )


def _read_jwks(path: str) -> Any:
    """The JSON Web Key Set in ``path`` (parsed like every request document).

    Raises:
        CommandError: the file cannot be read or is not a JSON document.
    """
    from mcpauth.server.http_io import loads_strict

    try:
        with open(path, "rb") as handle:
            content = handle.read()
    except OSError as exc:
        raise CommandError(f"cannot read --jwks-file {path!r}: {exc.strerror}") from exc
    try:
        return loads_strict(content)
    except (ValueError, RecursionError) as exc:
        raise CommandError(f"--jwks-file {path!r} is not valid JSON: {exc}") from exc
