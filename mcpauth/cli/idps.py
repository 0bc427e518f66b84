"""``mcpauth idps list|add|remove``: list the upstream identity providers people sign in with,
and add or remove one in the TOML settings file (:mod:`mcpauth.server.settings_file`).
Importing this module is cheap (the parser only); the handler imports the server lazily."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from mcpauth.cli._shared import CommandError, admin_group, open_admin, print_json, settings

COMMANDS = ("idps",)  # the commands add_parser adds


def add_parser(sub: Any) -> None:
    with admin_group(
        sub,
        "idps",
        "upstream identity providers (configured in settings: [[mcpauth.upstream]])",
        cmd_idps,
    ) as idps:
        p = idps.add_parser("list", help="list the providers people sign in with")
        p.add_argument("--check", action="store_true", help="fetch each one's OpenID configuration")
        p = idps.add_parser("add", help="add a provider to the settings file (--config)")
        p.add_argument("id", help="in the redirect URI: <issuer>/upstream/<id>/callback")
        p.add_argument("--name", required=True, help='the button says "Continue with NAME"')
        p.add_argument("--kind", choices=["oidc", "github", "oauth2"])
        p.add_argument("--issuer", help="the OpenID issuer (github: github.com or a GHES URL)")
        p.add_argument("--client-id", required=True, help="mcpauth's client id at the provider")
        secret = p.add_mutually_exclusive_group()
        secret.add_argument("--client-secret-env", metavar="VAR", help="the secret's variable")
        secret.add_argument("--client-secret-file", metavar="FILE", help="the secret's file")
        for flag, meta, text in (
            ("--scope", "SCOPE", "a scope to ask for (repeat; default by kind)"),
            ("--allowed-email-domain", "DOMAIN", "only verified emails at DOMAIN (repeat)"),
            ("--require-claim", "NAME=VALUE", "an ID token claim holding VALUE (repeat)"),
            ("--claim-map", "CLAIM=PATH", "oauth2: where the user API has CLAIM (repeat)"),
            ("--param", "NAME=VALUE", "an authorization request parameter (repeat)"),
            ("--release-to", "URI", "a resource that may exchange for kept tokens (repeat)"),
        ):
            p.add_argument(flag, action="append", default=[], metavar=meta, help=text)
        for flag in ("--authorization-endpoint", "--token-endpoint", "--userinfo-endpoint"):
            p.add_argument(flag, metavar="URL", help="oauth2: the provider's endpoint")
        p.add_argument("--keep-tokens", action="store_true", help="keep people's provider tokens")
        p.add_argument("--check", action="store_true", help="fetch its OpenID configuration")
        remove = idps.add_parser("remove", help="remove a provider from the settings file")
        remove.add_argument("id")


def cmd_idps(args: argparse.Namespace) -> int:
    from mcpauth.server import admin, settings_file

    if args.action == "list":
        print_json(admin.list_upstream(open_admin(args), check=args.check))
        return 0
    config = args.config or os.environ.get("MCPAUTH_CONFIG")
    if not config:
        raise CommandError("idps add and remove change the settings file: --config FILE")

    def load(candidate: Path) -> Any:
        return settings(argparse.Namespace(**{**vars(args), "config": str(candidate)}))

    if args.action == "remove":
        settings_file.remove_provider(Path(config), args.id, load)
        print(f"removed {args.id} from {config}; restart mcpauth serve to apply", file=sys.stderr)
        return 0
    pairs = {name: _pairs(getattr(args, name), flag) for name, flag in _IDP_PAIRS.items()}
    claims: dict[str, list[str]] = {}
    for name, value in pairs["require_claim"]:  # a name given twice accepts both values
        claims.setdefault(name, []).extend(value.split(","))
    values = {
        "id": args.id, "name": args.name, "kind": args.kind, "issuer": args.issuer,
        "client_id": args.client_id, "client_secret_env": args.client_secret_env,
        "client_secret_file": args.client_secret_file, "scopes": args.scope or None,
        "allowed_email_domains": args.allowed_email_domain or None,
        "required_claims": claims or None, "authorization_endpoint": args.authorization_endpoint,
        "token_endpoint": args.token_endpoint, "userinfo_endpoint": args.userinfo_endpoint,
        "claim_mapping": dict(pairs["claim_map"]) or None,
        "authorization_params": dict(pairs["param"]) or None,
        "keep_tokens": args.keep_tokens or None, "release_to": args.release_to or None,
    }  # fmt: skip
    values = {key: value for key, value in values.items() if value is not None}
    ctx = admin.open_context(settings_file.add_provider(Path(config), values, load))
    try:
        (row,) = [r for r in admin.list_upstream(ctx, check=args.check) if r["id"] == args.id]
    finally:
        ctx.db.dispose()
    print_json(row)
    print(f"added {args.id} to {config}; restart mcpauth serve to apply", file=sys.stderr)
    return 0


_IDP_PAIRS = {"require_claim": "--require-claim", "claim_map": "--claim-map", "param": "--param"}


def _pairs(items: list[str], flag: str) -> list[tuple[str, str]]:
    pairs = [item.partition("=") for item in items]
    bad = [item for item, (name, sep, _) in zip(items, pairs, strict=True) if not (sep and name)]
    if bad:
        raise CommandError(f"{flag} takes NAME=VALUE, got {bad[0]!r}")
    return [(name, value) for name, _, value in pairs]
