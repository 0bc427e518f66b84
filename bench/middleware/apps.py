"""Servers for the middleware benchmark, each on an inherited listening socket:

    python apps.py as       --fd N --issuer URL --key-file PEM
    python apps.py plain    --fd N --issuer URL --resource URL    (the SDK app, unprotected)
    python apps.py mcpauth  --fd N --issuer URL --resource URL    (ProtectedResourceMiddleware)
    python apps.py mcpauth-body ...                               (the same, with a policy the
                                                                   bench token does not cover)
    python apps.py fastmcp  --fd N --issuer URL --resource URL    (SDK auth + fastmcp JWTVerifier)
    python apps.py plain-frozen ... / mcpauth-frozen ...           (the same with gc.freeze():
                                                                   before serving / gc_freeze=True)

The MCP app is the official SDK's MCPServer streamable HTTP app, stateless with JSON
responses, so that every ``tools/call`` is one self-contained POST.
"""

from __future__ import annotations

import argparse
import gc
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mcpauth import jwt
from mcpauth.middleware import ProtectedResourceMiddleware, ScopePolicy

KID = "bench-key"


def authorization_server(issuer: str, key_file: str) -> Starlette:
    key = jwt.private_key_from_pem(Path(key_file).read_bytes())

    async def metadata(request: Request) -> Response:
        return JSONResponse({"issuer": issuer, "jwks_uri": f"{issuer}/jwks"})

    async def jwks(request: Request) -> Response:
        public = jwt.public_jwk(key.public_key(), kid=KID, alg="ES256")
        return JSONResponse({"keys": [public]}, headers={"Cache-Control": "max-age=3600"})

    routes = [Route("/.well-known/oauth-authorization-server", metadata), Route("/jwks", jwks)]
    return Starlette(routes=routes)


def mcp_server() -> MCPServer:
    server = MCPServer("bench", log_level="WARNING")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    return server


def mcp_app() -> Starlette:
    return mcp_server().streamable_http_app(stateless_http=True, json_response=True)


def with_mcpauth(
    issuer: str, resource: str, tools: dict[str, str] | None = None, *, gc_freeze: bool = False
) -> Any:
    """The middleware with a per-tool policy: by default one the bench token (``mcp:basic``)
    covers; with ``tools`` naming a scope it lacks, every POST has its body read. (A baseline
    checkout from before ``gc_freeze`` runs this too: the keyword only when it is asked for.)"""
    return ProtectedResourceMiddleware(
        mcp_app(),
        resource=resource,
        authorization_servers=[issuer],
        policy=ScopePolicy(required="mcp:basic", tools=tools or {"add": "mcp:basic"}),
        **({"gc_freeze": True} if gc_freeze else {}),
    )


def frozen(app: Any) -> Any:
    """``app`` with the heap built so far frozen (``gc.freeze()``), as ``gc_freeze=True`` does
    at lifespan start-up, but without a wrapper around the unprotected app."""
    gc.collect()
    gc.freeze()
    return app


def with_fastmcp(issuer: str, resource: str) -> Any:
    """The SDK's own resource-server wiring with FastMCP's JWTVerifier as token verifier."""
    from fastmcp.server.auth.providers.jwt import JWTVerifier
    from mcp.server.auth.settings import AuthSettings

    verifier = JWTVerifier(
        jwks_uri=f"{issuer}/jwks", issuer=issuer, audience=resource, algorithm="ES256"
    )
    auth = AuthSettings(
        issuer_url=issuer,
        resource_server_url=resource,
        required_scopes=["mcp:basic"],
        validate_token_resource=False,  # the JWTVerifier checks aud itself
    )
    return mcp_server()._lowlevel_server.streamable_http_app(
        stateless_http=True, json_response=True, auth=auth, token_verifier=verifier
    )


def serve_role(apps: dict[str, Callable[[argparse.Namespace], Any]], argv: list[str]) -> None:
    """Parse ``ROLE --fd N --issuer URL [--resource URL] [--key-file PEM]`` and serve
    ``apps[ROLE](args)`` with uvicorn on the inherited socket ``N``."""
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=sorted(apps))
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--issuer", required=True)
    parser.add_argument("--resource")
    parser.add_argument("--key-file")
    args = parser.parse_args(argv)
    app = apps[args.role](args)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    uvicorn.Server(config).run(sockets=[socket.socket(fileno=args.fd)])


def main(argv: list[str]) -> None:
    serve_role(
        {
            "as": lambda args: authorization_server(args.issuer, args.key_file),
            "plain": lambda args: mcp_app(),
            "mcpauth": lambda args: with_mcpauth(args.issuer, args.resource),
            "mcpauth-body": lambda args: with_mcpauth(
                args.issuer, args.resource, {"add": "mcp:basic", "reset": "mcp:admin"}
            ),
            "fastmcp": lambda args: with_fastmcp(args.issuer, args.resource),
            "plain-frozen": lambda args: frozen(mcp_app()),
            "mcpauth-frozen": lambda args: with_mcpauth(args.issuer, args.resource, gc_freeze=True),
        },
        argv,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
