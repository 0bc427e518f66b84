"""An authorization server embedded in your own program: `create_app` for the ASGI app, `Admin`
to register the protected MCP server and a machine client from Python, uvicorn to serve it.

    python examples/embedded_auth_server.py --port 9000 --resource http://127.0.0.1:8000/mcp \
        --credentials /tmp/agent.json

writes the machine client's id and secret to --credentials (mode 0600) for
examples/machine_agent.py, then serves until interrupted."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import uvicorn

from mcpauth.server import Admin, ClientInfo, Settings, create_app


def _write(path: Path, client: ClientInfo) -> None:
    """A client's id and secret, readable by the owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"client_id": client["client_id"], "client_secret": client["client_secret"]}, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--resource", default="http://127.0.0.1:8000/mcp")
    parser.add_argument("--credentials", type=Path, required=True)
    parser.add_argument("--data", type=Path, help="directory for the SQLite database")
    parser.add_argument(
        "--gateway",
        help="also register this URL: an MCP server that calls --resource as its caller",
    )
    parser.add_argument("--gateway-credentials", type=Path, help="where to write its client")
    args = parser.parse_args()

    data = args.data or Path(tempfile.mkdtemp(prefix="mcpauth-example-"))
    settings = Settings(
        issuer=f"http://127.0.0.1:{args.port}",
        database_url=f"sqlite:///{data / 'auth.db'}",
        log_level="warning",
    )
    app = create_app(settings)

    admin = Admin.of(app)  # the running app sees every change at once
    if not admin.list_resources():
        admin.add_resource(
            args.resource,
            name="Example MCP server",
            scopes=["notes:read=Read your notes", "notes:write=Change your notes"],
            default_scopes=["notes:read"],
            is_default=True,
        )
    if args.gateway and args.gateway not in {r["uri"] for r in admin.list_resources()}:
        admin.add_resource(args.gateway, scopes=["gateway:use=Use the gateway"])
    agent = admin.add_client(
        name="example agent",
        grant_types=["client_credentials"],
        # with a gateway, the agent reaches the notes only through it
        scopes=["gateway:use"] if args.gateway else ["notes:read"],
    )
    _write(args.credentials, agent)
    if args.gateway and args.gateway_credentials:
        # the gateway server: a resource the agent may call, and a client of its own that may
        # exchange its callers' tokens for tokens for the notes server (RFC 8693)
        gateway = admin.add_client(
            name="example gateway",
            grant_types=["urn:ietf:params:oauth:grant-type:token-exchange"],
            scopes=["notes:read"],
            exchange_from=[args.gateway],
            exchange_to=[args.resource],
        )
        _write(args.gateway_credentials, gateway)

    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
