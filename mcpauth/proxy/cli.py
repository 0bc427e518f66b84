"""The ``mcpauth proxy`` command: argument parsing, app assembly, and serving with uvicorn.

mcpauth proxy --upstream URL --resource URL --authorization-server URL
              [--host H] [--port P] [--scope S]... [--tool-scope TOOL=SCOPE]...
              [--allowed-origin ORIGIN]...
              [--max-sessions N] [--max-sessions-per-subject N] [--session-idle-timeout S]
              [--rate-limit N [--rate-window S]] [--shared-state URL]
              [--policy FILE.cedar] [--user-rate-limit RATE] [--tool-rate-limit TOOL=RATE]...
mcpauth proxy --resource URL --authorization-server URL [...] -- COMMAND [ARG]...
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Sequence

from mcpauth.errors import ConfigurationError
from mcpauth.middleware import (
    CedarPolicy,
    DPoP,
    Limits,
    ProtectedResource,
    ProtectedResourceMiddleware,
    Rate,
    ScopePolicy,
    SharedState,
)
from mcpauth.middleware._asgi import ASGIApp
from mcpauth.middleware.options import DEFAULT_SHARED_STATE_TIMEOUT
from mcpauth.oauth import parse_scope
from mcpauth.proxy.stdio import (
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_SESSIONS,
    DEFAULT_MAX_SESSIONS_PER_SUBJECT,
)
from mcpauth.proxy.upstream import CORSGrant, IdentityHeaders, UpstreamProxy
from mcpauth.uris import URIError, canonical_resource, path_of

__all__ = ["add_proxy_parser", "build_proxy_app", "main", "run_proxy"]

# --shared-state's default: a URL with a password is better kept off the command line
SHARED_STATE_ENV = "MCPAUTH_PROXY_SHARED_STATE"


def _tool_scope(value: str) -> tuple[str, str]:
    tool, sep, scope = value.partition("=")
    if not sep or not tool or not scope.strip():
        raise argparse.ArgumentTypeError(f"expected TOOL=SCOPE, got {value!r}")
    return tool, scope


def _rate(value: str) -> Rate:
    try:
        return Rate.parse(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _tool_rate(value: str) -> tuple[str, Rate]:
    tool, sep, rate = value.rpartition("=")
    if not sep or not tool:
        raise argparse.ArgumentTypeError(f"expected TOOL=RATE (search=10/min), got {value!r}")
    return tool, _rate(rate)


def _positive_int(value: str) -> int:
    number = int(value) if value.isdigit() else 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {value!r}")
    return number


def _positive_seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {value!r}")
    return seconds


def configure_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the proxy's options to ``parser``."""
    parser.add_argument("--upstream", help="URL of the upstream MCP endpoint (HTTP mode)")
    parser.add_argument(
        "--resource", required=True, help="canonical URI of this protected resource"
    )
    parser.add_argument(
        "--authorization-server", action="append", required=True, dest="authorization_servers",
        metavar="URL", help="issuer of accepted tokens (repeatable)",
    )  # fmt: skip
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--fd", type=int, help="serve on this inherited listening socket")
    parser.add_argument(
        "--scope", action="append", default=[], dest="scopes", metavar="S",
        help="scope every request needs (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--tool-scope", action="append", default=[], type=_tool_scope, dest="tool_scopes",
        metavar="TOOL=SCOPE", help="extra scope a tool needs (repeatable)",
    )  # fmt: skip
    parser.add_argument("--resource-name")
    parser.add_argument("--subject-header", default=IdentityHeaders.subject)
    parser.add_argument("--client-header", default=IdentityHeaders.client)
    parser.add_argument("--scopes-header", default=IdentityHeaders.scopes)
    parser.add_argument("--issuer-header", default=IdentityHeaders.issuer)
    parser.add_argument(
        "--allowed-origin", action="append", dest="allowed_origins", metavar="ORIGIN",
        help="browser Origin allowed to call (repeatable; default: any origin)",
    )  # fmt: skip
    parser.add_argument(
        "--max-sessions", type=_positive_int, default=DEFAULT_MAX_SESSIONS, metavar="N",
        help="stdio mode: most child processes at once (default %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--max-sessions-per-subject", type=_positive_int,
        default=DEFAULT_MAX_SESSIONS_PER_SUBJECT, metavar="N",
        help="stdio mode: most open sessions per user (default %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--session-idle-timeout", type=_positive_seconds, default=DEFAULT_IDLE_TIMEOUT,
        metavar="SECONDS",
        help="stdio mode: stop a session's child after this long unused (default %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--filter-tools", action="store_true",
        help="tools/list shows a caller only the tools its token may call (--tool-scope)",
    )  # fmt: skip
    parser.add_argument(
        "--require-dpop", action="store_true",
        help="accept DPoP-bound tokens only (RFC 9449); bound tokens are always accepted",
    )  # fmt: skip
    parser.add_argument(
        "--dpop-nonce-key-env", metavar="NAME",
        help="require DPoP nonces, made with the key in this environment variable "
        "(at least 16 bytes; the same on every replica)",
    )  # fmt: skip
    parser.add_argument(
        "--rate-limit", type=_positive_int, metavar="N",
        help="requests one caller (its token's issuer, subject and client) may make in a "
        "window; one more gets 429 with Retry-After (default: no limit)",
    )  # fmt: skip
    parser.add_argument(
        "--rate-window", type=_positive_seconds, default=60.0, metavar="SECONDS",
        help="the window of --rate-limit, from a caller's first request (default %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--policy", metavar="FILE.cedar",
        help="Cedar policies that decide each tools/call and hide the tools they deny in "
        "tools/list (needs pip install 'mcpauth-kit[policy]')",
    )  # fmt: skip
    parser.add_argument(
        "--groups-claim", default="groups", metavar="CLAIM",
        help="the token claim with the caller's groups, for --policy (default %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--user-rate-limit", type=_rate, metavar="RATE",
        help="tools/call requests one user may make, all tools together: a token bucket such "
        "as 60/min, 10/30s or 600/h:50 (50 at once); one more gets 429 with Retry-After",
    )  # fmt: skip
    parser.add_argument(
        "--tool-rate-limit", action="append", default=[], type=_tool_rate, dest="tool_rates",
        metavar="TOOL=RATE",
        help="calls of one tool by one user (TOOL * for every tool not named), as "
        "--user-rate-limit (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--shared-state", metavar="URL",
        help="redis:// or rediss:// URL of the Redis server replicas share the DPoP proof "
        f"record and rate counts through (default: ${SHARED_STATE_ENV}; unset: each process "
        "keeps its own)",
    )  # fmt: skip
    parser.add_argument(
        "--shared-state-timeout", type=_positive_seconds, default=DEFAULT_SHARED_STATE_TIMEOUT,
        metavar="SECONDS",
        help="the longest a Redis call may take before the request gets 503 "
        "(default %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "stdio_command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARG]...",
        help="run this MCP stdio server instead of proxying --upstream",
    )  # fmt: skip
    return parser


def add_proxy_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Register ``proxy`` on an ``argparse`` sub-parser collection; dispatch to
    :func:`run_proxy` via ``set_defaults(handler=run_proxy)``."""
    parser = subparsers.add_parser(
        "proxy", help="protect an MCP server (HTTP upstream or stdio command) with OAuth"
    )
    configure_parser(parser)
    parser.set_defaults(handler=run_proxy)
    return parser


def build_proxy_app(args: argparse.Namespace) -> ASGIApp:
    """The protected proxy app described by parsed ``args``: the middleware around the stdio
    bridge (a command), or around the HTTP proxy and then in the proxy's :class:`CORSGrant`.

    Raises:
        ValueError: neither or both of ``--upstream`` and a command, a bad resource URI or
            shared state URL, a policy that does not parse (``PolicySyntaxError``: its file,
            line and column).
        OSError: the policy file cannot be read.
        ConfigurationError: a shared state without the ``redis`` package, a policy without
            the ``cedarpy`` package.
    """
    command = list(args.stdio_command or [])
    if command[:1] == ["--"]:
        command = command[1:]
    if bool(args.upstream) == bool(command):
        raise ValueError("give either --upstream URL or -- COMMAND [ARG]...")
    resource = canonical_resource(args.resource)
    inner: ASGIApp
    if args.upstream:
        headers = IdentityHeaders(
            args.subject_header, args.client_header, args.scopes_header, args.issuer_header
        )
        inner = UpstreamProxy(
            args.upstream,
            path=path_of(resource) or "/",
            identity_headers=headers,
            allowed_origins=args.allowed_origins,
        )
    else:
        from mcpauth.proxy.stdio import StdioBridge

        inner = StdioBridge(
            command,
            max_sessions=args.max_sessions,
            max_sessions_per_subject=args.max_sessions_per_subject,
            idle_timeout=args.session_idle_timeout,
        )
    nonce_key = None
    if args.dpop_nonce_key_env:
        value = os.environ.get(args.dpop_nonce_key_env, "")
        if len(value.encode()) < 16:
            raise ValueError(f"{args.dpop_nonce_key_env} must hold a key of 16 bytes or more")
        nonce_key = value.encode()
    shared_url = args.shared_state or os.environ.get(SHARED_STATE_ENV) or None
    shared = None
    if shared_url is not None:
        shared = SharedState(shared_url, timeout=args.shared_state_timeout)
    policy = None
    if args.policy:
        policy = CedarPolicy.from_file(args.policy, groups_claim=args.groups_claim)
    tool_scopes: dict[str, list[str]] = {}
    for tool, scope in args.tool_scopes:
        tool_scopes.setdefault(tool, []).extend(parse_scope(scope))
    middleware = ProtectedResourceMiddleware(
        inner,
        resource=ProtectedResource(
            resource, name=args.resource_name, scopes_supported=sorted(set(args.scopes)) or None
        ),
        authorization_servers=args.authorization_servers,
        policy=ScopePolicy(required=args.scopes, tools=tool_scopes or None),
        allowed_origins=args.allowed_origins,
        dpop=DPoP(required=args.require_dpop, nonce_key=nonce_key),
        limits=Limits(
            rate_limit=args.rate_limit,
            rate_window=args.rate_window,
            user_rate=args.user_rate_limit,
            tool_rates=dict(args.tool_rates) or None,
        ),
        filter_tools=args.filter_tools,
        shared_state=shared,
        tool_policy=policy,
    )
    # the middleware's own refusals get the proxy's CORS grant, as the upstream's answers do
    return CORSGrant(middleware, inner) if isinstance(inner, UpstreamProxy) else middleware


def run_proxy(args: argparse.Namespace) -> int:
    """Serve the proxy until interrupted; returns the exit status."""
    import uvicorn

    try:
        app = build_proxy_app(args)
    except (ValueError, URIError, ConfigurationError, OSError) as exc:
        print(f"mcpauth proxy: {exc}", file=sys.stderr)
        return 2
    config = uvicorn.Config(app, host=args.host, port=args.port, lifespan="on", log_level="info")
    server = uvicorn.Server(config)
    sockets = [socket.socket(fileno=args.fd)] if args.fd is not None else None
    server.run(sockets=sockets)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mcpauth.proxy.cli``: the proxy without the ``mcpauth`` CLI."""
    parser = configure_parser(argparse.ArgumentParser(prog="mcpauth proxy"))
    return run_proxy(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
