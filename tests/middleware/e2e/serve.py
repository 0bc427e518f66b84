"""Processes for the end-to-end tests, each served by uvicorn on an inherited socket:

python serve.py as   --fd N --issuer URL --key-file PEM
python serve.py mcp  --fd N --issuer URL --resource URL [--unprotected]
python serve.py mcp-stdio                      (an MCP server on stdin/stdout)
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver import Context, MCPServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mcpauth import jwt
from mcpauth.middleware import ProtectedResourceMiddleware, ScopePolicy, current_token

KID = "e2e-key"


def authorization_server(issuer: str, key_file: str) -> Starlette:
    key = jwt.private_key_from_pem(Path(key_file).read_bytes())

    async def metadata(request: Request) -> Response:
        return JSONResponse({"issuer": issuer, "jwks_uri": f"{issuer}/jwks"})

    async def jwks(request: Request) -> Response:
        public = jwt.public_jwk(key.public_key(), kid=KID, alg="ES256")
        return JSONResponse({"keys": [public]}, headers={"Cache-Control": "max-age=300"})

    return Starlette(
        routes=[
            Route("/.well-known/oauth-authorization-server", metadata),
            Route("/jwks", jwks),
        ]
    )


def mcp_server(name: str = "e2e") -> MCPServer:
    server = MCPServer(name)

    @server.tool()
    def whoami() -> str:
        """The subject of the caller's token, as the SDK reports it."""
        token = get_access_token()
        ours = current_token()
        if token is None or ours is None:
            return "anonymous"
        return f"{token.subject}|{token.client_id}|{' '.join(token.scopes)}|{ours.subject}"

    @server.tool()
    def delete_file(path: str) -> str:
        """Needs files:write."""
        return f"deleted {path}"

    @server.tool()
    async def count(n: int, ctx: Context) -> str:
        """Streams progress notifications over SSE."""
        for i in range(n):
            await ctx.report_progress(i + 1, n)
            await ctx.info(f"tick {i + 1}")
        return f"counted {n}"

    @server.tool()
    def identity(ctx: Context) -> str:
        """What reached this server: X-MCPAuth headers (and any Authorization or DPoP header,
        which must not arrive) over HTTP, MCPAUTH_* env over stdio."""
        headers = {k.lower(): v for k, v in (ctx.headers or {}).items()}
        if headers:
            names = (
                "x-mcpauth-subject", "x-mcpauth-client", "x-mcpauth-scopes", "authorization", "dpop"
            )  # fmt: skip
            return "|".join(headers.get(name, "-") for name in names)
        names = ("MCPAUTH_SUBJECT", "MCPAUTH_CLIENT", "MCPAUTH_SCOPES")
        return "|".join(os.environ.get(name, "-") for name in names)

    @server.tool()
    def trace_context(ctx: Context) -> str:
        """The W3C traceparent that reached this server ("-" when none did)."""
        headers = {k.lower(): v for k, v in (ctx.headers or {}).items()}
        return headers.get("traceparent", "-")

    return server


def protected_app(issuer: str, resource: str, *, unprotected: bool = False) -> Any:
    # The SDK's own auth stays off (no auth=, no token_verifier=): the middleware does it.
    app = mcp_server().streamable_http_app()
    if unprotected:
        return app
    return ProtectedResourceMiddleware(
        app,
        resource=resource,
        authorization_servers=[issuer],
        policy=ScopePolicy(
            required="mcp:basic",
            tools={"delete_file": "files:write"},
            implies={"files:admin": "files:write"},
        ),
    )


def serve(app: Any, fd: int) -> None:
    sock = socket.socket(fileno=fd)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["as", "mcp", "mcp-stdio"])
    parser.add_argument("--fd", type=int)
    parser.add_argument("--issuer")
    parser.add_argument("--resource")
    parser.add_argument("--key-file")
    parser.add_argument("--unprotected", action="store_true")
    args = parser.parse_args(argv)
    if args.role == "as":
        serve(authorization_server(args.issuer, args.key_file), args.fd)
    elif args.role == "mcp":
        serve(protected_app(args.issuer, args.resource, unprotected=args.unprotected), args.fd)
    else:
        anyio.run(mcp_server("stdio-e2e").run_stdio_async)


if __name__ == "__main__":
    main(sys.argv[1:])
