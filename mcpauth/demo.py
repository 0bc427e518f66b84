"""``mcpauth demo``: the authorization server and a protected demo MCP server (official MCP
Python SDK) on loopback, seeded with a resource and a demo user, in one process.

Both ports are bound before anything else happens (a busy port is a one-line error, exit 1);
the banner, on stderr, comes once both servers accept connections and names the demo's
database in a ready-to-paste admin command."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import secrets
import shlex
import shutil
import socket
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
    from mcpauth.middleware import ProtectedResource, ProtectedResourceMiddleware, ScopePolicy

    return ProtectedResourceMiddleware(
        demo_mcp_server().streamable_http_app(),
        resource=ProtectedResource(
            resource, name="mcpauth demo MCP server", scopes_supported=["mcp:tools"]
        ),
        authorization_servers=[issuer],
        policy=ScopePolicy(required="mcp:tools", tools={"reset_counter": "mcp:admin"}),
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


def admin_command() -> str:
    """How to run ``mcpauth`` from the shell that started the demo: ``mcpauth`` when that name
    finds this very command, else the path it was started by (``.venv/bin/mcpauth`` under
    ``make run``)."""
    started = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if started is None or started.name != "mcpauth" or not started.exists():
        return "mcpauth"
    found = shutil.which("mcpauth")
    if found is not None and os.path.samefile(found, started):
        return "mcpauth"
    return shlex.quote(str(started))


def _database_option(settings: Settings) -> str:
    """The ``--database`` option that names the demo's database; empty when it came from
    ``MCPAUTH_DATABASE_URL`` (the admin commands read that too, and a URL may hold a password)."""
    if os.environ.get("MCPAUTH_DATABASE_URL"):
        return ""
    return f" --database {shlex.quote(settings.database_url)}"


def _banner(issuer: str, resource: str, password: str, command: str, database: str) -> str:
    return f"""
mcpauth demo is running
  authorization server  {issuer}   (account page: {issuer}/account)
  protected MCP server  {resource}
  sign in as            {DEMO_USER} / {password}

Add a user to the demo's database (the admin commands take the same --database):
  {command} users add bob --password-stdin{database}

Connect a real MCP client:
  Claude Code:      claude mcp add --transport http mcpauth-demo {resource}
                    then /mcp in Claude Code, choose mcpauth-demo, and sign in
  MCP Inspector:    npx @modelcontextprotocol/inspector --transport http --server-url {resource}
                    then switch the server on (Connect) and sign in; Tools, whoami, Execute Tool
  stdio-only apps:  npx mcp-remote {resource}
  A script:         {command} login {resource}  &&  {command} token {resource}

The tool reset_counter needs the mcp:admin scope: calling it triggers a step-up.
Press Ctrl-C to stop.
"""


class PortUnavailable(Exception):
    """A port the demo needs cannot be bound; the message is one line for the user."""


def _bind(port: int, role: str, option: str) -> socket.socket:
    """A socket bound to 127.0.0.1:``port`` (listening starts when its server starts).

    Raises:
        PortUnavailable: the port is taken or not allowed.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as exc:
        sock.close()
        reason = "is already in use" if exc.errno == errno.EADDRINUSE else f"failed: {exc.strerror}"
        raise PortUnavailable(
            f"port {port} for the {role} {reason}; stop what is using it or choose another "
            f"port with {option}"
        ) from None
    sock.set_inheritable(False)
    return sock


async def _serve_until_stopped(server: uvicorn.Server, sock: socket.socket) -> None:
    with contextlib.suppress(SystemExit):  # uvicorn exits when an app's startup fails
        await server.serve(sockets=[sock])


async def _serve_both(
    apps: list[tuple[Any, socket.socket]], banner: str, poll: float = 0.02
) -> int:
    """Serve every app on its socket; print ``banner`` once all of them accept connections.

    Returns 1 when one stopped before all had started (its startup failed), else 0.
    """
    servers = [
        uvicorn.Server(
            uvicorn.Config(
                app, log_level="warning", access_log=False, server_header=False, lifespan="on"
            )
        )
        for app, _ in apps
    ]
    tasks = [
        asyncio.create_task(_serve_until_stopped(server, sock))
        for server, (_, sock) in zip(servers, apps, strict=True)
    ]
    while not all(server.started for server in servers):
        if any(task.done() for task in tasks):
            for server in servers:
                server.should_exit = True
            await asyncio.gather(*tasks)
            print("mcpauth demo: a server failed to start (see above)", file=sys.stderr)
            return 1
        await asyncio.sleep(poll)
    print(banner, file=sys.stderr, flush=True)
    await asyncio.gather(*tasks)
    return 0


def run_demo(data_dir: str | None = None, as_port: int = AS_PORT, mcp_port: int = MCP_PORT) -> int:
    """Start both servers on 127.0.0.1 until interrupted.

    Both ports are bound first: a port in use ends the demo with a one-line message and exit
    status 1, before anything is written. The banner follows once both servers accept
    connections."""
    if as_port == mcp_port:
        print(f"mcpauth demo: --auth-port and --mcp-port are both {as_port}", file=sys.stderr)
        return 1
    sockets: list[socket.socket] = []
    try:
        sockets.append(_bind(as_port, "authorization server", "--auth-port"))
        sockets.append(_bind(mcp_port, "demo MCP server", "--mcp-port"))
    except PortUnavailable as exc:
        for sock in sockets:
            sock.close()
        print(f"mcpauth demo: {exc}", file=sys.stderr)
        return 1
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
    banner = _banner(issuer, resource, password, admin_command(), _database_option(settings))
    apps = [(create_app(settings), sockets[0]), (protected_demo_app(resource, issuer), sockets[1])]
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(_serve_both(apps, banner))
    return 0
