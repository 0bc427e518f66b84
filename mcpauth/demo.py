"""``mcpauth demo``: the authorization server and a protected demo MCP server (official MCP
Python SDK) on loopback, seeded with a resource and a demo user, in one process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import sys
from pathlib import Path
from typing import Any

import uvicorn

from mcpauth.server import admin
from mcpauth.server.app import create_app
from mcpauth.server.config import Settings, load_settings

AS_PORT = 9000
MCP_PORT = 8000
DEMO_USER = "demo"
SCOPES = ("mcp:tools=Call the demo tools", "mcp:admin=Use the administrative demo tool")


def demo_mcp_server() -> Any:
    """A small MCP server: one tool reports the caller, one needs the ``mcp:admin`` scope."""
    from mcp.server.auth.middleware.auth_context import get_access_token
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("mcpauth demo")

    @server.tool()
    def whoami() -> str:
        """Who is calling: the token's subject, client and scopes."""
        token = get_access_token()
        if token is None:
            return "anonymous"
        return f"subject={token.subject} client={token.client_id} scopes={' '.join(token.scopes)}"

    @server.tool()
    def add(a: float, b: float) -> float:
        """Add two numbers."""
        return a + b

    @server.tool()
    def echo(text: str) -> str:
        """Echo the text back."""
        return text

    @server.tool()
    def reset_counter() -> str:
        """An administrative action: needs the mcp:admin scope (a step-up demo)."""
        return "counter reset"

    return server


def protected_demo_app(resource: str, issuer: str) -> Any:
    """The demo MCP server behind the middleware: ``mcp:tools`` for everything, ``mcp:admin``
    for ``reset_counter``; tokens from ``issuer`` for ``resource``."""
    from mcpauth.middleware import ProtectedResourceMiddleware

    return ProtectedResourceMiddleware(
        demo_mcp_server().streamable_http_app(),
        resource=resource,
        authorization_servers=[issuer],
        scopes_supported=["mcp:tools"],
        required_scopes="mcp:tools",
        tool_scopes={"reset_counter": "mcp:admin"},
        resource_name="mcpauth demo MCP server",
    )


def _password_file(data_dir: Path) -> Path:
    return data_dir / "demo-password"


def _seed(settings: Settings, data_dir: Path, resource: str) -> str:
    ctx = admin.open_context(settings)
    if not any(r["uri"] == resource for r in admin.list_resources(ctx)):
        admin.add_resource(
            ctx,
            resource,
            name="mcpauth demo MCP server",
            scopes=SCOPES,
            default_scopes=["mcp:tools"],
            is_default=True,
        )
    path = _password_file(data_dir)
    if not any(u["username"] == DEMO_USER for u in admin.list_users(ctx)):
        password = secrets.token_urlsafe(12)
        admin.add_user(ctx, DEMO_USER, password)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(password + "\n")
    ctx.db.dispose()
    return path.read_text().strip() if path.exists() else "(see the user you created)"


def _banner(issuer: str, resource: str, password: str) -> str:
    return f"""
mcpauth demo is running
  authorization server  {issuer}   (account page: {issuer}/account)
  protected MCP server  {resource}
  sign in as            {DEMO_USER} / {password}

Connect a real MCP client:
  Claude Code:      claude mcp add --transport http mcpauth-demo {resource}
                    then /mcp in Claude Code, choose mcpauth-demo, and sign in
  MCP Inspector:    npx @modelcontextprotocol/inspector
                    transport "Streamable HTTP", URL {resource}, then "Open Auth Settings"
  A script:         mcpauth login {resource}  &&  mcpauth token {resource}

The tool reset_counter needs the mcp:admin scope: calling it triggers a step-up.
Press Ctrl-C to stop.
"""


async def _serve_both(as_app: Any, mcp_app: Any, as_port: int, mcp_port: int) -> None:
    servers = [
        uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
        )
        for app, port in ((as_app, as_port), (mcp_app, mcp_port))
    ]
    await asyncio.gather(*(server.serve() for server in servers))


def run_demo(data_dir: str | None = None, as_port: int = AS_PORT, mcp_port: int = MCP_PORT) -> int:
    """Start both servers on 127.0.0.1 until interrupted."""
    folder = Path(data_dir or os.environ.get("MCPAUTH_DEMO_DIR", ".mcpauth-demo")).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    issuer = f"http://127.0.0.1:{as_port}"
    resource = f"http://127.0.0.1:{mcp_port}/mcp"
    settings = load_settings(
        {
            "issuer": issuer,
            "port": as_port,
            "database_url": os.environ.get("MCPAUTH_DATABASE_URL")
            or f"sqlite:///{folder / 'mcpauth.db'}",
        }
    )
    password = _seed(settings, folder, resource)
    mcp_app = protected_demo_app(resource, issuer)
    print(_banner(issuer, resource, password), file=sys.stderr, flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_both(create_app(settings), mcp_app, as_port, mcp_port))
    return 0
