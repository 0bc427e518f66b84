"""``mcpauth serve``: the authorization server under uvicorn."""

from __future__ import annotations

import argparse
import gc
from typing import Any

from mcpauth.cli._shared import add_database_options, collection_paused, settings

COMMANDS = ("serve",)  # the commands add_parser adds


def add_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="run the authorization server")
    add_database_options(p)
    p.add_argument("--issuer", metavar="URL", help="issuer identifier (MCPAUTH_ISSUER)")
    p.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default 9000)")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    p.set_defaults(handler=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    with collection_paused():  # the start; the server itself runs with the collector on
        import uvicorn

        from mcpauth.server.serving import http_protocol

        configured, app = _start(args)
        # What start-up built (the modules, the app, its tables and caches) lives as long as
        # the process: kept out of the collector's full passes, which otherwise scan all of it
        # every few thousand requests and hold every request up meanwhile (tens of ms each)
        gc.freeze()
    uvicorn.run(
        app,
        http=http_protocol(),  # a response's head and body written at once
        host=configured.host,
        port=configured.port,
        access_log=False,
        log_level=configured.log_level,
        proxy_headers=False,
        timeout_graceful_shutdown=10,
        server_header=False,
    )
    return 0


def _start(args: argparse.Namespace) -> tuple[Any, Any]:
    """The settings and the application of ``mcpauth serve``."""
    from mcpauth.server.app import create_app
    from mcpauth.server.operations.logs import configure_logging

    configured = settings(
        args, issuer=args.issuer, host=args.host, port=args.port, log_level=args.log_level
    )
    configure_logging(configured.log_level, configured.log_format)  # before the app's own start
    # the app applies trusted_proxies itself (uvicorn's proxy headers stay off: applied once)
    return configured, create_app(configured)
