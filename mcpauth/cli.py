"""The ``mcpauth`` command. Each subcommand imports its part lazily, so a machine with only
the client or middleware extra installed can run its own commands."""

from __future__ import annotations

import argparse
import getpass
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from mcpauth.errors import MCPAuthError
from mcpauth.idps_cli import add_idps_parser, cmd_idps

Handler = Callable[[argparse.Namespace], int]


class CommandError(MCPAuthError):
    """Bad input to an admin command (a file, stdin); printed as one line, exit status 2."""


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--database", metavar="URL", help="database URL (MCPAUTH_DATABASE_URL)")
    parser.add_argument("--config", metavar="FILE", help="TOML settings file (MCPAUTH_CONFIG)")


def _settings(args: argparse.Namespace, **flags: Any) -> Any:
    from mcpauth.server.config import load_settings

    flags["database_url"] = args.database
    return load_settings(flags, config_file=args.config)


def _admin(args: argparse.Namespace) -> Any:
    from mcpauth.server.admin import open_context

    return open_context(_settings(args))


def _print(data: object) -> None:
    from mcpauth.server.admin import dump

    print(dump(data))


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from mcpauth.server.app import create_app
    from mcpauth.server.operations.logs import configure_logging

    settings = _settings(
        args, issuer=args.issuer, host=args.host, port=args.port, log_level=args.log_level
    )
    configure_logging(settings.log_level, settings.log_format)  # before the app's own start
    # the app applies trusted_proxies itself (uvicorn's proxy headers stay off: applied once)
    app = create_app(settings)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        access_log=False,
        log_level=settings.log_level,
        proxy_headers=False,
        timeout_graceful_shutdown=10,
        server_header=False,
    )
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


def cmd_users(args: argparse.Namespace) -> int:
    from mcpauth.server import admin

    ctx = _admin(args)
    if args.action == "add":
        _print(admin.add_user(ctx, args.name, _read_password(args)))
    elif args.action == "list":
        _print(admin.list_users(ctx))
    else:
        admin.remove_user(ctx, args.name)
    return 0


def cmd_resources(args: argparse.Namespace) -> int:
    from mcpauth.server import admin

    ctx = _admin(args)
    if args.action == "add":
        _print(
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
        _print(admin.list_resources(ctx))
    else:
        admin.remove_resource(ctx, args.uri)
    return 0


def cmd_clients(args: argparse.Namespace) -> int:
    from mcpauth.server import admin

    ctx = _admin(args)
    if args.action == "add":
        jwks = _read_jwks(args.jwks_file) if args.jwks_file else None
        _print(
            admin.add_client(
                ctx,
                name=args.name,
                redirect_uris=args.redirect_uri,
                grant_types=args.grant_type,
                auth_method=args.auth_method,
                jwks_uri=args.jwks_uri,
                jwks=jwks,
                scopes=args.scope,
                first_party=args.first_party,
                introspect=args.introspect,
                dpop_bound=args.dpop_bound,
                exchange_from=args.exchange_from,
                exchange_to=args.exchange_to,
            )
        )
    elif args.action == "list":
        _print(admin.list_clients(ctx))
    else:
        admin.remove_client(ctx, args.client_id)
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    from mcpauth.server import admin

    ctx = _admin(args)
    _print(admin.rotate_keys(ctx) if args.action == "rotate" else admin.list_keys(ctx))
    return 0


def cmd_db(args: argparse.Namespace) -> int:
    from mcpauth.server.storage import migrate
    from mcpauth.server.storage.database import make_engine

    if args.action == "prune":
        from mcpauth.server.storage.prune import prune, table_rows

        ctx = _admin(args)
        started = time.monotonic()
        counts = prune(ctx.db, ctx.settings, ctx.now())
        seconds = round(time.monotonic() - started, 3)
        rows = table_rows(ctx.db)
        ctx.db.dispose()
        _print({"pruned": counts, "skipped": counts is None, "seconds": seconds, "rows": rows})
        return 0
    engine = make_engine(_settings(args).database_url)
    migrate.upgrade(engine)
    print(f"database at revision {migrate.current_revision(engine)}", file=sys.stderr)
    engine.dispose()
    return 0


def _add_serve(sub: Any) -> None:
    p = sub.add_parser("serve", help="run the authorization server")
    _common(p)
    p.add_argument("--issuer", metavar="URL", help="issuer identifier (MCPAUTH_ISSUER)")
    p.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default 9000)")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    p.set_defaults(handler=cmd_serve)


def _add_admin(sub: Any) -> None:
    users = sub.add_parser("users", help="manage users").add_subparsers(
        dest="action", required=True
    )
    p = users.add_parser("add", help="add a user")
    p.add_argument("name")
    p.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    users.add_parser("list", help="list users")
    users.add_parser("remove", help="remove a user").add_argument("name")

    resources = sub.add_parser("resources", help="manage protected resources").add_subparsers(
        dest="action", required=True
    )
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

    clients = sub.add_parser("clients", help="manage clients").add_subparsers(
        dest="action", required=True
    )
    p = clients.add_parser("add", help="pre-register a client; prints its credentials once")
    p.add_argument("--name", required=True)
    p.add_argument("--redirect-uri", action="append", default=[], metavar="U")
    p.add_argument("--grant-type", action="append", default=[], metavar="T")
    p.add_argument("--auth-method", metavar="M")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--jwks-uri", metavar="U")
    group.add_argument("--jwks-file", metavar="F")
    p.add_argument("--scope", action="append", default=[], metavar="S")
    p.add_argument("--first-party", action="store_true", help="skip the consent page")
    p.add_argument("--introspect", action="store_true", help="may call the introspection endpoint")
    p.add_argument(
        "--dpop-bound", action="store_true", help="its tokens must be DPoP-bound (RFC 9449 §5.2)"
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
    clients.add_parser("list", help="list clients")
    clients.add_parser("remove", help="remove a client").add_argument("client_id")

    add_idps_parser(sub)

    keys = sub.add_parser("keys", help="signing keys").add_subparsers(dest="action", required=True)
    keys.add_parser("list", help="list signing keys")
    keys.add_parser("rotate", help="publish a new signing key")

    db = sub.add_parser("db", help="database schema").add_subparsers(dest="action", required=True)
    db.add_parser("upgrade", help="apply migrations")
    db.add_parser("prune", help="delete expired state now (serve also does it periodically)")

    for name, handler in (
        ("users", cmd_users),
        ("resources", cmd_resources),
        ("clients", cmd_clients),
        ("idps", cmd_idps),
        ("keys", cmd_keys),
        ("db", cmd_db),
    ):
        parser = sub.choices[name]
        parser.set_defaults(handler=handler)
        for child in parser._subparsers._group_actions[0].choices.values():
            _common(child)
            child.set_defaults(handler=handler)


def _port(value: str) -> int:
    """A TCP port number, 1 to 65535 (argparse ``type``)."""
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {value!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number (1-65535): {port}")
    return port


def cmd_demo(args: argparse.Namespace) -> int:
    try:
        import mcp.server.mcpserver  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        missing = (exc.name or "").partition(".")[0] or "more packages"
        print(f"mcpauth demo: needs {missing}: pip install 'mcpauth-kit[demo]'", file=sys.stderr)
        return 2
    from mcpauth.demo import run_demo

    return run_demo(args.data_dir, args.auth_port, args.mcp_port)


def _missing_extra(sub: Any, commands: Sequence[str], extra: str, error: ImportError) -> None:
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


def _add_optional_parts(sub: Any) -> None:
    """``proxy`` needs the middleware extra, ``login|token|logout`` the client extra; without
    them the commands answer with what to install."""
    try:
        from mcpauth.proxy.cli import add_proxy_parser
    except ImportError as exc:
        _missing_extra(sub, ["proxy"], "middleware", exc)
    else:
        add_proxy_parser(sub)
    try:
        from mcpauth.client.cli import add_client_parsers
    except ImportError as exc:
        _missing_extra(sub, ["login", "token", "logout"], "client", exc)
    else:
        add_client_parsers(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mcpauth", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_serve(sub)
    _add_admin(sub)
    _add_optional_parts(sub)
    demo = sub.add_parser("demo", help="auth server + protected demo MCP server on loopback")
    demo.add_argument("--data-dir", help="where the demo keeps its database (.mcpauth-demo)")
    demo.add_argument(
        "--auth-port", type=_port, default=9000, help="authorization server port (9000)"
    )
    demo.add_argument("--mcp-port", type=_port, default=8000, help="demo MCP server port (8000)")
    demo.set_defaults(handler=cmd_demo)
    return parser


def _database_problem(exc: Exception) -> str | None:
    """One line for a database that cannot be used (a bad URL, a server that does not answer),
    or ``None`` for any other error. The URL itself is not repeated: it may hold a password."""
    errors = sys.modules.get("sqlalchemy.exc")
    if errors is None or not isinstance(exc, errors.SQLAlchemyError):
        return None
    if isinstance(exc, errors.ArgumentError | errors.NoSuchModuleError):
        return (
            "not a database URL mcpauth can use (sqlite:///PATH or "
            f"postgresql://USER:PASSWORD@HOST/DB): {exc}"
        )
    detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return f"cannot use the database: {detail[0] if detail else type(exc).__name__}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except MCPAuthError as exc:
        print(f"mcpauth: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except OSError as exc:  # a file or directory the command needs
        where = f": {exc.filename}" if exc.filename else ""
        print(f"mcpauth: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2
    except Exception as exc:
        problem = _database_problem(exc)
        if problem is None:
            raise
        print(f"mcpauth: {problem}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
