"""``mcpauth demo``: an authorization server and a protected demo MCP server on loopback."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mcpauth.cli._shared import collection_paused

COMMANDS = ("demo",)  # the commands add_parser adds


def add_parser(sub: Any) -> None:
    demo = sub.add_parser("demo", help="auth server + protected demo MCP server on loopback")
    demo.add_argument("--data-dir", help="where the demo keeps its database (.mcpauth-demo)")
    demo.add_argument(
        "--auth-port", type=_port, default=9000, help="authorization server port (9000)"
    )
    demo.add_argument("--mcp-port", type=_port, default=8000, help="demo MCP server port (8000)")
    demo.set_defaults(handler=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    with collection_paused():  # the imports; the servers run with the collector on
        try:
            import mcp.server.mcpserver  # noqa: F401
            import starlette  # noqa: F401
            import uvicorn  # noqa: F401
        except ImportError as exc:
            missing = (exc.name or "").partition(".")[0] or "more packages"
            hint = "pip install 'mcpauth-kit[demo]'"
            print(f"mcpauth demo: needs {missing}: {hint}", file=sys.stderr)
            return 2
        from mcpauth.demo import run_demo

    return run_demo(args.data_dir, args.auth_port, args.mcp_port)


def _port(value: str) -> int:
    """A TCP port number, 1 to 65535 (argparse ``type``)."""
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {value!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number (1-65535): {port}")
    return port
