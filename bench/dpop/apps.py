"""Servers for the DPoP benchmark, each on an inherited listening socket, around one trivial
ASGI app (it reads the request and answers a fixed JSON-RPC result), so that what is measured
is the protection, not an MCP server:

    python apps.py as       --fd N --issuer URL --key-file PEM
    python apps.py bare     --fd N --issuer URL --resource URL   (the app, unprotected)
    python apps.py mcpauth  --fd N --issuer URL --resource URL   (ProtectedResourceMiddleware:
                                                                  Bearer and DPoP tokens)
    python apps.py sdk      --fd N --issuer URL --resource URL   (the MCP SDK's own bearer auth)

The SDK ships no JWT verifier: its row verifies with mcpauth's JWTVerifier through ``ForSDK``,
as an SDK server using mcpauth's verifier would; the SDK's backend calls it on every request.
"""

from __future__ import annotations

import argparse
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.routing import Route

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for bench/
from bench.middleware.apps import authorization_server
from mcpauth.middleware import ForSDK, JWTVerifier, ProtectedResourceMiddleware, metadata_url

ANSWER = b'{"jsonrpc":"2.0","id":1,"result":{}}'


async def trivial(scope: Any, receive: Any, send: Any) -> None:
    """Read the whole request, answer a fixed JSON-RPC result."""
    if scope["type"] == "lifespan":
        while True:
            if (await receive())["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(ANSWER))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": ANSWER})


def with_mcpauth(issuer: str, resource: str) -> Any:
    return ProtectedResourceMiddleware(
        trivial, resource=resource, authorization_servers=[issuer], required_scopes="mcp:basic"
    )


def with_sdk(issuer: str, resource: str) -> Any:
    verifier = ForSDK(JWTVerifier(issuer, resource))
    backend = BearerAuthBackend(verifier, resource_server_url=AnyHttpUrl(resource))
    protected = RequireAuthMiddleware(trivial, ["mcp:basic"], AnyHttpUrl(metadata_url(resource)))
    return Starlette(
        routes=[Route("/mcp", protected, methods=["POST"])],
        middleware=[
            Middleware(AuthenticationMiddleware, backend=backend),
            Middleware(AuthContextMiddleware),
        ],
    )


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["as", "bare", "mcpauth", "sdk"])
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--issuer", required=True)
    parser.add_argument("--resource")
    parser.add_argument("--key-file")
    args = parser.parse_args(argv)
    apps: dict[str, Callable[[], Any]] = {
        "as": lambda: authorization_server(args.issuer, args.key_file),
        "bare": lambda: trivial,
        "mcpauth": lambda: with_mcpauth(args.issuer, args.resource),
        "sdk": lambda: with_sdk(args.issuer, args.resource),
    }
    app = apps[args.role]()
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    uvicorn.Server(config).run(sockets=[socket.socket(fileno=args.fd)])


if __name__ == "__main__":
    main(sys.argv[1:])
