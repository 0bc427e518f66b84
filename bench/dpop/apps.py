"""Servers for the DPoP benchmark, each on an inherited listening socket, around one trivial
ASGI app (it reads the request and answers a fixed JSON-RPC result), so that what is measured
is the protection, not an MCP server:

    python apps.py as       --fd N --issuer URL --key-file PEM
    python apps.py bare     --fd N --issuer URL --resource URL   (the app, unprotected)
    python apps.py mcpauth  --fd N --issuer URL --resource URL   (ProtectedResourceMiddleware:
                                                                  Bearer and DPoP tokens)
    python apps.py sdk      --fd N --issuer URL --resource URL   (the MCP SDK's own bearer auth)
    python apps.py mcpauth-verify ...   (the mcpauth one behind one bare ES256 verification per
                                         request: what a proof check cannot go below)
    python apps.py tools-verify ...     (the same around bench/middleware/apps.py's SDK app)

The SDK ships no JWT verifier: its row verifies with mcpauth's JWTVerifier through ``ForSDK``,
as an SDK server using mcpauth's verifier would; the SDK's backend calls it on every request.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.routing import Route

# the repository root, for bench/, after PYTHONPATH: run.py puts the checkout whose mcpauth is
# measured (this one, or a baseline) there
sys.path.append(str(Path(__file__).resolve().parents[2]))
from bench.middleware import apps as sdk_apps
from bench.middleware.apps import authorization_server, serve_role
from mcpauth.middleware import (
    ForSDK,
    JWTVerifier,
    ProtectedResourceMiddleware,
    ScopePolicy,
    metadata_url,
)

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
        trivial,
        resource=resource,
        authorization_servers=[issuer],
        policy=ScopePolicy(required="mcp:basic"),
    )


def verifying(app: Any) -> Any:
    """``app`` behind one ES256 verification per HTTP request, of a signature made at start-up
    over as many bytes as a proof's signing input: the cost of the signature alone, in the
    server, with the caches as the rest of the request leaves them."""
    key = ec.generate_private_key(ec.SECP256R1())
    message = b"." * 430
    signature = key.sign(message, ec.ECDSA(hashes.SHA256()))
    public = key.public_key()

    async def verified(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            public.verify(signature, message, ec.ECDSA(hashes.SHA256()))
        await app(scope, receive, send)

    return verified


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
    serve_role(
        {
            "as": lambda args: authorization_server(args.issuer, args.key_file),
            "bare": lambda args: trivial,
            "mcpauth": lambda args: with_mcpauth(args.issuer, args.resource),
            "sdk": lambda args: with_sdk(args.issuer, args.resource),
            "mcpauth-verify": lambda args: verifying(with_mcpauth(args.issuer, args.resource)),
            "tools-verify": lambda args: verifying(
                sdk_apps.with_mcpauth(args.issuer, args.resource)
            ),
        },
        argv,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
